"""The contracts (daca_jax.contracts): trace-time shape checks at every public entry point, ModelFns in
place of attributes glued onto the logits function, and the moved Trajectory / PolicyBatch.

Each shape test feeds a public function the kind of wrong input that used to broadcast or decode into
a silently wrong result (an advantage shaped [B, 1], a logits_fn returning only the completion's
[B, L, V], an off-by-one prompt_len, a rollout config whose steps disagree with the trajectory) and
asserts a ShapeError (a ConfigError) naming the argument, the shape found and the shape expected.
"""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from daca_jax.contracts import ModelFns, PolicyBatch, Trajectory, as_model_fns, check_trajectory
from daca_jax.credit import CREDIT, CreditInputs, delta_weights, position_value_advantages, step_progress
from daca_jax.diffusion import make_rollout_fn, rollout, sft_loss
from daca_jax.errors import ConfigError, ShapeError
from daca_jax.likelihood import LIKELIHOOD, any_order_logprob, token_logprobs
from daca_jax.likelihood.common import chunked_token_logprobs, score_positions, score_targets
from daca_jax.rl.methods import OBJECTIVES
from daca_jax.config.credit import CreditConfig
from daca_jax.config.likelihood import LikelihoodConfig
from daca_jax.likelihood.rldf import RLDFConfig
from daca_jax.likelihood.stratified import StratifiedConfig
from daca_jax.config.rl import RLConfig
from daca_jax.config.rollout import RolloutConfig
from tests import fixed_logit_model

V, MASK, EOS = 12, 11, 10
B, P, L = 4, 3, 8
PARAMS = jax.tree.map(jnp.asarray, fixed_logit_model.make_params(P + L, V, seed=0))
ROLLOUT = RolloutConfig(gen_length=L, block_length=4, steps=4, temperature=1.0)


def logits_fn(params, tokens):
  """A foreign plain-JAX model: [B, T] -> [B, T, V]."""
  return fixed_logit_model.jax_logits(params, tokens)


def completion_only(params, tokens):
  """The bug: logits for the completion only, [B, L, V] for a [B, P+L] input."""
  return logits_fn(params, tokens)[:, P:]


def prompts(b=B):
  return jnp.asarray(np.random.default_rng(0).integers(0, 9, (b, P)), jnp.int32)


@pytest.fixture(scope="module")
def traj():
  return make_rollout_fn(logits_fn, ROLLOUT, mask_id=MASK, eos_id=EOS, record_step_conf=True,
                         record_step_entropy=True)(PARAMS, prompts(), jax.random.key(1))


def _batch(b=B, length=L, **changes):
  ones = jnp.ones((b, length), jnp.float32)
  fields = dict(logp_old=-ones, logp_ref=-ones, advantages=jnp.linspace(-1.0, 1.0, b), weights=ones,
                mask=ones, rewards=jnp.linspace(0.0, 1.0, b))
  fields.update(changes)
  return PolicyBatch(**fields)


# ---- objectives -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(OBJECTIVES.names()))
def test_every_objective_refuses_advantages_shaped_b_by_1(name):
  """A [B, 1] advantage broadcast against [B, L] weights to [B, B, L] (diffu_grpo: loss ~2e-8)."""
  logp = -jnp.ones((B, L)) * 1.1
  bad = _batch(advantages=jnp.linspace(-1.0, 1.0, B)[:, None])
  cfg = RLConfig(objective=name, group_size=2)
  with pytest.raises(ShapeError, match=r"batch\.advantages has shape \(4, 1\); expected \(4,\)"):
    OBJECTIVES.get(name)(logp, bad, cfg)
  loss, _ = OBJECTIVES.get(name)(logp, _batch(), cfg)  # the right shapes still work
  assert np.isfinite(float(loss))


