"""TokenScores: one output type for every estimator, and how objectives read the ELBO-type ones.

The exact oracles: with ``elbo_terms="per_target"`` an ELBO-type estimator (coupled, elbo) hands the
objective its targets' log-probs with the ELBO factors moved onto the weights, so (1) a ratio-free
objective (wd1, β = 0) has exactly the summed form's loss and gradient; (2) diffu-GRPO's gradient at
θ = θ_old is the summed form's, rescaled by the number of targets over the number of tokens (the token
means' denominators); (3) its KL is the k3 KL of the scored log-probs themselves.
"""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from daca_jax.contracts import TokenScores, check_token_scores, objective_inputs, token_scores
from daca_jax.diffusion import make_rollout_fn
from daca_jax.errors import ConfigError, ShapeError
from daca_jax.likelihood import LIKELIHOOD
from daca_jax.likelihood.base import estimator
from daca_jax.rl.learner import GRPOLearner
from daca_jax.rl.methods import OBJECTIVES
from daca_jax.rl.methods.base import k3_kl
from daca_jax.config.likelihood import LikelihoodConfig
from daca_jax.likelihood.coupled import CoupledConfig
from daca_jax.likelihood.rldf import RLDFConfig
from daca_jax.likelihood.stratified import StratifiedConfig
from daca_jax.config.credit import CreditConfig
from daca_jax.config.rl import RLConfig
from daca_jax.config.rollout import RolloutConfig
from daca_jax.config.train import TrainConfig
from tests import fixed_logit_model

V, MASK, EOS = 12, 11, 10
B, P, L = 4, 3, 8
PARAMS = jax.tree.map(jnp.asarray, fixed_logit_model.make_params(P + L, V, seed=0))
REF = jax.tree.map(jnp.asarray, fixed_logit_model.make_params(P + L, V, seed=1))
ROLLOUT = RolloutConfig(gen_length=L, block_length=4, steps=4, temperature=1.0)
ESTIMATORS = ("mean_field", "stratified", "trajectory", "rldf", "coupled", "elbo")


def logits_fn(params, tokens):
  return fixed_logit_model.jax_logits(params, tokens)


@pytest.fixture(scope="module")
def traj():
  prompts = jnp.asarray(np.random.default_rng(0).integers(0, 9, (B, P)), jnp.int32)
  return make_rollout_fn(logits_fn, ROLLOUT, mask_id=MASK, eos_id=EOS)(PARAMS, prompts, jax.random.key(1))


def _scores(name, traj, **lik):
  cfg = LikelihoodConfig(p_mask_prompt=0.0, stratified=StratifiedConfig(num_strata=2), trajectory_steps=ROLLOUT.steps,
                         rldf=RLDFConfig(states=2), **lik)
  return LIKELIHOOD.get(name)(logits_fn, PARAMS, traj.tokens, P, jax.random.key(2), cfg, mask_id=MASK,
                              commit_step=traj.commit_step, commit_conf=traj.commit_conf,
                              completion_mask=traj.completion_mask)


@pytest.mark.parametrize("name", ESTIMATORS)
def test_every_estimator_returns_token_scores_through_one_signature(name, traj):
  """Every estimator takes every row (those it does not read are ignored) and returns TokenScores
  whose kind says whether its targets carry ELBO factors."""
  out = _scores(name, traj)
  assert isinstance(out, TokenScores)
  check_token_scores(out, B, L, name)
  assert out.length == L and out.contributions().shape == (B, L)
  assert out.kind == ("elbo" if name in ("coupled", "elbo") else "logprob")
  assert np.all(np.asarray(out.logp) <= 1e-6)  # log-probs, never a weighted term
  if out.kind == "logprob" and out.num_states == 1:
    np.testing.assert_array_equal(np.asarray(out.contributions()), np.asarray(out.logp))


def test_coupled_targets_cover_every_token_once_per_pass_pair(traj):
  """Coupled without the full pass: every token is a target in exactly one of M and Mᶜ."""
  out = _scores("coupled", traj, coupled=CoupledConfig(full_pass=False))
  m = np.asarray(out.mask).reshape(B, 2, L)
  np.testing.assert_array_equal(m.sum(1), np.ones((B, L)))
  w = np.asarray(out.weight).reshape(B, 2, L)
  t = 1.0 / w[:, 0, 0]
  np.testing.assert_allclose(w[:, 1, 0], 1.0 / (1.0 - t), rtol=1e-5)


def _learner(likelihood, objective, elbo_terms, beta, **lik):
  cfg = TrainConfig(rollout=ROLLOUT,
                    likelihood=LikelihoodConfig(p_mask_prompt=0.0, elbo_terms=elbo_terms, **lik),
                    credit=CreditConfig(),
                    rl=RLConfig(objective=objective, credit="uniform", likelihood=likelihood, group_size=2,
                                prompts_per_step=2, beta=beta, grad_agreement=False)).validate()
  return GRPOLearner(logits_fn, cfg, mask_id=MASK, eos_id=EOS)


def _grad(learner, traj, key=jax.random.key(7)):
  rewards = jnp.asarray([1.0, 0.0, 0.0, 1.0], jnp.float32)
  grads, aux = jax.jit(learner.objective_grad)(PARAMS, REF, traj, rewards, traj.completion_mask, key)
  return np.concatenate([np.ravel(x) for x in jax.tree.leaves(grads)]), aux


