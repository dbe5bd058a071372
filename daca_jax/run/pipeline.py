"""The main job: SFT warm start → evaluation → GRPO (DACA or a baseline) → evaluation.

Everything ``experiments/train.py`` does lives here so it can be imported and tested. Each phase is
resumable from ``workdir``: the SFT warm start is cached in ``workdir/sft`` (reused when the job is
run again), evaluations are cached as JSON, RL checkpoints live in ``workdir/rl``. Data order and PRNG
keys are pure functions of ``(seed, step)``, so a run killed mid-way and resumed reproduces the
uninterrupted run.
"""
from __future__ import annotations

import dataclasses
import json
import pathlib
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from daca_jax import configure, parallel
from daca_jax import io_utils
from daca_jax.hardware import device_peak_bytes
from daca_jax.progress import PhaseProgress
from daca_jax.run import from_checkpoint, guards, preemption
from daca_jax.run.checkpoint import Checkpointer
from daca_jax.credit import CREDIT, TAGGERS
from daca_jax.diffusion.sft import sft_loss
from daca_jax.errors import ConfigError, DataError
from daca_jax.run.dashboards import Dashboard, PhaseSink, check_log_config
from daca_jax.run.metrics import MetricsWriter, format_table, plot_curves, read_metrics, reward_trend
from daca_jax.models import count_params, init_model, lora, make_logits_fn
from daca_jax.run.job_eval import JobEvaluator
from daca_jax.run.preflight import check_batches_fit
from daca_jax.run.task_views import (TaskViews, build_task, build_task_views, check_gen_length,  # noqa: F401
                                     draw_splits, task_kwargs)  # build_task, task_kwargs: re-exported
from daca_jax.rl.learner import GRPOLearner
from daca_jax.rl.downsample import select_rows, take_rows
from daca_jax.rl.optim import make_optimizer
from daca_jax.tasks.base import TASKS, Example, Task
from daca_jax.tasks.training_rewards import training_rewards
from daca_jax.types import TrainConfig

# Config fields that may change between a run and its resumption (they do not change what is trained;
# rl.steps only while the learning-rate schedule does not depend on it, see check_workdir_config).
_RESUMABLE_CHANGES = ("rl.steps", "rl.eval_every", "eval.", "checkpoint.", "task.num_eval_examples", "log.")
_SFT_STREAM, _RL_STREAM, _EVAL_STREAM, _LORA_STREAM = 1, 2, 3, 4
PLUMBING_NOTE = ("This is a plumbing check (log.plumbing_check, the smoke presets): a tiny model trained for a "
                 "few steps to show that every stage runs end to end. Its metrics are expected to be near "
                 "zero; that is not a failure. Drop ':smoke' from --config for a real run.")


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
  out = {}
  for k, v in d.items():
    if isinstance(v, dict):
      out.update(_flatten(v, f"{prefix}{k}."))
    else:
      out[f"{prefix}{k}"] = v
  return out


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


def _metrics_writer(path: pathlib.Path, log: Callable[[str], None], mirror: PhaseSink | None = None) -> Any:
  return MetricsWriter(path, log=log, mirror=mirror) if parallel.is_primary() else _NoWriter()


def _sink(dashboard: Dashboard | None, phase: str, start: int) -> PhaseSink | None:
  return dashboard.sink(phase, resume_after=start) if dashboard is not None else None


def _val_name(step: int) -> str:
  """The name of the validation pass after RL iteration ``step`` (its outcomes file: ``val_step<N>.outcomes.jsonl``)."""
  return f"val_step{step}.json"


def _has_saved_state(workdir: pathlib.Path) -> bool:
  """Whether the workdir holds anything a rerun would reuse (checkpoints or cached evaluations)."""
  steps = [p for d in ("sft", "rl") for p in (workdir / d).glob("[0-9]*")]
  return bool(steps) or (workdir / "eval_before.json").exists()


def check_workdir_config(workdir: pathlib.Path, cfg: TrainConfig) -> None:
  """Records the config in ``workdir/config.json``; refuses to resume a run with a different one.

  A workdir without saved state (e.g. a run that failed before its first checkpoint) takes the new
  config. Fields added to the config since the workdir was written compare equal to their defaults.

  Raises:
    ConfigError: ``workdir`` holds saved state of a run whose config differs in a field that changes
      training (``rl.steps`` included once RL iterations are saved under ``rl.lr_schedule="cosine"``).
  """
  path = workdir / "config.json"
  new = _flatten(json.loads(json.dumps(cfg.to_dict())))
  if path.exists() and _has_saved_state(workdir):
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
  if not parallel.is_primary():
    return
  io_utils.atomic_write_json(path, cfg.to_dict())


