"""Paired comparisons of two arms over the same warm starts and the same evaluation examples.

A study scores every arm from the same warm starts (SFT seeds) on the same examples, so the quantity
of interest is the per-(warm start, example) difference ``D[s, i] = arm[s, i] − reference[s, i]`` of a
per-example outcome (e.g. ``strict_solved`` in {0, 1}); the mean over warm starts of each warm start's
mean difference is the arm's paired effect on the metric (a warm start's metric is the mean over its
examples).

Two intervals for that mean:

* :func:`paired_bootstrap`, a hierarchical percentile bootstrap. Each replicate draws S warm starts
  with replacement from the S, then examples with replacement, and takes the mean of ``D`` over what
  was drawn (a warm start or example drawn k times counts k times). What is resampled, and why:

  - warm starts, because the claim is about a fresh warm start: the spread between SFT seeds and RL
    runs is the largest source of variation in these studies;
  - examples, because the evaluation set is a sample of the task's item distribution, not the
    distribution itself;
  - **crossed** (every warm start scored on the same examples, e.g. a fixed validation split or the
    test set): one example draw per replicate, shared by all its warm starts. An example that one arm
    solves and the other does not tends to do so from every warm start; drawing examples afresh within
    each warm start would average that shared effect away and understate the interval. The crossed
    bootstrap counts the warm start × example interaction more than once, so it is mildly conservative
    (Owen, "The pigeonhole bootstrap", Ann. Appl. Stat. 2007);
  - **nested** (each warm start has its own examples, e.g. validation splits drawn with each seed's
    training pool, ``task.val_split="pool"``): the examples of each drawn warm start are drawn within
    it, independently for every time it is drawn.

  :func:`design` picks the design from the example keys. The generator is
  ``numpy.random.default_rng(seed)`` with a fixed default seed: the same inputs always give the same
  interval.
* :func:`seed_t_interval`, the Student-t interval of the S per-warm-start mean differences (examples
  not resampled: each warm start's mean is taken as exact), the interval the tables used before
  per-example outcomes were recorded.

Inputs are ``{warm start seed: {example key: outcome}}`` per arm (:func:`paired_differences` aligns
them and refuses, in one line naming what differs, two arms that were not scored on the same warm
starts, or on the same examples from one warm start).

Several comparisons in one table: each interval comes with a two-sided p-value (the t test of the seed
means; for the bootstrap, twice the smaller share of replicates on either side of 0), and
:func:`holm` adjusts a family's p-values (Holm 1979, "A simple sequentially rejective multiple test
procedure"): a comparison **separates** when its adjusted p-value is below 0.05, which holds the chance
that any comparison of the family separates by chance at 5%. The tables say which family they correct
over.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Iterable, Mapping, Sequence

import numpy as np

# Student-t 0.975 quantiles for 1..30 degrees of freedom (1.96 beyond).
_T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042]
NUM_RESAMPLES = 10_000  # replicates: the 2.5% / 97.5% quantiles' Monte Carlo error is ~0.03 bootstrap SDs
BOOTSTRAP_SEED = 0
_CHUNK = 256  # replicates drawn at once (bounds memory at _CHUNK x N counts)

Outcomes = Mapping[int, Mapping[str, float]]  # warm start seed -> example key -> outcome


def mean_ci95(values: Sequence[float]) -> tuple[float, float]:
  """(mean, half-width of the 95% Student-t confidence interval); half-width NaN for one value."""
  v = np.asarray(values, np.float64)
  if len(v) < 2:
    return float(v.mean()), math.nan
  t = _T975[len(v) - 2] if len(v) - 1 <= len(_T975) else 1.96
  return float(v.mean()), float(t * v.std(ddof=1) / math.sqrt(len(v)))


@dataclasses.dataclass(frozen=True)
class PairedInterval:
  """A paired difference (arm − reference) and its interval, in the outcomes' units.

  Attributes:
    mean: the mean over warm starts of each warm start's mean difference (the mean of ``D`` when every
      warm start has as many examples).
    low, high: the interval's ends (NaN where it is undefined, e.g. a t interval of one warm start).
    num_seeds: S, the paired warm starts.
    num_examples: N, the examples per warm start.
    method: "bootstrap" (:func:`paired_bootstrap`) or "seed_t" (:func:`seed_t_interval`).
    p_value: two-sided p-value of "no difference" (module docstring); NaN where undefined.
  """

  mean: float
  low: float
  high: float
  num_seeds: int
  num_examples: int
  method: str
  p_value: float = math.nan

  @property
  def separates(self) -> bool:
    """Whether the interval excludes 0."""
    return self.low > 0 or self.high < 0

  def scaled(self, factor: float) -> "PairedInterval":
    """The same interval times ``factor`` (> 0), e.g. 100 for points of a rate."""
    return dataclasses.replace(self, mean=self.mean * factor, low=self.low * factor, high=self.high * factor)


def _describe(keys: set, limit: int = 3) -> str:
  shown = sorted(keys, key=str)[:limit]
  more = f" and {len(keys) - limit} more" if len(keys) > limit else ""
  return ", ".join(map(repr, shown)) + more


def paired_differences(arm: Outcomes, reference: Outcomes, *, arm_name: str = "arm",
                       reference_name: str = "reference") -> dict[int, np.ndarray]:
  """Aligns two arms' outcomes warm start by warm start.

  Args:
    arm, reference: ``{seed: {example key: outcome}}``; the same seeds in both, and for each seed the
      same example keys in both (seeds may differ from one another: see :func:`design`).
    arm_name, reference_name: how the error messages name the two arms.
  Returns:
    ``{seed: float64 [N_s] differences arm − reference}`` in sorted seed order, each in sorted key
    order.
  Raises:
    ValueError: no seeds, different seeds, a seed whose examples differ between the arms (the seed
      and the keys named), a seed without examples, or a non-finite outcome; one line.
  """
  seeds_a, seeds_r = set(arm), set(reference)
  if seeds_a != seeds_r:
    parts = [f"{name} lacks seeds {sorted(missing)}" for name, missing in
             ((reference_name, seeds_a - seeds_r), (arm_name, seeds_r - seeds_a)) if missing]
    raise ValueError(f"paired comparison needs the same warm starts in both arms: {'; '.join(parts)}")
  if not seeds_a:
    raise ValueError("paired comparison needs at least one warm start (both arms are empty)")
  out = {}
  for s in sorted(seeds_a):
    want, have = set(arm[s]), set(reference[s])
    if want != have:
      parts = [f"lacks {_describe(want - have)}" if want - have else "",
               f"has extra {_describe(have - want)}" if have - want else ""]
      raise ValueError(f"paired comparison needs the same examples in both arms: {reference_name} seed {s} "
                       f"{' and '.join(p for p in parts if p)} (compared with {arm_name} seed {s})")
    if not want:
      raise ValueError(f"paired comparison needs examples: seed {s} has none")
    keys = sorted(want)
    d = np.asarray([float(arm[s][k]) - float(reference[s][k]) for k in keys], np.float64)
    if not np.isfinite(d).all():
      raise ValueError(f"paired comparison needs finite outcomes: seed {s} example "
                       f"{keys[int(np.argmin(np.isfinite(d)))]!r} is not")
    out[s] = d
  return out


def design(keys: Mapping[int, Iterable[str]]) -> str:
  """"crossed" when every warm start was scored on the same examples (``keys``: each seed's example
  keys), else "nested" (module docstring)."""
  return "crossed" if len({frozenset(k) for k in keys.values()}) == 1 else "nested"


def _uniform_counts(rng: np.random.Generator, totals: np.ndarray | int, n: int, size: int) -> np.ndarray:
  """int64 ``[size, n]``: multinomial counts of ``totals`` draws over n equally likely categories."""
  return rng.multinomial(totals, np.full(n, 1.0 / n), size=None if np.ndim(totals) else size)


def bootstrap_means(diffs: Mapping[int, np.ndarray] | np.ndarray, num_resamples: int = NUM_RESAMPLES,
                    seed: int = BOOTSTRAP_SEED, crossed: bool | None = None) -> np.ndarray:
  """The bootstrap's replicate means of the paired differences (module docstring).

  A replicate draws the warm starts with replacement (counts ``c_I``), then the examples: crossed, one
  draw ``J`` of N indices shared by every warm start (mean ``Σ_{j∈J} (c_I · D)[j] / (S·N)``); nested,
  for a warm start drawn k times, k independent draws of its N_s examples, i.e. ``k·N_s`` draws
  (multinomial counts, whose dot product with ``D_s`` over ``N_s`` is the sum of the k copies' means).
  No ``[S, N]`` copy is made per replicate.

  Args:
    diffs: ``{seed: float [N_s]}`` (:func:`paired_differences`) or a float ``[S, N]`` array (crossed).
    num_resamples: B >= 1.
    seed: the generator's seed.
    crossed: the design (None: crossed iff every warm start has as many examples; crossed needs that).
  Returns:
    float64 ``[B]``.
  Raises:
    ValueError: no warm starts, a warm start without examples, B < 1, or crossed with unequal N_s.
  """
  rows = [np.asarray(d, np.float64).reshape(-1) for d in (diffs.values() if isinstance(diffs, Mapping) else diffs)]
  if not rows or any(r.size == 0 for r in rows):
    raise ValueError("bootstrap_means needs at least one warm start, each with examples")
  if num_resamples < 1:
    raise ValueError(f"bootstrap_means needs num_resamples >= 1, got {num_resamples}")
  if crossed is None:
    crossed = len({r.size for r in rows}) == 1
  if crossed and len({r.size for r in rows}) != 1:
    raise ValueError(f"a crossed bootstrap needs as many examples per warm start, got {[r.size for r in rows]}")
  s = len(rows)
  rng = np.random.default_rng(seed)
  out = np.empty(num_resamples, np.float64)
  for start in range(0, num_resamples, _CHUNK):
    b = min(_CHUNK, num_resamples - start)
    seed_counts = _uniform_counts(rng, s, s, b)  # [b, S]
    if crossed:
      d = np.stack(rows)  # [S, N]
      n = d.shape[1]
      drawn = rng.integers(0, n, size=(b, n))  # the replicate's examples (indices: cheaper than counts)
      out[start:start + b] = np.take_along_axis(seed_counts @ d, drawn, axis=1).sum(axis=1) / (s * n)
    else:
      total = np.zeros(b)
      for i, d in enumerate(rows):
        counts = _uniform_counts(rng, seed_counts[:, i] * d.size, d.size, b)  # [b, N_s]
        total += counts @ d / d.size
      out[start:start + b] = total / s
  return out


def paired_bootstrap(arm: Outcomes, reference: Outcomes, *, num_resamples: int = NUM_RESAMPLES,
                     seed: int = BOOTSTRAP_SEED, level: float = 0.95, arm_name: str = "arm",
                     reference_name: str = "reference") -> PairedInterval:
  """The mean paired difference arm − reference with the bootstrap's percentile interval, crossed
  when every warm start was scored on the same examples, else nested (module docstring).

  Args:
    arm, reference: see :func:`paired_differences`.
    num_resamples, seed: see :func:`bootstrap_means`.
    level: the interval's coverage in (0, 1).
  Returns:
    :class:`PairedInterval` (method "bootstrap"; ``num_examples``: the examples per warm start, their
    mean under the nested design), in the outcomes' units. Its mean is the mean over warm starts of
    each warm start's mean difference.
  Raises:
    ValueError: see :func:`paired_differences`; ``level`` outside (0, 1).
  """
  if not 0 < level < 1:
    raise ValueError(f"paired_bootstrap needs 0 < level < 1, got {level}")
  diffs = paired_differences(arm, reference, arm_name=arm_name, reference_name=reference_name)
  crossed = design({s: arm[s].keys() for s in diffs}) == "crossed"
  draws = bootstrap_means(diffs, num_resamples, seed, crossed=crossed)
  low, high = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2])
  mean = float(np.mean([d.mean() for d in diffs.values()]))
  sizes = [d.size for d in diffs.values()]
  # two-sided percentile-bootstrap p-value; at least 1 / (R + 1): R replicates cannot show a smaller one
  side = min(float(np.mean(draws <= 0)), float(np.mean(draws >= 0)))
  p = min(1.0, max(2.0 * side, 1.0 / (len(draws) + 1)))
  return PairedInterval(mean, float(low), float(high), len(diffs), round(float(np.mean(sizes))), "bootstrap", p)


def seed_t_interval(arm: Outcomes, reference: Outcomes, *, arm_name: str = "arm",
                    reference_name: str = "reference") -> PairedInterval:
  """The mean paired difference with the 95% Student-t interval over the S per-warm-start means.

  Returns:
    :class:`PairedInterval` (method "seed_t"); ``low`` / ``high`` NaN for one warm start.
  Raises:
    ValueError: see :func:`paired_differences`.
  """
  diffs = paired_differences(arm, reference, arm_name=arm_name, reference_name=reference_name)
  means = [d.mean() for d in diffs.values()]
  m, h = mean_ci95(means)
  sizes = [d.size for d in diffs.values()]
  return PairedInterval(m, m - h, m + h, len(diffs), round(float(np.mean(sizes))), "seed_t", t_p_value(means))


def t_p_value(values: Sequence[float]) -> float:
  """Two-sided p-value of the one-sample t test of mean 0 (Student, n − 1 degrees of freedom); NaN for
  fewer than two values, 0 when they agree exactly on a non-zero value."""
  from scipy import stats

  v = np.asarray(values, np.float64)
  if len(v) < 2:
    return math.nan
  sd = v.std(ddof=1)
  if sd == 0:
    return 1.0 if v.mean() == 0 else 0.0
  return float(2 * stats.t.sf(abs(v.mean()) / (sd / math.sqrt(len(v))), len(v) - 1))


def interval_p_value(mean: float, half_width: float, n: int) -> float:
  """The :func:`t_p_value` of ``n`` values whose :func:`mean_ci95` is ``(mean, half_width)`` (a summarized
  row that kept no values); NaN where undefined."""
  from scipy import stats

  if n < 2 or math.isnan(half_width):
    return math.nan
  if half_width == 0:
    return 1.0 if mean == 0 else 0.0
  t975 = _T975[n - 2] if n - 1 <= len(_T975) else 1.96
  return float(2 * stats.t.sf(abs(mean) / (half_width / t975), n - 1))


def p_text(p: float) -> str:
  """A p-value as the tables print it: three decimals, "<0.001" below that."""
  return "<0.001" if p < 0.001 else f"{p:.3f}"


ALPHA = 0.05  # a family's error rate: a comparison separates when its Holm-adjusted p-value is below it


def holm(p_values: Sequence[float]) -> list[float]:
  """Holm's step-down adjusted p-values of one family (same order; NaN entries stay NaN and are not
  counted in the family): the i-th smallest of m is ``max_{j<=i} min(1, (m − j + 1) p_(j))``."""
  p = np.asarray(p_values, np.float64)
  ok = np.flatnonzero(~np.isnan(p))
  out = np.full(p.shape, np.nan)
  m, running = len(ok), 0.0
  for rank, idx in enumerate(ok[np.argsort(p[ok], kind="stable")]):
    running = max(running, min(1.0, (m - rank) * p[idx]))
    out[idx] = running
  return [float(x) for x in out]


__all__ = ["ALPHA", "BOOTSTRAP_SEED", "NUM_RESAMPLES", "Outcomes", "PairedInterval", "bootstrap_means", "design", "holm",
           "interval_p_value", "mean_ci95", "p_text", "paired_bootstrap", "paired_differences", "seed_t_interval",
           "t_p_value"]
