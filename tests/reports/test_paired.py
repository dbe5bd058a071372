"""The paired analysis (daca_jax.reports.paired) against hand-computed cases, its invariances and its errors."""
import itertools
import math

import numpy as np
import pytest

from daca_jax.reports import paired


def _arm(rows):
  """{seed: {key: value}} from a list of per-seed rows (seeds 0.., keys e0..)."""
  return {s: {f"e{i}": v for i, v in enumerate(row)} for s, row in enumerate(rows)}


def test_the_crossed_bootstrap_draws_the_enumerated_distribution():
  # D = [[2, 0], [0, 0]]: a replicate's mean is 2·a·b with a (b) the share of draws that picked seed 0
  # (example 0), each 0, 1/2, 1 with probability 1/4, 1/2, 1/4. Enumerating the 4 x 4 equally likely
  # draws: P(0) = 7/16, P(0.5) = 4/16, P(1) = 4/16, P(2) = 1/16.
  diff = np.array([[2.0, 0.0], [0.0, 0.0]])
  exact = {}
  for seeds in itertools.product(range(2), repeat=2):
    for examples in itertools.product(range(2), repeat=2):
      m = diff[np.ix_(seeds, examples)].mean()
      exact[m] = exact.get(m, 0) + 1 / 16
  assert exact == {0.0: 7 / 16, 0.5: 4 / 16, 1.0: 4 / 16, 2.0: 1 / 16}
  draws = paired.bootstrap_means(diff, num_resamples=20_000, seed=3)
  for value, p in exact.items():
    freq = np.mean(np.isclose(draws, value))
    assert abs(freq - p) < 4 * math.sqrt(p * (1 - p) / len(draws)), (value, freq, p)
  # Its 2.5% quantile is 0 (P(0) = 7/16) and its 97.5% quantile 2 (P(<= 1) = 15/16 < 0.975).
  iv = paired.paired_bootstrap(_arm([[2, 0], [0, 0]]), _arm([[0, 0], [0, 0]]))
  assert (iv.mean, iv.low, iv.high, iv.num_seeds, iv.num_examples) == (0.5, 0.0, 2.0, 2, 2)
  assert not iv.separates


def test_examples_are_drawn_once_per_replicate_for_every_warm_start():
  # Every warm start has the same differences: a crossed draw keeps the rows equal, so a replicate's
  # mean is the mean of one example draw (values 0, 1/2, 1 only); nested draws would give 1/4, 3/4 too.
  draws = paired.bootstrap_means(np.array([[1.0, 0.0], [1.0, 0.0]]), num_resamples=2_000)
  assert set(np.round(draws, 6)) == {0.0, 0.5, 1.0}


def test_seed_t_interval_by_hand():
  # Per-seed mean differences 1, 2, 3: mean 2, SD 1, t(0.975, 2 df) = 4.303 -> half-width 4.303 / sqrt(3).
  arm = _arm([[1, 1], [3, 1], [3, 3]])
  ref = _arm([[0, 0], [0, 0], [0, 0]])
  iv = paired.seed_t_interval(arm, ref)
  assert iv.mean == pytest.approx(2.0)
  assert (iv.low, iv.high) == pytest.approx((2 - 4.303 / math.sqrt(3), 2 + 4.303 / math.sqrt(3)))
  assert iv.method == "seed_t" and not iv.separates
  assert math.isnan(paired.seed_t_interval(_arm([[1, 0]]), _arm([[0, 0]])).low)


def test_swapping_arms_negates_and_identical_arms_give_zero_width():
  rng = np.random.default_rng(0)
  a = _arm(rng.integers(0, 2, (4, 30)).tolist())
  b = _arm(rng.integers(0, 2, (4, 30)).tolist())
  ab, ba = paired.paired_bootstrap(a, b), paired.paired_bootstrap(b, a)
  assert ab.mean == pytest.approx(-ba.mean)
  assert (ab.low, ab.high) == pytest.approx((-ba.high, -ba.low))
  assert ab.low < ab.mean < ab.high
  same = paired.paired_bootstrap(a, a)
  assert (same.mean, same.low, same.high) == (0.0, 0.0, 0.0)
  t = paired.seed_t_interval(a, a)
  assert (t.low, t.high) == (0.0, 0.0)


def test_the_bootstrap_is_reproducible_and_separates_a_clear_effect():
  rng = np.random.default_rng(1)
  ref = rng.integers(0, 2, (5, 200))
  arm = np.maximum(ref, rng.random((5, 200)) < 0.3)  # the arm solves everything the reference does, and more
  a, r = _arm(arm.tolist()), _arm(ref.tolist())
  iv = paired.paired_bootstrap(a, r)
  assert iv == paired.paired_bootstrap(a, r)
  assert iv.separates and iv.low > 0
  assert iv.scaled(100).low == pytest.approx(100 * iv.low)


