"""Starting RL from a Hugging Face LLaDA / Dream checkpoint (``model.init_checkpoint``).

What such a run does differently from the tiny model's (:func:`daca_jax.run.pipeline.run_main_job`):

* **config** (:func:`resolve_config`): the architecture fields
  (:data:`daca_jax.models.hf_import.ARCHITECTURE_FIELDS`) come from the checkpoint's ``config.json``
  and ``tokenizer.json``; a field the run set to something else is a ConfigError naming both. The
  run's own choices (:data:`~daca_jax.models.hf_import.RUN_FIELDS`: dtypes, remat, LoRA, chunking)
  stay. ``model.init_checkpoint`` is recorded as the folder's absolute path. Every file is validated
  and every tensor's shape and dtype checked against the config before any work starts.
* **tokenizer** (:func:`checkpoint_tokenizer`): the checkpoint's own, built in that one function;
  the task is built with it for prompts, chat template, targets and decoding.
* **weights** (:func:`initial_params`): read slice by slice straight into the run's shardings
  (:func:`daca_jax.models.checkpoint_loader.load_params`); the policy starts as the checkpoint.
* **SFT** is skipped (:data:`SFT_SKIPPED` says why); with LoRA the reference policy is the checkpoint
  with the adapters off, with full fine-tuning the frozen initial weights (:func:`reference_note`).
* **resume**: the workdir's ``config.json`` holds the resolved config (so another checkpoint path is
  refused like any training change) and ``init_checkpoint.json`` the folder's fingerprint
  (:func:`record_source`, :mod:`daca_jax.models.hf_fingerprint`: a checkpoint changed under a run is
  refused; the export checks the same record).
* **RL checkpoints** of a LoRA run (:class:`RLCheckpointLayout`) hold the adapters, optimizer and credit
  state but not the frozen base, which is the folder's weights, read again at every start (at 8B, 16 GB
  less per save). Readers rebuild it from the folder (:func:`frozen_base`).
"""
from __future__ import annotations

import dataclasses
import pathlib
import time
from typing import Any, Callable

import jax
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

from daca_jax import parallel
from daca_jax.errors import DataError
from daca_jax.models import checkpoint_loader, hf_fingerprint
from daca_jax.models.hf_import import hf_family, run_model_config
from daca_jax.config.model import ModelConfig
from daca_jax.config.train import TrainConfig

SFT_SKIPPED = ("SFT warm start skipped: RL starts from the pretrained checkpoint {path} "
               "(model.init_checkpoint), whose weights are the initial policy. The SFT phase exists to teach "
               "the tiny random model the task's answer format; the sft.* settings other than "
               "sft.num_train_examples (the training pool) are not used.")


@dataclasses.dataclass(frozen=True)
class CheckpointStart:
  """What a run that starts from a checkpoint read before any work.

  Attributes:
    files: the validated folder (:func:`daca_jax.models.checkpoint_loader.open_checkpoint`).
    family: "llada" or "dream".
    tokenizer: the checkpoint's tokenizer (:func:`checkpoint_tokenizer`).
  """

  files: checkpoint_loader.CheckpointFiles
  family: str
  tokenizer: Any


def checkpoint_tokenizer(path: str | pathlib.Path, cfg: ModelConfig) -> Any:
  """The task tokenizer of a run that starts from checkpoint ``path`` (model ``cfg``): the folder's own
  tokenizer, special tokens by role and chat template
  (:meth:`daca_jax.tasks.hf_tokenizer.HFTokenizer.from_checkpoint`).

  Raises:
    DataError: missing tokenizer files (one message naming them), or a special token missing from the
      vocabulary.
  """
  from daca_jax.tasks.hf_tokenizer import HFTokenizer

  return HFTokenizer.from_checkpoint(path, vocab_size=cfg.vocab_size)


