"""SPG (facebookresearch/SPG) against a NumPy transcription of its reference computation.

The oracle ``np_spg_reference`` transcribes ``spg/spg_trainer.py`` ``SPGTrainer._get_per_seq_logps``
(``logp_estimation`` "elbo" / "eubo" / "mix") and ``SPGTrainer.compute_loss`` step by step on arrays laid
out as SPG's ([B, num_t, L]); the library's ``spg_loss`` reads the same numbers flattened
context-major. The block masks are checked against SPG's ``forward_process(forward_type="block_random")``
rules, and the estimator's scores against a NumPy forward pass of the fixed-logit model.
"""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from daca_jax.config.configure import validate
from daca_jax.contracts import PolicyBatch
from daca_jax.errors import ConfigError
from daca_jax.likelihood import LIKELIHOOD, spg_block_masks
from daca_jax.likelihood.spg_block import spg_block_logprobs
from daca_jax.rl.methods import OBJECTIVES
from daca_jax.rl.update import make_objective_grad
from daca_jax.rl.methods.spg import spg_loss
from daca_jax.config.likelihood import LikelihoodConfig
from daca_jax.likelihood.spg_block import SPGBlockConfig
from daca_jax.config.rl import RLConfig
from daca_jax.rl.methods.spg import SPGConfig
from daca_jax.config.rollout import RolloutConfig
from daca_jax.config.train import TrainConfig
from tests.fixed_logit_model import jax_logits, make_params, np_logits

B, T, L = 6, 3, 8
_masks = jax.jit(spg_block_masks, static_argnums=(2, 3, 4, 5, 6))


def np_spg_reference(per_token_logps, perturb_mask, completion_mask, advantages, mode, eubo_beta, mix_weight):
  """SPG's _get_per_seq_logps + compute_loss (num_iterations = 1 slice), in NumPy float64.

  per_token_logps, perturb_mask: [B, num_t, L]; completion_mask: [B, L]; advantages: [B].
  """
  per_token_probs = np.exp(per_token_logps)
  cm = np.broadcast_to(completion_mask[:, None, :], per_token_logps.shape).astype(np.float64)
  pm = perturb_mask.astype(np.float64)
  denominator = (cm * pm).sum(axis=2)
  denominator = np.where(denominator == 0, 1e-8, denominator)  # SPG clamps when any is zero
  per_seq_logps = (per_token_logps * cm * pm).sum(axis=2) / denominator  # [B, num_t]
  empirical_t = (cm * pm).sum(axis=2) / cm.sum(axis=2)
  per_token_avg_ps = per_token_probs ** eubo_beta * pm * cm / np.maximum(empirical_t, 1e-8)[..., None]
  per_token_avg_ps = per_token_avg_ps.mean(axis=1)  # [B, L]
  dezero = np.where(per_token_avg_ps == 0, 1.0, per_token_avg_ps)
  loss_mask = (per_token_avg_ps > 0).astype(np.float64)
  positive = per_seq_logps.mean(axis=1)
  eubo = (np.log(dezero) * loss_mask).sum(axis=1) / np.maximum(loss_mask.sum(axis=1), 1e-8) / eubo_beta
  negative = {"eubo": eubo, "mix": mix_weight * eubo + (1 - mix_weight) * positive, "elbo": positive}[mode]
  reward_mask = advantages > 0
  per_seq = np.where(reward_mask, positive, negative)
  per_seq_loss = -advantages * per_seq
  completion_length = completion_mask.sum(axis=1)
  return (per_seq_loss * completion_length).sum() / completion_length.sum()


def _case(seed=0):
  """Hand-made SPG inputs: EOS padding in rows 1 and 4, advantages of both signs and one zero, a
  position never masked, a context with one target."""
  rng = np.random.default_rng(seed)
  logp = np.log(rng.uniform(0.05, 0.95, (B, T, L)))
  cm = np.ones((B, L))
  cm[1, 5:] = 0  # first EOS at position 4
  cm[4, 2:] = 0
  pm = rng.uniform(size=(B, T, L)) < 0.5
  pm[:, :, -1] = True  # every context scores at least one position (SPG warns on a zero denominator)
  pm[0, :, 0] = False  # a position no context masks (left out of the upper bound)
  pm[2, 1] = False
  pm[2, 1, 3] = True  # a context with a single target
  pm[1, :, 4] = True
  pm[4, :, 1] = True
  pm = pm | (cm[:, None, :] == 0)  # SPG masks everything after the EOS
  adv = np.array([0.7, -0.4, 1.2, -1.0, 0.0, -0.3])
  return logp, pm, cm, adv


