"""A run's preflight: its own rollout and update compiled for the machine it will run on, before any weight
is read, and the verdict whether they fit (``experiments/train.py --compile_only --target=...``).

The programs are the run's: its config as given (the checkpoint's architecture from ``config.json``, no
weights read; its own device layout, which must span the target's devices), its task's prompt length
with its tokenizer, its mask and end-of-sequence ids, LoRA as the main job builds it. They are compiled
by the target's own compiler (:mod:`daca_jax.planning.targets`; a TPU slice or GPU node compiles on
any host), and the verdict is read off the compiler's memory analysis: an iteration's peak per device
(the rollout beside the resident optimizer state and reference, or the update) against
``usable_fraction`` of the device's memory. A run that does not fit is one line naming the program, by
how much, and its largest buffers.

With ``executables_dir`` the compiled programs are also written there
(``jax.experimental.serialize_executable``) with a manifest naming the machine they were compiled for;
:mod:`daca_jax.parallel.aot` loads them in the run on a matching machine instead of compiling.
"""
from __future__ import annotations

import contextlib
import dataclasses
import pathlib
from typing import Any, Callable, Mapping

from daca_jax.errors import DoesNotFit
from daca_jax.planning import hlo_text
from daca_jax.planning.devices import device_spec
from daca_jax.planning.plan import GB, plan_from_config
from daca_jax.planning.targets import Target

# Remedies a run that does not fit can try, in the order of what they cost (daca_jax/config/).
_REMEDIES = ("model.remat=full", "model.logprob_chunk", "a smaller rl.rollout_batch", "rl.grad_accum",
             "likelihood.strata_batch=1", "model.lora_rank")


@dataclasses.dataclass(frozen=True)
class Verdict:
  """Whether a run's iteration fits a device.

  Attributes:
    fits: the iteration's peak per device is at most ``usable_bytes``.
    peak_bytes: that peak; program: the program that sets it ("rollout" beside the resident optimizer
      state and reference, or "update").
    usable_bytes: ``usable_fraction`` of the device's memory.
    margin_bytes: ``usable_bytes - peak_bytes`` (negative: short by that much).
    line: the verdict in one line.
  """

  fits: bool
  peak_bytes: float
  program: str
  usable_bytes: float
  margin_bytes: float
  line: str


def verdict(record: Mapping[str, Any], target: Target, usable_fraction: float,
            largest: Mapping[str, list[tuple[float, str, str]]] | None = None) -> Verdict:
  """The :class:`Verdict` of a plan record for ``target``'s device (``largest``: each program's largest
  buffers, :func:`daca_jax.planning.hlo_text.largest_buffers`, named when it does not fit)."""
  dev = device_spec(target.device)
  usable = usable_fraction * dev.hbm_bytes
  s = record["state_bytes"]
  rollout_phase = record["rollout"]["memory"]["peak_bytes"] + s["optimizer"] + s["reference"]
  update = record["update_peak_bytes"]
  program = "rollout" if rollout_phase >= update else "update"
  peak = max(rollout_phase, update)
  compiler = record.get("compiler", {})
  machine = (f"{target.name} ({compiler.get('compiler', 'XLA')}, {target.num_devices} x "
             f"{compiler.get('device_kind', target.device)})")
  budget = f"{usable / GB:.1f} GB usable ({usable_fraction:.0%} of {dev.hbm_bytes / GB:.0f} GB)"
  parts = (f"rollout {record['rollout']['memory']['peak_bytes'] / GB:.1f} GB + resident optimizer state and "
           f"reference {(s['optimizer'] + s['reference']) / GB:.1f} GB, update {update / GB:.1f} GB")
  if peak <= usable:
    line = (f"fits {machine}: iteration peak {peak / GB:.1f} GB per device of {budget}, {(usable - peak) / GB:.1f} GB "
            f"to spare ({parts})")
  else:
    what = ("the rollout (beside the resident optimizer state and reference)" if program == "rollout"
            else "the update")
    big = ", ".join(f"{shape} {b / GB:.2f} GB ({where})" for b, shape, where in (largest or {}).get(program, []))
    line = (f"does not fit {machine}: {what} needs {peak / GB:.1f} GB per device, {(peak - usable) / GB:.1f} GB over "
            f"the {budget} ({parts})" + (f"; its largest buffers: {big}" if big else "")
            + f"; try {', '.join(_REMEDIES)}")
  return Verdict(peak <= usable, peak, program, usable, usable - peak, line)


