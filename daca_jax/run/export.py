"""Export a training run's policy in the layout of the Hugging Face checkpoint it started from
(``experiments/export_hf.py``; the writers are :mod:`daca_jax.models.hf_export`).

:func:`export_workdir` reads the run's config and checks everything that can be checked cheaply
before any parameter is read: the output folder (:func:`check_export_dir`: absent, empty, or an
earlier export of the same run with ``overwrite``; never the source, the workdir or a folder holding or
inside either), that the run started from a checkpoint (``model.init_checkpoint``), that
``adapter_only`` has adapters to write, and that the source folder is the one the run recorded
(:func:`daca_jax.models.hf_fingerprint.check_source`). Then it reads the checkpoint's parameters (not
the optimizer state), verified against their checksum, and writes the export into a hidden temporary
folder renamed into place when complete (:func:`daca_jax.io_utils.atomic_directory`).

A run of the library's tiny byte-level model (no ``model.init_checkpoint``) is refused: the export
format is the source checkpoint's own (its ``config.json``, tokenizer and modelling code), and a
random-initialised byte model has none of them; nothing outside this library could load it, while
``experiments/evaluate.py --workdir`` reads it directly.

Besides the model files the export holds ``daca_export.json``: the workdir, phase and step it came
from, the source folder, and the LoRA settings that were merged or written.
"""
from __future__ import annotations

import dataclasses
import os
import pathlib
from typing import Callable

from daca_jax import storage
from daca_jax.errors import ConfigError, DataError
from daca_jax.io_utils import (atomic_directory, atomic_write_json, check_local_path, check_output_dir, existing_workdir,
                               read_json_cache)
from daca_jax.models import checkpoint_folder, hf_export
from daca_jax.models.hf_fingerprint import check_source, read_record
from daca_jax.run.eval_models import read_trained_params, run_config

PROVENANCE_FILE = "daca_export.json"


@dataclasses.dataclass(frozen=True)
class WorkdirExport:
  """What :func:`export_workdir` wrote: ``output_dir``, the run's ``phase`` / ``step`` and the writer's
  :class:`~daca_jax.models.hf_export.ExportReport`."""

  output_dir: pathlib.Path
  phase: str
  step: int
  report: hf_export.ExportReport


def check_export_dir(output_dir: str | os.PathLike, workdir: pathlib.Path,
                     sources: tuple[pathlib.Path, ...], *, overwrite: bool) -> pathlib.Path:
  """The export folder, refused where writing (or replacing) it could destroy or leak something.

  Refused: a folder that is, holds or lies inside the run's workdir (its checkpoints: ``--overwrite``
  onto ``<workdir>/rl`` would delete them) or a source checkpoint folder; a non-empty folder that is
  not an earlier export of this run (its ``daca_export.json`` names this workdir); an earlier export
  without ``overwrite``. Symlinks are resolved first, so a link to the workdir is the workdir, and
  the folder returned (where the export is written) is the resolved one: a link to a folder, even a
  dangling one, is that folder (the final rename could not put a folder in place of the link), and
  ``a/..`` is ``a``'s parent.

  Args:
    output_dir: ``--output_dir``.
    workdir: the run's workdir (resolved).
    sources: the source checkpoint folders (given and recorded, resolved).
    overwrite: ``--overwrite``: replace an earlier export of this run.
  Returns:
    The export folder, resolved (symlinks followed, ``..`` removed).
  Raises:
    ConfigError: naming ``--output_dir``, the folder it collides with and what is allowed; an empty
      path, a file or a path under a file.
    DataError: a non-empty folder that is not an earlier export of this run, or an earlier export
      without ``overwrite``.
  """
  out = check_output_dir(output_dir, overwrite=True)  # a file is refused; emptiness is decided here
  real = out.resolve()
  local_workdir = () if storage.is_remote(workdir) else (("the run's workdir", workdir),)  # a bucket holds no local folder
  for name, folder in local_workdir + tuple(("the source checkpoint", s) for s in sources):
    if checkpoint_folder.inside(real, folder) or checkpoint_folder.inside(folder, real):
      raise ConfigError("--output_dir", str(output_dir), f"a folder that neither is, holds nor lies inside "
                        f"{name} {folder} (the export must not replace or change it)")
  if real.is_dir() and any(real.iterdir()):
    record = read_json_cache(real / PROVENANCE_FILE, log=lambda _: None)
    if not record or record.get("workdir") != str(workdir):
      raise DataError(f"--output_dir={output_dir} exists, is not empty and is not an earlier export of "
                      f"run {workdir} (no {PROVENANCE_FILE} naming it): choose an empty or new folder")
    if not overwrite:
      raise DataError(f"--output_dir={output_dir} exists and is not empty (an earlier export of this run): "
                      "choose another folder or pass --overwrite to replace it")
  if real.exists() and not real.is_dir():  # a link to a file
    raise DataError(f"--output_dir={output_dir} leads to {real}, a file, not a folder")
  return real


