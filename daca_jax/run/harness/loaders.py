"""The checkpoints an evaluation reads (:class:`EvalModel`): a workdir of ``experiments/train.py``,
a Hugging Face LLaDA / Dream directory, or a random initialisation; :func:`load_model` picks one."""
from __future__ import annotations

import dataclasses
import os
import pathlib
from typing import Any, Callable, Mapping

from flax import nnx
import jax

from daca_jax.configure import train_config_from_dict, upgrade_config_dict
from daca_jax.diffusion.rollout import make_rollout_fn
from daca_jax.errors import ConfigError, DataError
from daca_jax.io_utils import read_json
from daca_jax.models import make_logits_fn
from daca_jax.models.llada import Transformer
from daca_jax.types import ModelConfig, RolloutConfig, TrainConfig


@dataclasses.dataclass
class EvalModel:
  """A model ready to evaluate.

  Attributes:
    logits_fn: pure ``(params, tokens[B, T]) -> logits[B, T, V]``.
    params: its parameters.
    model_cfg: the architecture (vocab size and mask id are checked against each task's tokenizer).
    identity: JSON-able description of the checkpoint (path, phase, step, ...); part of the
      fingerprint that guards resumption.
    tokenizer: the model's tokenizer, which every task is built with (e.g. a checkpoint's
      HFTokenizer); None: the tasks' byte tokenizer.
    prompt_style: ``task.options.prompt_style`` given to every task that takes one (None: task
      default, or what the training run used).
    task_options: ``task name -> constructor kwargs`` for tasks built with specific options (a
      workdir's own task); other tasks get ``data_dir`` and ``prompt_style`` only.
    data_dir: benchmark folder given to the tasks ("" = the default data dir).
    max_seq_len: the model's context length (prompt + completion), 0 if unlimited.
    train_config: the training run's config (workdir and random-init models; None for HF
      checkpoints), e.g. for :mod:`daca_jax.viz` to rebuild the run's learner.
  """

  logits_fn: Callable[..., Any]
  params: Any
  model_cfg: ModelConfig
  identity: dict[str, Any]
  tokenizer: Any = None
  prompt_style: str | None = None
  task_options: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
  data_dir: str = ""
  max_seq_len: int = 0
  train_config: TrainConfig | None = None
  _rollouts: dict[Any, Callable[..., Any]] = dataclasses.field(default_factory=dict, repr=False)

  def rollout_fn(self, cfg: RolloutConfig, mask_id: int, eos_id: int) -> Callable[..., Any]:
    """The jitted sampler of ``cfg``, built once per model (reused by resumed and repeated runs)."""
    key = (cfg, mask_id, eos_id)
    if key not in self._rollouts:
      self._rollouts[key] = make_rollout_fn(self.logits_fn, cfg, mask_id=mask_id, eos_id=eos_id)
    return self._rollouts[key]


# --- loading checkpoints ---------------------------------------------------------------------------


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
  wd = pathlib.Path(workdir).expanduser().resolve()
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

  wd = pathlib.Path(workdir).expanduser().resolve()
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


def model_from_workdir(workdir: str | os.PathLike, phase: str = "latest",
                       tokenizer: Any = None) -> EvalModel:
  """The latest checkpoint of an ``experiments/train.py`` workdir and the run's config.

  A LoRA policy is evaluated with its adapters applied (:func:`daca_jax.models.lora.make_lora_logits_fn`).
  A run from ``model.init_checkpoint`` is evaluated with that folder's tokenizer (unless ``tokenizer`` is
  given) and, when its checkpoint leaves the frozen base out, the folder's weights as the base
  (:func:`daca_jax.run.from_checkpoint.frozen_base`; the folder is checked against the run's record).

  Args:
    workdir: the run's ``--workdir`` (holds ``config.json``, ``sft/`` and ``rl/``).
    phase: "latest" (RL if it has a checkpoint, else SFT), "rl" or "sft".
    tokenizer: optional tokenizer replacing the tasks' own (see :class:`EvalModel`).
  Raises:
    DataError: see :func:`read_trained_params`; also parameters that do not match the run's model
      config, a LoRA checkpoint without its base from a run that did not start from a checkpoint folder,
      or a source folder that moved or changed since the run started.
    ConfigError: an unknown ``phase`` (``--phase``).
  """
  from daca_jax.models import lora
  from daca_jax.run import from_checkpoint
  from daca_jax.run.task_views import task_kwargs

  trained = read_trained_params(workdir, phase)
  cfg = trained.config
  base, max_len = trained.base, 0
  if cfg.model.init_checkpoint:
    source = pathlib.Path(cfg.model.init_checkpoint)
    if base is None:
      base = from_checkpoint.frozen_base(trained.workdir, cfg)
    if tokenizer is None:
      tokenizer = from_checkpoint.checkpoint_tokenizer(source, cfg.model)
    max_len = _context_length(source)
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
                   data_dir=cfg.data.data_dir, max_seq_len=max_len, train_config=cfg)


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
  from daca_jax.run.task_views import task_kwargs

  graphdef, params = init_model(cfg.model, cfg.seed)
  return EvalModel(make_logits_fn(graphdef), params, cfg.model,
                   {"kind": "random_init", "seed": cfg.seed, "model": dataclasses.asdict(cfg.model)},
                   tokenizer=tokenizer, task_options={cfg.task.name: task_kwargs(cfg)},
                   data_dir=cfg.data.data_dir, train_config=cfg)


