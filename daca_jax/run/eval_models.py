"""The main job's checkpoints as models to evaluate (:class:`~daca_jax.evaluation.model.EvalModel`): a
workdir of ``experiments/train.py`` (:func:`model_from_workdir`) or a random initialisation of a training
config (:func:`model_from_random_init`); :func:`load_model` picks one of those or a Hugging Face directory
(:func:`daca_jax.evaluation.model.model_from_hf`), as the flags of ``experiments/evaluate.py`` say.

These live with the job, not in :mod:`daca_jax.evaluation`, because reading a workdir needs the job's
checkpoint layout (:mod:`daca_jax.run.checkpoint`, :mod:`daca_jax.run.from_checkpoint`) and its task
options (:mod:`daca_jax.run.task_views`); the evaluation protocol sits below the job and never imports
it. ``EvalModel`` and ``model_from_hf`` are importable from here too.
"""
from __future__ import annotations

import dataclasses
import os
import pathlib
from typing import Any, Mapping

from flax import nnx
import jax

from daca_jax.config.configure import train_config_from_dict, upgrade_config_dict
from daca_jax.errors import ConfigError, DataError
from daca_jax.evaluation.model import EvalModel, context_length, model_from_hf
from daca_jax.io_utils import check_folder_or_bucket, check_local_path, existing_workdir, read_json
from daca_jax.models import make_logits_fn
from daca_jax.models.llada import Transformer
from daca_jax.config.model import ModelConfig
from daca_jax.config.train import TrainConfig

def _abstract_params(cfg: ModelConfig) -> tuple[nnx.GraphDef, Any]:
  abstract = nnx.eval_shape(lambda: Transformer(cfg, nnx.Rngs(0)))
  return nnx.split(abstract, nnx.Param)


def _committed_steps(directory: pathlib.Path) -> list[int]:
  """Finished checkpoint steps in a Checkpointer directory, read without touching it (a training
  job may be writing there)."""
  if not directory.is_dir():
    return []
  return sorted(int(p.name) for p in directory.iterdir()
                if p.name.isdigit() and (p / "commit_success.txt").is_file()
                and (p / "state" / "commit_success.txt").is_file())


def run_config(workdir: str | os.PathLike) -> TrainConfig:
  """The config of the run in ``workdir`` (its ``config.json``, upgraded to today's field names).

  Raises:
    DataError: no or a damaged ``config.json``; the message names ``--workdir``.
    ConfigError: a value today's config refuses.
  """
  wd = existing_workdir(workdir, "--workdir")
  if not (wd / "config.json").is_file():
    raise DataError(f"--workdir={workdir}: no config.json (expected a workdir of experiments/train.py)")
  return train_config_from_dict(upgrade_config_dict(read_json(wd / "config.json", fix=(
      "it records the run's config, which the evaluation needs: restore it from a copy (the run's "
      "results.json holds the same config under 'config')"))))


@dataclasses.dataclass(frozen=True)
class TrainedParams:
  """The parameters of one finished checkpoint of an ``experiments/train.py`` workdir, on the host.

  Attributes:
    config: the run's config (``<workdir>/config.json``).
    workdir: the workdir's absolute path.
    phase: "rl" or "sft".
    step: the checkpoint's step.
    base: the model's parameters as a pure dict (``nnx.to_pure_dict`` layout: ``{"embed": {"embedding":
      [V, D]}, "layers": {"q_proj": {"kernel": [N, D, H*Dh]}, ...}, ...}``, numpy, the run's
      ``param_dtype``); for a LoRA policy the frozen base, None when the checkpoint does not store it
      (then it is the run's ``model.init_checkpoint``).
    lora: a LoRA policy's adapters ``{target: {"a": [N, in, r], "b": [N, r, out]}}`` (numpy), None for
      a fully fine-tuned model (and every SFT checkpoint).
  """

  config: TrainConfig
  workdir: pathlib.Path
  phase: str
  step: int
  base: dict[str, Any] | None
  lora: dict[str, Any] | None


