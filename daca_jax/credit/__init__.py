"""Token credit assigners (registry ``CREDIT``, config field ``rl.credit``)."""
from daca_jax.credit import contrast as _contrast  # noqa: F401  (registers "contrast")
from daca_jax.credit import delta as _delta  # noqa: F401  (registers "delta")
from daca_jax.credit import dps as _dps  # noqa: F401  (registers "dps")
from daca_jax.credit import dtca as _dtca  # noqa: F401  (registers "dtca")
from daca_jax.credit import position_value as _position_value  # noqa: F401  (registers "position_value")
from daca_jax.credit import token_reward as _token_reward  # noqa: F401  (registers "token_reward")
from daca_jax.credit import uniform as _uniform  # noqa: F401  (registers "uniform")
from daca_jax.credit.agreement import group_agreement_mask
from daca_jax.credit.base import CREDIT, CreditAssigner, CreditInputs, CreditOutput, register_credit
from daca_jax.credit.contrast import contrast_credit, contrast_scores
from daca_jax.credit.delta import delta_credit, delta_weights
from daca_jax.credit.dps import dps_credit, dps_raw_scores, step_progress, zscore_weights
from daca_jax.credit.dtca import dtca_credit
from daca_jax.credit.position_value import position_value_advantages, position_value_credit
from daca_jax.credit.token_reward import token_group_advantages, token_reward_credit
from daca_jax.credit.taggers import TAGGERS, RuleTagger, TokenTagger
from daca_jax.credit.uniform import uniform_credit
