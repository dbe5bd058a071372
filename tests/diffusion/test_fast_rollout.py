"""Fast rollouts: confidence-threshold parallel decoding and the block-wise K/V cache.

Oracles: a plain-Python threshold-decoding loop on the fixed-logit model (which, unlike the sampler,
never skips a step, so it also checks that skipped steps' records are the ones the model would give),
hand-built logits with known commit steps, and the model's own full pass for the K/V cache.
"""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from daca_jax.diffusion import rollout
from daca_jax.errors import ConfigError
from daca_jax.models import init_model, make_logits_fn, tiny_config
from daca_jax.models.kv_cache import make_kv_fns
from daca_jax.config.rollout import RolloutConfig
from tests.fixed_logit_model import jax_logits, make_params
from tests.diffusion.test_rollout import reference_candidates

V, MASK, EOS = 12, 10, 11
P = 3


def _softmax(logits):
  e = np.exp(logits - logits.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def reference_threshold_rollout(params, prompts, key, cfg: RolloutConfig):
  """Plain-Python threshold decoding (numpy, float64) that runs the model at every step."""
  b = prompts.shape[0]
  length, bl = cfg.gen_length, cfg.block_length
  spb = cfg.steps // (length // bl)
  x = np.concatenate([prompts, np.full((b, length), MASK)], axis=1)
  step_keys = jax.random.split(key, cfg.steps)
  commit_step = np.full((b, length), -1)
  confs, executed = [], 0
  for s in range(cfg.steps):
    blk, i = divmod(s, spb)
    k = bl // spb + (1 if i < bl % spb else 0)
    probs, x0, p_x0, _ = reference_candidates(params, x, step_keys[s], cfg)
    masked = x[:, P:] == MASK
    confs.append(np.where(masked, probs.max(-1), 0.0))
    in_block = masked[:, blk * bl:(blk + 1) * bl]
    executed += int(in_block.any())
    for r in range(b):
      elig = [j for j in range(blk * bl, (blk + 1) * bl) if masked[r, j]]
      order = sorted(elig, key=lambda j: (-p_x0[r, j], j))
      chosen = set(order[:k]) | {j for j in elig if p_x0[r, j] > cfg.threshold}
      for j in chosen:
        x[r, P + j] = x0[r, j]
        commit_step[r, j] = s
  return x, commit_step, np.stack(confs), executed


def _fixed_setup(cfg, b=4, seed=0):
  params = jax.tree.map(jnp.asarray, make_params(P + cfg.gen_length, V, seed))
  prompts = np.random.default_rng(seed + 1).integers(0, 9, (b, P))
  return params, prompts


def _run(logits_fn, params, prompts, key, cfg, **kw):
  fn = jax.jit(lambda p, x, k: rollout(logits_fn, p, x, k, cfg, mask_id=MASK, eos_id=EOS,
                                       record_step_conf=True, **kw))
  return fn(params, jnp.asarray(prompts), key)


THRESHOLD_CASES = [
    RolloutConfig(gen_length=8, block_length=8, steps=8, temperature=1.0, threshold=0.6),
    RolloutConfig(gen_length=8, block_length=4, steps=8, temperature=0.0, threshold=0.5),
    RolloutConfig(gen_length=9, block_length=3, steps=9, temperature=0.7, threshold=0.5),
]


@pytest.mark.parametrize("cfg", THRESHOLD_CASES, ids=lambda c: f"L{c.gen_length}b{c.block_length}s{c.steps}thr{c.threshold}")
def test_threshold_matches_reference_loop(cfg):
  params, prompts = _fixed_setup(cfg)
  key = jax.random.PRNGKey(11)
  traj = _run(jax_logits, params, prompts, key, cfg)
  ref_x, ref_commit, ref_conf, ref_calls = reference_threshold_rollout(params, prompts, key, cfg)
  np.testing.assert_array_equal(np.asarray(traj.tokens), ref_x)
  np.testing.assert_array_equal(np.asarray(traj.commit_step), ref_commit)
  np.testing.assert_allclose(np.asarray(traj.step_conf), ref_conf, rtol=1e-5, atol=1e-6)
  assert int(traj.model_calls) == ref_calls < cfg.steps  # the threshold saved model calls here
  assert traj.num_model_calls == cfg.steps


@pytest.mark.parametrize("threshold", [1.0, 1.5])
def test_unreachable_threshold_is_plain_one_token_per_step(threshold):
  cfg = RolloutConfig(gen_length=8, block_length=4, steps=8, temperature=1.0)
  params, prompts = _fixed_setup(cfg)
  key = jax.random.PRNGKey(2)
  plain = _run(jax_logits, params, prompts, key, cfg)
  fast = _run(jax_logits, params, prompts, key, dataclasses.replace(cfg, threshold=threshold))
  for name in ("tokens", "commit_step", "commit_conf", "step_conf"):
    np.testing.assert_array_equal(np.asarray(getattr(fast, name)), np.asarray(getattr(plain, name)))
  assert int(fast.model_calls) == int(plain.model_calls) == cfg.steps


def _hand_built_logits(top_probs):
  """Logits that ignore the input: completion position j proposes token j with probability top_probs[j]
  (no mass on [MASK], which the sampler never proposes)."""
  length = len(top_probs)
  probs = np.zeros((P + length, V))
  probs[:] = 1.0 / (V - 1)
  for j, pj in enumerate(top_probs):
    probs[P + j] = (1.0 - pj) / (V - 2)
    probs[P + j, j] = pj
  probs[:, MASK] = 0.0
  with np.errstate(divide="ignore"):
    logits = jnp.asarray(np.log(probs), jnp.float32)
  return lambda params, x: jnp.broadcast_to(logits, (x.shape[0], *logits.shape))


@pytest.mark.parametrize("block_length,top_probs,commit,calls,skipped_row", [
    # one block: step 0 takes 0 (top-1) and 2 (> 0.9); then 1; then 3; step 3 is skipped.
    (4, [0.95, 0.5, 0.92, 0.3], [0, 1, 0, 2], 3, 3),
    # two blocks: block 0 finishes at step 0, so step 1 is skipped and gets step 2's record.
    (2, [0.95, 0.93, 0.5, 0.3], [0, 0, 2, 3], 3, 1),
])
def test_threshold_hand_built_commits(block_length, top_probs, commit, calls, skipped_row):
  cfg = RolloutConfig(gen_length=4, block_length=block_length, steps=4, temperature=0.0, threshold=0.9)
  prompts = np.zeros((1, P), np.int32)
  traj = _run(_hand_built_logits(top_probs), None, prompts, jax.random.PRNGKey(0), cfg)
  np.testing.assert_array_equal(np.asarray(traj.commit_step)[0], commit)
  np.testing.assert_array_equal(np.asarray(traj.completion)[0], [0, 1, 2, 3])
  assert int(traj.model_calls) == calls
  conf = np.asarray(traj.step_conf)[:, 0]
  expected = np.array([[p if c >= s else 0.0 for p, c in zip(top_probs, commit)] for s in range(4)])
  expected[skipped_row] = expected[skipped_row + 1] if skipped_row + 1 < 4 else 0.0
  np.testing.assert_allclose(conf, expected, rtol=1e-5, atol=1e-6)


def test_threshold_model_calls_count_real_calls():
  cfg = RolloutConfig(gen_length=8, block_length=4, steps=8, temperature=0.0, threshold=0.5)
  params, prompts = _fixed_setup(cfg)
  calls = []

  def counting(p, x):
    jax.debug.callback(lambda: calls.append(1))
    return jax_logits(p, x)

  traj = _run(counting, params, prompts, jax.random.PRNGKey(0), cfg)
  jax.block_until_ready(traj)
  jax.effects_barrier()
  assert len(calls) == int(traj.model_calls) < cfg.steps


# --- K/V cache ------------------------------------------------------------------------------------

MODEL = tiny_config(vocab_size=V, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, mlp_dim=64,
                    mask_token_id=MASK)


@pytest.fixture(scope="module")
def model():
  gd, params = init_model(MODEL, 0)
  return gd, params, make_logits_fn(gd)


def test_fresh_cache_equals_full_pass(model):
  gd, params, logits_fn = model
  kv = make_kv_fns(gd)
  tokens = jnp.asarray(np.random.default_rng(0).integers(0, V, (3, 14)), jnp.int32)
  full = logits_fn(params, tokens)
  pre_logits, _, cache = kv.prefill(params, tokens)
  np.testing.assert_allclose(np.asarray(pre_logits), np.asarray(full), rtol=1e-5, atol=1e-5)
  start, width = 6, 4
  dual, _ = kv.extend(params, tokens, start, width, cache, "dual")
  np.testing.assert_allclose(np.asarray(dual), np.asarray(full[:, start:start + width]), rtol=1e-5, atol=1e-5)
  prefix, _ = kv.extend(params, tokens, start, tokens.shape[1] - start, cache.prefix(start), "prefix")
  np.testing.assert_allclose(np.asarray(prefix), np.asarray(full[:, start:]), rtol=1e-5, atol=1e-5)
  # a stale cache is an approximation, not the full pass: changing a query token changes the answer
  changed = tokens.at[:, start].set((tokens[:, start] + 1) % V)
  stale, _ = kv.extend(params, changed, start, width, cache, "dual")
  assert not np.allclose(np.asarray(stale), np.asarray(logits_fn(params, changed)[:, start:start + width]),
                         atol=1e-6)


@pytest.mark.parametrize("mode,threshold", [("prefix", 0.0), ("dual", 0.3)])
def test_cached_rollout_block_starts_are_exact(model, mode, threshold):
  """Each block's first step is a full pass: its record equals the model on the rebuilt state."""
  _, params, logits_fn = model
  cfg = RolloutConfig(gen_length=12, block_length=4, steps=6, temperature=1.0, threshold=threshold,
                      kv_cache=mode)
  prompts = np.random.default_rng(3).integers(0, 9, (4, P))
  key = jax.random.PRNGKey(4)
  traj = _run(logits_fn, params, prompts, key, cfg, record_step_entropy=True)
  plain = _run(logits_fn, params, prompts, key, dataclasses.replace(cfg, kv_cache="none"))
  x, commit = np.asarray(traj.tokens), np.asarray(traj.commit_step)
  assert bool(traj.finished) and (commit >= 0).all() and (x[:, P:] != MASK).all()
  spb = cfg.steps_per_block
  for blk in range(cfg.num_blocks):
    s = blk * spb
    xs = x.copy()
    xs[:, P:][commit >= s] = MASK
    logits = np.asarray(logits_fn(params, jnp.asarray(xs)), np.float64)[:, P:]
    logits[..., MASK] = -np.inf  # the sampler's confidences are over the proposable ids
    probs = _softmax(logits)
    expected = np.where(xs[:, P:] == MASK, probs.max(-1), 0.0)
    np.testing.assert_allclose(np.asarray(traj.step_conf[s]), expected, rtol=1e-4, atol=1e-5)
  # step 0 starts from the same state as plain decoding: identical commits
  np.testing.assert_array_equal(commit == 0, np.asarray(plain.commit_step) == 0)
  np.testing.assert_array_equal(np.where(commit == 0, x[:, P:], -1),
                                np.where(commit == 0, np.asarray(plain.tokens)[:, P:], -1))
  assert traj.step_entropy.shape == traj.step_conf.shape
  assert cfg.num_blocks <= int(traj.model_calls) <= cfg.steps


def test_cache_needs_a_model_graph():
  cfg = RolloutConfig(gen_length=8, block_length=4, steps=4, kv_cache="prefix")
  params, prompts = _fixed_setup(cfg)
  with pytest.raises(ConfigError, match="rollout.kv_cache"):
    rollout(jax_logits, params, jnp.asarray(prompts), jax.random.PRNGKey(0), cfg, mask_id=MASK,
            eos_id=EOS)


def test_bad_fast_options_are_config_errors():
  with pytest.raises(ConfigError, match="rollout.kv_cache"):
    RolloutConfig(kv_cache="both").validate()
  with pytest.raises(ConfigError, match="rollout.threshold"):
    RolloutConfig(threshold=-0.1).validate()


def test_cached_rollout_records_commit_hidden(model):
  """Tokens committed at a block's first step carry the full pass's hidden state (DelTA's features)."""
  gd, params, _ = model
  hidden_fn = make_logits_fn(gd, return_hidden=True)
  cfg = RolloutConfig(gen_length=8, block_length=4, steps=4, temperature=0.0, kv_cache="dual")
  prompts = jnp.asarray(np.random.default_rng(5).integers(0, 9, (2, P)))
  traj = rollout(hidden_fn, params, prompts, jax.random.PRNGKey(0), cfg, mask_id=MASK, eos_id=EOS,
                 record_commit_hidden=True)
  _, hidden = hidden_fn(params, jnp.concatenate([prompts, jnp.full((2, 8), MASK, jnp.int32)], 1))
  first = np.asarray(traj.commit_step) == 0
  assert first.any() and traj.commit_hidden.shape == (2, 8, MODEL.d_model)
  np.testing.assert_allclose(np.asarray(traj.commit_hidden)[first], np.asarray(hidden[:, P:])[first],
                             rtol=1e-5, atol=1e-5)
  assert (np.abs(np.asarray(traj.commit_hidden)).sum(-1) > 0).all()  # every committed token has one


def test_lora_cache_applies_the_adapters(model):
  """The K/V cache of a LoRA policy equals its full pass (adapters in every projection), and the
  cached rollout's block-start records read the LoRA model, not the base."""
  from daca_jax.models import lora
  from daca_jax.models.kv_cache import kv_fns_for

  _, base, _ = model
  cfg = dataclasses.replace(MODEL, lora_rank=2)
  gd, _ = init_model(cfg, 0)  # the graph carries the LoRA scale; the base weights are the fixture's
  adapters = lora.init_lora(cfg, jax.random.PRNGKey(1))
  adapters = jax.tree.map(lambda a: a + 0.3 * jax.random.normal(jax.random.PRNGKey(2), a.shape), adapters)
  params = lora.lora_params(base, adapters)
  logits_fn = lora.make_lora_logits_fn(gd)
  kv = kv_fns_for(logits_fn)
  tokens = jnp.asarray(np.random.default_rng(5).integers(0, V, (3, 14)), jnp.int32)
  full = logits_fn(params, tokens)
  assert float(jnp.abs(full - make_logits_fn(gd)(base, tokens)).max()) > 1e-3  # adapters matter
  pre_logits, _, cache = kv.prefill(params, tokens)
  np.testing.assert_allclose(np.asarray(pre_logits), np.asarray(full), rtol=1e-5, atol=1e-5)
  start, width = 6, 4
  dual, _ = kv.extend(params, tokens, start, width, cache, "dual")
  np.testing.assert_allclose(np.asarray(dual), np.asarray(full[:, start:start + width]), rtol=1e-5, atol=1e-5)
  rc = RolloutConfig(gen_length=8, block_length=4, steps=4, temperature=0.0, kv_cache="prefix")
  prompts = np.random.default_rng(6).integers(0, 9, (2, P))
  traj = _run(logits_fn, params, prompts, jax.random.PRNGKey(0), rc)
  plain = _run(logits_fn, params, prompts, jax.random.PRNGKey(0), dataclasses.replace(rc, kv_cache="none"))
  np.testing.assert_allclose(np.asarray(traj.step_conf[0]), np.asarray(plain.step_conf[0]), rtol=1e-5,
                             atol=1e-6)
