"""What an evaluation needs of a model (:class:`EvalModel`), and the one source the evaluation reads on
its own: a Hugging Face LLaDA / Dream directory (:func:`model_from_hf`).

A workdir of ``experiments/train.py`` or a random initialisation of a training config is the main
job's (its checkpoint layout, its task options): :mod:`daca_jax.run.eval_models` builds those, and its
:func:`~daca_jax.run.eval_models.load_model` picks one source for ``experiments/evaluate.py``.
"""
from __future__ import annotations

import dataclasses
import os
import pathlib
from typing import Any, Callable

from daca_jax.diffusion.rollout import make_rollout_fn
from daca_jax.errors import DataError
from daca_jax.io_utils import read_json
from daca_jax.models import make_logits_fn
from daca_jax.config.model import ModelConfig
from daca_jax.config.rollout import RolloutConfig
from daca_jax.config.train import TrainConfig


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
    data_dir: benchmark folder given to the tasks ("" = the default data dir), or the source of the
      benchmark files (:mod:`daca_jax.data.sources`, e.g. a training run's TFDS datasets).
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
  data_dir: Any = ""
  max_seq_len: int = 0
  train_config: TrainConfig | None = None
  _rollouts: dict[Any, Callable[..., Any]] = dataclasses.field(default_factory=dict, repr=False)

  def rollout_fn(self, cfg: RolloutConfig, mask_id: int, eos_id: int) -> Callable[..., Any]:
    """The jitted sampler of ``cfg``, built once per model (reused by resumed and repeated runs)."""
    key = (cfg, mask_id, eos_id)
    if key not in self._rollouts:
      self._rollouts[key] = make_rollout_fn(self.logits_fn, cfg, mask_id=mask_id, eos_id=eos_id)
    return self._rollouts[key]


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
  if not (p / "config.json").is_file():  # first: without it the tokenizer's mask token is what looks missing
    raise DataError(f"--hf_checkpoint={path}: config.json is missing (a LLaDA or Dream checkpoint folder holds "
                    "the model's config.json beside its weights and tokenizer files)")
  tok = HFTokenizer.from_checkpoint(p)  # the tokenizer files are checked before the weights are read
  cfg, graphdef, params, report = load_hf_checkpoint(p, dtype=dtype, param_dtype=param_dtype)
  tok.vocab_size = max(tok.vocab_size, cfg.vocab_size)  # rows past the tokenizer's ids decode to nothing
  return EvalModel(make_logits_fn(graphdef), params, cfg,
                   {"kind": "hf", "path": str(p), "family": report.family, "dtype": dtype},
                   tokenizer=tok, prompt_style=prompt_style, data_dir=data_dir, max_seq_len=context_length(p))


def context_length(folder: pathlib.Path) -> int:
  """The context length a Hugging Face checkpoint's ``config.json`` gives (LLaDA ``max_sequence_length``,
  Dream ``max_position_embeddings``), 0 if none."""
  hf = read_json(folder / "config.json", fix="it is the checkpoint's model config: download it again")
  return int(hf.get("max_sequence_length") or hf.get("max_position_embeddings") or 0)
