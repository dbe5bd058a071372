"""The RL methods, one module each: its loss with the equation and source, its traits and its
combination checks (:class:`~daca_jax.rl.methods.base.Method`). :data:`METHODS` is the one list of
them; the ``rl.objective`` registry :data:`OBJECTIVES` is built from it, in its order.

Adding a method is a new module here that ends in ``METHOD = Method(...)`` and one line in
:data:`METHODS` (``docs/adding_a_method.md``).
"""
from __future__ import annotations

import jax

from daca_jax.errors import ConfigError
from daca_jax.rl.methods import bgpo, diffu_grpo, espo, gspo, map_pg, reinforce_pp, rldf, spg, wd1
from daca_jax.rl.methods.base import JobConfig, Method, registry_of


METHODS: tuple[Method, ...] = (
    diffu_grpo.METHOD,  # d1's diffu-GRPO
    wd1.METHOD,
    gspo.METHOD,  # and GDPO ("gdpo")
    reinforce_pp.METHOD,
    rldf.METHOD,
    spg.METHOD,
    espo.METHOD,
    bgpo.METHOD,
    map_pg.METHOD,  # MAP ("map")
)
OBJECTIVES = registry_of(METHODS)


def method(name: str) -> Method:
  """The :class:`Method` of ``rl.objective`` ``name`` (an alias included).

  Raises:
    ConfigError: ``name`` is not an objective (the message lists them).
  """
  return OBJECTIVES.get(name).method


def scored_positions(cfg: JobConfig, completion_mask: jax.Array, weights: jax.Array) -> tuple[jax.Array, jax.Array]:
  """The completion positions ``rl.objective``'s loss reads and their credit weights (``Method.positions``:
  ESPO's, with its padding), else ``completion_mask`` (float32 [B, L]) and ``weights`` (float32 [B, L])."""
  positions = method(cfg.rl.objective).positions
  return (completion_mask, weights) if positions is None else positions(cfg, completion_mask, weights)


def check_token_credit(cfg: JobConfig, token_level: bool) -> None:
  """Refuses a credit that hands out per-token advantages (``token_level``: position_value, contrast,
  token_reward) under a method whose loss reads sequence advantages only (its ratio or bound is per
  sequence, so a per-token advantage has no term to weight; ``Method.token_advantages``).

  Raises:
    ConfigError: naming ``rl.credit``, its value and the objectives that accept it.
  """
  m = method(cfg.rl.objective)
  if token_level and not m.token_advantages:
    raise ConfigError("rl.credit", cfg.rl.credit, f"a credit of weights with rl.objective={cfg.rl.objective!r} "
                      f"({m.sequence_reason}; per-token advantages need one of {names_where('token_advantages')})")


def names_where(trait: str) -> list[str]:
  """The sorted objective names (aliases included) whose :class:`Method` has ``trait`` true (for errors)."""
  return sorted(n for n in OBJECTIVES.names() if getattr(method(n), trait))


__all__ = ["METHODS", "OBJECTIVES", "Method", "check_token_credit", "method", "names_where", "scored_positions"]