@pytest.mark.parametrize("field,value,shape", [
    ("mask", jnp.ones((B, L + 1)), r"\(4, 9\)"),
    ("weights", jnp.ones((B, 1)), r"\(4, 1\)"),
    ("logp_old", jnp.ones((L,)), r"\(8,\)"),
    ("logp_ref", jnp.ones((1, L)), r"\(1, 8\)"),
    ("rewards", jnp.ones((B, 1)), r"\(4, 1\)"),
    ("token_advantages", jnp.ones((B, 1)), r"\(4, 1\)"),
    ("commit_now", jnp.ones((B,)), r"\(4,\)"),
])
def test_objective_names_the_bad_policy_batch_field(field, value, shape):
  bad = _batch(**{field: value})
  with pytest.raises(ShapeError, match=rf"batch\.{field} has shape {shape}; expected"):
    OBJECTIVES.get("rldf")(-jnp.ones((B, L)), bad, RLConfig())


def test_objective_refuses_logp_of_the_wrong_rank_and_groups_that_do_not_divide():
  with pytest.raises(ShapeError, match=r"logp has shape \(32,\)"):
    OBJECTIVES.get("diffu_grpo")(-jnp.ones((B * L,)), _batch(), RLConfig())
  with pytest.raises(ShapeError, match=r"rl\.group_size=3"):
    OBJECTIVES.get("wd1")(-jnp.ones((B, L)), _batch(), RLConfig(group_size=3))


def test_objective_checks_under_jit():
  f = jax.jit(lambda lp, bt: OBJECTIVES.get("diffu_grpo")(lp, bt, RLConfig())[0])
  with pytest.raises(ShapeError, match=r"batch\.advantages"):
    f(-jnp.ones((B, L)), _batch(advantages=jnp.ones((B, 1))))


# ---- the sampler --------------------------------------------------------------------------------


def test_rollout_refuses_a_logits_fn_that_returns_the_completion_only():
  """[B, L, V] for a [B, P+L] input used to decode the wrong positions and leave [MASK] behind."""
  with pytest.raises(ShapeError, match=r"logits_fn\(params, tokens\) output has shape \(4, 8, 12\); "
                     r"expected \(4, 11, V\)"):
    rollout(completion_only, PARAMS, prompts(), jax.random.key(0), ROLLOUT, mask_id=MASK, eos_id=EOS)
  with pytest.raises(ShapeError, match=r"output has shape \(4, 8, 12\)"):
    make_rollout_fn(completion_only, ROLLOUT, mask_id=MASK, eos_id=EOS)(PARAMS, prompts(), jax.random.key(0))


def test_rollout_refuses_bad_prompts_and_a_missing_hidden_output():
  with pytest.raises(ShapeError, match=r"prompts has shape \(12,\); expected \(B, P\)"):
    rollout(logits_fn, PARAMS, prompts().reshape(-1), jax.random.key(0), ROLLOUT, mask_id=MASK, eos_id=EOS)
  with pytest.raises(ShapeError, match=r"prompts has dtype float32; expected an integer dtype"):
    rollout(logits_fn, PARAMS, prompts().astype(jnp.float32), jax.random.key(0), ROLLOUT, mask_id=MASK,
            eos_id=EOS)
  with pytest.raises(ConfigError, match=r"a pair \(logits \[B, T, V\], hidden \[B, T, D\]\)"):
    rollout(logits_fn, PARAMS, prompts(), jax.random.key(0), ROLLOUT, mask_id=MASK, eos_id=EOS,
            record_commit_hidden=True)


# ---- likelihood estimators ----------------------------------------------------------------------


ESTIMATORS = ["mean_field", "stratified", "coupled", "elbo", "trajectory", "rldf"]


def _estimate(name, fn, traj, prompt_len=None, **kw):
  cfg = LikelihoodConfig(stratified=StratifiedConfig(num_strata=2), trajectory_steps=ROLLOUT.steps, rldf=RLDFConfig(states=2))
  extra = dict(commit_step=traj.commit_step)
  if name == "rldf":
    extra.update(commit_conf=traj.commit_conf, completion_mask=traj.completion_mask)
  extra.update(kw)
  return LIKELIHOOD.get(name)(fn, PARAMS, traj.tokens, traj.prompt_len if prompt_len is None else prompt_len,
                              jax.random.key(2), cfg, mask_id=MASK, **extra)