def read_trained_params(workdir: str | os.PathLike, phase: str = "latest") -> TrainedParams:
  """The parameters of a workdir's latest checkpoint of ``phase``, verified against their checksum.

  Only the ``params`` entry is read (not the optimizer state), as host numpy arrays.

  Args:
    workdir: the run's ``--workdir`` (holds ``config.json``, ``sft/`` and ``rl/``).
    phase: "latest" (RL if it has a checkpoint, else SFT), "rl" or "sft".
  Raises:
    DataError: no ``config.json``, no finished checkpoint of the requested phase, or one without
      ``params``; the message names ``--workdir``.
    CorruptCheckpointError: the parameters differ from those saved (checksum), or cannot be read.
    ConfigError: an unknown ``phase`` (``--phase``).
  """
  from daca_jax.run.checkpoint import load_entry, verify_entry

  wd = existing_workdir(workdir, "--workdir")
  if phase not in ("latest", "rl", "sft"):
    raise ConfigError("--phase", phase, "one of ['latest', 'rl', 'sft']")
  cfg = run_config(workdir)
  order = ("rl", "sft") if phase == "latest" else (phase,)
  for name in order:
    steps = _committed_steps(wd / name)
    if steps:
      break
  else:
    raise DataError(f"--workdir={workdir}: no finished checkpoint in {' or '.join(str(wd / n) for n in order)}")
  step_dir = wd / name / str(steps[-1])
  try:
    saved = load_entry(step_dir / "state", "params")
  except KeyError:
    raise DataError(f"--workdir={workdir}: checkpoint {step_dir} holds no 'params'") from None
  verify_entry(step_dir, "params", saved)  # a damaged file is not used silently
  params = _strip_value(saved)
  if isinstance(params, Mapping) and "lora" in params and set(params) <= {"base", "lora"}:
    return TrainedParams(cfg, wd, name, steps[-1], params.get("base") or None, params["lora"])
  return TrainedParams(cfg, wd, name, steps[-1], params, None)


def with_data(cfg: TrainConfig, data_dir: str = "", tfds_dir: str = "") -> TrainConfig:
  """``cfg`` reading its benchmark files from ``data_dir`` (the local files) or ``tfds_dir`` (the TFDS
  datasets built from them) instead of where the run read them; unchanged when neither is given (e.g. an
  evaluation of a run whose TFDS folder moved).

  Raises:
    ConfigError: both given.
  """
  if data_dir and tfds_dir:
    raise ConfigError("--tfds_dir", tfds_dir, "unset with --data_dir (one source of the benchmark files)")
  if data_dir:
    return dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, source="local", data_dir=data_dir))
  if tfds_dir:
    return dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, source="tfds", tfds_dir=tfds_dir))
  return cfg


def model_from_workdir(workdir: str | os.PathLike, phase: str = "latest",
                       tokenizer: Any = None, data_dir: str = "", tfds_dir: str = "") -> EvalModel:
  """The latest checkpoint of an ``experiments/train.py`` workdir and the run's config.

  A LoRA policy is evaluated with its adapters applied (:func:`daca_jax.models.lora.make_lora_logits_fn`).
  A run from ``model.init_checkpoint`` is evaluated with that folder's tokenizer (unless ``tokenizer`` is
  given) and, when its checkpoint leaves the frozen base out, the folder's weights as the base
  (:func:`daca_jax.run.from_checkpoint.frozen_base`; the folder is checked against the run's record).

  Args:
    workdir: the run's ``--workdir`` (holds ``config.json``, ``sft/`` and ``rl/``).
    phase: "latest" (RL if it has a checkpoint, else SFT), "rl" or "sft".
    tokenizer: optional tokenizer replacing the tasks' own (see :class:`EvalModel`).
    data_dir, tfds_dir: the benchmark files to read instead of the run's (:func:`with_data`).
  Raises:
    DataError: see :func:`read_trained_params`; also parameters that do not match the run's model
      config, a LoRA checkpoint without its base from a run that did not start from a checkpoint folder,
      or a source folder that moved or changed since the run started.
    ConfigError: an unknown ``phase`` (``--phase``).
  """
  from daca_jax.models import lora
  from daca_jax.run import from_checkpoint
  from daca_jax.run.task_views import benchmark_source, task_kwargs

  trained = read_trained_params(workdir, phase)
  cfg = with_data(trained.config, data_dir, tfds_dir)
  base, max_len = trained.base, 0
  if cfg.model.init_checkpoint:
    source = pathlib.Path(cfg.model.init_checkpoint)
    if base is None:
      base = from_checkpoint.frozen_base(trained.workdir, cfg)
    if tokenizer is None:
      tokenizer = from_checkpoint.checkpoint_tokenizer(source, cfg.model)
    max_len = context_length(source)
  if base is None:
    raise DataError(f"--workdir={workdir}: checkpoint {trained.phase}/{trained.step} stores the LoRA adapters "
                    "without their base model")
  graphdef, abstract = _abstract_params(cfg.model)
  try:
    nnx.replace_by_pure_dict(abstract, jax.tree.map(jax.numpy.asarray, base))
  except (KeyError, ValueError) as e:
    raise DataError(f"--workdir={workdir}: checkpoint params do not match model config ({e})") from None
  logits_fn, params = make_logits_fn(graphdef), abstract
  if trained.lora is not None:
    logits_fn = lora.make_lora_logits_fn(graphdef, logprob_chunk=cfg.model.logprob_chunk)
    params = lora.lora_params(abstract, jax.tree.map(jax.numpy.asarray, trained.lora))
  return EvalModel(logits_fn, params, cfg.model,
                   {"kind": "workdir", "path": str(trained.workdir), "phase": trained.phase,
                    "step": trained.step},
                   tokenizer=tokenizer, task_options={cfg.task.name: task_kwargs(cfg)},
                   data_dir=benchmark_source(cfg), max_seq_len=max_len, train_config=cfg)


