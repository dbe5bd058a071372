"""Fast rollouts (Fast-dLLM's K/V cache and threshold decoding) inside RL: the learner's training rollouts
under ``rollout.kv_cache`` / ``rollout.threshold`` feed every credit assigner and the update.

The oracle is the cache's exactness on a one-layer model: there a position's keys and values depend only
on its own token, so a cache built at a block's start is never stale, and a cached training rollout must
commit exactly the tokens, at exactly the steps, with exactly the records (step confidences and entropies,
commit confidences, commit-step hidden states) of the same learner without the cache — sampled at the RL
temperature, threshold or not. With more layers the cache is an approximation (a dual cache holds the
not-yet-committed blocks' entries from the block's first step); the records are then those of the
logits the sampler actually used, which every assigner reads like any other trajectory.
"""
import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from daca_jax.config import configure
from daca_jax.config.configure import train_config_from_dict
from daca_jax.credit import CREDIT
from daca_jax.models import init_model, make_logits_fn
from daca_jax.rl.learner import GRPOLearner
from daca_jax.run.task_views import build_task
from configs import sudoku_tiny

MODES = [("none", 0.0), ("prefix", 0.0), ("dual", 0.0), ("none", 0.9), ("prefix", 0.9), ("dual", 0.9)]
RECORDS = ("step_conf", "step_entropy", "commit_conf", "commit_hidden")


@functools.lru_cache(maxsize=None)
def _setup(kv_cache, threshold, credit="dps", layers=1):
  """The main job's config (its smoke shape), a tiny model, and a learner recording every trajectory record."""
  c = sudoku_tiny.get_config("smoke")
  c.rollout.kv_cache, c.rollout.threshold, c.rl.credit = kv_cache, threshold, credit
  c.rl.warmup_steps, c.rl.lr_schedule = 0, "constant"  # the first update moves the parameters
  cfg = train_config_from_dict(c)
  tiny = dataclasses.replace(cfg.model, d_model=16, n_layers=layers, n_heads=2, n_kv_heads=0, mlp_dim=32, lora_rank=0)
  cfg = configure.validate(dataclasses.replace(cfg, model=tiny))
  task = build_task(cfg)
  tok = task.tokenizer
  graphdef, params = init_model(cfg.model, 0)
  learner = GRPOLearner(make_logits_fn(graphdef), cfg, mask_id=tok.mask_id, eos_id=tok.eos_id, tokenizer=tok,
                        hidden_logits_fn=make_logits_fn(graphdef, return_hidden=True),
                        extra_records=RECORDS[:2] + ("commit_hidden",))
  examples = [ex for ex in task.eval_examples()[0][:2] for _ in range(cfg.rl.group_size)]
  prompts = jnp.asarray(task.encode_prompts(examples))
  return cfg, task, params, learner, examples, prompts


def _traj(kv_cache, threshold, layers=1):
  cfg, _, params, learner, _, prompts = _setup(kv_cache, threshold, layers=layers)
  return learner.rollout(params, prompts, jax.random.PRNGKey(3))


@pytest.mark.parametrize("kv_cache,threshold", [m for m in MODES if m[0] != "none"])
def test_cached_training_rollout_equals_the_uncached_one_where_the_cache_is_exact(kv_cache, threshold):
  cfg = _setup(kv_cache, threshold)[0]
  assert cfg.rollout.temperature > 0  # sampled, as in training
  fast, plain = _traj(kv_cache, threshold), _traj("none", threshold)
  np.testing.assert_array_equal(np.asarray(fast.tokens), np.asarray(plain.tokens))
  np.testing.assert_array_equal(np.asarray(fast.commit_step), np.asarray(plain.commit_step))
  for name in RECORDS:
    np.testing.assert_allclose(np.asarray(getattr(fast, name)), np.asarray(getattr(plain, name)), atol=2e-5,
                               rtol=2e-5, err_msg=name)
  assert int(fast.model_calls) == int(plain.model_calls)  # the same steps ran (cached ones on the window only)


def test_a_dual_cache_with_several_layers_approximates_but_keeps_its_records_consistent():
  """Two layers: the dual cache's stale entries change some proposals, yet the records are those of the
  logits the sampler used: each token's commit confidence is the step confidence at its commit step
  when it was that step's top-1 candidate (greedy here, so always)."""
  cfg, _, params, learner, _, prompts = _setup("dual", 0.0, layers=2)
  greedy = dataclasses.replace(cfg.rollout, temperature=0.0)
  from daca_jax.diffusion import rollout
  traj = jax.jit(lambda p, x: rollout(learner.logits_fn, p, x, jax.random.PRNGKey(0), greedy, mask_id=learner.mask_id,
                                      eos_id=0, record_step_conf=True))(params, prompts)
  conf = np.asarray(traj.step_conf)  # [S, B, L]
  at_commit = np.take_along_axis(conf, np.asarray(traj.commit_step)[None], 0)[0]
  np.testing.assert_allclose(np.asarray(traj.commit_conf), at_commit, rtol=1e-5, atol=1e-6)
  assert bool(traj.finished)


@functools.lru_cache(maxsize=None)
def _training_rollout(kv_cache, threshold):
  """One two-layer training rollout per mode, read by every assigner: the learners of this file record
  every trajectory record whatever their credit (``extra_records``), so each credit's learner samples
  with the same sampler, model, prompts and key, and its rollout is this one (sampled once, not seven
  times)."""
  _, _, params, learner, _, prompts = _setup(kv_cache, threshold, "dps", layers=2)
  return learner.rollout(params, prompts, jax.random.PRNGKey(1))


@pytest.mark.parametrize("kv_cache,threshold", MODES[1:3] + MODES[5:])
@pytest.mark.parametrize("credit", CREDIT.names())
def test_every_credit_assigner_and_the_update_run_on_fast_training_rollouts(kv_cache, threshold, credit):
  cfg, task, params, learner, examples, prompts = _setup(kv_cache, threshold, credit, layers=2)
  assert learner.cfg.rollout == _setup(kv_cache, threshold, "dps", layers=2)[0].rollout
  traj = _training_rollout(kv_cache, threshold)
  b, length = traj.completion_mask.shape
  assert bool(traj.finished) and (b, length) == (prompts.shape[0], cfg.rollout.gen_length)
  rewards = jnp.asarray(np.random.default_rng(0).uniform(size=b), jnp.float32)
  token_rewards = (task.token_rewards(np.asarray(traj.completion), examples)
                   if learner.credit.needs_token_rewards else None)
  out = learner.assign_credit(traj, rewards, learner.init_credit_state(), token_rewards=token_rewards)
  assert out.weights.shape == (b, length) and bool(jnp.all(jnp.isfinite(out.weights)))
  if credit == "uniform":
    np.testing.assert_array_equal(np.asarray(out.weights), 1.0)
  weights = out.weights if out.token_advantages is None else (out.weights, out.token_advantages)
  opt_state = learner.init_opt_state(params)
  new, _, metrics = learner.update(params, opt_state, params, traj, rewards, weights, jax.random.PRNGKey(2))
  assert np.isfinite(float(metrics["loss"]))
  moved = max(float(jnp.max(jnp.abs(x - y))) for x, y in zip(jax.tree.leaves(new), jax.tree.leaves(params)))
  assert moved > 0
