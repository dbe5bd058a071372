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
(:meth:`daca_jax.rl.GRPOLearner.objective_grad`, the direction an update takes before the
optimizer) on independent rollout batches, and the study reports the cosine of the expected update to
the true gradient (its *bias* in direction), the cosine of one batch's update to it, and the
agreement between independent batches (the gradient SNR) as the number of rollouts grows. With β > 0
and θ away from the reference it also compares against the exact gradient of the KL-regularised
objective ``J − β KL(p_θ || p_ref)``, where the KL is the sampler's (also enumerated).
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

from daca_jax.errors import DataError
from daca_jax.studies.estimator_study import train_tiny_model
from daca_jax.models import init_model, make_logits_fn
from daca_jax.rl.learner import GRPOLearner
from daca_jax.tasks.tokenizer import ByteTokenizer
from daca_jax.types import (CreditConfig, ELBOConfig, LikelihoodConfig, ModelConfig, RLConfig, RLDFConfig,
                            RolloutConfig, StratifiedConfig, TrainConfig)

# Logit given to ids outside the alphabet: finite, so that entropies stay finite (0 · -inf is NaN).
_EXCLUDED_LOGIT = -1e9
# Floor of the log-probability of an impossible step (keeps gradients finite; e^-1e4 is 0).
_LOG_FLOOR = -1e4


def restrict_logits(logits_fn: Callable[..., Any], allowed_ids: Sequence[int],
                    return_hidden: bool = False) -> Callable[..., Any]:
  """A logits function whose distribution is the model's renormalised over ``allowed_ids``.

  Args:
    logits_fn: ``(params, tokens [B, T]) -> logits [B, T, V]`` (or ``(logits, hidden)`` when
      ``return_hidden``).
    allowed_ids: the ids the sampler may propose.
  Returns:
    The same signature; every other id gets a logit of -1e9.
  """
  allowed = np.asarray(sorted(set(int(i) for i in allowed_ids)), np.int32)

  def fn(params: Any, tokens: jax.Array) -> Any:
    out = logits_fn(params, tokens)
    logits, hidden = out if return_hidden else (out, None)
    mask = jnp.zeros((logits.shape[-1],), bool).at[allowed].set(True)
    logits = jnp.where(mask, logits.astype(jnp.float32), _EXCLUDED_LOGIT)
    return (logits, hidden) if return_hidden else logits

  return fn


def _safe_log(x: jax.Array) -> jax.Array:
  """log x, with log 0 = -1e4 and a zero gradient there (the double-where trick)."""
  pos = x > 0
  return jnp.where(pos, jnp.log(jnp.where(pos, x, 1.0)), _LOG_FLOOR)


def step_logprobs(probs: jax.Array, completion: jax.Array, masked: jax.Array, remasking: str) -> jax.Array:
  """log P(the step commits token ``completion_j`` at position j) for every masked position j.

  Args:
    probs: float32 [B, L, V] the model's distributions at every completion position in this state.
    completion: int32 [B, L] the completion being scored.
    masked: bool [B, L] positions still masked in this state.
    remasking: "random" or "low_confidence" (one token committed per step, temperature 1).
  Returns:
    float32 [B, L]; meaningless where ``masked`` is False.
  Raises:
    ValueError: another remasking rule.
  """
  own = jnp.take_along_axis(probs, completion[..., None], -1)[..., 0]  # [B, L]: p_j(o_j)
  if remasking == "random":
    n = jnp.sum(masked, -1, keepdims=True).astype(jnp.float32)
    return _safe_log(own) - jnp.log(jnp.maximum(n, 1.0))
  if remasking != "low_confidence":
    raise ValueError(f"rollout.remasking={remasking!r}: the exact sampler probability is defined for "
                     "'random' and 'low_confidence'")
  length = completion.shape[1]
  j = jnp.arange(length)
  c = own[:, :, None, None]  # [B, j, 1, 1] the winning candidate's probability
  pk = probs[:, None, :, :]  # [B, 1, k, V]
  later = (j[None, :] > j[:, None])[None, :, :, None]  # [1, j, k, 1]: k > j loses ties to j
  below = (pk < c) | ((pk == c) & later)
  f = jnp.sum(pk * below, -1)  # [B, j, k]: P(x0_k's probability loses to c)
  others = masked[:, None, :] & (j[:, None] != j[None, :])[None]  # [B, j, k]
  return _safe_log(own) + jnp.sum(jnp.where(others, _safe_log(f), 0.0), -1)


