"""Token credit assigners (registry ``CREDIT``, config field ``rl.credit``)."""
from daca_jax.credit import dps as _dps  # noqa: F401  (registers "dps")
from daca_jax.credit import uniform as _uniform  # noqa: F401  (registers "uniform")
from daca_jax.credit.base import CREDIT, CreditAssigner, register_credit
from daca_jax.credit.dps import dps_credit, dps_raw_scores, step_progress, zscore_weights
from daca_jax.credit.uniform import uniform_credit
