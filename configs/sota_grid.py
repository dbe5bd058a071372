"""Arms of the strongest-bases grid at CPU scale (``experiments/reproduce.py --study=...``): SPG, ESPO,
BGPO and Mask-Aware PG on the main job's 4x4 Sudoku, each alone and with SML where its own estimator can
be swapped, beside d1's diffu-GRPO ("base") and d1 + SML. Each base alone and d1 + SML are paired with
"base"; each "<base> + SML" with its base alone (:func:`get_references`), the question being whether SML
adds anything on top of that base.

  python experiments/reproduce.py --workdir=runs/sota_grid --preset=standard \\
      --study=configs/sota_grid.py --num_val_examples=500 --seeds=0,1,2,3

Every arm of a seed starts from the same SFT warm start and keeps the main job's budget (iterations,
batch, group, learning rate and schedule, rollout). An arm takes from its base's paper preset
(``configs/paper.py:<base>_sudoku``) the settings that define the method, :data:`METHOD_FIELDS`, and
:func:`scaled` fits the ones tied to the rollout's shape to the 20-position, 10-step Sudoku completion.
MAP takes no SML arm (``configs/paper.NO_ARMS``).

Credit on the best base (:data:`CREDIT_BASE`, chosen on validation, see there): DPS and the best
no-oracle credit of the credit study that the base takes (:data:`CREDIT_ARMS`), each paired with that
base alone. ``configs/sota_countdown.py`` runs the best two bases on Countdown.
"""
from __future__ import annotations

import ml_collections

from configs import base as base_config
from configs import paper

NEW_BASES = ("spg", "espo", "bgpo", "map")

# The fields a base's paper preset sets that define its method (the rest of the preset is the paper's
# budget and data, which the grid keeps at the main job's so the bases differ only by method).
METHOD_FIELDS = (
    "rl.objective", "rl.likelihood", "rl.advantage", "rl.beta", "rl.clip_eps", "rl.map.clip_eps_high",
    "rl.pass_accum", "rl.map.position_weight", "rl.spg.eubo_beta", "rl.spg.mix_weight",
    "likelihood.elbo_terms", "likelihood.spg_block", "likelihood.espo_elbo", "likelihood.elbo_mc",
    "likelihood.stepmerge",
)
# Passes per update of a Monte-Carlo estimator at this scale: SML's K = 4, so the sampled-ELBO bases and
# SML score each sequence with the same number of model passes (BGPO's paper uses 16-32 at 8B).
MC_PASSES = 4
# The main job's Sudoku rollout: 10 steps over one 20-position block (configs/sudoku_tiny.py).
ROLLOUT_STEPS = 10
# The base the credit arms run on: the highest mean validation change of the four bases over the seeds
# finished when these arms were added (seeds 0, 1, 3: map +1.9, bgpo +1.8, espo +1.7, spg -18.5 points;
# the first three do not separate from one another).
CREDIT_BASE = "map"
# Credit put on CREDIT_BASE, arm suffix → overrides: DPS (DACA's) and the highest validation change
# among the non-oracle credits of the credit study (docs/results/credit_study.json, trajectory
# likelihood) that MAP's objective takes: drop_agreed, +4.6 points over 3 seeds. (position_value, +4.7
# over 2, hands out per-token advantages, which MAP's per-sequence ratios refuse; dps +3.9, delta +1.6,
# dtca -1.8.)
CREDIT_ARMS = {"DPS": [("rl.credit", "dps")], "drop_agreed": [("credit.drop_agreed", True)]}


def _get(c: ml_collections.ConfigDict, dotted: str):
  for part in dotted.split("."):
    c = c[part]
  return c.to_dict() if isinstance(c, ml_collections.ConfigDict) else c


def _flatten(field: str, value) -> list[tuple[str, object]]:
  if isinstance(value, dict):
    return [(f"{field}.{k}", v) for k, v in sorted(value.items())]
  return [(field, value)]


