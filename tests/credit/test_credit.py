"""DPS and uniform credit on hand-built trajectories with hand-computed weights."""
import jax.numpy as jnp
import numpy as np
import pytest

from daca_jax.credit import CREDIT, dps_raw_scores, step_progress, zscore_weights
from daca_jax.diffusion import Trajectory
from daca_jax.config.credit import CreditConfig
from daca_jax.credit.dps import DPSConfig
from daca_jax.config.rollout import RolloutConfig


def _traj(step_conf, commit_step, mask):
  b, length = np.asarray(commit_step).shape
  return Trajectory(tokens=jnp.zeros((b, 2 + length), jnp.int32),
                    completion_mask=jnp.asarray(mask, jnp.float32),
                    commit_step=jnp.asarray(commit_step, jnp.int32),
                    commit_conf=jnp.zeros((b, length)), step_conf=jnp.asarray(step_conf, jnp.float32),
                    prompt_len=2, num_model_calls=len(step_conf))


def test_dps_two_steps_hand_computed():
  # L=4, S=2: step 0 commits positions 0 and 2, step 1 commits 1 and 3.
  conf = [[[0.5, 0.3, 0.6, 0.2]], [[0.0, 0.7, 0.0, 0.4]]]
  traj = _traj(conf, [[0, 1, 0, 1]], [[1, 1, 1, 1]])
  rcfg = RolloutConfig(gen_length=4, block_length=4, steps=2)
  # Δ_0 = mean(0.7-0.3, 0.4-0.2) = 0.3 ; Δ_1 = 0 (nothing left)
  np.testing.assert_allclose(step_progress(traj.step_conf, traj.commit_step, rcfg), [[0.3], [0.0]], atol=1e-6)
  np.testing.assert_allclose(dps_raw_scores(traj, DPSConfig(), rcfg), [[0.3, 0.0, 0.3, 0.0]], atol=1e-6)
  # z = [1, -1, 1, -1]; w = clip(1 + 0.5 z, 0.5, 2) = [1.5, 0.5, 1.5, 0.5]; mean already 1.
  w = CREDIT.get("dps")(traj, CreditConfig(), rcfg)
  np.testing.assert_allclose(w, [[1.5, 0.5, 1.5, 0.5]], atol=1e-6)


def test_dps_three_steps_with_mask_and_clipping():
  # L=3, S=3, one token per step in order 2, 0, 1; the last position is after EOS (mask 0).
  conf = [[[0.2, 0.1, 0.9]],   # x_0: all masked
          [[0.6, 0.3, 0.0]],   # x_1: position 2 committed
          [[0.0, 0.2, 0.0]]]   # x_2: positions 2, 0 committed
  traj = _traj(conf, [[1, 2, 0]], [[1, 1, 0]])
  rcfg = RolloutConfig(gen_length=3, block_length=3, steps=3)
  # Δ_0 = mean(0.6-0.2, 0.3-0.1) = 0.3 ; Δ_1 = (0.2-0.3) = -0.1 ; Δ_2 = 0
  np.testing.assert_allclose(step_progress(traj.step_conf, traj.commit_step, rcfg)[:, 0], [0.3, -0.1, 0.0],
                             atol=1e-6)
  # raw d = [Δ_1, Δ_2, Δ_0] = [-0.1, 0, 0.3]; valid = first two -> mean -0.05, std 0.05 -> z = [-1, 1]
  cfg = CreditConfig(dps=DPSConfig(alpha=3.0, w_min=0.5, w_max=2.0))
  # 1 + 3z = [-2, 4] -> clip [0.5, 2.0] -> mean 1.25 -> [0.4, 1.6]; invalid token 0
  w = CREDIT.get("dps")(traj, cfg, rcfg)
  np.testing.assert_allclose(w, [[0.4, 1.6, 0.0]], atol=1e-6)


