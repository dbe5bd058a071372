"""The learning-rate schedules of make_optimizer: warmup, cosine decay, and no warmup at all."""
import math

import pytest

from daca_jax.rl.optim import make_optimizer

LR = 1e-3


@pytest.mark.parametrize("decay_steps", [0, 10])
def test_no_warmup_starts_at_the_peak(decay_steps):
  # A one-step warmup from 0 would spend the first update at learning rate 0.
  _, schedule = make_optimizer(LR, 0, 0.0, 1.0, decay_steps=decay_steps)
  assert float(schedule(0)) == pytest.approx(LR)


def test_cosine_without_warmup_matches_the_formula():
  _, schedule = make_optimizer(LR, 0, 0.0, 1.0, decay_steps=10)
  for t in (0, 3, 5, 10, 20):
    c = 0.5 * (1 + math.cos(math.pi * min(t, 10) / 10))
    assert float(schedule(t)) == pytest.approx(LR * (0.1 + 0.9 * c), rel=1e-5), t


def test_warmup_then_cosine():
  _, schedule = make_optimizer(LR, 4, 0.0, 1.0, decay_steps=10)
  assert float(schedule(0)) == 0.0
  assert float(schedule(2)) == pytest.approx(LR / 2)
  assert float(schedule(4)) == pytest.approx(LR)
  assert float(schedule(9)) == pytest.approx(LR * (0.1 + 0.9 * 0.5), rel=1e-5)
  assert float(schedule(14)) == pytest.approx(0.1 * LR, rel=1e-5)


def test_warmup_then_constant():
  _, schedule = make_optimizer(LR, 4, 0.0, 1.0)
  assert [float(schedule(t)) for t in (0, 1, 4, 100)] == pytest.approx([0.0, LR / 4, LR, LR])
