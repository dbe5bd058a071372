"""Paired comparisons of two arms over the same warm starts and the same evaluation examples.

A study scores every arm from the same warm starts (SFT seeds) on the same examples, so the quantity
of interest is the per-(warm start, example) difference ``D[s, i] = arm[s, i] − reference[s, i]`` of a
per-example outcome (e.g. ``strict_solved`` in {0, 1}); its mean is the arm's paired effect on the
metric (the metric of a warm start is the mean over its examples).

Two intervals for that mean:

* :func:`paired_bootstrap`, a two-way (crossed) percentile bootstrap. Each replicate draws S warm starts
  with replacement from the S, and N examples with replacement from the N, and takes the mean of ``D``
  over the drawn rows and columns (a row or column drawn k times counts k times). What is resampled,
  and why:

  - warm starts, because the claim is about a fresh warm start: the spread between SFT seeds and RL
    runs is the largest source of variation in these studies;
  - examples, because the evaluation set is a sample of the task's item distribution, not the
    distribution itself;
  - one example draw per replicate shared by all its warm starts (crossed, not nested), because every
    warm start is scored on the same examples: an example that one arm solves and the other does not
    tends to do so from every warm start, and drawing examples afresh within each warm start would
    average that shared effect away and understate the interval. The crossed bootstrap counts the
    warm start × example interaction more than once, so it is mildly conservative (Owen, "The
    pigeonhole bootstrap", Ann. Appl. Stat. 2007).

  The generator is ``numpy.random.default_rng(seed)`` with a fixed default seed: the same inputs always
  give the same interval.
* :func:`seed_t_interval`, the Student-t interval of the S per-warm-start mean differences (examples
  not resampled: each warm start's mean is taken as exact), the interval the tables used before
  per-example outcomes were recorded.

Inputs are ``{warm start seed: {example key: outcome}}`` per arm (:func:`paired_matrix` aligns them
and refuses, in one line naming what differs, two arms that were not scored on the same warm starts
and examples).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Sequence

import numpy as np

# Student-t 0.975 quantiles for 1..30 degrees of freedom (1.96 beyond).
_T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042]
NUM_RESAMPLES = 10_000  # bootstrap replicates: the 2.5% / 97.5% quantiles move by < 0.1 SE between seeds
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
    mean: the mean of ``D`` over warm starts and examples.
    low, high: the interval's ends (NaN where it is undefined, e.g. a t interval of one warm start).
    num_seeds: S, the paired warm starts.
    num_examples: N, the examples per warm start.
    method: "bootstrap" (:func:`paired_bootstrap`) or "seed_t" (:func:`seed_t_interval`).
  """

  mean: float
  low: float
  high: float
  num_seeds: int
  num_examples: int
  method: str

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


def paired_matrix(arm: Outcomes, reference: Outcomes, *, arm_name: str = "arm",
                  reference_name: str = "reference") -> tuple[np.ndarray, list[int], list[str]]:
  """Aligns two arms' outcomes into the difference matrix.

  Args:
    arm, reference: ``{seed: {example key: outcome}}``; the same seeds in both, and the same example
      keys for every seed of both.
    arm_name, reference_name: how the error messages name the two arms.
  Returns:
    ``(D, seeds, keys)``: float64 ``[S, N]`` differences arm − reference, rows in sorted seed order,
    columns in sorted key order.
  Raises:
    ValueError: no seeds, different seeds, different examples (the seed and the keys named), or a
      non-finite outcome; one line.
  """
  seeds_a, seeds_r = set(arm), set(reference)
  if seeds_a != seeds_r:
    parts = [f"{name} lacks seeds {sorted(missing)}" for name, missing in
             ((reference_name, seeds_a - seeds_r), (arm_name, seeds_r - seeds_a)) if missing]
    raise ValueError(f"paired comparison needs the same warm starts in both arms: {'; '.join(parts)}")
  if not seeds_a:
    raise ValueError("paired comparison needs at least one warm start (both arms are empty)")
  seeds = sorted(seeds_a)
  keys = sorted(arm[seeds[0]])
  if not keys:
    raise ValueError(f"paired comparison needs examples: {arm_name} seed {seeds[0]} has none")
  want = set(keys)
  rows = []
  for s in seeds:
    for name, outcomes in ((arm_name, arm), (reference_name, reference)):
      have = set(outcomes[s])
      if have != want:
        parts = [f"lacks {_describe(want - have)}" if want - have else "",
                 f"has extra {_describe(have - want)}" if have - want else ""]
        raise ValueError(f"paired comparison needs the same examples everywhere: {name} seed {s} "
                         f"{' and '.join(p for p in parts if p)} (compared with {arm_name} seed {seeds[0]})")
    rows.append([float(arm[s][k]) - float(reference[s][k]) for k in keys])
  diff = np.asarray(rows, np.float64)
  if not np.isfinite(diff).all():
    s, i = np.argwhere(~np.isfinite(diff))[0]
    raise ValueError(f"paired comparison needs finite outcomes: seed {seeds[s]} example {keys[i]!r} is not")
  return diff, seeds, keys