def sampler_logprob(logits_fn: Callable[..., jax.Array], params: Any, prompts: jax.Array,
                    completions: jax.Array, *, mask_id: int, remasking: str) -> jax.Array:
  """Exact log-probability that the one-token-per-step sampler produces each completion.

  The sampler is :func:`daca_jax.diffusion.make_rollout_fn` with ``block_length = steps =
  gen_length = L`` and temperature 1 over ``logits_fn``. Dynamic programming over revealed sets:
  ``F(∅) = 1``, ``F(S ∪ {j}) += F(S) · P_t(j, o_j | S)``; ``log p(o) = log F(all)``.

  Args:
    logits_fn: pure ``(params, tokens [B, P+L]) -> logits [B, P+L, V]`` (e.g. restricted to an
      alphabet with :func:`restrict_logits`).
    prompts: int32 [B, P]; completions: int32 [B, L] with L <= 12.
    mask_id: ``[MASK]`` id; remasking: "random" or "low_confidence".
  Returns:
    float32 [B]; differentiable in ``params``.
  Raises:
    ValueError: L > 12, or an unsupported remasking rule.
  """
  b, length = completions.shape
  if length > 12:
    raise ValueError(f"the exact sampler probability needs L <= 12 (2^L forward passes), got L={length}")
  n_sets = 1 << length
  bits = jnp.asarray((np.arange(n_sets)[:, None] >> np.arange(length)[None, :]) & 1, bool)  # [2^L, L]

  def at_set(vis: jax.Array) -> jax.Array:  # [L] revealed -> [B, L] log P(commit j next)
    x = jnp.concatenate([prompts, jnp.where(vis[None, :], completions, mask_id)], axis=1)
    logits = logits_fn(params, x)[:, prompts.shape[1]:].astype(jnp.float32)
    probs = jax.nn.softmax(logits, axis=-1)
    return step_logprobs(probs, completions, jnp.broadcast_to(~vis, (b, length)), remasking)

  lp = jax.vmap(at_set)(bits)  # [2^L, B, L]
  log_f: list[Any] = [None] * n_sets
  log_f[0] = jnp.zeros((b,), jnp.float32)
  for s in sorted(range(1, n_sets), key=lambda m: bin(m).count("1")):
    terms = [log_f[s ^ (1 << i)] + lp[s ^ (1 << i), :, i] for i in range(length) if s >> i & 1]
    log_f[s] = jax.nn.logsumexp(jnp.stack(terms), axis=0)
  return log_f[n_sets - 1]


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


def all_completions(alphabet_ids: Sequence[int], length: int) -> np.ndarray:
  """int32 [V^L, L]: every completion over the alphabet, in lexicographic order."""
  return np.asarray(list(itertools.product(alphabet_ids, repeat=length)), np.int32)


def encode_prompts(tok: ByteTokenizer, prompts: Sequence[str]) -> np.ndarray:
  return np.asarray([[tok.bos_id] + tok.encode(p) for p in prompts], np.int32)


def completion_distribution(logits_fn: Callable[..., jax.Array], params: Any, prompt_ids: jax.Array,
                            comps: jax.Array, *, mask_id: int, remasking: str) -> jax.Array:
  """float32 [Q, V^L]: the sampler's probability of every completion for each of the Q prompts."""
  q, n = prompt_ids.shape[0], comps.shape[0]
  lp = sampler_logprob(logits_fn, params, jnp.repeat(prompt_ids, n, 0), jnp.tile(comps, (q, 1)),
                       mask_id=mask_id, remasking=remasking)
  return jnp.exp(lp).reshape(q, n)


def expected_reward(logits_fn: Callable[..., jax.Array], params: Any, prompt_ids: jax.Array,
                    comps: jax.Array, rewards: jax.Array, *, mask_id: int, remasking: str,
                    ref_params: Any = None, beta: float = 0.0) -> jax.Array:
  """``J(θ) = mean_q Σ_o p_θ(o|q) R(q, o)`` (minus ``β · mean_q KL(p_θ(·|q) || p_ref(·|q))`` when
  ``beta > 0``), exactly.

  Args:
    prompt_ids: int32 [Q, P]; comps: int32 [N, L] every completion; rewards: float32 [Q, N].
    ref_params: the reference policy of the KL term (needed when ``beta > 0``).
  Returns:
    float32 scalar.
  """
  p = completion_distribution(logits_fn, params, prompt_ids, comps, mask_id=mask_id, remasking=remasking)
  j = jnp.mean(jnp.sum(p * rewards, -1))
  if beta > 0:
    p_ref = jax.lax.stop_gradient(completion_distribution(logits_fn, ref_params, prompt_ids, comps,
                                                          mask_id=mask_id, remasking=remasking))
    kl = jnp.sum(p * (_safe_log(p) - _safe_log(p_ref)), -1)
    j = j - beta * jnp.mean(kl)
  return j


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