def _open_phase(directory: pathlib.Path, state: dict[str, Any], max_to_keep: int,
                log: Callable[[str], None] = print) -> tuple[Checkpointer, dict[str, Any], int]:
  """Opens a phase's checkpoint directory; returns (checkpointer, latest readable state or ``state``,
  its step). An unreadable checkpoint (damaged on disk: unreadable files or a checksum mismatch) or
  one holding NaN/inf is set aside for the one before it, loudly.

  Raises:
    DataError: checkpoints exist but none of them can be read.
  """
  ckpt = Checkpointer(directory, max_to_keep=max_to_keep)
  steps = sorted(ckpt.all_steps(), reverse=True)
  for step in steps:
    try:
      restored, _ = ckpt.restore(step, state)
      guards.check_restored(restored, f"checkpoint {directory / str(step)}")  # e.g. from before the guard
      return ckpt, restored, step
    except Exception as e:  # orbax/tensorstore raise many types for damaged files
      aside = directory.parent / f"{directory.name}_unreadable_step{step}_{int(time.time())}"
      log(f"WARNING: checkpoint {directory / str(step)} is unreadable ({type(e).__name__}: "
          f"{str(e).splitlines()[0][:200] if str(e) else ''}); moved it to {aside} and trying the one "
          "before it.")
      ckpt.close()
      if parallel.is_primary():
        (directory / str(step)).rename(aside)
      parallel.sync_processes("checkpoint_set_aside")
      ckpt = Checkpointer(directory, max_to_keep=max_to_keep)  # re-list the steps without it
  if steps:
    raise DataError(f"no checkpoint in {directory} can be read (steps {sorted(steps)}); "
                    "remove the damaged step folders or use a new --workdir")
  return ckpt, state, 0


