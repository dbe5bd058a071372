"""NaN/inf guard for training steps: stop at the first non-finite value, never save one.

A step's loss, gradient norm and new state (parameters, optimizer state, credit state) are reduced
on device to one int32 *code*: 0 when every floating-point value is finite, else 1 + the index in
:data:`QUANTITIES` of the first quantity holding a NaN or inf. No extra host transfer per step:

* a loop that reads its metrics every step (RL) reads the code with them (:func:`step_flag`);
* a loop that does not (SFT logs every few steps) folds the code into a sticky on-device *flag*
  ``int32 [2] = (step, code)`` inside its jitted step (:func:`keep_finite`), which also refuses
  the non-finite update (the state stays the last finite one), and reads the flag only where it
  reads metrics anyway and before every checkpoint save.

:func:`check` raises :class:`~daca_jax.errors.NonFiniteError` naming the phase, the step and the
quantity, after the checkpoints in flight are on disk, so a rerun resumes from the last finite one.
"""
from __future__ import annotations

from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from daca_jax.errors import DataError, NonFiniteError
from daca_jax.parallel.distributed import to_host

# Checked quantities, in reporting order (the first non-finite one is named): key -> description.
QUANTITIES = {"loss": "loss", "grad_norm": "gradient norm", "params": "parameters",
              "opt_state": "optimizer state", "credit": "credit state"}


def _all_finite(tree: Any) -> jax.Array:
  """bool scalar: every inexact (float/complex) leaf of ``tree`` is finite; integer leaves and PRNG
  keys are skipped."""
  ok = jnp.bool_(True)
  for x in jax.tree.leaves(tree):
    x = jnp.asarray(x)
    if jnp.issubdtype(x.dtype, jnp.inexact):
      ok = ok & jnp.all(jnp.isfinite(x))
  return ok


def nonfinite_code(quantities: Mapping[str, Any]) -> jax.Array:
  """int32 scalar: 0 if every quantity is finite, else 1 + the :data:`QUANTITIES` index of the first
  non-finite one.

  Args:
    quantities: keys of :data:`QUANTITIES` -> pytrees (``None`` values are skipped).
  Raises:
    KeyError: a key that is not in :data:`QUANTITIES`.
  """
  for key in quantities:
    if key not in QUANTITIES:
      raise KeyError(f"unknown guarded quantity {key!r}; expected one of {list(QUANTITIES)}")
  code = jnp.int32(0)
  for i, key in reversed(list(enumerate(QUANTITIES))):  # the earliest non-finite one wins
    if quantities.get(key) is not None:
      code = jnp.where(_all_finite(quantities[key]), code, jnp.int32(i + 1))
  return code


def clear_flag() -> np.ndarray:
  """The initial sticky flag, int32 [2] ``(step, code) = (0, 0)``: nothing non-finite yet."""
  return np.zeros(2, np.int32)


def keep_finite(old: Any, new: Any, flag: jax.Array, step: jax.Array,
                **scalars: Any) -> tuple[Any, jax.Array]:
  """Inside a jitted step: ``new`` if it and ``scalars`` are finite and the flag is clear, else ``old``.

  Args:
    old: the state before the step (a dict with keys of :data:`QUANTITIES`, e.g. params, opt_state).
    new: the state after it, same structure.
    flag: int32 [2] sticky flag from :func:`clear_flag` or the previous step.
    step: int32 scalar, the number of this step (reported by :func:`check`).
    **scalars: further quantities, e.g. ``loss=..., grad_norm=...``.
  Returns:
    ``(state, flag)``: the flag records the first non-finite ``(step, code)`` and keeps it; once it
    is set every later update is refused as well.
  """
  code = nonfinite_code({**scalars, **new})
  ok = (code == 0) & (flag[1] == 0)
  state = jax.lax.cond(ok, lambda: new, lambda: old)
  flag = jnp.where(flag[1] == 0, jnp.stack([jnp.asarray(step, jnp.int32), code]), flag)
  return state, flag


@jax.jit
def step_flag(step: jax.Array, quantities: Mapping[str, Any]) -> jax.Array:
  """The flag ``int32 [2] = (step, code)`` of one step, computed on device (one small jitted call)."""
  return jnp.stack([jnp.asarray(step, jnp.int32), nonfinite_code(quantities)])


def check(phase: str, flag: Any, checkpointer: Any = None) -> None:
  """Reads a flag on the host; stops the run on a non-finite value.

  Args:
    phase: "SFT" / "RL", for the message.
    flag: int32 [2] ``(step, code)`` from :func:`keep_finite` or :func:`step_flag`.
    checkpointer: the phase's :class:`~daca_jax.run.checkpoint.Checkpointer`; on a stop it is closed
      (its in-flight saves finish: all of them hold finite states) and the message names its
      latest step, the one a rerun resumes from.
  Raises:
    NonFiniteError: the flag is set.
  """
  step, code = (int(v) for v in to_host(flag))  # (whole on every process of a multi-host run)
  if code == 0:
    return
  resume = "A rerun starts this phase from scratch (no checkpoint of it was saved)."
  if checkpointer is not None:
    steps = checkpointer.all_steps()
    checkpointer.close()
    if steps:
      resume = (f"The last finite checkpoint is {checkpointer.directory}/{steps[-1]}; a rerun resumes "
                "from it.")
  raise NonFiniteError(phase, step, list(QUANTITIES.values())[code - 1],
                       resume + " A divergence caused by the config (e.g. a too large learning rate) "
                       "recurs: start a new --workdir with a changed config.")


def check_restored(state: Mapping[str, Any], where: str) -> None:
  """Refuses a restored training state that holds NaN/inf (e.g. saved by a run that diverged before
  this guard existed), so that the caller falls back to an earlier checkpoint.

  Args:
    state: dict with keys of :data:`QUANTITIES` (``params``, ``opt_state``, ``credit``).
    where: the checkpoint, for the message.
  Raises:
    DataError: naming ``where`` and the first non-finite quantity.
  """
  code = int(to_host(step_flag(0, dict(state)))[1])
  if code:
    raise DataError(f"{where} holds non-finite {list(QUANTITIES.values())[code - 1]} (NaN or inf)")
