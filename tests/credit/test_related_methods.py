"""DTCA, DelTA and RLDF: each against a plain-numpy / plain-Python reference
written from the method's definition, on hand-built trajectories and batches."""
import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from daca_jax.credit import CREDIT, CreditInputs, delta_weights
from daca_jax.credit.dtca import dtca_init_state
from daca_jax.credit.taggers import POS_CATEGORIES, RULE_CATEGORIES, PosTagger, RuleTagger, classify_text
from daca_jax.diffusion.rollout import Trajectory
from daca_jax.likelihood import LIKELIHOOD, sample_states, step_surprisal
from daca_jax.contracts import PolicyBatch
from daca_jax.rl.methods import OBJECTIVES
from daca_jax.rl.methods.base import k3_kl
from daca_jax.tasks.tokenizer import ByteTokenizer
from daca_jax.config.credit import CreditConfig
from daca_jax.credit.delta import DeltaConfig
from daca_jax.credit.dps import DPSConfig
from daca_jax.credit.dtca import DTCAConfig
from daca_jax.config.likelihood import LikelihoodConfig
from daca_jax.likelihood.rldf import RLDFConfig
from daca_jax.config.rl import RLConfig
from daca_jax.config.rollout import RolloutConfig
from tests.fixed_logit_model import jax_logits, make_params, np_logits

CAT = {name: i for i, name in enumerate(RULE_CATEGORIES)}


# ---------------------------------------------------------------- taggers

def test_rule_tagger_on_bytes():
  tok = ByteTokenizer()
  tagger = RuleTagger(tok)
  text = "12+3=a. Z"
  ids = np.asarray([tok.encode(text) + [tok.eos_id, tok.pad_id]])
  want = ["NUM", "NUM", "OP", "NUM", "OP", "WORD", "PUNCT", "PUNCT", "WORD", "SPECIAL", "SPECIAL"]
  assert [RULE_CATEGORIES[c] for c in tagger.tag(ids)[0]] == want
  assert classify_text(" x2") == "NUM" and classify_text("(") == "PUNCT" and classify_text("ab") == "WORD"
  with pytest.raises(ValueError, match="token ids"):
    tagger.tag(np.asarray([[300]]))


def test_pos_tagger_maps_character_spans_to_tokens():
  tok = ByteTokenizer()

  def fake_pos(text):  # words -> NOUN, digit runs -> NUM, anything else non-space -> PUNCT
    spans = []
    for m in re.finditer(r"[A-Za-z]+|\d+|\S", text):
      tag = "NOUN" if m.group().isalpha() else "NUM" if m.group().isdigit() else "PUNCT"
      spans.append((m.start(), m.end(), tag))
    return spans

  tagger = PosTagger(tok, pos_fn=fake_pos)
  ids = np.asarray([tok.encode("ab 12.") + [tok.eos_id]])
  got = [POS_CATEGORIES[c] for c in tagger.tag(ids)[0]]
  assert got == ["NOUN", "NOUN", "SPACE", "NUM", "NUM", "PUNCT", "SPECIAL"]


# ---------------------------------------------------------------- DTCA

def _traj(step_conf, commit_step, mask=None, step_entropy=None, commit_conf=None, hidden=None):
  step_conf = np.asarray(step_conf, np.float32)
  s, b, length = step_conf.shape
  return Trajectory(
      tokens=jnp.zeros((b, 1 + length), jnp.int32),
      completion_mask=jnp.ones((b, length), jnp.float32) if mask is None else jnp.asarray(mask, jnp.float32),
      commit_step=jnp.asarray(commit_step, jnp.int32),
      commit_conf=jnp.ones((b, length)) if commit_conf is None else jnp.asarray(commit_conf, jnp.float32),
      step_conf=jnp.asarray(step_conf),
      step_entropy=None if step_entropy is None else jnp.asarray(step_entropy, jnp.float32),
      commit_hidden=None if hidden is None else jnp.asarray(hidden, jnp.float32),
      prompt_len=1, num_model_calls=s)


