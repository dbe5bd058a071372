"""The RL loop: GRPO iterations (rollout → rewards → credit → update), their metrics, images and checkpoints.

Each iteration draws ``rl.prompts_per_step`` training prompts (:func:`rl_prompt_rows`), rolls out
``rl.sample_group_size`` (or ``rl.group_size``) completions per prompt, grades them with the task's training
reward (:func:`daca_jax.tasks.training_rewards.training_rewards`; per-token rewards too for the oracle
credit), keeps ``rl.group_size`` of each group (:mod:`daca_jax.rl.downsample`, one process only), assigns
credit and updates the policy (:class:`daca_jax.rl.learner.GRPOLearner`). Prompts and keys are pure
functions of ``(seed, rl.replicate, step)`` (:data:`daca_jax.run.streams.RL_STREAM`), so a resumed run
reproduces the uninterrupted one.
"""
from __future__ import annotations

import dataclasses
import functools
import pathlib
import time
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from daca_jax import parallel
from daca_jax.data import loader
from daca_jax.errors import ConfigError
from daca_jax.hardware import device_peak_bytes
from daca_jax.progress import PhaseProgress
from daca_jax.rl.downsample import select_rows, take_rows
from daca_jax.rl.learner import GRPOLearner
from daca_jax.run import guards, lease, preemption
from daca_jax.run.dashboards import Dashboard
from daca_jax.run.from_checkpoint import RLCheckpointLayout
from daca_jax.run.streams import RL_STREAM
from daca_jax.run.workdir import PhaseResult, metrics_writer, open_phase, phase_metadata, phase_sink, save_and_stop
from daca_jax.tasks.base import Example, Task
from daca_jax.tasks.training_rewards import training_rewards
from daca_jax.config.train import CheckpointConfig, TrainConfig
from daca_jax.config.rl import RLConfig


class TrajectoryImages(NamedTuple):
  """The RL loop's trajectory images (the first rollout group of an iteration, :mod:`daca_jax.viz`).

  Attributes:
    every: an image every this many iterations, and one at the last (``log.trajectory_every`` > 0).
    draw: ``(traj, rewards, weights, prompt, step) -> image``: the iteration's trajectory and credit
      weights on the host, its rewards float32 ``[rows]``, the first prompt; an RGB uint8 ``[H, W, 3]``.
  """

  every: int
  draw: Callable[[Any, np.ndarray, Any, str, int], np.ndarray]


def _trajectory_image(cfg: TrainConfig, task: Task, traj: Any, rewards: np.ndarray, weights: Any, prompt: str,
                      step: int) -> np.ndarray:
  """The first rollout group of an RL iteration as an image (:mod:`daca_jax.viz`): the very
  trajectory, rewards and credit weights the update used."""
  from daca_jax.viz import figure_rgb, group_view, progress_of

  view = group_view(traj, rewards, task.tokenizer, range(cfg.rl.group_size), prompt=prompt,
                    weights={cfg.rl.credit: weights}, progress=progress_of(traj, cfg))
  return figure_rgb([view], title=f"RL iteration {step}: {cfg.rl.objective} + credit={cfg.rl.credit}")


def trajectory_images(cfg: TrainConfig, task: Task) -> TrajectoryImages | None:
  """The images ``cfg.log`` asks for (``log.trajectory_every``, with TensorBoard or W&B on), drawing
  ``task``'s completions; None when it asks for none. The same on every process: gathering a multi-host
  batch for an image is a collective."""
  every = cfg.log.trajectory_every
  if not (every and (cfg.log.tensorboard or cfg.log.wandb)):
    return None
  return TrajectoryImages(every, functools.partial(_trajectory_image, cfg, task))


def rl_base_key(seed: int, rl: RLConfig) -> jax.Array:
  """The key RL's iteration keys fold from: the seed's RL stream, folded with ``rl.replicate`` when it
  is > 0 (another draw from the same warm start; 0 keeps the stream earlier runs used, so they
  reproduce)."""
  key = jax.random.fold_in(jax.random.PRNGKey(seed), RL_STREAM)
  return jax.random.fold_in(key, rl.replicate) if rl.replicate else key


def rl_prompt_rows(seed: int, rl: RLConfig, step: int, num_examples: int) -> np.ndarray:
  """int64 ``[rl.prompts_per_step]``: the training rows RL iteration ``step`` draws (distinct), a pure
  function of ``(seed, rl.replicate, step)``."""
  replicate = [rl.replicate] if rl.replicate else []
  rng = np.random.default_rng([seed, RL_STREAM, step] + replicate)
  return rng.choice(num_examples, rl.prompts_per_step, replace=False)


class RLStart(NamedTuple):
  """The policy RL starts from and its reference.

  Attributes:
    params: the policy's initial parameters (those of the latest checkpoint in ``workdir/rl`` replace them).
    ref_params: the reference policy's parameters (the KL term).
  """

  params: Any
  ref_params: Any