def bootstrap_means(diff: np.ndarray, num_resamples: int = NUM_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> np.ndarray:
  """The crossed bootstrap's replicate means of ``diff`` (module docstring).

  A replicate drawing warm starts ``I`` and examples ``J`` (with replacement) has mean
  ``c_I · D · c_J / (S·N)``, with ``c_I`` / ``c_J`` the draws' counts (multinomial, the same
  distribution as the indices), so no ``[S, N]`` copy is made per replicate.

  Args:
    diff: float ``[S, N]`` differences.
    num_resamples: B >= 1.
    seed: the generator's seed.
  Returns:
    float64 ``[B]``.
  Raises:
    ValueError: ``diff`` is not a non-empty 2-D array, or B < 1.
  """
  d = np.asarray(diff, np.float64)
  if d.ndim != 2 or d.size == 0:
    raise ValueError(f"bootstrap_means needs a non-empty [seeds, examples] array, got shape {d.shape}")
  if num_resamples < 1:
    raise ValueError(f"bootstrap_means needs num_resamples >= 1, got {num_resamples}")
  s, n = d.shape
  rng = np.random.default_rng(seed)
  out = np.empty(num_resamples, np.float64)
  for start in range(0, num_resamples, _CHUNK):
    b = min(_CHUNK, num_resamples - start)
    seed_counts = rng.multinomial(s, np.full(s, 1.0 / s), size=b)  # [b, S]
    example_counts = rng.multinomial(n, np.full(n, 1.0 / n), size=b)  # [b, N]
    out[start:start + b] = np.einsum("bs,sn,bn->b", seed_counts, d, example_counts) / (s * n)
  return out


def paired_bootstrap(arm: Outcomes, reference: Outcomes, *, num_resamples: int = NUM_RESAMPLES,
                     seed: int = BOOTSTRAP_SEED, level: float = 0.95, arm_name: str = "arm",
                     reference_name: str = "reference") -> PairedInterval:
  """The mean paired difference arm − reference with the crossed bootstrap's percentile interval.

  Args:
    arm, reference: see :func:`paired_matrix`.
    num_resamples, seed: see :func:`bootstrap_means`.
    level: the interval's coverage in (0, 1).
  Returns:
    :class:`PairedInterval` (method "bootstrap"), in the outcomes' units.
  Raises:
    ValueError: see :func:`paired_matrix`; ``level`` outside (0, 1).
  """
  if not 0 < level < 1:
    raise ValueError(f"paired_bootstrap needs 0 < level < 1, got {level}")
  diff, seeds, keys = paired_matrix(arm, reference, arm_name=arm_name, reference_name=reference_name)
  draws = bootstrap_means(diff, num_resamples, seed)
  low, high = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2])
  return PairedInterval(float(diff.mean()), float(low), float(high), len(seeds), len(keys), "bootstrap")


def seed_t_interval(arm: Outcomes, reference: Outcomes, *, arm_name: str = "arm",
                    reference_name: str = "reference") -> PairedInterval:
  """The mean paired difference with the 95% Student-t interval over the S per-warm-start means.

  Returns:
    :class:`PairedInterval` (method "seed_t"); ``low`` / ``high`` NaN for one warm start.
  Raises:
    ValueError: see :func:`paired_matrix`.
  """
  diff, seeds, keys = paired_matrix(arm, reference, arm_name=arm_name, reference_name=reference_name)
  m, h = mean_ci95(diff.mean(axis=1))
  return PairedInterval(m, m - h, m + h, len(seeds), len(keys), "seed_t")


__all__ = ["BOOTSTRAP_SEED", "NUM_RESAMPLES", "Outcomes", "PairedInterval", "bootstrap_means", "mean_ci95",
           "paired_bootstrap", "paired_matrix", "seed_t_interval"]
