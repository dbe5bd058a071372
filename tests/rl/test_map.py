"""Mask-Aware Policy Gradient (likelihood ``stepmerge``, objective ``map``) against NumPy transcriptions
of the reference computations (Haran71/mask-aware-policy-gradients @ a7ff19d: ``map/trainer.py``
``_get_per_token_logps_stepmerge``, ``map/position_likelihood.py``
``compute_position_logprobs_for_block``, ``map/policy_losses.py`` ``_gspo`` / ``_gspo_partial``) on a
tiny model and hand-made batches: both position methods and scopes, both confidence sources,
positive and negative advantages, padding after EOS, sampled segments."""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from daca_jax.config import configure
from daca_jax.contracts import PolicyBatch
from daca_jax.errors import ConfigError
from daca_jax.likelihood import LIKELIHOOD
from daca_jax.rl.methods.map_pg import map_loss
from daca_jax.config.likelihood import LikelihoodConfig
from daca_jax.likelihood.stepmerge import StepMergeConfig
from daca_jax.config.rl import RLConfig
from daca_jax.rl.methods.map_pg import MAPConfig
from daca_jax.config.train import TrainConfig
from tests.fixed_logit_model import make_params, np_logits, jax_logits

V, MASK, P, L, S, N = 9, 8, 2, 8, 8, 4  # S steps in N segments of 2


def _ref_block(logits, transition, unmask, target, t_start, t_end, method, scope, conf_type, tau, source):
  """``compute_position_logprobs_for_block`` for one (segment, sequence), transcribed."""
  z = logits - logits.max(-1, keepdims=True)
  probs = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
  all_conf = logits.max(-1) if conf_type == "max_logit" else probs.max(-1)
  out = np.zeros(len(target))
  for i in np.nonzero(transition)[0]:
    if source == "max":
      c = all_conf[i]
    else:
      c = logits[i, target[i]] if conf_type == "max_logit" else probs[i, target[i]]
    comp = (unmask > t_end) & (unmask != -1)
    if scope == "position":
      same = (unmask > t_start) & (unmask <= t_end)
      comp = comp | (same & (unmask > unmask[i]))
    comp[i] = False
    if method == "bradley_terry":
      out[i] = sum(np.log(1 / (1 + np.exp(-(c - all_conf[j]) / tau))) for j in np.nonzero(comp)[0])
    else:
      scores = np.concatenate([[c / tau], all_conf[comp] / tau])
      out[i] = c / tau - (scores.max() + np.log(np.exp(scores - scores.max()).sum()))
  return out


def _ref_stepmerge(params, tokens, commit_step, method, scope, conf_type, tau, source, unmask_from=1, n_blocks=N):
  """``_get_per_token_logps_stepmerge`` over all N blocks, with ``unmask_steps = commit_step +
  unmask_from`` (the reference counts steps from 0, ``unmask_from=0``, and scores block n's tokens in the
  state after step n·T/N; the library's default segment [start, next) in the state before start is that
  with steps counted from 1), and [MASK] excluded from the softmax (the library's policy)."""
  b = tokens.shape[0]
  unmask = commit_step + unmask_from
  bs = S // n_blocks
  tok_lp, pos_lp = np.zeros((b, L)), np.zeros((b, L))
  for n, r in itertools.product(range(n_blocks), range(b)):
    t_start, t_end = n * bs, (n + 1) * bs
    x = tokens[r:r + 1].copy()
    x[0, P:][unmask[r] > t_start] = MASK
    logits = np_logits(params, x)[0, P:]
    logits[:, MASK] = -np.inf
    target = tokens[r, P:]
    trans = (unmask[r] > t_start) & (unmask[r] <= t_end)
    lse = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
    tok_lp[r][trans] = (logits[np.arange(L), target] - lse)[trans]
    pos_lp[r][trans] = _ref_block(logits, trans, unmask[r], target, t_start, t_end, method, scope, conf_type,
                                  tau, source)[trans]
  return tok_lp, pos_lp