def run_sft(cfg: TrainConfig, task: Task, examples: list[Example], logits_fn: Callable[..., Any],
            params: Any, sft_dir: pathlib.Path, *, show_progress: bool = True,
            log: Callable[[str], None] = print, mesh: Any = None, dashboard: Dashboard | None = None) -> Any:
  """SFT warm start with the masked-diffusion SFT loss; cached and resumable in ``sft_dir``
  (its loss log goes to ``<sft_dir>_metrics.jsonl`` beside it).

  In a multi-process run (``mesh`` given) each process feeds its slice of every batch and the state
  is global (the jitted step is partitioned over the mesh by its inputs' shardings). ``dashboard``
  receives the same scalars (TensorBoard run ``sft``)."""
  sft = cfg.sft
  if sft.steps == 0:
    return params, False
  optimizer, schedule = make_optimizer(sft.learning_rate, sft.warmup_steps, sft.weight_decay,
                                       sft.max_grad_norm, decay_steps=max(sft.steps - sft.warmup_steps, 1))
  template = parallel.to_global({"params": params, "opt_state": optimizer.init(params)}, mesh)
  ckpt, state, start = _open_phase(sft_dir, template, cfg.checkpoint.max_to_keep, log)
  if start >= sft.steps:
    log(f"SFT warm start: reusing the cached model in {sft_dir} (step {start}).")
    ckpt.close()
    return state["params"], False
  if start:
    log(f"SFT: resuming from step {start}.")
  p = task.prompt_len
  tokens = np.concatenate([task.encode_prompts(examples),
                           task.encode_targets(examples, cfg.rollout.gen_length)], axis=1)
  mask_id = task.tokenizer.mask_id

  @jax.jit
  def train_step(state, batch, key, flag, step):
    (loss, aux), grads = jax.value_and_grad(
        lambda prm: sft_loss(logits_fn, prm, batch, p, key, mask_id), has_aux=True)(state["params"])
    updates, opt_state = optimizer.update(grads, state["opt_state"], state["params"])
    new = {"params": optax.apply_updates(state["params"], updates), "opt_state": opt_state}
    state, flag = guards.keep_finite(state, new, flag, step, loss=loss, grad_norm=optax.tree.norm(grads))
    return state, dict(aux, loss=loss), flag

  base_key = jax.random.fold_in(jax.random.PRNGKey(cfg.seed), _SFT_STREAM)
  log_every = max(1, min(25, sft.steps // 20))
  flag = parallel.to_global(guards.clear_flag(), mesh)  # sticky NaN/inf flag, read where metrics are
  sink = _sink(dashboard, "sft", start)
  with _metrics_writer(sft_dir.with_name(sft_dir.name + "_metrics.jsonl"), log, sink) as writer:
    writer.truncate_after(start)
    bar = PhaseProgress(range(start, sft.steps), desc="SFT", log=log, disable=not show_progress,
                        first=f"compiling the SFT step ({sft.steps - start} steps to run)")
    for step in bar:
      idx = np.random.default_rng([cfg.seed, _SFT_STREAM, step]).integers(0, len(tokens), sft.batch_size)
      batch = parallel.rows_to_devices(tokens[idx], mesh, "sft.batch_size")
      done = step + 1
      state, aux, flag = train_step(state, batch, parallel.to_global(jax.random.fold_in(base_key, step), mesh),
                                    flag, np.int32(done))
      if done % log_every == 0 or done % cfg.checkpoint.sft_every == 0 or done == sft.steps:
        guards.check("SFT", flag, ckpt)
      if done % log_every == 0 or done == sft.steps:
        m = {k: float(v) for k, v in aux.items()}
        m["lr"] = float(schedule(done))
        writer.write(done, m)
        bar.set_postfix(loss=f"{m['loss']:.3f}", acc=f"{m['token_acc']:.3f}")
      if done % cfg.checkpoint.sft_every == 0 or done == sft.steps:
        ckpt.save(done, state, metadata={"phase": "sft", "step": done})
      if preemption.stop_requested():
        guards.check("SFT", flag, ckpt)
        _save_and_stop(ckpt, "SFT", done, state, sft_dir, log)
  ckpt.close()
  return state["params"], True


def _save_and_stop(ckpt: Checkpointer, phase: str, step: int, state: dict[str, Any], directory: pathlib.Path,
                   log: Callable[[str], None]) -> None:
  """Saves ``state`` as checkpoint ``step`` (unless the schedule just did), waits until it is on disk and
  raises :class:`~daca_jax.run.preemption.Preempted`."""
  log(f"{phase}: SIGTERM received; saving the checkpoint of step {step} and stopping.")
  ckpt.save(step, state, metadata={"phase": phase.lower(), "step": step})
  ckpt.close()
  raise preemption.Preempted(phase, step, directory)


def rl_base_key(cfg: TrainConfig) -> jax.Array:
  """The key RL's iteration keys fold from: the seed's RL stream, folded with ``rl.replicate`` when it
  is > 0 (another draw from the same warm start; 0 keeps the stream earlier runs used, so they
  reproduce)."""
  key = jax.random.fold_in(jax.random.PRNGKey(cfg.seed), _RL_STREAM)
  return jax.random.fold_in(key, cfg.rl.replicate) if cfg.rl.replicate else key


def rl_prompt_rows(cfg: TrainConfig, step: int, num_examples: int) -> np.ndarray:
  """int64 ``[rl.prompts_per_step]``: the training rows RL iteration ``step`` draws (distinct), a pure
  function of ``(seed, rl.replicate, step)``."""
  replicate = [cfg.rl.replicate] if cfg.rl.replicate else []
  rng = np.random.default_rng([cfg.seed, _RL_STREAM, step] + replicate)
  return rng.choice(num_examples, cfg.rl.prompts_per_step, replace=False)


def run_rl(cfg: TrainConfig, task: Task, examples: list[Example], learner: GRPOLearner, params: Any,
           ref_params: Any, workdir: pathlib.Path, *, eval_fn: Callable[[Any, int], dict] | None = None,
           show_progress: bool = True, log: Callable[[str], None] = print, mesh: Any = None,
           dashboard: Dashboard | None = None) -> Any:
  """GRPO iterations with checkpoints in ``workdir/rl`` and one ``metrics.jsonl`` line per iteration
  (mirrored to ``dashboard``'s run ``rl``, with a trajectory image every ``log.trajectory_every``).
  A LoRA run from ``model.init_checkpoint`` leaves its frozen base out of the checkpoints
  (:class:`~daca_jax.run.from_checkpoint.RLCheckpointLayout`).

  In a multi-process run (``mesh`` given) every process draws the same prompts for a step, rolls
  out and grades its own share of them (whole groups), and the rewards form one global batch."""
  rl = cfg.rl
  if rl.steps == 0:
    return params, False
  template = {"params": params, "opt_state": learner.init_opt_state(params)}
  credit_state = learner.init_credit_state()
  if credit_state is not None:  # e.g. DTCA's entropy baseline: part of the run's resumable state
    template["credit"] = credit_state
  template = parallel.to_global(template, mesh)
  layout = from_checkpoint.rl_checkpoint_layout(cfg, template["params"])  # a LoRA run's frozen base left out
  ckpt, saved, start = _open_phase(workdir / "rl", layout.saved(template), cfg.checkpoint.max_to_keep, log)
  state = layout.full(saved)
  if start > rl.steps:
    ckpt.close()
    raise ConfigError("rl.steps", rl.steps, f">= {start}, the iteration this run already reached in "
                      f"{workdir / 'rl'} (use a new --workdir for a shorter run)")
  if start >= rl.steps:
    log(f"RL: already complete in {workdir / 'rl'} (iteration {start}); reusing it.")
    ckpt.close()
    return state["params"], False
  if start:
    log(f"RL: resuming from iteration {start}.")
  prompts_all = task.encode_prompts(examples)
  base_key = rl_base_key(cfg)
  g = rl.group_size
  n = rl.sample_group_size or g  # sampled per prompt; g of them trained on (daca_jax.rl.downsample)
  multi = mesh is not None and parallel.is_multiprocess()
  share = parallel.process_slice(rl.prompts_per_step) if multi else slice(None)
  sink = _sink(dashboard, "rl", start)
  with _metrics_writer(workdir / "metrics.jsonl", log, sink) as writer:
    writer.truncate_after(start)
    bar = PhaseProgress(range(start, rl.steps), desc=f"RL {rl.objective}", log=log, disable=not show_progress,
                        first=f"compiling the rollout and the update ({rl.steps - start} iterations to run)")
    for step in bar:
      idx = rl_prompt_rows(cfg, step, len(examples))
      mine = idx[share]  # this process's prompts (all of them in a single-process run)
      prompts = np.repeat(prompts_all[mine], n, axis=0)
      batch_examples = [examples[i] for i in mine for _ in range(n)]
      keys = jax.random.split(jax.random.fold_in(base_key, step))
      k_roll, k_upd = (parallel.to_global(k, mesh) for k in keys)
      t0 = time.perf_counter()
      traj = learner.rollout(state["params"], parallel.global_batch(prompts, mesh) if multi else prompts,
                             k_roll)
      completion_ids = parallel.to_host(traj.completion)
      t_roll = time.perf_counter() - t0
      if multi:  # rows of the global batch are in process order
        completion_ids = completion_ids[share.start * n:share.stop * n]
      completions = task.decode_completions(completion_ids)
      rewards, correct = training_rewards(cfg.task.reward, task, completions, batch_examples)
      sampled = rewards  # every rollout: the policy's reward, whatever the update trains on
      if n != g:  # one process (preflight): keep g of each group's n
        rows = np.asarray(select_rows(rewards, n, g, rl.downsample, jax.random.fold_in(k_roll, 1)))
        traj = take_rows(traj, jnp.asarray(rows))
        completion_ids, rewards = completion_ids[rows], rewards[rows]
        batch_examples = [batch_examples[i] for i in rows]
      t1 = time.perf_counter()
      rewards_in = parallel.global_batch(rewards, mesh) if multi else jnp.asarray(rewards)
      rewards = parallel.to_host(rewards_in) if multi else rewards  # every row, for the metrics
      if multi:
        sampled = rewards  # n == g there (preflight): every process's rows
      token_rewards = None
      if learner.credit.needs_token_rewards:  # the oracle credit: the task grades every token
        token_rewards = task.token_rewards(completion_ids, batch_examples)
        if multi:
          token_rewards = tuple(parallel.global_batch(x, mesh) for x in token_rewards)
      credit = learner.assign_credit(traj, rewards_in, state.get("credit"), token_rewards)
      weights = credit.weights if credit.token_advantages is None else (credit.weights,
                                                                         credit.token_advantages)
      params_new, opt_state, m = learner.update(state["params"], state["opt_state"], ref_params, traj,
                                                rewards_in, weights, k_upd)
      guards.check("RL", guards.step_flag(step + 1, {"loss": m.get("loss"), "grad_norm": m.get("grad_norm"),
                   "params": params_new, "opt_state": opt_state, "credit": credit.state}), ckpt)
      state = dict(state, params=params_new, opt_state=opt_state)
      if credit.state is not None:
        state["credit"] = credit.state
      m = {k: float(v) for k, v in {**m, **credit.metrics}.items()}
      t_upd = time.perf_counter() - t1
      done = step + 1
      lengths = parallel.to_host(traj.completion_mask).sum(-1)
      if n != g:
        m.update(kept_reward_mean=float(rewards.mean()), kept_reward_std=float(rewards.std()))
      m.update(reward_mean=float(sampled.mean()), reward_std=float(sampled.std()),
               reward_max=float(sampled.max()),
               accuracy=float(np.mean(parallel.to_host(parallel.global_batch(correct, mesh)) if multi else correct)),
               completion_length=float(lengths.mean()),
               lr=float(learner.schedule(done * rl.num_iterations)),
               rollout_s=t_roll, update_s=t_upd,
               rollout_tokens_per_s=float(sampled.shape[0] * cfg.rollout.gen_length / max(t_roll, 1e-9)),
               includes_compile=float(step == start))  # first iteration of a process: times include jit
      peak = device_peak_bytes()  # the allocator's peak so far (GPU/TPU; none on CPU): plans are checked on it
      if peak is not None:
        m["device_peak_bytes"] = float(peak)
      if eval_fn is not None and rl.eval_every and (done % rl.eval_every == 0 or done == rl.steps):
        m.update({f"val/{k}": v for k, v in eval_fn(state["params"], done).items()})
      writer.write(done, m)
      every = cfg.log.trajectory_every
      if every and (done % every == 0 or done == rl.steps) and (cfg.log.tensorboard or cfg.log.wandb):
        # on every process: gathering a multi-host batch is a collective; process 0 alone draws it
        host = parallel.to_host({"traj": traj.replace(commit_hidden=None), "weights": credit.weights})
        if sink is not None:
          sink.image("trajectory", done, _trajectory_image(cfg, task, host["traj"], rewards, host["weights"],
                                                           batch_examples[0].prompt, done))
      bar.set_postfix(reward=f"{m['reward_mean']:.3f}", kl=f"{m['kl']:.4f}")
      if done % cfg.checkpoint.every == 0 or done == rl.steps:
        ckpt.save(done, layout.saved(state), metadata={"phase": "rl", "step": done})
      if preemption.stop_requested():
        _save_and_stop(ckpt, "RL", done, layout.saved(state), workdir / "rl", log)
  ckpt.close()
  return state["params"], True


def _trajectory_image(cfg: TrainConfig, task: Task, traj: Any, rewards: np.ndarray, weights: Any, prompt: str,
                      step: int) -> np.ndarray:
  """The first rollout group of an RL iteration as an image (:mod:`daca_jax.viz`): the very
  trajectory, rewards and credit weights the update used."""
  from daca_jax.viz import figure_rgb, group_view, progress_of

  view = group_view(traj, rewards, task.tokenizer, range(cfg.rl.group_size), prompt=prompt,
                    weights={cfg.rl.credit: weights}, progress=progress_of(traj, cfg))
  return figure_rgb([view], title=f"RL iteration {step}: {cfg.rl.objective} + credit={cfg.rl.credit}")


def run_main_job(cfg: TrainConfig, workdir: str | pathlib.Path, *, show_progress: bool = True,
                 log: Callable[[str], None] = print,
                 sft_dir: str | pathlib.Path | None = None) -> dict[str, Any]:
  """SFT warm start → eval → RL → eval; writes ``results.json``, ``metrics.jsonl`` and plots.

  ``sft_dir`` (default ``workdir/sft``) lets several runs with the same model/SFT/task config share
  one cached warm start (``experiments/reproduce.py`` does).

  Multi-host (``jax.distributed`` initialised, e.g. by ``experiments/train.py``): every process runs
  this with the same config and ``workdir`` (a directory all of them see); each feeds its share of
  every batch, arrays are global over ``cfg.parallel``'s mesh, and process 0 alone writes the files
  and prints.

  With ``model.init_checkpoint`` the model, its weights and the task's tokenizer come from that
  checkpoint folder and the SFT phase is skipped (:mod:`daca_jax.run.from_checkpoint`); a config with
  ``model.require_checkpoint`` (the paper presets) refuses to run without one. With
  ``task.train_prompt_style`` RL trains on another view of the task than evaluation reads
  (:mod:`daca_jax.run.task_views`); ``eval.protocol`` says how the test set and the validation split are
  decoded (:mod:`daca_jax.run.job_eval`).

  Returns:
    The results dict written to ``workdir/results.json``:
    ``{"eval_before", "eval_after", "config", "eval_source", "timings", "outcomes"}`` (and ``val_before`` /
    ``val_after`` with a validation split, ``eval_protocol`` under d1's protocol); ``outcomes`` names the
    workdir's per-example outcomes file of each of those evaluations (:mod:`daca_jax.evaluation.outcomes`).
  Raises:
    ConfigError: a config value that does not fit the task, a preset for a pretrained checkpoint run
      without one (``model.init_checkpoint``), or a workdir holding another run.
    FileNotFoundError: an explicitly configured data path that does not exist.
    DataError: a checkpoint folder (``model.init_checkpoint``) with missing or malformed files.
  """
  workdir = pathlib.Path(workdir)
  if cfg.model.require_checkpoint and not cfg.model.init_checkpoint:
    raise ConfigError("model.init_checkpoint", "", "the folder of a pretrained LLaDA / Dream checkpoint in the "
                      "Hugging Face layout (--config.model.init_checkpoint=DIR): this config "
                      "(model.require_checkpoint=True, e.g. a configs/paper.py preset) is a recipe for RL from a "
                      "pretrained model and sets no architecture; its ',smoke' form takes a tiny checkpoint "
                      "(tests/hf_fixtures.py writes one)")
  start = None
  if cfg.model.init_checkpoint:  # the architecture from the checkpoint, every file checked, no weights read
    cfg, start = from_checkpoint.resolve_config(cfg, log if parallel.is_primary() else (lambda *_: None))
  # before creating the workdir: a bad path leaves nothing behind
  warn = log if parallel.is_primary() else None
  views = build_task_views(cfg, start.tokenizer if start is not None else None, log=warn)
  task = views.eval
  if cfg.eval.protocol == "d1":
    for length in cfg.eval.lengths:
      check_gen_length(cfg, task, length, "eval.gen_lengths", warn)
  mesh = None
  if cfg.parallel.strategy != "none":
    mesh = parallel.make_mesh(cfg.parallel)  # a mesh that does not fit the devices fails before any work
  check_batches_fit(cfg, mesh)  # batches that do not split over processes/devices: before any work
  placement_mesh = mesh  # where a checkpoint's weights go, also in one process
  if parallel.is_multiprocess():
    if not parallel.is_primary():
      log, show_progress = (lambda *_: None), False
  else:
    mesh = None  # one process: the jitted steps place their own inputs
  if CREDIT.get(cfg.rl.credit).needs_token_rewards and not views.train.has_token_rewards:
    with_tokens = [n for n in TASKS.names() if TASKS.get(n).has_token_rewards]
    raise ConfigError("rl.credit", cfg.rl.credit, f"a credit that task {cfg.task.name!r} supports: it "
                      f"defines no token rewards (tasks that do: {with_tokens})")
  if CREDIT.get(cfg.rl.credit).needs_categories:
    TAGGERS.get(cfg.credit.dtca.tagger)(task.tokenizer)  # e.g. 'pos' without spaCy fails before any work
  check_log_config(cfg.log)  # e.g. W&B asked for but not installed: before any work
  if cfg.log.plumbing_check:
    log(PLUMBING_NOTE)
  eval_examples, source = task.eval_examples()
  if cfg.task.num_eval_examples:
    eval_examples = eval_examples[:cfg.task.num_eval_examples]
  if "GENERATED" in source:
    log("!" * 80 + f"\nWARNING: evaluating on a generated set, not the benchmark file.\n{source}\n"
        "(point DACA_DATA_DIR or --config.data.data_dir at the benchmark files)\n" + "!" * 80)
  else:
    log(f"Evaluation set: {source}; using {len(eval_examples)} examples")
  # The validation split (distinct items, none from the evaluation set) is held out of SFT and RL; it
  # is drawn with the training pool or, for studies, fixed across seeds (task.val_split, draw_splits).
  t_prep = time.perf_counter()
  log(f"Preparing {cfg.sft.num_train_examples + cfg.task.num_val_examples} training/validation examples "
      "and the model…")
  train_examples, val_examples, val_source = draw_splits(views, cfg)  # validation: the evaluation's prompts
  if views.split:
    log(f"Training prompts: {cfg.task.name}'s {views.train.prompt_style!r} style (task.train_prompt_style); "
        f"evaluation and validation prompts: its {task.prompt_style!r} style (task.options.prompt_style).")

  if cfg.rl.steps and cfg.rl.prompts_per_step > len(train_examples):
    raise ConfigError("rl.prompts_per_step", cfg.rl.prompts_per_step,
                      f"<= the {len(train_examples)} training prompts (sft.num_train_examples)")
  if start is not None:  # each device reads its own shard of the weights
    graphdef, params = from_checkpoint.initial_params(cfg, start, placement_mesh, log)
  else:
    graphdef, params = init_model(cfg.model, cfg.seed)
  if mesh is not None and start is None:  # the same initial values on every process, as global arrays
    params = parallel.to_global(params, mesh, parallel.fsdp_shardings(params, mesh)
                                if cfg.parallel.strategy == "fsdp" else None)
  logits_fn = make_logits_fn(graphdef, logprob_chunk=cfg.model.logprob_chunk)
  log(f"Prepared {len(train_examples) + len(val_examples)} examples and a {count_params(params):,}-parameter model in "
      f"{time.perf_counter() - t_prep:.1f} s.")
  workdir.mkdir(parents=True, exist_ok=True)  # only now: a config refused above leaves no workdir
  check_workdir_config(workdir, cfg)  # after everything that can reject the config up front
  if start is not None:
    from_checkpoint.record_source(workdir, start, _has_saved_state(workdir))
  dashboard = Dashboard(workdir, cfg.log, cfg.to_dict()) if parallel.is_primary() else None
  try:
    return _run_phases(cfg, views, workdir, pathlib.Path(sft_dir) if sft_dir is not None else workdir / "sft",
                       train_examples, val_examples, eval_examples, source, graphdef, params, logits_fn,
                       mesh=mesh, show_progress=show_progress, log=log, dashboard=dashboard, val_source=val_source)
  finally:
    if dashboard is not None:
      dashboard.close()


def _run_phases(cfg: TrainConfig, views: TaskViews, workdir: pathlib.Path, sft_dir: pathlib.Path,
                train_examples: list[Example], val_examples: list[Example], eval_examples: list[Example],
                source: str, graphdef: Any, params: Any, logits_fn: Callable[..., Any], *, mesh: Any,
                show_progress: bool, log: Callable[[str], None], dashboard: Dashboard | None,
                val_source: str = "") -> dict[str, Any]:
  """The phases of :func:`run_main_job` once its inputs are checked: SFT → eval → RL → eval. SFT and RL
  read the training view of the task, the evaluations its evaluation view."""
  task = views.eval
  tok = task.tokenizer
  timings: dict[str, float] = {}

  t0 = time.perf_counter()
  if cfg.model.init_checkpoint:
    log(from_checkpoint.SFT_SKIPPED.format(path=cfg.model.init_checkpoint))
  else:
    params, did_work = run_sft(cfg, views.train, train_examples, logits_fn, params, sft_dir,
                               show_progress=show_progress, log=log, mesh=mesh, dashboard=dashboard)
    if did_work:
      timings["sft_s"] = time.perf_counter() - t0

  # RL policy: the full model, or (model.lora_rank > 0) the SFT model frozen plus LoRA adapters that
  # start at zero, with the reference = the same base with adapters off (no copy of the weights).
  hidden_logits_fn = make_logits_fn(graphdef, return_hidden=True)
  ref_params, optimizer_wrapper, param_split = params, None, None
  if cfg.model.lora_rank:
    adapters = lora.init_lora(cfg.model, jax.random.fold_in(jax.random.PRNGKey(cfg.seed), _LORA_STREAM))
    params = parallel.to_global(lora.lora_params(params, adapters), mesh)
    ref_params = lora.reference_params(params)
    logits_fn = lora.make_lora_logits_fn(graphdef, logprob_chunk=cfg.model.logprob_chunk)
    hidden_logits_fn = lora.make_lora_logits_fn(graphdef, return_hidden=True)
    optimizer_wrapper, param_split = lora.lora_optimizer, lora.LORA_SPLIT
    log(f"LoRA: rank {cfg.model.lora_rank} on {','.join(cfg.model.lora_target_list)}: "
        f"{lora.trainable_count(adapters):,} trainable parameters"
        + (f", dropout {cfg.model.lora_dropout} on their input in the update" if cfg.model.lora_dropout else ""))
  elif cfg.model.init_checkpoint:
    log(from_checkpoint.reference_note(cfg, params))

  evaluator = JobEvaluator(cfg, task, logits_fn, jax.random.fold_in(jax.random.PRNGKey(cfg.seed), _EVAL_STREAM),
                           mesh=mesh, show_progress=show_progress, log=log)

  def run_val(prm: Any, step: int) -> dict[str, float]:
    return evaluator.run(prm, val_examples, "validation", outcomes_to=workdir / _val_name(step))

  fingerprint = {"eval": dataclasses.asdict(cfg.eval), "num_examples": len(eval_examples),
                 "source": source, "sft_steps": cfg.sft.steps}
  t0 = time.perf_counter()
  eval_before, cached_before = evaluator.cached(params, eval_examples, "eval (before RL)",
                                                workdir / "eval_before.json", fingerprint)
  if not cached_before:
    timings["eval_before_s"] = time.perf_counter() - t0

  val_before = None
  if val_examples and cfg.rl.eval_every:
    val_before, _ = evaluator.cached(params, val_examples, "validation (before RL)", workdir / "val_before.json",
                                     dict(fingerprint, split="validation", source=val_source,
                                          num_examples=len(val_examples)))

  learner = GRPOLearner(logits_fn, cfg, mask_id=tok.mask_id, eos_id=tok.eos_id, tokenizer=tok,
                        hidden_logits_fn=hidden_logits_fn, optimizer_wrapper=optimizer_wrapper,
                        param_split=param_split)
  t0 = time.perf_counter()
  params, did_work = run_rl(cfg, views.train, train_examples, learner, params, ref_params, workdir,
                            eval_fn=run_val, show_progress=show_progress,
                            log=log, mesh=mesh, dashboard=dashboard)
  if did_work:
    timings["rl_s"] = time.perf_counter() - t0

  t0 = time.perf_counter()
  eval_after, cached = evaluator.cached(params, eval_examples, "eval (after RL)", workdir / "eval_after.json",
                                       dict(fingerprint, rl_steps=cfg.rl.steps))
  if not cached:
    timings["eval_after_s"] = time.perf_counter() - t0
  if cached_before or cached:
    log("Evaluation results " + ("before and after RL" if cached_before and cached else
                                 "before RL" if cached_before else "after RL")
        + " loaded from the workdir's cache (same settings, same trained steps).")

  results_path = workdir / "results.json"
  previous = io_utils.read_json_cache(results_path, log) or {}  # rebuilt below when damaged
  # Keep the timings of phases that this invocation only loaded from cache.
  timings = {**(previous.get("timings") if isinstance(previous.get("timings"), dict) else {}), **timings}
  results = {"eval_before": eval_before, "eval_after": eval_after, "config": cfg.to_dict(),
             "eval_source": source, "timings": timings}
  if evaluator.protocol is not None:  # d1's: what each length decoded, and which one the plain names report
    results["eval_protocol"] = evaluator.describe()
  records = read_metrics(workdir / "metrics.jsonl", log=log) if (workdir / "metrics.jsonl").exists() else []
  # Where each evaluation's per-example outcomes are (file names in the workdir; :mod:`daca_jax.evaluation.outcomes`).
  results["outcomes"] = {"eval_before": evaluator.outcomes_file(workdir / "eval_before.json").name,
                         "eval_after": evaluator.outcomes_file(workdir / "eval_after.json").name}
  if val_before is not None:
    results["val_before"] = val_before
    results["outcomes"]["val_before"] = evaluator.outcomes_file(workdir / "val_before.json").name
    val_points = [r for r in records if any(k.startswith("val/") for k in r)]
    if val_points:
      results["val_after"] = {k[4:]: v for k, v in val_points[-1].items() if k.startswith("val/")}
      results["outcomes"]["val_after"] = evaluator.outcomes_file(workdir / _val_name(val_points[-1]["step"])).name
  trend = reward_trend(records)
  if trend:
    results["reward_trend"] = trend
  cos = [r["grad_cos"] for r in records if "grad_cos" in r][1:]  # the first iteration has no predecessor
  if cos:
    c = float(np.mean(cos))
    results["grad_agreement"] = {"mean_cos": c, "snr": c / (1.0 - c) if c < 1.0 else float("inf"),
                                 "iterations": len(cos)}
  if not parallel.is_primary():
    return results
  io_utils.atomic_write_json(results_path, results)
  eval_sink = _sink(dashboard, "eval", 0)
  if eval_sink is not None:  # the test set before RL at step 0 and after it at the last step
    eval_sink(0, eval_before)
    eval_sink(cfg.rl.steps, eval_after)
    eval_sink.close()
  metric = task.primary_metric
  plot_curves(records, ["reward_mean", "accuracy", f"val/{metric}"], workdir / "reward_curve.png",
              title=f"{cfg.task.name}: {cfg.rl.objective} + credit={cfg.rl.credit}, "
                    f"likelihood={cfg.rl.likelihood}",
              points={f"test {metric} (before / after RL)": [(0, eval_before[metric]),
                                                              (cfg.rl.steps, eval_after[metric])]})
  keys = [k for k in eval_before if k != "num_examples"]
  rows = [[k, eval_before[k], eval_after[k], eval_after[k] - eval_before[k]] for k in keys]
  rows.append(["num_examples", eval_before["num_examples"], eval_after["num_examples"], ""])
  log("\n" + format_table(rows, ["metric", "before RL", "after RL", "change"]))
  if cfg.log.plumbing_check:
    log("(plumbing check: near-zero metrics and changes are expected here; see the note at the start)")
  log(f"Results written to {workdir / 'results.json'}")
  if cfg.log.tensorboard:
    log(f"Dashboards: tensorboard --logdir {workdir}")
  return results
