"""Metrics logging (JSON lines), curves (PNG) and a plain-text results table (progress bars:
:mod:`daca_jax.progress`).

JSONL format: one object per line, ``{"step": <int>, "<name>": <value>, ...}``. Values are Python
ints, floats, bools, strings, None, lists or dicts; jax/numpy scalars and arrays are converted with
``.item()`` / ``.tolist()``. The file is strict JSON: non-finite floats are written as the strings
``"NaN"``, ``"Infinity"`` and ``"-Infinity"``, and :func:`read_metrics` turns exactly these strings
back into floats.
"""
from __future__ import annotations

import io
import json
import math
import numbers
import os
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from daca_jax import storage
from daca_jax.errors import DataError
from daca_jax.io_utils import atomic_write_text

_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _float_to_json(x: float) -> float | str:
  if math.isnan(x):
    return "NaN"
  if math.isinf(x):
    return "Infinity" if x > 0 else "-Infinity"
  return x


def _to_json(value: Any, name: str) -> Any:
  """Converts ``value`` to JSON-ready Python values; raises TypeError naming ``name`` otherwise."""
  if value is None or isinstance(value, (bool, str)):
    return value
  if isinstance(value, numbers.Integral):
    return int(value)
  if isinstance(value, numbers.Real):
    return _float_to_json(float(value))
  if isinstance(value, Mapping):
    return {str(k): _to_json(v, f"{name}.{k}") for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [_to_json(v, f"{name}[{i}]") for i, v in enumerate(value)]
  if hasattr(value, "__array__") and hasattr(value, "dtype"):  # numpy / jax arrays and scalars
    arr = np.asarray(value)
    if arr.dtype.kind in "biuf" or arr.dtype.name == "bfloat16":
      if arr.dtype.name == "bfloat16" or arr.dtype.kind == "f":
        arr = arr.astype(np.float64)
      return _to_json(arr.item() if arr.ndim == 0 else arr.tolist(), name)
  raise TypeError(
      f"metric {name!r} has a value of type {type(value).__name__}; expected a number, string, "
      "bool, None, numeric array or a list/dict of those"
  )


def _from_json(value: Any) -> Any:
  if isinstance(value, str):
    return _NON_FINITE.get(value, value)
  if isinstance(value, list):
    return [_from_json(v) for v in value]
  if isinstance(value, dict):
    return {k: _from_json(v) for k, v in value.items()}
  return value


def _parse_record(line: str) -> dict[str, Any]:
  """One JSONL line as a record; raises ValueError unless it is an object with an integer step."""
  record = json.loads(line)
  if not isinstance(record, dict) or isinstance(record.get("step"), bool) \
      or not isinstance(record.get("step"), int):
    raise ValueError("not a JSON object with an integer 'step' field")
  return record


def _parse_lines(text: str, path: str, log: Callable[[str], None] | None) -> list[tuple[str, dict]]:
  """``(line, record)`` pairs of JSONL ``text``. A broken *last* line (killed writer) is dropped;
  another malformed line raises, or, with ``log``, is dropped with one warning line."""
  lines = text.split("\n")
  out = []
  for i, line in enumerate(lines):
    if not line.strip():
      continue
    try:
      out.append((line, _parse_record(line)))
    except ValueError as e:
      if all(not rest.strip() for rest in lines[i + 1:]):
        break  # half-written last line
      if log is None:
        raise DataError(f"{path}:{i + 1}: malformed metrics line ({e}): {line[:80]!r}; delete that "
                        "line (or the file) to use the log") from None
      log(f"WARNING: {path}:{i + 1}: skipped a malformed metrics line ({e}): {line[:80]!r}")
  return out


def read_metrics(path: str | os.PathLike, log: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
  """Reads a metrics JSONL file into a list of dicts, in file order.

  A malformed last line (left by a process killed mid-write) is ignored. ``"NaN"``,
  ``"Infinity"`` and ``"-Infinity"`` strings come back as floats.

  Args:
    path: the file.
    log: if given, any other malformed line is skipped with one warning line through ``log``
      instead of raising.
  Raises:
    FileNotFoundError: ``path`` does not exist.
    DataError: (a ValueError) without ``log``, a line other than the last is not a JSON object with
      an integer ``"step"`` field; the message names the file and line.
  """
  path = os.fspath(path)
  text = storage.read_bytes(path).decode("utf-8", errors="replace")
  return [_from_json(r) for _, r in _parse_lines(text, path, log)]


class _RemoteAppend:
  """A text "file" opened for appending on GCS: each flushed write appends to the object
  (:func:`daca_jax.storage.append_bytes`)."""

  def __init__(self, path: str):
    self.path, self.closed, self._pending = path, False, ""
    if not storage.exists(path):  # as open(path, "a") makes the file
      storage.write_bytes(path, b"")

  def write(self, text: str) -> None:
    self._pending += text

  def flush(self) -> None:
    if self._pending:
      storage.append_bytes(self.path, self._pending.encode("utf-8"))
      self._pending = ""

  def close(self) -> None:
    if not self.closed:
      self.flush()
      self.closed = True


class MetricsWriter:
  """Appends metrics to a JSONL file, one flushed line per :meth:`write`.

  Opening an existing file continues it; if it ends in a half-written line (process killed
  mid-write), that fragment is cut off first so the next record starts on its own line.

  Args:
    path: the JSONL file; parent directories are created.
    log: where :meth:`truncate_after` reports malformed lines it drops.
    mirror: called as ``mirror(step, record)`` after each written line, with the record as
      :func:`read_metrics` would return it (e.g. :class:`daca_jax.run.dashboards.PhaseSink`, which writes
      the same scalars to TensorBoard / W&B).

  Usable as a context manager (closes the file on exit).
  """

  def __init__(self, path: str | os.PathLike, log: Callable[[str], None] = print,
               mirror: Callable[[int, dict[str, Any]], None] | None = None):
    self.path = storage.absolute(path)
    self._log = log
    self._mirror = mirror
    self._remote = storage.is_remote(self.path)
    if not self._remote:
      os.makedirs(os.path.dirname(self.path), exist_ok=True)
    self._drop_partial_last_line()
    self._file = _RemoteAppend(self.path) if self._remote else open(self.path, "a", encoding="utf-8")

  def _drop_partial_last_line(self) -> None:
    if not storage.exists(self.path):
      return
    if self._remote:
      data = storage.read_bytes(self.path)
      if data and not data.endswith(b"\n"):
        storage.write_bytes(self.path, data[:data.rfind(b"\n") + 1])
      return
    with open(self.path, "rb+") as f:
      data = f.read()
      if data and not data.endswith(b"\n"):
        f.truncate(data.rfind(b"\n") + 1)

  def write(self, step: int, metrics: Mapping[str, Any]) -> None:
    """Appends ``{"step": step, **metrics}`` as one line and flushes it.

    Args:
      step: integer step (Python, numpy or 0-d jax integer).
      metrics: name -> value; values as described in the module docstring. A ``"step"`` key is
        allowed only if it equals ``step``.

    Raises:
      TypeError: a value cannot be converted (message names the metric) or ``step`` is not an
        integer.
      ValueError: ``metrics["step"]`` differs from ``step``, or the writer is closed.
    """
    if self._file.closed:
      raise ValueError(f"MetricsWriter for {self.path} is closed")
    if isinstance(step, bool) or not isinstance(_to_json(step, "step"), int):
      raise TypeError(f"step must be an integer, got {step!r}")
    step = int(step)
    if "step" in metrics and _to_json(metrics["step"], "step") != step:
      raise ValueError(f"metrics['step']={metrics['step']!r} differs from step={step}")
    record = {"step": step}
    for name, value in metrics.items():
      if name != "step":
        record[str(name)] = _to_json(value, str(name))
    self._file.write(json.dumps(record, allow_nan=False) + "\n")
    self._file.flush()
    if self._mirror is not None:
      self._mirror(step, _from_json(record))

  def truncate_after(self, step: int) -> None:
    """Removes every record with ``"step" > step`` (and a half-written last line).

    Used when a run resumes from checkpoint ``step``: the records logged after that checkpoint
    are redone by the resumed run, so the log continues without duplicates. Malformed lines (a
    damaged file) are dropped, each reported in one line through ``log``. The file is rewritten
    atomically.
    """
    self._file.close()
    text = storage.read_bytes(self.path).decode("utf-8", errors="replace")
    kept = [line for line, r in _parse_lines(text, self.path, self._log) if r["step"] <= step]
    atomic_write_text(self.path, "".join(line + "\n" for line in kept))
    self._file = _RemoteAppend(self.path) if self._remote else open(self.path, "a", encoding="utf-8")

  def close(self) -> None:
    """Closes the file (idempotent)."""
    self._file.close()

  def __enter__(self) -> MetricsWriter:
    return self

  def __exit__(self, *exc_info: Any) -> None:
    self.close()


def _is_number(x: Any) -> bool:
  return isinstance(x, numbers.Real) and not isinstance(x, bool)


def plot_curves(
    records: Sequence[Mapping[str, Any]],
    keys: Sequence[str],
    png_path: str | os.PathLike,
    title: str = "",
    points: Mapping[str, Sequence[tuple[float, float]]] | None = None,
    xlabel: str = "RL iteration",
    ylabel: str = "metric value",
) -> Any:
  """Plots each metric in ``keys`` against ``"step"`` on one axis and saves a PNG.

  Uses matplotlib's Agg canvas directly (no pyplot, no global backend change). Records without
  a key, or with a non-numeric value for it, are skipped for that key; keys with no numeric
  value at all get no line. With nothing to plot, the PNG shows "no data". The legend sits to the
  right of the axes, outside the data.

  Args:
    records: dicts with a ``"step"`` field, e.g. from :func:`read_metrics`.
    keys: metric names to plot.
    png_path: output file; parent directories are created.
    title: axes title.
    points: label -> ``(step, value)`` pairs drawn as large markers on the same step axis (e.g.
      the test-set evaluation before RL at step 0 and after RL at the last step).
    xlabel / ylabel: axis labels.
  Returns:
    The matplotlib Figure (already saved).
  """
  from matplotlib.backends.backend_agg import FigureCanvasAgg
  from matplotlib.figure import Figure

  fig = Figure(figsize=(8, 4.5), dpi=100)
  FigureCanvasAgg(fig)
  ax = fig.add_subplot(1, 1, 1)
  plotted = 0
  for key in keys:
    xy = sorted(
        (r["step"], float(r[key]))
        for r in records
        if _is_number(r.get("step")) and _is_number(r.get(key))
    )
    if not xy:
      continue
    xs, ys = zip(*xy)
    ax.plot(xs, ys, marker="." if len(xs) < 50 else None, label=key)
    plotted += 1
  for label, pts in (points or {}).items():
    pts = sorted((float(x), float(y)) for x, y in pts if _is_number(x) and _is_number(y))
    if pts:
      xs, ys = zip(*pts)
      ax.plot(xs, ys, linestyle=":", marker="D", markersize=7, label=label)
      plotted += 1
  if plotted:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=8)
  else:
    ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, fontsize=16)
    ax.set_xticks([])
    ax.set_yticks([])
  if title:
    ax.set_title(title, fontsize=10)
  png_path = storage.absolute(png_path)
  if storage.is_remote(png_path):
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", bbox_inches="tight")
    storage.write_bytes(png_path, buffer.getvalue())
  else:
    os.makedirs(os.path.dirname(png_path), exist_ok=True)
    fig.savefig(png_path, format="png", bbox_inches="tight")
  return fig


