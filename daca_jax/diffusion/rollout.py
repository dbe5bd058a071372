"""Rollout sampler for masked diffusion LMs: LLaDA's semi-autoregressive remasking loop, jit-compiled.

Behaviour matched: LLaDA ``generate.py`` (Nie et al. 2025). The completion starts fully masked and is
split into ``gen_length / block_length`` blocks decoded left to right; each block gets
``steps / num_blocks`` steps and commits ``block_length // steps_per_block`` tokens per step, the
remainder spread one each over the first steps. At every step the model sees the current sequence,
proposes a candidate ``x0 = argmax(logits + temperature * Gumbel)`` at every position, scores the
candidates with the remasking rule, and commits the top-k still-masked positions of the current block.

The loop is one ``lax.scan`` over all S steps (block index and tokens-per-step are scanned inputs), so
shapes are static and the model is called exactly S times. The records that credit assigners need
(per-step top-1 confidence / entropy) are read off the logits the loop already has: recording them
changes neither the number of model calls nor the sampled tokens.

PRNG use (so that reference implementations can reproduce it): ``step_keys = split(key, S)``; at step s,
``k_gumbel, k_remask = split(step_keys[s])``; Gumbel noise ``jax.random.gumbel(k_gumbel, [B, L, V],
float32)``; the "random" rule draws ``uniform(k_remask, [B, L])``. Ties in the score are broken
towards the lower position (stable sort).
"""
from __future__ import annotations

import functools
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from daca_jax.diffusion.remasking import REMASKING
from daca_jax.types import RolloutConfig


@flax.struct.dataclass
class Trajectory:
  """What a rollout returns (DESIGN §3).

  Attributes:
    tokens: int32 [B, P+L] final sequences (prompt then completion).
    completion_mask: float32 [B, L]: 1 up to and including the first EOS, 0 after (all 1 if no EOS).
    commit_step: int32 [B, L] global step (0..S-1) at which each completion position was unmasked.
    commit_conf: float32 [B, L] model probability of the committed token at its commit step.
    step_conf: float32 [S, B, L] top-1 probability of every still-masked completion position when the
      model saw x_s (0 where already committed), or None when not recorded.
    step_entropy: float32 [S, B, L] predictive entropy (nats) in the same layout, or None.
    commit_hidden: [B, L, D] final hidden state of each completion position at its commit step (the
      features DelTA reads, DESIGN §6), or None when not recorded.
    prompt_len: P (static).
    num_model_calls: forward passes the rollout made (static; = S).
  """

  tokens: jax.Array
  completion_mask: jax.Array
  commit_step: jax.Array
  commit_conf: jax.Array
  step_conf: jax.Array | None = None
  step_entropy: jax.Array | None = None
  commit_hidden: jax.Array | None = None
  prompt_len: int = flax.struct.field(pytree_node=False, default=0)
  num_model_calls: int = flax.struct.field(pytree_node=False, default=0)

  @property
  def completion(self) -> jax.Array:
    """int32 [B, L] completion tokens."""
    return self.tokens[:, self.prompt_len:]


def tokens_per_step(cfg: RolloutConfig) -> np.ndarray:
  """LLaDA's schedule: tokens committed at each of the S steps (int32 [S]); sums to L."""
  spb = cfg.steps_per_block
  base, rem = divmod(cfg.block_length, spb)
  per_block = np.full((spb,), base, np.int32)
  per_block[:rem] += 1
  return np.tile(per_block, cfg.num_blocks)


def completion_mask_from_eos(completion: jax.Array, eos_id: int) -> jax.Array:
  """float32 [B, L]: 1 up to and including the first ``eos_id``; 0 after. All ones without EOS."""
  is_eos = completion == eos_id
  length = completion.shape[-1]
  first = jnp.where(jnp.any(is_eos, -1), jnp.argmax(is_eos, -1), length)
  return (jnp.arange(length)[None, :] <= first[:, None]).astype(jnp.float32)


def _stable_rank_desc(score: jax.Array) -> jax.Array:
  """Rank of each entry when sorted descending; ties go to the lower index. int32 [B, L]."""
  order = jnp.argsort(-score, axis=-1, stable=True)
  return jnp.argsort(order, axis=-1, stable=True)


