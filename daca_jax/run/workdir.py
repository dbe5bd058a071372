"""The main job's workdir: what it holds, what a rerun reuses and what it runs again.

What a workdir holds (process 0 writes every file; the other processes of a multi-host run write none):

* ``config.json``: the run's config (:func:`check_workdir_config` refuses to resume another run in it);
* ``sft/<step>/`` and ``sft_metrics.jsonl``: the SFT warm start's checkpoints and loss log (``sft_dir``
  may be a folder shared by several runs);
* ``eval_before.json``, ``val_before.json``, ``eval_after.json``: cached evaluations, each with its
  fingerprint, generations and per-example outcomes (:mod:`daca_jax.run.job_eval`);
* ``rl/<step>/``, ``metrics.jsonl`` and ``val_step<N>.json``: RL's checkpoints, one metrics line per
  iteration, the validation passes (:func:`val_name`);
* ``results.json`` and the plots (:mod:`daca_jax.run.results`).

What a rerun does with them:

* reuses a phase whose last checkpoint reached its step count (:class:`PhaseResult` says
  ``trained=False``) and an evaluation whose fingerprint matches (same settings, same trained steps);
* resumes a phase from its latest readable checkpoint (:func:`open_phase`; a damaged one is set aside),
  dropping the metrics lines logged after it (``MetricsWriter.truncate_after``);
* runs again an evaluation whose fingerprint differs, and anything never finished. A SIGTERM ends a phase
  with a checkpoint of the step it reached (:func:`save_and_stop`).
"""
from __future__ import annotations

import json
import pathlib
import time
from typing import Any, Callable, NamedTuple

from daca_jax import io_utils, parallel, storage
from daca_jax.data import loader
from daca_jax.config import configure
from daca_jax.errors import ConfigError, DataError
from daca_jax.run import guards, preemption
from daca_jax.run.checkpoint import Checkpointer
from daca_jax.run.dashboards import Dashboard, PhaseSink
from daca_jax.run.metrics import MetricsWriter
from daca_jax.config.train import TrainConfig

# Config fields that may change between a run and its resumption (they do not change what is trained;
# rl.steps only while the learning-rate schedule does not depend on it, see check_workdir_config).
# data.tfds_dir: the datasets moved (a read checks each split against the digest its build stored).
_RESUMABLE_CHANGES = ("rl.steps", "rl.eval_every", "eval.", "checkpoint.", "task.num_eval_examples", "log.",
                      "data.tfds_dir")


class PhaseResult(NamedTuple):
  """What a training phase returns (:func:`daca_jax.run.sft_loop.run_sft`, :func:`daca_jax.run.rl_loop.run_rl`).

  Attributes:
    params: the policy's parameters after the phase (a pytree; global arrays in a multi-process run).
    trained: whether this call ran training steps; False when the phase is off (0 steps) or was already
      complete in the workdir and is reused from its last checkpoint.
  """

  params: Any
  trained: bool


def val_name(step: int) -> str:
  """The name of the validation pass after RL iteration ``step`` (its outcomes file: ``val_step<N>.outcomes.jsonl``)."""
  return f"val_step{step}.json"


def has_saved_state(workdir: pathlib.Path) -> bool:
  """Whether the workdir holds anything a rerun would reuse (checkpoints or cached evaluations)."""
  steps = [p for d in ("sft", "rl") for p in (workdir / d).glob("[0-9]*")]
  return bool(steps) or (workdir / "eval_before.json").exists()


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
  out = {}
  for k, v in d.items():
    if isinstance(v, dict):
      out.update(_flatten(v, f"{prefix}{k}."))
    else:
      out[f"{prefix}{k}"] = v
  return out


def check_workdir_config(workdir: pathlib.Path, cfg: TrainConfig, write: bool = True) -> None:
  """Records the config in ``workdir/config.json``; refuses to resume a run with a different one
  (``write=False``: only refuses, as a preflight of the run does).

  A workdir without saved state (e.g. a run that failed before its first checkpoint) takes the new
  config. Fields added to the config since the workdir was written compare equal to their defaults.

  Raises:
    ConfigError: ``workdir`` holds saved state of a run whose config differs in a field that changes
      training (``rl.steps`` included once RL iterations are saved under ``rl.lr_schedule="cosine"``).
  """
  path = workdir / "config.json"
  new = _flatten(json.loads(json.dumps(cfg.to_dict())))
  if path.exists() and has_saved_state(workdir):
    defaults = _flatten(json.loads(json.dumps(TrainConfig().to_dict())))
    old = {**defaults, **_flatten(configure.upgrade_config_dict(io_utils.read_json(path, fix=(
        "it records the config of the run in this workdir: restore it, delete it to continue "
        "with the current config, or use a new --workdir"))))}
    diff = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)
            and not any(k == f or (f.endswith(".") and k.startswith(f)) for f in _RESUMABLE_CHANGES)]
    if diff:
      k = diff[0]
      raise ConfigError(k, new.get(k), f"{old.get(k)!r} as in the run already in --workdir={workdir} "
                        f"(differing fields: {diff}); use a new --workdir to start a different run")
    if (old.get("rl.steps") != new.get("rl.steps") and new.get("rl.lr_schedule") == "cosine"
        and any((workdir / "rl").glob("[0-9]*"))):
      # The cosine decays over rl.steps: the iterations already done followed another schedule, so the
      # resumed run would be neither the old run nor the new one.
      raise ConfigError("rl.steps", new.get("rl.steps"), f"{old.get('rl.steps')!r} as in the run already in "
                        f"--workdir={workdir}: with rl.lr_schedule='cosine' the learning rate decays over "
                        "rl.steps, and the iterations done followed that schedule; use a new --workdir for a "
                        "run of another length (or rl.lr_schedule='constant', whose runs can be extended)")
  if not write or not parallel.is_primary():
    return
  io_utils.atomic_write_json(path, cfg.to_dict())