def _is_numeric_cell(value: Any) -> bool:
  if _is_number(value):
    return True
  return hasattr(value, "dtype") and getattr(value, "ndim", None) == 0 and (
      np.asarray(value).dtype.kind in "iuf" or np.asarray(value).dtype.name == "bfloat16")


def _cell(value: Any) -> str:
  if _is_numeric_cell(value):
    value = np.asarray(value).item() if hasattr(value, "dtype") else value
    return f"{float(value):.4f}" if isinstance(value, float) else str(int(value))
  return str(value)


def format_table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
  """Formats a plain-text table with aligned columns.

  Floats (Python, numpy, 0-d jax) are shown with 4 decimals, integers as they are, anything else
  with ``str``. A column whose cells are all numbers (bools excluded) is right-aligned, header
  included; other columns are left-aligned. Columns are separated by two spaces and the header by
  a dashed rule; lines carry no trailing spaces.

  Example::

    method     acc  steps
    ------  ------  -----
    grpo    0.5000     10
    daca    0.7500     10

  Raises:
    ValueError: a row's length differs from ``len(headers)``.
  """
  headers = [str(h) for h in headers]
  for i, row in enumerate(rows):
    if len(row) != len(headers):
      raise ValueError(f"row {i} has {len(row)} cells, expected {len(headers)} (headers)")
  cells = [[_cell(v) for v in row] for row in rows]
  right = [bool(rows) and all(_is_numeric_cell(row[j]) for row in rows)
           for j in range(len(headers))]
  widths = [max([len(h)] + [len(c[j]) for c in cells]) for j, h in enumerate(headers)]

  def line(values: Sequence[str]) -> str:
    return "  ".join(
        v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right)
    ).rstrip()

  out = [line(headers), line(["-" * w for w in widths])] + [line(c) for c in cells]
  return "\n".join(out)


def reward_trend(records: Sequence[dict[str, Any]], window: int = 20) -> dict[str, float]:
  """Whether the training reward rose: mean ``reward_mean`` of the first and the last ``window``
  RL iterations (fewer when the run is shorter), or {} when no record has a reward.

  Returns:
    ``{"first_mean", "last_mean", "window", "iterations"}``.
  """
  reward = [float(r["reward_mean"]) for r in records if "reward_mean" in r]
  if not reward:
    return {}
  n = min(window, len(reward))
  return {"first_mean": float(np.mean(reward[:n])), "last_mean": float(np.mean(reward[-n:])), "window": n,
          "iterations": len(reward)}