@dataclasses.dataclass(frozen=True)
class RLBatches:
  """RL's training batches: the prompts each iteration draws (:func:`rl_prompt_rows`, the same on every
  process) and how their completions are graded.

  Attributes:
    task: the training view of the task (prompts, completions' decoding, rewards).
    examples: the training examples the prompts are drawn from.
    seed: the run's seed (prompts and keys come from its RL stream).
    reward: the training reward's name (``task.reward``; empty: the task's own).
    mesh: in a multi-process run, the mesh: every process rolls out and grades its own share of the
      prompts (whole groups, :class:`daca_jax.parallel.ProcessShare`) and the rewards form one global
      batch. None otherwise.
  """

  task: Task
  examples: list[Example]
  seed: int
  reward: str = ""
  mesh: Mesh | None = None


@dataclasses.dataclass(frozen=True)
class RLStore:
  """Where and how often the loop keeps its state.

  Attributes:
    workdir: the run's folder (``rl/`` checkpoints, ``metrics.jsonl``).
    checkpoint: ``checkpoint.every`` and ``checkpoint.max_to_keep``.
    layout: what a checkpoint stores of the state (a LoRA run from a checkpoint leaves its frozen base
      out, :class:`~daca_jax.run.from_checkpoint.RLCheckpointLayout`).
  """

  workdir: pathlib.Path
  checkpoint: CheckpointConfig
  layout: RLCheckpointLayout = RLCheckpointLayout()


@dataclasses.dataclass(frozen=True)
class RLHooks:
  """What the loop reports to, besides its metrics file.

  Attributes:
    eval_fn: ``(params, step) -> metrics`` of the validation split, run every ``rl.eval_every``
      iterations and at the last; logged as ``val/<name>``. None: none.
    images: the trajectory images to draw, or None.
    dashboard: receives the metrics (TensorBoard / W&B run ``rl``), or None.
    show_progress, log: the progress bar and where messages go.
  """

  eval_fn: Callable[[Any, int], dict[str, float]] | None = None
  images: TrajectoryImages | None = None
  dashboard: Dashboard | None = None
  show_progress: bool = True
  log: Callable[[str], None] = print