def markdown_table(result: dict[str, Any], at_rollouts: int | None = None) -> str:
  """One row per arm: cosines to the true gradient and the batch agreement."""
  rows = result["rows"]
  reg = "cos_mean_update_regularised" in rows[0]
  head = ["estimator", "credit", "cos(E[update], ∇J)", "cos(one batch, ∇J)", "batch agreement (SNR)"]
  head += [f"cos to ∇J at {at_rollouts} rollouts"] if at_rollouts else []
  head += ["cos(E[update], ∇(J−βKL))"] if reg else []
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for r in rows:
    c0 = r["curve"][0]
    cells = [r["estimator"], r["credit"], f"{r['cos_mean_update']:+.3f}", f"{r['cos_batch']:+.3f}",
             f"{c0['agreement']:+.3f} ({c0['snr']:.3f})"]
    if at_rollouts:
      hit = [c for c in r["curve"] if c["rollouts"] == at_rollouts]
      cells.append(f"{hit[0]['to_true']:+.3f}" if hit else "")
    if reg:
      cells.append(f"{r['cos_mean_update_regularised']:+.3f}")
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines)


def by_estimator_table(result: dict[str, Any]) -> str:
  """One row per estimator of a regularised study: the cosine of its mean update to ∇(J − βKL) and its
  batch agreement under each credit, side by side (credits in the order of the rows).

  Raises:
    DataError: the study has no regularised cosine (only the ``regularised`` study has one).
  """
  rows = result["rows"]
  if not rows or "cos_mean_update_regularised" not in rows[0]:
    raise DataError("this study has no cos(E[update], ∇(J−βKL)) column: only the regularised study has one")
  credits = list(dict.fromkeys(r["credit"] for r in rows))
  by = {(r["estimator"], r["credit"]): r for r in rows}

  def cells(estimator: str, value: Callable[[dict[str, Any]], float]) -> str:
    return " / ".join(f"{value(by[(estimator, c)]):+.3f}" if (estimator, c) in by else "n/a" for c in credits)

  lines = [f"| estimator | cos(E[update], ∇(J−βKL)), {' / '.join(credits)} credit | "
           f"batch agreement, {' / '.join(credits)} |", "|---|---|---|"]
  for e in dict.fromkeys(r["estimator"] for r in rows):
    lines.append(f"| {e} | {cells(e, lambda r: r['cos_mean_update_regularised'])} | "
                 f"{cells(e, lambda r: r['curve'][0]['agreement'])} |")
  return "\n".join(lines)


def report_header(out: dict[str, Any]) -> str:
  """One paragraph saying what the tables are."""
  t = out["task"]
  lc = out["studies"]["low_confidence"]
  return (f"Toy: sort {t['length']} letters of '{t['alphabet']}' ({len(t['alphabet'])}^{t['length']} "
          f"completions enumerated), {t['num_prompts']} prompts, a tiny model after {out['train_steps']} SFT "
          f"steps (expected reward {lc['true']['expected_reward']:.3f} under low-confidence remasking). "
          f"Each arm: {lc['num_batches']} independent batches of {lc['batch_rollouts']} rollouts "
          f"(G = {lc['group_size']}). Columns: cosine of the mean update (over all batches) to the exact "
          "gradient ∇J of the sampler's expected reward (bias of direction); mean cosine of one batch's "
          "update to ∇J; cosine between independent batches (and SNR = c / (1 − c)); the cosine to ∇J "
          "of an update on 4 batches.")


def plot(result: dict[str, Any], png_path: Any) -> None:
  """Two panels against the number of rollouts: batch agreement and cosine to ∇J, one line per
  estimator (credit uniform solid, token_reward dashed)."""
  from matplotlib.backends.backend_agg import FigureCanvasAgg
  from matplotlib.figure import Figure

  fig = Figure(figsize=(11, 4.2))
  FigureCanvasAgg(fig)
  axes = [fig.add_subplot(1, 2, i + 1) for i in range(2)]
  estimators = list(dict.fromkeys(r["estimator"] for r in result["rows"]))
  colors = {e: f"C{i}" for i, e in enumerate(estimators)}
  for r in result["rows"]:
    if r["credit"] not in ("uniform", "token_reward"):
      continue
    xs = [c["rollouts"] for c in r["curve"]]
    style = "-" if r["credit"] == "uniform" else "--"
    label = r["estimator"] if r["credit"] == "uniform" else None
    axes[0].plot(xs, [c["agreement"] for c in r["curve"]], style, color=colors[r["estimator"]], label=label)
    axes[1].plot(xs, [c["to_true"] for c in r["curve"]], style, color=colors[r["estimator"]])
  for ax, name in zip(axes, ("agreement of independent updates (cosine)", "cosine of the update to ∇J")):
    ax.set_xscale("log", base=2)
    ax.set_xlabel("rollouts per update")
    ax.set_ylabel(name)
    ax.grid(alpha=0.3)
  fig.legend(loc="center right", fontsize=8, title="estimator\n(solid: uniform credit,\ndashed: token reward)")
  fig.tight_layout(rect=(0, 0, 0.82, 1))
  fig.savefig(str(png_path), dpi=110)
