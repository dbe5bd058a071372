"""Sequence advantages from rewards (registry ``ADVANTAGES``, config field ``rl.advantage``).

Every estimator has the signature ``fn(rewards [B], group_size, kl_seq) -> advantages [B]`` and is
computed once per rollout batch (per inner update for the one that reads the policy's KL, whose
value depends on that update's likelihood masks). ``rl.advantage=""`` (the default) picks the
objective's own: REINFORCE++'s for ``reinforce_pp``, else d1's group mean (the group std with
``rl.normalize_adv_std=True``); see :func:`advantage_name`.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp

from daca_jax.registry import Registry
from daca_jax.rl.methods import OBJECTIVES, method


@dataclasses.dataclass(frozen=True)
class AdvantageEstimator:
  """One way of turning rewards into sequence advantages.

  Attributes:
    fn: ``(rewards float32 [B], group_size, kl_seq float32 [B] | None, beta) -> float32 [B]``.
    needs_kl: ``fn`` reads ``kl_seq``, the rollout policy's per-sequence KL to the reference,
      ``Σ_i m (logp_old − logp_ref)``; the learner then computes the advantages inside every inner
      update, where those log-probs exist.
  """

  fn: Callable[[jax.Array, int, jax.Array | None, float], jax.Array]
  needs_kl: bool = False

  def __call__(self, rewards: jax.Array, group_size: int, kl_seq: jax.Array | None = None,
               beta: float = 0.0) -> jax.Array:
    if self.needs_kl and kl_seq is None:
      raise ValueError("this advantage estimator needs kl_seq, the per-sequence KL of the rollout policy")
    return self.fn(rewards, group_size, kl_seq, beta)


ADVANTAGES: Registry[AdvantageEstimator] = Registry("advantage estimator", "rl.advantage")


def register_advantage(name: str, *, needs_kl: bool = False) -> Callable[[Callable[..., jax.Array]],
                                                                          Callable[..., jax.Array]]:
  """Decorator: registers ``fn(rewards, group_size, kl_seq, beta)`` as :class:`AdvantageEstimator`
  ``name`` in :data:`ADVANTAGES` (ValueError on a duplicate name); returns ``fn`` unchanged."""

  def deco(fn):
    ADVANTAGES.register(name)(AdvantageEstimator(fn, needs_kl))
    return fn

  return deco


def _groups(rewards: jax.Array, group_size: int) -> jax.Array:
  b = rewards.shape[0]
  if b % group_size:
    raise ValueError(f"batch size {b} is not a multiple of rl.group_size={group_size}")
  return rewards.astype(jnp.float32).reshape(b // group_size, group_size)


def group_advantages(rewards: jax.Array, group_size: int, normalize_std: bool = False,
                     eps: float = 1e-4) -> jax.Array:
  """``A = r − mean_group(r)`` (optionally ``/ (std_group(r) + eps)``).

  d1's diffu-GRPO trainer subtracts the group mean and does not divide by the std; GRPO (Shao et
  al. 2024) and TRL's ``scale_rewards`` divide by ``std + 1e-4``, TRL with the unbiased (n − 1)
  std, this function with the population std.

  Args:
    rewards: float32 [B] with B = num_prompts * group_size, the G completions of a prompt adjacent.
    group_size: G (static).
    normalize_std: divide by the (population) std of the group.
  Returns:
    float32 [B]; zero-mean within every group.
  Raises:
    ValueError: B is not a multiple of G.
  """
  r = _groups(rewards, group_size)
  adv = r - jnp.mean(r, axis=1, keepdims=True)
  if normalize_std:
    adv = adv / (jnp.std(r, axis=1, keepdims=True) + eps)
  return adv.reshape(rewards.shape[0])


def batch_whitened(x: jax.Array, eps: float) -> jax.Array:
  """``(x − mean_batch x) / (std_batch x + eps)`` over the whole (global) batch, float32 [B]."""
  x = x.astype(jnp.float32)
  return (x - jnp.mean(x)) / (jnp.std(x) + eps)


@register_advantage("group_mean")
def _group_mean(rewards, group_size, kl_seq, beta):
  del kl_seq, beta
  return group_advantages(rewards, group_size)


@register_advantage("group_std")
def _group_std(rewards, group_size, kl_seq, beta):
  del kl_seq, beta
  return group_advantages(rewards, group_size, normalize_std=True)


@register_advantage("batch_whiten")
def _batch_whiten(rewards, group_size, kl_seq, beta):
  del kl_seq, beta
  _groups(rewards, group_size)  # same batch-shape check as the group estimators
  return batch_whitened(rewards, 1e-8)


def reinforce_pp_advantages(rewards: jax.Array, kl_seq: jax.Array, beta: float) -> jax.Array:
  """REINFORCE++ (Hu 2025): KL folded into the reward, then global-batch normalisation.

  ``r̃_b = r_b − β·kl_b`` with ``kl_b = Σ_i m (logp_old − logp_ref)`` (the rollout policy's k1 KL),
  ``A_b = (r̃_b − mean_batch r̃) / (std_batch r̃ + 1e-8)``; no group baseline, no critic. Held
  constant in the update (stop-gradient).

  Args:
    rewards: float32 [B]; kl_seq: float32 [B]; beta: the KL coefficient ``rl.beta``.
  Returns:
    float32 [B].
  """
  shaped = jax.lax.stop_gradient(rewards - beta * kl_seq)
  return (shaped - jnp.mean(shaped)) / (jnp.std(shaped) + 1e-8)


@register_advantage("reinforce_pp", needs_kl=True)
def _reinforce_pp(rewards, group_size, kl_seq, beta):
  del group_size
  return reinforce_pp_advantages(rewards, kl_seq, beta)


def zero_std_group_fraction(rewards: jax.Array, group_size: int) -> jax.Array:
  """Fraction of groups whose rewards are all equal (they carry no GRPO signal). float32 scalar."""
  r = rewards.reshape(-1, group_size)
  return jnp.mean((jnp.max(r, 1) - jnp.min(r, 1) <= 1e-8).astype(jnp.float32))


def rloo_advantages(rewards: jax.Array, group_size: int) -> jax.Array:
  """RLOO (leave-one-out) advantages: ``A_g = r_g − (Σ_{h≠g} r_h) / (G − 1)`` within each group,
  ``= G/(G−1) · (r_g − mean_group r)``. ESPO's (ML-GSAI/ESPO ``espo/espo_trainer.py``
  ``_generate_and_score_completions``, ``leave_one_out = True``; its recipes set ``scale_rewards: false``,
  so no std division).

  Args:
    rewards: float32 [B], the G completions of a prompt adjacent; group_size: G >= 2 (static).
  Returns:
    float32 [B]; zero-mean within every group.
  Raises:
    ValueError: B is not a multiple of G, or G < 2 (no other completion to leave in).
  """
  if group_size < 2:
    raise ValueError(f"rl.advantage='rloo' needs rl.group_size >= 2, got {group_size}")
  r = _groups(rewards, group_size)
  baseline = (jnp.sum(r, axis=1, keepdims=True) - r) / (group_size - 1)
  return (r - baseline).reshape(rewards.shape[0])


@register_advantage("rloo")
def _rloo(rewards, group_size, kl_seq, beta):
  del kl_seq, beta
  return rloo_advantages(rewards, group_size)


def advantage_name(objective: str, advantage: str = "", normalize_adv_std: bool = False) -> str:
  """The advantage estimator a configuration uses.

  Args:
    objective: ``rl.objective``.
    advantage: ``rl.advantage``; "" means the objective's own (``Method.advantage``, else
      ``group_std`` when ``normalize_adv_std`` and ``group_mean`` otherwise).
    normalize_adv_std: ``rl.normalize_adv_std``.
  Returns:
    A name registered in :data:`ADVANTAGES`.
  """
  if advantage:
    return advantage
  own = method(objective).advantage if objective in OBJECTIVES.names() else ""
  if own:
    return own
  return "group_std" if normalize_adv_std else "group_mean"
