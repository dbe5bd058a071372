"""A grid's paired verdicts as sentences, generated from its ``results.json`` so that the words never say more
than the table (``experiments/reproduce.py --findings_from=results.json``).

Each paired comparison of the table (:func:`daca_jax.reports.reproduce.markdown`: an arm against its reference
cell of the same task and seed) becomes one line: its verdict, the paired test difference in points (mean ±
95% Student-t interval over seeds, and each seed's value), its raw and Holm-adjusted p-values over the same
family as the table's, and the paired validation difference where both cells recorded one. The verdict words
follow one rule:

* "separates" (ahead of or below the reference) only where the Holm-adjusted p-value is below
  :data:`daca_jax.reports.paired.ALPHA`;
* otherwise "ahead on every seed, without separating" / "below on every seed, without separating" when every
  seed's difference has one sign, else "does not separate (ahead on k[, level on j] of n seeds)".
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from daca_jax.reports.paired import ALPHA, mean_ci95, p_text
from daca_jax.reports.reproduce import Cell, paired_p_values


def _pp(x: float, sign: str = "+") -> str:
  """A fraction in points, rounded as the table rounds the fraction (``+0.110`` is ``+11.0``, never ``+10.9``);
  ``sign=""`` for an interval's half-width."""
  text = f"{float(f'{x:.3f}') * 100:{sign}.1f}"
  return "0.0" if text in ("+0.0", "-0.0") else text


def _reference_row(rows: Sequence[Mapping[str, Any]], row: Mapping[str, Any]) -> Mapping[str, Any] | None:
  """The row of ``row``'s reference arm: of the task's rows with that arm, the one of the same base, else the
  only one."""
  reference = row.get("reference", "base")  # grids written before arms had other references
  same = [r for r in rows if r["task"] == row["task"] and r["metric"] == row["metric"] and r["arm"] == reference]
  own = [r for r in same if r["base"] == row["base"]]
  return own[0] if own else same[0] if len(same) == 1 else None


def _verdict(diffs: Sequence[float], adjusted: float, reference: str) -> str:
  mean = sum(diffs) / len(diffs)
  if adjusted < ALPHA:
    return f"**separates**, {'ahead of' if mean > 0 else 'below'} {reference}"
  if all(d > 0 for d in diffs):
    return f"ahead of {reference} on every seed, without separating"
  if all(d < 0 for d in diffs):
    return f"below {reference} on every seed, without separating"
  ahead, level = sum(d > 0 for d in diffs), sum(d == 0 for d in diffs)
  return (f"does not separate from {reference} (ahead on {ahead}" + (f", level on {level}" if level else "")
          + f" of {len(diffs)} seeds)")


def _validation(cells: Mapping[str, Any], row: Mapping[str, Any], ref: Mapping[str, Any]) -> list[float] | None:
  """Each seed's paired validation difference (after RL), or None where a cell did not record one."""
  out = []
  for seed in row["seeds"]:
    pair = [cells.get(Cell(r["task"], r["base"], r["arm"], seed).key, {}).get("val_after", {}).get(row["metric"])
            for r in (row, ref)]
    if None in pair:
      return None
    out.append(pair[0] - pair[1])
  return out


def findings(results: Mapping[str, Any]) -> str:
  """The verdict lines of a grid's ``results.json`` (``{"rows": [...], "cells": {...}}``), one per paired row,
  in the table's order (module docstring); "" when the grid has no paired comparison."""
  rows, cells = results["rows"], results.get("cells", {})
  raw, adjusted, families = paired_p_values(rows)  # the table's own, so that the two never disagree
  lines = []
  for i, row in enumerate(rows):
    ref = _reference_row(rows, row) if "vs_base_mean" in row else None
    if ref is None:
      continue
    values = dict(zip(ref["seeds"], ref["values"]))
    diffs = [v - values[s] for s, v in zip(row["seeds"], row["values"]) if s in values]
    if len(diffs) < 2 or math.isnan(adjusted[i]):
      continue
    m, ci = mean_ci95(diffs)
    family = families[(row["task"], row["metric"])]
    size = sum(not math.isnan(raw[j]) for j in family)
    # an arm name several bases share ("+SML") is named with its base
    name = lambda r: f"{r['base']} {r['arm']}" if sum(rows[j]["arm"] == r["arm"] for j in family) > 1 else r["arm"]
    text = (f"- **{name(row)}** ({row['task']}): {_verdict(diffs, adjusted[i], name(ref))}: {_pp(m)} ± "
            f"{_pp(ci, '')} test points ({' / '.join(_pp(d) for d in diffs)}; p {p_text(raw[i])}, Holm over "
            f"{size} {p_text(adjusted[i])})")
    val = _validation(cells, row, ref)
    if val is not None:
      vm, vci = mean_ci95(val)
      text += f"; validation {_pp(vm)} ± {_pp(vci, '')} ({' / '.join(_pp(d) for d in val)})"
    lines.append(text + ".")
  return "\n".join(lines)


__all__ = ["findings"]
