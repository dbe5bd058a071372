"""Every combination of the registries (``rl.objective`` × ``rl.likelihood`` × ``rl.credit`` ×
``rl.pass_accum``) is either refused when the config is validated, with a one-line ConfigError, or
traces through the learner's whole update: no combination that validation accepts may fail later, after
the warm start and the rollouts have been paid for (a per-token credit under MAP's per-sequence ratios
used to be refused only when the learner was built, after SFT).

The update is traced with ``jax.eval_shape`` (no compilation), on one rollout that records everything
any credit reads. The default suite traces a sample that names every objective, estimator and credit;
the slow set traces every accepted combination.
"""
from __future__ import annotations

import dataclasses
import functools
import itertools

import jax
import jax.numpy as jnp
import pytest

from configs import sudoku_tiny
from daca_jax.config import configure
from daca_jax.config.configure import train_config_from_dict
from daca_jax.credit import CREDIT
from daca_jax.credit.base import RECORDS
from daca_jax.errors import ConfigError
from daca_jax.likelihood import LIKELIHOOD
from daca_jax.models import init_model, make_logits_fn
from daca_jax.rl.learner import GRPOLearner
from daca_jax.rl.methods import OBJECTIVES
from daca_jax.run.task_views import build_task

COMBOS = list(itertools.product(OBJECTIVES.names(), LIKELIHOOD.names(), CREDIT.names(), (False, True)))
# Traced in the default suite: the new bases with non-trivial credit and their own or SML's estimator,
# per-pass accumulation, and every name of each registry at least once (checked below).
SAMPLE = (
    ("map", "stepmerge", "dps", False), ("map", "stepmerge", "delta", False), ("bgpo", "elbo_mc", "dtca", True),
    ("bgpo", "stratified", "uniform", False), ("espo", "espo_elbo", "dps", False), ("spg", "spg_block", "delta", False),
    ("spg", "stratified", "uniform", False), ("diffu_grpo", "trajectory", "position_value", True),
    ("diffu_grpo", "stratified", "contrast", True), ("diffu_grpo", "elbo", "token_reward", True),
    ("rldf", "rldf", "dps", False), ("wd1", "coupled", "uniform", False), ("gspo", "mean_field", "dtca", False),
    ("gdpo", "elbo", "uniform", False), ("reinforce_pp", "stratified", "dps", False),
)


@functools.lru_cache(maxsize=None)
def _base():
  """The main job's config with a tiny model and 2 groups of 4, and the task."""
  cfg = train_config_from_dict(sudoku_tiny.get_config())
  tiny = dataclasses.replace(cfg.model, d_model=16, n_layers=1, n_heads=2, n_kv_heads=0, mlp_dim=32, lora_rank=0,
                             lora_dropout=0.0)
  # the shape-tied settings fitted to the one-block, 10-step completion (as configs/sota_grid.py does)
  lik = dataclasses.replace(cfg.likelihood, stepmerge=dataclasses.replace(cfg.likelihood.stepmerge, segments=5),
                            spg_block=dataclasses.replace(cfg.likelihood.spg_block, num_t=1))
  return dataclasses.replace(cfg, model=tiny, likelihood=lik,
                             rl=dataclasses.replace(cfg.rl, rollout_batch=0, group_size=4)), build_task(cfg)


def _config(objective, likelihood, credit, pass_accum):
  """The combination, with the one setting each method requires of the others (SPG: no KL term; ESPO:
  the ELBO terms summed into its sequence ELBO); refused combinations raise ConfigError."""
  cfg, _ = _base()
  rl = dataclasses.replace(cfg.rl, objective=objective, likelihood=likelihood, credit=credit, pass_accum=pass_accum,
                           beta=0.0 if objective == "spg" else cfg.rl.beta)
  lik = dataclasses.replace(cfg.likelihood, elbo_terms="summed" if objective == "espo" else cfg.likelihood.elbo_terms)
  return configure.validate(dataclasses.replace(cfg, rl=rl, likelihood=lik))


@functools.lru_cache(maxsize=None)
def _rollout():
  """(graphdef, params, trajectory recording every credit's inputs, rewards)."""
  cfg, task = _base()
  graphdef, params = init_model(cfg.model, 0)
  learner = GRPOLearner(make_logits_fn(graphdef), cfg, mask_id=task.tokenizer.mask_id, eos_id=task.tokenizer.eos_id,
                        hidden_logits_fn=make_logits_fn(graphdef, return_hidden=True), extra_records=RECORDS)
  examples = [ex for ex in task.eval_examples()[0][:2] for _ in range(4)]
  traj = learner.rollout(params, jnp.asarray(task.encode_prompts(examples)), jax.random.PRNGKey(0))
  return graphdef, params, traj, jnp.linspace(0.0, 1.0, 8)


def _trace_update(cfg):
  _, task = _base()
  graphdef, params, traj, rewards = _rollout()
  learner = GRPOLearner(make_logits_fn(graphdef), cfg, mask_id=task.tokenizer.mask_id, eos_id=task.tokenizer.eos_id,
                        tokenizer=task.tokenizer, hidden_logits_fn=make_logits_fn(graphdef, return_hidden=True))
  weights = jnp.ones(traj.completion_mask.shape, jnp.float32)
  if learner.credit.token_level:
    weights = (weights, weights * rewards[:, None])  # (weights, token advantages)
  out = jax.eval_shape(learner.update, params, learner.init_opt_state(params), params, traj, rewards, weights,
                       jax.random.PRNGKey(1))
  new_params = out[0]
  assert jax.tree.structure(new_params) == jax.tree.structure(params)


def test_every_combination_is_accepted_or_refused_in_one_line():
  accepted = []
  for combo in COMBOS:
    try:
      _config(*combo)
    except ConfigError as e:
      assert "\n" not in str(e) and "=" in str(e), (combo, str(e))
      continue
    accepted.append(combo)
  # Each registry's every name is usable in some accepted combination, and the refusals are real.
  for i, registry in enumerate((OBJECTIVES, LIKELIHOOD, CREDIT)):
    assert {c[i] for c in accepted} == set(registry.names())
  assert 0 < len(accepted) < len(COMBOS)
  assert set(SAMPLE) <= set(accepted)
  for i, registry in enumerate((OBJECTIVES, LIKELIHOOD, CREDIT)):
    assert {c[i] for c in SAMPLE} == set(registry.names()), f"SAMPLE misses a name of {registry}"
  # per-token advantages under a per-sequence objective: refused at validation, before any work
  with pytest.raises(ConfigError, match="rl.credit='position_value'"):
    _config("map", "stepmerge", "position_value", False)


@pytest.mark.parametrize("combo", SAMPLE, ids=lambda c: "-".join(map(str, c)))
def test_a_sample_of_accepted_combinations_traces_through_the_update(combo):
  _trace_update(_config(*combo))


@pytest.mark.slow
@pytest.mark.parametrize("objective", OBJECTIVES.names())
def test_every_accepted_combination_traces_through_the_update(objective):
  traced = 0
  for combo in COMBOS:
    if combo[0] != objective:
      continue
    try:
      cfg = _config(*combo)
    except ConfigError:
      continue
    try:
      _trace_update(cfg)
    except Exception as e:  # noqa: BLE001 - the combination is named with what failed
      raise AssertionError(f"{combo} was accepted by validation but its update fails: {e}") from e
    traced += 1
  assert traced > 0