def _flat(x):
  return jnp.asarray(np.transpose(x, (0, 1, 2)).reshape(x.shape[0], -1), jnp.float32)


def _policy_batch(pm, cm, adv, weights=None):
  b, t, length = pm.shape
  mask = (pm & (cm[:, None, :] > 0)).astype(np.float32)  # the learner's targets: estimator mask x completion mask
  w = np.ones((b, t, length)) if weights is None else np.broadcast_to(weights[:, None, :], (b, t, length))
  zeros = jnp.zeros((b, t * length), jnp.float32)
  return PolicyBatch(logp_old=zeros, logp_ref=zeros, advantages=jnp.asarray(adv, jnp.float32),
                     weights=_flat(w * cm[:, None, :]), mask=_flat(mask), completion_mask=jnp.asarray(cm, jnp.float32))


@pytest.mark.parametrize("mode,mix", [("mix", 0.5), ("eubo", 1.0), ("elbo", 0.0), ("mix", 0.3)])
@pytest.mark.parametrize("beta", [1.0, 1.5, 2.0])
def test_loss_matches_the_reference_transcription(mode, mix, beta):
  logp, pm, cm, adv = _case()
  want = np_spg_reference(logp, pm, cm, adv, mode, beta, mix)
  got, aux = spg_loss(_flat(logp), _policy_batch(pm, cm, adv), spg=SPGConfig(eubo_beta=beta, mix_weight=mix))
  np.testing.assert_allclose(float(got), want, rtol=2e-5, atol=1e-6)
  assert float(aux["neg_frac"]) == pytest.approx(4 / 6)  # A <= 0 takes the mixed bound, as SPG's reward_mask


def test_one_full_context_makes_both_bounds_the_mean_log_prob_and_the_sign_picks_the_bound():
  """S = 1 with every valid token a target (SML, mean-field: t = 1): ELBO = EUBO = the mean token
  log-prob, for any β; and ω moves only the rows with A <= 0."""
  logp, pm, cm, adv = _case(1)
  from daca_jax.rl.methods.spg import spg_bounds
  one = np.ones((B, 1, L), bool)
  batch = _policy_batch(one, cm, adv)
  for beta in (0.5, 1.5):
    elbo, eubo = spg_bounds(_flat(logp[:, :1]), batch.mask, batch.weights, batch.completion_mask, beta)
    want = (logp[:, 0] * cm).sum(-1) / cm.sum(-1)
    np.testing.assert_allclose(np.asarray(elbo), want, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(eubo), want, rtol=1e-5)
  batch = _policy_batch(pm, cm, adv)
  pos_only = np.where(adv > 0, adv, 0.0)
  a = spg_loss(_flat(logp), batch.replace(advantages=jnp.asarray(pos_only, jnp.float32)), spg=SPGConfig(mix_weight=0.0))[0]
  b = spg_loss(_flat(logp), batch.replace(advantages=jnp.asarray(pos_only, jnp.float32)), spg=SPGConfig(mix_weight=1.0))[0]
  assert float(a) == pytest.approx(float(b))


def test_credit_weights_multiply_each_bounds_token_terms():
  """Credit weights w_i scale token i's term in both bounds (the library's composition; w = 1 is SPG)."""
  logp, pm, cm, adv = _case(2)
  w = np.random.default_rng(3).uniform(0.5, 2.0, (B, L))
  # The same loss as SPG's on log-probs that already carry the weights (each bound is linear in the
  # weighted term), written out: ELBO via w·logp; EUBO via w·u_i.
  cmx = cm[:, None, :]
  m = pm * cmx
  n = m.sum(-1)
  elbo = ((w[:, None] * m * logp).sum(-1) / np.maximum(n, 1)).mean(-1)
  t = n / cm.sum(-1, keepdims=True)
  q = (np.exp(logp) ** 1.5 * m / np.maximum(t, 1e-8)[..., None]).mean(1)
  hit = q > 0
  u = np.where(hit, np.log(np.where(hit, q, 1.0)), 0.0) / 1.5
  eubo = (w * u).sum(-1) / hit.sum(-1)
  bound = np.where(adv > 0, elbo, 0.5 * eubo + 0.5 * elbo)
  want = -(adv * bound * cm.sum(-1)).sum() / cm.sum()
  got, _ = spg_loss(_flat(logp), _policy_batch(pm, cm, adv, w), spg=SPGConfig())
  np.testing.assert_allclose(float(got), want, rtol=2e-5)


