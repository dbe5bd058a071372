"""Credit assigners' per-token advantages against the task's own per-cell credit (the oracle)."""
import numpy as np
import pytest

from daca_jax.errors import ConfigError, ShapeError
from daca_jax.models import init_model
from daca_jax.run.task_views import build_task
from daca_jax.studies import credit_alignment as ca
from tests.smoke_config import smoke


def test_stats_exact_oracles():
  rng = np.random.default_rng(0)
  valid = np.ones((4, 6))
  valid[:, -1] = 0.0  # past the completion: never counted
  cell = np.zeros((4, 6))
  cell[:, 1:4] = 1.0
  oracle = rng.normal(size=(4, 6)) * cell
  same = ca.alignment_stats(2.0 * oracle, oracle, cell, valid)
  assert same == {"oracle_cos": pytest.approx(1.0), "cell_sign_agreement": 1.0, "off_cell_share": 0.0}
  assert ca.alignment_stats(-oracle, oracle, cell, valid)["oracle_cos"] == pytest.approx(-1.0)
  # A sequence advantage on every token: off-cell share = off-cell tokens / counted tokens (2 of 5),
  # cosine = <A 1, o> / (|A 1| |o|) computed by hand.
  adv = np.array([1.0, -1.0, 0.5, -0.5])
  e = ca.effective_advantages(np.ones((4, 6)), None, adv)
  stats = ca.alignment_stats(e, oracle, cell, valid)
  assert stats["off_cell_share"] == pytest.approx(2 / 5)
  e_in = e * valid
  want = (e_in * oracle).sum() / (np.linalg.norm(e_in) * np.linalg.norm(oracle))
  assert stats["oracle_cos"] == pytest.approx(want)
  signs = np.sign(e[:, 1:4]) == np.sign(oracle[:, 1:4])
  assert stats["cell_sign_agreement"] == pytest.approx(signs.mean())
  # per-token advantages given: used as they are
  np.testing.assert_array_equal(ca.effective_advantages(np.ones((4, 6)), oracle, None), oracle)
  with pytest.raises(ShapeError, match=r"oracle has shape \(4, 6\); expected \(4, 5\)"):
    ca.alignment_stats(e[:, :5], oracle, cell, valid)
  with pytest.raises(ShapeError, match=r"advantages has shape \(3,\)"):
    ca.effective_advantages(np.ones((4, 6)), None, adv[:3])


def test_run_on_sudoku_the_oracle_arm_is_the_oracle_and_uniform_spends_off_cell(monkeypatch):
  cfg = smoke(rl__prompts_per_step=2, rl__group_size=4)
  task = build_task(cfg)
  # An untrained model gets every cell wrong (an all-zero oracle); grade the first 4 tokens by the
  # parity of their byte instead, so that the oracle is non-zero and varies within a group.
  def token_rewards(ids, examples):
    mask = np.zeros(ids.shape, np.float32)
    mask[:, :4] = 1.0
    return (np.asarray(ids) % 2).astype(np.float32) * mask, mask
  monkeypatch.setattr(task, "token_rewards", token_rewards)
  monkeypatch.setattr(task, "reward", lambda completions, examples: [
      float(np.mean([b % 2 for b in c.encode()[:4]])) if c else 0.0 for c in completions])
  graphdef, params = init_model(cfg.model, 0)
  arms = {"uniform": {"rl.credit": "uniform"}, "dps": {"rl.credit": "dps"},
          "drop": {"rl.credit": "uniform", "credit.drop_agreed": True}, "oracle": dict(ca.ORACLE)}
  res = ca.run_credit_alignment(cfg, graphdef, params, task, task.train_examples(8, 0), arms=arms,
                                num_batches=2, log=lambda *a: None)
  oracle, uniform = res["arms"]["oracle"], res["arms"]["uniform"]
  assert oracle["oracle_cos"] == pytest.approx(1.0) and oracle["off_cell_share"] == 0.0
  # uniform credit puts |A| on every completion token, the off-cell ones included; dropping the
  # tokens a whole group agrees on (EOS padding) can only lower that share
  assert 0.0 < uniform["off_cell_share"] < 1.0 and 0.0 < uniform["off_cell_token_share"] < 1.0
  assert res["arms"]["drop"]["off_cell_share"] <= uniform["off_cell_share"]
  assert 0.0 < uniform["oracle_cos"] < 1.0
  assert res["batch_rollouts"] == 8 and "| oracle | +1.000 |" in ca.markdown(res)


def test_bad_arguments(monkeypatch):
  cfg = smoke()
  task = build_task(cfg)
  graphdef, params = init_model(cfg.model, 0)
  with pytest.raises(ConfigError, match="num_batches=0"):
    ca.run_credit_alignment(cfg, graphdef, params, task, [], num_batches=0)
  with pytest.raises(ConfigError, match=r"examples=0"):
    ca.run_credit_alignment(cfg, graphdef, params, task, [], num_batches=1)
  monkeypatch.setattr(task, "has_token_rewards", False)
  with pytest.raises(ConfigError, match="task.name"):
    ca.run_credit_alignment(cfg, graphdef, params, task, [], num_batches=1)