@pytest.mark.parametrize("name", ESTIMATORS)
def test_every_estimator_refuses_a_logits_fn_that_returns_the_completion_only(name, traj):
  with pytest.raises(ShapeError, match=r"output has shape \(4, 8, 12\); expected \(4, 11, V\)"):
    _estimate(name, completion_only, traj)


@pytest.mark.parametrize("name", ESTIMATORS)
def test_every_estimator_names_an_off_by_one_prompt_len(name, traj):
  """With the rollout's per-position inputs, L = T - prompt_len must match their width."""
  with pytest.raises(ShapeError, match=r"commit_step has shape \(4, 8\); expected \(4, 7\) .*prompt_len=3 fits"):
    _estimate(name, logits_fn, traj, prompt_len=P + 1)
  with pytest.raises(ShapeError, match=r"commit_step has shape \(4, 8\); expected \(4, 9\) .*prompt_len=3 fits"):
    _estimate(name, logits_fn, traj, prompt_len=P - 1)


@pytest.mark.parametrize("name", ESTIMATORS)
def test_every_estimator_refuses_a_prompt_len_outside_the_tokens(name, traj):
  with pytest.raises(ConfigError, match=r"prompt_len=11 is not allowed: expected an int in \[0, 10\]"):
    _estimate(name, logits_fn, traj, prompt_len=P + L)
  with pytest.raises(ShapeError, match=r"tokens has shape \(44,\); expected \(B, P\+L\)"):
    LIKELIHOOD.get(name)(logits_fn, PARAMS, traj.tokens.reshape(-1), P, jax.random.key(0),
                         LikelihoodConfig(), mask_id=MASK)


def test_estimators_still_score_the_right_inputs(traj):
  """The checks pass good inputs through unchanged (same numbers as the direct scorer)."""
  logp = LIKELIHOOD.get("mean_field")(logits_fn, PARAMS, traj.tokens, P, jax.random.key(0),
                                      LikelihoodConfig(p_mask_prompt=0.0), mask_id=MASK).logp
  x = jnp.concatenate([traj.tokens[:, :P], jnp.full((B, L), MASK)], 1)
  np.testing.assert_allclose(np.asarray(logp), np.asarray(score_targets(logits_fn, PARAMS, x, traj.completion, P,
                                                                        MASK)), rtol=0, atol=0)


def test_an_off_by_one_prompt_len_without_row_inputs_is_caught_by_the_objective(traj):
  """mean_field needs no commit_step; its [B, L-1] output then meets the [B, L] mask in the loss."""
  logp = LIKELIHOOD.get("mean_field")(logits_fn, PARAMS, traj.tokens, P + 1, jax.random.key(0),
                                      LikelihoodConfig(), mask_id=MASK).logp
  assert logp.shape == (B, L - 1)
  batch = _batch(logp_old=logp, logp_ref=logp, weights=jnp.ones((B, L - 1)), mask=traj.completion_mask)
  with pytest.raises(ShapeError, match=r"batch\.mask has shape \(4, 8\); expected \(4, 7\)"):
    OBJECTIVES.get("diffu_grpo")(logp, batch, RLConfig())


def test_scorers_and_oracles_check_logits_against_tokens(traj):
  tok = traj.tokens
  with pytest.raises(ShapeError, match=r"output has shape \(4, 8, 12\)"):
    score_targets(completion_only, PARAMS, tok, traj.completion, P)
  with pytest.raises(ShapeError, match=r"output has shape \(4, 8, 12\)"):
    score_positions(completion_only, PARAMS, tok, traj.completion[:, :2], jnp.zeros((B, 2), jnp.int32) + P)
  with pytest.raises(ShapeError, match=r"output has shape \(4, 8, 12\)"):
    any_order_logprob(completion_only, PARAMS, tok, P, mask_id=MASK)
  with pytest.raises(ShapeError, match=r"output has shape \(4, 8, 12\)"):
    sft_loss(completion_only, PARAMS, tok, P, jax.random.key(0), MASK)
  with pytest.raises(ConfigError, match=r"prompt_len=11"):
    sft_loss(logits_fn, PARAMS, tok, P + L, jax.random.key(0), MASK)
  with pytest.raises(ShapeError, match=r"logits has shape \(4, 7, 12\); expected \(4, 8, V\)"):
    token_logprobs(jnp.zeros((B, L - 1, V)), traj.completion)
  with pytest.raises(ShapeError, match=r"hidden has shape \(4, 7, 5\); expected \(4, 8, D\)"):
    chunked_token_logprobs(lambda h: h, jnp.zeros((B, L - 1, 5)), traj.completion, 2)


