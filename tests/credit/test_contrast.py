"""Signed contrast credit (rl.credit="contrast") against a plain-Python oracle of its definition, and the
case it exists for: a wrong (least confident) token of a good rollout gets negative credit."""
import dataclasses
import itertools
import math

import jax.numpy as jnp
import numpy as np
import pytest

from daca_jax.credit import CREDIT, CreditInputs, contrast_credit, dps_raw_scores
from daca_jax.diffusion import Trajectory
from daca_jax.errors import ConfigError
from daca_jax.config.credit import CreditConfig
from daca_jax.credit.contrast import ContrastConfig
from daca_jax.credit.dps import DPSConfig
from daca_jax.config.rollout import RolloutConfig

G = 2
# Two groups of G = 2 rollouts, L = 4; row 1's last token is after its EOS (mask 0).
CONF = [[0.9, 0.8, 0.2, 0.7], [0.6, 0.5, 0.9, 0.1], [0.3, 0.3, 0.3, 0.3], [0.4, 0.9, 0.5, 0.8]]
MASK = [[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1]]
TOKENS = [[5, 6, 7, 8], [5, 9, 7, 8], [1, 2, 3, 4], [1, 2, 0, 4]]
ADV = [0.5, -0.5, 1.0, -1.0]


def _traj(conf=CONF, mask=MASK, tokens=TOKENS, step_conf=None, commit_step=None):
  b, length = np.asarray(conf).shape
  return Trajectory(tokens=jnp.asarray(np.concatenate([np.zeros((b, 1), int), tokens], 1), jnp.int32),
                    completion_mask=jnp.asarray(mask, jnp.float32),
                    commit_step=jnp.asarray(np.zeros((b, length)) if commit_step is None else commit_step, jnp.int32),
                    commit_conf=jnp.asarray(conf, jnp.float32),
                    step_conf=None if step_conf is None else jnp.asarray(step_conf, jnp.float32),
                    prompt_len=1, num_model_calls=1 if step_conf is None else len(step_conf))


def _oracle(signal, mask, tokens, adv, alpha, baseline, base):
  """The module docstring's definition, one token at a time."""
  b, length = len(signal), len(signal[0])
  u = [[0.0] * length for _ in range(b)]
  for r in range(b):
    valid = [i for i in range(length) if mask[r][i]]
    for i in valid:
      if baseline == "sequence":
        centre = sum(signal[r][j] for j in valid) / len(valid)
      else:
        mates = [q for q in range(r - r % G, r - r % G + G) if mask[q][i]]
        centre = sum(signal[q][i] for q in mates) / len(mates)
      u[r][i] = signal[r][i] - centre
  out = [[0.0] * length for _ in range(b)]
  for r in range(b):
    valid = [i for i in range(length) if mask[r][i]]
    mean = sum(u[r][i] for i in valid) / len(valid)
    std = math.sqrt(sum((u[r][i] - mean) ** 2 for i in valid) / len(valid))
    for i in valid:
      z = u[r][i] / std if std > 1e-8 else 0.0
      if base == "sequence":
        b_ri = adv[r]
      else:  # mean advantage of the group's rollouts with the same token at i
        same = [q for q in range(r - r % G, r - r % G + G) if mask[q][i] and tokens[q][i] == tokens[r][i]]
        b_ri = sum(adv[q] for q in same) / len(same)
      out[r][i] = b_ri + alpha * abs(adv[r]) * z
  return np.array(out)


