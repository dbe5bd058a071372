"""A run's own configuration (e.g. ``configs/paper.py:d1_gsm8k_daca``) made ready for a plan.

:func:`resolve_plan_config` turns the config a user would pass to ``experiments/train.py`` into the
:class:`~daca_jax.config.train.TrainConfig` whose programs the plan compiles, and says in plain lines what the
plan does with each field that it cannot take as it is:

* **architecture** (:data:`daca_jax.models.hf_import.ARCHITECTURE_FIELDS`): from
  ``model.init_checkpoint``'s ``config.json`` (and ``tokenizer.json`` when present: the vocabulary
  limit) exactly as a training run takes it (:func:`daca_jax.models.hf_import.run_model_config`; a
  contradicting field is the same ConfigError), no weights read: the folder may hold only those files.
  Without a checkpoint a model preset (:data:`daca_jax.planning.spec.MODELS`, default ``llada_8b``)
  supplies it, replacing any architecture field the config sets (the paper presets set none); a
  replaced value is reported.
* **devices**: the presets leave the layout to the launch (``parallel.strategy="none"``); on several
  devices the plan uses FSDP over all of them (``--config.parallel.strategy=fsdp
  --config.parallel.fsdp=N``) and says so. A layout the config does set is used as it is. Batch fields
  that do not split over the devices (a slice larger than the preset's rows, a rollout call or micro-batch
  of a size that does not split) are fitted as a run on that slice would set them, and said so.
* **prompt length**: set by the task's tokenizer and data at run time; the plan takes it as an
  argument (:data:`DEFAULT_PROMPT_LEN`: d1's ``max_prompt_length``).

Everything else that shapes an iteration's programs is compiled as configured (see
:func:`daca_jax.planning.plan.setting`). :func:`not_planned` lists what the predicted iteration
leaves out (evaluation, host work) or bounds (threshold decoding).
"""
from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Mapping

from daca_jax.config import configure
from daca_jax.errors import ConfigError, DataError
from daca_jax.models import checkpoint_loader
from daca_jax.models.hf_import import ARCHITECTURE_FIELDS, run_model_config
from daca_jax.planning.spec import MODELS
from daca_jax.config.model import ModelConfig
from daca_jax.config.parallel import ParallelConfig
from daca_jax.config.train import TrainConfig

# d1's max_prompt_length (dllm-reasoning/d1 @ 837888f diffu-grpo/slurm_scripts/train.yaml): prompts are
# left-truncated to it there, so it bounds the paper runs' prompt length.
DEFAULT_PROMPT_LEN = 200


def config_only_files(path: str) -> checkpoint_loader.CheckpointFiles:
  """A checkpoint folder's validated ``config.json`` as :class:`~daca_jax.models.checkpoint_loader.CheckpointFiles`
  without tensors: what the architecture needs (shards need not be there yet).

  Raises:
    DataError: not a folder, or ``config.json`` missing or malformed
      (:func:`~daca_jax.models.checkpoint_loader.read_json_object`).
  """
  folder = pathlib.Path(path).expanduser()
  if not folder.is_dir():
    raise DataError(f"model.init_checkpoint={path}: not a directory (expected a LLaDA or Dream Hugging Face "
                    "checkpoint folder; the plan reads its config.json only)")
  folder = folder.resolve()
  hf = checkpoint_loader.read_json_object(folder / "config.json", "the model's config")
  return checkpoint_loader.CheckpointFiles(path=folder, hf=hf, tensors={}, shards=())