def _check_tokenizer(tok: Any, cfg: ModelConfig, files: checkpoint_loader.CheckpointFiles) -> None:
  """The tokenizer's mask and padding ids agree with what ``config.json`` gave the model."""
  where = f"{files.path}/tokenizer.json"
  if tok.mask_id != cfg.mask_token_id:
    raise DataError(f"{where}: the mask token has id {tok.mask_id}, but config.json:mask_token_id is "
                    f"{cfg.mask_token_id}")
  if cfg.left_pad_id >= 0 and tok.pad_id != cfg.left_pad_id:
    raise DataError(f"{where}: the padding token has id {tok.pad_id}, but config.json:pad_token_id is "
                    f"{cfg.left_pad_id} (the model keeps that id's left padding out of attention)")
  if tok.vocab_size > cfg.vocab_size:
    raise DataError(f"{where}: {tok.vocab_size} ids, more than the model's {cfg.vocab_size} embedding rows")


def resolve_config(cfg: TrainConfig, log: Callable[[str], None] = print) -> tuple[TrainConfig, CheckpointStart]:
  """``cfg`` with its model from ``cfg.model.init_checkpoint``, and what was read to decide it.

  Reads only ``config.json``, the index, the shard headers and ``tokenizer.json`` (no weights), and
  checks every tensor the model needs (shape and dtype) against them.

  Raises:
    ConfigError: an architecture field of ``cfg.model`` contradicting the checkpoint (names both), or a
      bad ``config.json`` value (names ``config.json:<key>``).
    DataError: a missing or malformed file, a tensor of the wrong shape or dtype, a tokenizer whose
      mask / pad ids differ from ``config.json``'s.
  """
  files = checkpoint_loader.open_checkpoint(cfg.model.init_checkpoint)
  family = hf_family(files.hf)
  model = run_model_config(files, dataclasses.replace(cfg.model, init_checkpoint=str(files.path)))
  checkpoint_loader.check_tensors(files, model, family)
  tok = checkpoint_tokenizer(files.path, model)
  _check_tokenizer(tok, model, files)
  cfg = dataclasses.replace(cfg, model=model).validate()
  stored = sorted({e.dtype for e in files.tensors.values()})
  wider = model.param_dtype == "float32" and "F32" not in stored
  log(f"Model: {family} checkpoint {checkpoint_loader.describe(files)}; d_model {model.d_model}, "
      f"{model.n_layers} layers, vocab {model.vocab_size}, held in {model.param_dtype}"
      + (f" (the checkpoint stores {'/'.join(stored)}: float32 takes twice its size; "
         "model.param_dtype=bfloat16 keeps it)" if wider else "")
      + (f", LoRA rank {model.lora_rank}" if model.lora_rank else ", full fine-tuning"))
  return cfg, CheckpointStart(files, family, tok)


def initial_params(cfg: TrainConfig, start: CheckpointStart, mesh: Any,
                   log: Callable[[str], None] = print) -> tuple[Any, Any]:
  """The checkpoint's weights as the initial policy, each parameter read straight into its sharding.

  Args:
    cfg: the resolved config (:func:`resolve_config`).
    start: what :func:`resolve_config` read.
    mesh: the run's device mesh (``parallel.strategy`` fsdp: FSDP shardings, pmap: replicated), or
      None (one device).
  Returns:
    ``(graphdef, params)`` as :func:`daca_jax.models.init_model` returns them, params global arrays.
  """
  placement = None
  if mesh is not None and cfg.parallel.strategy == "fsdp":
    placement = lambda shape: NamedSharding(mesh, parallel.fsdp_spec(shape, mesh.shape["fsdp"]))
  elif mesh is not None:
    placement = lambda shape: NamedSharding(mesh, P())
  t0 = time.perf_counter()
  graphdef, params = checkpoint_loader.load_params(start.files, cfg.model, start.family, placement)
  log(f"Loaded the checkpoint's weights in {time.perf_counter() - t0:.1f} s: "
      f"{_gib(_total_bytes(params))} in {cfg.model.param_dtype}, {_gib(_device_bytes(params))} per device.")
  return graphdef, params


