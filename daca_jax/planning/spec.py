"""The setting ``experiments/plan.py`` plans without ``--config``: a paper preset plus the flags' fields.

Every field of the plan is a :class:`~daca_jax.config.train.TrainConfig` field. ``--method`` picks the preset
(:data:`METHODS`, a ``configs/paper.py`` name: d1's GSM8K recipe or its DACA arm), :data:`TABLE_SETTING`
sets the geometry of ``docs/scaling.md``'s table on top, and each flag of :data:`FLAG_FIELDS` given
replaces its field; ``--model`` gives the architecture (:data:`MODELS`) and ``--layers`` its depth. The
values are checked once, by the config's own validation (:func:`daca_jax.config.configure.with_overrides`).
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Mapping

from daca_jax.config import configure
from daca_jax.errors import ConfigError
from daca_jax.models.hf_import import ARCHITECTURE_FIELDS
from daca_jax.planning.devices import device_spec
from daca_jax.planning.plan import run_plan
from daca_jax.planning.targets import Target
from daca_jax.config.train import TrainConfig
from daca_jax.config.model import dream_7b_config, llada_8b_config, tiny_config

# Model presets: bf16 parameters (what a single-accelerator run of an 8B model can hold).
MODELS = {
    "llada_8b": lambda: llada_8b_config(param_dtype="bfloat16"),
    "dream_7b": dream_7b_config,
    # Test size: the same code path in seconds.
    "tiny": lambda: tiny_config(vocab_size=512, d_model=64, n_layers=4, n_heads=4, mlp_dim=128,
                                mask_token_id=511),
}
# --method: the configs/paper.py preset it plans (the paper's DACA-GRPO arm of d1, and d1's diffu-GRPO).
METHODS = {"daca": "d1_gsm8k_daca", "d1": "d1_gsm8k"}
# docs/scaling.md's table on top of the preset: B = 8 prompts x 8 = 64 rows sampled in one rollout call
# and trained in one update of one micro-batch, full fine-tuning (--lora_rank: adapters without dropout),
# FSDP over every device; P 64 tokens.
TABLE_SETTING = {"rl.prompts_per_step": 8, "rl.group_size": 8, "rl.num_iterations": 1, "rl.grad_accum": 1,
                 "rl.rollout_batch": 0, "model.lora_rank": 0, "model.lora_dropout": 0.0,
                 "parallel.strategy": "fsdp"}
TABLE_PROMPT_LEN = 64
# Flags that set a TrainConfig field (flag name -> dotted field).
FLAG_FIELDS = {
    "strategy": "parallel.strategy", "rollout_weights": "parallel.rollout_weights",
    "prompts_per_step": "rl.prompts_per_step", "group_size": "rl.group_size",
    "gen_length": "rollout.gen_length", "block_length": "rollout.block_length", "steps": "rollout.steps",
    "num_strata": "likelihood.stratified.num_strata", "strata_batch": "likelihood.strata_batch",
    "lora_rank": "model.lora_rank", "remat": "model.remat", "logprob_chunk": "model.logprob_chunk",
    "beta": "rl.beta", "num_iterations": "rl.num_iterations", "grad_agreement": "rl.grad_agreement",
}


def field_value(cfg: TrainConfig, path: str) -> Any:
  """The value of the dotted field ``path`` (``"rl.beta"``) of ``cfg``."""
  return functools.reduce(getattr, path.split("."), cfg)


def _choice(flag: str, value: str, allowed: Mapping[str, Any]) -> None:
  if value not in allowed:
    raise ConfigError(flag, value, f"one of {sorted(allowed)}")


def flag_config(get_config: Callable[[str], Any], *, method: str = "daca", model: str = "llada_8b", layers: int = 0,
                num_devices: int = 1, **fields: Any) -> TrainConfig:
  """The TrainConfig of a flag setting.

  Args:
    get_config: ``configs/paper.py``'s ``get_config`` (preset name -> ConfigDict).
    method: a key of :data:`METHODS`; model: a key of :data:`MODELS`; layers: its layer count (0: its own).
    num_devices: devices of the mesh (``parallel.fsdp`` with ``parallel.strategy="fsdp"``).
    **fields: flags of :data:`FLAG_FIELDS` (None: the preset's value with :data:`TABLE_SETTING`).
  Raises:
    ConfigError: an unknown method, model or flag, or a field value the config refuses.
  """
  _choice("method", method, METHODS)
  _choice("model", model, MODELS)
  unknown = sorted(set(fields) - set(FLAG_FIELDS))
  if unknown:
    raise ConfigError(unknown[0], fields[unknown[0]], f"one of {sorted(FLAG_FIELDS)}")
  if isinstance(layers, bool) or not isinstance(layers, int) or layers < 0:
    raise ConfigError("layers", layers, "an integer >= 0 (0: the model's own)")
  arch = MODELS[model]()
  overrides = {f"model.{f}": getattr(arch, f) for f in ARCHITECTURE_FIELDS + ("dtype", "param_dtype")}
  if layers:
    overrides["model.n_layers"] = layers
  overrides.update(TABLE_SETTING)
  overrides.update({FLAG_FIELDS[k]: v for k, v in fields.items() if v is not None})
  if overrides["parallel.strategy"] == "fsdp":
    overrides["parallel.fsdp"] = num_devices
  cfg = configure.train_config_from_dict(get_config(METHODS[method]))
  return configure.with_overrides(cfg, list(overrides.items()))


def spec_record(cfg: TrainConfig, *, method: str, model: str, layers: int, device: str, num_devices: int,
                prompt_len: int) -> dict[str, Any]:
  """The flag setting of ``cfg`` as a plan record's ``spec`` (every flag and its value), which the
  ``--sweep`` table and resume read."""
  return dict(model=model, layers=layers, device=device, num_devices=num_devices, method=method,
              prompt_len=prompt_len, **{k: field_value(cfg, f) for k, f in FLAG_FIELDS.items()})


def plan_flags(get_config: Callable[[str], Any], *, device: str = "h100", num_devices: int = 1,
               prompt_len: int = TABLE_PROMPT_LEN, method: str = "daca", model: str = "llada_8b", layers: int = 0,
               target: Target | None = None, **fields: Any) -> dict[str, Any]:
  """The plan record (:func:`daca_jax.planning.plan.run_plan`) of a flag setting (:func:`flag_config`) on
  ``num_devices`` devices of kind ``device``, with its :func:`spec_record`; with a TPU or GPU ``target``
  its compiler, devices and device kind instead.

  Raises:
    ConfigError: a bad flag or field (before any compile), or a device count other than the process's.
  """
  if target is not None:  # its devices (a cpu:N target: N simulated devices of kind ``device``)
    device, num_devices = (device if target.simulated else target.device), target.num_devices
  dev = device_spec(device, "device")
  cfg = flag_config(get_config, method=method, model=model, layers=layers, num_devices=num_devices, **fields)
  spec = spec_record(cfg, method=method, model=model, layers=layers, device=dev.name, num_devices=num_devices,
                     prompt_len=prompt_len)
  if target is not None and not target.simulated:
    spec["target"] = target.name
  return run_plan(cfg, prompt_len=prompt_len, num_devices=num_devices, device=dev, spec=spec,
                  target=target if target is not None and not target.simulated else None)


__all__ = ["FLAG_FIELDS", "METHODS", "MODELS", "TABLE_PROMPT_LEN", "TABLE_SETTING", "field_value", "flag_config",
           "plan_flags", "spec_record"]
