"""Tables and the figure of the policy-gradient fidelity study (:mod:`daca_jax.studies.gradient_study`,
which re-exports these names), from its result dict (``gradient_study.json``).
"""
from __future__ import annotations

from typing import Any, Callable

from daca_jax.errors import DataError


def markdown_table(result: dict[str, Any], at_rollouts: int | None = None) -> str:
  """One row per arm: cosines to the true gradient and the batch agreement."""
  rows = result["rows"]
  reg = "cos_mean_update_regularised" in rows[0]
  head = ["estimator", "credit", "cos(E[update], ∇J)", "cos(one batch, ∇J)", "batch agreement (SNR)"]
  head += [f"cos to ∇J at {at_rollouts} rollouts"] if at_rollouts else []
  head += ["cos(E[update], ∇(J−βKL))"] if reg else []
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for r in rows:
    c0 = r["curve"][0]
    cells = [r["estimator"], r["credit"], f"{r['cos_mean_update']:+.3f}", f"{r['cos_batch']:+.3f}",
             f"{c0['agreement']:+.3f} ({c0['snr']:.3f})"]
    if at_rollouts:
      hit = [c for c in r["curve"] if c["rollouts"] == at_rollouts]
      cells.append(f"{hit[0]['to_true']:+.3f}" if hit else "")
    if reg:
      cells.append(f"{r['cos_mean_update_regularised']:+.3f}")
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines)


def by_estimator_table(result: dict[str, Any]) -> str:
  """One row per estimator of a regularised study: the cosine of its mean update to ∇(J − βKL) and its
  batch agreement under each credit, side by side (credits in the order of the rows).

  Raises:
    DataError: the study has no regularised cosine (only the ``regularised`` study has one).
  """
  rows = result["rows"]
  if not rows or "cos_mean_update_regularised" not in rows[0]:
    raise DataError("this study has no cos(E[update], ∇(J−βKL)) column: only the regularised study has one")
  credits = list(dict.fromkeys(r["credit"] for r in rows))
  by = {(r["estimator"], r["credit"]): r for r in rows}

  def cells(estimator: str, value: Callable[[dict[str, Any]], float]) -> str:
    return " / ".join(f"{value(by[(estimator, c)]):+.3f}" if (estimator, c) in by else "n/a" for c in credits)

  lines = [f"| estimator | cos(E[update], ∇(J−βKL)), {' / '.join(credits)} credit | "
           f"batch agreement, {' / '.join(credits)} |", "|---|---|---|"]
  for e in dict.fromkeys(r["estimator"] for r in rows):
    lines.append(f"| {e} | {cells(e, lambda r: r['cos_mean_update_regularised'])} | "
                 f"{cells(e, lambda r: r['curve'][0]['agreement'])} |")
  return "\n".join(lines)


def report_header(out: dict[str, Any]) -> str:
  """One paragraph saying what the tables are."""
  t = out["task"]
  lc = out["studies"]["low_confidence"]
  return (f"Toy: sort {t['length']} letters of '{t['alphabet']}' ({len(t['alphabet'])}^{t['length']} "
          f"completions enumerated), {t['num_prompts']} prompts, a tiny model after {out['train_steps']} SFT "
          f"steps (expected reward {lc['true']['expected_reward']:.3f} under low-confidence remasking). "
          f"Each arm: {lc['num_batches']} independent batches of {lc['batch_rollouts']} rollouts "
          f"(G = {lc['group_size']}). Columns: cosine of the mean update (over all batches) to the exact "
          "gradient ∇J of the sampler's expected reward (bias of direction); mean cosine of one batch's "
          "update to ∇J; cosine between independent batches (and SNR = c / (1 − c)); the cosine to ∇J "
          "of an update on 4 batches.")


def plot(result: dict[str, Any], png_path: Any) -> None:
  """Two panels against the number of rollouts: batch agreement and cosine to ∇J, one line per
  estimator (credit uniform solid, token_reward dashed)."""
  from matplotlib.backends.backend_agg import FigureCanvasAgg
  from matplotlib.figure import Figure

  fig = Figure(figsize=(11, 4.2))
  FigureCanvasAgg(fig)
  axes = [fig.add_subplot(1, 2, i + 1) for i in range(2)]
  estimators = list(dict.fromkeys(r["estimator"] for r in result["rows"]))
  colors = {e: f"C{i}" for i, e in enumerate(estimators)}
  for r in result["rows"]:
    if r["credit"] not in ("uniform", "token_reward"):
      continue
    xs = [c["rollouts"] for c in r["curve"]]
    style = "-" if r["credit"] == "uniform" else "--"
    label = r["estimator"] if r["credit"] == "uniform" else None
    axes[0].plot(xs, [c["agreement"] for c in r["curve"]], style, color=colors[r["estimator"]], label=label)
    axes[1].plot(xs, [c["to_true"] for c in r["curve"]], style, color=colors[r["estimator"]])
  for ax, name in zip(axes, ("agreement of independent updates (cosine)", "cosine of the update to ∇J")):
    ax.set_xscale("log", base=2)
    ax.set_xlabel("rollouts per update")
    ax.set_ylabel(name)
    ax.grid(alpha=0.3)
  fig.legend(loc="center right", fontsize=8, title="estimator\n(solid: uniform credit,\ndashed: token reward)")
  fig.tight_layout(rect=(0, 0, 0.82, 1))
  fig.savefig(str(png_path), dpi=110)
