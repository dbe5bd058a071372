"""Arms of the pre-registered credit comparison (``docs/results/credit_preregistration.md``, DRAFT).

Every arm is SML (the main job's stratified likelihood, strata in commit order) with one credit; "base"
is SML alone (uniform credit), the reference of every paired difference; "base (RL replicate 1)" is SML
alone again from the same warm start with another draw of RL's randomness (``rl.replicate``), the
calibration of the intervals (its difference from "base" is noise). The oracle (per-cell token rewards)
is the ceiling, not a challenger. ``experiments/reproduce.py`` runs the arms of a warm start one after
the other (arms interleaved), every arm of a seed from that seed's SFT warm start:

  python experiments/reproduce.py --workdir=runs/credit_protocol --preset=credit \\
      --study=configs/credit_protocol.py --seeds=10,11,12,13,14,15,16,17,18,19

:data:`TASK_OVERRIDES` holds the task variant the headroom step chooses (e.g. more blanks), applied to
every arm, so all arms of a seed share one warm start of that variant; it is set, and committed, before
the runs.
"""

# The chosen task variant (set by the headroom step, before the runs): e.g. [("task.num_blanks", 10)].
TASK_OVERRIDES: list[tuple[str, object]] = []


def get_arms() -> dict[str, list[tuple[str, object]]]:
  """Arm name → ``[(dotted.field, value), ...]``."""
  arms: dict[str, list[tuple[str, object]]] = {
      "base": [("rl.credit", "uniform")],
      "base (RL replicate 1)": [("rl.credit", "uniform"), ("rl.replicate", 1)],
      "DPS + SML": [("rl.credit", "dps")],
      "drop_agreed + SML": [("rl.credit", "uniform"), ("credit.drop_agreed", True)],
      "position_value + SML": [("rl.credit", "position_value")],
      "oracle token_reward + SML": [("rl.credit", "token_reward")],
  }
  return {name: TASK_OVERRIDES + overrides for name, overrides in arms.items()}
