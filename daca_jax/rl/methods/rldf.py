"""RLDF, Reinforcement Learning from Denoising Feedback: diffu-GRPO's clipped token loss on the rollout's
rebuilt denoising states, with a clean-state clip."""
from __future__ import annotations

import dataclasses
import jax
import jax.numpy as jnp

from daca_jax.contracts import PolicyBatch
from daca_jax.rl.methods.base import Aux, LossOptions, Method, objective
from daca_jax.rl.methods.diffu_grpo import diffu_grpo_loss
from daca_jax.config.checks import _check_fields
from daca_jax.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class RLDFLossConfig:
  """RLDF's clean-state clip (``rl.objective="rldf"``, :mod:`daca_jax.rl.methods.rldf`).

  Attributes:
    tau: a (state, position) target whose probability under the rollout policy is below ``tau`` is
      dropped unless the position was committed at that state (0.6).
  """

  tau: float = 0.6

  def validate(self, prefix: str = "rl.rldf") -> "RLDFLossConfig":
    _check_fields(prefix, self)
    if not 0.0 <= self.tau <= 1.0:
      raise ConfigError(f"{prefix}.tau", self.tau, "a probability in [0, 1]")
    return self


@objective("rldf")
def rldf_loss(logp: jax.Array, batch: PolicyBatch, *, clip_eps: float = LossOptions.clip_eps,
              beta: float = LossOptions.beta, rldf: RLDFLossConfig = RLDFLossConfig()) -> tuple[jax.Array, Aux]:
  """RLDF (Reinforcement Learning from Denoising Feedback) on rebuilt rollout states.

  With ``rl.likelihood="rldf"`` every (state, position) pair is a target; the clean-state clip drops
  a target whose probability under the rollout policy, ``exp(logp_old)``, is below ``rl.rldf.tau``
  (0.6) unless the position was committed at that state (``batch.commit_now``). The kept targets get
  diffu-GRPO's clipped token loss with β·k3-KL (RLDF uses β = 0.01; μ = 1 makes it REINFORCE), as a
  mean over kept targets. With another estimator (no ``commit_now``) no target is dropped and this
  is diffu_grpo.

  Returns:
    (scalar loss, aux as diffu_grpo plus "rldf_kept_frac", the kept share of the targets).
  """
  keep = batch.mask
  if batch.commit_now is not None:
    clean = (jnp.exp(batch.logp_old) >= rldf.tau) | (batch.commit_now > 0)
    keep = keep * clean.astype(keep.dtype)
  loss, aux = diffu_grpo_loss(logp, batch.replace(mask=keep), clip_eps=clip_eps, beta=beta)
  aux["rldf_kept_frac"] = jnp.sum(keep) / jnp.maximum(jnp.sum(batch.mask), 1.0)
  return loss, aux


METHOD = Method(rldf_loss, token_advantages=True, pass_local=True)
