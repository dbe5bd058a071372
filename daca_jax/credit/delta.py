"""DelTA: Discriminative Token Credit Assignment (Zhang, Wu & Lin 2026, arXiv 2605.21467), ported
from autoregressive RLVR to masked diffusion.

DelTA reads a policy-gradient update as a linear discriminator over token-gradient vectors and
reweights tokens so that the positive- and negative-advantage centroids become more contrastive.
The last-layer token-gradient proxy is ``v_i = (1 − p_i) h_i``: ``h_i`` the final hidden state the
token was predicted from, ``p_i`` the probability of the token there. In a dLLM the token is
predicted at its commit step, so both come from the rollout's own records (``commit_hidden``,
``commit_conf``): no extra forward pass.

With ``A_b`` the sequence advantage, ``m`` the completion mask and ``s_b = sign(A_b)``, as in the
reference implementation (RUCBM/DelTA, ``compute_log_prob_h``, ``K = 1``, unit diagonal scale):

1. centroids ``μ+ = Σ m A⁺ v / Σ m A⁺`` and ``μ− = Σ m A⁻ v / Σ m A⁻`` (A⁺ = max(A, 0),
   A⁻ = max(−A, 0));
2. margin of token i: ``M_i = s_b (‖v_i − μ−‖² − ‖v_i − μ+‖²)`` — the nearest-centroid
   discriminator (weight μ+ − μ−, bias at the midpoint), signed by the token's own side. Both sides'
   advantage-weighted mean margins equal ``‖μ+ − μ−‖²``, and adding one vector to every ``v`` (a
   pattern all rollouts share) changes no margin;
3. temperature per side: ``γ± = gamma · std(M)`` over that side's valid tokens;
4. one soft refinement: the centroids again, each token's weight multiplied by ``σ(M_i / γ±)``,
   then the margins again (with the same γ±);
5. ``w_i = λmin + (λmax − λmin) σ(M_i / γ±)`` on tokens of sequences with a non-zero advantage,
   ``λmin`` on the others (their gradient is zero whatever the weight), then all valid tokens'
   weights scaled to mean 1.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from daca_jax.credit.base import CreditInputs, CreditOutput, credit_assigner
from daca_jax.contracts import Trajectory, check_shape
from daca_jax.config.rollout import RolloutConfig
from daca_jax.config.checks import _check_fields
from daca_jax.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class DeltaConfig:
  """DelTA (``rl.credit="delta"``, :mod:`daca_jax.credit.delta`).

  Attributes:
    lambda_min: λmin, weight of the least side-specific token.
    lambda_max: λmax, weight of the most side-specific token.
    gamma: γ, temperature of the sigmoid over the discriminator margins, in units of each side's
      margin std (the reference implementation's value: 1).
  """

  lambda_min: float = 0.8
  lambda_max: float = 1.2
  gamma: float = 1.0

  def validate(self, prefix: str = "credit.delta") -> "DeltaConfig":
    _check_fields(prefix, self)
    if not 0.0 < self.lambda_min <= 1.0 <= self.lambda_max:
      raise ConfigError(f"{prefix}.lambda_min", self.lambda_min,
                        f"0 < lambda_min <= 1 <= lambda_max={self.lambda_max}")
    if not 0 < self.gamma < float("inf"):
      raise ConfigError(f"{prefix}.gamma", self.gamma, "a finite number > 0")
    return self


_EPS = 1e-8


def _centroids(v: jax.Array, pos_w: jax.Array, neg_w: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(μ+, μ−): float32 [D] each, weighted means of token features v [B, L, D] (weights [B, L])."""
  mu_pos = jnp.einsum("bl,bld->d", pos_w, v) / jnp.maximum(jnp.sum(pos_w), _EPS)
  mu_neg = jnp.einsum("bl,bld->d", neg_w, v) / jnp.maximum(jnp.sum(neg_w), _EPS)
  return mu_pos, mu_neg


def _margins(v: jax.Array, mu_pos: jax.Array, mu_neg: jax.Array, side: jax.Array) -> jax.Array:
  """``side · (‖v − μ−‖² − ‖v − μ+‖²)`` per token: float32 [B, L].

  Computed as ``2 (v − (μ+ + μ−)/2)·(μ+ − μ−)``: no [B, L, D] difference is materialised, and the
  bias is taken as ``(μ+ + μ−)·(μ+ − μ−)`` rather than ``‖μ+‖² − ‖μ−‖²``, which would cancel two large
  float32 numbers when every feature shares a large component.
  """
  direction = mu_pos - mu_neg
  return side * (2.0 * jnp.einsum("bld,d->bl", v, direction) - jnp.dot(mu_pos + mu_neg, direction))


def _side_std(margin: jax.Array, on_side: jax.Array) -> jax.Array:
  """Population std of ``margin`` over the tokens where ``on_side`` [B, L] is 1 (≥ sqrt(eps))."""
  n = jnp.maximum(jnp.sum(on_side), 1.0)
  mean = jnp.sum(margin * on_side) / n
  var = jnp.sum(margin ** 2 * on_side) / n - mean ** 2
  return jnp.sqrt(jnp.maximum(var, _EPS))


def delta_weights(hidden: jax.Array, prob: jax.Array, advantages: jax.Array, mask: jax.Array,
                  delta: DeltaConfig) -> tuple[jax.Array, jax.Array]:
  """DelTA token weights from features.

  Args:
    hidden: [B, L, D] hidden state each token was predicted from.
    prob: float32 [B, L] probability of the token there.
    advantages: float32 [B] sequence advantages.
    mask: float32 [B, L] valid tokens.
    delta: DelTA's options (``credit.delta``): ``lambda_min``, ``lambda_max``, ``gamma`` (the sigmoid
      temperature in units of each side's margin std; the reference uses 1).
  Returns:
    (weights float32 [B, L]: mean 1 over the valid tokens, 0 elsewhere; margins float32 [B, L] after the
    refinement, 0 on tokens of zero-advantage sequences and invalid tokens).
  Raises:
    ShapeError: ``hidden`` not ``[B, L, D]``, ``prob`` / ``mask`` not ``[B, L]`` or ``advantages``
      not ``[B]`` (a ``[B, 1]`` advantage would broadcast to ``[B, B, L]``).
  """
  b, length, _ = check_shape("hidden", hidden, ("B", "L", "D"), "[B, L, D] token features")
  check_shape("prob", prob, (b, length), "[B, L] like hidden's rows")
  check_shape("mask", mask, (b, length), "[B, L] like hidden's rows")
  check_shape("advantages", advantages, (b,), "[B]: one advantage per sequence")
  v = (1.0 - prob)[..., None] * hidden.astype(jnp.float32)  # [B, L, D]
  mask = mask.astype(jnp.float32)
  a = advantages.astype(jnp.float32)[:, None]  # [B, 1]
  pos = (a > 0) * mask  # [B, L] tokens of positive-advantage sequences
  neg = (a < 0) * mask
  side = jnp.sign(a) * mask
  pos_w, neg_w = jnp.maximum(a, 0.0) * mask, jnp.maximum(-a, 0.0) * mask
  margin = _margins(v, *_centroids(v, pos_w, neg_w), side)
  gamma = delta.gamma * (pos * _side_std(margin, pos) + neg * _side_std(margin, neg))
  gamma = jnp.where(pos + neg > 0, gamma, 1.0)  # [B, L]; 1 where unused (avoids 0/0)
  soft = jax.nn.sigmoid(margin / gamma)
  margin = _margins(v, *_centroids(v, pos_w * soft, neg_w * soft), side)
  lam = delta.lambda_min + (delta.lambda_max - delta.lambda_min) * jax.nn.sigmoid(margin / gamma)
  lam = jnp.where(pos + neg > 0, lam, delta.lambda_min) * mask
  w = lam * (jnp.sum(mask) / jnp.maximum(jnp.sum(lam), _EPS))
  return w, margin * (pos + neg)


def delta_records() -> frozenset[str]:
  return frozenset({"commit_hidden"})


@credit_assigner("delta", records=delta_records, needs_advantages=True)
def delta_credit(traj: Trajectory, rollout_cfg: RolloutConfig, inputs: CreditInputs, *,
                 delta: DeltaConfig = DeltaConfig()) -> CreditOutput:
  """DelTA weights from the rollout's ``commit_hidden`` / ``commit_conf`` and ``inputs.advantages``.

  Returns:
    CreditOutput with weights float32 [B, L] (mean 1 over valid tokens) and metric
    ``delta_margin_mean`` (mean refined margin of the tokens of non-zero-advantage sequences).
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