@pytest.mark.parametrize("baseline,base", list(itertools.product(("sequence", "position"), ("sequence", "position_value"))))
def test_contrast_equals_its_definition_token_by_token(baseline, base):
  cfg = ContrastConfig(alpha=1.5, baseline=baseline, base=base)
  rcfg = RolloutConfig(gen_length=4, block_length=4, steps=1)
  out = contrast_credit(_traj(), rcfg, CreditInputs(advantages=jnp.asarray(ADV), group_size=G), contrast=cfg)
  want = _oracle(CONF, MASK, TOKENS, ADV, 1.5, baseline, base)
  np.testing.assert_allclose(np.asarray(out.token_advantages), want, rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(np.asarray(out.weights), MASK)
  assert out.token_advantages[1, 3] == 0  # after EOS: nothing
  # row 2's signal is constant: its sequence-baseline contrast is 0, the row keeps its advantage
  if baseline == "sequence" and base == "sequence":
    np.testing.assert_allclose(np.asarray(out.token_advantages[2]), 1.0)
    # the contrast term sums to zero over each row: the row's total credit is L_valid * A
    np.testing.assert_allclose(np.asarray(out.token_advantages).sum(1), np.asarray(MASK).sum(1) * np.asarray(ADV),
                               atol=1e-5)


def test_a_wrong_token_of_a_good_rollout_gets_negative_credit():
  # One group: rollout 0 is the better one (A > 0) but committed position 2 with probability 0.1.
  conf = [[0.9, 0.85, 0.1, 0.8], [0.7, 0.6, 0.65, 0.75]]
  inputs = CreditInputs(advantages=jnp.asarray([0.4, -0.4]), group_size=2)
  rcfg = RolloutConfig(gen_length=4, block_length=4, steps=1)
  traj = _traj(conf, [[1] * 4] * 2, [[1, 2, 3, 4], [1, 2, 0, 4]])
  out = contrast_credit(traj, rcfg, inputs, contrast=ContrastConfig(alpha=1.0))
  e = np.asarray(out.token_advantages)
  assert e[0, 2] < 0 < min(e[0, 0], e[0, 1], e[0, 3])  # signed: the doubtful token is pushed down
  # multiplicative credit cannot do this: uniform and DPS keep A's sign on every token
  assert float(out.metrics["negative_share"]) > 0
  at_zero = contrast_credit(traj, rcfg, inputs, contrast=ContrastConfig(alpha=0.0))
  np.testing.assert_allclose(np.asarray(at_zero.token_advantages), [[0.4] * 4, [-0.4] * 4], atol=1e-6)
  assert float(at_zero.metrics["negative_share"]) == 0


def test_dps_signal_reads_the_dps_raw_scores_and_declares_its_record():
  step_conf = [[[0.5, 0.3, 0.6, 0.2]] * 2, [[0.0, 0.7, 0.0, 0.4]] * 2]  # [S=2, B=2, L=4]
  commit = [[0, 1, 0, 1], [0, 1, 0, 1]]
  traj = _traj([[0.5] * 4] * 2, [[1] * 4] * 2, [[1, 2, 3, 4]] * 2, step_conf, commit)
  rcfg = RolloutConfig(gen_length=4, block_length=4, steps=2)
  inputs = CreditInputs(advantages=jnp.asarray([1.0, -1.0]), group_size=2)
  out = contrast_credit(traj, rcfg, inputs, contrast=ContrastConfig(signal="dps", alpha=0.5))
  raw = np.asarray(dps_raw_scores(traj, DPSConfig(), rcfg)).tolist()
  want = _oracle(raw, [[1] * 4] * 2, [[1, 2, 3, 4]] * 2, [1.0, -1.0], 0.5, "sequence", "sequence")
  np.testing.assert_allclose(np.asarray(out.token_advantages), want, rtol=1e-5, atol=1e-6)
  assigner = CREDIT.get("contrast")
  assert assigner.token_level and assigner.needs_advantages
  assert assigner.records(CreditConfig(contrast=ContrastConfig(signal="dps"))) == {"step_conf"}
  assert assigner.records(CreditConfig()) == frozenset()
  with pytest.raises(ValueError, match="step_conf"):
    contrast_credit(dataclasses.replace(traj, step_conf=None), rcfg, inputs, contrast=ContrastConfig(signal="dps"))


@pytest.mark.parametrize("field,value", [("signal", "entropy"), ("baseline", "group"), ("base", "dps"), ("alpha", -1.0)])
def test_bad_options_name_the_field(field, value):
  with pytest.raises(ConfigError, match=rf"credit\.contrast\.{field}"):
    CreditConfig(contrast=ContrastConfig(**{field: value})).validate()
