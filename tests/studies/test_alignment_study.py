"""The real-task alignment study: paired updates of every estimator on the same rollout batches."""
import numpy as np
import pytest

from daca_jax.studies import alignment_study as al
from daca_jax.errors import ConfigError
from daca_jax.models import init_model, make_logits_fn
from daca_jax.run.task_views import build_task
from tests.smoke_config import smoke


@pytest.fixture(scope="module")
def setup():
  # One denoising step (every token committed from the fully masked canvas): the sampler's own
  # commit state of every token is the all-masked completion, so the per-step trajectory
  # likelihood and d1's mean-field estimate are the same function -- an exact oracle.
  cfg = smoke(rollout__steps=1, rollout__block_length=20, rl__prompts_per_step=2, rl__group_size=4)
  task = build_task(cfg)
  examples = task.train_examples(16, 0)
  graphdef, params = init_model(cfg.model, 0)
  return cfg, make_logits_fn(graphdef), params, task, examples


def test_an_estimator_equal_to_the_reference_aligns_exactly(setup):
  cfg, logits_fn, params, task, examples = setup
  arms = {"reference": {"rl.likelihood": "trajectory", "likelihood.trajectory.groups": 0},
          "mean_field": {"rl.likelihood": "mean_field"}}
  res = al.run_alignment(cfg, logits_fn, params, task, examples, arms=arms, num_batches=4, seed=0,
                         log=lambda *a: None)
  ref, mf = res["arms"]["reference"], res["arms"]["mean_field"]
  # A random model's batch whose rewards all tie has no gradient: it is counted, not averaged in.
  assert res["zero_batches"] < res["num_batches"]
  assert ref["cos_to_reference"] == pytest.approx(1.0, abs=1e-9) and ref["paired_cos"] == pytest.approx(1.0)
  assert mf["cos_to_reference"] == pytest.approx(1.0, abs=1e-5) and mf["norm_ratio"] == pytest.approx(1.0, rel=1e-4)
  assert mf["paired_cos"] == pytest.approx(1.0, abs=1e-5)
  # Two independent batches of 8 rollouts of a random model: their updates are not parallel.
  assert -1.0 <= ref["agreement"] < 0.99 and res["batch_rollouts"] == 8
  assert "| mean_field | +1.000 |" in al.markdown(res)


def test_bad_arguments_are_config_errors(setup):
  cfg, logits_fn, params, task, examples = setup
  with pytest.raises(ConfigError, match="num_batches=1"):
    al.run_alignment(cfg, logits_fn, params, task, examples, num_batches=1)
  with pytest.raises(ConfigError, match="likelihood.num_stratta"):
    al.arm_config(cfg, {"likelihood.num_stratta": 4})
  with pytest.raises(ConfigError, match="rl.likelihood"):
    al.arm_config(cfg, {"rl.likelihood": "nope"})
  assert al.arm_config(cfg, {"likelihood.stratified.num_strata": 2}).likelihood.stratified.num_strata == 2
  assert np.isclose(al._cos(np.ones(3), -np.ones(3)), -1.0)


def test_mask_agreement_is_one_for_deterministic_estimators_only(setup):
  cfg, logits_fn, params, task, examples = setup
  arms = {"reference": {"rl.likelihood": "trajectory", "likelihood.trajectory.groups": 0},
          "mean_field": {"rl.likelihood": "mean_field"},
          "sml": {"rl.likelihood": "stratified", "likelihood.stratified.num_strata": 2}}
  res = al.run_alignment(cfg, logits_fn, params, task, examples, arms=arms, num_batches=4, seed=0,
                         mask_agreement=True, log=lambda *a: None)
  assert res["arms"]["reference"]["mask_agreement"] == pytest.approx(1.0, abs=1e-6)
  assert res["arms"]["mean_field"]["mask_agreement"] == pytest.approx(1.0, abs=1e-6)
  assert res["arms"]["sml"]["mask_agreement"] < 0.999  # its strata are redrawn with the key
  assert "same batch, new masks" in al.markdown(res)
  assert "same batch, new masks" not in al.markdown({**res, "arms": {
      n: {k: v for k, v in a.items() if k != "mask_agreement"} for n, a in res["arms"].items()}})
