"""The rollout section: ``RolloutConfig`` (the sampler of :mod:`daca_jax.diffusion.rollout`)."""
from __future__ import annotations

import dataclasses

from daca_jax.config.checks import _check_fields, _non_negative, _one_of, _positive
from daca_jax.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class RolloutConfig:
  """Rollout sampler (LLaDA's semi-autoregressive low-confidence remasking).

  Attributes:
    gen_length: L, completion tokens generated per prompt.
    block_length: semi-autoregressive block size; must divide ``gen_length``.
    steps: S, denoising steps (= model calls); split evenly over the ``gen_length/block_length``
      blocks, so it must be a multiple of the number of blocks.
    temperature: Gumbel-max sampling temperature; 0 is greedy.
    remasking: "low_confidence" (commit the most confident candidates) or "random".
    threshold: Fast-dLLM-style parallel decoding (off when 0): besides the scheduled top-k, every
      still-masked position of the current block whose candidate probability is > threshold is
      committed in the same step; a block whose positions are all committed skips its remaining
      steps (no model call). ``steps`` stays the static upper bound; ``steps = gen_length`` with any
      threshold gives Fast-dLLM's rule "at least the most confident one per step". Values > 1 are
      never exceeded (plain decoding).
    kv_cache: block-wise K/V cache (Fast-dLLM): "none"; "prefix" (each block's first step is a
      full pass that caches K/V before the block, later steps run the block and everything after
      it against that cache); "dual" (caches before and after the block; later steps run only the
      block's positions). Needs a model-backed logits_fn (``daca_jax.models.make_logits_fn``). Both
      are approximations: attention is bidirectional, so the cached entries (computed at the block's
      first step) go stale as the block's tokens are committed.

  ``threshold`` and ``kv_cache`` apply to RL's training rollouts, where they are off by default (d1's
  sampler); the main job's evaluations always decode without them. On the main job (seeds 0-3, paired
  test points) the prefix cache made RL 1.22x faster at -0.6 +- 4.8, threshold 0.9 1.31x at
  -1.2 +- 4.0, both 1.32x at -5.3 +- 3.5 (the documentation's results page).
  """

  gen_length: int = 20
  block_length: int = 20
  steps: int = 10
  temperature: float = 1.0
  remasking: str = "low_confidence"
  threshold: float = 0.0
  kv_cache: str = "none"

  @property
  def num_blocks(self) -> int:
    return self.gen_length // self.block_length

  @property
  def steps_per_block(self) -> int:
    return self.steps // self.num_blocks

  def validate(self, prefix: str = "rollout") -> "RolloutConfig":
    _check_fields(prefix, self)
    _positive(prefix, self, "gen_length", "block_length", "steps")
    if self.gen_length % self.block_length:
      raise ConfigError(f"{prefix}.block_length", self.block_length,
                        f"a divisor of {prefix}.gen_length={self.gen_length}")
    if self.steps % self.num_blocks:
      raise ConfigError(f"{prefix}.steps", self.steps,
                        f"a multiple of the number of blocks gen_length/block_length="
                        f"{self.num_blocks}")
    if self.steps_per_block > self.block_length:
      raise ConfigError(f"{prefix}.steps", self.steps,
                        f"at most one step per token: <= gen_length={self.gen_length}")
    _non_negative(prefix, self, "temperature", "threshold")
    _one_of(prefix, self, "kv_cache", ("none", "prefix", "dual"))
    return self
