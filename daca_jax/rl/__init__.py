"""GRPO-style RL for masked diffusion LMs: the methods (:mod:`daca_jax.rl.methods`, one module each, and
the ``rl.objective`` registry ``OBJECTIVES``), advantages (registry ``ADVANTAGES``), optimizer, pure
update-step factories (``make_update``), learner."""
from daca_jax.rl.advantages import (ADVANTAGES, AdvantageEstimator, advantage_name, group_advantages,
                                    register_advantage, zero_std_group_fraction)
from daca_jax.rl.learner import GRPOLearner
from daca_jax.rl.methods import METHODS, OBJECTIVES, Method
from daca_jax.rl.methods.base import k3_kl
from daca_jax.rl.methods.diffu_grpo import diffu_grpo_loss
from daca_jax.rl.optim import make_optimizer
from daca_jax.rl.update import make_objective_grad, make_scores_fn, make_update
from daca_jax.contracts import PolicyBatch