def model_from_hf(path: str | os.PathLike, *, dtype: str = "bfloat16", param_dtype: str = "bfloat16",
                  prompt_style: str = "chat", data_dir: str = "") -> EvalModel:
  """A local LLaDA or Dream Hugging Face directory with its own tokenizer (special tokens by role, chat
  template) and chat prompts.

  Raises:
    DataError / ConfigError: see :func:`daca_jax.models.hf_import.load_hf_checkpoint` and
      :meth:`daca_jax.tasks.hf_tokenizer.HFTokenizer.from_checkpoint` (missing files, mismatched tensors).
  """
  from daca_jax.models.hf_import import load_hf_checkpoint
  from daca_jax.tasks.hf_tokenizer import HFTokenizer

  p = pathlib.Path(path).expanduser().resolve()
  if not p.is_dir():
    raise DataError(f"--hf_checkpoint={path}: not a directory")
  tok = HFTokenizer.from_checkpoint(p)  # the tokenizer files are checked before the weights are read
  cfg, graphdef, params, report = load_hf_checkpoint(p, dtype=dtype, param_dtype=param_dtype)
  tok.vocab_size = max(tok.vocab_size, cfg.vocab_size)  # rows past the tokenizer's ids decode to nothing
  return EvalModel(make_logits_fn(graphdef), params, cfg,
                   {"kind": "hf", "path": str(p), "family": report.family, "dtype": dtype},
                   tokenizer=tok, prompt_style=prompt_style, data_dir=data_dir, max_seq_len=_context_length(p))


def _context_length(folder: pathlib.Path) -> int:
  """The context length a Hugging Face checkpoint's ``config.json`` gives (LLaDA ``max_sequence_length``,
  Dream ``max_position_embeddings``), 0 if none."""
  hf = read_json(folder / "config.json", fix="it is the checkpoint's model config: download it again")
  return int(hf.get("max_sequence_length") or hf.get("max_position_embeddings") or 0)


def load_model(*, workdir: str = "", phase: str = "latest", hf_checkpoint: str = "",
               random_init: TrainConfig | None = None, tokenizer: str = "", prompt_style: str = "",
               data_dir: str = "", hf_dtype: str = "bfloat16") -> EvalModel:
  """The model named by exactly one of ``workdir`` / ``hf_checkpoint`` / ``random_init`` (the flags of
  ``experiments/evaluate.py``).

  Args:
    tokenizer: a checkpoint folder whose tokenizer files to use (:meth:`HFTokenizer.from_checkpoint`),
      or a bare tokenizer.json (file or folder without tokenizer_config.json: LLaDA's special tokens,
      no chat template), instead of the tasks' byte tokenizer (workdir and random-init models; HF
      checkpoints always use their own).
    prompt_style: overrides ``task.options.prompt_style`` for every task that takes one.
    data_dir: overrides the benchmark folder.
  Raises:
    ConfigError: none or several checkpoint sources (names the flags).
  """
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
  if hf_checkpoint:
    model = model_from_hf(hf_checkpoint, dtype=hf_dtype, param_dtype=hf_dtype, data_dir=data_dir)
  elif workdir:
    model = model_from_workdir(workdir, phase, tokenizer=tok)
  else:
    model = model_from_random_init(random_init, tokenizer=tok)
  if prompt_style:
    model.prompt_style = prompt_style
    for options in model.task_options.values():
      options.pop("prompt_style", None)
  if data_dir:
    model.data_dir = data_dir
    for options in model.task_options.values():
      options["data_dir"] = data_dir
  return model
