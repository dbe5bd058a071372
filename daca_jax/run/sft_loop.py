"""The SFT warm start: the masked-diffusion SFT loss, its jitted step and the loop around it.

The loop is resumable from its checkpoint folder (:func:`daca_jax.run.workdir.open_phase`): a run killed
mid-way and started again continues from the last checkpoint and reproduces the uninterrupted run, since
every batch and key is a pure function of ``(seed, step)`` (:data:`daca_jax.run.streams.SFT_STREAM`); the
batches come from a grain pipeline (:mod:`daca_jax.data.loader`) whose iterator state each checkpoint keeps.
"""
from __future__ import annotations

import pathlib
from typing import Any, Callable

import jax
import numpy as np
import optax
from jax.sharding import Mesh

from daca_jax import parallel
from daca_jax.data import loader
from daca_jax.diffusion.sft import sft_loss
from daca_jax.progress import PhaseProgress
from daca_jax.rl.optim import make_optimizer
from daca_jax.run import guards, lease, preemption
from daca_jax.run.dashboards import Dashboard
from daca_jax.run.streams import SFT_STREAM
from daca_jax.run.workdir import PhaseResult, metrics_writer, open_phase, phase_metadata, phase_sink, save_and_stop
from daca_jax.tasks.base import Example, Task
from daca_jax.config.train import CheckpointConfig, SFTConfig

SFTState = dict[str, Any]  # {"params": the model's parameters, "opt_state": the optimizer's state}
SFTStep = Callable[[SFTState, jax.Array, jax.Array, jax.Array, np.int32],
                   tuple[SFTState, dict[str, jax.Array], jax.Array]]


def make_sft_step(logits_fn: Callable[..., Any], optimizer: optax.GradientTransformation, prompt_len: int,
                  mask_id: int) -> SFTStep:
  """The jitted SFT step ``(state, batch, key, flag, step) -> (state, metrics, flag)``.

  ``batch`` is int32 ``[sft.batch_size, prompt_len + gen_length]`` (prompt then target tokens), ``key``
  the step's PRNG key, ``flag`` the sticky NaN/inf flag of :mod:`daca_jax.run.guards` and ``step``
  (int32) the step number after this one. ``metrics`` holds the loss and :func:`sft_loss`'s aux scalars
  (float32 ``[]``). A step whose loss or gradient is not finite keeps the old state and raises the flag.
  """

  @jax.jit
  def train_step(state, batch, key, flag, step):
    (loss, aux), grads = jax.value_and_grad(
        lambda prm: sft_loss(logits_fn, prm, batch, prompt_len, key, mask_id), has_aux=True)(state["params"])
    updates, opt_state = optimizer.update(grads, state["opt_state"], state["params"])
    new = {"params": optax.apply_updates(state["params"], updates), "opt_state": opt_state}
    state, flag = guards.keep_finite(state, new, flag, step, loss=loss, grad_norm=optax.tree.norm(grads))
    return state, dict(aux, loss=loss), flag

  return train_step


def sft_rows(seed: int, step: int, batch_size: int, num_examples: int) -> np.ndarray:
  """int64 ``[batch_size]``: the training rows SFT step ``step`` draws (with replacement), a pure function of
  ``(seed, step)``."""
  return np.random.default_rng([seed, SFT_STREAM, step]).integers(0, num_examples, batch_size)


