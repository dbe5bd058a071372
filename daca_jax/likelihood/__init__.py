"""Per-token log-likelihood estimators (registry ``LIKELIHOOD``, config field ``rl.likelihood``); each returns
:class:`daca_jax.contracts.TokenScores`."""
from daca_jax.likelihood.base import LIKELIHOOD, split_key
from daca_jax.likelihood.common import mask_prompt, token_logprobs
from daca_jax.likelihood.coupled import coupled_logprobs, coupled_masks
from daca_jax.likelihood.elbo import elbo_logprobs, gauss_legendre_01
from daca_jax.likelihood.exact import any_order_logprob
from daca_jax.likelihood.mean_field import mean_field_logprobs
from daca_jax.likelihood.rldf import rldf_logprobs, sample_states, step_surprisal
from daca_jax.likelihood.stratified import assign_strata, stratified_logprobs, stratum_positions
from daca_jax.likelihood.trajectory import trajectory_logprobs
from daca_jax.likelihood.spg_block import spg_block_logprobs, spg_block_masks  # SPG
from daca_jax.likelihood.espo_elbo import espo_elbo_logprobs, stratified_counts  # ESPO
from daca_jax.likelihood.passes import PASSES, register_passes
from daca_jax.likelihood.elbo_mc import elbo_mc_logprobs  # registers "elbo_mc" (BGPO)
from daca_jax.likelihood.stepmerge import stepmerge_logprobs  # registers "stepmerge" (MAP)
