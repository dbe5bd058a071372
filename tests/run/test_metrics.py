"""Tests for daca_jax.run.metrics: JSONL writer/reader, truncation on resume, plots, tables."""
from __future__ import annotations

import json
import math

import jax.numpy as jnp
import numpy as np
import pytest

from daca_jax.run import metrics as metrics_lib


def test_write_converts_values_and_reads_back(tmp_path):
  path = tmp_path / "logs" / "metrics.jsonl"
  with metrics_lib.MetricsWriter(path) as w:
    w.write(0, {
        "loss": jnp.float32(0.25),
        "acc": np.float64(0.5),
        "n": np.int64(3),
        "count": jnp.array(7, jnp.int32),
        "ok": np.bool_(True),
        "lr": 1e-3,
        "hist": jnp.array([1.0, 2.0]),
        "bf": jnp.array(1.5, jnp.bfloat16),
        "name": "grpo",
        "nested": {"a": np.float32(2.0)},
    })
    w.write(np.int64(1), {"loss": 0.125, "step": 1})
  lines = path.read_text().splitlines()
  assert len(lines) == 2
  first = json.loads(lines[0])
  assert first == {
      "step": 0, "loss": 0.25, "acc": 0.5, "n": 3, "count": 7, "ok": True, "lr": 1e-3,
      "hist": [1.0, 2.0], "bf": 1.5, "name": "grpo", "nested": {"a": 2.0},
  }
  assert type(first["n"]) is int and type(first["count"]) is int and type(first["loss"]) is float
  assert list(first)[0] == "step"
  assert metrics_lib.read_metrics(path) == [first, {"step": 1, "loss": 0.125}]


def test_non_finite_values_are_strict_json_and_round_trip(tmp_path):
  path = tmp_path / "m.jsonl"
  with metrics_lib.MetricsWriter(path) as w:
    w.write(1, {"a": float("nan"), "b": jnp.float32(jnp.inf), "c": -math.inf, "d": [np.nan]})
  text = path.read_text()
  # Strict JSON: no bare NaN/Infinity tokens.
  json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
  assert '"NaN"' in text and '"Infinity"' in text and '"-Infinity"' in text
  (rec,) = metrics_lib.read_metrics(path)
  assert math.isnan(rec["a"]) and rec["b"] == math.inf and rec["c"] == -math.inf
  assert math.isnan(rec["d"][0])


def test_write_errors(tmp_path):
  w = metrics_lib.MetricsWriter(tmp_path / "m.jsonl")
  with pytest.raises(TypeError, match="'bad'"):
    w.write(0, {"bad": object()})
  with pytest.raises(ValueError, match="differs"):
    w.write(3, {"step": 4})
  with pytest.raises(TypeError):
    w.write(1.5, {"x": 1})
  w.close()
  with pytest.raises(ValueError, match="closed"):
    w.write(0, {"x": 1})
  assert (tmp_path / "m.jsonl").read_text() == ""  # nothing half-written by the failed calls


def test_each_line_is_flushed(tmp_path):
  path = tmp_path / "m.jsonl"
  w = metrics_lib.MetricsWriter(path)
  w.write(0, {"x": 1})
  assert metrics_lib.read_metrics(path) == [{"step": 0, "x": 1}]  # before close
  w.close()


def test_truncate_after_for_resume(tmp_path):
  path = tmp_path / "m.jsonl"
  with metrics_lib.MetricsWriter(path) as w:
    for step in range(6):
      w.write(step, {"loss": float(step)})
  # Simulate a process killed mid-write.
  with open(path, "a") as f:
    f.write('{"step": 6, "lo')
  with metrics_lib.MetricsWriter(path) as w:  # the resumed run, restored from checkpoint 3
    w.truncate_after(3)
    assert [r["step"] for r in metrics_lib.read_metrics(path)] == [0, 1, 2, 3]
    w.write(4, {"loss": 40.0})
  records = metrics_lib.read_metrics(path)
  assert [r["step"] for r in records] == [0, 1, 2, 3, 4]
  assert records[-1]["loss"] == 40.0
  assert not (tmp_path / "m.jsonl.tmp").exists()


