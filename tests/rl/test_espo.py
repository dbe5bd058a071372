"""ESPO (ML-GSAI/ESPO) against NumPy transcriptions of its reference computation.

Oracles: ``np_espo_loss`` transcribes ``espo/espo_trainer.py`` ``ESPOTrainer.compute_loss`` with
``compute_approx_kl(..., "k2")``; ``np_espo_elbo`` transcribes ``ESPOTrainer._get_elbo`` (mask pass,
coupled complement, their factors, the halving) and ``_get_elbo_mc`` (the mean over draws) on the masks
the estimator drew; ``np_rloo`` the ``leave_one_out`` branch of ``_generate_and_score_completions``;
``np_forward_process_counts`` the mask counts of ``forward_process``.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from daca_jax.config.configure import validate
from daca_jax.contracts import PolicyBatch, Trajectory
from daca_jax.errors import ConfigError
from daca_jax.likelihood import LIKELIHOOD
from daca_jax.likelihood.espo_elbo import espo_counts, espo_elbo_logprobs, exact_count_masks
from daca_jax.rl.advantages import ADVANTAGES
from daca_jax.rl.methods import OBJECTIVES
from daca_jax.rl.update import make_objective_grad
from daca_jax.rl.advantages import advantage_name, rloo_advantages
from daca_jax.rl.methods.espo import espo_loss
from daca_jax.config.likelihood import LikelihoodConfig
from daca_jax.likelihood.espo_elbo import ESPOELBOConfig
from daca_jax.likelihood.spg_block import SPGBlockConfig
from daca_jax.config.rl import RLConfig
from daca_jax.config.rollout import RolloutConfig
from daca_jax.config.train import TrainConfig
from tests.fixed_logit_model import jax_logits, make_params, np_logits

B, L = 6, 8


def np_espo_loss(per_token_logps, old, ref, advantages, eps, beta, length):
  """compute_loss: per_token_logps etc. are [B, 1] sequence ELBOs (ESPO's misnomer)."""
  coef_1 = np.exp((per_token_logps - old) / length)
  coef_2 = np.clip(coef_1, 1 - eps, 1 + eps)
  l1 = coef_1 * advantages.reshape(-1, 1)
  l2 = coef_2 * advantages.reshape(-1, 1)
  batch_size = per_token_logps.shape[0]
  loss = -np.minimum(l1, l2).sum() / batch_size
  if beta != 0.0:
    kl = (per_token_logps - ref) ** 2 / 2.0
    loss += beta * kl.sum() / (batch_size * length)
  return loss


def np_rloo(rewards, k):
  g = rewards.reshape(-1, k)
  baseline = (g.sum(1, keepdims=True) - g) / (k - 1)
  return (g - baseline).reshape(-1)


def np_forward_process_counts(k, b, target_len):
  """forward_process: x = round(linspace(k, k + (b-1)(L+1)/b, b)) % (L+1)."""
  x = np.round(np.linspace(float(k), k + (b - 1) * ((target_len + 1) / b), b)).astype(int)
  return x % (target_len + 1)


def _case(seed=0):
  rng = np.random.default_rng(seed)
  c = rng.normal(-0.3, 0.4, (B, L))  # per-token ELBO terms under θ
  mask = np.ones((B, L))
  mask[2, 5:] = 0  # EOS padding (left out of the sums here; ESPO's reference sums every position)
  old = c + rng.normal(0, 0.5, (B, L))
  ref = c + rng.normal(0, 0.5, (B, L))
  adv = np.array([1.0, -0.5, 0.8, -1.2, 0.0, 0.3])
  return c, mask, old, ref, adv


def _batch(mask, old, ref, adv, w=None):
  f = lambda x: jnp.asarray(x, jnp.float32)
  return PolicyBatch(logp_old=f(old), logp_ref=f(ref), advantages=f(adv), weights=f(mask if w is None else w * mask),
                     mask=f(mask), completion_mask=f(mask))


@pytest.mark.parametrize("eps,beta", [(0.2, 0.0), (0.2, 1e-2), (0.0, 3e-3), (0.5, 1e-3)])
def test_loss_matches_the_reference_transcription(eps, beta):
  c, mask, old, ref, adv = _case()
  seq = lambda x: (x * mask).sum(-1, keepdims=True)  # the ELBO over the completion mask
  want = np_espo_loss(seq(c), seq(old), seq(ref), adv, eps, beta, L)
  got, aux = espo_loss(jnp.asarray(c, jnp.float32), _batch(mask, old, ref, adv), clip_eps=eps, beta=beta)
  np.testing.assert_allclose(float(got), want, rtol=2e-5, atol=1e-6)
  np.testing.assert_allclose(float(aux["ratio_mean"]), np.exp((seq(c) - seq(old))[:, 0] / L).mean(), rtol=1e-5)


def test_gradient_matches_finite_differences_of_the_reference():
  c, mask, old, ref, adv = _case(1)
  old = c + 0.05 * np.sign(np.random.default_rng(2).normal(size=c.shape))  # some rows inside, some clipped
  seq = lambda x: (x * mask).sum(-1, keepdims=True)
  f = lambda x: np_espo_loss(seq(x), seq(old), seq(ref), adv, 0.2, 1e-2, L)
  g = np.asarray(jax.grad(lambda x: espo_loss(x, _batch(mask, old, ref, adv), clip_eps=0.2, beta=1e-2)[0])(
      jnp.asarray(c, jnp.float32)))
  fd = np.zeros_like(c)
  for idx in np.ndindex(*c.shape):
    e = np.zeros_like(c)
    e[idx] = 1e-6
    fd[idx] = (f(c + e) - f(c - e)) / 2e-6
  assert np.abs(fd).max() > 1e-3
  np.testing.assert_allclose(g, fd, atol=2e-6, rtol=1e-3)
  np.testing.assert_array_equal(g[mask == 0], 0.0)  # the padding carries no gradient


def test_credit_weights_enter_the_ratio_not_the_kl():
  c, mask, old, ref, adv = _case(3)
  w = np.random.default_rng(4).uniform(0.5, 2.0, (B, L))
  ratio = np.exp((w * mask * (c - old)).sum(-1) / L)
  pg = np.mean(-np.minimum(ratio * adv, np.clip(ratio, 0.8, 1.2) * adv))
  kl = np.mean(((mask * (c - ref)).sum(-1)) ** 2 / 2) / L
  got, _ = espo_loss(jnp.asarray(c, jnp.float32), _batch(mask, old, ref, adv, w), clip_eps=0.2, beta=0.1)
  np.testing.assert_allclose(float(got), pg + 0.1 * kl, rtol=2e-5)


def test_espo_refuses_per_token_advantages_and_more_than_one_term_per_token():
  c, mask, old, ref, adv = _case()
  batch = _batch(mask, old, ref, adv)
  with pytest.raises(ValueError, match="sequence advantages"):
    espo_loss(jnp.asarray(c, jnp.float32), batch.replace(token_advantages=batch.weights))
  two = lambda x: jnp.asarray(np.concatenate([x, x], 1), jnp.float32)
  wide = PolicyBatch(logp_old=two(old), logp_ref=two(ref), advantages=batch.advantages, weights=two(mask),
                     mask=two(mask), completion_mask=batch.completion_mask)
  with pytest.raises(Exception, match="elbo_terms='summed'"):
    espo_loss(two(c), wide)


# ---------------------------------------------------------------- RLOO advantages

def test_rloo_matches_the_reference_and_is_espos_default():
  rewards = np.random.default_rng(0).choice([0.0, 0.5, 1.0], 12)
  for g in (2, 3, 6):
    np.testing.assert_allclose(np.asarray(rloo_advantages(jnp.asarray(rewards, jnp.float32), g)), np_rloo(rewards, g),
                               rtol=1e-6, atol=1e-7)
  assert advantage_name("espo") == "rloo" and "rloo" in ADVANTAGES.names()
  np.testing.assert_allclose(np.asarray(ADVANTAGES.get("rloo")(jnp.asarray(rewards, jnp.float32), 6)), np_rloo(rewards, 6),
                             rtol=1e-6, atol=1e-7)
  with pytest.raises(ValueError, match="group_size >= 2"):
    rloo_advantages(jnp.ones(4), 1)


# ---------------------------------------------------------------- the estimator

def test_batch_stratified_counts_are_forward_process_counts():
  for seed in range(8):
    key = jax.random.PRNGKey(seed)
    counts = np.asarray(espo_counts(key, 5, L, 2, "batch"))  # [M, B]
    for m, km in enumerate(jax.random.split(key, 2)):
      k = int(jax.random.randint(km, (), 0, L + 1))
      np.testing.assert_array_equal(counts[m], np_forward_process_counts(k, 5, L))
  rows = np.asarray(espo_counts(jax.random.PRNGKey(0), 7, L, 3, "row"))  # [M, B]: per row, a grid of 3
  for r, kr in enumerate(jax.random.split(jax.random.PRNGKey(0), 7)):
    d = np.sort(rows[:, r])
    assert len(set(rows[:, r])) == 3 and np.all(np.diff(d) >= 2)  # (L+1)/3 = 3 apart, up to rounding
    # "row": forward_process's grid laid over one sequence's M draws (its own offset k) instead of B rows
    np.testing.assert_array_equal(rows[:, r], np_forward_process_counts(int(jax.random.randint(kr, (), 0, L + 1)), 3, L))
  # M = 2 draws over L + 1 = 9 counts: the second 4.5 away, rounded half to even as torch.round does
  two = np.asarray(espo_counts(jax.random.PRNGKey(1), 5, L, 2, "row"))
  for r, kr in enumerate(jax.random.split(jax.random.PRNGKey(1), 5)):
    np.testing.assert_array_equal(two[:, r], np_forward_process_counts(int(jax.random.randint(kr, (), 0, L + 1)), 2, L))


V, MASK, P = 12, 10, 3


def _np_logprobs(params, x, targets):
  logits = np_logits(params, x)[:, P:]
  logits[..., MASK] = -np.inf  # the sampler's policy: never [MASK]
  logits = logits - logits.max(-1, keepdims=True)
  return np.take_along_axis(logits, targets[..., None], -1)[..., 0] - np.log(np.exp(logits).sum(-1))


def np_espo_elbo(params, tokens, first_masks, counts, reduce_var=True):
  """_get_elbo for each draw (masks from the estimator's draw), then _get_elbo_mc's mean. [B]."""
  comp = tokens[:, P:]
  out = []
  for mask_index_kept, x in zip(first_masks, counts):
    p_mask = (x / (L + 1))[:, None].repeat(L, 1)
    loss = np.zeros((tokens.shape[0], L))
    xin = tokens.copy()
    xin[:, P:] = np.where(mask_index_kept, MASK, comp)
    ce = -_np_logprobs(params, xin, comp)
    loss[mask_index_kept] = ce[mask_index_kept] / p_mask[mask_index_kept]
    if reduce_var:
      xin = tokens.copy()
      xin[:, P:] = np.where(mask_index_kept, comp, MASK)
      ce = -_np_logprobs(params, xin, comp)
      loss[~mask_index_kept] = ce[~mask_index_kept] / (L / (L + 1) - p_mask[~mask_index_kept])
      loss /= 2
    out.append(-loss.sum(-1))
  return np.mean(out, 0)


@pytest.mark.parametrize("cfg", [ESPOELBOConfig(num_mc=1), ESPOELBOConfig(num_mc=2),
                                 ESPOELBOConfig(num_mc=2, stratify="batch"), ESPOELBOConfig(num_mc=2, coupled=False)])
def test_estimator_elbo_matches_the_reference_transcription(cfg):
  rng = np.random.default_rng(0)
  tokens = rng.integers(0, 9, (5, P + L)).astype(np.int32)
  params = make_params(P + L, V, seed=1)
  key = jax.random.PRNGKey(11)
  s = jax.jit(lambda t, k: espo_elbo_logprobs(jax_logits, jax.tree.map(jnp.asarray, params), t, P, k, mask_id=MASK,
                                              espo_elbo=cfg))(jnp.asarray(tokens), key)
  assert s.kind == "elbo" and s.num_states == cfg.num_mc * (2 if cfg.coupled else 1)
  _, k_est = jax.random.split(key)
  k_count, k_pos = jax.random.split(k_est)
  counts = np.asarray(espo_counts(k_count, 5, L, cfg.num_mc, cfg.stratify))
  first = np.asarray(exact_count_masks(k_pos, jnp.asarray(counts), L))
  np.testing.assert_array_equal(first.sum(-1), counts)  # exactly x positions masked
  want = np_espo_elbo(params, tokens, first, counts, cfg.coupled)
  got = np.asarray(s.contributions()).sum(-1)  # ESPO sums all L positions
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
  assert np.isfinite(np.asarray(s.weight)).all()


def test_estimator_with_zero_and_full_mask_counts_is_finite():
  """x = 0 (no target in pass 1) and x = L (none in the complement): factors 0, not inf (0·inf = NaN)."""
  rng = np.random.default_rng(1)
  tokens = jnp.asarray(rng.integers(0, 9, (L + 1, P + L)), jnp.int32)  # B = L+1 rows: counts 0..L all drawn
  params = jax.tree.map(jnp.asarray, make_params(P + L, V, seed=2))
  s = espo_elbo_logprobs(jax_logits, params, tokens, P, jax.random.PRNGKey(0), mask_id=MASK,
                         espo_elbo=ESPOELBOConfig(num_mc=1, stratify="batch"))
  assert np.isfinite(np.asarray(s.contributions())).all()
  counts = np.asarray(np.asarray(s.mask)[:, :L].sum(-1))
  assert set(counts.astype(int)) == set(range(L + 1))


# ---------------------------------------------------------------- configuration and the learner

def _train_cfg(lik=None, **rl):
  base = dict(objective="espo", likelihood="espo_elbo", credit="uniform", beta=0.01, clip_eps=0.2, group_size=4,
              prompts_per_step=2)
  return TrainConfig(rollout=RolloutConfig(gen_length=8, block_length=4, steps=4),
                     likelihood=lik or LikelihoodConfig(elbo_terms="summed", espo_elbo=ESPOELBOConfig(num_mc=2)),
                     rl=RLConfig(**{**base, **rl}))


def test_espo_config_accepts_the_recipe_sml_and_other_sequence_likelihoods():
  validate(_train_cfg())
  for likelihood in ("stratified", "mean_field", "trajectory", "elbo", "coupled"):
    validate(_train_cfg(likelihood=likelihood))
  validate(_train_cfg(credit="dps", clip_eps=0.0))  # ESPO's Countdown recipe: epsilon 0
  validate(_train_cfg(objective="gspo", lik=LikelihoodConfig()))  # espo_elbo under another objective


@pytest.mark.parametrize("lik,rl,match", [
    (LikelihoodConfig(), {}, r"likelihood\.elbo_terms='per_target'.*'summed'"),
    (None, dict(likelihood="rldf"), r"rl\.likelihood='rldf'.*\(rollout state, position\) pairs"),
    (LikelihoodConfig(elbo_terms="summed", spg_block=SPGBlockConfig(block_length=4)), dict(likelihood="spg_block"),
     r"rl\.likelihood='spg_block'.*not a sequence likelihood"),
    (None, dict(credit="token_reward"), r"rl\.credit='token_reward'.*sequence-level action"),
    (LikelihoodConfig(elbo_terms="summed", espo_elbo=ESPOELBOConfig(stratify="batch")), dict(grad_accum=2),
     r"likelihood\.espo_elbo\.stratify='batch'.*'row' with rl\.grad_accum > 1"),
])
def test_espo_refuses_combinations_that_are_not_meaningful(lik, rl, match):
  with pytest.raises(ConfigError, match=match):
    validate(_train_cfg(lik, **rl))
  with pytest.raises(ConfigError, match=r"likelihood\.espo_elbo\.num_mc"):
    ESPOELBOConfig(num_mc=0).validate()
  with pytest.raises(ConfigError, match=r"likelihood\.espo_elbo\.stratify"):
    ESPOELBOConfig(stratify="prompt").validate()


@pytest.mark.parametrize("padding", ["mask", "score"])
@pytest.mark.parametrize("grad_accum", [1, 2])
def test_learner_gradient_equals_the_reference_on_the_estimators_elbos(padding, grad_accum):
  """make_objective_grad (espo_elbo -> summed ELBO terms -> espo, RLOO advantages) on the fixed-logit
  model, θ_old ≠ θ and a KL to θ_ref: the loss equals the transcription of compute_loss on the
  estimator's own ELBOs under the three parameter sets. padding="score" is ESPO's own: its sequence ELBO
  sums all L positions, the padding after row 3's EOS included; "mask" sums those inside the completion
  mask. Both in one pass and in micro-batches."""
  lik = LikelihoodConfig(elbo_terms="summed", espo_elbo=ESPOELBOConfig(num_mc=2, padding=padding))
  cfg = _train_cfg(lik=lik, grad_accum=grad_accum)
  assert "espo" in OBJECTIVES.names() and "espo_elbo" in LIKELIHOOD.names()
  b = 8
  params = jax.tree.map(jnp.asarray, make_params(P + L, V, seed=0, scale=1.0))
  old = jax.tree.map(lambda x: x + 0.05 * jnp.sin(3.0 * x), params)
  ref = jax.tree.map(lambda x: 0.9 * x, params)
  rng = np.random.default_rng(0)
  tokens = jnp.asarray(rng.integers(0, 9, (b, P + L)), jnp.int32)
  cm = np.ones((b, L), np.float32)
  cm[3, 4:] = 0
  traj = Trajectory(tokens=tokens, completion_mask=jnp.asarray(cm), commit_step=jnp.zeros((b, L), jnp.int32),
                    commit_conf=jnp.zeros((b, L), jnp.float32), prompt_len=P, mask_id=MASK)
  rewards = jnp.asarray(rng.choice([0.0, 1.0], b), jnp.float32)
  key = jax.random.PRNGKey(3)
  grads, aux = jax.jit(make_objective_grad(jax_logits, cfg, mask_id=MASK))(params, ref, traj, rewards,
                                                                           jnp.asarray(cm), key, old)
  assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(grads))
  from daca_jax.rl.update import make_scores_fn
  scores = jax.jit(make_scores_fn(jax_logits, cfg, mask_id=MASK))
  read = cm if padding == "mask" else np.ones_like(cm)
  elbo = lambda p: (np.asarray(scores(p, traj, key).contributions(), np.float64) * read).sum(-1, keepdims=True)
  want = np_espo_loss(elbo(params), elbo(old), elbo(ref), np_rloo(np.asarray(rewards), 4), 0.2, 0.01, L)
  if grad_accum == 1:  # micro-batches draw their masks from per-row keys: not the one-pass scores above
    np.testing.assert_allclose(float(aux["loss"]), want, rtol=1e-5, atol=1e-6)
  else:
    assert bool(jnp.isfinite(aux["loss"]))
  # the padding's terms are not zero here, so the two rules give different losses
  assert np.abs(np.asarray(scores(params, traj, key).contributions())[3, 4:]).sum() > 0
