"""Why MAP and SPG + SML collapse on seed 2 of the strongest-bases grid (``configs/sota_grid.py``): both fall
from the same SFT warm start (0.472 test) to near 0. Each arm reruns one of them from that warm start with
one field changed at a time, to tell the recipe from the implementation and the warm start:

  python experiments/reproduce.py --workdir=runs/collapse --preset=standard \\
      --study=configs/collapse_study.py --num_val_examples=500 --seeds=2

* ``<base> (grid)``: the grid's cell again (does the collapse reproduce on this machine?);
* ``<base>, RL replicate 1``: the same warm start, another draw of RL's rollouts and prompt order
  (``rl.replicate``): a collapse that does not repeat is chance, one that does belongs to the warm start or
  the method;
* ``<base>, <field> as the reference``: one field of the grid's shared recipe set to the reference's
  published value (``configs/paper.py:<base>_sudoku``; :data:`REFERENCE_FIELDS`). The learning rate is
  tried at 10x below the grid's rather than the reference's 3e-6, at which a model trained from scratch in
  300 SFT steps does not move in 200 iterations.

Arms are paired with the grid's cell (their ``<base> (grid)`` arm); the metrics of every cell
(``metrics.jsonl``: reward, KL, ratio, clip fraction, gradient agreement) say how each run went.

The variant ``lr`` asks whether the learning rate that stops the seed-2 collapses also changes the bases'
results from the other warm starts (SPG alone lost to d1's base on every seed): MAP, SPG and SPG + SML at
:data:`LEARNING_RATE`, compared with their grid cells per seed (``docs/results/sota_grid.json``):

  python experiments/reproduce.py --workdir=runs/collapse_lr --preset=standard \\
      --study=configs/collapse_study.py:lr --num_val_examples=500 --seeds=0,1,2,3

The variant ``beta`` asks whether the KL term is what holds the other bases: MAP and SPG run with β = 0, as
their references do, while d1's base and BGPO run at 0.04 and ESPO at 0.01. It runs MAP at :data:`BETA`
from every warm start, seed 2's first (SPG has no KL term to turn on: its reference refuses β != 0, and so
does the library):

  python experiments/reproduce.py --workdir=runs/collapse_beta --preset=standard \\
      --study=configs/collapse_study.py:beta --num_val_examples=500 --seeds=0,1,2,3

The variant ``paired`` puts those arms beside the grid's d1 + SML (the main job's recipe, :data:`ANCHOR`)
rerun from the same warm starts on the same machine, so that each is a paired comparison rather than one
against the grid's cells from another machine. It reuses the finished cells of the two variants above when
their folders are copied into its workdir (a cell's folder is named by its overrides):

  python experiments/reproduce.py --workdir=runs/collapse_lr --preset=standard \\
      --study=configs/collapse_study.py:paired --num_val_examples=500 --seeds=0,1,2,3
"""
from __future__ import annotations

from configs import paper, sota_grid

# The bases that collapsed on seed 2, by their grid arm's name.
COLLAPSED = ("map", "spg + SML")
# Per base: the fields of the grid's recipe set to the reference's value (read from its paper preset),
# one per arm.
REFERENCE_FIELDS = {
    "map": ("rollout.temperature", "likelihood.p_mask_prompt", "rl.num_iterations"),
    "spg + SML": ("rollout.temperature", "rl.num_iterations"),
}
# 10x below the standard preset's 2e-4 (the reference's 3e-6 does not move a from-scratch model).
LEARNING_RATE = 2e-5


def reference_value(base: str, field: str) -> object:
  """``field`` of ``configs/paper.py:<base's method>_sudoku``."""
  value = paper.get_config(f"{sota_grid.get_bases()[base]}_sudoku")
  for part in field.split("."):
    value = value[part]
  return value


def _field_arms(base: str) -> list[tuple[str, object]]:
  return [(f, reference_value(base, f)) for f in REFERENCE_FIELDS[base]] + [("rl.learning_rate", LEARNING_RATE)]


# The bases the variant ``lr`` runs.
LR_BASES = ("map", "spg", "spg + SML")
# The KL weight the grid's other bases run with (its shared recipe's β; d1's base and BGPO): MAP and SPG set
# β = 0 as their references do, and they are the two that collapse or lose. SPG has no KL term.
BETA = 0.04
BETA_BASES = ("map",)
# The grid arm every arm of the variant ``paired`` is compared with: the main job's recipe.
ANCHOR = "d1 + SML"
VARIANTS = ("", "lr", "beta", "paired")


def get_arms(variant: str = "") -> dict[str, list[tuple[str, object]]]:
  """Arm name → overrides: per collapsed base, the grid's cell, an RL replicate, one field each; in the
  order they run, the cheap ones first (μ > 1 multiplies a cell's update time). Variant ``lr``: each of
  :data:`LR_BASES` at :data:`LEARNING_RATE`; ``beta``: each of :data:`BETA_BASES` at the KL weight :data:`BETA`;
  ``paired``: the grid's :data:`ANCHOR` (first), then the arms of ``lr`` and ``beta``.

  Raises:
    ValueError: an unknown variant.
  """
  grid = sota_grid.get_arms()
  if variant not in VARIANTS:
    raise ValueError(f"configs/collapse_study.py: variant {variant!r} is not one of {VARIANTS}")
  if variant == "lr":
    return {f"{base}, rl.learning_rate={LEARNING_RATE}": [*grid[base], ("rl.learning_rate", LEARNING_RATE)]
            for base in LR_BASES}
  if variant == "beta":
    return {f"{base}, rl.beta={BETA}": [*grid[base], ("rl.beta", BETA)] for base in BETA_BASES}
  if variant == "paired":
    return {f"{ANCHOR} (grid)": grid[ANCHOR], **get_arms("beta"), **get_arms("lr")}
  arms = {}
  for base in COLLAPSED:
    arms[f"{base} (grid)"] = grid[base]
  for base in COLLAPSED:
    arms[f"{base}, RL replicate 1"] = grid[base] + [("rl.replicate", 1)]
  for last in (False, True):
    for base in COLLAPSED:
      for field, value in _field_arms(base):
        if (field == "rl.num_iterations") == last:
          arms[f"{base}, {field}={value}"] = [*grid[base], (field, value)]
  return arms


def get_references() -> dict[str, str]:
  """Each arm → its base's grid cell."""
  return {name: f"{name.split(',')[0]} (grid)" for name in get_arms() if not name.endswith("(grid)")}
