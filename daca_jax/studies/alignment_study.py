"""How closely each likelihood estimator's GRPO update follows the sampler's own policy gradient, on a
real task (where the completions cannot be enumerated).

The toy study (:mod:`daca_jax.studies.gradient_study`) has the exact gradient; on 4x4 Sudoku it does not exist
in closed form. What does is the REINFORCE direction of the sampler's own trajectory: the rollout
commits each token in a known state (the canvas at its commit step), and the trajectory likelihood
with one pass per denoising step scores every token in exactly that state, so
``Σ_b A_b ∇ log π(token | its commit state)`` is the policy gradient of the proposals the sampler
made (the remasking choice, a deterministic function of the proposals' confidences under
low-confidence remasking, is what it leaves out). Every estimator is differentiated on the *same*
rollout batches with the same advantages and credit, so the comparison is paired, and the reference
is averaged over ``num_batches`` batches.

For each arm it reports, at the warm start (θ = θ_old = θ_ref, so the KL term has zero gradient):

* ``cos_to_reference``: cosine between the arm's mean update over all batches and the reference's
  mean update — the direction the arm would follow with unlimited rollouts;
* ``paired_cos``: mean over batches of the cosine between the arm's and the reference's update on
  the same batch, over the batches whose reference update is not zero (a batch whose rewards all
  tie has no policy gradient at θ = θ_ref, hence no direction: ``zero_batches`` counts them);
* ``agreement``: cosine between the arm's mean updates over the first and second halves of the
  batches (signal-to-noise: 0 is noise);
* ``norm_ratio``: the arm's mean update norm over the reference's.
"""
from __future__ import annotations

import pathlib
from typing import Any, Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from daca_jax.config import configure  # registry names (rl.likelihood, ...) are checked there
from daca_jax.errors import ConfigError
from daca_jax.models import init_model, make_logits_fn
from daca_jax.run.task_views import build_task
from daca_jax.run.sft_loop import run_sft
from daca_jax.rl.learner import GRPOLearner
from daca_jax.tasks.base import Example, Task
from daca_jax.config.train import TrainConfig

# Arms: name -> overrides of (section, field) -> value on the run's config; the reference is the
# trajectory likelihood with one pass per denoising step (likelihood.trajectory.groups = 0).
DEFAULT_ARMS: dict[str, dict[str, Any]] = {
    "reference (trajectory, 1 pass per step)": {"rl.likelihood": "trajectory", "likelihood.trajectory.groups": 0},
    "mean_field (d1)": {"rl.likelihood": "mean_field"},
    "SML K=4 (DACA)": {"rl.likelihood": "stratified", "likelihood.stratified.num_strata": 4},
    "SML K=4, commit_order strata": {"rl.likelihood": "stratified", "likelihood.stratified.num_strata": 4,
                                     "likelihood.stratified.partition": "commit_order"},
    "SML K=4, per_prompt strata": {"rl.likelihood": "stratified", "likelihood.stratified.num_strata": 4,
                                   "likelihood.stratified.partition": "per_prompt"},
    "trajectory, 4 groups (traj4)": {"rl.likelihood": "trajectory", "likelihood.trajectory.groups": 4},
}


def arm_config(cfg: TrainConfig, overrides: Mapping[str, Any]) -> TrainConfig:
  """``cfg`` with dotted ``section[.subsection].field`` overrides, validated
  (:func:`daca_jax.config.configure.with_overrides`).

  Raises:
    ConfigError: an override names no field of the config, or a value that is not allowed.
  """
  return configure.with_overrides(cfg, list(overrides.items()))


def _flat(tree: Any) -> np.ndarray:
  return np.concatenate([np.asarray(x, np.float64).ravel() for x in jax.tree.leaves(tree)])


def _cos(a: np.ndarray, b: np.ndarray) -> float:
  na, nb = np.linalg.norm(a), np.linalg.norm(b)
  return float(a @ b / (na * nb)) if na > 0 and nb > 0 else 0.0