def _np_dtca(step_conf, commit_step, cats, valid, top_frac, alpha, w_min, w_max):
  """Plain-Python DTCA without calibration, from the definition (one token per loop iteration)."""
  s_n, b_n, l_n = step_conf.shape
  out = np.zeros((b_n, l_n))
  for b in range(b_n):
    delta = []
    for s in range(s_n):
      rem = [j for j in range(l_n) if commit_step[b, j] > s] if s < s_n - 1 else []
      delta.append(np.mean([step_conf[s + 1, b, j] - step_conf[s, b, j] for j in rem]) if rem else 0.0)
    d = [delta[commit_step[b, i]] for i in range(l_n)]
    r = []
    for i in range(l_n):
      same = [d[j] for j in range(l_n) if cats[b, j] == cats[b, i] and valid[b, j]]
      r.append(np.mean(same))
    n_keep = max(1, math.ceil(top_frac * s_n))
    kept_steps = sorted(range(s_n), key=lambda s: (-delta[s], s))[:n_keep]
    keep = [valid[b, i] and commit_step[b, i] in kept_steps for i in range(l_n)]
    vals = np.asarray([r[i] for i in range(l_n) if keep[i]])
    mu, sd = vals.mean(), vals.std()
    for i in range(l_n):
      if keep[i]:
        z = (r[i] - mu) / sd if sd > 1e-8 else 0.0
        out[b, i] = min(max(1 + alpha * z, w_min), w_max)
    out[b] /= out[b][np.asarray(keep)].mean()
  return out


def test_dtca_matches_reference_without_calibration():
  rng = np.random.default_rng(0)
  s_n, b_n, l_n = 6, 3, 6
  commit_step = np.stack([rng.permutation(l_n) for _ in range(b_n)])  # one token per step
  step_conf = rng.uniform(0.1, 0.9, (s_n, b_n, l_n)).astype(np.float32)
  for s in range(s_n):  # 0 where already committed, as the sampler records
    step_conf[s][commit_step < s] = 0.0
  cats = rng.integers(0, 3, (b_n, l_n))
  valid = np.ones((b_n, l_n), bool)
  valid[2, 4:] = False
  cfg = CreditConfig(dtca=DTCAConfig(entropy_window=0, top_frac=0.5), dps=DPSConfig(alpha=0.8))
  traj = _traj(step_conf, commit_step, mask=valid)
  assigner = CREDIT.get("dtca")
  out = assigner.assign(traj, cfg, RolloutConfig(l_n, l_n, s_n),
                        CreditInputs(categories=jnp.asarray(cats), state=dtca_init_state(5)))
  want = _np_dtca(step_conf, commit_step, cats, valid, 0.5, 0.8, cfg.dps.w_min, cfg.dps.w_max)
  np.testing.assert_allclose(np.asarray(out.weights), want, rtol=1e-5, atol=1e-6)
  assert np.all(np.asarray(out.weights)[~valid] == 0)
  # exactly ceil(0.5 * 6) = 3 steps kept per rollout, one token each (fewer where invalid)
  assert (np.asarray(out.weights) > 0).sum(1).tolist() == [3, 3, (np.asarray(out.weights)[2] > 0).sum()]
  assert int(out.state["updates"]) == 1


