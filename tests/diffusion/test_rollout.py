"""Rollout sampler vs a plain-Python reference of LLaDA's loop, on a fixed-logit model."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from daca_jax.diffusion import completion_mask_from_eos, rollout, tokens_per_step
from daca_jax.config.rollout import RolloutConfig
from tests.fixed_logit_model import jax_logits, make_params, np_logits

V, MASK, EOS = 12, 10, 11
P = 3


def reference_candidates(params, x, step_key, cfg: RolloutConfig, logits_of=None, mask=MASK, vocab_limit=None):
  """One step's model probabilities [B, L, V], Gumbel-max candidates x0 [B, L], their probabilities
  p(x0) [B, L] (numpy, float64) and the remasking key, as LLaDA's generate() draws them, over the
  proposable ids only: [MASK] (and ids at or above ``vocab_limit``) are never candidates (their logits
  are -inf, the rest renormalised). ``logits_of(params, x) -> [B, T, V]`` defaults to the fixed-logit
  model; its prompt length is that of ``x`` minus the completion's."""
  k_gumbel, k_remask = jax.random.split(step_key)
  p = x.shape[1] - cfg.gen_length
  logits = np.array((logits_of or np_logits)(params, x), np.float64)[:, p:]
  logits[..., mask] = -np.inf
  if vocab_limit:  # 0: the whole vocabulary (ModelConfig.vocab_limit)
    logits[..., vocab_limit:] = -np.inf
  probs = np.exp(logits - logits.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  if cfg.temperature > 0:
    g = np.asarray(jax.random.gumbel(k_gumbel, logits.shape, jnp.float32), np.float64)
    x0 = np.argmax(logits + cfg.temperature * g, -1)
  else:
    x0 = np.argmax(logits, -1)
  return probs, x0, np.take_along_axis(probs, x0[..., None], -1)[..., 0], k_remask


def reference_rollout(params, prompts, key, cfg: RolloutConfig, logits_of=None, mask=MASK, vocab_limit=None):
  """LLaDA's generate() written as plain Python loops over blocks and steps (numpy, float64), each step
  reading the model's full forward pass (``logits_of``, :func:`reference_candidates`)."""
  b, P = prompts.shape
  length, bl = cfg.gen_length, cfg.block_length
  num_blocks = length // bl
  spb = cfg.steps // num_blocks
  x = np.concatenate([prompts, np.full((b, length), mask)], axis=1)
  step_keys = jax.random.split(key, cfg.steps)
  commit_step = np.full((b, length), -1)
  confs = []
  s = 0
  for blk in range(num_blocks):
    n_masked = bl  # every block starts fully masked
    ks = [n_masked // spb + (1 if i < n_masked % spb else 0) for i in range(spb)]
    for i in range(spb):
      probs, x0, p_x0, k_remask = reference_candidates(params, x, step_keys[s], cfg, logits_of, mask, vocab_limit)
      if cfg.remasking == "low_confidence":
        score = p_x0.copy()
      else:
        score = np.asarray(jax.random.uniform(k_remask, (b, length), jnp.float32), np.float64)
      masked = x[:, P:] == mask
      confs.append(np.where(masked, probs.max(-1), 0.0))
      score[:, (blk + 1) * bl:] = -np.inf
      score = np.where(masked, score, -np.inf)
      for r in range(b):
        order = sorted(range(length), key=lambda j: (-score[r, j], j))
        for j in order[: ks[i]]:
          x[r, P + j] = x0[r, j]
          commit_step[r, j] = s
      s += 1
  return x, commit_step, np.stack(confs)


def _setup(cfg, b=4, seed=0):
  params = jax.tree.map(jnp.asarray, make_params(P + cfg.gen_length, V, seed))
  rng = np.random.default_rng(seed + 1)
  prompts = rng.integers(0, 9, (b, P))
  return params, prompts


CASES = [
    RolloutConfig(gen_length=8, block_length=8, steps=4, temperature=1.0),
    RolloutConfig(gen_length=8, block_length=4, steps=4, temperature=0.7),
    RolloutConfig(gen_length=9, block_length=3, steps=6, temperature=1.0),  # 3 tokens over 2 steps: 2 then 1
    RolloutConfig(gen_length=8, block_length=4, steps=8, temperature=1.0, remasking="random"),
    RolloutConfig(gen_length=8, block_length=8, steps=8, temperature=0.0),
    RolloutConfig(gen_length=6, block_length=2, steps=3, temperature=0.0),
]


@pytest.mark.parametrize("cfg", CASES, ids=lambda c: f"L{c.gen_length}b{c.block_length}s{c.steps}T{c.temperature}{c.remasking[0]}")
def test_sampler_matches_reference_loop(cfg):
  params, prompts = _setup(cfg)
  key = jax.random.PRNGKey(7)
  traj = jax.jit(lambda p, x, k: rollout(jax_logits, p, x, k, cfg, mask_id=MASK, eos_id=EOS,
                                         record_step_conf=True))(params, jnp.asarray(prompts), key)
  ref_x, ref_commit, ref_conf = reference_rollout(params, prompts, key, cfg)
  np.testing.assert_array_equal(np.asarray(traj.tokens), ref_x)
  np.testing.assert_array_equal(np.asarray(traj.commit_step), ref_commit)
  np.testing.assert_allclose(np.asarray(traj.step_conf), ref_conf, rtol=1e-5, atol=1e-6)
  assert traj.num_model_calls == cfg.steps
  # every completion position committed exactly once, prompt untouched
  assert (np.asarray(traj.completion) != MASK).all()
  np.testing.assert_array_equal(np.asarray(traj.tokens[:, :P]), prompts)
  counts = np.stack([(ref_commit == s).sum(1) for s in range(cfg.steps)], 1)
  np.testing.assert_array_equal(counts, np.broadcast_to(tokens_per_step(cfg), counts.shape))


def test_greedy_is_deterministic_and_key_independent():
  cfg = RolloutConfig(gen_length=8, block_length=4, steps=4, temperature=0.0)
  params, prompts = _setup(cfg)
  run = lambda k: np.asarray(rollout(jax_logits, params, jnp.asarray(prompts), k, cfg, mask_id=MASK,
                                     eos_id=EOS).tokens)
  np.testing.assert_array_equal(run(jax.random.PRNGKey(0)), run(jax.random.PRNGKey(1)))


def test_sampling_depends_on_key():
  cfg = RolloutConfig(gen_length=8, block_length=8, steps=4, temperature=1.0)
  params, prompts = _setup(cfg, b=16)
  run = lambda k: np.asarray(rollout(jax_logits, params, jnp.asarray(prompts), k, cfg, mask_id=MASK,
                                     eos_id=EOS).tokens)
  np.testing.assert_array_equal(run(jax.random.PRNGKey(3)), run(jax.random.PRNGKey(3)))
  assert (run(jax.random.PRNGKey(3)) != run(jax.random.PRNGKey(4))).any()


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_records_change_neither_model_calls_nor_tokens(temperature):
  cfg = RolloutConfig(gen_length=8, block_length=4, steps=6, temperature=temperature)
  params, prompts = _setup(cfg)
  calls = []

  def counting_logits(p, x):
    jax.debug.callback(lambda: calls.append(1))
    return jax_logits(p, x)

  outs = {}
  for record in (False, True):
    calls.clear()
    fn = jax.jit(lambda p, x, k: rollout(counting_logits, p, x, k, cfg, mask_id=MASK, eos_id=EOS,
                                         record_step_conf=record, record_step_entropy=record))
    traj = fn(params, jnp.asarray(prompts), jax.random.PRNGKey(5))
    jax.block_until_ready(traj)
    jax.effects_barrier()
    assert len(calls) == cfg.steps == traj.num_model_calls
    outs[record] = traj
  np.testing.assert_array_equal(np.asarray(outs[False].tokens), np.asarray(outs[True].tokens))
  np.testing.assert_array_equal(np.asarray(outs[False].commit_step), np.asarray(outs[True].commit_step))
  assert outs[False].step_conf is None and outs[True].step_conf.shape == (cfg.steps, 4, 8)
  ent = np.asarray(outs[True].step_entropy)
  assert (ent >= 0).all() and (ent <= np.log(V) + 1e-5).all()


def test_commit_conf_is_probability_of_committed_token():
  cfg = RolloutConfig(gen_length=6, block_length=6, steps=6, temperature=1.0)
  params, prompts = _setup(cfg, b=2)
  traj = rollout(jax_logits, params, jnp.asarray(prompts), jax.random.PRNGKey(0), cfg, mask_id=MASK,
                 eos_id=EOS)
  x = np.asarray(traj.tokens)
  commit = np.asarray(traj.commit_step)
  for s in range(cfg.steps):  # rebuild x_s and check p(committed token | x_s)
    xs = x.copy()
    xs[:, P:][commit >= s] = MASK
    logits = np_logits(params, xs)[:, P:]
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    for r, j in zip(*np.nonzero(commit == s)):
      assert np.isclose(traj.commit_conf[r, j], probs[r, j, x[r, P + j]], rtol=1e-5)


def test_tokens_per_step_schedule():
  np.testing.assert_array_equal(tokens_per_step(RolloutConfig(gen_length=10, block_length=5, steps=4)),
                                [3, 2, 3, 2])
  np.testing.assert_array_equal(tokens_per_step(RolloutConfig(gen_length=32, block_length=32, steps=5)),
                                [7, 7, 6, 6, 6])


def test_completion_mask_from_eos():
  comp = jnp.array([[1, 2, EOS, 3, EOS], [1, 2, 3, 4, 5], [EOS, 1, 1, 1, 1]])
  np.testing.assert_array_equal(np.asarray(completion_mask_from_eos(comp, EOS)),
                                [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
