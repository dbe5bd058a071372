"""Policy-gradient fidelity study: how close is each GRPO update to the true policy gradient?

On a toy task small enough to enumerate every completion (an alphabet of V letters, completions of
length L, V^L of them), the expected reward of the *sampler actually used* and its exact gradient are
computed in closed form:

* the sampler is the library's rollout (:func:`daca_jax.diffusion.make_rollout_fn`) with one block,
  one token committed per step (S = L) and temperature 1, over a model whose logits are restricted to
  the alphabet (:func:`restrict_logits`);
* its probability of a completion o is a sum over the L! generation orders, computed by dynamic
  programming over the 2^L sets of revealed positions (one forward pass per set), with the
  probability that step t commits token a at position j given the revealed set S:

  - ``random`` remasking: ``p_j(a | S) / (L − |S|)`` (so p(o) is the any-order likelihood of
    :func:`daca_jax.likelihood.any_order_logprob`);
  - ``low_confidence`` remasking: the candidates ``x0_k ~ p_k(· | S)`` are drawn independently and
    the most probable candidate wins, so ``P = p_j(a) Π_{k masked, k ≠ j} F_k(p_j(a))`` with
    ``F_k(c) = Σ_b p_k(b) 1[p_k(b) < c]`` (ties go to the lower position, as in the sampler);

* the expected reward ``J(θ) = mean_q Σ_o p_θ(o | q) R(q, o)`` is differentiated with ``jax.grad``.

Every estimator × credit pair is then run through the real learner
(:meth:`daca_jax.rl.learner.GRPOLearner.objective_grad`, the direction an update takes before the
optimizer) on independent rollout batches, and the study reports the cosine of the expected update to
the true gradient (its *bias* in direction), the cosine of one batch's update to it, and the
agreement between independent batches (the gradient SNR) as the number of rollouts grows. With β > 0
and θ away from the reference it also compares against the exact gradient of the KL-regularised
objective ``J − β KL(p_θ || p_ref)``, where the KL is the sampler's (also enumerated).

The exact sampler distribution and expected reward are in :mod:`daca_jax.studies.exact_gradient`, the
tables and figure in :mod:`daca_jax.studies.gradient_report`; this module runs the study and re-exports
their public names.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from daca_jax.studies.estimator_study import train_tiny_model
from daca_jax.studies.exact_gradient import (all_completions, completion_distribution, expected_reward, restrict_logits,
                                             sampler_logprob, step_logprobs)
from daca_jax.studies.gradient_report import by_estimator_table, markdown_table, plot, report_header
from daca_jax.models import init_model, make_logits_fn
from daca_jax.rl.learner import GRPOLearner
from daca_jax.tasks.tokenizer import ByteTokenizer
from daca_jax.config.credit import CreditConfig
from daca_jax.config.likelihood import LikelihoodConfig
from daca_jax.likelihood.elbo import ELBOConfig
from daca_jax.likelihood.rldf import RLDFConfig
from daca_jax.likelihood.stratified import StratifiedConfig
from daca_jax.config.model import ModelConfig
from daca_jax.config.rl import RLConfig
from daca_jax.config.rollout import RolloutConfig
from daca_jax.config.train import TrainConfig

__all__ = ["Arm", "SortTask", "agreement_curve", "all_completions", "ascend_true_gradient", "batch_directions",
           "by_estimator_table", "completion_distribution", "cosine", "default_arms", "encode_prompts",
           "expected_reward", "flatten", "markdown_table", "plot", "report_header", "restrict_logits", "run_study",
           "sampler_logprob", "step_logprobs", "study_config", "train_toy_model"]


@dataclasses.dataclass(frozen=True)
class SortTask:
  """The toy task: the prompt is L letters of the alphabet, the answer the same letters sorted.

  Reward: the fraction of positions that are right (so it decomposes over tokens: the token reward of
  position i is whether it is right, the study's oracle credit).
  """

  alphabet: str = "abc"
  length: int = 4
  num_prompts: int = 8
  seed: int = 0

  def prompts(self) -> list[str]:
    """``num_prompts`` distinct prompts (seeded), each not already sorted."""
    rng = np.random.default_rng(self.seed)
    every = ["".join(p) for p in itertools.product(self.alphabet, repeat=self.length)]
    every = [p for p in every if "".join(sorted(p)) != p]
    return [every[i] for i in rng.permutation(len(every))[:self.num_prompts]]

  def target(self, prompt: str) -> str:
    return "".join(sorted(prompt))

  def token_rewards(self, prompts: Sequence[str], completions: np.ndarray, tok: ByteTokenizer) -> np.ndarray:
    """float32 [N, L]: 1 where completion position i holds the sorted prompt's letter."""
    targets = np.asarray([tok.encode(self.target(p)) for p in prompts], np.int32)
    return (np.asarray(completions) == targets).astype(np.float32)

  def rewards(self, prompts: Sequence[str], completions: np.ndarray, tok: ByteTokenizer) -> np.ndarray:
    return self.token_rewards(prompts, completions, tok).mean(-1)


def encode_prompts(tok: ByteTokenizer, prompts: Sequence[str]) -> np.ndarray:
  return np.asarray([[tok.bos_id] + tok.encode(p) for p in prompts], np.int32)


def flatten(tree: Any) -> np.ndarray:
  return np.concatenate([np.asarray(x, np.float64).ravel() for x in jax.tree.leaves(tree)])


def cosine(a: np.ndarray, b: np.ndarray) -> float:
  na, nb = np.linalg.norm(a), np.linalg.norm(b)
  return float(a @ b / (na * nb)) if na > 0 and nb > 0 else 0.0


@dataclasses.dataclass(frozen=True)
class Arm:
  """One row of the study: an estimator with its options, a credit assigner and the objective."""

  likelihood: str
  credit: str
  likelihood_cfg: LikelihoodConfig = LikelihoodConfig(p_mask_prompt=0.0)
  objective: str = "diffu_grpo"
  label: str = ""

  @property
  def name(self) -> str:
    return self.label or self.likelihood


def default_arms(length: int) -> list[Arm]:
  """Every estimator (mean-field, SML K = 2 and K = L, coupled and ELBO — each also with
  ``elbo_terms="summed"``, the reference implementations' reading —, trajectory, RLDF with its own
  objective) × every credit (uniform, DPS, DTCA, DelTA, position-value, the token-reward oracle).
  Position-value and token-reward credit give per-token advantages, which RLDF's objective accepts too."""
  lc = LikelihoodConfig(p_mask_prompt=0.0)
  estimators = [("mean_field", lc, "diffu_grpo", "mean_field"),
                ("stratified", dataclasses.replace(lc, stratified=StratifiedConfig(num_strata=2)), "diffu_grpo", "SML K=2"),
                ("stratified", dataclasses.replace(lc, stratified=StratifiedConfig(num_strata=length)), "diffu_grpo", f"SML K={length}"),
                ("coupled", lc, "diffu_grpo", "coupled"),
                ("coupled", dataclasses.replace(lc, elbo_terms="summed"), "diffu_grpo", "coupled (summed)"),
                ("elbo", dataclasses.replace(lc, elbo=ELBOConfig(nodes=2)), "diffu_grpo", "elbo"),
                ("elbo", dataclasses.replace(lc, elbo=ELBOConfig(nodes=2), elbo_terms="summed"), "diffu_grpo", "elbo (summed)"),
                ("trajectory", lc, "diffu_grpo", "trajectory"),
                ("rldf", dataclasses.replace(lc, rldf=RLDFConfig(states=min(2, length))), "rldf", "rldf")]
  return [Arm(name, credit, cfg, obj, label) for name, cfg, obj, label in estimators
          for credit in ("uniform", "dps", "dtca", "delta", "position_value", "token_reward")]


def study_config(arm: Arm, task: SortTask, group_size: int, remasking: str, beta: float) -> TrainConfig:
  """The TrainConfig whose learner runs ``arm`` on the toy (one block, one token per step, T = 1)."""
  n = task.length
  rollout = RolloutConfig(gen_length=n, block_length=n, steps=n, temperature=1.0, remasking=remasking)
  rl = RLConfig(objective=arm.objective, credit=arm.credit, likelihood=arm.likelihood,
                prompts_per_step=task.num_prompts, group_size=group_size, beta=beta,
                grad_agreement=False)
  lik = dataclasses.replace(arm.likelihood_cfg, trajectory_steps=n)
  return TrainConfig(rollout=rollout, rl=rl, likelihood=lik, credit=CreditConfig())


def batch_directions(learner: GRPOLearner, params: Any, ref_params: Any, task: SortTask,
                     tok: ByteTokenizer, num_batches: int, seed: int) -> tuple[np.ndarray, dict[str, float]]:
  """Update directions (−∇loss, flattened) of ``num_batches`` independent rollout batches.

  Returns:
    (float64 [num_batches, num_params], mean reward of the rollouts).
  """
  prompts = task.prompts()
  g = learner.cfg.rl.group_size
  prompt_ids = np.repeat(encode_prompts(tok, prompts), g, 0)
  batch_prompts = [p for p in prompts for _ in range(g)]
  grad_fn = jax.jit(learner.objective_grad)
  state = learner.init_credit_state()
  key = jax.random.PRNGKey(seed)
  out, rewards_seen = [], []
  for i in range(num_batches):
    k_roll, k_lik = jax.random.split(jax.random.fold_in(key, i))
    traj = learner.rollout(params, prompt_ids, k_roll)
    comp = np.asarray(traj.completion)
    tok_r = task.token_rewards(batch_prompts, comp, tok)
    rewards = tok_r.mean(-1)
    rewards_seen.append(rewards.mean())
    credit = learner.assign_credit(traj, rewards, state, (tok_r, np.ones_like(tok_r)))
    state = credit.state
    weights = credit.weights if credit.token_advantages is None else (credit.weights, credit.token_advantages)
    grads, _ = grad_fn(params, ref_params, traj, jnp.asarray(rewards), weights, k_lik)
    out.append(-flatten(grads))
  return np.stack(out), {"reward_mean": float(np.mean(rewards_seen))}


def agreement_curve(directions: np.ndarray, true_grad: np.ndarray,
                    batch_rollouts: int) -> list[dict[str, float]]:
  """Cosine to the true gradient and between disjoint halves, for updates averaged over k batches.

  For k = 1, 2, 4, ... (up to half the batches), the batches are split into consecutive groups of k
  and averaged (an update on k × ``batch_rollouts`` rollouts); ``to_true`` is the mean cosine of a
  group's update to ``true_grad``, ``agreement`` the mean cosine between neighbouring groups and
  ``snr = agreement / (1 − agreement)``.
  """
  rows = []
  n = directions.shape[0]
  k = 1
  while 2 * k <= n:
    groups = directions[:n // k * k].reshape(n // k, k, -1).mean(1)
    agree = float(np.mean([cosine(groups[i], groups[i + 1]) for i in range(0, len(groups) - 1, 2)]))
    rows.append({"rollouts": k * batch_rollouts, "to_true": float(np.mean([cosine(x, true_grad) for x in groups])),
                 "agreement": agree, "snr": agree / (1 - agree) if agree < 1 else math.inf})
    k *= 2
  return rows


def train_toy_model(model_cfg: ModelConfig, task: SortTask, tok: ByteTokenizer, steps: int,
                    seed: int = 0, lr: float = 2e-3) -> tuple[Callable[..., Any], Any, Any]:
  """SFT the tiny model on every sorting example (all prompts) for ``steps`` steps.

  Returns:
    (logits_fn, hidden_logits_fn, params) with the logits restricted to the alphabet.
  """
  every = ["".join(p) for p in itertools.product(task.alphabet, repeat=task.length)]
  tokens = np.asarray([[tok.bos_id] + tok.encode(p) + tok.encode(task.target(p)) for p in every], np.int32)
  logits_fn, params = train_tiny_model(model_cfg, tokens, 1 + task.length, steps, seed=seed, lr=lr)
  hidden_fn = make_logits_fn(init_model(model_cfg, seed)[0], return_hidden=True)  # same graph
  alphabet = tok.encode(task.alphabet)
  return (restrict_logits(logits_fn, alphabet), restrict_logits(hidden_fn, alphabet, return_hidden=True),
          params)


def run_study(arms: Sequence[Arm], logits_fn: Callable[..., Any], hidden_fn: Callable[..., Any],
              params: Any, task: SortTask, *, remasking: str = "low_confidence", group_size: int = 8,
              num_batches: int = 32, seed: int = 0, beta: float = 0.0, ref_params: Any = None,
              log: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
  """Runs every arm against the exact gradient of the sampler's expected reward.

  Args:
    arms: the (estimator, credit) pairs.
    logits_fn / hidden_fn: the toy model's (restricted) logits function and its hidden-state variant.
    params: θ (= θ_old) at which the gradients are compared.
    remasking: the sampler's rule ("low_confidence" or "random").
    beta: the KL coefficient; with ``ref_params`` ≠ ``params`` and β > 0 the target is the exact
      gradient of ``J − β KL`` (the KL term of the objective is then not zero).
  Returns:
    ``{"true": {...}, "rows": [...]}``: per arm the cosine of the mean update to the true gradient,
    the mean per-batch cosine, the agreement curve and the rollouts' mean reward.
  """
  tok = ByteTokenizer()
  ref_params = params if ref_params is None else ref_params
  prompts = task.prompts()
  prompt_ids = jnp.asarray(encode_prompts(tok, prompts))
  comps = all_completions(tok.encode(task.alphabet), task.length)
  rewards = jnp.asarray(np.stack([task.rewards([p] * len(comps), comps, tok) for p in prompts]))
  kw = dict(mask_id=tok.mask_id, remasking=remasking)
  j_fn = lambda prm: expected_reward(logits_fn, prm, prompt_ids, jnp.asarray(comps), rewards, **kw)
  j0, g_true = jax.jit(jax.value_and_grad(j_fn))(params)
  true = {"expected_reward": float(j0), "grad_norm": float(np.linalg.norm(flatten(g_true)))}
  targets = {"J": flatten(g_true)}
  if beta > 0:
    jb_fn = lambda prm: expected_reward(logits_fn, prm, prompt_ids, jnp.asarray(comps), rewards,
                                        ref_params=ref_params, beta=beta, **kw)
    targets["J-betaKL"] = flatten(jax.jit(jax.grad(jb_fn))(params))
  rows = []
  for arm in arms:
    cfg = study_config(arm, task, group_size, remasking, beta)
    learner = GRPOLearner(logits_fn, cfg, mask_id=tok.mask_id, eos_id=tok.eos_id, tokenizer=tok,
                          hidden_logits_fn=hidden_fn)
    dirs, info = batch_directions(learner, params, ref_params, task, tok, num_batches, seed)
    mean_dir = dirs.mean(0)
    row = {"estimator": arm.name, "credit": arm.credit, "objective": arm.objective,
           "cos_mean_update": cosine(mean_dir, targets["J"]),
           "cos_batch": float(np.mean([cosine(d, targets["J"]) for d in dirs])),
           "curve": agreement_curve(dirs, targets["J"], task.num_prompts * group_size), **info}
    if "J-betaKL" in targets:
      row["cos_mean_update_regularised"] = cosine(mean_dir, targets["J-betaKL"])
    rows.append(row)
    log(f"{arm.name:>12} {arm.credit:>12}: cos(E update, ∇J) {row['cos_mean_update']:+.3f}  "
        f"one batch {row['cos_batch']:+.3f}  agreement {row['curve'][0]['agreement']:+.3f}")
  return {"true": true, "rows": rows, "remasking": remasking, "group_size": group_size,
          "num_batches": num_batches, "batch_rollouts": task.num_prompts * group_size, "beta": beta}


def ascend_true_gradient(logits_fn: Callable[..., Any], params: Any, task: SortTask, steps: int,
                         lr: float, *, remasking: str) -> Any:
  """θ after ``steps`` Adam steps up the exact gradient of J (to study the KL term away from θ_ref)."""
  tok = ByteTokenizer()
  prompt_ids = jnp.asarray(encode_prompts(tok, task.prompts()))
  comps = all_completions(tok.encode(task.alphabet), task.length)
  rewards = jnp.asarray(np.stack([task.rewards([p] * len(comps), comps, tok) for p in task.prompts()]))
  grad = jax.jit(jax.grad(lambda prm: -expected_reward(logits_fn, prm, prompt_ids, jnp.asarray(comps), rewards,
                                                      mask_id=tok.mask_id, remasking=remasking)))
  opt = optax.adam(lr)
  state = opt.init(params)
  for _ in range(steps):
    upd, state = opt.update(grad(params), state, params)
    params = optax.apply_updates(params, upd)
  return params