def test_dtca_entropy_calibration_against_baseline_window():
  # Two categories; 1 step per token; keep all states. Entropy of category 0 halves after the
  # 2-update window, category 1 stays: category 0 gets factor 0.5, then the batch renormalises.
  s_n, l_n = 4, 4
  commit_step = np.asarray([[0, 1, 2, 3]])
  step_conf = np.full((s_n, 1, l_n), 0.5, np.float32)  # no progress: DPS part is uniform
  cats = jnp.asarray([[0, 0, 1, 1]])
  cfg = CreditConfig(dtca=DTCAConfig(top_frac=1.0, entropy_window=2, calib_min=0.25, calib_max=2.0))
  assigner = CREDIT.get("dtca")
  rcfg = RolloutConfig(l_n, l_n, s_n)

  def entropy(e0, e1):
    ent = np.zeros((s_n, 1, l_n), np.float32)
    for i, e in enumerate([e0, e0, e1, e1]):
      ent[commit_step[0, i], 0, i] = e
    return ent

  state = dtca_init_state(5)
  for e0 in (2.0, 1.0):  # baseline of category 0 = 1.5, category 1 = 1.0
    out = assigner.assign(_traj(step_conf, commit_step, step_entropy=entropy(e0, 1.0)), cfg, rcfg,
                          CreditInputs(categories=cats, state=state))
    np.testing.assert_allclose(out.weights, 1.0)  # inside the window: no calibration
    state = out.state
  np.testing.assert_allclose(state["entropy_sum"][:2], [3.0, 2.0])
  out = assigner.assign(_traj(step_conf, commit_step, step_entropy=entropy(0.75, 1.0)), cfg, rcfg,
                        CreditInputs(categories=cats, state=state))
  f = np.asarray([0.5, 0.5, 1.0, 1.0])  # 0.75 / 1.5 and 1.0 / 1.0
  np.testing.assert_allclose(out.weights[0], f * 4 / f.sum(), rtol=1e-6)
  np.testing.assert_allclose([out.metrics["dtca_calib_min"], out.metrics["dtca_calib_max"]], [0.5, 1.0])
  np.testing.assert_allclose(out.state["entropy_sum"], state["entropy_sum"])  # window is closed


# ---------------------------------------------------------------- DelTA

def _np_delta(h, p, a, m, lmin, lmax, gamma):
  """DelTA written token by token from the algorithm's steps (nearest-centroid margins, per-side
  temperature from the margins' std, one refinement, λmin on zero-advantage rows, mean 1)."""
  b_n, l_n, _ = h.shape
  v = (1 - p)[..., None] * h
  sig = lambda x: 1 / (1 + np.exp(-x))
  cells = [(b, i) for b in range(b_n) for i in range(l_n) if m[b, i] > 0]
  pos = [(b, i) for b, i in cells if a[b] > 0]
  neg = [(b, i) for b, i in cells if a[b] < 0]

  def centroid(side, extra):
    wsum = sum(abs(a[b]) * extra[b, i] for b, i in side)
    return sum(abs(a[b]) * extra[b, i] * v[b, i] for b, i in side) / max(wsum, 1e-8)

  def margins(mu_p, mu_n):
    out = np.zeros((b_n, l_n))
    for b, i in pos + neg:
      out[b, i] = np.sign(a[b]) * (np.sum((v[b, i] - mu_n) ** 2) - np.sum((v[b, i] - mu_p) ** 2))
    return out

  ones = np.ones((b_n, l_n))
  mg = margins(centroid(pos, ones), centroid(neg, ones))
  temp = np.ones((b_n, l_n))
  for side in (pos, neg):
    std = np.sqrt(max(np.var([mg[c] for c in side]), 1e-8))
    for c in side:
      temp[c] = gamma * std
  soft = sig(mg / temp)
  mg = margins(centroid(pos, soft), centroid(neg, soft))
  w = np.zeros((b_n, l_n))
  for c in cells:
    w[c] = lmin + (lmax - lmin) * sig(mg[c] / temp[c]) if c in pos or c in neg else lmin
  return w * len(cells) / w.sum()


def test_delta_matches_reference():
  rng = np.random.default_rng(3)
  b_n, l_n, d = 4, 5, 6
  h = rng.standard_normal((b_n, l_n, d))
  p = rng.uniform(0.05, 0.95, (b_n, l_n))
  a = np.asarray([1.0, -0.5, 0.0, 0.7])
  m = np.ones((b_n, l_n))
  m[3, 3:] = 0
  cfg = CreditConfig(delta=DeltaConfig(gamma=0.7))
  w, _ = delta_weights(jnp.asarray(h), jnp.asarray(p), jnp.asarray(a), jnp.asarray(m), cfg.delta)
  want = _np_delta(h, p, a, m, 0.8, 1.2, 0.7)
  np.testing.assert_allclose(np.asarray(w), want, rtol=2e-5, atol=2e-6)
  np.testing.assert_allclose(np.asarray(w)[m > 0].mean(), 1.0, rtol=1e-6)
  np.testing.assert_array_equal(np.asarray(w)[3, 3:], 0.0)  # invalid tokens
  w = np.asarray(w)
  np.testing.assert_allclose(w[2], w[2, 0])  # zero advantage: all λmin, scaled like the rest
  assert w[2, 0] <= w[(m > 0) & (a[:, None] != 0)].min() + 1e-6