def scaled(base: str, overrides: list[tuple[str, object]], rollout_steps: int = ROLLOUT_STEPS
           ) -> list[tuple[str, object]]:
  """Fits the rollout-shaped settings of ``base`` to a one-block completion of ``rollout_steps`` steps.

  SPG: one block-masked context (SPG asserts num_t <= the completion's blocks; it has one) in the
  rollout's own block. BGPO: :data:`MC_PASSES` ELBO samples. MAP: StepMerge's 32 segments of 4 steps
  (128 steps) become ``rollout_steps // 2`` segments of 2 steps (5 on Sudoku's 10 steps, 4 on
  Countdown's 8), 2 of them sampled per update: segments of 4 steps would leave 2, all scored, where
  MAP scores a sample (12 of 32).
  """
  # ESPO: the grid's cells ran with the library's padding rule (targets inside the completion mask), before
  # the ESPO presets took ESPO's own (likelihood.espo_elbo.padding="score"); pinned so the committed cells
  # stay this grid's, and listed among its deviations.
  # MAP: likewise with d2's segments (the default), before the MAP presets took MAP's own step count.
  fix = {"spg": {"likelihood.spg_block.num_t": 1, "likelihood.spg_block.block_length": 0},
         "espo": {"likelihood.espo_elbo.padding": "mask"},
         "bgpo": {"likelihood.elbo_mc.samples": MC_PASSES},
         "map": {"likelihood.stepmerge.segments": rollout_steps // 2, "likelihood.stepmerge.sample": 2}}
  out = {**dict(overrides), **fix.get(base, {})}
  out.pop("likelihood.stepmerge.segment_convention", None)
  return list(out.items())


def method_overrides(base: str, task: str = "sudoku", rollout_steps: int = ROLLOUT_STEPS
                     ) -> list[tuple[str, object]]:
  """``[(dotted.field, value)]`` that turn the main job into ``base``'s method on ``task`` (its paper
  preset ``<base>_<task>``'s :data:`METHOD_FIELDS`, :func:`scaled` to ``rollout_steps``), with uniform
  credit."""
  preset, default = paper.get_config(f"{base}_{task}"), base_config.get_config()
  changed = dict(kv for f in METHOD_FIELDS for kv in _flatten(f, _get(preset, f)))
  changed = {k: v for k, v in changed.items() if _get(default, k) != v}  # what the preset sets
  return scaled(base, list(changed.items()), rollout_steps) + [("rl.credit", "uniform")]


def with_sml(overrides: list[tuple[str, object]]) -> list[tuple[str, object]]:
  """The same method scoring its sequences with SML (the main job's strata) instead of its own estimator.

  BGPO's per-pass accumulation is dropped: its Jensen term needs a whole Monte-Carlo sample, and an SML
  sample spans all K strata passes (the library refuses the pair).
  """
  out = {**dict(overrides), "rl.likelihood": "stratified"}
  if out.get("rl.pass_accum"):
    out["rl.pass_accum"] = False
  return list(out.items())


def get_arms() -> dict[str, list[tuple[str, object]]]:
  """Arm name → ``[(dotted.field, value), ...]``; "base" first within each seed."""
  d1 = [("rl.objective", "diffu_grpo"), ("rl.credit", "uniform"), ("rl.likelihood", "mean_field")]
  arms = {"base": d1}
  arms.update({b: method_overrides(b) for b in NEW_BASES})
  arms["d1 + SML"] = with_sml(d1)
  refused = {b for b, (names, _) in paper.NO_ARMS.items() if "sml" in names}
  arms.update({f"{b} + SML": with_sml(method_overrides(b)) for b in NEW_BASES if b not in refused})
  arms.update(credit_arms())
  return arms


def credit_arms() -> dict[str, list[tuple[str, object]]]:
  """``"<CREDIT_BASE> + <name>"`` → that base's overrides with :data:`CREDIT_ARMS`' ``name`` on top."""
  own = method_overrides(CREDIT_BASE)
  return {f"{CREDIT_BASE} + {name}": list({**dict(own), **dict(extra)}.items())
          for name, extra in CREDIT_ARMS.items()}


def get_bases() -> dict[str, str]:
  """Arm → the configs/paper.py base its method comes from ("d1" for d1's base and d1 + SML): the reference
  recipe the grid's header compares each arm with (``experiments/reproduce.py --deviations``)."""
  return {name: "d1" if name in ("base", "d1 + SML") else name.split(" + ")[0] for name in get_arms()}


def get_references() -> dict[str, str]:
  """Arm → the arm its paired difference is taken against: "<base> + SML" and the credit arms → that
  base alone; every other arm → "base" (d1)."""
  refs = {name: name.removesuffix(" + SML") for name in get_arms()
          if name.endswith(" + SML") and name != "d1 + SML"}
  return refs | {name: CREDIT_BASE for name in credit_arms()}