def run_alignment(cfg: TrainConfig, logits_fn: Callable[..., Any], params: Any, task: Task,
                  examples: Sequence[Example], *, arms: Mapping[str, Mapping[str, Any]] = DEFAULT_ARMS,
                  num_batches: int = 16, seed: int = 0, mask_agreement: bool = False,
                  log: Callable[[str], None] = print) -> dict[str, Any]:
  """Updates of every arm on the same ``num_batches`` rollout batches of ``cfg.rl`` size.

  Args:
    cfg: the run's config (its rollout, credit and objective; ``rl.prompts_per_step`` ×
      ``rl.group_size`` rollouts per batch). The first arm is the reference.
    logits_fn, params: the policy (e.g. the SFT warm start); also θ_old and θ_ref.
    task, examples: prompts and the reward.
    arms: name -> ``{"section.field": value}`` overrides of ``cfg``; the first is the reference.
    num_batches: independent rollout batches (>= 2).
    mask_agreement: also differentiate every batch under a second, independent likelihood key and
      report ``mask_agreement``, the mean cosine of the two updates: the share of an estimator's
      update that its own random masks do not decide (1 for a deterministic estimator). Doubles the
      gradient passes.
  Returns:
    {"arms": {name: {cos_to_reference, paired_cos, agreement, norm_ratio[, mask_agreement]}}, "batch_rollouts",
    "num_batches", "zero_batches" (batches whose reference update is zero), "reward_mean"}.
  Raises:
    ConfigError: ``num_batches`` < 2, no arms, or an override that names no config field.
  """
  if num_batches < 2:
    raise ConfigError("num_batches", num_batches, "an int >= 2 (the agreement compares two halves)")
  if not arms:
    raise ConfigError("arms", arms, "at least one arm (the first is the reference)")
  rl = cfg.rl
  learners = {name: GRPOLearner(logits_fn, arm_config(cfg, ov), mask_id=cfg.model.mask_token_id,
                                eos_id=task.tokenizer.eos_id) for name, ov in arms.items()}
  grads = {name: jax.jit(lrn.objective_grad) for name, lrn in learners.items()}
  names = list(arms)
  roller = learners[names[0]]
  prompts_all = task.encode_prompts(list(examples))
  key = jax.random.PRNGKey(seed)
  half = num_batches // 2
  sums = {n: [0.0, 0.0] for n in names}  # first / second half sums of the updates
  paired = {n: [] for n in names}
  same_batch = {n: [] for n in names}
  rewards_seen = []
  for i in range(num_batches):
    rng = np.random.default_rng([seed, i])
    idx = rng.choice(len(examples), rl.prompts_per_step, replace=False)
    prompts = np.repeat(prompts_all[idx], rl.group_size, axis=0)
    batch_examples = [examples[j] for j in idx for _ in range(rl.group_size)]
    k_roll, k_lik = jax.random.split(jax.random.fold_in(key, i))
    traj = roller.rollout(params, prompts, k_roll)
    completions = task.decode_completions(np.asarray(traj.completion))
    rewards = np.asarray(task.reward(completions, batch_examples), np.float32)
    rewards_seen.append(float(rewards.mean()))
    credit = roller.assign_credit(traj, jnp.asarray(rewards), roller.init_credit_state())
    weights = credit.weights if credit.token_advantages is None else (credit.weights, credit.token_advantages)
    ref_dir = None
    for n in names:
      g, _ = grads[n](params, params, traj, jnp.asarray(rewards), weights, k_lik)
      d = -_flat(g)
      sums[n][0 if i < half else 1] = sums[n][0 if i < half else 1] + d
      if ref_dir is None:
        ref_dir = d
      if np.linalg.norm(ref_dir) > 0:
        paired[n].append(_cos(d, ref_dir))
      if mask_agreement and np.linalg.norm(d) > 0:
        g2, _ = grads[n](params, params, traj, jnp.asarray(rewards), weights, jax.random.fold_in(k_lik, 1))
        same_batch[n].append(_cos(d, -_flat(g2)))
    log(f"batch {i + 1}/{num_batches}: reward {rewards.mean():.3f}")
  ref_mean = sums[names[0]][0] + sums[names[0]][1]
  out = {}
  for n in names:
    mean = sums[n][0] + sums[n][1]
    out[n] = {"cos_to_reference": _cos(mean, ref_mean),
              "paired_cos": float(np.mean(paired[n])) if paired[n] else float("nan"),  # no direction seen
              "agreement": _cos(sums[n][0], sums[n][1]),
              "norm_ratio": float(np.linalg.norm(mean) / max(np.linalg.norm(ref_mean), 1e-30))}
    if mask_agreement:
      out[n]["mask_agreement"] = float(np.mean(same_batch[n])) if same_batch[n] else float("nan")
  return {"arms": out, "batch_rollouts": rl.prompts_per_step * rl.group_size, "num_batches": num_batches,
          "zero_batches": num_batches - len(paired[names[0]]),
          "reward_mean": float(np.mean(rewards_seen))}


def markdown(results: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> str:
  """One result, or several (e.g. one per seed, same arms), as a markdown table: one row per arm,
  each cell the results' values separated by " / "."""
  results = [results] if isinstance(results, Mapping) else list(results)
  fmt = {"cos_to_reference": "{:+.3f}", "paired_cos": "{:+.3f}", "agreement": "{:+.3f}", "norm_ratio": "{:.2f}"}
  head = ["cos(mean update, reference)", "paired cos per batch", "agreement of halves", "norm / reference"]
  if all("mask_agreement" in a for r in results for a in r["arms"].values()):
    fmt["mask_agreement"] = "{:+.3f}"
    head.append("same batch, new masks")
  rows = ["| estimator | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
  for n in results[0]["arms"]:
    cells = [" / ".join(f.format(r["arms"][n][k]) for r in results) for k, f in fmt.items()]
    rows.append(f"| {n} | " + " | ".join(cells) + " |")
  return "\n".join(rows)


def sft_warm_start(cfg: TrainConfig, sft_dir: Any, log: Callable[[str], None] = print
                   ) -> tuple[Task, list[Example], Callable[..., Any], Any]:
  """The main job's task, training prompts and SFT warm start (trained in, or reused from, ``sft_dir``
  — e.g. a reproduce grid's ``sft_cache/<task>_seed<seed>``, so the study sees the RL runs' start)."""
  task = build_task(cfg)
  pool = task.train_examples(cfg.sft.num_train_examples + cfg.task.num_val_examples, cfg.seed)
  train = pool[:cfg.sft.num_train_examples]
  graphdef, params = init_model(cfg.model, cfg.seed)
  logits_fn = make_logits_fn(graphdef, logprob_chunk=cfg.model.logprob_chunk)
  params, _ = run_sft(cfg.sft, cfg.checkpoint, task, train, logits_fn, params, pathlib.Path(sft_dir), seed=cfg.seed,
                      gen_length=cfg.rollout.gen_length, show_progress=False, log=log)
  return task, train, logits_fn, params