def test_delta_margins_ignore_a_pattern_every_rollout_shares():
  # Adding one vector to every token's feature (a shared pattern: formatting, copied givens) changes
  # no margin and no weight: the discriminator's bias sits at the centroids' midpoint. A margin
  # without that bias (e.g. the cosine to μ+ − μ−) would tilt one whole side up and the other down,
  # i.e. add a push on every sampled token whatever its reward.
  rng = np.random.default_rng(5)
  h = rng.standard_normal((6, 4, 8))
  a = jnp.asarray([1.0, -1.0, 0.5, -0.2, 0.0, 0.8])
  m = jnp.ones((6, 4))
  zeros = jnp.zeros((6, 4))
  w0, m0 = delta_weights(jnp.asarray(h), zeros, a, m, DeltaConfig())
  w1, m1 = delta_weights(jnp.asarray(h + 25.0 * rng.standard_normal(8)), zeros, a, m, DeltaConfig())
  np.testing.assert_allclose(np.asarray(m1), np.asarray(m0), rtol=1e-3, atol=2e-3)
  np.testing.assert_allclose(np.asarray(w1), np.asarray(w0), rtol=1e-5, atol=1e-5)


def test_delta_first_pass_margins_are_balanced_between_sides():
  # Before the refinement, both sides' advantage-weighted mean margins equal ‖μ+ − μ−‖².
  rng = np.random.default_rng(11)
  h = rng.standard_normal((5, 3, 4))
  a = np.asarray([0.9, -0.3, 1.2, -1.5, -0.4])
  v = jnp.asarray(h)
  from daca_jax.credit.delta import _centroids, _margins
  pos_w = jnp.asarray(np.maximum(a, 0)[:, None] * np.ones((5, 3)))
  neg_w = jnp.asarray(np.maximum(-a, 0)[:, None] * np.ones((5, 3)))
  mu_p, mu_n = _centroids(v, pos_w, neg_w)
  mg = np.asarray(_margins(v, mu_p, mu_n, jnp.asarray(np.sign(a)[:, None] * np.ones((5, 3)))))
  gap = float(np.sum((np.asarray(mu_p) - np.asarray(mu_n)) ** 2))
  for w in (pos_w, neg_w):
    w = np.asarray(w)
    assert np.sum(w * mg) / np.sum(w) == pytest.approx(gap, rel=1e-5)


def test_delta_upweights_side_specific_tokens():
  # Feature e0 appears only in the positive sequence, e1 only in the negative one, e2 in both:
  # side-specific tokens must outweigh the shared one on each side.
  e = np.eye(3)
  h = np.stack([np.stack([e[0], e[2]]), np.stack([e[1], e[2]])])  # [2, 2, 3]
  w, margin = delta_weights(jnp.asarray(h), jnp.zeros((2, 2)), jnp.asarray([1.0, -1.0]), jnp.ones((2, 2)),
                            DeltaConfig())
  w = np.asarray(w)
  assert w[0, 0] > w[0, 1] and w[1, 0] > w[1, 1]
  assert float(margin[0, 1]) == pytest.approx(0.0, abs=1e-6)  # shared feature: equidistant from μ+ and μ−


def test_delta_credit_reads_rollout_records_and_needs_them():
  rng = np.random.default_rng(0)
  h = rng.standard_normal((2, 3, 4))
  conf = rng.uniform(size=(2, 3))
  traj = _traj(np.zeros((3, 2, 3)), [[0, 1, 2]] * 2, commit_conf=conf, hidden=h)
  adv = jnp.asarray([0.5, -0.5])
  got = CREDIT.get("delta")(traj, CreditConfig(), RolloutConfig(3, 3, 3), CreditInputs(advantages=adv))
  want, _ = delta_weights(jnp.asarray(h), jnp.asarray(conf), adv, jnp.ones((2, 3)), DeltaConfig())
  np.testing.assert_allclose(got, want, rtol=1e-6)
  with pytest.raises(ValueError, match="commit_hidden"):
    CREDIT.get("delta")(_traj(np.zeros((3, 2, 3)), [[0, 1, 2]] * 2), CreditConfig(), RolloutConfig(3, 3, 3),
                        CreditInputs(advantages=adv))
  with pytest.raises(ValueError, match="advantages"):
    CREDIT.get("delta")(traj, CreditConfig(), RolloutConfig(3, 3, 3))


