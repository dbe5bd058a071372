"""A rollout sampled in micro-batches (rl.rollout_batch) equals the one-call rollout: each micro-batch
draws its rows' noise of the whole batch's draw. Tokens and commit steps are identical; the float
records (confidences) agree to float32 rounding (the model's matmuls run at another batch size)."""
import dataclasses
import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from daca_jax.diffusion.noise import gumbel_window
from daca_jax.errors import ConfigError
from daca_jax.models import init_model, make_logits_fn, tiny_config
from daca_jax.rl.learner import GRPOLearner
from daca_jax.config.rl import RLConfig
from daca_jax.config.rollout import RolloutConfig
from daca_jax.config.train import TrainConfig
from tests.fixed_logit_model import jax_logits, make_params

R = importlib.import_module("daca_jax.diffusion.rollout")  # the package re-exports a function named rollout
V, MASK, P = 40, 37, 4


def _same(full, part):
  for f in ("tokens", "commit_step", "completion_mask"):
    np.testing.assert_array_equal(np.asarray(getattr(part, f)), np.asarray(getattr(full, f)), err_msg=f)
  for f in ("commit_conf", "step_conf"):
    np.testing.assert_allclose(np.asarray(getattr(part, f)), np.asarray(getattr(full, f)), rtol=1e-5, atol=1e-6)
  assert bool(part.finished)


def test_gumbel_window_of_a_row_subset_is_those_rows_of_the_full_draw():
  key = jax.random.PRNGKey(4)
  shape = (6, 10, 13)
  full = np.asarray(jax.random.gumbel(key, shape, jnp.float32))
  rows = jnp.asarray([4, 1, 5], jnp.int32)
  got = jax.jit(lambda k, r: gumbel_window(k, shape, 3, 4, r))(key, rows)
  np.testing.assert_array_equal(np.asarray(got), full[[4, 1, 5], 3:7])


def test_micro_batch_rows_keep_each_devices_rows_local():
  np.testing.assert_array_equal(R.micro_batch_rows(8, 4, 1), [[0, 1, 2, 3], [4, 5, 6, 7]])
  # 2 devices hold rows 0-3 and 4-7: micro-batch k takes the k-th pair of each
  np.testing.assert_array_equal(R.micro_batch_rows(8, 4, 2), [[0, 1, 4, 5], [2, 3, 6, 7]])
  with pytest.raises(ConfigError, match=r"rl\.rollout_batch=3.*divisor of the 8 rows"):
    R.micro_batch_rows(8, 3)
  with pytest.raises(ConfigError, match=r"rl\.rollout_batch=2.*multiple of the 4 batch shards"):
    R.micro_batch_rows(8, 2, 4)


def test_micro_batched_rollout_equals_one_call_with_random_remasking_and_threshold():
  """A real transformer, the "random" remasking rule (a [B, L] uniform draw), threshold decoding
  (micro-batches skip the steps their own rows have finished) and step records; and the same sampler
  called on a micro-batch without its rows' places draws other noise (the check can fail)."""
  model = tiny_config(vocab_size=V, d_model=16, n_layers=2, n_heads=2, mlp_dim=32, mask_token_id=MASK)
  gd, params = init_model(model, 1)
  rc = RolloutConfig(gen_length=16, block_length=8, steps=16, temperature=0.8, remasking="random", threshold=0.3)
  ro = R.make_rollout_fn(make_logits_fn(gd), rc, mask_id=MASK, eos_id=38, record_step_conf=True)
  prompts = np.random.default_rng(0).integers(0, 30, (8, P)).astype(np.int32)
  key = jax.random.PRNGKey(3)
  full = ro(params, prompts, key)
  for rows, shards in ((2, 1), (4, 2)):
    _same(full, R.rollout_in_micro_batches(ro, params, prompts, key, rows, shards))
  alone = ro(params, prompts[2:4], key)  # rows 2-3 alone draw rows 0-1's noise
  assert not np.array_equal(np.asarray(alone.tokens), np.asarray(full.tokens[2:4]))


def test_learner_rollout_batch_gives_the_same_trajectories():
  """rl.rollout_batch = B/4 against 0 (all rows at once), through GRPOLearner.rollout."""
  base = TrainConfig(rollout=RolloutConfig(gen_length=8, block_length=4, steps=4, temperature=1.0),
                     rl=RLConfig(prompts_per_step=4, group_size=4, credit="dps"))
  params = jax.tree.map(jnp.asarray, make_params(P + 8, 12, seed=0, scale=1.0))
  prompts = np.repeat(np.random.default_rng(0).integers(0, 9, (4, P)), 4, 0).astype(np.int32)
  trajs = []
  for rb in (0, 4):
    cfg = dataclasses.replace(base, rl=dataclasses.replace(base.rl, rollout_batch=rb))
    learner = GRPOLearner(jax_logits, cfg, mask_id=10, eos_id=11)
    trajs.append(learner.rollout(params, prompts, jax.random.PRNGKey(5)))
    assert (getattr(learner.rollout, "rollout_batch", 0)) == rb
  _same(*trajs)
  assert trajs[1].step_conf.shape == (4, 16, 8)  # DPS's records, rows in batch order
  # Memory planning lowers one micro-batch's sampler; the whole batch's shapes follow from it.
  abstract = lambda t: jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), t)
  lowered = learner.rollout.lower(abstract(params), abstract(jnp.asarray(prompts)), abstract(jax.random.PRNGKey(5)))
  assert lowered.out_info.tokens.shape == (4, P + 8)
  assert abstract(R.whole_batch_struct(abstract(lowered.out_info), 16)) == abstract(trajs[1])