def run_rl(rl: RLConfig, learner: GRPOLearner, start: RLStart, batches: RLBatches, store: RLStore,
           hooks: RLHooks = RLHooks()) -> PhaseResult:
  """GRPO iterations with checkpoints in ``store.workdir/rl`` and one ``metrics.jsonl`` line per
  iteration (mirrored to the dashboard's run ``rl``, with a trajectory image as ``hooks.images`` asks).

  Args:
    rl: the loop's settings (steps, prompts and group sizes, downsampling, validation cadence, replicate).
    learner: the rollout, credit assignment and update (its optimizer's schedule gives the ``lr`` metric).
    start: the initial policy and the reference.
    batches: the prompts and their grading.
    store: the workdir, checkpoint cadence and layout.
    hooks: validation, images, dashboard, progress and messages.

  Returns:
    The trained policy's parameters, ``trained=False`` when ``rl.steps`` is 0 or ``workdir/rl`` already
    holds the finished phase.
  Raises:
    ConfigError: ``workdir/rl`` holds a run past ``rl.steps``.
    NonFiniteError: an iteration's loss, gradient or state is not finite.
    Preempted: SIGTERM; the iteration reached is saved first.
  """
  if rl.steps == 0:
    return PhaseResult(start.params, False)
  log, workdir, layout = hooks.log, store.workdir, store.layout
  g = rl.group_size
  n = rl.sample_group_size or g  # sampled per prompt; g of them trained on (daca_jax.rl.downsample)
  share = parallel.ProcessShare(batches.mesh, rl.prompts_per_step, n)
  template = {"params": start.params, "opt_state": learner.init_opt_state(start.params)}
  credit_state = learner.init_credit_state()
  if credit_state is not None:  # e.g. DTCA's entropy baseline: part of the run's resumable state
    template["credit"] = credit_state
  template = share.replicate(template)
  ckpt, saved, first, meta = open_phase(workdir / "rl", layout.saved(template), store.checkpoint.max_to_keep, log)
  state = layout.full(saved)
  if first > rl.steps:
    ckpt.close()
    raise ConfigError("rl.steps", rl.steps, f">= {first}, the iteration this run already reached in "
                      f"{workdir / 'rl'} (use a new --workdir for a shorter run)")
  if first >= rl.steps:
    log(f"RL: already complete in {workdir / 'rl'} (iteration {first}); reusing it.")
    ckpt.close()
    return PhaseResult(state["params"], False)
  if first:
    log(f"RL: resuming from iteration {first}.")
  task, examples = batches.task, batches.examples
  prompts_all = task.encode_prompts(examples)
  draw = lambda step: rl_prompt_rows(batches.seed, rl, step, len(examples))
  stream = loader.batch_iterator(loader.step_batches(prompts_all, draw, rl.steps, share.own_prompts), first,
                                 meta.get(loader.STATE_KEY), f"checkpoint {workdir / 'rl' / str(first)}")
  base_key = rl_base_key(batches.seed, rl)
  sink = phase_sink(hooks.dashboard, "rl", first)
  with metrics_writer(workdir / "metrics.jsonl", log, sink) as writer:
    writer.truncate_after(first)
    bar = PhaseProgress(range(first, rl.steps), desc=f"RL {rl.objective}", log=log, disable=not hooks.show_progress,
                        first=f"compiling the rollout and the update ({rl.steps - first} iterations to run)")
    for step in bar:
      # Rollout: this process's prompts (all of them in one process), n completions each.
      _, mine, own_prompts = next(stream)  # this process's prompt rows of the step, and their tokens
      prompts = np.repeat(own_prompts, n, axis=0)
      batch_examples = [examples[i] for i in mine for _ in range(n)]
      k_roll, k_upd = (share.replicate(k) for k in jax.random.split(jax.random.fold_in(base_key, step)))
      t0 = time.perf_counter()
      traj = learner.rollout(state["params"], share.to_batch(prompts), k_roll)
      completion_ids = share.own_rows(parallel.to_host(traj.completion))  # rows of the batch: process order
      t_roll = time.perf_counter() - t0
      # Rewards: graded where the completions were drawn; keep g of each group's n (one process only).
      rewards, correct = training_rewards(batches.reward, task, task.decode_completions(completion_ids),
                                          batch_examples)
      sampled = share.all_rows(rewards)  # every rollout: the policy's reward, whatever the update trains on
      if n != g:
        rows = np.asarray(select_rows(rewards, n, g, rl.downsample, jax.random.fold_in(k_roll, 1)))
        traj = take_rows(traj, jnp.asarray(rows))
        completion_ids, rewards = completion_ids[rows], rewards[rows]
        batch_examples = [batch_examples[i] for i in rows]
      # Credit and update, on the whole batch.
      t1 = time.perf_counter()
      rewards_in = share.to_batch(jnp.asarray(rewards))
      rewards = share.all_rows(rewards)  # every row, for the metrics
      token_rewards = None
      if learner.credit.needs_token_rewards:  # the oracle credit: the task grades every token
        token_rewards = share.to_batch(task.token_rewards(completion_ids, batch_examples))
      credit = learner.assign_credit(traj, rewards_in, state.get("credit"), token_rewards)
      weights = credit.weights if credit.token_advantages is None else (credit.weights,
                                                                         credit.token_advantages)
      params_new, opt_state, m = learner.update(state["params"], state["opt_state"], start.ref_params, traj,
                                                rewards_in, weights, k_upd)
      guards.check("RL", guards.step_flag(step + 1, {"loss": m.get("loss"), "grad_norm": m.get("grad_norm"),
                   "params": params_new, "opt_state": opt_state, "credit": credit.state}), ckpt)
      state = dict(state, params=params_new, opt_state=opt_state)
      if credit.state is not None:
        state["credit"] = credit.state
      t_upd = time.perf_counter() - t1
      done = step + 1
      # Metrics, validation, images, checkpoint.
      m = {k: float(v) for k, v in {**m, **credit.metrics}.items()}
      if n != g:
        m.update(kept_reward_mean=float(rewards.mean()), kept_reward_std=float(rewards.std()))
      m.update(reward_mean=float(sampled.mean()), reward_std=float(sampled.std()), reward_max=float(sampled.max()),
               accuracy=float(np.mean(share.all_rows(correct))),
               completion_length=float(parallel.to_host(traj.completion_mask).sum(-1).mean()),
               lr=float(learner.schedule(done * rl.num_iterations)),
               rollout_s=t_roll, update_s=t_upd,
               rollout_tokens_per_s=float(sampled.shape[0] * traj.completion.shape[1] / max(t_roll, 1e-9)),
               includes_compile=float(step == first))  # first iteration of a process: times include jit
      peak = device_peak_bytes()  # the allocator's peak so far (GPU/TPU; none on CPU): plans are checked on it
      if peak is not None:
        m["device_peak_bytes"] = float(peak)
      if hooks.eval_fn is not None and rl.eval_every and (done % rl.eval_every == 0 or done == rl.steps):
        m.update({f"val/{k}": v for k, v in hooks.eval_fn(state["params"], done).items()})
      writer.write(done, m)
      images = hooks.images
      if images is not None and (done % images.every == 0 or done == rl.steps):
        # on every process: gathering a multi-host batch is a collective; process 0 alone draws it
        host = parallel.to_host({"traj": traj.replace(commit_hidden=None), "weights": credit.weights})
        if sink is not None:
          sink.image("trajectory", done, images.draw(host["traj"], rewards, host["weights"],
                                                     batch_examples[0].prompt, done))
      bar.set_postfix(reward=f"{m['reward_mean']:.3f}", kl=f"{m['kl']:.4f}")
      lease.check_held()  # a run whose workdir was taken over stops here, saving nothing
      if done % store.checkpoint.every == 0 or done == rl.steps:
        ckpt.save(done, layout.saved(state), metadata=phase_metadata("rl", done, stream))
      if preemption.stop_requested():
        save_and_stop(ckpt, "RL", done, layout.saved(state), workdir / "rl", log, phase_metadata("rl", done, stream))
  ckpt.close()
  return PhaseResult(state["params"], True)