@pytest.mark.parametrize("likelihood", ["coupled", "elbo"])
def test_per_target_equals_summed_for_a_ratio_free_objective(likelihood, traj):
  """wd1 at β = 0 reads Σ w·logp per sequence: the ELBO either way, to rounding."""
  g_sum, a_sum = _grad(_learner(likelihood, "wd1", "summed", 0.0), traj)
  g_tgt, a_tgt = _grad(_learner(likelihood, "wd1", "per_target", 0.0), traj)
  assert np.abs(g_sum).max() > 1e-3
  np.testing.assert_allclose(g_tgt, g_sum, rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(float(a_tgt["loss"]), float(a_sum["loss"]), rtol=1e-5)


@pytest.mark.parametrize("likelihood", ["coupled", "elbo"])
def test_per_target_diffu_grpo_gradient_is_the_summed_one_rescaled(likelihood, traj):
  """At θ = θ_old (ratio 1) and β = 0 both forms give A·w·∇(ELBO term); they differ by the token
  means' denominators only: targets for per_target, completion tokens for summed."""
  g_sum, _ = _grad(_learner(likelihood, "diffu_grpo", "summed", 0.0), traj)
  lrn = _learner(likelihood, "diffu_grpo", "per_target", 0.0)
  g_tgt, _ = _grad(lrn, traj)
  scores = lrn.logprobs(PARAMS, traj, jax.random.key(7))
  _, mask, _, _, _ = objective_inputs(scores, traj.completion_mask, traj.completion_mask)
  scale = float(jnp.sum(mask)) / float(jnp.sum(traj.completion_mask))
  np.testing.assert_allclose(g_tgt * scale, g_sum, rtol=1e-4, atol=1e-6)


def test_per_target_kl_is_the_k3_kl_of_the_scored_log_probs(traj):
  """The summed form exponentiates (1/t)-scaled log-ratios; per_target's KL is that of the scored
  conditionals: the target mean of k3(logp_θ, logp_ref) under the same masks."""
  key = jax.random.key(7)
  lrn = _learner("coupled", "diffu_grpo", "per_target", 0.04)
  _, aux = _grad(lrn, traj, key)
  cur, ref = (lrn.logprobs(prm, traj, key) for prm in (PARAMS, REF))
  _, mask, _, _, _ = objective_inputs(cur, traj.completion_mask, traj.completion_mask)
  want = float(jnp.sum(k3_kl(cur.logp, ref.logp) * mask) / jnp.sum(mask))
  np.testing.assert_allclose(float(aux["kl"]), want, rtol=1e-5)
  _, aux_sum = _grad(_learner("coupled", "diffu_grpo", "summed", 0.04), traj, key)
  assert float(aux_sum["kl"]) > float(aux["kl"])  # 1/t > 1 inflates the summed form's log-ratios


def test_objective_inputs_pass_plain_log_probs_through(traj):
  out = _scores("mean_field", traj)
  w = jnp.linspace(0.5, 1.5, L)[None].repeat(B, 0)
  logp, mask, weights, commit_now, tok = objective_inputs(out, traj.completion_mask, w, elbo_terms="summed")
  assert logp is out.logp and commit_now is None and tok is None
  np.testing.assert_array_equal(np.asarray(mask), np.asarray(traj.completion_mask))
  np.testing.assert_array_equal(np.asarray(weights), np.asarray(w))
  with pytest.raises(ConfigError, match=r"likelihood\.elbo_terms='sum' is not allowed"):
    objective_inputs(out, traj.completion_mask, w, elbo_terms="sum")


def test_bad_estimator_outputs_are_named():
  logp = -jnp.ones((B, L))
  with pytest.raises(ConfigError, match=r"'elbo' with a weight"):
    check_token_scores(dataclasses.replace(token_scores(logp), kind="elbo"), B, L)
  with pytest.raises(ConfigError, match=r"kind='weighted' is not allowed"):
    check_token_scores(dataclasses.replace(token_scores(logp), kind="weighted"), B, L)
  with pytest.raises(ShapeError, match=r"output mask has shape \(4, 7\); expected \(4, 8\)"):
    check_token_scores(TokenScores(logp=logp, mask=jnp.ones((B, L - 1))), B, L)
  with pytest.raises(ShapeError, match=r"output logp has shape \(4, 8\); expected \(4, 16\)"):
    check_token_scores(TokenScores(logp=logp, mask=logp, num_states=2), B, L)

  @estimator("_test_half_width")
  def half_width(logits_fn, params, tokens, prompt_len, key, *, mask_id):
    return jnp.zeros((tokens.shape[0], 3))

  with LIKELIHOOD.registered("_test_half_width", half_width.entry):
    with pytest.raises(ShapeError, match=r"likelihood '_test_half_width' output has shape \(4, 3\); "
                       r"expected \(4, 8\)"):
      LIKELIHOOD.get("_test_half_width")(logits_fn, PARAMS, jnp.zeros((B, P + L), jnp.int32), P,
                                         jax.random.key(0), LikelihoodConfig(), mask_id=MASK, commit_step=None)
    with pytest.raises(ShapeError, match=r"likelihood '_test_half_width' output has shape \(4, 3\)"):
      half_width(logits_fn, PARAMS, jnp.zeros((B, P + L), jnp.int32), P, jax.random.key(0), mask_id=MASK)


def test_an_objective_given_token_scores_names_the_field(traj):
  """Passing the estimator's output where its .logp belongs is a one-line error, not a broadcast."""
  from daca_jax.contracts import PolicyBatch
  out = _scores("mean_field", traj)
  batch = PolicyBatch(logp_old=out.logp, logp_ref=out.logp, advantages=jnp.zeros(B), weights=out.mask,
                      mask=out.mask)
  with pytest.raises(ShapeError, match=r"diffu_grpo: logp has type TokenScores; expected an array \(B, L\)"):
    OBJECTIVES.get("diffu_grpo")(out, batch, RLConfig())
