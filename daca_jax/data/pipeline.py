"""grain input pipelines over the TFDS array_record builders of :mod:`daca_jax.data.tfds_builders`.

Typical use::

  rows = load_rows("gsm8k", "test")                      # every source record, in file order
  source = prepare("gsm8k").as_data_source("train")      # random access (tfds.data_source)
  for batch in make_loader(source, batch_size=8, seed=0):  # shuffled, sharded by JAX process
    ...                                                  # batch: list of decoded records

A decoded record is ``{"index": int, "key": str, "row": <the source record>}``.
"""
from __future__ import annotations

import json
import os
from typing import Any, Mapping, Sequence

import grain.python as grain
import tensorflow_datasets as tfds

from daca_jax.data import tfds_builders
from daca_jax.errors import ConfigError


def decode_record(record: Mapping[str, Any]) -> dict[str, Any]:
  """Turns a raw TFDS record (``row``/``key`` as UTF-8 bytes) into Python values.

  Returns:
    ``{"index": int, "key": str, "row": <JSON-decoded source record>}``.
  """
  def text(x: Any) -> str:
    return x.decode("utf-8") if isinstance(x, bytes) else str(x)

  return {"index": int(record["index"]), "key": text(record["key"]), "row": json.loads(text(record["row"]))}


def make_loader(source: Sequence[Any], *, batch_size: int | None = None, seed: int = 0,
                shuffle: bool = True, num_epochs: int | None = 1, shard_index: int | None = None,
                shard_count: int | None = None, drop_remainder: bool = False) -> grain.MapDataset:
  """A grain pipeline over a random-access source (e.g. ``builder.as_data_source(split)``).

  Order of operations: shard (records ``shard_index, shard_index + shard_count, ...``), shuffle
  within the shard (a new permutation each epoch, fixed by ``seed``), repeat, decode
  (:func:`decode_record`), batch. grain's ``IndexSampler``/``DataLoader`` pair is not used: with
  ``drop_remainder=False`` it still reads only ``len // shard_count`` records per shard (grain 0.2.18),
  so the shards would not cover the data.

  Args:
    source: random-access records (``len`` and ``__getitem__``), e.g. a ``tfds.data_source``.
    batch_size: records per batch (a batch is a ``list`` of decoded records); ``None`` = unbatched.
    seed: shuffle seed; the same seed gives the same order on every run.
    shuffle: shuffle the record order (per epoch).
    num_epochs: passes over the data; ``None`` = forever.
    shard_index: this reader's shard; ``None`` together with ``shard_count=None`` shards by JAX
      process (``jax.process_index()`` of ``jax.process_count()``), so every host reads a disjoint part.
    shard_count: number of shards.
    drop_remainder: give every shard the same number of records (``len // shard_count``) and drop a
      partial last batch.

  Returns:
    A ``grain.MapDataset`` (``len``, random access, and ``iter()`` with ``get_state``/``set_state``
    for checkpointing the position).

  Raises:
    ConfigError: a bad batch size, shard index/count pair, or epoch count.
  """
  if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                                 or batch_size < 1):
    raise ConfigError("batch_size", batch_size, "a positive int or None")
  if num_epochs is not None and (isinstance(num_epochs, bool) or not isinstance(num_epochs, int)
                                 or num_epochs < 1):
    raise ConfigError("num_epochs", num_epochs, "a positive int or None (forever)")
  if (shard_index is None) != (shard_count is None):
    raise ConfigError("shard_index/shard_count", (shard_index, shard_count), "both set or both None")
  if shard_count is None:
    import jax  # noqa: PLC0415  only needed for the default sharding

    shard_index, shard_count = jax.process_index(), jax.process_count()
  if not (isinstance(shard_count, int) and shard_count >= 1 and isinstance(shard_index, int)
          and 0 <= shard_index < shard_count):
    raise ConfigError("shard_index/shard_count", (shard_index, shard_count),
                      "ints with 0 <= shard_index < shard_count")
  ds = grain.MapDataset.source(source)
  if drop_remainder:
    ds = ds[:len(ds) // shard_count * shard_count]
  ds = ds[shard_index::shard_count]
  if shuffle:
    ds = ds.shuffle(seed=seed)
  if num_epochs != 1:
    ds = ds.repeat(num_epochs)
  ds = ds.map(decode_record)
  if batch_size is not None:
    ds = ds.batch(batch_size, drop_remainder=drop_remainder, batch_fn=list)
  return ds


def prepare(benchmark: str, *, data_dir: str | os.PathLike[str] | None = None,
            source_dir: str | os.PathLike[str] | None = None, download: str = "auto",
            config: Any = None) -> tfds.core.DatasetBuilder:
  """Builds (once; later calls reuse it) the TFDS dataset of ``benchmark`` as array_record.

  Args:
    benchmark: a key of :data:`daca_jax.data.tfds_builders.BUILDERS` (``"gsm8k"``, ``"math500"``,
      ``"mbpp"``, ``"humaneval"``, ``"sudoku_d1"``, ``"countdown_d1"``, ``"jsonschemabench"``,
      ``"task_generated"``).
    data_dir: TFDS data dir (where the array_record files go); ``None`` = TFDS's default.
    source_dir: local copy of the source files (file builders; see ``_FileBuilder``).
    download: ``"auto"``, ``"never"`` or ``"always"`` (file builders).
    config: builder config (``"task_generated"``: see ``tfds_builders.task_generated_config``).

  Returns:
    The prepared builder (``builder.as_data_source(split)`` gives random access).

  Raises:
    ConfigError: unknown ``benchmark``.
    DataError: the source files are missing and downloads are not allowed.
  """
  cls = tfds_builders.BUILDERS.get(benchmark)
  if cls is None:
    raise ConfigError("benchmark", benchmark, f"one of {sorted(tfds_builders.BUILDERS)}")
  kwargs: dict[str, Any] = {"data_dir": None if data_dir is None else os.fspath(data_dir)}
  if config is not None:
    kwargs["config"] = config
  if cls is not tfds_builders.DacaTaskGenerated:
    kwargs.update(source_dir=source_dir, download=download)
  builder = cls(**kwargs)
  tfds.disable_progress_bar()  # one build per benchmark; its per-split bars only clutter the logs
  builder.download_and_prepare(
      file_format="array_record",
      download_config=tfds.download.DownloadConfig(try_download_gcs=False))
  return builder


def load_rows(benchmark: str, split: str, *, data_dir: str | os.PathLike[str] | None = None,
              source_dir: str | os.PathLike[str] | None = None, download: str = "auto",
              config: Any = None, with_keys: bool = False) -> list[Any]:
  """Every record of a benchmark split, in source order, read through TFDS and grain.

  Args:
    benchmark, data_dir, source_dir, download, config: as in :func:`prepare`.
    split: a split of the benchmark (e.g. ``"test"``; ``"github_easy"`` for JSONSchemaBench).
    with_keys: return decoded records (``{"index", "key", "row"}``) instead of the rows alone.

  Returns:
    The source records (dicts for JSONL/JSON/CSV rows; schemas for JSONSchemaBench;
    ``{"prompt", "target", "meta"}`` for ``task_generated``), in their source order.

  Raises:
    ConfigError / DataError: see :func:`prepare`; ValueError: unknown split.
  """
  builder = prepare(benchmark, data_dir=data_dir, source_dir=source_dir, download=download, config=config)
  if split not in builder.info.splits:
    raise ConfigError("split", split, f"one of {sorted(builder.info.splits)} for {benchmark!r}")
  source = builder.as_data_source(split)
  records = list(make_loader(source, shuffle=False, shard_index=0, shard_count=1))
  records.sort(key=lambda r: r["index"])  # array_record stores records in hashed-key order
  return records if with_keys else [r["row"] for r in records]