def test_reopen_cuts_half_written_last_line(tmp_path):
  path = tmp_path / "m.jsonl"
  path.write_text('{"step": 0, "x": 1}\n{"step": 1, "x"')
  with metrics_lib.MetricsWriter(path) as w:
    w.write(1, {"x": 2})
  assert path.read_text() == '{"step": 0, "x": 1}\n{"step": 1, "x": 2}\n'


def test_read_metrics_tolerates_only_a_broken_last_line(tmp_path):
  path = tmp_path / "m.jsonl"
  path.write_text('{"step": 0, "x": 1}\n\n{"step": 1, "x": 2}\n{"step": 2, "x": \n')
  assert metrics_lib.read_metrics(path) == [{"step": 0, "x": 1}, {"step": 1, "x": 2}]
  path.write_text('{"step": 0, "x": 1}\n{"step": 1, "x\n{"step": 2, "x": 3}\n')
  with pytest.raises(ValueError, match=":2:"):
    metrics_lib.read_metrics(path)
  with pytest.raises(FileNotFoundError):
    metrics_lib.read_metrics(tmp_path / "missing.jsonl")


def _png_ok(path) -> bool:
  data = path.read_bytes()
  return len(data) > 1000 and data[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_curves_writes_png(tmp_path):
  records = [{"step": s, "loss": 1.0 / (s + 1), "acc": s / 10, "note": "x"} for s in range(10)]
  records.append({"step": 10, "loss": float("nan")})
  png = tmp_path / "plots" / "curves.png"
  metrics_lib.plot_curves(records, ["loss", "acc", "missing", "note"], png, title="run")
  assert _png_ok(png)


def test_plot_curves_no_data(tmp_path):
  empty = tmp_path / "empty.png"
  metrics_lib.plot_curves([], ["loss"], empty, title="empty")
  assert _png_ok(empty)
  nokeys = tmp_path / "nokeys.png"
  metrics_lib.plot_curves([{"step": 0, "a": 1.0}], ["b"], nokeys)
  assert _png_ok(nokeys)
  with_data = tmp_path / "data.png"
  metrics_lib.plot_curves([{"step": 0, "b": 1.0}, {"step": 1, "b": 2.0}], ["b"], with_data)
  assert with_data.read_bytes() != nokeys.read_bytes()


def test_format_table_alignment():
  table = metrics_lib.format_table(
      [["grpo", 0.5, 10], ["daca-grpo", np.float32(0.123456), jnp.array(7)], ["x", 12.0, 100]],
      ["method", "acc", "steps"],
  )
  assert table == (
      "method         acc  steps\n"
      "---------  -------  -----\n"
      "grpo        0.5000     10\n"
      "daca-grpo   0.1235      7\n"
      "x          12.0000    100"
  )
  lines = table.splitlines()
  assert len({len(line) for line in lines}) == 1  # right-aligned last column -> equal widths
  # Every column starts at the same offset on every line (separated by two spaces).
  starts = [i for i, ch in enumerate(lines[1]) if ch == "-" and (i == 0 or lines[1][i - 1] == " ")]
  assert starts == [0, 11, 20]


def test_format_table_mixed_column_and_errors():
  table = metrics_lib.format_table([["a", None], ["bb", 1.0]], ["k", "v"])
  assert table.splitlines() == ["k   v", "--  ------", "a   None", "bb  1.0000"]
  with pytest.raises(ValueError, match="row 0"):
    metrics_lib.format_table([[1, 2, 3]], ["a", "b"])


def test_reward_curve_has_labelled_axes_a_legend_outside_the_data_and_eval_points(tmp_path):
  records = [{"step": i, "reward_mean": 0.5 + 0.01 * i} for i in range(1, 11)]
  fig = metrics_lib.plot_curves(records, ["reward_mean"], tmp_path / "c.png",
                                points={"test acc (before / after RL)": [(0, 0.2), (10, 0.3)]})
  ax = fig.axes[0]
  assert ax.get_xlabel() == "RL iteration" and ax.get_ylabel()
  fig.canvas.draw()
  renderer = fig.canvas.get_renderer()
  assert ax.get_legend().get_window_extent(renderer).x0 >= ax.get_window_extent(renderer).x1
  pts = next(line for line in ax.get_lines() if line.get_label().startswith("test acc"))
  assert list(pts.get_xdata()) == [0, 10] and pts.get_marker() == "D"