def _architecture(cfg: TrainConfig, model: str, own: bool = False) -> tuple[ModelConfig, list[str]]:
  """The model the plan compiles and the lines that say where its architecture came from (``own``: the
  config's own architecture when it names no checkpoint, as the run builds it)."""
  run = cfg.model
  if own and not run.init_checkpoint and not model:
    return run, [f"architecture: the config's own (d_model {run.d_model}, {run.n_layers} layers, vocab "
                 f"{run.vocab_size})"]
  if run.init_checkpoint:
    if model:
      raise ConfigError("--model", model, f"unset with model.init_checkpoint={run.init_checkpoint} (its "
                        "config.json gives the architecture)")
    resolved = run_model_config(config_only_files(run.init_checkpoint), run)
    return resolved, [f"architecture: config.json of model.init_checkpoint={run.init_checkpoint} "
                      f"(d_model {resolved.d_model}, {resolved.n_layers} layers, vocab {resolved.vocab_size}); "
                      "no weights read"]
  name = model or "llada_8b"
  if name not in MODELS:
    raise ConfigError("--model", name, f"one of {sorted(MODELS)} (or set model.init_checkpoint)")
  arch = MODELS[name]()
  default = ModelConfig()
  replaced = [f"model.{f}={getattr(run, f)!r} -> {getattr(arch, f)!r}" for f in ARCHITECTURE_FIELDS
              if getattr(run, f) != getattr(default, f) and getattr(run, f) != getattr(arch, f)]
  notes = [f"architecture: --model={name} (no model.init_checkpoint)"]
  if replaced:
    notes.append(f"the config's architecture fields replaced by --model={name}'s: {', '.join(replaced)}")
  return dataclasses.replace(run, **{f: getattr(arch, f) for f in ARCHITECTURE_FIELDS}), notes


def _devices(cfg: TrainConfig, num_devices: int) -> tuple[ParallelConfig, list[str]]:
  par = cfg.parallel
  if par.strategy == "none" and num_devices > 1:
    return (dataclasses.replace(par, strategy="fsdp", fsdp=num_devices, data=0),
            [f"parallel.strategy='none' runs on one device: planned as FSDP over the {num_devices} devices "
             f"(--config.parallel.strategy=fsdp --config.parallel.fsdp={num_devices})"])
  return par, []


