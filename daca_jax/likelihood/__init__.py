"""Per-token log-likelihood estimators, one module each; each returns :class:`daca_jax.contracts.TokenScores`.

:data:`ESTIMATORS` is the one list of them and :data:`PER_PASS` the list of their per-pass forms; the
``rl.likelihood`` registry :data:`LIKELIHOOD` and :data:`PASSES` are built from those lists (nothing
registers on import). Adding an estimator: a module whose function is made by
:func:`daca_jax.likelihood.base.estimator`, and its line in :data:`ESTIMATORS`.
"""
from daca_jax.likelihood import (coupled, elbo, elbo_mc, espo_elbo, mean_field, rldf, spg_block, stepmerge,
                                 stratified, trajectory)
from daca_jax.likelihood.base import registry_of, split_key
from daca_jax.likelihood.common import mask_prompt, token_logprobs
from daca_jax.likelihood.coupled import coupled_logprobs, coupled_masks
from daca_jax.likelihood.elbo import elbo_logprobs, gauss_legendre_01
from daca_jax.likelihood.elbo_mc import elbo_mc_logprobs
from daca_jax.likelihood.espo_elbo import espo_elbo_logprobs, stratified_counts
from daca_jax.likelihood.exact import any_order_logprob
from daca_jax.likelihood.mean_field import mean_field_logprobs
from daca_jax.likelihood.passes import passes_of
from daca_jax.likelihood.rldf import rldf_logprobs, sample_states, step_surprisal
from daca_jax.likelihood.spg_block import spg_block_logprobs, spg_block_masks
from daca_jax.likelihood.stepmerge import stepmerge_logprobs
from daca_jax.likelihood.stratified import assign_strata, stratified_logprobs, stratum_positions
from daca_jax.likelihood.trajectory import trajectory_logprobs

ESTIMATORS = (
    mean_field.mean_field_logprobs,  # d1's one-pass estimate
    stratified.stratified_logprobs,  # SML
    coupled.coupled_logprobs,
    elbo.elbo_logprobs,  # GDPO
    trajectory.trajectory_logprobs,
    rldf.rldf_logprobs,
    spg_block.spg_block_logprobs,  # SPG
    espo_elbo.espo_elbo_logprobs,  # ESPO
    elbo_mc.elbo_mc_logprobs,  # BGPO
    stepmerge.stepmerge_logprobs,  # MAP
)
PER_PASS = (stratified.stratified_one_pass, elbo.elbo_one_node, elbo_mc.elbo_mc_one_pass,
            trajectory.trajectory_one_run)
LIKELIHOOD = registry_of(ESTIMATORS)
PASSES = passes_of(PER_PASS)
