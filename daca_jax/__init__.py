"""daca_jax: RL for masked diffusion language models (DACA-GRPO) in JAX/Flax."""
