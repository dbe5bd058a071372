"""GRPO-style RL for masked diffusion LMs: advantages (registry ``ADVANTAGES``), objectives (``OBJECTIVES``),
optimizer, pure update-step factories (``make_update``), learner."""
from daca_jax.rl.advantages import (ADVANTAGES, AdvantageEstimator, advantage_name, group_advantages,
                                    register_advantage, zero_std_group_fraction)
from daca_jax.rl.learner import GRPOLearner
from daca_jax.rl.objectives import OBJECTIVES, PolicyBatch, diffu_grpo_loss, k3_kl
from daca_jax.rl.optim import make_optimizer
from daca_jax.rl.update import make_objective_grad, make_scores_fn, make_update
from daca_jax.rl.spg import check_spg_config, spg_bounds, spg_loss  # SPG
from daca_jax.rl.espo import check_espo_config, espo_loss  # ESPO
from daca_jax.rl import bgpo as _bgpo  # noqa: E402,F401  (registers the objective "bgpo")
from daca_jax.rl import map_pg as _map_pg  # noqa: E402,F401  (registers the objective "map")