# ---- credit assigners ---------------------------------------------------------------------------


def test_credit_refuses_a_rollout_config_whose_steps_disagree_with_the_trajectory(traj):
  """DPS reads the step records with the config's block/step layout: steps=8 for a 4-step rollout
  used to attribute progress to the wrong steps without an error."""
  other = dataclasses.replace(ROLLOUT, steps=8, block_length=8)
  with pytest.raises(ShapeError, match=r"trajectory\.num_model_calls has value 4; expected rollout_cfg\.steps = 8"):
    CREDIT.get("dps")(traj, CreditConfig(), other)
  handmade = traj.replace(num_model_calls=0)  # a trajectory not made by the rollout: its records say it
  with pytest.raises(ShapeError, match=r"trajectory\.step_conf has shape \(4, 4, 8\); expected \(8, 4, 8\)"):
    CREDIT.get("dps")(handmade, CreditConfig(), other)
  with pytest.raises(ShapeError, match=r"step_conf has shape \(4, 4, 8\); expected \(8, B, 8\)"):
    step_progress(traj.step_conf, traj.commit_step, other)
  from daca_jax.credit import dps_credit

  with pytest.raises(ShapeError, match=r"trajectory\.num_model_calls"):
    dps_credit(traj, other)  # the module-level function is checked too
  longer = dataclasses.replace(ROLLOUT, gen_length=12, block_length=4, steps=6)
  with pytest.raises(ShapeError, match=r"trajectory\.tokens has shape \(4, 11\); expected \(B, prompt_len \+ "
                     r"rollout_cfg\.gen_length\) = \(B, 3 \+ 12\)"):
    CREDIT.get("uniform")(traj, CreditConfig(), longer)
  w = CREDIT.get("dps")(traj, CreditConfig(), ROLLOUT)  # the matching config still works
  assert w.shape == (B, L)


def test_check_trajectory_names_the_schedule_and_every_record(traj):
  with pytest.raises(ShapeError, match=r"trajectory\.num_model_calls has value 4; expected rollout_cfg\.steps = 2"):
    check_trajectory(traj, dataclasses.replace(ROLLOUT, steps=2, block_length=4), )
  bad = traj.replace(commit_step=traj.commit_step[:, :-1])
  with pytest.raises(ShapeError, match=r"trajectory\.commit_step has shape \(4, 7\); expected \(4, 8\)"):
    check_trajectory(bad, ROLLOUT)


def test_credit_inputs_are_checked_against_the_trajectory(traj):
  cfg = CreditConfig()
  adv = jnp.linspace(-1.0, 1.0, B)
  with pytest.raises(ShapeError, match=r"inputs\.advantages has shape \(4, 1\); expected \(4,\)"):
    CREDIT.get("position_value").assign(traj, cfg, ROLLOUT, CreditInputs(advantages=adv[:, None], group_size=2))
  with pytest.raises(ShapeError, match=r"inputs\.token_rewards has shape \(4, 7\)"):
    CREDIT.get("token_reward").assign(traj, cfg, ROLLOUT, CreditInputs(
        token_rewards=jnp.ones((B, L - 1)), token_reward_mask=jnp.ones((B, L)), group_size=2))
  with pytest.raises(ShapeError, match=r"inputs\.group_size=3"):
    CREDIT.get("position_value").assign(traj, cfg, ROLLOUT, CreditInputs(advantages=adv, group_size=3))
  with pytest.raises(ShapeError, match=r"advantages has shape \(4, 1\); expected \(4,\)"):
    delta_weights(jnp.ones((B, L, 5)), jnp.full((B, L), 0.5), adv[:, None], jnp.ones((B, L)), cfg.delta)
  with pytest.raises(ShapeError, match=r"advantages has shape \(4, 1\)"):
    position_value_advantages(traj.completion, traj.completion_mask, adv[:, None], 2)