def test_gradient_matches_finite_differences_of_the_reference():
  logp, pm, cm, adv = _case(4)
  batch = _policy_batch(pm, cm, adv)
  g = np.asarray(jax.grad(lambda lp: spg_loss(lp, batch, spg=SPGConfig(eubo_beta=1.5, mix_weight=0.5))[0])(_flat(logp)))
  fd = np.zeros_like(logp)
  h = 1e-6
  for idx in np.ndindex(*logp.shape):
    e = np.zeros_like(logp)
    e[idx] = h
    fd[idx] = (np_spg_reference(logp + e, pm, cm, adv, "mix", 1.5, 0.5)
               - np_spg_reference(logp - e, pm, cm, adv, "mix", 1.5, 0.5)) / (2 * h)
  fd = fd.reshape(B, -1)
  assert np.abs(fd).max() > 1e-3
  np.testing.assert_allclose(g, fd, atol=2e-5, rtol=1e-3)
  # Positions that are not targets (never masked, or after the EOS) get no gradient.
  np.testing.assert_array_equal(g[np.asarray(batch.mask) == 0], 0.0)


def test_without_the_completion_mask_spg_reads_one_context_and_refuses_token_advantages():
  logp, pm, cm, adv = _case()
  one = _policy_batch(np.ones((B, 1, L), bool), cm, adv)
  np.testing.assert_allclose(float(spg_loss(_flat(logp[:, :1]), one.replace(completion_mask=None))[0]),
                             float(spg_loss(_flat(logp[:, :1]), one)[0]), rtol=1e-6)
  batch = _policy_batch(pm, cm, adv)
  with pytest.raises(ValueError, match="sequence advantages"):
    spg_loss(_flat(logp), batch.replace(token_advantages=batch.weights))


# ---------------------------------------------------------------- block masks (forward_process)

@pytest.mark.parametrize("min_t,max_t", [(0.0, 1.0), (0.5, 0.5), (1.0, 1.0)])
def test_block_masks_follow_spgs_block_random_rules(min_t, max_t):
  block, length, num_t = 4, 16, 3
  lengths = jnp.asarray([16, 9, 4, 1, 13, 12], jnp.int32)
  for seed in range(20):
    masked, earlier = (np.asarray(x) for x in _masks(jax.random.PRNGKey(seed), lengths, length, num_t,
                                                        block, min_t, max_t))
    for j in range(num_t):
      for r, n in enumerate(np.asarray(lengths)):
        row, before = masked[j, r], earlier[j, r]
        k = int(np.argmax(~before)) // block
        valid_blocks = (n - 1) // block + 1
        assert k < valid_blocks  # perm % completion_num_blocks
        assert not row[before].any()  # earlier blocks clean
        assert row[(k + 1) * block:].all()  # later blocks masked
        assert row[n:].all()  # after the completion: masked (SPG: ~completion_mask_append)
        n_k = min(block, n - k * block)
        c = int(row[k * block:k * block + n_k].sum())
        lo, hi = max(int(n_k * min_t), 1), min(int(n_k * max_t), n_k)
        assert max(lo, 1) <= c <= max(hi, lo)


def test_block_choice_is_a_permutation_prefix_when_every_block_is_valid():
  """Rows of full length: the num_t contexts take distinct blocks (the first num_t of a permutation)."""
  lengths = jnp.full((5,), 16, jnp.int32)
  for seed in range(10):
    _, earlier = _masks(jax.random.PRNGKey(seed), lengths, 16, 4, 4, 0.0, 1.0)
    k = np.asarray(earlier).sum(-1) // 4  # [T, B] the chosen block of each context
    assert all(len(set(k[:, r])) == 4 for r in range(5))


# ---------------------------------------------------------------- the estimator vs a NumPy forward pass

V, MASK, P = 12, 10, 3


def _np_logprobs(params, x, targets, prompt_len):
  logits = np_logits(params, x)[:, prompt_len:]
  logits[..., MASK] = -np.inf  # the sampler's policy: never [MASK]
  logits = logits - logits.max(-1, keepdims=True)
  lse = np.log(np.exp(logits).sum(-1))
  return np.take_along_axis(logits, targets[..., None], -1)[..., 0] - lse


