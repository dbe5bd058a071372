"""daca_jax: RL for masked diffusion language models (DACA-GRPO) in JAX/Flax.

Nothing is imported here: ``import daca_jax.rl`` loads only what that package needs. The layout is
``docs/architecture.md``; modules that moved are listed in ``docs/changelog.md``.
"""