def preflight(config: Mapping[str, Any] | Any, target: Target, *, usable_fraction: float = 0.9,
              executables_dir: str | pathlib.Path | None = None,
              log: Callable[[str], None] = print) -> tuple[Verdict, dict[str, Any]]:
  """Compiles the run of ``config`` for ``target`` and says whether it fits (module docstring).

  Args:
    config: what ``experiments/train.py --config`` takes.
    target: the machine (its devices must be this process's for ``cpu:N``: the entry point sets them).
    usable_fraction: the share of a device's memory a run may use (allocator and runtime reserve the rest).
    executables_dir: where to write the serialized executables and their manifest (None: not written).
    log: receives the lines of what was compiled.
  Returns:
    ``(verdict, plan record)``; the verdict's ``fits`` is True.
  Raises:
    DoesNotFit: the run does not fit (the one line of :func:`verdict`).
    ConfigError, DataError: a bad field, a layout that does not span the target's devices, an unreadable
      checkpoint folder or data (before any compile).
  """
  from daca_jax.planning.preset import resolve_plan_config

  cfg, notes = resolve_plan_config(config, num_devices=target.num_devices, as_run=True)
  prompt_len, mask_id, eos_id, run_cfg = _run_facts(cfg)
  if executables_dir is not None:  # a workdir holding another run: refused as that run's resume would be
    from daca_jax.run.workdir import check_workdir_config

    from daca_jax import storage
    from daca_jax.run import lease

    workdir = storage.as_path(executables_dir).parent
    if workdir.is_dir():
      lease.check_free(workdir)  # a run training there now: its executables are not replaced under it
      check_workdir_config(workdir, run_cfg, write=False)
  from daca_jax.parallel import aot

  compiled: dict[str, Any] = {}
  try:
    # executables to be saved are compiled fresh, not loaded from a persistent compilation cache
    with aot.fresh_compiles() if executables_dir is not None else contextlib.nullcontext():
      record = plan_from_config(cfg, prompt_len=prompt_len, num_devices=target.num_devices, notes=notes,
                                target=None if target.simulated else target, executables=compiled,
                                token_ids=(mask_id, eos_id))
  except DoesNotFit as e:  # the compiler refused a program outright (XLA:TPU checks its memory at compile time)
    raise DoesNotFit(f"{e}; try {', '.join(_REMEDIES)}") from None
  log(f"compiled the run's rollout ({record['rollout']['compile_s']:.0f} s) and update "
      f"({record['update']['compile_s']:.0f} s) for {target.name}: P {prompt_len} prompt tokens")
  largest = {name: hlo_text.largest_buffers(hlo_text.parse(c.as_text())) for name, c in compiled.items()}
  result = verdict(record, target, usable_fraction, largest)
  if executables_dir is not None:
    programs = {name: (c, record[name]["lowered_sha256"]) for name, c in compiled.items()}
    written = aot.write(executables_dir, programs, target=target.name, hosts=target.hosts)
    log(f"wrote the executables to {written} (the run on a matching machine loads them instead of compiling)")
  if not result.fits:
    raise DoesNotFit(result.line)
  return result, record


def _run_facts(cfg: Any) -> tuple[int, int, int, Any]:
  """The run's prompt length P, its ``[MASK]`` and end-of-sequence ids (baked into its programs) and its
  config as the main job resolves it, from its task and tokenizer as the main job builds them (the
  checkpoint's tokenizer files, no weights)."""
  from daca_jax.run import from_checkpoint, task_views

  tokenizer = None
  if cfg.model.init_checkpoint:
    cfg, start = from_checkpoint.resolve_config(cfg, log=lambda *_: None)
    tokenizer = start.tokenizer
  task = task_views.build_task(cfg, tokenizer)
  return int(task.prompt_len), int(task.tokenizer.mask_id), int(task.tokenizer.eos_id), cfg


__all__ = ["Verdict", "preflight", "verdict"]