def test_dps_block_scope_and_self_term():
  # L=4, two blocks of 2, S=4 (one token per step): commit order 1, 0 | 3, 2.
  conf = [[[0.3, 0.5, 0.2, 0.1]],
          [[0.6, 0.0, 0.4, 0.3]],
          [[0.0, 0.0, 0.5, 0.7]],
          [[0.0, 0.0, 0.9, 0.0]]]
  traj = _traj(conf, [[1, 0, 3, 2]], [[1, 1, 1, 1]])
  rcfg = RolloutConfig(gen_length=4, block_length=2, steps=4)
  # scope=all: Δ_0 = mean(0.3, 0.2, 0.2)=0.7/3 ; Δ_1 = mean(0.1, 0.4) = 0.25 ; Δ_2 = 0.4 ; Δ_3 = 0
  np.testing.assert_allclose(step_progress(traj.step_conf, traj.commit_step, rcfg, "all")[:, 0],
                             [0.7 / 3, 0.25, 0.4, 0.0], atol=1e-6)
  # scope=block: Δ_0 = 0.3 (position 0 only) ; Δ_1 = 0 (block 0 done) ; Δ_2 = 0.4 ; Δ_3 = 0
  np.testing.assert_allclose(step_progress(traj.step_conf, traj.commit_step, rcfg, "block")[:, 0],
                             [0.3, 0.0, 0.4, 0.0], atol=1e-6)
  # self term λ=1 (blocks start at steps 0 and 2): pos0 0.6-0.3, pos1 0.5-0.5, pos2 0.9-0.5, pos3 0.7-0.7
  cfg = CreditConfig(dps=DPSConfig(scope="block", self_term=1.0))
  raw = dps_raw_scores(traj, cfg.dps, rcfg)
  np.testing.assert_allclose(raw, [[0.0 + 0.3, 0.3 + 0.0, 0.0 + 0.4, 0.4 + 0.0]], atol=1e-6)


def test_zscore_weights_mean_one_and_constant_rows():
  raw = jnp.array([[1.0, 2.0, 3.0, 4.0, 9.0], [5.0, 5.0, 5.0, 5.0, 5.0]])
  valid = jnp.array([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]], jnp.float32)
  w = np.asarray(zscore_weights(raw, valid, 0.5, 0.5, 2.0))
  x = np.array([1.0, 2.0, 3.0, 4.0])
  z = (x - x.mean()) / x.std()
  expect = np.clip(1 + 0.5 * z, 0.5, 2.0)
  np.testing.assert_allclose(w[0, :4], expect / expect.mean(), rtol=1e-6)
  assert w[0, 4] == 0
  np.testing.assert_allclose(w[1], [1, 1, 1, 0, 0])


def test_uniform_credit_is_completion_mask():
  traj = _traj(np.zeros((1, 1, 3)), [[0, 0, 0]], [[1, 1, 0]])
  np.testing.assert_array_equal(CREDIT.get("uniform")(traj, CreditConfig(), RolloutConfig(3, 3, 1)),
                                [[1, 1, 0]])
  assert CREDIT.get("dps").records(CreditConfig()) == {"step_conf"}
  assert CREDIT.get("dps").records(CreditConfig(dps=DPSConfig(signal="neg_entropy"))) == {"step_entropy"}
  assert CREDIT.get("uniform").records(CreditConfig()) == frozenset()


def test_dps_neg_entropy_signal_hand_computed():
  # Same layout as the two-step case, with entropies instead of confidences.
  ent = [[[1.0, 1.2, 0.8, 1.5]], [[0.0, 0.6, 0.0, 1.1]]]
  traj = _traj(np.zeros((2, 1, 4)), [[0, 1, 0, 1]], [[1, 1, 1, 1]]).replace(
      step_conf=None, step_entropy=jnp.asarray(ent, jnp.float32))
  rcfg = RolloutConfig(gen_length=4, block_length=4, steps=2)
  # Δ_0 = mean(-(0.6) + 1.2, -(1.1) + 1.5) = mean(0.6, 0.4) = 0.5 ; Δ_1 = 0
  raw = dps_raw_scores(traj, DPSConfig(signal="neg_entropy"), rcfg)
  np.testing.assert_allclose(raw, [[0.5, 0.0, 0.5, 0.0]], atol=1e-6)
  with pytest.raises(ValueError, match="step_entropy"):
    dps_raw_scores(traj.replace(step_entropy=None), DPSConfig(signal="neg_entropy"), rcfg)