# ---------------------------------------------------------------- RLDF

def test_step_surprisal_and_topk_states():
  commit_step = jnp.asarray([[0, 0, 1, 3]])
  conf = jnp.asarray([[0.5, 0.25, 0.9, 0.1]])
  valid = jnp.asarray([[1.0, 1.0, 1.0, 1.0]])
  sur, count = step_surprisal(commit_step, conf, valid, 4)
  np.testing.assert_allclose(sur[0], [-(np.log(0.5) + np.log(0.25)) / 2, -np.log(0.9), 0.0, -np.log(0.1)],
                             rtol=1e-6)
  np.testing.assert_array_equal(count[0], [2, 1, 0, 1])
  states = sample_states(jax.random.PRNGKey(0), sur, count, 3, "topk", 1.0)
  np.testing.assert_array_equal(states[0], [3, 0, 1])  # step 2 committed nothing: never picked first


def test_softmax_state_sampling_frequencies():
  # k = 1: P(step s) = softmax(surprisal / T) over steps that committed something.
  sur = jnp.asarray([[0.0, 1.0, 2.0]])
  count = jnp.ones((1, 3))
  keys = jax.random.split(jax.random.PRNGKey(1), 6000)
  picks = jax.vmap(lambda k: sample_states(k, sur, count, 1, "softmax", 2.0)[0, 0])(keys)
  freq = np.bincount(np.asarray(picks), minlength=3) / 6000
  want = np.exp(np.asarray([0.0, 0.5, 1.0]))
  np.testing.assert_allclose(freq, want / want.sum(), atol=0.025)
  uni = jax.vmap(lambda k: sample_states(k, sur, count, 1, "uniform", 2.0)[0, 0])(keys)
  np.testing.assert_allclose(np.bincount(np.asarray(uni), minlength=3) / 6000, 1 / 3, atol=0.025)


def test_rldf_estimator_scores_rebuilt_states():
  v, mask_id, p, length, steps = 8, 7, 2, 4, 4
  params = make_params(p + length, v, seed=2)
  rng = np.random.default_rng(5)
  tokens = rng.integers(0, 6, (3, p + length))
  commit_step = np.stack([rng.permutation(steps) for _ in range(3)])
  conf = rng.uniform(0.05, 1.0, (3, length))
  cfg = LikelihoodConfig(rldf=RLDFConfig(states=2, sampling="topk"), trajectory_steps=steps, p_mask_prompt=0.0)
  out = jax.jit(lambda prm: LIKELIHOOD.get("rldf")(  # compiled: op by op took several times as long
      jax_logits, prm, jnp.asarray(tokens), p, jax.random.PRNGKey(0), cfg, mask_id=mask_id,
      commit_step=jnp.asarray(commit_step), commit_conf=jnp.asarray(conf)))(jax.tree.map(jnp.asarray, params))
  states = np.asarray(out.states)
  for b in range(3):
    sur = -np.log(conf[b])[np.argsort(commit_step[b])]  # one token per step
    assert list(states[b]) == list(np.argsort(-sur, kind="stable")[:2])
    for j, s in enumerate(states[b]):
      x = tokens[b].copy()
      x[p:][commit_step[b] >= s] = mask_id
      lg = np_logits(params, x[None])[0, p:]
      lg[:, mask_id] = -np.inf  # scored under the sampler's policy: never [MASK]
      lp = lg - np.log(np.exp(lg).sum(-1, keepdims=True))
      sl = slice(j * length, (j + 1) * length)
      np.testing.assert_allclose(np.asarray(out.logp)[b, sl], lp[np.arange(length), tokens[b, p:]], rtol=1e-5,
                                 atol=1e-5)
      np.testing.assert_array_equal(np.asarray(out.mask)[b, sl], commit_step[b] >= s)
      np.testing.assert_array_equal(np.asarray(out.committed_here)[b, sl], commit_step[b] == s)


