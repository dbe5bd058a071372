"""Arms of the 4x4 Sudoku credit/likelihood study (``experiments/reproduce.py --study=...``).

Each arm is a list of config overrides on top of the task config and the preset; every arm of a seed
starts from the same SFT warm start and gets the same number of rollouts and updates. "base" (d1's
diffu-GRPO: uniform credit, mean-field likelihood) is what the paired differences are taken against.

  python experiments/reproduce.py --workdir=runs/credit_study --preset=study \\
      --study=configs/credit_study.py --num_val_examples=500 --seeds=0,1,2
      [--arms=base,"position_value + traj4"]   # only these arms of the study
"""

_TRAJ4 = [("rl.likelihood", "trajectory"), ("likelihood.trajectory.groups", 4)]


def get_arms() -> dict[str, list[tuple[str, object]]]:
  """Arm name → ``[(dotted.field, value), ...]``."""
  return {
      "base": [("rl.credit", "uniform"), ("rl.likelihood", "mean_field")],
      "DACA (dps + SML)": [("rl.credit", "dps"), ("rl.likelihood", "stratified"),
                           ("likelihood.stratified.partition", "random")],
      # SML's strata by commit order (DACA's own option): the estimator closest to the sampler's
      # trajectory gradient among SML's partitions (experiments/alignment_study.py).
      "DACA (dps + SML commit_order)": [("rl.credit", "dps"), ("rl.likelihood", "stratified"),
                                        ("likelihood.stratified.partition", "commit_order")],
      "uniform + traj4": [("rl.credit", "uniform")] + _TRAJ4,
      "uniform + traj4 + drop_agreed": [("rl.credit", "uniform"), ("credit.drop_agreed", True)] + _TRAJ4,
      "dps + traj4": [("rl.credit", "dps")] + _TRAJ4,
      "dps + traj4 + drop_agreed": [("rl.credit", "dps"), ("credit.drop_agreed", True)] + _TRAJ4,
      "position_value + traj4": [("rl.credit", "position_value")] + _TRAJ4,
      "dtca + traj4": [("rl.credit", "dtca")] + _TRAJ4,
      "delta + traj4": [("rl.credit", "delta")] + _TRAJ4,
      "token_reward + traj4 (oracle)": [("rl.credit", "token_reward")] + _TRAJ4,
  }
