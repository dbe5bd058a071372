"""What a plan is asked about: model, device, method and the knobs a memory plan turns.

:func:`plan_spec` checks every field before anything is traced or compiled, so a typo costs nothing.
"""
from __future__ import annotations

import dataclasses

from daca_jax import configure
from daca_jax.errors import ConfigError
from daca_jax.planning.devices import device_spec
from daca_jax.types import (CreditConfig, LikelihoodConfig, ModelConfig, ParallelConfig, RLConfig,
                            RolloutConfig, StratifiedConfig, TrainConfig, dream_7b_config, llada_8b_config,
                            tiny_config)

# Model presets: bf16 parameters (what a single-accelerator run of an 8B model can hold).
MODELS = {
    "llada_8b": lambda: llada_8b_config(param_dtype="bfloat16"),
    "dream_7b": dream_7b_config,
    # Test size: the same code path in seconds.
    "tiny": lambda: tiny_config(vocab_size=512, d_model=64, n_layers=4, n_heads=4, mlp_dim=128,
                                mask_token_id=511),
}
# Method presets (objective, credit, likelihood): the paper's DACA-GRPO and d1's diffu-GRPO.
METHODS = {
    "daca": ("diffu_grpo", "dps", "stratified"),
    "d1": ("diffu_grpo", "uniform", "mean_field"),
}
STRATEGIES = ("fsdp", "pmap", "none")


@dataclasses.dataclass(frozen=True)
class PlanSpec:
  """One setting to compile.

  Attributes:
    model: a key of :data:`MODELS`; layers: override of its layer count (0: the model's).
    device: a key of :data:`daca_jax.planning.devices.DEVICES`; num_devices: devices of the mesh.
    method: a key of :data:`METHODS`.
    strategy: ``parallel.strategy`` ("fsdp": the whole mesh on the 'fsdp' axis).
    prompts_per_step, group_size: B = prompts_per_step x group_size sequences per step.
    prompt_len, gen_length, block_length, steps: the rollout geometry (d1: L 256, block 32, 128 steps).
    num_strata: SML's K; strata_batch: SML passes whose activations are kept at once (0: all K).
    lora_rank: 0 for full fine-tuning, else LoRA adapters of this rank on every projection.
    remat: ``model.remat``; logprob_chunk: ``model.logprob_chunk``.
    beta: the KL weight (> 0 adds a reference pass); num_iterations: μ.
    grad_agreement: ``rl.grad_agreement`` (one more parameter-sized optimizer buffer).
    rollout_weights: ``parallel.rollout_weights`` ("auto" decides for ``device``'s memory).
  """

  model: str = "llada_8b"
  layers: int = 0
  device: str = "h100"
  num_devices: int = 8
  method: str = "daca"
  strategy: str = "fsdp"
  prompts_per_step: int = 8
  group_size: int = 8
  prompt_len: int = 64
  gen_length: int = 256
  block_length: int = 32
  steps: int = 128
  num_strata: int = 4
  strata_batch: int = 0
  lora_rank: int = 0
  remat: str = "full"
  logprob_chunk: int = 0
  beta: float = 0.04
  num_iterations: int = 1
  grad_agreement: bool = True
  rollout_weights: str = "auto"

  @property
  def batch(self) -> int:
    return self.prompts_per_step * self.group_size


def _choice(field: str, value: str, allowed) -> None:
  if value not in allowed:
    raise ConfigError(field, value, f"one of {sorted(allowed)}")


def check_spec(spec: PlanSpec, available_devices: int | None = None) -> PlanSpec:
  """Checks ``spec`` (and its :class:`TrainConfig`) before any compile.

  Args:
    available_devices: devices of the process (simulated ones included); must equal
      ``num_devices`` when given.
  Raises:
    ConfigError: the first field that is wrong, with its value and what is allowed.
  """
  _choice("model", spec.model, MODELS)
  device_spec(spec.device, "device")
  _choice("method", spec.method, METHODS)
  _choice("strategy", spec.strategy, STRATEGIES)
  _choice("rollout_weights", spec.rollout_weights, ("auto", "gathered", "sharded"))
  for name in ("num_devices", "prompts_per_step", "group_size", "prompt_len", "gen_length", "block_length",
               "steps", "num_strata", "num_iterations"):
    v = getattr(spec, name)
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
      raise ConfigError(name, v, "a positive integer")
  for name in ("layers", "strata_batch", "lora_rank", "logprob_chunk"):
    v = getattr(spec, name)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
      raise ConfigError(name, v, "an integer >= 0")
  if available_devices is not None and spec.num_devices != available_devices:
    raise ConfigError("num_devices", spec.num_devices,
                      f"the {available_devices} devices this process has (the entry point simulates "
                      "num_devices CPU devices; set it before jax is imported)")
  if spec.strategy == "none" and spec.num_devices != 1:
    raise ConfigError("strategy", spec.strategy, f"'fsdp' or 'pmap' on {spec.num_devices} devices "
                      "('none' runs on one device)")
  if spec.batch % spec.num_devices:
    raise ConfigError("prompts_per_step * group_size", spec.batch,
                      f"a multiple of num_devices={spec.num_devices} (every device takes B / n rows)")
  configure.validate(train_config(spec))
  return spec


def model_config(spec: PlanSpec) -> ModelConfig:
  """The spec's :class:`ModelConfig` (layers, remat, LoRA and logprob_chunk applied)."""
  overrides = dict(remat=spec.remat, logprob_chunk=spec.logprob_chunk, lora_rank=spec.lora_rank)
  if spec.layers:
    overrides["n_layers"] = spec.layers
  return dataclasses.replace(MODELS[spec.model](), **overrides)


def train_config(spec: PlanSpec) -> TrainConfig:
  """The :class:`TrainConfig` whose rollout and update the plan compiles."""
  objective, credit, likelihood = METHODS[spec.method]
  fsdp = spec.num_devices if spec.strategy == "fsdp" else 1
  return TrainConfig(
      model=model_config(spec),
      rollout=RolloutConfig(gen_length=spec.gen_length, block_length=spec.block_length, steps=spec.steps),
      credit=CreditConfig(),
      # d1's setting (GSM8K at LLaDA-8B) masks 15% of the prompt in the likelihood passes.
      likelihood=LikelihoodConfig(stratified=StratifiedConfig(num_strata=spec.num_strata),
                                  strata_batch=spec.strata_batch, p_mask_prompt=0.15),
      rl=RLConfig(objective=objective, credit=credit, likelihood=likelihood,
                  prompts_per_step=spec.prompts_per_step, group_size=spec.group_size, beta=spec.beta,
                  num_iterations=spec.num_iterations, grad_agreement=spec.grad_agreement),
      parallel=ParallelConfig(strategy=spec.strategy, fsdp=fsdp, rollout_weights=spec.rollout_weights))
