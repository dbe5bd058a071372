"""DelTA: Discriminative Token Credit Assignment (Zhang, Wu & Lin 2026, arXiv 2605.21467), ported
from autoregressive RLVR to masked diffusion.

DelTA reads a policy-gradient update as a linear discriminator over token-gradient vectors and
reweights tokens so that the positive- and negative-advantage centroids become more contrastive.
The last-layer token-gradient proxy is ``v_i = (1 − p_i) h_i``: ``h_i`` the final hidden state the
token was predicted from, ``p_i`` the probability of the token there. In a dLLM the token is
predicted at its commit step, so both come from the rollout's own records (``commit_hidden``,
``commit_conf``): no extra forward pass.

With ``A_b`` the sequence advantage and ``m`` the completion mask:

1. centroids ``c+ = Σ m A⁺ v / Σ m A⁺`` and ``c− = Σ m A⁻ v / Σ m A⁻`` (A⁺ = max(A, 0),
   A⁻ = max(−A, 0));
2. margin of token i: ``μ_i = sign(A_b) · cos(v_i, c+ − c−)`` — how characteristic the token is of
   its own side;
3. one soft refinement: recompute the centroids with every token's weight multiplied by its soft
   assignment ``σ(μ_i / γ)``, then the margins again;
4. ``w_i = λmin + (λmax − λmin) σ(μ_i / γ)``, then scaled to mean 1 over the valid tokens of the
   batch that carry a non-zero advantage; tokens of zero-advantage sequences get 1 (their gradient is
   zero whatever the weight).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from daca_jax.credit.base import CreditInputs, CreditOutput, register_credit
from daca_jax.contracts import Trajectory, check_shape
from daca_jax.types import DeltaConfig, RolloutConfig

_EPS = 1e-8


def _centroids(v: jax.Array, pos_w: jax.Array, neg_w: jax.Array) -> jax.Array:
  """c+ − c−: float32 [D] from token features v [B, L, D] and side weights [B, L]."""
  c_pos = jnp.einsum("bl,bld->d", pos_w, v) / jnp.maximum(jnp.sum(pos_w), _EPS)
  c_neg = jnp.einsum("bl,bld->d", neg_w, v) / jnp.maximum(jnp.sum(neg_w), _EPS)
  return c_pos - c_neg


def _margins(v: jax.Array, direction: jax.Array, side: jax.Array) -> jax.Array:
  """``side · cos(v, direction)`` per token: float32 [B, L] (0 where either vector is 0)."""
  dot = jnp.einsum("bld,d->bl", v, direction)
  norm = jnp.linalg.norm(v, axis=-1) * jnp.linalg.norm(direction)
  return side * jnp.where(norm > _EPS, dot / jnp.maximum(norm, _EPS), 0.0)


def delta_weights(hidden: jax.Array, prob: jax.Array, advantages: jax.Array, mask: jax.Array,
                  delta: DeltaConfig) -> tuple[jax.Array, jax.Array]:
  """DelTA token weights from features.

  Args:
    hidden: [B, L, D] hidden state each token was predicted from.
    prob: float32 [B, L] probability of the token there.
    advantages: float32 [B] sequence advantages.
    mask: float32 [B, L] valid tokens.
    delta: DelTA's options (``credit.delta``): ``lambda_min``, ``lambda_max``, ``gamma``.
  Returns:
    (weights float32 [B, L], margins float32 [B, L] after the refinement).
  Raises:
    ShapeError: ``hidden`` not ``[B, L, D]``, ``prob`` / ``mask`` not ``[B, L]`` or ``advantages``
      not ``[B]`` (a ``[B, 1]`` advantage would broadcast to ``[B, B, L]``).
  """
  b, length, _ = check_shape("hidden", hidden, ("B", "L", "D"), "[B, L, D] token features")
  check_shape("prob", prob, (b, length), "[B, L] like hidden's rows")
  check_shape("mask", mask, (b, length), "[B, L] like hidden's rows")
  check_shape("advantages", advantages, (b,), "[B]: one advantage per sequence")
  v = (1.0 - prob)[..., None] * hidden.astype(jnp.float32)  # [B, L, D]
  a = advantages.astype(jnp.float32)[:, None]
  pos_w = jnp.maximum(a, 0.0) * mask
  neg_w = jnp.maximum(-a, 0.0) * mask
  side = jnp.sign(a) * jnp.ones_like(mask)
  margin = _margins(v, _centroids(v, pos_w, neg_w), side)
  soft = jax.nn.sigmoid(margin / delta.gamma)
  margin = _margins(v, _centroids(v, pos_w * soft, neg_w * soft), side)
  lam = delta.lambda_min + (delta.lambda_max - delta.lambda_min) * jax.nn.sigmoid(
      margin / delta.gamma)
  active = mask * (side != 0)
  scale = jnp.sum(active) / jnp.maximum(jnp.sum(lam * active), _EPS)
  w = jnp.where(active > 0, lam * scale, mask)
  return w, margin * active


def delta_records() -> frozenset[str]:
  return frozenset({"commit_hidden"})


@register_credit("delta", records=delta_records, needs_advantages=True)
def delta_credit(traj: Trajectory, rollout_cfg: RolloutConfig, inputs: CreditInputs, *,
                 delta: DeltaConfig = DeltaConfig()) -> CreditOutput:
  """DelTA weights from the rollout's ``commit_hidden`` / ``commit_conf`` and ``inputs.advantages``.

  Returns:
    CreditOutput with weights float32 [B, L] (mean 1 over valid tokens with non-zero advantage) and
    metric ``delta_margin_mean`` (mean refined margin of those tokens).
  Raises:
    ValueError: the trajectory has no ``commit_hidden`` record.
  """
  del rollout_cfg
  if traj.commit_hidden is None:
    raise ValueError("credit 'delta' needs trajectory.commit_hidden: run the rollout with "
                     "record_commit_hidden=True and a logits_fn that returns (logits, hidden)")
  mask = traj.completion_mask
  w, margin = delta_weights(traj.commit_hidden, traj.commit_conf, inputs.advantages, mask, delta)
  n_active = jnp.sum(mask * (inputs.advantages[:, None] != 0))
  return CreditOutput(weights=w, metrics={"delta_margin_mean": jnp.sum(margin) / jnp.maximum(n_active, 1.0)})
