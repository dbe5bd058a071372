"""Every public method of GRPOLearner, and every registered likelihood estimator, works under every
config preset in configs/ (the model shrunk to tiny size). ``logprobs`` used to take bare tokens, so
under the main config's commit-order strata it could not be called (experiments/benchmark.py's
likelihood section died with a raw traceback)."""
import dataclasses
import functools
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from daca_jax.config import configure
from daca_jax.config.configure import train_config_from_dict
from daca_jax.errors import ConfigError
from daca_jax.likelihood import LIKELIHOOD
from daca_jax.models import init_model, make_logits_fn
from daca_jax.rl.learner import GRPOLearner
from daca_jax.run.task_views import build_task, task_kwargs
from daca_jax.tasks.base import make_task
from daca_jax.run.presets import config_files

CONFIGS = pathlib.Path(__file__).resolve().parents[2] / "configs"
FILES = config_files(CONFIGS)
CASES = [(cf.flag, p) for cf in FILES for p in (cf.presets or (None,))]
FAST = ("configs/sudoku_tiny.py", "default")  # the main job's config: commit-order strata, PODS, std advantages


def _finite(tree):
  return all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(tree) if hasattr(x, "dtype")
             and jnp.issubdtype(x.dtype, jnp.floating))


def test_every_config_file_declares_its_presets():
  assert {cf.flag for cf in FILES} >= {"configs/sudoku_tiny.py", "configs/countdown_tiny.py",
                                       "configs/json_schema_tiny.py"}
  for cf in FILES:
    assert cf.presets or not cf.takes_preset, f"{cf.flag}: declare PRESETS"
    for preset in cf.presets:
      configure.validate(train_config_from_dict(cf.build(preset)))  # every name resolves and validates
  with pytest.raises(ValueError, match="unknown preset"):
    next(cf for cf in FILES if cf.presets).build("no_such_preset")


@functools.lru_cache(maxsize=None)
def _setup(flag, preset):
  """The preset with a tiny model: (cfg, task, logits_fn, hidden_fn, params, learner, examples, traj)."""
  cf = next(f for f in FILES if f.flag == flag)
  cfg = train_config_from_dict(cf.build(preset))
  tiny = dataclasses.replace(cfg.model, d_model=16, n_layers=1, n_heads=2, n_kv_heads=0, mlp_dim=32, lora_rank=0,
                             lora_dropout=0.0)  # no adapters: their dropout must be off (a config error otherwise)
  # rollout_batch 0: the test samples 2 prompts' groups in one call, which a preset's split need not divide
  cfg = configure.validate(dataclasses.replace(cfg, model=tiny, rollout=_fit_byte_answers(cfg),
                                               rl=dataclasses.replace(cfg.rl, rollout_batch=0)))
  task = build_task(cfg)
  tok = task.tokenizer
  graphdef, params = init_model(cfg.model, 0)
  logits_fn, hidden_fn = make_logits_fn(graphdef), make_logits_fn(graphdef, return_hidden=True)
  learner = GRPOLearner(logits_fn, cfg, mask_id=tok.mask_id, eos_id=tok.eos_id, tokenizer=tok,
                        hidden_logits_fn=hidden_fn)
  examples = [ex for ex in task.eval_examples()[0][:2] for _ in range(cfg.rl.group_size)]  # groups of G
  traj = learner.rollout(params, jnp.asarray(task.encode_prompts(examples)), jax.random.PRNGKey(0))
  return cfg, task, logits_fn, hidden_fn, params, learner, examples, traj


def _fit_byte_answers(cfg):
  """The rollout, lengthened by whole blocks (steps in proportion) where the task's longest answer in the
  byte tokenizer does not fit: the paper presets' smoke variants size completions for the checkpoint's
  tokenizer they run with, whose answers are shorter."""
  r = cfg.rollout
  need = make_task(cfg.task.name, **task_kwargs(cfg)).min_gen_length
  if r.gen_length >= need:
    return r
  length = -(-need // r.block_length) * r.block_length
  return dataclasses.replace(r, gen_length=length, steps=r.steps * length // r.gen_length)


def _marks(case):
  return () if case == FAST else pytest.mark.slow


@pytest.mark.parametrize("flag,preset", [pytest.param(*c, marks=_marks(c)) for c in CASES])
def test_learner_methods_under_the_preset(flag, preset):
  cfg, task, _, _, params, learner, examples, traj = _setup(flag, preset)
  key = jax.random.PRNGKey(1)
  b, length = traj.completion_mask.shape
  assert (b, length) == (2 * cfg.rl.group_size, cfg.rollout.gen_length) and bool(traj.finished)
  rewards = jnp.asarray(np.random.default_rng(0).uniform(size=b), jnp.float32)
  token_rewards = (task.token_rewards(np.asarray(traj.completion), examples)
                   if learner.credit.needs_token_rewards else None)
  credit = learner.assign_credit(traj, rewards, learner.init_credit_state(), token_rewards=token_rewards)
  weights = credit.weights if credit.token_advantages is None else (credit.weights, credit.token_advantages)
  assert credit.weights.shape == (b, length) and _finite(credit.weights)
  adv = learner.advantages(rewards)
  assert adv is None or (adv.shape == (b,) and _finite(adv))
  scores = jax.jit(learner.logprobs)(params, traj, key)  # commit-order strata read the trajectory's commit steps
  assert scores.logp.shape == (b, scores.num_states * length) and _finite(scores.logp)
  grads, aux = jax.jit(learner.objective_grad)(params, params, traj, rewards, weights, key)
  assert _finite(grads) and np.isfinite(float(aux["loss"]))
  new, _, metrics = learner.update(params, learner.init_opt_state(params), params, traj, rewards, weights, key)
  assert _finite(new) and np.isfinite(float(metrics["loss"]))
  with pytest.raises(TypeError, match="takes the rollout's Trajectory"):
    learner.logprobs(params, traj.tokens, key)


@pytest.mark.slow
@pytest.mark.parametrize("flag,preset", CASES)
@pytest.mark.parametrize("estimator", LIKELIHOOD.names())
def test_every_estimator_under_the_preset(flag, preset, estimator):
  """Each registered estimator through the learner, under the preset's other fields."""
  cfg, task, logits_fn, hidden_fn, params, _, _, traj = _setup(flag, preset)
  try:
    other = configure.validate(dataclasses.replace(cfg, rl=dataclasses.replace(cfg.rl, likelihood=estimator)))
  except ConfigError:
    pytest.skip(f"{estimator} with this preset's objective is a config error (refused before any work)")
  tok = task.tokenizer
  learner = GRPOLearner(logits_fn, other, mask_id=tok.mask_id, eos_id=tok.eos_id, tokenizer=tok,
                        hidden_logits_fn=hidden_fn)
  s = learner.logprobs(params, traj, jax.random.PRNGKey(2))
  b, length = traj.completion_mask.shape
  assert s.logp.shape == (b, s.num_states * length) and _finite(s.logp)