@pytest.mark.parametrize("arm, ref, message", [
    (_arm([[1], [0]]), _arm([[1]]), "reference lacks seeds [1]"),
    (_arm([[1]]), _arm([[1], [0]]), "arm lacks seeds [1]"),
    ({0: {"a": 1.0, "b": 0.0}}, {0: {"a": 1.0, "c": 0.0}}, "reference seed 0 lacks 'b' and has extra 'c'"),
    ({0: {"a": 1.0}, 1: {"b": 1.0}}, {0: {"a": 1.0}, 1: {"c": 1.0}}, "reference seed 1 lacks 'b' and has extra 'c'"),
    ({0: {"a": math.nan}}, {0: {"a": 1.0}}, "seed 0 example 'a' is not"),
    ({}, {}, "at least one warm start"),
])
def test_mismatched_arms_are_refused_in_one_line(arm, ref, message):
  with pytest.raises(ValueError, match=None) as e:
    paired.paired_bootstrap(arm, ref)
  assert message in str(e.value) and "\n" not in str(e.value)


def test_warm_starts_with_their_own_examples_are_resampled_nested_as_enumerated():
  # Seed 0 has examples a, b with differences 2, 0; seed 1 has c with 0. A replicate draws two warm
  # starts (4 equally likely orders), then for each drawn copy its own examples (seed 0: 4 orders of
  # a/b, mean 2, 1, 1 or 0; seed 1: always 0). Enumerated below.
  rows = {0: [2.0, 0.0], 1: [0.0]}
  exact = {}
  for seeds in itertools.product(range(2), repeat=2):
    options = [[np.mean([rows[s][i] for i in pick]) for pick in itertools.product(range(len(rows[s])),
                                                                                  repeat=len(rows[s]))]
               for s in seeds]
    for means in itertools.product(*options):
      p = 1 / 4 / np.prod([len(o) for o in options])
      exact[float(np.mean(means))] = exact.get(float(np.mean(means)), 0) + p
  # By hand: seeds (0, 0) w.p. 1/4 average two copies' means (sum of two {0, 1, 2} w.p. 1/4, 1/2, 1/4);
  # (0, 1) or (1, 0) w.p. 1/2 halve one copy's mean; (1, 1) w.p. 1/4 give 0.
  assert exact == pytest.approx({0.0: 25 / 64, 0.5: 20 / 64, 1.0: 14 / 64, 1.5: 4 / 64, 2.0: 1 / 64})
  arm = {0: {"a": 2.0, "b": 0.0}, 1: {"c": 0.0}}
  ref = {0: {"a": 0.0, "b": 0.0}, 1: {"c": 0.0}}
  assert paired.design({s: arm[s].keys() for s in arm}) == "nested"
  draws = paired.bootstrap_means({0: np.array(rows[0]), 1: np.array(rows[1])}, num_resamples=20_000, seed=5)
  for value, p in exact.items():
    freq = np.mean(np.isclose(draws, value))
    assert abs(freq - p) < 4 * math.sqrt(p * (1 - p) / len(draws)) + 1e-12, (value, freq, p)
  iv = paired.paired_bootstrap(arm, ref)
  assert iv.mean == 0.5 and iv.num_seeds == 2  # the mean of the warm starts' means (1 and 0)


def test_p_values_by_hand_and_from_a_summarized_interval():
  # Per-seed mean differences 1, 2, 3: t = 2 / (1 / sqrt 3) = 3.464 on 2 df, two-sided p = 0.0742.
  iv = paired.seed_t_interval(_arm([[1, 1], [3, 1], [3, 3]]), _arm([[0, 0], [0, 0], [0, 0]]))
  assert iv.p_value == pytest.approx(0.07418, abs=2e-5)
  assert paired.t_p_value([1, 2, 3]) == pytest.approx(iv.p_value)
  m, h = paired.mean_ci95([1, 2, 3])
  assert paired.interval_p_value(m, h, 3) == pytest.approx(iv.p_value, rel=1e-3)  # t975 to 3 decimals
  assert paired.t_p_value([2, 2]) == 0.0 and paired.t_p_value([0, 0]) == 1.0 and math.isnan(paired.t_p_value([1]))
  # the bootstrap's: the enumerated case above puts 7/16 of the replicates at 0 and none below
  boot = paired.paired_bootstrap(_arm([[2, 0], [0, 0]]), _arm([[0, 0], [0, 0]]))
  assert boot.p_value == pytest.approx(2 * 7 / 16, abs=0.04)  # 2 x P(draw <= 0), within the draw's error
  clear = paired.paired_bootstrap(_arm([[1] * 50] * 3), _arm([[0] * 50] * 3))
  assert clear.p_value == pytest.approx(1 / (paired.NUM_RESAMPLES + 1))  # no replicate at or below 0


def test_holm_by_hand():
  # sorted 0.005, 0.01, 0.03, 0.04 of m = 4: 4 x 0.005, 3 x 0.01, max(2 x 0.03, ...), max(1 x 0.04, 0.06)
  assert paired.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
  got = paired.holm([0.2, math.nan, 0.01])  # NaN is not a member of the family: m = 2
  assert got[0] == pytest.approx(0.2) and math.isnan(got[1]) and got[2] == pytest.approx(0.02)
  assert paired.holm([0.6, 0.7]) == [1.0, 1.0] and paired.holm([]) == []