def parse_shard_size(text: str) -> int | str | None:
  """``--max_shard_size``: "" -> None (keep the source's shard files), digits -> bytes, ``<n>KB`` /
  ``MB`` / ``GB`` / ``TB`` -> that string (huggingface_hub's units, powers of 1000).

  Raises:
    ConfigError: anything else, or a size of 0.
  """
  text = text.strip().upper()
  if not text:
    return None
  number, unit = (text, "") if text.isdigit() else (text[:-2], text[-2:])
  if not number.isdigit() or int(number) == 0 or unit not in ("", "KB", "MB", "GB", "TB"):
    raise ConfigError("--max_shard_size", text, "a positive size such as 5GB, 500MB or a number of bytes")
  return int(number) if not unit else text


def export_workdir(workdir: str | os.PathLike, output_dir: str | os.PathLike, *, phase: str = "latest",
                   adapter_only: bool = False, overwrite: bool = False, source: str = "",
                   max_shard_size: int | str | None = None,
                   log: Callable[[str], None] = print) -> WorkdirExport:
  """Writes the policy of ``workdir``'s latest ``phase`` checkpoint to ``output_dir``.

  Args:
    workdir: the run's ``--workdir``.
    output_dir: the export folder (created; must be absent or empty unless ``overwrite``).
    phase: "latest", "rl" or "sft" (:func:`~daca_jax.run.eval_models.read_trained_params`).
    adapter_only: write the LoRA adapters as a PEFT adapter instead of the merged model.
    overwrite: replace an earlier export of this run in ``output_dir``.
    source: the source checkpoint folder when it moved since training ("" = the run's
      ``model.init_checkpoint``); its fingerprint must equal the one recorded at the start of the run.
    max_shard_size: reshard (bytes or e.g. "5GB"); None keeps the source's shard files.
    log: progress lines.
  Raises:
    ConfigError: the run did not start from a Hugging Face checkpoint (``model.init_checkpoint``);
      ``--adapter_only`` for a checkpoint without LoRA adapters; ``--output_dir`` that is, holds or lies
      inside the source or the workdir (:func:`check_export_dir`).
    DataError: a non-empty ``--output_dir`` that is not an earlier export of this run, or is one and
      ``overwrite`` is not set; a source folder that moved, changed
      or was never recorded (:func:`~daca_jax.models.hf_fingerprint.check_source`); a workdir without
      a finished checkpoint; a source whose tensors do not fit the trained parameters.
    CorruptCheckpointError: the checkpoint's parameters differ from those saved.
  """
  wd = existing_workdir(workdir, "--workdir")
  check_local_path(source, "--source")
  cfg = run_config(wd)
  if not cfg.model.init_checkpoint:
    raise ConfigError("model.init_checkpoint", "", f"a Hugging Face checkpoint folder: run {wd} trained the "
                      "library's byte-level model from a random initialisation, which has no Hugging Face "
                      "layout, tokenizer or modelling code to export into (experiments/evaluate.py "
                      "--workdir reads it directly)")
  if adapter_only and not cfg.model.lora_rank:
    raise ConfigError("--adapter_only", True, f"a LoRA run (model.lora_rank > 0): run {wd} fine-tuned every "
                      "weight; export it without --adapter_only")
  src = pathlib.Path(source or cfg.model.init_checkpoint).expanduser().resolve()
  recorded = pathlib.Path(read_record(wd)["path"])
  out = check_export_dir(output_dir, wd, (src, recorded), overwrite=overwrite)
  check_source(wd, src)
  trained = read_trained_params(wd, phase)
  if adapter_only and trained.lora is None:
    raise ConfigError("--adapter_only", True, f"a checkpoint with LoRA adapters: {trained.phase} step "
                      f"{trained.step} of {wd} holds full weights (use --phase=rl, or export without "
                      "--adapter_only)")
  m = cfg.model
  log(f"Exporting {wd} ({trained.phase} step {trained.step}) in the layout of {src}"
      + (f", LoRA r={m.lora_rank} alpha={m.lora_alpha} {'as a PEFT adapter' if adapter_only else 'merged in float32'}"
         if trained.lora is not None else ""))
  with atomic_directory(out, overwrite=overwrite) as tmp:
    if adapter_only:
      # PEFT records the dropout for further training; configs without the field never applied one.
      report = hf_export.write_adapter(src, tmp, trained.lora, rank=m.lora_rank, alpha=m.lora_alpha,
                                       dropout=float(getattr(m, "lora_dropout", 0.0)))
    else:
      report = hf_export.write_merged(src, tmp, trained.base, trained.lora,
                                      lora_scale=m.lora_alpha / m.lora_rank if trained.lora is not None else 0.0,
                                      max_shard_size=max_shard_size)
    atomic_write_json(tmp / PROVENANCE_FILE, {
        "workdir": str(wd), "phase": trained.phase, "step": trained.step, "source": str(src),
        "kind": "peft_adapter" if adapter_only else "merged",
        "lora": None if trained.lora is None else {"rank": m.lora_rank, "alpha": m.lora_alpha,
                                                  "targets": list(m.lora_target_list)}})
  if report.skipped:
    log(f"Not exported (not a regular file inside the source folder): {', '.join(report.skipped)}")
  log(f"Wrote {report.tensors} tensors ({report.total_size / 2**30:.2f} GiB) in {len(report.shards)} file(s)"
      f" and {len(report.copied)} copied file(s) to {out}")
  return WorkdirExport(out, trained.phase, trained.step, report)