def _strip_value(tree: Any) -> Any:
  """Orbax restores an nnx.State without a target as ``{..., leaf: {"value": array}}``."""
  if isinstance(tree, Mapping):
    if set(tree) == {"value"} and not isinstance(tree["value"], Mapping):
      return tree["value"]
    return {k: _strip_value(v) for k, v in tree.items()}
  return tree


def model_from_random_init(cfg: TrainConfig, tokenizer: Any = None) -> EvalModel:
  """A freshly initialised model of ``cfg.model`` (seed ``cfg.seed``), with ``cfg``'s task options."""
  from daca_jax.models import init_model
  from daca_jax.run.task_views import benchmark_source, task_kwargs

  graphdef, params = init_model(cfg.model, cfg.seed)
  return EvalModel(make_logits_fn(graphdef), params, cfg.model,
                   {"kind": "random_init", "seed": cfg.seed, "model": dataclasses.asdict(cfg.model)},
                   tokenizer=tokenizer, task_options={cfg.task.name: task_kwargs(cfg)},
                   data_dir=benchmark_source(cfg), train_config=cfg)


def load_model(*, workdir: str = "", phase: str = "latest", hf_checkpoint: str = "",
               random_init: TrainConfig | None = None, tokenizer: str = "", prompt_style: str = "",
               data_dir: str = "", hf_dtype: str = "bfloat16", tfds_dir: str = "") -> EvalModel:
  """The model named by exactly one of ``workdir`` / ``hf_checkpoint`` / ``random_init`` (the flags of
  ``experiments/evaluate.py``).

  Args:
    tokenizer: a checkpoint folder whose tokenizer files to use (:meth:`HFTokenizer.from_checkpoint`),
      or a bare tokenizer.json (file or folder without tokenizer_config.json: LLaDA's special tokens,
      no chat template), instead of the tasks' byte tokenizer (workdir and random-init models; HF
      checkpoints always use their own).
    prompt_style: overrides ``task.options.prompt_style`` for every task that takes one.
    data_dir: overrides the benchmark folder.
    tfds_dir: reads the benchmarks from the TFDS datasets built there instead (``data.source='tfds'``).
  Raises:
    ConfigError: none or several checkpoint sources (names the flags).
  """
  if workdir:
    existing_workdir(workdir, "--workdir")  # a local folder or gs://bucket/folder
  check_folder_or_bucket(tfds_dir, "--tfds_dir")
  for flag, path in (("--hf_checkpoint", hf_checkpoint), ("--tokenizer", tokenizer), ("--data_dir", data_dir)):
    check_local_path(path, flag)  # gs://... would be read as the local folders gs:/...
  given = [f for f, v in (("--workdir", workdir), ("--hf_checkpoint", hf_checkpoint),
                          ("--random_init", random_init is not None)) if v]
  if len(given) != 1:
    raise ConfigError("checkpoint", given or None,
                      "exactly one of --workdir, --hf_checkpoint, --random_init (with --config)")
  tok = None
  if tokenizer:
    if hf_checkpoint:
      raise ConfigError("--tokenizer", tokenizer, "unset with --hf_checkpoint (it uses its own tokenizer.json)")
    from daca_jax.tasks.hf_tokenizer import HFTokenizer

    folder = pathlib.Path(tokenizer).expanduser()
    tok = (HFTokenizer.from_checkpoint(folder) if (folder / "tokenizer_config.json").is_file()
           else HFTokenizer.for_llada(folder, vocab_size=None))
  if data_dir and tfds_dir:
    raise ConfigError("--tfds_dir", tfds_dir, "unset with --data_dir (one source of the benchmark files)")
  if hf_checkpoint:
    model = model_from_hf(hf_checkpoint, dtype=hf_dtype, param_dtype=hf_dtype, data_dir=data_dir)
  elif workdir:
    model = model_from_workdir(workdir, phase, tokenizer=tok, data_dir=data_dir, tfds_dir=tfds_dir)
  else:
    model = model_from_random_init(with_data(random_init, data_dir, tfds_dir), tokenizer=tok)
  if tfds_dir and hf_checkpoint:
    from daca_jax.data import sources
    model.data_dir = sources.TFDSFiles(tfds_dir)
  if prompt_style:
    model.prompt_style = prompt_style
    for options in model.task_options.values():
      options.pop("prompt_style", None)
  if data_dir and not workdir:
    model.data_dir = data_dir
    for options in model.task_options.values():
      options["data_dir"] = data_dir
  return model