@pytest.mark.parametrize("p_mask_prompt", [0.0, 0.3])
def test_estimator_scores_each_context_as_a_numpy_forward_pass(p_mask_prompt):
  rng = np.random.default_rng(0)
  tokens = rng.integers(0, 9, (4, P + L)).astype(np.int32)
  cm = np.ones((4, L), np.float32)
  cm[1, 3:] = 0
  cm[3, 6:] = 0
  params = make_params(P + L, V, seed=1)
  cfg = SPGBlockConfig(num_t=2, block_length=4)
  key = jax.random.PRNGKey(5)
  s = spg_block_logprobs(jax_logits, jax.tree.map(jnp.asarray, params), jnp.asarray(tokens), P, key, mask_id=MASK,
                         completion_mask=jnp.asarray(cm), spg_block=cfg, p_mask_prompt=p_mask_prompt)
  assert s.kind == "logprob" and s.num_states == 2 and s.weight is None
  mask = np.asarray(s.mask).reshape(4, 2, L) > 0
  # Rebuild the contexts from the returned masks and the same prompt draw (SPG's per-context draw).
  k_prompt, k_est = jax.random.split(key)
  masked, earlier = (np.asarray(x) for x in spg_block_masks(k_est, jnp.asarray(cm.sum(-1), jnp.int32), L, 2, 4, 0.0, 1.0))
  hit = np.asarray(jax.random.uniform(k_prompt, (2, 4, P + L)) < p_mask_prompt) if p_mask_prompt else np.zeros((2, 4, P + L), bool)
  want_mask = masked | (earlier & hit[..., P:])
  np.testing.assert_array_equal(mask, want_mask.transpose(1, 0, 2))
  logp = np.asarray(s.logp).reshape(4, 2, L)
  for j in range(2):
    x = tokens.copy()
    x[:, :P] = np.where(hit[j, :, :P], MASK, x[:, :P])
    x[:, P:] = np.where(want_mask[j], MASK, x[:, P:])
    np.testing.assert_allclose(logp[:, j], _np_logprobs(params, x, tokens[:, P:], P), rtol=1e-5, atol=1e-5)


def test_estimator_is_registered_and_checks_its_block_config():
  assert "spg_block" in LIKELIHOOD.names() and "spg" in OBJECTIVES.names()
  tokens = jnp.zeros((2, P + 6), jnp.int32)
  with pytest.raises(ValueError, match="must divide"):
    spg_block_logprobs(jax_logits, jax.tree.map(jnp.asarray, make_params(P + 6, V)), tokens, P, jax.random.PRNGKey(0), mask_id=MASK,
                       spg_block=SPGBlockConfig(num_t=1, block_length=4))
  with pytest.raises(ValueError, match="exceeds"):
    spg_block_logprobs(jax_logits, jax.tree.map(jnp.asarray, make_params(P + 6, V)), tokens, P, jax.random.PRNGKey(0), mask_id=MASK,
                       spg_block=SPGBlockConfig(num_t=3, block_length=3))


# ---------------------------------------------------------------- configuration

def _train_cfg(**rl):
  base = dict(objective="spg", likelihood="spg_block", credit="uniform", beta=0.0, group_size=4, prompts_per_step=2)
  return TrainConfig(rollout=RolloutConfig(gen_length=8, block_length=4, steps=4),
                     likelihood=LikelihoodConfig(spg_block=SPGBlockConfig(num_t=2, block_length=4)),
                     rl=RLConfig(**{**base, **rl}))


def test_spg_config_accepts_the_recipe_and_sml():
  validate(_train_cfg())
  for likelihood in ("stratified", "mean_field", "trajectory"):
    validate(_train_cfg(likelihood=likelihood))
  validate(_train_cfg(credit="dps"))
  validate(_train_cfg(objective="diffu_grpo", beta=0.04))  # the block contexts under another objective


@pytest.mark.parametrize("rl,match", [
    (dict(beta=0.04), r"rl\.beta=0\.04.*no KL term"),
    (dict(likelihood="elbo"), r"rl\.likelihood='elbo'.*own 1/t"),
    (dict(likelihood="coupled"), r"rl\.likelihood='coupled'"),
    (dict(likelihood="espo_elbo"), r"rl\.likelihood='espo_elbo'"),
    (dict(likelihood="rldf"), r"rl\.likelihood='rldf'.*rebuilt rollout states"),
    (dict(credit="token_reward"), r"rl\.credit='token_reward'.*sign of the sequence advantage"),
    (dict(credit="contrast"), r"rl\.credit='contrast'"),
])
def test_spg_refuses_combinations_that_are_not_meaningful(rl, match):
  with pytest.raises(ConfigError, match=match):
    validate(_train_cfg(**rl))