def run_sft(sft: SFTConfig, checkpoint: CheckpointConfig, task: Task, examples: list[Example],
            logits_fn: Callable[..., Any], params: Any, sft_dir: pathlib.Path, *, seed: int, gen_length: int,
            show_progress: bool = True, log: Callable[[str], None] = print, mesh: Mesh | None = None,
            dashboard: Dashboard | None = None) -> PhaseResult:
  """SFT warm start with the masked-diffusion SFT loss; cached and resumable in ``sft_dir``
  (its loss log goes to ``<sft_dir>_metrics.jsonl`` beside it).

  Args:
    sft: the phase's steps, batch size and optimizer settings.
    checkpoint: ``checkpoint.sft_every`` and ``checkpoint.max_to_keep``.
    task: the task whose prompts and targets ``examples`` encode to.
    examples: the training examples; every step draws ``sft.batch_size`` of them.
    logits_fn: the model's logits function ``(params, tokens) -> logits``.
    params: the initial parameters (those of a cached, finished warm start replace them).
    sft_dir: the phase's checkpoint folder.
    seed: the run's seed (batches and keys come from its SFT stream).
    gen_length: target tokens per example (``rollout.gen_length``).
    show_progress, log: the progress bar and where messages go.
    mesh: in a multi-process run, the mesh: each process feeds its slice of every batch and the state is
      global (the jitted step is partitioned over the mesh by its inputs' shardings). None otherwise.
    dashboard: receives the same scalars (TensorBoard run ``sft``).

  Returns:
    The trained parameters, ``trained=False`` when ``sft.steps`` is 0 or ``sft_dir`` already holds the
    finished phase.
  Raises:
    NonFiniteError: a step's loss or gradient is not finite (nothing after the last checkpoint is saved).
    Preempted: SIGTERM; the step reached is saved first.
  """
  if sft.steps == 0:
    return PhaseResult(params, False)
  optimizer, schedule = make_optimizer(sft.learning_rate, sft.warmup_steps, sft.weight_decay,
                                       sft.max_grad_norm, decay_steps=max(sft.steps - sft.warmup_steps, 1))
  template = parallel.to_global({"params": params, "opt_state": optimizer.init(params)}, mesh)
  ckpt, state, start, saved = open_phase(sft_dir, template, checkpoint.max_to_keep, log)
  if start >= sft.steps:
    log(f"SFT warm start: reusing the cached model in {sft_dir} (step {start}).")
    ckpt.close()
    return PhaseResult(state["params"], False)
  if start:
    log(f"SFT: resuming from step {start}.")
  tokens = np.concatenate([task.encode_prompts(examples), task.encode_targets(examples, gen_length)], axis=1)
  share = parallel.ProcessShare(mesh, sft.batch_size, field="sft.batch_size")
  draw = lambda step: sft_rows(seed, step, sft.batch_size, len(tokens))
  batches = loader.batch_iterator(loader.step_batches(tokens, draw, sft.steps, share.own_prompts), start,
                                  saved.get(loader.STATE_KEY), f"checkpoint {sft_dir / str(start)}")
  train_step = make_sft_step(logits_fn, optimizer, task.prompt_len, task.tokenizer.mask_id)

  base_key = jax.random.fold_in(jax.random.PRNGKey(seed), SFT_STREAM)
  log_every = max(1, min(25, sft.steps // 20))
  flag = parallel.to_global(guards.clear_flag(), mesh)  # sticky NaN/inf flag, read where metrics are
  sink = phase_sink(dashboard, "sft", start)
  with metrics_writer(sft_dir.with_name(sft_dir.name + "_metrics.jsonl"), log, sink) as writer:
    writer.truncate_after(start)
    bar = PhaseProgress(range(start, sft.steps), desc="SFT", log=log, disable=not show_progress,
                        first=f"compiling the SFT step ({sft.steps - start} steps to run)")
    for step in bar:
      batch = share.to_batch(next(batches).rows)
      done = step + 1
      state, aux, flag = train_step(state, batch, parallel.to_global(jax.random.fold_in(base_key, step), mesh),
                                    flag, np.int32(done))
      if done % log_every == 0 or done % checkpoint.sft_every == 0 or done == sft.steps:
        guards.check("SFT", flag, ckpt)
      if done % log_every == 0 or done == sft.steps:
        m = {k: float(v) for k, v in aux.items()}
        m["lr"] = float(schedule(done))
        writer.write(done, m)
        bar.set_postfix(loss=f"{m['loss']:.3f}", acc=f"{m['token_acc']:.3f}")
      lease.check_held()  # a run whose workdir was taken over stops here, saving nothing
      if done % checkpoint.sft_every == 0 or done == sft.steps:
        ckpt.save(done, state, metadata=phase_metadata("sft", done, batches))
      if preemption.stop_requested():
        guards.check("SFT", flag, ckpt)
        save_and_stop(ckpt, "SFT", done, state, sft_dir, log, phase_metadata("sft", done, batches))
  ckpt.close()
  return PhaseResult(state["params"], True)
