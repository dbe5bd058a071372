"""Sampler memory: Gumbel noise for a window equals the slice of the full draw (so tokens per key are
unchanged), the chunked hidden-state path equals the full-logits path exactly, and the compiled rollout
never holds full-canvas [B, L, V] logits or noise."""
import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from daca_jax.diffusion import rollout
from daca_jax.diffusion.noise import counters, exact_window_supported, gumbel_window
from daca_jax.diffusion.rollout import SAMPLE_CHUNK_BYTES, chunk_size
from daca_jax.models import init_model, make_logits_fn, tiny_config
from daca_jax.config.rollout import RolloutConfig


@pytest.mark.parametrize("typed", [False, True])
def test_gumbel_window_is_the_slice_of_the_full_draw(typed):
  key = jax.random.key(3) if typed else jax.random.PRNGKey(3)
  key = jax.random.split(key)[1]
  assert exact_window_supported(key)
  shape = (3, 12, 37)
  full = np.asarray(jax.random.gumbel(key, shape, jnp.float32))
  window = jax.jit(lambda k, s: gumbel_window(k, shape, s, 4))
  for start in (0, 5, 8):
    np.testing.assert_array_equal(np.asarray(window(key, jnp.int32(start))), full[:, start:start + 4])


def test_counters_are_exact_past_two_to_the_32():
  """Flat indices of a (64, 512, 152064) draw exceed 2**32: the two 32-bit words are exact."""
  shape = (64, 512, 152064)
  hi, lo = counters(shape, jnp.int32(500), 2)
  hi, lo = np.asarray(hi, np.uint64)[[0, -1]], np.asarray(lo, np.uint64)[[0, -1]]
  b = np.array([0, 63], np.uint64)[:, None, None]
  pos = np.array([500, 501], np.uint64)[None, :, None]
  v = np.arange(shape[2], dtype=np.uint64)[None, None, :]
  flat = (b * np.uint64(shape[1]) + pos) * np.uint64(shape[2]) + v
  np.testing.assert_array_equal(hi, flat >> np.uint64(32))
  np.testing.assert_array_equal(lo, flat & np.uint64(2 ** 32 - 1))
  assert flat.max() > 2 ** 32


V, MASK, P = 40, 37, 4
MODEL = tiny_config(vocab_size=V, d_model=16, n_layers=2, n_heads=2, mlp_dim=32, mask_token_id=MASK)


@pytest.mark.parametrize("budget", [SAMPLE_CHUNK_BYTES, 3 * 40 * 4 * 8])  # whole blocks; 8 positions
@pytest.mark.parametrize("rc", [
    RolloutConfig(gen_length=64, block_length=64, steps=8, temperature=1.0),
    RolloutConfig(gen_length=48, block_length=16, steps=12, temperature=0.7, remasking="random"),
    RolloutConfig(gen_length=24, block_length=24, steps=24, temperature=1.0, threshold=0.2),
], ids=lambda c: f"L{c.gen_length}b{c.block_length}")
def test_chunked_hidden_path_equals_full_logits_path(rc, budget, monkeypatch):
  monkeypatch.setattr(importlib.import_module("daca_jax.diffusion.decode"), "SAMPLE_CHUNK_BYTES", budget)
  gd, params = init_model(MODEL, 1)
  split_fn = make_logits_fn(gd, return_hidden=True)  # projected chunk by chunk from hidden states
  full_fn = lambda p, x: split_fn(p, x)  # no model split attached: the sampler reads full logits
  prompts = jnp.asarray(np.random.default_rng(0).integers(0, 30, (3, P)), jnp.int32)
  go = lambda fn: rollout(fn, params, prompts, jax.random.PRNGKey(2), rc, mask_id=MASK, eos_id=38,
                          record_step_conf=True, record_step_entropy=True, record_commit_hidden=True)
  a, b = go(split_fn), go(full_fn)
  for name in ("tokens", "commit_step"):
    np.testing.assert_array_equal(np.asarray(getattr(a, name)), np.asarray(getattr(b, name)))
  for name in ("commit_conf", "step_conf", "step_entropy", "commit_hidden"):
    np.testing.assert_allclose(np.asarray(getattr(a, name)), np.asarray(getattr(b, name)), atol=1e-5)
  assert bool(a.finished)


