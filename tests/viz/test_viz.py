"""Trajectory views: the grid shows exactly the learner's rollout (fixed-logit model), PNG and HTML."""
import html
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from daca_jax.credit import CREDIT
from daca_jax.diffusion.rollout import make_rollout_fn
from daca_jax.errors import ConfigError
from daca_jax.run.task_views import build_task
from daca_jax.tasks.tokenizer import ByteTokenizer
from daca_jax.viz import credit_learners, group_view, progress_of, render_html, render_png, rollout_views, token_text
from daca_jax.viz.trajectory_png import figure
from tests.fixed_logit_model import jax_logits, make_params
from tests.smoke_config import smoke

G = 4


@pytest.fixture(scope="module")
def drawn():
  """The learner of a uniform-credit run with DPS and DTCA panels, over a fixed-logit model, and the
  views of two Sudoku prompts (one rollout compile for the module)."""
  cfg = smoke(rollout__gen_length=20, rollout__block_length=10, rollout__steps=6, rl__group_size=G,
              rl__credit="uniform")
  task = build_task(cfg)
  tok = task.tokenizer
  params = jax.tree.map(jnp.asarray, make_params(task.prompt_len + cfg.rollout.gen_length, tok.vocab_size, 3))
  learner, per_credit = credit_learners(jax_logits, cfg, tok, ["dps", "dtca"])
  examples = task.eval_examples()[0][:2]
  views = rollout_views(learner, params, task, examples, jax.random.PRNGKey(0), credit_learners_=per_credit)
  return cfg, task, params, learner, per_credit, examples, views


def test_grid_cells_are_the_learners_rollout_sorted_by_reward(drawn, tmp_path):
  cfg, task, params, learner, per_credit, examples, _ = drawn
  tok, p = task.tokenizer, task.prompt_len
  prompts = np.repeat(task.encode_prompts(examples), G, axis=0)
  key = jax.random.PRNGKey(7)
  traj = learner.rollout(params, prompts, key)
  # The learner records more (for the panels), but samples the same tokens as the plain rollout.
  plain = make_rollout_fn(jax_logits, cfg.rollout, mask_id=tok.mask_id, eos_id=tok.eos_id)(params, prompts, key)
  np.testing.assert_array_equal(np.asarray(traj.tokens), np.asarray(plain.tokens))
  np.testing.assert_array_equal(np.asarray(traj.commit_step), np.asarray(plain.commit_step))
  rewards = np.array([0, 0, 0, 0, 0.2, 1.0, 0.5, 1.0], np.float32)  # group 1: rows 4..7
  weights = {n: lrn.assign_credit(traj, rewards, lrn.init_credit_state()).weights for n, lrn in per_credit.items()}
  view = group_view(traj, rewards, tok, range(G, 2 * G), prompt="12", weights=weights,
                    progress=progress_of(traj, cfg))
  order = [5, 7, 6, 4]  # descending reward, ties in rollout order
  np.testing.assert_array_equal(view.rows, order)
  np.testing.assert_array_equal(view.rewards, rewards[order])
  completion = np.asarray(traj.tokens)[:, p:]
  np.testing.assert_array_equal(view.token_ids, completion[order])
  np.testing.assert_array_equal(view.commit_step, np.asarray(traj.commit_step)[order])
  np.testing.assert_array_equal(view.commit_conf, np.asarray(traj.commit_conf)[order])
  assert view.text == [[token_text(tok, t) for t in row] for row in completion[order]]
  dps = CREDIT.get("dps")(traj, cfg.credit, cfg.rollout)  # the assigner called directly
  np.testing.assert_allclose(view.weights["dps"], np.asarray(dps)[order], rtol=1e-6)
  assert view.step_progress.shape == (G, cfg.rollout.steps)

  # The PNG's token panel has one text per cell, row by row, and the HTML one cell per token.
  fig = figure([view])
  texts = [t.get_text() for t in fig.axes[0].texts]
  assert texts == [s for row in view.text for s in row]
  render_html([view], tmp_path / "t.html")
  page = (tmp_path / "t.html").read_text()
  cells = re.findall(r"<td(?: class='pad')? style='[^']*' title='([^']*)'>([^<]*)</td>", page)
  assert len(cells) == G * cfg.rollout.gen_length
  for i, (title, text) in enumerate(cells):
    r, c = divmod(i, cfg.rollout.gen_length)
    assert html.unescape(text) == view.text[r][c]
    title = html.unescape(title)
    assert f"position {c} " in title and f"commit step {view.commit_step[r, c]} " in title
    assert f"dps weight {view.weights['dps'][r, c]:.4f}" in title


def test_token_text_names_specials_and_shows_whitespace():
  tok = ByteTokenizer()
  assert [token_text(tok, i) for i in (tok.eos_id, tok.pad_id, tok.mask_id, 32, 10, 55)] == \
      ["EOS", "PAD", "MASK", "␣", "⏎", "7"]


def test_rollout_views_of_a_task_write_png_and_html(drawn, tmp_path):
  task, examples, views = drawn[1], drawn[5], drawn[6]
  assert [v.prompt for v in views] == [ex.prompt for ex in examples]
  for v, ex in zip(views, examples):  # rewards are the task's grades of the drawn completions, best first
    np.testing.assert_allclose(v.rewards, task.reward(task.decode_completions(v.token_ids), [ex] * G))
    assert list(v.rewards) == sorted(v.rewards, reverse=True)
    assert set(v.weights) == {"dps", "dtca"}
  render_png(views[:1], tmp_path / "t.png", title="fixed logits")
  render_html(views, tmp_path / "t.html", title="fixed logits")
  png = (tmp_path / "t.png").read_bytes()
  assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
  assert (tmp_path / "t.html").read_text().count("<table class='traj'>") == 4  # grid + Δ_s per view


def test_token_reward_credit_and_unknown_names_are_refused(drawn):
  cfg, tok = drawn[0], drawn[1].tokenizer
  for name in ("token_reward", "dpss"):
    with pytest.raises(ConfigError, match=rf"--credits='{name}'.*\['delta', 'dps', 'dtca', 'uniform'\]"):
      credit_learners(jax_logits, cfg, tok, [name])