def test_spg_block_config_is_checked_against_the_rollout():
  cfg = _train_cfg()
  with pytest.raises(ConfigError, match=r"likelihood\.spg_block\.block_length=3.*divisor of rollout\.gen_length=8"):
    validate(dataclasses.replace(cfg, likelihood=LikelihoodConfig(spg_block=SPGBlockConfig(num_t=1, block_length=3))))
  with pytest.raises(ConfigError, match=r"likelihood\.spg_block\.num_t=3.*2 blocks"):
    validate(dataclasses.replace(cfg, likelihood=LikelihoodConfig(spg_block=SPGBlockConfig(num_t=3, block_length=4))))
  with pytest.raises(ConfigError, match=r"rl\.spg\.eubo_beta"):
    SPGConfig(eubo_beta=0.0).validate()
  with pytest.raises(ConfigError, match=r"rl\.spg\.mix_weight"):
    SPGConfig(mix_weight=1.5).validate()
  with pytest.raises(ConfigError, match=r"likelihood\.spg_block\.min_t"):
    SPGBlockConfig(min_t=0.8, max_t=0.5).validate()


def test_learner_gradient_runs_end_to_end_and_equals_the_objective_on_the_estimators_scores():
  """make_objective_grad (estimator -> targets -> spg) on the fixed-logit model: the loss equals the
  reference transcription applied to the estimator's own outputs."""
  cfg = _train_cfg(credit="uniform")
  b = 8
  params = jax.tree.map(jnp.asarray, make_params(P + L, V, seed=0, scale=1.0))
  rng = np.random.default_rng(0)
  tokens = jnp.asarray(rng.integers(0, 9, (b, P + L)), jnp.int32)
  cm = np.ones((b, L), np.float32)
  cm[2, 5:] = 0
  from daca_jax.contracts import Trajectory
  traj = Trajectory(tokens=tokens, completion_mask=jnp.asarray(cm), commit_step=jnp.zeros((b, L), jnp.int32),
                    commit_conf=jnp.zeros((b, L), jnp.float32), prompt_len=P, mask_id=MASK)
  rewards = jnp.asarray(rng.choice([0.0, 1.0], b), jnp.float32)
  grad = make_objective_grad(jax_logits, cfg, mask_id=MASK)
  key = jax.random.PRNGKey(3)
  grads, aux = jax.jit(grad)(params, params, traj, rewards, jnp.asarray(cm), key)
  assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(grads))
  from daca_jax.rl.update import make_scores_fn
  s = jax.jit(make_scores_fn(jax_logits, cfg, mask_id=MASK))(params, traj, key)
  r = np.asarray(rewards).reshape(-1, 4)
  adv = (r - r.mean(1, keepdims=True)).reshape(-1)
  want = np_spg_reference(np.asarray(s.logp, np.float64).reshape(b, 2, L), np.asarray(s.mask).reshape(b, 2, L) > 0,
                          cm, adv, "mix", 1.5, 0.5)
  np.testing.assert_allclose(float(aux["loss"]), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("objective,reads_old", [("spg", False), ("wd1", False), ("diffu_grpo", True)])
def test_a_ratio_free_objective_makes_no_old_policy_pass(objective, reads_old):
  """SPG and wd1 never read logp_old: given θ_old (a μ > 1 inner update) the gradient runs the
  model as often as at the first inner update; diffu-GRPO's ratio needs the extra θ_old pass."""
  extra = {} if objective == "spg" else dict(likelihood="stratified", beta=0.0)
  cfg = _train_cfg(objective=objective, **extra)
  params = jax.tree.map(jnp.asarray, make_params(P + L, V, seed=0, scale=1.0))
  b = 8
  tokens = jnp.asarray(np.random.default_rng(0).integers(0, 9, (b, P + L)), jnp.int32)
  from daca_jax.contracts import Trajectory
  traj = Trajectory(tokens=tokens, completion_mask=jnp.ones((b, L)), commit_step=jnp.zeros((b, L), jnp.int32),
                    commit_conf=jnp.zeros((b, L), jnp.float32), prompt_len=P, mask_id=MASK)
  calls = []

  def counted(prm, x):
    calls.append(1)
    return jax_logits(prm, x)

  grad = make_objective_grad(counted, cfg, mask_id=MASK)
  args = (params, params, traj, jnp.asarray([0.0, 1.0] * 4), jnp.ones((b, L)), jax.random.PRNGKey(0))
  jax.make_jaxpr(lambda: grad(*args))()
  first = len(calls)
  calls.clear()
  old = jax.tree.map(lambda x: x + 0.1, params)
  jax.make_jaxpr(lambda: grad(*args, old_params=old))()
  assert OBJECTIVES.get(objective).reads_old == reads_old
  assert first > 0 and len(calls) == (2 * first if reads_old else first)
  if not reads_old:  # θ_old cannot change a ratio-free loss
    loss = jax.jit(lambda o: grad(*args, old_params=o)[1]["loss"])
    np.testing.assert_allclose(float(loss(old)), float(loss(None)), rtol=1e-6)