# ---- the learner --------------------------------------------------------------------------------


def test_learner_checks_the_rollout_batch(traj):
  from daca_jax.rl.learner import GRPOLearner
  from daca_jax.config.train import TrainConfig

  cfg = TrainConfig(rollout=ROLLOUT, rl=RLConfig(credit="uniform", likelihood="mean_field", group_size=2,
                                                 prompts_per_step=2, grad_agreement=False)).validate()
  learner = GRPOLearner(logits_fn, cfg, mask_id=MASK, eos_id=EOS)
  rewards = jnp.linspace(0.0, 1.0, B)
  w = jnp.ones((B, L))
  opt = learner.init_opt_state(PARAMS)
  with pytest.raises(ShapeError, match=r"rewards has shape \(4, 1\); expected \(4,\)"):
    learner.update(PARAMS, opt, PARAMS, traj, rewards[:, None], w, jax.random.key(0))
  with pytest.raises(ShapeError, match=r"weights has shape \(4, 1\); expected \(4, 8\)"):
    learner.update(PARAMS, opt, PARAMS, traj, rewards, w[:, :1], jax.random.key(0))
  with pytest.raises(ShapeError, match=r"rewards has shape \(4, 1\)"):
    learner.assign_credit(traj, rewards[:, None])
  other = dataclasses.replace(cfg, rollout=dataclasses.replace(ROLLOUT, steps=8, block_length=8))
  wrong = GRPOLearner(logits_fn, other, mask_id=MASK, eos_id=EOS)
  with pytest.raises(ShapeError, match=r"trajectory\.num_model_calls has value 4; expected rollout\.steps = 8"):
    wrong.objective_grad(PARAMS, PARAMS, traj, rewards, w, jax.random.key(0))


# ---- ModelFns -----------------------------------------------------------------------------------


def test_as_model_fns_wraps_a_plain_function_and_keeps_a_model_fns():
  fns = as_model_fns(logits_fn)
  assert isinstance(fns, ModelFns) and fns.logits is logits_fn and not fns.has_split
  assert as_model_fns(fns) is fns
  tok = jnp.zeros((2, P + L), jnp.int32)
  np.testing.assert_array_equal(np.asarray(fns(PARAMS, tok)), np.asarray(logits_fn(PARAMS, tok)))
  with pytest.raises(ConfigError, match=r"logits_fn='int' is not allowed"):
    as_model_fns(3)


def test_behaviour_glued_onto_a_function_is_refused_not_dropped():
  """Before ModelFns, chunking travelled as a function attribute that any wrapper lost silently."""
  def glued(params, tokens):
    return logits_fn(params, tokens)

  glued.logprob_chunk = 4
  with pytest.raises(ConfigError, match=r"attributes \['logprob_chunk'\]"):
    as_model_fns(glued)
  with pytest.raises(ConfigError, match=r"attributes \['logprob_chunk'\]"):
    LIKELIHOOD.get("mean_field")(glued, PARAMS, jnp.zeros((2, P + L), jnp.int32), P, jax.random.key(0),
                                 LikelihoodConfig(), mask_id=MASK)


def test_model_fns_refuses_chunking_without_the_split_and_half_a_split():
  with pytest.raises(ConfigError, match=r"ModelFns\.logprob_chunk=4 is not allowed: expected 0 for a model "
                     r"without the hidden/head split"):
    ModelFns(logits=logits_fn, logprob_chunk=4)
  with pytest.raises(ConfigError, match=r"ModelFns\.head=None"):
    ModelFns(logits=logits_fn, hidden=lambda p, t: t)
  with pytest.raises(ConfigError, match=r"ModelFns\.logprob_chunk=-1"):
    ModelFns(logits=logits_fn, logprob_chunk=-1)