def test_rldf_objective_clean_state_clip():
  rng = np.random.default_rng(0)
  b_n, n = 2, 6
  logp = np.log(rng.uniform(0.2, 0.99, (b_n, n)))
  old = np.log(np.asarray([[0.9, 0.5, 0.7, 0.3, 0.65, 0.1], [0.59, 0.61, 0.2, 0.95, 0.4, 0.8]]))
  ref = np.log(rng.uniform(0.2, 0.99, (b_n, n)))
  here = np.asarray([[0, 0, 1, 1, 0, 0], [1, 0, 0, 0, 0, 0]], np.float32)
  mask = np.asarray([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 0, 1]], np.float32)
  adv = np.asarray([1.0, -0.5])
  cfg = RLConfig(clip_eps=0.2, beta=0.01)
  batch = PolicyBatch(logp_old=jnp.asarray(old), logp_ref=jnp.asarray(ref), advantages=jnp.asarray(adv),
                      weights=jnp.ones((b_n, n)), mask=jnp.asarray(mask), commit_now=jnp.asarray(here))
  loss, aux = OBJECTIVES.get("rldf")(jnp.asarray(logp), batch, cfg)
  keep = mask * ((np.exp(old) >= 0.6) | (here > 0))
  assert keep.tolist() == [[1, 0, 1, 1, 1, 0], [1, 1, 0, 1, 0, 1]]
  ratio = np.exp(logp - old)
  a = adv[:, None]
  pg = -np.minimum(ratio * a, np.clip(ratio, 0.8, 1.2) * a)
  want = ((pg + 0.01 * np.asarray(k3_kl(jnp.asarray(logp), jnp.asarray(ref)))) * keep).sum() / keep.sum()
  np.testing.assert_allclose(float(loss), want, rtol=1e-5)
  np.testing.assert_allclose(float(aux["rldf_kept_frac"]), keep.sum() / mask.sum(), rtol=1e-6)


# ---------------------------------------------------------------- through the main job

REPO = __import__("pathlib").Path(__file__).resolve().parents[2]


def _tiny_run_flags():
  return ["--config.sft.steps=10", "--config.rl.steps=2", "--config.task.num_eval_examples=8",
          "--config.eval.batch_size=8"]


@pytest.mark.parametrize("flags,metric", [
    pytest.param(["--config.rl.credit=dtca"], "dtca_kept_frac", marks=pytest.mark.slow),  # unit-tested above
    pytest.param(["--config.rl.credit=delta", "--config.model.lora_rank=4", "--config.model.logprob_chunk=8"],
                 "delta_margin_mean", marks=pytest.mark.slow),  # unit-tested above; end to end: --runslow
    pytest.param(["--config.rl.objective=rldf", "--config.rl.likelihood=rldf", "--config.rl.credit=uniform",
                  "--config.rl.beta=0.01", "--config.likelihood.rldf.states=2"], "rldf_kept_frac",
                 marks=pytest.mark.slow),
])
def test_method_runs_through_train_py_by_config(flags, metric, tmp_path):
  import json
  import subprocess
  import sys

  from daca_jax.run.metrics import read_metrics

  cmd = [sys.executable, "experiments/train.py", "--config=configs/sudoku_tiny.py:smoke", "--progress=false",
         f"--workdir={tmp_path}", *_tiny_run_flags(), *flags]
  proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  res = json.loads((tmp_path / "results.json").read_text())
  for flag in flags:
    section, field, value = re.match(r"--config\.(\w+)\.(\w+)=(.*)", flag).groups()
    assert str(res["config"][section][field]) == value
  records = read_metrics(tmp_path / "metrics.jsonl")
  assert [r["step"] for r in records] == [1, 2]
  assert all(np.isfinite(r[metric]) and np.isfinite(r["loss"]) for r in records)