@dataclasses.dataclass(frozen=True)
class RLCheckpointLayout:
  """What an RL checkpoint stores of the run's state ``{"params", "opt_state"[, "credit"]}``.

  A LoRA run from ``model.init_checkpoint`` trains adapters over a base that never changes and is, bit for
  bit, the folder's weights in ``model.param_dtype`` (read again at every start, the folder checked
  against the workdir's fingerprint record by :func:`record_source`): its checkpoints store ``params =
  {"lora": adapters}`` and the restore puts the base back. Every other run stores its whole state: a full
  fine-tuning run trains the base, and a tiny-model run's base (its SFT result, or the random initial
  model when ``sft.steps`` is 0) may live outside the workdir (``experiments/reproduce.py`` shares one SFT
  folder) or be pruned with the SFT checkpoints, while it costs little to store.

  Attributes:
    base: the frozen base left out of the checkpoints (an ``nnx.State``), or None: nothing left out.
  """

  base: Any = None

  def saved(self, state: dict[str, Any]) -> dict[str, Any]:
    """The part of ``state`` a checkpoint holds (the same arrays, not copies)."""
    if self.base is None:
      return state
    return dict(state, params={"lora": state["params"]["lora"]})

  def full(self, saved: dict[str, Any]) -> dict[str, Any]:
    """The run's state from what a checkpoint holds (:meth:`saved`'s inverse)."""
    if self.base is None:
      return saved
    return dict(saved, params={"base": self.base, "lora": saved["params"]["lora"]})


def rl_checkpoint_layout(cfg: TrainConfig, params: Any) -> RLCheckpointLayout:
  """The layout of ``cfg``'s RL checkpoints, given the policy's initial ``params`` (the frozen base of a
  LoRA run from a checkpoint is left out)."""
  if cfg.model.init_checkpoint and cfg.model.lora_rank:
    return RLCheckpointLayout(base=params["base"])
  return RLCheckpointLayout()


def frozen_base(workdir: str | pathlib.Path, cfg: TrainConfig) -> Any:
  """The frozen base of a LoRA run from ``cfg.model.init_checkpoint`` as its RL checkpoints leave it out:
  the folder's weights in ``cfg.model.param_dtype`` on the default device, as a pure dict
  (``nnx.to_pure_dict``'s layout, as :func:`daca_jax.run.eval_models.read_trained_params` returns a
  stored base), after the folder is checked against ``workdir``'s fingerprint record.

  Raises:
    DataError: the folder moved, changed since the run started, or was never recorded
      (:func:`daca_jax.models.hf_fingerprint.check_source`); a malformed file.
  """
  hf_fingerprint.check_source(workdir, cfg.model.init_checkpoint)
  files = checkpoint_loader.open_checkpoint(cfg.model.init_checkpoint)
  _, params = checkpoint_loader.load_params(files, cfg.model, hf_family(files.hf))
  return nnx.to_pure_dict(params)


def _total_bytes(tree: Any) -> int:
  return sum(int(x.size) * x.dtype.itemsize for x in jax.tree.leaves(tree))


def _device_bytes(tree: Any) -> int:
  """Bytes one device holds of ``tree`` (its first addressable shard of every leaf)."""
  return sum(int(np.prod(x.addressable_shards[0].data.shape)) * x.dtype.itemsize for x in jax.tree.leaves(tree))


def _gib(n: int) -> str:
  return f"{n / 2**30:.2f} GiB"


def reference_note(cfg: TrainConfig, params: Any) -> str:
  """The log line on the reference policy of a full fine-tuning run (``model.lora_rank=0``): a frozen
  copy of the initial weights, and what it costs."""
  return (f"Full fine-tuning (model.lora_rank=0): the reference policy is a frozen copy of the initial "
          f"weights, kept beside the trained policy and Adam's two moments: {_gib(_total_bytes(params))} "
          f"({_gib(_device_bytes(params))} per device) in {cfg.model.param_dtype}.")


def record_source(workdir: pathlib.Path, start: CheckpointStart, has_saved_state: bool) -> None:
  """Records the checkpoint folder's fingerprint in ``workdir/init_checkpoint.json``
  (:func:`daca_jax.models.hf_fingerprint.record_source`, what the export checks); a run resumed from
  saved state first checks that the folder is unchanged since the run started.

  Raises:
    DataError: ``workdir`` holds saved state of a run whose checkpoint folder's files changed since
      (the message names them).
  """
  if has_saved_state and (workdir / hf_fingerprint.RECORD_FILE).exists():
    hf_fingerprint.check_source(workdir, start.files.path)
  if parallel.is_primary():
    hf_fingerprint.record_source(workdir, start.files.path)