def _inputs(seed=0, b=3):
  rng = np.random.default_rng(seed)
  tokens = np.concatenate([rng.integers(0, 7, (b, P)), rng.integers(0, 8, (b, L))], 1).astype(np.int32)
  commit_step = np.stack([rng.permutation(np.repeat(np.arange(S), L // S)) for _ in range(b)]).astype(np.int32)
  return tokens, commit_step


@pytest.mark.parametrize("method,scope,conf_type,source,convention,n", [
    ("softmax", "segment", "max_logit", "gt", "d2", N),  # MAP's gsm8k/math recipe
    ("softmax", "position", "top_prob", "gt", "d2", N),
    ("bradley_terry", "segment", "max_logit", "max", "d2", N),
    ("bradley_terry", "position", "top_prob", "max", "d2", N),
    ("softmax", "segment", "max_logit", "gt", "map", N),  # MAP's recipe with its own step count
    ("bradley_terry", "position", "top_prob", "max", "map", 3)])  # 3 blocks of 2 steps: steps 0 and 7 unscored
def test_stepmerge_token_and_position_logprobs_match_the_reference(method, scope, conf_type, source, convention, n):
  params = make_params(P + L, V, seed=2)
  tokens, commit_step = _inputs()
  sm = StepMergeConfig(segments=n, position_method=method, position_scope=scope, position_confidence=conf_type,
                       position_source=source, position_temperature=0.7, segment_convention=convention)
  cfg = LikelihoodConfig(stepmerge=sm, trajectory_steps=S)
  scores = jax.jit(lambda prm: LIKELIHOOD.get("stepmerge")(  # compiled: op by op took several times as long
      jax_logits, prm, jnp.asarray(tokens), P, jax.random.PRNGKey(0), cfg, mask_id=MASK,
      commit_step=jnp.asarray(commit_step)))(jax.tree.map(jnp.asarray, params))
  shift = 1 if convention == "d2" else 0
  unmask = commit_step + shift
  tok, pos = _ref_stepmerge(params, tokens, commit_step, method, scope, conf_type, 0.7, source,
                            unmask_from=shift, n_blocks=n)
  # Every segment is scored (sample = 0): every token under d2; under MAP's count, those in (0, n·⌊S/n⌋].
  np.testing.assert_array_equal(np.asarray(scores.mask[:, :L]), 1.0 * ((unmask > 0) & (unmask <= n * (S // n))))
  assert scores.num_states == 2 and (convention == "d2") == (float(jnp.min(scores.mask)) == 1.0)
  np.testing.assert_allclose(np.asarray(scores.logp[:, :L]), tok, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(np.asarray(scores.logp[:, L:]), pos, rtol=1e-4, atol=1e-5)


def test_sampled_segments_mask_their_tokens_only_and_skip_invalid_segments():
  params = jax.tree.map(jnp.asarray, make_params(P + L, V, seed=2))
  tokens, commit_step = _inputs(seed=1, b=4)
  valid = np.ones((4, L), np.float32)
  valid[0, commit_step[0] >= 4] = 0.0  # row 0: segments 2 and 3 hold only padding
  cfg = LikelihoodConfig(stepmerge=StepMergeConfig(segments=N, sample=2), trajectory_steps=S)
  run = jax.jit(lambda key: LIKELIHOOD.get("stepmerge")(  # compiled once for the 7 keys
      jax_logits, params, jnp.asarray(tokens), P, key, cfg, mask_id=MASK, commit_step=jnp.asarray(commit_step),
      completion_mask=jnp.asarray(valid)))
  seg = commit_step * N // S
  for k in range(5):
    s = run(jax.random.PRNGKey(k))
    m = np.asarray(s.mask[:, :L])
    for r in range(4):
      picked = set(seg[r][m[r] > 0])
      assert len(picked) == 2 and np.all(m[r][np.isin(seg[r], list(picked))] == 1)
    assert set(seg[0][m[0] > 0]) == {0, 1}  # only the valid segments of row 0
    np.testing.assert_array_equal(np.asarray(s.logp[:, :L])[m == 0], 0.0)
  np.testing.assert_array_equal(np.asarray(run(jax.random.PRNGKey(3)).mask), np.asarray(run(jax.random.PRNGKey(3)).mask))


def _ref_gspo(new, old, adv, token_mask, completion_mask, lo, hi):
  """``_gspo_partial``: the sequence ratio over the sampled tokens, min with the clipped ratio, mean
  over rows with a valid completion token."""
  diff = ((new - old) * token_mask).sum(1) / np.maximum(token_mask.sum(1), 1.0)
  ratio = np.exp(diff)
  pl = np.minimum(ratio * adv, np.clip(ratio, 1 - lo, 1 + hi) * adv)
  valid = (completion_mask.sum(1) > 0).astype(float)
  return -(pl * valid).sum() / valid.sum()


def test_map_loss_matches_the_reference_losses():
  rng = np.random.default_rng(0)
  b = 6
  new_t, new_p = -rng.uniform(0.1, 2, (b, L)), -rng.uniform(0.1, 2, (b, L))
  old_t, old_p = new_t + 0.3 * rng.standard_normal((b, L)), new_p + 0.3 * rng.standard_normal((b, L))
  ref_t = new_t + 0.2 * rng.standard_normal((b, L))
  adv = np.array([1.0, -1.0, 0.5, -0.25, 0.0, 2.0])
  completion = (np.arange(L)[None] <= np.array([7, 3, 5, 0, 7, 2])[:, None]).astype(float)  # EOS, padding
  sample = (rng.uniform(size=(b, L)) < 0.6).astype(float)
  mask = completion * sample
  lo, hi, lam, beta = 0.05, 0.08, 0.7, 0.04
  batch = PolicyBatch(logp_old=jnp.asarray(np.concatenate([old_t, old_p], 1), jnp.float32),
                      logp_ref=jnp.asarray(np.concatenate([ref_t, ref_t], 1), jnp.float32),
                      advantages=jnp.asarray(adv, jnp.float32), weights=jnp.asarray(np.tile(completion, 2), jnp.float32),
                      mask=jnp.asarray(np.tile(mask, 2), jnp.float32), num_states=2)
  logp = jnp.asarray(np.concatenate([new_t, new_p], 1), jnp.float32)
  loss, aux = jax.jit(lambda lp: map_loss(lp, batch, clip_eps=lo, beta=beta,  # compiled: faster
                                          map=MAPConfig(clip_eps_high=hi, position_weight=lam)))(logp)
  x = ref_t - new_t
  kl = ((np.exp(x) - x - 1) * mask).sum() / mask.sum()  # trainer.py compute_loss: kl over completion x sample mask
  want = _ref_gspo(new_t, old_t, adv, mask, completion, lo, hi) + lam * _ref_gspo(new_p, old_p, adv, mask, completion,
                                                                                  lo, hi) + beta * kl
  np.testing.assert_allclose(float(loss), want, rtol=1e-5)
  np.testing.assert_allclose(float(aux["position_loss"]), _ref_gspo(new_p, old_p, adv, mask, completion, lo, hi), rtol=1e-5)
  # on-policy gradient: −A_b w m / (B n_b) for every target of both kinds (λ on the position half)
  on = batch.replace(logp_old=logp)
  g = np.asarray(jax.jit(jax.grad(lambda lp: map_loss(lp, on, clip_eps=lo, beta=0.0,
                                                      map=MAPConfig(clip_eps_high=hi, position_weight=lam))[0]))(logp))
  n = np.maximum(mask.sum(1, keepdims=True), 1.0)
  want_g = -adv[:, None] * completion * mask / (b * n)
  np.testing.assert_allclose(g, np.concatenate([want_g, lam * want_g], 1), rtol=1e-5, atol=1e-7)


def test_refused_combinations():
  with pytest.raises(ConfigError, match="'stepmerge' under rl.objective='map'"):
    configure.validate(TrainConfig(rl=RLConfig(objective="map", likelihood="elbo")))
  with pytest.raises(ConfigError, match="position log-probs get their own ratio"):
    configure.validate(TrainConfig(rl=RLConfig(objective="diffu_grpo", likelihood="stepmerge")))
  configure.validate(TrainConfig(rl=RLConfig(objective="map", likelihood="stepmerge"),
                                 likelihood=LikelihoodConfig(stepmerge=StepMergeConfig(segments=4))))
  with pytest.raises(ConfigError, match="segments of at least one step"):
    configure.validate(TrainConfig(rl=RLConfig(objective="map", likelihood="stepmerge"),
                                   likelihood=LikelihoodConfig(stepmerge=StepMergeConfig(segments=64))))
  with pytest.raises(ConfigError, match=r"likelihood\.stepmerge\.segment_convention.*'MAP'.*'d2', 'map'"):
    StepMergeConfig(segment_convention="MAP").validate()


def test_map_presets_carry_the_recipe():
  """configs/paper.py:map_<task>: map/configs/gsm8k.yaml (math.yaml's K = 8 for MATH500); no SML arm."""
  from configs import paper
  from daca_jax.config.configure import train_config_from_dict
  cfg = train_config_from_dict(paper.get_config("map_gsm8k"))
  sm, rl = cfg.likelihood.stepmerge, cfg.rl
  assert (rl.objective, rl.likelihood, sm.segments, sm.sample, sm.position) == ("map", "stepmerge", 32, 12, True)
  assert (sm.position_method, sm.position_scope, sm.position_confidence, sm.position_source, sm.segment_convention) == (
      "softmax", "segment", "max_logit", "gt", "map")
  assert rl.mask_seed_reuse is True
  assert (rl.clip_eps, rl.map.clip_eps_high, rl.beta, rl.num_iterations, rl.map.position_weight) == (3e-4, 4e-4, 0.0, 12, 1.0)
  assert (rl.group_size, rl.prompts_per_step, rl.grad_accum, rl.learning_rate) == (4, 8, 4, 3e-6)
  assert train_config_from_dict(paper.get_config("map_math500")).likelihood.stepmerge.sample == 8
  assert "map_gsm8k_dps" in paper.PRESETS and "map_gsm8k_sml" not in paper.PRESETS


def test_stepmerge_through_the_model_split_equals_the_plain_logits():
  """With the hidden/head split (chunked head over the completion only) the token and position
  log-probs are those of the plain logits function."""
  from daca_jax.models import init_model, make_logits_fn, tiny_config
  mcfg = tiny_config(d_model=32, n_layers=1, n_heads=2, mlp_dim=32, vocab_size=V + 1, mask_token_id=MASK)
  gd, prm = init_model(mcfg, seed=0)
  tokens, commit_step = _inputs(seed=2)
  cfg = LikelihoodConfig(stepmerge=StepMergeConfig(segments=N, sample=2, position_scope="position"),
                         trajectory_steps=S)
  # compiled: op by op, the scan over segments dominated the file's time on a loaded machine
  run = lambda fn: jax.jit(lambda p, t, c: LIKELIHOOD.get("stepmerge")(
      fn, p, t, P, jax.random.PRNGKey(1), cfg, mask_id=MASK, commit_step=c).logp)(
          prm, jnp.asarray(tokens), jnp.asarray(commit_step))
  plain = run(lambda p, t: make_logits_fn(gd)(p, t))
  for fn in (make_logits_fn(gd), make_logits_fn(gd, logprob_chunk=3)):
    np.testing.assert_allclose(np.asarray(run(fn)), np.asarray(plain), rtol=1e-5, atol=1e-5)
