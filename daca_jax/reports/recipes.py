"""How a study's arms differ from the recipes their methods were published with.

A study (``configs/sota_grid.py``) runs every arm at one shared CPU-scale recipe and takes from each
method's paper preset (``configs/paper.py:<base>_<task>``, every value sourced in docs/paper_recipes.md)
only the fields that define the method. :func:`deviations` lists, per method, each field of
:data:`RECIPE_FIELDS` whose value in the grid's cell differs from the reference's preset, with why
(:data:`WHY`), as the markdown table the study's results carry (``experiments/reproduce.py
--deviations``).
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Mapping, Sequence

from daca_jax.config.train import TrainConfig

# The fields of a recipe a reader compares (what changes an update's size, its data or its estimator).
RECIPE_FIELDS = ("rl.num_iterations", "rl.learning_rate", "rl.lr_schedule", "rl.prompts_per_step", "rl.group_size",
                 "rl.sample_group_size", "rl.grad_accum", "rl.advantage", "rl.beta", "rl.clip_eps",
                 "rollout.temperature", "likelihood.p_mask_prompt", "likelihood.spg_block.num_t",
                 "likelihood.spg_block.block_length", "likelihood.elbo_mc.samples", "likelihood.stepmerge.segments",
                 "likelihood.stepmerge.sample", "likelihood.stepmerge.segment_convention",
                 "likelihood.espo_elbo.padding", "rl.mask_seed_reuse", "rl.steps")
# Why a field differs (the grid's shared recipe, chosen on the main job's validation split at CPU scale).
WHY = {
    "rl.num_iterations": "the shared recipe's one update per rollout batch (μ > 1 costs a CPU cell μ times the "
                         "update); at μ = 1 the ratio is 1 at every update, so a clip never binds",
    "rl.learning_rate": "the shared recipe: 2e-4 moves a 1-layer model trained from scratch in 200 iterations; "
                        "3e-6 is for 8B weights",
    "rl.lr_schedule": "the shared recipe (cosine decay, chosen on validation for the main job)",
    "rl.prompts_per_step": "the shared recipe: 32 puzzles per update",
    "rl.group_size": "the shared recipe: 4 completions per puzzle in the update",
    "rl.sample_group_size": "the shared recipe: PODS keeps the 4 of 8 sampled whose rewards vary most (no "
                            "reference does)",
    "rl.grad_accum": "one micro-batch holds the whole update at this size",
    "rl.advantage": "the shared recipe's group-std advantages",
    "rollout.temperature": "the shared recipe samples at 1.0",
    "likelihood.p_mask_prompt": "the prompt is the puzzle: masking its givens makes the target ambiguous",
    "likelihood.spg_block.num_t": "SPG asserts num_t <= the completion's blocks; Sudoku's has one",
    "likelihood.spg_block.block_length": "the rollout's own block",
    "likelihood.elbo_mc.samples": "as many passes as SML's K = 4",
    "likelihood.stepmerge.segments": "Sudoku's 10 denoising steps make 5 segments of 2 (the reference: 32 of 4)",
    "likelihood.stepmerge.sample": "2 of the 5 segments sampled per update",
    "likelihood.stepmerge.segment_convention": "the cells ran before the setting existed, with d2's segments "
                                               "[start, next), which also score the step-0 tokens",
    "likelihood.espo_elbo.padding": "the cells ran before the setting existed, with the library's rule: only "
                                    "positions inside the completion mask",
    "rl.mask_seed_reuse": "the cells ran before the setting existed; with μ = 1 and one micro-batch both rules "
                          "draw a new seed for every update",
    "rl.steps": "the shared budget: 200 iterations",
}


def _get(cfg: Any, dotted: str) -> Any:
  return functools.reduce(getattr, dotted.split("."), cfg)


def _fmt(value: Any) -> str:
  if isinstance(value, float):
    return f"{value:g}"
  return str(value)


def deviations(arms: Mapping[str, Sequence[tuple[str, Any]]], bases: Mapping[str, str], task: str,
               cell: Callable[[Sequence[tuple[str, Any]]], TrainConfig],
               reference: Callable[[str], TrainConfig]) -> str:
  """Markdown: one row per field of :data:`RECIPE_FIELDS` that differs for some base, one column per base
  (the first arm of each base: its other arms change only what their names say), each cell "reference →
  this grid" or "=" where they agree, and why.

  Args:
    arms: the study's arms (name -> overrides).
    bases: arm -> the configs/paper.py base whose ``<base>_<task>`` preset is its reference.
    task: the task part of the reference presets' names.
    cell: the config a cell of the study runs, from an arm's overrides.
    reference: a preset name -> its TrainConfig.
  """
  first = {}
  for arm, base in bases.items():
    first.setdefault(base, arm)
  pairs = {base: (reference(f"{base}_{task}"), cell(arms[arm])) for base, arm in first.items()}
  head = ["field"] + [f"{base} (`{base}_{task}` → {first[base]!r})" for base in first] + ["why"]
  lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
  for f in RECIPE_FIELDS:
    cells = []
    for ref, got in pairs.values():
      a, b = _fmt(_get(ref, f)), _fmt(_get(got, f))
      cells.append("=" if a == b else f"{a} → {b}")
    if any(c != "=" for c in cells):
      lines.append(f"| `{f}` | " + " | ".join(cells) + f" | {WHY.get(f, '')} |")
  return "\n".join(lines)


__all__ = ["RECIPE_FIELDS", "WHY", "deviations"]
