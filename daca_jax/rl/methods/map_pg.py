"""Mask-Aware Policy Gradient (MAP, COLM 2026; Haran71/mask-aware-policy-gradients): separate
GSPO-style sequence ratios for the tokens and for their unmasking positions.

Reads the ``stepmerge`` estimator's two contexts (:mod:`daca_jax.likelihood.stepmerge`: ``logp[:, :L]``
token log-probs, ``logp[:, L:]`` position log-probs, both masked to the sampled segments). Per
sequence b and each kind k ∈ {token, position}, as ``map/policy_losses.py`` ``_gspo`` (and
``_gspo_partial`` with the sampled-segment mask):

    s_bk = exp( Σ_i m_bi w_bi (logp_bki − logp_old_bki) / max(Σ_i m_bi, 1) )
    J_k  = mean_b min( s_bk A_b, clip(s_bk, 1 − ε_low, 1 + ε_high) A_b )

and ``loss = −J_token − λ J_position + β · k3-KL`` over the token targets (``map/trainer.py``
``compute_loss``: ``loss = policy_loss + position_likelihood_lambda * pos_policy_loss + beta * kl``).
ε_low = ``rl.clip_eps``, ε_high = ``rl.map.clip_eps_high`` (0: ε_low), λ = ``rl.map.position_weight``;
MAP's recipe gives both losses the same ε (3e-4 / 4e-4), which this objective assumes. Credit weights
``w`` (mean 1 over valid tokens) weigh each token's log-ratio in both means, as ``gspo`` does.
MAP divides by the rows with a valid completion token; every row has one (the completion mask
includes the first EOS), so that is the mean over rows.
"""
from __future__ import annotations

import dataclasses
import jax
import jax.numpy as jnp

from daca_jax.contracts import PolicyBatch
from daca_jax.errors import ConfigError
from daca_jax.rl.methods.base import Aux, JobConfig, LossOptions, Method, clipped_surrogate, k3_kl, objective, sequence_advantages_only, token_mean
from daca_jax.config.checks import _check_fields, _non_negative



@dataclasses.dataclass(frozen=True)
class MAPConfig:
  """MAP's options (``rl.objective="map"``, :mod:`daca_jax.rl.methods.map_pg`; Haran71/mask-aware-policy-gradients
  ``map/configs/gsm8k.yaml``).

  Attributes:
    clip_eps_high: upper clip 1 + ε_high of MAP's sequence-level ratios (0: ``rl.clip_eps``; the lower clip
      is always 1 − ``rl.clip_eps``; MAP: ``clip_eps_high`` 4e-4).
    position_weight: λ of MAP's position loss (``position_likelihood_lambda``, 1.0).
  """

  clip_eps_high: float = 0.0
  position_weight: float = 1.0

  def validate(self, prefix: str = "rl.map") -> "MAPConfig":
    _check_fields(prefix, self)
    _non_negative(prefix, self, "clip_eps_high", "position_weight")
    return self


def gspo_terms(logp: jax.Array, old: jax.Array, mask: jax.Array, weights: jax.Array, advantages: jax.Array,
               clip_low: float, clip_high: float) -> tuple[jax.Array, jax.Array, jax.Array]:
  """MAP's GSPO surrogate per row: (surrogate float32 [B] to maximise, ratio [B], clipped bool [B])."""
  n = jnp.maximum(jnp.sum(mask, -1), 1.0)
  ratio = jnp.exp(jnp.sum(mask * weights * (logp - old), -1) / n)
  surrogate, binding = clipped_surrogate(ratio, advantages, clip_low, clip_high)
  return surrogate, ratio, binding


@objective("map")
def map_loss(logp: jax.Array, batch: PolicyBatch, *, clip_eps: float = LossOptions.clip_eps,
             beta: float = LossOptions.beta, map: MAPConfig = MAPConfig()) -> tuple[jax.Array, Aux]:  # noqa: A002
  """MAP's loss (module docstring) on the token | position log-probs of ``stepmerge``.

  Args:
    logp: float32 [B, 2L] token then position log-probs (differentiable), or [B, L] token log-probs
      alone (``num_states`` = 1: MAP's token loss without the position term).
    batch: stop-gradient fields, ``num_states`` = 2 (or 1).
  Returns:
    (scalar loss, aux with "pg_loss", "position_loss", "kl", "clip_frac", "ratio_mean",
    "position_ratio_mean").
  Raises:
    ValueError: ``batch.num_states`` not 1 or 2, or per-token advantages.
  """
  sequence_advantages_only(batch, "map")
  if batch.num_states not in (1, 2):
    raise ValueError("objective 'map' reads the token | position log-probs of rl.likelihood='stepmerge' "
                     f"(S = 2 contexts, or 1 without the position term), got S = {batch.num_states}")
  kinds = batch.num_states
  length = logp.shape[1] // kinds
  high = map.clip_eps_high or clip_eps
  half = lambda x, k: x[:, k * length:(k + 1) * length]
  parts = [gspo_terms(half(logp, k), half(batch.logp_old, k), half(batch.mask, k), half(batch.weights, k),
                      batch.advantages, clip_eps, high) for k in range(kinds)]
  pg = -jnp.mean(parts[0][0])
  pos = -jnp.mean(parts[-1][0]) if kinds == 2 else jnp.zeros(())
  kl = token_mean(k3_kl(half(logp, 0), half(batch.logp_ref, 0)), half(batch.mask, 0))
  aux = {"pg_loss": pg, "position_loss": pos, "kl": kl,
         "clip_frac": jnp.mean(parts[0][2].astype(jnp.float32)), "ratio_mean": jnp.mean(parts[0][1]),
         "position_ratio_mean": jnp.mean(parts[-1][1]) if kinds == 2 else jnp.ones(())}
  return pg + map.position_weight * pos + beta * kl, aux


def check_map(cfg: JobConfig) -> None:
  """Refuses MAP's pieces where they do not fit (one line, with the reason).

  Raises:
    ConfigError: ``map`` without ``stepmerge`` (its ratios are over StepMerge's segments); ``stepmerge``'s
      position term under
      another objective (it would mix the position log-probs into the token targets as if they were
      tokens); more segments than rollout steps.
  """
  rl, sm = cfg.rl, cfg.likelihood.stepmerge
  if rl.objective == "map" and rl.likelihood != "stepmerge":
    raise ConfigError("rl.likelihood", rl.likelihood, "'stepmerge' under rl.objective='map' (it reads StepMerge's "
                      "token and unmasking-position log-probs)")
  if rl.likelihood == "stepmerge" and sm.position and rl.objective != "map":
    raise ConfigError("likelihood.stepmerge.position", True, f"False with rl.objective={rl.objective!r} (the "
                      "position log-probs get their own ratio under 'map' only; without them stepmerge is a "
                      "token likelihood for any objective)")
  if rl.likelihood == "stepmerge" and sm.segments > cfg.rollout.steps:
    raise ConfigError("likelihood.stepmerge.segments", sm.segments,
                      f"<= rollout.steps={cfg.rollout.steps} (segments of at least one step)")


METHOD = Method(map_loss, check=check_map)