def _spread(cfg: TrainConfig, num_devices: int) -> tuple[TrainConfig, list[str]]:
  """``cfg``'s batch fields fitted to FSDP over ``num_devices`` devices where they do not split over them, as a
  run on that slice would have to set them, and the lines that say so: the fewest more prompts whose rows
  split over the devices; micro-batches of whole groups that split over them (the largest such
  ``rl.grad_accum`` up to the preset's); one rollout call where the preset's ``rl.rollout_batch`` does not
  split (fewer calls, fewer weight gathers where a device cannot hold the gathered model)."""
  rl, notes = cfg.rl, []
  if cfg.parallel.strategy != "fsdp" or num_devices == 1:
    return cfg, notes
  g = rl.group_size
  prompts = rl.prompts_per_step
  while (prompts * g) % num_devices:
    prompts += 1
  if prompts != rl.prompts_per_step:
    notes.append(f"rl.prompts_per_step={rl.prompts_per_step} -> {prompts}: {rl.prompts_per_step * g} rows do not split "
                 f"over the {num_devices} devices ({prompts * g} rows, {prompts * g // num_devices} a device)")
  rows = prompts * g
  accum = next(a for a in range(rl.grad_accum, 0, -1) if prompts % a == 0 and (rows // a) % num_devices == 0)
  if accum != rl.grad_accum:
    notes.append(f"rl.grad_accum={rl.grad_accum} -> {accum}: micro-batches of whole groups that split over the "
                 f"{num_devices} devices")
  sampled = prompts * (rl.sample_group_size or g)
  rollout_batch = rl.rollout_batch
  if rollout_batch and (sampled % rollout_batch or rollout_batch % num_devices):
    rollout_batch = sampled
    notes.append(f"rl.rollout_batch={rl.rollout_batch} -> {sampled}: one rollout call ({rl.rollout_batch} rows do not "
                 f"split over the {num_devices} devices)")
  return dataclasses.replace(cfg, rl=dataclasses.replace(rl, prompts_per_step=prompts, grad_accum=accum,
                                                         rollout_batch=rollout_batch)), notes


def not_planned(cfg: TrainConfig, prompt_len: int, prompt_len_given: bool) -> list[str]:
  """Lines on what the predicted iteration of ``cfg`` bounds or leaves out (see the module docstring)."""
  out = []
  if not prompt_len_given:
    out.append(f"prompt length {prompt_len} tokens (d1's max_prompt_length; the run's is its task's longest "
               "tokenized prompt: pass --prompt_len to plan another)")
  if cfg.rollout.threshold > 0:
    out.append(f"rollout.threshold={cfg.rollout.threshold}: the sampler skips a block's remaining steps once "
               "every row has finished it, at run time; the plan counts every step (an upper bound)")
  if cfg.rl.sample_group_size and cfg.rl.sample_group_size != cfg.rl.group_size:
    out.append(f"rl.sample_group_size={cfg.rl.sample_group_size}: the rollout samples that many per prompt and "
               f"the update trains on rl.group_size={cfg.rl.group_size}; the host-side down-sampling is not timed")
  evals = [f"rl.eval_every={cfg.rl.eval_every} (validation on {cfg.task.num_val_examples} items)"] \
      if cfg.rl.eval_every else []
  out.append("not in the iteration time: evaluation before and after RL (eval.*)"
             + (f", {evals[0]}" if evals else "") + f", checkpoint saving (checkpoint.every={cfg.checkpoint.every}), "
             f"the rewards (task.reward={cfg.task.reward or cfg.task.name + ' grader'!r}) and decoding on the host, "
             "the credit-assignment program (elementwise over the step records)")
  if cfg.sft.steps and not cfg.model.init_checkpoint:
    out.append(f"the SFT warm start (sft.steps={cfg.sft.steps}) is not planned")
  return out


def task_prompt_len(cfg: TrainConfig) -> int:
  """P of the run ``cfg`` describes: its task's prompt length with the tokenizer the run uses (the
  checkpoint's, with ``model.init_checkpoint``; else the task's own), as the main job computes it
  (:func:`daca_jax.run.task_views.build_task`). Reads the checkpoint's file headers and tokenizer (its
  weights must be there, as for the run) and the task's data.

  Raises:
    ConfigError, DataError: as the run would, before any work.
  """
  from daca_jax.run import from_checkpoint, task_views

  tokenizer = None
  if cfg.model.init_checkpoint:
    cfg, start = from_checkpoint.resolve_config(cfg, log=lambda *_: None)
    tokenizer = start.tokenizer
  return int(task_views.build_task(cfg, tokenizer).prompt_len)


def resolve_plan_config(config: Mapping[str, Any] | Any, *, num_devices: int, model: str = "",
                        prompt_len: int = DEFAULT_PROMPT_LEN, prompt_len_given: bool = True, as_run: bool = False
                        ) -> tuple[TrainConfig, list[str]]:
  """The configuration a plan compiles for ``config`` on ``num_devices`` devices, and its notes.

  Args:
    config: what ``experiments/train.py --config`` takes (a ConfigDict or nested mapping).
    num_devices: devices of the machine planned for.
    model: a key of :data:`~daca_jax.planning.spec.MODELS` supplying the architecture ("" = llada_8b);
      must be "" when ``model.init_checkpoint`` is set.
    prompt_len: prompt tokens per row (only reported here); prompt_len_given: whether the caller chose
      it (else the notes say where the default comes from).
    as_run: exactly as the run would build it (a preflight): the config's own architecture when it
      names no checkpoint, and its own device layout, which must fit ``num_devices`` (no FSDP put in).
  Returns:
    ``(cfg, notes)``: the validated TrainConfig and the lines the plan prints about it.
  Raises:
    ConfigError: a bad field of ``config`` or ``model``, an architecture field contradicting the
      checkpoint, a ``parallel`` layout that does not fit ``num_devices``.
    DataError: an unreadable checkpoint folder or ``config.json``.
  """
  cfg = configure.train_config_from_dict(config)
  model_cfg, notes = _architecture(cfg, model, own=as_run)
  if as_run and cfg.parallel.strategy == "none" and num_devices > 1:
    raise ConfigError("parallel.strategy", "none", f"a layout over the target's {num_devices} devices, as the run "
                      f"would use them (e.g. --config.parallel.strategy=fsdp --config.parallel.fsdp={num_devices}); "
                      "'none' runs on one device")
  par, dev_notes = (cfg.parallel, []) if as_run else _devices(cfg, num_devices)
  cfg = dataclasses.replace(cfg, model=model_cfg, parallel=par)
  if not as_run:  # a preflight compiles the run as given (a batch that does not split is its error)
    cfg, spread = _spread(cfg, num_devices)
    dev_notes += spread
  cfg = configure.validate(cfg)
  if par.strategy != "none":
    from daca_jax.parallel.mesh import mesh_shape

    mesh_shape(par, num_devices)
  return cfg, notes + dev_notes + not_planned(cfg, prompt_len, prompt_len_given)


# experiments/plan.py's flags that apply with --config (every other one sets a field the config sets).
CONFIG_FLAGS = ("model", "device", "num_devices", "prompt_len", "target")


def check_config_flags(given: Mapping[str, Any]) -> None:
  """Raises ConfigError naming the first of the flags ``given`` (name -> value) that ``--config`` leaves
  unused (not in :data:`CONFIG_FLAGS`): the run's own field sets it."""
  unused = [k for k in given if k not in CONFIG_FLAGS]
  if unused:
    raise ConfigError(f"--{unused[0]}", given[unused[0]], "unset with --config (set the run's own field, e.g. "
                      "--config.model.lora_rank=..., --config.rl.grad_accum=...)")


def plan_preset(config: Mapping[str, Any] | Any, *, device: str, model: str = "", prompt_len: int | None = None,
                prompt_len_from_task: bool = False, target: Any = None) -> dict[str, Any]:
  """The plan record of ``config``'s run on this process's (simulated) devices of kind ``device``, or for a
  TPU or GPU ``target`` (:class:`daca_jax.planning.targets.Target`: its compiler, devices and kind).

  Args:
    config, model: as :func:`resolve_plan_config` takes them.
    prompt_len: P (None: :data:`DEFAULT_PROMPT_LEN`, and the notes say so).
    prompt_len_from_task: P is :func:`task_prompt_len` of the run (``prompt_len`` must be None).
  Raises:
    ConfigError, DataError: a bad field, device kind or checkpoint, before any compile.
  """
  import jax

  from daca_jax.planning.devices import device_spec
  from daca_jax.planning.plan import plan_from_config

  compile_only = target is not None and not target.simulated
  dev = device_spec(target.device if compile_only else device, "--device")
  if prompt_len_from_task and prompt_len is not None:
    raise ConfigError("--prompt_len", prompt_len, "unset with --prompt_len_from_task")
  given = prompt_len is not None or prompt_len_from_task
  prompt_len = DEFAULT_PROMPT_LEN if prompt_len is None else prompt_len
  n = target.num_devices if compile_only else jax.device_count()
  cfg, notes = resolve_plan_config(config, num_devices=n, model=model, prompt_len=prompt_len, prompt_len_given=given)
  if prompt_len_from_task:
    prompt_len = task_prompt_len(cfg)
    notes.append(f"prompt length {prompt_len}: task {cfg.task.name}'s with the run's tokenizer")
  return plan_from_config(cfg, prompt_len=prompt_len, num_devices=n, notes=notes, device=dev,
                          target=target if compile_only else None)


__all__ = ["CONFIG_FLAGS", "DEFAULT_PROMPT_LEN", "check_config_flags", "config_only_files", "not_planned", "plan_preset", "resolve_plan_config",
           "task_prompt_len"]
