"""GRPO-style RL for masked diffusion LMs: advantages (registry ``ADVANTAGES``), objectives (``OBJECTIVES``),
optimizer, learner."""
from daca_jax.rl.advantages import (ADVANTAGES, AdvantageEstimator, advantage_name, group_advantages,
                                    register_advantage, zero_std_group_fraction)
from daca_jax.rl.learner import GRPOLearner
from daca_jax.rl.objectives import OBJECTIVES, PolicyBatch, diffu_grpo_loss, k3_kl
from daca_jax.rl.optim import make_optimizer
