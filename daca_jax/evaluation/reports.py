"""The evaluation summary as ``summary.json`` and a markdown table per task."""
from __future__ import annotations

import json
import os
import pathlib
from typing import Any, Mapping

from daca_jax.io_utils import atomic_write_text


def summary_markdown(summary: Mapping[str, Any]) -> str:
  """One markdown table per task: a row per metric (then examples, seconds, tokens/s), a column per
  generation length."""
  ident = summary["checkpoint"]
  parts = [f"# Evaluation of {ident.get('path', ident['kind'])}", ""]
  for name, entry in summary["tasks"].items():
    res = entry["lengths"]
    lengths = list(res)
    keys = [k for k in res[lengths[0]]["metrics"] if k != "num_examples"]
    rows = [[k] + [f"{res[L]['metrics'][k]:.4f}" for L in lengths] for k in keys]
    rows += [["num_examples"] + [str(res[L]["num_examples"]) for L in lengths],
             ["seconds"] + [f"{res[L]['seconds']:.1f}" for L in lengths],
             ["tokens_per_s"] + [f"{res[L]['tokens_per_s']:.0f}" for L in lengths]]
    grading = entry.get("grading_rules") or "not stated by the task"
    parts += [f"## {name} (primary metric: {entry['primary_metric']})", "", entry["source"], "",
              f"Grading: {grading}", "",
              "| metric | " + " | ".join(f"L={L}" for L in lengths) + " |",
              "|---|" + "---:|" * len(lengths)]
    parts += ["| " + " | ".join(r) + " |" for r in rows]
    parts.append("")
  return "\n".join(parts)


def write_summary(summary: Mapping[str, Any], output_dir: str | os.PathLike) -> None:
  out = pathlib.Path(output_dir)
  out.mkdir(parents=True, exist_ok=True)
  for fname, text in (("summary.json", json.dumps(summary, indent=2)), ("summary.md", summary_markdown(summary))):
    atomic_write_text(out / fname, text)