class PhaseStart(NamedTuple):
  """Where a phase starts (:func:`open_phase`): its checkpointer, state, step and that checkpoint's metadata."""

  ckpt: Checkpointer
  state: dict[str, Any]
  step: int
  metadata: dict[str, Any]


def open_phase(directory: pathlib.Path, state: dict[str, Any], max_to_keep: int,
               log: Callable[[str], None] = print) -> PhaseStart:
  """Opens a phase's checkpoint directory: the checkpointer, the latest readable state (or ``state``), its
  step and its metadata (``{}`` for a fresh phase). An unreadable checkpoint (damaged on disk: unreadable
  files or a checksum mismatch) or one holding NaN/inf is set aside for the one before it, loudly.

  Raises:
    DataError: checkpoints exist but none of them can be read.
  """
  ckpt = Checkpointer(directory, max_to_keep=max_to_keep)
  steps = sorted(ckpt.all_steps(), reverse=True)
  for step in steps:
    try:
      restored, metadata = ckpt.restore(step, state)
      guards.check_restored(restored, f"checkpoint {directory / str(step)}")  # e.g. from before the guard
      return PhaseStart(ckpt, restored, step, metadata)
    except Exception as e:  # orbax/tensorstore raise many types for damaged files
      aside = directory.parent / f"{directory.name}_unreadable_step{step}_{int(time.time())}"
      log(f"WARNING: checkpoint {directory / str(step)} is unreadable ({type(e).__name__}: "
          f"{str(e).splitlines()[0][:200] if str(e) else ''}); moved it to {aside} and trying the one "
          "before it.")
      ckpt.close()
      if parallel.is_primary():
        storage.move_tree(directory / str(step), aside)
      parallel.sync_processes("checkpoint_set_aside")
      ckpt = Checkpointer(directory, max_to_keep=max_to_keep)  # re-list the steps without it
  if steps:
    raise DataError(f"no checkpoint in {directory} can be read (steps {sorted(steps)}); "
                    "remove the damaged step folders or use a new --workdir")
  return PhaseStart(ckpt, state, 0, {})


def phase_metadata(phase: str, step: int, batches: Any) -> dict[str, Any]:
  """A checkpoint's metadata: its phase, its step and the data iterator's state (:mod:`daca_jax.data.loader`)."""
  return {"phase": phase, "step": step, loader.STATE_KEY: loader.iterator_state(batches)}


def save_and_stop(ckpt: Checkpointer, phase: str, step: int, state: dict[str, Any], directory: pathlib.Path,
                  log: Callable[[str], None], metadata: dict[str, Any]) -> None:
  """Saves ``state`` with ``metadata`` as checkpoint ``step`` (unless the schedule just did), waits until it
  is on disk and raises :class:`~daca_jax.run.preemption.Preempted`."""
  log(f"{phase}: SIGTERM received; saving the checkpoint of step {step} and stopping.")
  ckpt.save(step, state, metadata=metadata)
  ckpt.close()
  raise preemption.Preempted(phase, step, directory)


class _NoWriter:
  """Stands in for :class:`MetricsWriter` on the processes of a multi-host run that are not primary
  (process 0 alone writes the run's files)."""

  def __enter__(self) -> "_NoWriter":
    return self

  def __exit__(self, *exc: Any) -> None:
    return None

  def truncate_after(self, step: int) -> None:
    del step

  def write(self, step: int, metrics: dict[str, Any]) -> None:
    del step, metrics


def metrics_writer(path: pathlib.Path, log: Callable[[str], None],
                   mirror: PhaseSink | None = None) -> MetricsWriter | _NoWriter:
  """A phase's metrics log at ``path`` (mirrored to ``mirror``) on process 0; a writer of nothing elsewhere."""
  return MetricsWriter(path, log=log, mirror=mirror) if parallel.is_primary() else _NoWriter()


def phase_sink(dashboard: Dashboard | None, phase: str, start: int) -> PhaseSink | None:
  """``dashboard``'s run ``phase``, resumed after step ``start`` (None without a dashboard)."""
  return dashboard.sink(phase, resume_after=start) if dashboard is not None else None
