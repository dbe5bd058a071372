"""Trajectory pictures of a checkpoint: the logic of ``experiments/visualize.py`` (application layer:
it loads checkpoints and builds tasks; the drawing lives in :mod:`daca_jax.viz`)."""
from __future__ import annotations

import pathlib
from typing import Any, Sequence

import jax

from daca_jax.errors import ConfigError
from daca_jax.io_utils import check_dir_path, make_dir
from daca_jax.config.configure import train_config_from_dict
from daca_jax.viz.trajectory import check_credits, credit_learners, rollout_views
from daca_jax.viz.trajectory_html import render_html
from daca_jax.viz.trajectory_png import render_png


def default_credits(run_credit: str) -> list[str]:
  """DPS, plus the run's own credit when it is another sequence-level one."""
  from daca_jax.credit import CREDIT

  extra = [] if run_credit == "dps" or CREDIT.get(run_credit).needs_token_rewards else [run_credit]
  return ["dps"] + extra


def visualize_checkpoint(*, workdir: str = "", phase: str = "latest", random_init: Any = None,
                         num_prompts: int = 2, credits: Sequence[str] = (), seed: int = 0,
                         output_dir: str | pathlib.Path, dpi: int = 110) -> list[pathlib.Path]:
  """Draws one rollout group per evaluation prompt of a run's checkpoint (or a random model).

  Args:
    workdir: an ``experiments/train.py`` workdir (its ``config.json`` and latest / ``phase`` checkpoint).
    phase: "latest", "rl" or "sft".
    random_init: a config (mapping / ConfigDict) whose randomly initialised model is drawn instead.
    num_prompts: how many evaluation prompts (one group of ``rl.group_size`` completions each).
    credits: credit assigners whose weights get a panel (default :func:`default_credits`).
    seed: the rollout's PRNG seed.
    output_dir: receives ``trajectories.png`` and ``trajectories.html``.
    dpi: the PNG's resolution.
  Returns:
    The written paths.
  Raises:
    ConfigError: ``num_prompts`` < 1 or more than the evaluation set, an unknown credit, an
      ``output_dir`` that is empty, a file or under one, or a bad checkpoint source (see
      :func:`daca_jax.run.eval_models.load_model`).
  """
  from daca_jax.run.eval_models import load_model
  from daca_jax.run.task_views import build_task

  if isinstance(num_prompts, bool) or not isinstance(num_prompts, int) or num_prompts < 1:
    raise ConfigError("--num_prompts", num_prompts, "a positive integer")
  if isinstance(dpi, bool) or not isinstance(dpi, int) or not 30 <= dpi <= 600:
    raise ConfigError("--dpi", dpi, "an integer in [30, 600]")
  check_credits(credits)
  check_dir_path(output_dir, "--output_dir")  # empty or a file: refused before the model is loaded
  cfg_in = train_config_from_dict(random_init) if random_init is not None else None
  model = load_model(workdir=workdir, phase=phase, random_init=cfg_in)
  cfg = model.train_config
  task = build_task(cfg, model.tokenizer)  # a run from a checkpoint folder: that folder's tokenizer
  examples, _ = task.eval_examples()
  if num_prompts > len(examples):
    raise ConfigError("--num_prompts", num_prompts, f"<= the {len(examples)} evaluation examples")
  names = list(credits) or default_credits(cfg.rl.credit)
  learner, per_credit = credit_learners(model.logits_fn, cfg, task.tokenizer, names)
  views = rollout_views(learner, model.params, task, examples[:num_prompts], jax.random.PRNGKey(seed),
                        credit_learners_=per_credit)
  ident = model.identity
  where = (f"{pathlib.Path(ident['path']).name} {ident['phase']}/{ident['step']}" if ident["kind"] == "workdir"
           else ident["kind"])
  title = (f"{cfg.task.name}: {cfg.rl.objective} + credit={cfg.rl.credit} — {where} — "
           f"{cfg.rollout.steps} steps, temperature {cfg.rollout.temperature:g}")
  out = make_dir(output_dir)
  png, page = out / "trajectories.png", out / "trajectories.html"
  render_png(views, png, title=title, dpi=dpi)
  render_html(views, page, title=title)
  return [png, page]
