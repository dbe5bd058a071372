"""Arms of the strongest-bases grid on Countdown (``experiments/reproduce.py --study=...``): the best two
bases of ``configs/sota_grid.py`` (:data:`BASES`, chosen on its Sudoku validation split) beside d1's
diffu-GRPO ("base"), each paired with "base".

  python experiments/reproduce.py --workdir=runs/sota_countdown --preset=standard \\
      --configs=configs/countdown_tiny.py --study=configs/sota_countdown.py --num_val_examples=500 \\
      --seeds=0,1,2,3

Every arm of a seed starts from the same SFT warm start and keeps the Countdown job's budget. A base
takes the method fields of its Countdown paper preset (``configs/paper.py:<base>_countdown``), fitted
to Countdown's one-block, 8-step completion (``configs/countdown_tiny.py``) by
:func:`configs.sota_grid.scaled`.
"""
from __future__ import annotations

from configs import sota_grid

# The two highest mean validation changes of the four bases on Sudoku over the seeds finished when this
# study was added (seeds 0, 1, 3: map +1.9, bgpo +1.8, espo +1.7 points; none separates from the others).
BASES = ("map", "bgpo")
# Countdown's rollout: 8 steps over one 16-position block (configs/countdown_tiny.py).
ROLLOUT_STEPS = 8


def get_arms() -> dict[str, list[tuple[str, object]]]:
  """Arm name → ``[(dotted.field, value), ...]``; "base" (d1's diffu-GRPO) first."""
  d1 = [("rl.objective", "diffu_grpo"), ("rl.credit", "uniform"), ("rl.likelihood", "mean_field")]
  return {"base": d1} | {b: sota_grid.method_overrides(b, "countdown", ROLLOUT_STEPS) for b in BASES}
