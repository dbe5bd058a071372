"""The sampler never proposes [MASK] nor ids past the vocabulary limit, and every rollout finishes:
no [MASK] left, no commit_step == -1 (hand-built logits that favour exactly those ids, a real model
whose head is biased towards them, plain and K/V-cached decoding)."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from daca_jax.diffusion import rollout
from daca_jax.diffusion.proposals import assert_finished, check_schedule, proposable_ids
from daca_jax.diffusion.rollout import tokens_per_step
from daca_jax.errors import ConfigError
from daca_jax.models import init_model, make_logits_fn, tiny_config
from daca_jax.config.rollout import RolloutConfig

V, MASK, EOS, P = 12, 10, 11, 3


def _favouring(order):
  """Logits that ignore the input: every position ranks the ids in ``order`` first (descending)."""
  logits = np.zeros((V,), np.float32)
  for rank, tok in enumerate(order):
    logits[tok] = 10.0 - rank
  return lambda params, x: jnp.broadcast_to(jnp.asarray(logits), (*x.shape, V))


def _run(logits_fn, cfg, params=None, b=2, **kw):
  prompts = jnp.zeros((b, P), jnp.int32)
  return jax.jit(lambda p, x: rollout(logits_fn, p, x, jax.random.PRNGKey(0), cfg, mask_id=MASK, eos_id=EOS,
                                      **kw))(params, prompts)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_mask_is_never_proposed_and_the_rollout_finishes(temperature):
  cfg = RolloutConfig(gen_length=8, block_length=4, steps=4, temperature=temperature)
  traj = _run(_favouring([MASK, 5]), cfg)  # the model is sure of [MASK], then of 5
  comp = np.asarray(traj.completion)
  assert (comp != MASK).all() and (np.asarray(traj.commit_step) >= 0).all() and bool(traj.finished)
  if temperature == 0:
    assert (comp == 5).all()
  assert_finished(traj)


def test_ids_past_the_limit_are_never_proposed():
  cfg = RolloutConfig(gen_length=8, block_length=8, steps=4, temperature=0.0)
  traj = _run(_favouring([9, 8, MASK, 2]), cfg, vocab_limit=8)  # 8, 9 are past the tokenizer
  assert (np.asarray(traj.completion) == 2).all()
  assert (np.asarray(traj.commit_conf) > 0.5).all()  # confidences of the restricted distribution


def test_all_minus_inf_logits_still_finish_with_a_proposable_id():
  """A plain argmax of all -inf logits returns id 0; with mask id 0 the position would stay masked."""
  cfg = RolloutConfig(gen_length=4, block_length=4, steps=2, temperature=1.0)
  dead = lambda params, x: jnp.full((*x.shape, V), -jnp.inf, jnp.float32)
  prompts = jnp.ones((2, P), jnp.int32)
  traj = rollout(dead, None, prompts, jax.random.PRNGKey(0), cfg, mask_id=0, eos_id=EOS)
  assert (np.asarray(traj.completion) == 1).all() and bool(traj.finished)


MODEL = tiny_config(vocab_size=V, d_model=16, n_layers=1, n_heads=2, mlp_dim=32, mask_token_id=MASK,
                    vocab_limit=11)  # id 11 is past the tokenizer


def _biased_model():
  """A real model whose output head strongly prefers [MASK] and then id 11, past vocab_limit."""
  gd, params = init_model(MODEL, 0)
  pure = nnx.to_pure_dict(params)
  bias = np.zeros((V,), np.float32)
  bias[[MASK, 11]] = [40.0, 30.0]
  # A large constant first embedding coordinate survives the (small, random) layers, so after the
  # final norm it is ~sqrt(D) = 4 at every position; the head's first row turns it into the bias.
  emb = np.asarray(pure["embed"]["embedding"]).copy()
  emb[:, 0] = 100.0
  kernel = np.asarray(pure["lm_head"]["kernel"]).copy()
  kernel[0] = bias / 4
  pure["embed"]["embedding"], pure["lm_head"]["kernel"] = jnp.asarray(emb), jnp.asarray(kernel)
  nnx.replace_by_pure_dict(params, pure)
  return gd, params


@pytest.mark.parametrize("kv_cache", ["none", "dual", "prefix"])
def test_model_vocab_limit_and_mask_on_a_real_model(kv_cache):
  gd, params = _biased_model()
  fn = make_logits_fn(gd)
  x = jnp.zeros((2, P + 8), jnp.int32)
  top = np.asarray(jnp.argmax(fn(params, x), -1))
  assert np.isin(top, [MASK, 11]).mean() > 0.9  # the unrestricted argmax is mostly excluded ids
  cfg = RolloutConfig(gen_length=8, block_length=4, steps=4, temperature=1.0, kv_cache=kv_cache)
  traj = _run(fn, cfg, params, record_step_conf=True)
  comp = np.asarray(traj.completion)
  assert comp.max() < MODEL.vocab_limit and (comp != MASK).all()
  assert (np.asarray(traj.commit_step) >= 0).all() and bool(traj.finished)


def test_mask_id_must_be_the_models():
  gd, params = init_model(MODEL, 0)
  cfg = RolloutConfig(gen_length=4, block_length=4, steps=2)
  with pytest.raises(ConfigError, match=r"mask_id=3 .*mask_token_id=10"):
    rollout(make_logits_fn(gd), params, jnp.zeros((1, P), jnp.int32), jax.random.PRNGKey(0), cfg,
            mask_id=3, eos_id=EOS)


def test_proposable_ids_and_their_errors():
  ok = proposable_ids(V, MASK, 11)
  assert ok.tolist() == [True] * 10 + [False] * 2
  assert proposable_ids(V, MASK).sum() == V - 1
  with pytest.raises(ConfigError, match="mask_id"):
    proposable_ids(V, V)
  with pytest.raises(ConfigError, match="model.vocab_limit"):
    proposable_ids(V, MASK, V + 1)
  with pytest.raises(ConfigError, match="model.vocab_limit"):
    proposable_ids(2, 0, 1)  # nothing but the mask below the limit
  with pytest.raises(ConfigError, match="model.vocab_limit"):
    tiny_config(vocab_limit=200).validate()  # below the byte tokenizer's mask id 257


@pytest.mark.parametrize("cfg", [RolloutConfig(gen_length=9, block_length=3, steps=6),
                                 RolloutConfig(gen_length=32, block_length=32, steps=5),
                                 RolloutConfig(gen_length=10, block_length=5, steps=4)])
def test_schedule_commits_every_position(cfg):
  check_schedule(tokens_per_step(cfg), cfg.steps_per_block, cfg.block_length)
  with pytest.raises(AssertionError, match="tokens per block"):
    check_schedule(tokens_per_step(cfg)[::-1] - 1, cfg.steps_per_block, cfg.block_length)


def test_assert_finished_names_what_is_left():
  cfg = RolloutConfig(gen_length=4, block_length=4, steps=2)
  traj = _run(_favouring([1]), cfg)
  broken = dataclasses.replace(traj, finished=jnp.asarray(False),
                               commit_step=traj.commit_step.at[0, 0].set(-1),
                               tokens=traj.tokens.at[0, P].set(MASK))
  with pytest.raises(RuntimeError, match="1 positions never committed, 1 still"):
    assert_finished(broken)