def test_chunk_size_divides_the_block_within_the_budget():
  per_position = 4 * 64 * 126464  # LLaDA-8B logits of one position at B = 64
  assert chunk_size(32, 64, 126464) == SAMPLE_CHUNK_BYTES // per_position == 8
  assert chunk_size(48, 64, 126464) == 8 and chunk_size(12, 64, 126464) == 6 and chunk_size(37, 64, 126464) == 1
  assert chunk_size(256, 4, 260) == 256  # a tiny model projects a whole block at once
  assert chunk_size(32, 10 ** 4, 126464) == 1


@pytest.mark.parametrize("records", [False, True])
def test_compiled_rollout_never_holds_full_canvas_logits(records, monkeypatch):
  """At V = 32768 float32 [B, L, V] is 32 MiB here. With chunks of 4 positions the compiled scratch
  stays below half of one such array (this config compiled to 194 MiB before the sampler was
  chunked: [B, P+L, V] logits and [B, L, V] noise at every step; 80 MiB at the default budget, which
  projects whole 32-position blocks at this size)."""
  big = tiny_config(vocab_size=32768, d_model=16, n_layers=1, n_heads=2, mlp_dim=32, mask_token_id=32767)
  gd, params = init_model(big, 0)
  b, length = 4, 64
  monkeypatch.setattr(importlib.import_module("daca_jax.diffusion.decode"), "SAMPLE_CHUNK_BYTES",
                      4 * b * big.vocab_size * 4)
  rc = RolloutConfig(gen_length=length, block_length=32, steps=4, temperature=1.0)
  fn = jax.jit(lambda p, x, k: rollout(make_logits_fn(gd), p, x, k, rc, mask_id=32767, eos_id=1,
                                       record_step_conf=records, record_step_entropy=records))
  prompts = jnp.zeros((b, P), jnp.int32)
  temp = fn.lower(params, prompts, jax.random.PRNGKey(0)).compile().memory_analysis().temp_size_in_bytes
  canvas = b * length * big.vocab_size * 4
  assert temp < canvas / 2, (temp, canvas)


def test_tokens_for_a_key_do_not_depend_on_the_chunking(monkeypatch):
  """The same key draws the same tokens whatever the chunk size (each chunk's noise is its slice)."""
  rollout_module = importlib.import_module("daca_jax.diffusion.decode")  # chunk_size reads it there
  gd, params = init_model(MODEL, 3)
  fn = make_logits_fn(gd)
  rc = RolloutConfig(gen_length=32, block_length=32, steps=8, temperature=1.0)
  prompts = jnp.zeros((2, P), jnp.int32)
  outs = []
  for chunk in (32, 8, 1):  # positions per chunk at B = 2, V = 40
    monkeypatch.setattr(rollout_module, "SAMPLE_CHUNK_BYTES", 2 * V * 4 * chunk)
    outs.append(np.asarray(rollout(fn, params, prompts, jax.random.PRNGKey(5), rc, mask_id=MASK,
                                   eos_id=38).tokens))
  np.testing.assert_array_equal(outs[0], outs[1])
  np.testing.assert_array_equal(outs[0], outs[2])


def test_without_records_only_the_block_is_projected_and_tokens_do_not_change(monkeypatch):
  """Without step records the sampler projects only the current block's chunks through the output
  head (L / block = 4 times fewer here; 8x at d1's L 256, block 32); with them it projects the whole
  completion. The same key gives the same tokens either way, across 4 blocks and chunks of 2."""
  import dataclasses as dc
  rollout_module = importlib.import_module("daca_jax.diffusion.decode")
  monkeypatch.setattr(rollout_module, "SAMPLE_CHUNK_BYTES", 2 * V * 4 * 2)  # 2 positions per chunk at B = 2
  gd, params = init_model(MODEL, 4)
  fns = make_logits_fn(gd)
  calls = []

  def head(p, rows):
    jax.debug.callback(lambda: calls.append(rows.shape[1]))
    return fns.head(p, rows)

  spy = dc.replace(fns, head=head)
  rc = RolloutConfig(gen_length=16, block_length=4, steps=4, temperature=1.0)
  prompts = jnp.asarray(np.random.default_rng(1).integers(0, 30, (2, P)), jnp.int32)
  projected, tokens = {}, {}
  for records in (False, True):
    calls.clear()
    traj = rollout(spy, params, prompts, jax.random.PRNGKey(6), rc, mask_id=MASK, eos_id=38,
                   record_step_conf=records, record_step_entropy=records)
    jax.block_until_ready(traj.tokens)
    jax.effects_barrier()
    projected[records], tokens[records] = sum(calls), np.asarray(traj.tokens)
  assert projected[False] == rc.steps * rc.block_length
  assert projected[True] == rc.steps * rc.gen_length
  np.testing.assert_array_equal(tokens[False], tokens[True])
