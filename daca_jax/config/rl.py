"""The RL section: ``RLConfig`` (advantages, objectives, the update of :mod:`daca_jax.rl`), with the fields
every loss may read (:class:`~daca_jax.rl.methods.base.LossOptions`) and its per-objective sub-sections,
each defined in its method's module.
"""
from __future__ import annotations

import dataclasses

from daca_jax.config.checks import DOWNSAMPLE_RULES, LR_SCHEDULES, _check_sections, _non_negative, _one_of, _positive
from daca_jax.errors import ConfigError
from daca_jax.rl.methods.base import LossOptions
from daca_jax.rl.methods.map_pg import MAPConfig
from daca_jax.rl.methods.rldf import RLDFLossConfig
from daca_jax.rl.methods.spg import SPGConfig


@dataclasses.dataclass(frozen=True)
class RLConfig:
  """GRPO learner.

  Attributes:
    objective: base method ("diffu_grpo", ...).
    credit: token credit assigner ("uniform", "dps").
    likelihood: per-token log-prob estimator ("mean_field", "stratified").
    steps: RL iterations (each: one rollout batch, ``num_iterations`` updates).
    prompts_per_step: distinct prompts per iteration; batch B = prompts_per_step * group_size.
    group_size: G, completions per prompt in every update.
    sample_group_size: n, completions sampled per prompt; the update trains on ``group_size`` of
      them chosen by ``downsample`` (PODS, Xu et al. 2025). 0 (or ``group_size``): no
      down-sampling.
    downsample: which ``group_size`` of the n: "max_variance" (PODS: the subset whose rewards
      vary most) or "random" (the control at the same batch sizes); :mod:`daca_jax.rl.downsample`.
    num_iterations: μ, policy updates per rollout batch (new likelihood mask each).
    clip_eps: ε of the ratio clip.
    beta: β of the k3 KL penalty to the reference policy (0 disables the reference pass).
    normalize_adv_std: divide group advantages by the group std (d1 does not); the same as
      ``advantage="group_std"``.
    advantage: sequence-advantage estimator (registry ``ADVANTAGES``, :mod:`daca_jax.rl.advantages`):
      "group_mean" (d1: r − group mean), "group_std" (GRPO: also / group std), "batch_whiten"
      (whitened over the whole batch), "reinforce_pp" (REINFORCE++: KL-shaped reward, whitened over
      the batch), "rloo" (leave-one-out group baseline, ESPO's); "" picks the objective's own
      (``reinforce_pp`` for that objective, ``rloo`` for ``espo``, else
      ``group_mean``, or ``group_std`` with ``normalize_adv_std``).
    learning_rate: peak AdamW learning rate.
    warmup_steps: linear warmup (optimizer updates).
    lr_schedule: after warmup, "constant" or "cosine" (decay to 10% of the peak at the last of the
      ``steps * num_iterations`` updates).
    weight_decay: AdamW weight decay.
    max_grad_norm: global-norm gradient clip.
    adam_eps: Adam's epsilon.
    adam_b1: Adam's first-moment decay β1, in [0, 1).
    adam_b2: Adam's second-moment decay β2, in [0, 1) (d1: 0.99).
    grad_accum: micro-batches per optimizer update: the rollout batch's B rows are scored and
      differentiated ``B / grad_accum`` rows at a time inside the compiled update (``lax.scan``, the
      activations of one micro-batch live at a time) and their gradients summed before one optimizer
      step. Every normalisation spans the whole batch (token counts, group and batch-whitened
      advantages, REINFORCE++'s KL-shaped whitening, the gradient-agreement monitor), so the update
      equals ``grad_accum = 1`` with per-row likelihood keys (:mod:`daca_jax.rl.accumulate`). B must
      be a multiple of ``grad_accum``, and each micro-batch whole groups of ``group_size`` rows split
      evenly over the ``parallel.data x parallel.fsdp`` devices. d1's recipe: 6 rows per device x 2.
    rollout_batch: rows sampled at once: the rollout of an iteration's ``prompts_per_step x
      sample_group_size`` (or ``group_size``) rows runs as consecutive calls of one compiled sampler of
      this many rows, whose noise is the matching rows of the full batch's draws, so the trajectories
      equal one call's (:func:`daca_jax.diffusion.rollout.rollout_in_micro_batches`). 0: all rows at
      once. Must divide the sampled batch and split over the batch devices.
    eval_every: evaluate on the validation split (``task.num_val_examples``) every N iterations and
      at the end (0: no periodic evaluation). The test set is evaluated only before and after RL.
    grad_agreement: log ``grad_cos``, the cosine between successive rollout batches' gradients (its
      mean over a run gives the gradient SNR, cos / (1 − cos)); costs one params-sized buffer in the
      optimizer state.
    replicate: which draw of RL's randomness (rollout keys, prompt order) the run takes from its
      seed: 0 = the seed's own; k > 0 = another independent draw from the same SFT warm start (a
      second run of one arm per warm start measures the RL seed's share of the spread).
    spg: :class:`SPGConfig` (``rl.objective="spg"``: its bound's β and mixture weight).
    map: :class:`MAPConfig` (``rl.objective="map"``: its upper clip and position-loss weight).
    rldf: :class:`RLDFLossConfig` (``rl.objective="rldf"``: its clean-state clip).
    pass_accum: per-pass gradient accumulation (:mod:`daca_jax.rl.pass_accum`): the gradient of an
      objective that is a sum of per-pass terms (BGPO's bound, the token-level objectives) is
      accumulated one likelihood pass at a time inside a ``lax.scan``, each pass's graph dropped, so
      memory stays that of one pass whatever the number of passes (BGPO's n_t, SML's K).
    mask_seed_reuse: the likelihood's masks of the μ inner updates as d1's, SPG's and MAP's trainers index
      them (False: a new draw for every inner update). Those trainers draw μ mask seeds per rollout batch and
      pick one by ``self._step % μ``, with ``_step`` counting gradient-accumulation micro-steps, so micro-batch
      k of inner update g uses seed (g·M + k + 1) mod μ (M = ``grad_accum``): a micro-batch sees only
      μ / gcd(M, μ) of the seeds, and may keep its masks across updates (SPG's Sudoku recipe, M = μ = 4: all four).
      With ``grad_accum = 1`` the two rules draw alike (a new seed per update).
  """

  objective: str = "diffu_grpo"
  credit: str = "dps"
  likelihood: str = "stratified"
  steps: int = 150
  prompts_per_step: int = 8
  group_size: int = LossOptions.group_size
  sample_group_size: int = 0
  downsample: str = "max_variance"
  num_iterations: int = 1
  clip_eps: float = LossOptions.clip_eps
  beta: float = LossOptions.beta
  normalize_adv_std: bool = False
  advantage: str = ""
  learning_rate: float = 1e-4
  warmup_steps: int = 5
  lr_schedule: str = "constant"
  weight_decay: float = 0.0
  max_grad_norm: float = 1.0
  adam_eps: float = 1e-8
  adam_b1: float = 0.9
  adam_b2: float = 0.999
  grad_accum: int = 1
  rollout_batch: int = 0
  eval_every: int = 0
  grad_agreement: bool = True
  replicate: int = 0
  spg: SPGConfig = SPGConfig()
  map: MAPConfig = MAPConfig()
  rldf: RLDFLossConfig = RLDFLossConfig()
  pass_accum: bool = False
  mask_seed_reuse: bool = False

  def validate(self, prefix: str = "rl") -> "RLConfig":
    _check_sections(prefix, self)  # the fields' types, then each method's section (rl.spg, ...)
    if self.advantage:
      if self.normalize_adv_std and self.advantage != "group_std":
        raise ConfigError(f"{prefix}.normalize_adv_std", self.normalize_adv_std,
                          f"False with {prefix}.advantage={self.advantage!r} (normalize_adv_std=True "
                          f"means {prefix}.advantage='group_std')")
    LossOptions(self.clip_eps, self.beta, self.group_size).validate(prefix)
    _positive(prefix, self, "prompts_per_step", "num_iterations", "grad_accum")
    _non_negative(prefix, self, "rollout_batch", "steps", "learning_rate", "warmup_steps",
                  "weight_decay", "max_grad_norm", "adam_eps", "eval_every", "replicate")
    if self.prompts_per_step % self.grad_accum:
      raise ConfigError(f"{prefix}.grad_accum", self.grad_accum,
                        f"a divisor of {prefix}.prompts_per_step={self.prompts_per_step} (every micro-batch "
                        f"holds whole groups of {prefix}.group_size={self.group_size} rows)")
    if not isinstance(self.sample_group_size, int) or isinstance(self.sample_group_size, bool) or (
        self.sample_group_size and self.sample_group_size < self.group_size):
      raise ConfigError(f"{prefix}.sample_group_size", self.sample_group_size,
                        f"0 (no down-sampling) or an int >= {prefix}.group_size={self.group_size}")
    sampled = self.prompts_per_step * (self.sample_group_size or self.group_size)
    if self.rollout_batch and sampled % self.rollout_batch:
      raise ConfigError(f"{prefix}.rollout_batch", self.rollout_batch,
                        f"0 (all rows at once) or a divisor of the {sampled} rows sampled per iteration "
                        f"({prefix}.prompts_per_step x {prefix}.sample_group_size or group_size)")
    _one_of(prefix, self, "downsample", DOWNSAMPLE_RULES)
    _one_of(prefix, self, "lr_schedule", LR_SCHEDULES)
    if not isinstance(self.grad_agreement, bool):
      raise ConfigError(f"{prefix}.grad_agreement", self.grad_agreement, "True or False")
    for name in ("adam_b1", "adam_b2"):  # Adam divides by 1 - beta**t: beta = 1 divides by zero
      if not 0.0 <= getattr(self, name) < 1.0:
        raise ConfigError(f"{prefix}.{name}", getattr(self, name), "a number in [0, 1)")
    if not self.adam_eps > 0:  # Adam divides by sqrt(nu) + eps: 0 gives 0/0 = NaN for a zero gradient
      raise ConfigError(f"{prefix}.adam_eps", self.adam_eps, "a number > 0")
    return self
