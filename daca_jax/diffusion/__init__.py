"""Masked diffusion: masking schedule, SFT loss, rollout sampler and its trajectory records."""
from daca_jax.diffusion.remasking import REMASKING
from daca_jax.diffusion.rollout import (Trajectory, completion_mask_from_eos, make_rollout_fn, rollout,
                                        tokens_per_step)
from daca_jax.diffusion.schedule import mask_completion, stratified_times
from daca_jax.diffusion.sft import sft_loss
