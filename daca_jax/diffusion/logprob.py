"""Log-probability of target ids under a softmax, optionally restricted to the policy's ids.

Shared by the SFT loss (:mod:`daca_jax.diffusion.sft`) and the likelihood estimators
(:mod:`daca_jax.likelihood`, which re-export it from :mod:`daca_jax.likelihood.common`).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from daca_jax.contracts import check_shape, shape_of

# Logit of an id outside the policy: finite, so a zero-weighted non-proposable target gives 0, not NaN.
_EXCLUDED_LOGIT = -1e30


def token_logprobs(logits: jax.Array, targets: jax.Array, ok: np.ndarray | None = None) -> jax.Array:
  """log softmax(logits)[target] without materialising the full log-softmax.

  Args:
    logits: [..., V] float (computed in float32).
    targets: int [...] target ids.
    ok: optional bool [V]: normalise over these ids only (a target outside gets about -1e30).
  Returns:
    float32 [...].
  Raises:
    ShapeError: ``logits.shape[:-1]`` is not ``targets.shape`` (it would broadcast).
  """
  check_shape("logits", logits, (*shape_of(targets), "V"), f"[..., V] with [...] = targets' shape "
              f"{shape_of(targets)}: one logit row per target")
  logits = logits.astype(jnp.float32)
  if ok is not None:
    logits = jnp.where(jnp.asarray(ok), logits, _EXCLUDED_LOGIT)
  picked = jnp.take_along_axis(logits, targets[..., None].astype(jnp.int32), axis=-1)[..., 0]
  return picked - jax.nn.logsumexp(logits, axis=-1)
