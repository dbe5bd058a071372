"""A trajectory view as one self-contained HTML file (no scripts, no external files).

Each rollout group is a table: rows are sequences (best reward first, the reward on the left), columns
completion positions; a cell holds the committed token's text on the colour of its commit step, and its
hover title gives the numbers (position, commit step, confidence at commit, every credit weight, Δ_s of
the commit step). A second table per group gives Δ_s per step.
"""
from __future__ import annotations

import html
import os
from typing import Sequence

from daca_jax.io_utils import atomic_write_text
from daca_jax.viz.trajectory import TrajectoryView

_STYLE = """
body { font-family: sans-serif; font-size: 13px; margin: 1em; }
table.traj { border-collapse: collapse; margin: 0.4em 0 1.2em 0; }
table.traj td { font-family: monospace; min-width: 1.4em; padding: 2px 3px; text-align: center;
  border: 1px solid #fff; }
table.traj td.r { font-family: sans-serif; text-align: right; padding-right: 0.6em; white-space: nowrap; }
table.traj td.pad { opacity: 0.35; }
.legend span { display: inline-block; padding: 1px 6px; font-family: monospace; }
pre.prompt { background: #f4f4f4; padding: 0.4em; white-space: pre-wrap; }
"""


def _hex(rgba: Sequence[float]) -> str:
  return "#" + "".join(f"{int(round(255 * x)):02x}" for x in rgba[:3])


def _text_colour(rgba: Sequence[float]) -> str:
  return "#fff" if 0.299 * rgba[0] + 0.587 * rgba[1] + 0.114 * rgba[2] < 0.5 else "#000"


def cell_title(view: TrajectoryView, row: int, col: int) -> str:
  """The hover text of one cell: position, commit step, confidence, weights, Δ_s of the commit step."""
  s = int(view.commit_step[row, col])
  parts = [f"position {col}", f"token id {int(view.token_ids[row, col])}", f"commit step {s}",
           f"confidence at commit {view.commit_conf[row, col]:.4f}"]
  parts += [f"{name} weight {w[row, col]:.4f}" for name, w in view.weights.items()]
  if view.step_progress is not None and 0 <= s < view.step_progress.shape[1]:
    parts.append(f"Δ_s of step {s} {view.step_progress[row, s]:+.4f}")
  if not view.valid[row, col]:
    parts.append("after the first EOS (not trained on)")
  return " · ".join(parts)


def view_html(view: TrajectoryView) -> str:
  """One view's section: prompt, token grid and Δ_s table."""
  from matplotlib import colormaps

  cmap = colormaps["viridis"]
  denom = max(view.num_steps - 1, 1)
  out = [f"<pre class='prompt'>{html.escape(view.prompt)}</pre>", "<table class='traj'>"]
  for r in range(len(view.rewards)):
    cells = [f"<td class='r'>r={view.rewards[r]:.2f}</td>"]
    for c in range(view.token_ids.shape[1]):
      rgba = cmap(view.commit_step[r, c] / denom)
      cls = "" if view.valid[r, c] else " class='pad'"
      cells.append(f"<td{cls} style='background:{_hex(rgba)};color:{_text_colour(rgba)}' "
                   f"title='{html.escape(cell_title(view, r, c), quote=True)}'>"
                   f"{html.escape(view.text[r][c])}</td>")
    out.append("<tr>" + "".join(cells) + "</tr>")
  out.append("</table>")
  if view.step_progress is not None:
    out.append("<div>DPS step progress Δ_s per denoising step (rows as above):</div><table class='traj'>")
    out.append("<tr><td class='r'>step</td>" + "".join(f"<td>{s}</td>" for s in range(view.num_steps)) + "</tr>")
    for r in range(len(view.rewards)):
      out.append(f"<tr><td class='r'>r={view.rewards[r]:.2f}</td>" + "".join(
          f"<td title='step {s}: Δ_s {d:+.4f}'>{d:+.2f}</td>" for s, d in enumerate(view.step_progress[r]))
                 + "</tr>")
    out.append("</table>")
  return "\n".join(out)


def render_html(views: Sequence[TrajectoryView], path: str | os.PathLike, title: str = "") -> None:
  """Writes the views as one self-contained HTML page (atomically).

  Raises:
    ValueError: no views.
  """
  from matplotlib import colormaps

  if not views:
    raise ValueError("render_html needs at least one TrajectoryView")
  cmap = colormaps["viridis"]
  steps = max(v.num_steps for v in views)
  legend = "".join(
      f"<span style='background:{_hex(cmap(s / max(steps - 1, 1)))};color:{_text_colour(cmap(s / max(steps - 1, 1)))}'>"
      f"{s}</span>" for s in range(steps))
  body = [f"<h2>{html.escape(title or 'Denoising trajectories')}</h2>",
          "<p>Rows: sequences of one rollout group, best reward first. Cells: the committed token, coloured "
          "by the denoising step that committed it; hover a cell for its numbers. Faded cells come after "
          f"the first EOS.</p><p class='legend'>commit step: {legend}</p>"]
  body += [view_html(v) for v in views]
  page = ("<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
          f"<title>{html.escape(title or 'trajectories')}</title><style>{_STYLE}</style></head>"
          "<body>\n" + "\n".join(body) + "\n</body></html>\n")
  atomic_write_text(os.fspath(path), page)
