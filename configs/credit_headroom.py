"""Step 1 of the credit pre-registration (``docs/results/credit_preregistration.md``): the room a task
variant leaves for credit, measured as the per-cell oracle's validation ``strict_solved`` minus SML
alone's, from the same SFT warm start per seed, on the fixed 5,000-item validation split:

  python experiments/reproduce.py --workdir=runs/headroom_b10 --preset=credit \\
      --study=configs/credit_headroom.py:10 --seeds=0,1

The part after ':' is the variant's ``task.num_blanks`` (8, 10 or 11; default :data:`BLANKS`). Every arm
of a workdir must share the task variant (the grid caches one SFT warm start per task and seed), so a
variant is one workdir.
"""

BLANKS = 10  # task.num_blanks of the variant measured when the study names none (the main job: 8)
VARIANTS = (8, 10, 11)  # the pre-registration's candidates


def get_arms(blanks: str | int = BLANKS) -> dict[str, list[tuple[str, object]]]:
  """Arm name → ``[(dotted.field, value), ...]``: SML alone and the oracle on the ``blanks`` variant.

  Raises:
    ValueError: ``blanks`` is not one of :data:`VARIANTS`.
  """
  n = int(blanks) if str(blanks).isdigit() else None
  if n not in VARIANTS:
    raise ValueError(f"configs/credit_headroom.py: variant {blanks!r} is not one of {VARIANTS} (task.num_blanks)")
  task = [("task.num_blanks", n)]
  return {f"SML alone, {n} blanks": task + [("rl.credit", "uniform")],
          f"oracle token_reward + SML, {n} blanks": task + [("rl.credit", "token_reward")]}