def rollout(logits_fn: Any, params: Any, prompts: jax.Array, key: jax.Array, cfg: RolloutConfig, *,
            mask_id: int, eos_id: int, record_step_conf: bool = False,
            record_step_entropy: bool = False, record_commit_hidden: bool = False) -> Trajectory:
  """Samples completions for ``prompts`` (jit this, or call :func:`make_rollout_fn`).

  Args:
    logits_fn: pure ``(params, tokens[B, T] int32) -> logits[B, T, V]``.
    params: model parameters.
    prompts: int32 [B, P] prompt tokens (never masked, never changed).
    key: PRNG key.
    cfg: sampler geometry (static).
    mask_id: ``[MASK]`` id; eos_id: end-of-sequence id.
    record_step_conf: also return ``step_conf [S, B, L]`` (DPS / DTCA inputs).
    record_step_entropy: also return ``step_entropy [S, B, L]``.
    record_commit_hidden: also return ``commit_hidden [B, L, D]``; ``logits_fn`` must then return
      ``(logits, hidden)`` (``make_logits_fn(graphdef, return_hidden=True)``).
  Returns:
    A :class:`Trajectory`.
  """
  cfg.validate()  # trace time only: a bad geometry is a clear ConfigError, never a silent half-decode
  b, p = prompts.shape
  length, bl, steps = cfg.gen_length, cfg.block_length, cfg.steps
  remask = REMASKING.get(cfg.remasking)
  k_sched = jnp.asarray(tokens_per_step(cfg))
  block_of_step = jnp.arange(steps, dtype=jnp.int32) // cfg.steps_per_block
  pos = jnp.arange(length, dtype=jnp.int32)[None, :]
  x = jnp.concatenate([prompts.astype(jnp.int32), jnp.full((b, length), mask_id, jnp.int32)], axis=1)

  def step(carry, inputs):
    x, commit_step, commit_conf, commit_hidden = carry
    s, blk, k, step_key = inputs
    k_gumbel, k_remask = jax.random.split(step_key)
    if record_commit_hidden:
      logits, hidden = logits_fn(params, x)
    else:
      logits, hidden = logits_fn(params, x), None
    logits = logits[:, p:].astype(jnp.float32)  # [B, L, V]
    comp = x[:, p:]
    masked = comp == mask_id
    logz = jax.nn.logsumexp(logits, axis=-1)  # [B, L]
    if cfg.temperature > 0:
      noise = jax.random.gumbel(k_gumbel, logits.shape, jnp.float32)
      x0 = jnp.argmax(logits + cfg.temperature * noise, axis=-1).astype(jnp.int32)
    else:
      x0 = jnp.argmax(logits, axis=-1).astype(jnp.int32)
    cand_prob = jnp.exp(jnp.take_along_axis(logits, x0[..., None], -1)[..., 0] - logz)
    score = remask(cand_prob, k_remask)
    eligible = masked & (pos < (blk + 1) * bl)
    score = jnp.where(eligible, score, -jnp.inf)
    commit = eligible & (_stable_rank_desc(score) < k)
    new_comp = jnp.where(commit, x0, comp)
    commit_step = jnp.where(commit, s, commit_step)
    commit_conf = jnp.where(commit, cand_prob, commit_conf)
    if record_commit_hidden:
      commit_hidden = jnp.where(commit[..., None], hidden[:, p:].astype(commit_hidden.dtype), commit_hidden)
    out = {}
    if record_step_conf:
      top1 = jnp.exp(jnp.max(logits, axis=-1) - logz)
      out["conf"] = jnp.where(masked, top1, 0.0)
    if record_step_entropy:
      logq = logits - logz[..., None]
      ent = -jnp.sum(jnp.exp(logq) * logq, axis=-1)
      out["entropy"] = jnp.where(masked, ent, 0.0)
    x = jnp.concatenate([x[:, :p], new_comp], axis=1)
    return (x, commit_step, commit_conf, commit_hidden), out

  hidden0 = None
  if record_commit_hidden:
    _, h_shape = jax.eval_shape(lambda t: logits_fn(params, t), x)
    hidden0 = jnp.zeros((b, length, h_shape.shape[-1]), h_shape.dtype)
  init = (x, jnp.full((b, length), -1, jnp.int32), jnp.zeros((b, length), jnp.float32), hidden0)
  xs = (jnp.arange(steps, dtype=jnp.int32), block_of_step, k_sched, jax.random.split(key, steps))
  (x, commit_step, commit_conf, commit_hidden), rec = jax.lax.scan(step, init, xs)
  return Trajectory(
      tokens=x,
      completion_mask=completion_mask_from_eos(x[:, p:], eos_id),
      commit_step=commit_step,
      commit_conf=commit_conf,
      step_conf=rec.get("conf"),
      step_entropy=rec.get("entropy"),
      commit_hidden=commit_hidden,
      prompt_len=p,
      num_model_calls=steps,
  )


def make_rollout_fn(logits_fn: Any, cfg: RolloutConfig, *, mask_id: int, eos_id: int,
                    record_step_conf: bool = False, record_step_entropy: bool = False,
                    record_commit_hidden: bool = False):
  """Returns ``jit(rollout)`` as ``fn(params, prompts[B, P], key) -> Trajectory``."""
  cfg.validate()
  return jax.jit(functools.partial(rollout, logits_fn, cfg=cfg, mask_id=mask_id, eos_id=eos_id,
                                   record_step_conf=record_step_conf,
                                   record_step_entropy=record_step_entropy,
                                   record_commit_hidden=record_commit_hidden))
