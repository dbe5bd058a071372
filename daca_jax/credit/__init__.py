"""Token credit assigners, one module each. :data:`ASSIGNERS` is the one list of them; the ``rl.credit``
registry :data:`CREDIT` is built from it (nothing registers on import). Adding one: a module whose function
is made by :func:`daca_jax.credit.base.credit_assigner`, and its line in :data:`ASSIGNERS`."""
from daca_jax.credit import contrast, delta, dps, dtca, position_value, token_reward, uniform
from daca_jax.credit.agreement import group_agreement_mask
from daca_jax.credit.base import CreditAssigner, CreditInputs, CreditOutput, credit_assigner, registry_of
from daca_jax.credit.contrast import contrast_credit, contrast_scores
from daca_jax.credit.delta import delta_credit, delta_weights
from daca_jax.credit.dps import dps_credit, dps_raw_scores, step_progress, zscore_weights
from daca_jax.credit.dtca import dtca_credit
from daca_jax.credit.position_value import position_value_advantages, position_value_credit
from daca_jax.credit.token_reward import token_group_advantages, token_reward_credit
from daca_jax.credit.taggers import TAGGERS, RuleTagger, TokenTagger
from daca_jax.credit.uniform import uniform_credit

ASSIGNERS = (
    uniform.uniform_credit,
    dps.dps_credit,  # DACA's Denoising Progress Scores
    dtca.dtca_credit,
    delta.delta_credit,  # DelTA
    position_value.position_value_credit,
    contrast.contrast_credit,
    token_reward.token_reward_credit,  # the oracle: the task's per-token rewards
)
CREDIT = registry_of(ASSIGNERS)
