"""Step 1 of the credit pre-registration (``docs/results/credit_preregistration.md``): the room a task
variant leaves for credit, measured as the per-cell oracle's validation ``strict_solved`` minus SML
alone's, from the same SFT warm start per seed, on the fixed 5,000-item validation split:

  python experiments/reproduce.py --workdir=runs/headroom_b10 --preset=credit \\
      --study=configs/credit_headroom.py --seeds=0,1

Every arm of a workdir must share the task variant (the grid caches one SFT warm start per task and
seed), so a variant is one workdir: change :data:`BLANKS` (8, 10, 11) for the next.
"""

BLANKS = 10  # task.num_blanks of the variant measured (the main job: 8)


def get_arms() -> dict[str, list[tuple[str, object]]]:
  """Arm name → ``[(dotted.field, value), ...]``: SML alone and the oracle on the variant."""
  task = [("task.num_blanks", BLANKS)]
  return {f"SML alone, {BLANKS} blanks": task + [("rl.credit", "uniform")],
          f"oracle token_reward + SML, {BLANKS} blanks": task + [("rl.credit", "token_reward")]}
