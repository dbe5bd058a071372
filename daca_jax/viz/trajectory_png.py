"""A trajectory view as a PNG (matplotlib's Agg canvas, no pyplot, no global backend change).

Per view (one rollout group), stacked panels that share rows (sequences, best reward first, the reward
on the left): the committed tokens coloured by commit step; the confidence at commit; one panel per
credit's token weights (white = 1, the uniform weight); and Δ_s per denoising step.
"""
from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

from daca_jax.viz.trajectory import TrajectoryView

# Cell text is drawn only up to this many columns (beyond it the cells are too narrow to read).
MAX_TEXT_COLUMNS = 64
_CELL_W, _ROW_H = 0.42, 0.34  # inches


def _panels(view: TrajectoryView) -> list[tuple[str, np.ndarray, str]]:
  """(title, values [G, columns], kind) of every panel of ``view``, top to bottom."""
  out = [("committed token, coloured by commit step", view.commit_step, "step"),
         ("confidence at commit", view.commit_conf, "prob")]
  out += [(f"{name} weight (1 = uniform credit)", w, "weight") for name, w in view.weights.items()]
  if view.step_progress is not None:
    out.append(("DPS step progress Δ_s (columns = denoising steps)", view.step_progress, "delta"))
  return out


def _norm_cmap(kind: str, values: np.ndarray, num_steps: int) -> tuple[Any, str]:
  from matplotlib import colors

  if kind == "step":
    return colors.Normalize(-0.5, num_steps - 0.5), "viridis"
  if kind == "prob":
    return colors.Normalize(0.0, 1.0), "Blues"
  finite = np.ma.compressed(values)
  finite = finite[np.isfinite(finite)]
  centre = 1.0 if kind == "weight" else 0.0
  span = max(float(np.abs(finite - centre).max()) if finite.size else 0.0, 1e-6)
  return colors.TwoSlopeNorm(centre, centre - span, centre + span), "RdBu_r" if kind == "weight" else "PuOr_r"


def _cell_labels(kind: str, view: TrajectoryView, values: np.ndarray) -> list[list[str]]:
  if kind == "step":
    return view.text
  fmt = "{:.2f}" if kind != "delta" else "{:+.2f}"
  return [["" if v is np.ma.masked else fmt.format(v) for v in row] for row in values]


def draw_view(fig: Any, grid_spec: Any, view: TrajectoryView) -> None:
  """Draws ``view``'s panels into consecutive rows of ``grid_spec`` (one row per panel)."""
  for i, (title, values, kind) in enumerate(_panels(view)):
    ax = fig.add_subplot(grid_spec[i])
    if kind in ("prob", "weight"):  # after the first EOS: not trained on, left out of the colour scale
      values = np.ma.masked_where(~view.valid, values)
    norm, cmap = _norm_cmap(kind, values, view.num_steps)
    im = ax.imshow(values, cmap=cmap, norm=norm, aspect="auto", interpolation="nearest")
    cbar = fig.colorbar(im, ax=ax, fraction=0.02, pad=0.01)
    cbar.ax.tick_params(labelsize=7)
    if kind == "step":
      cbar.set_label("step", fontsize=7)
    g, cols = values.shape
    if kind != "delta":  # positions after the first EOS do not count: hatched
      for r, c in zip(*np.nonzero(~view.valid)):
        ax.add_patch(_hatch(c, r))
    if cols <= MAX_TEXT_COLUMNS:
      labels = _cell_labels(kind, view, values)
      cm = im.get_cmap()
      for r in range(g):
        for c in range(cols):
          if not labels[r][c]:
            continue
          rgba = cm(norm(values[r, c]))
          dark = 0.299 * rgba[0] + 0.587 * rgba[1] + 0.114 * rgba[2] < 0.5
          ax.text(c, r, labels[r][c], ha="center", va="center", color="white" if dark else "black",
                  fontsize=8 if kind == "step" else 6, family="monospace")
    ax.set_yticks(range(g))
    ax.set_yticklabels([f"r={x:.2f}" for x in view.rewards], fontsize=7)
    step = max(1, cols // 20)
    ax.set_xticks(range(0, cols, step))
    ax.tick_params(axis="x", labelsize=7)
    ax.set_xlabel("denoising step" if kind == "delta" else "completion position", fontsize=7, labelpad=1)
    ax.set_title(title, fontsize=8, loc="left", pad=3)


def _hatch(c: int, r: int) -> Any:
  from matplotlib.patches import Rectangle

  return Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, hatch="////", edgecolor="0.55", linewidth=0)


def _short(text: str, limit: int = 110) -> str:
  one_line = text.replace("\n", " ⏎ ")
  return one_line if len(one_line) <= limit else one_line[:limit - 1] + "…"


def render_png(views: Sequence[TrajectoryView], path: str | os.PathLike, title: str = "",
               dpi: int = 110) -> None:
  """Writes the views (stacked, one section per rollout group) as a PNG.

  Args:
    views: from :func:`daca_jax.viz.trajectory.rollout_views` / :func:`~daca_jax.viz.trajectory.group_view`.
    path: output file; parent directories are created.
    title: figure title (e.g. the checkpoint and method).
  Raises:
    ValueError: no views.
  """
  fig = figure(views, title, dpi)
  path = os.fspath(path)
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  fig.savefig(path, format="png", dpi=dpi)


def figure(views: Sequence[TrajectoryView], title: str = "", dpi: int = 110) -> Any:
  """The matplotlib Figure of :func:`render_png` (on an Agg canvas, e.g. for an image summary)."""
  from matplotlib.backends.backend_agg import FigureCanvasAgg
  from matplotlib.figure import Figure

  if not views:
    raise ValueError("render_png needs at least one TrajectoryView")
  cols = max(max(v.token_ids.shape[1], v.num_steps) for v in views)
  heights = [[_ROW_H * len(v.rewards) + 0.55 for _ in _panels(v)] for v in views]
  width = min(max(7.0, _CELL_W * cols + 1.8), 40.0)
  total = sum(sum(h) + 0.45 for h in heights) + (0.35 if title else 0.0)
  fig = Figure(figsize=(width, total), dpi=dpi, layout="constrained")
  FigureCanvasAgg(fig)
  subfigs = fig.subfigures(len(views), 1, height_ratios=[sum(h) + 0.45 for h in heights], squeeze=False)
  for sub, view, h in zip(subfigs[:, 0], views, heights):
    sub.suptitle("prompt: " + _short(view.prompt), fontsize=8, x=0.01, ha="left")
    spec = sub.add_gridspec(len(h), 1, height_ratios=h)
    draw_view(sub, spec, view)
  if title:
    fig.suptitle(title, fontsize=10)
  return fig


def figure_rgb(views: Sequence[TrajectoryView], title: str = "", dpi: int = 80) -> np.ndarray:
  """The figure rendered to uint8 [H, W, 3] (for TensorBoard / W&B image summaries)."""
  fig = figure(views, title, dpi)
  fig.canvas.draw()
  return np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()