def _spy_heads(fns):
  """fns with its head recording the shapes it is traced with."""
  seen = []

  def head(params, hidden):
    seen.append(tuple(hidden.shape))
    return fns.head(params, hidden)

  return dataclasses.replace(fns, head=head), seen


@pytest.mark.parametrize("lora", [False, True])
def test_chunked_gathering_is_taken_for_llada_and_lora_and_through_the_learner(lora):
  """model.logprob_chunk reaches the estimators for both model kinds (the LoRA logits function once
  carried no split, so the chunk was silently ignored), also through GRPOLearner and the
  registry's checked estimators; and the chunked numbers equal the unchunked ones."""
  from daca_jax.models import init_model, make_logits_fn, tiny_config
  from daca_jax.models import lora as lora_lib

  mcfg = tiny_config(vocab_size=V + 4, d_model=16, n_layers=1, n_heads=2, mlp_dim=32, mask_token_id=MASK,
                     lora_rank=2 if lora else 0)
  gd, base = init_model(mcfg, 0)
  if lora:
    params = lora_lib.lora_params(base, lora_lib.init_lora(mcfg, jax.random.key(1)))
    make = lambda chunk: lora_lib.make_lora_logits_fn(gd, logprob_chunk=chunk)
  else:
    params = base
    make = lambda chunk: make_logits_fn(gd, logprob_chunk=chunk)
  chunked, seen = _spy_heads(make(2))
  assert chunked.logprob_chunk == 2 and chunked.lora == lora
  tok = jnp.asarray(np.random.default_rng(0).integers(0, V - 2, (2, P + L)), jnp.int32)
  cfg = LikelihoodConfig(p_mask_prompt=0.0)
  got = LIKELIHOOD.get("mean_field")(chunked, params, tok, P, jax.random.key(0), cfg, mask_id=MASK).logp
  assert (2, 2, 16) in seen and all(s[1] == 2 for s in seen)  # only chunks of 2 positions projected
  want = LIKELIHOOD.get("mean_field")(make(0), params, tok, P, jax.random.key(0), cfg, mask_id=MASK).logp
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)

  from daca_jax.rl.learner import GRPOLearner
  from daca_jax.config.train import TrainConfig

  tcfg = TrainConfig(model=mcfg, rollout=ROLLOUT, likelihood=cfg,
                     rl=RLConfig(credit="uniform", likelihood="mean_field", group_size=2, prompts_per_step=1,
                                 grad_agreement=False)).validate()
  learner = GRPOLearner(chunked, tcfg, mask_id=MASK, eos_id=EOS)
  assert learner.logits_fn is chunked
  seen.clear()
  rows = jnp.zeros((2, tok.shape[1] - P), jnp.float32)
  traj = Trajectory(tokens=tok, completion_mask=rows + 1, commit_step=rows.astype(jnp.int32), commit_conf=rows,
                    prompt_len=P)
  learner.logprobs(params, traj, jax.random.key(0))
  assert seen and all(s[1] == 2 for s in seen)


def test_trajectory_and_policy_batch_keep_their_old_import_paths_and_pytree_behaviour(traj):
  from daca_jax.diffusion import Trajectory as T1
  from daca_jax.diffusion.rollout import Trajectory as T2
  from daca_jax.contracts import PolicyBatch as B2
  from daca_jax.contracts import PolicyBatch as B3, Trajectory as T3

  assert T1 is T2 is T3 is Trajectory and B2 is B3 is PolicyBatch
  leaves, tree = jax.tree.flatten(traj)
  back = jax.tree.unflatten(tree, leaves)
  assert back.prompt_len == P and back.mask_id == MASK and back.num_model_calls == ROLLOUT.steps
  assert traj.replace(prompt_len=2).prompt_len == 2 and traj.prompt_len == P
  # static fields are part of the tree structure (jit specialises on them), arrays are leaves
  assert len(leaves) == sum(x is not None for x in (traj.tokens, traj.completion_mask, traj.commit_step,
                                                    traj.commit_conf, traj.step_conf, traj.step_entropy,
                                                    traj.commit_hidden, traj.model_calls, traj.finished))
  assert jax.tree.structure(traj.replace(prompt_len=2)) != tree
