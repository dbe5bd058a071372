"""BGPO (objective ``bgpo``, likelihood ``elbo_mc``, ``rl.pass_accum``) against NumPy transcriptions of
the bound (arXiv 2510.11683: Taylor for A >= 0, Jensen for A < 0), its on-policy equivalence to the
ELBO-ratio objective, per-pass accumulation against the one-shot gradient, and the constant-memory
claim (compiled peak memory flat in n_t while the vectorised gradient's grows)."""
import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from daca_jax.config import configure
from daca_jax.contracts import PolicyBatch, Trajectory
from daca_jax.errors import ConfigError
from daca_jax.likelihood import LIKELIHOOD
from daca_jax.likelihood.elbo_mc import mc_samples
from daca_jax.rl.learner import GRPOLearner
from daca_jax.rl.update import make_objective_grad
from daca_jax.rl.methods.bgpo import bgpo_loss, bgpo_terms, sample_log_ratios
from daca_jax.likelihood import PASSES
from daca_jax.config.likelihood import LikelihoodConfig
from daca_jax.likelihood.elbo import ELBOConfig
from daca_jax.likelihood.elbo_mc import ELBOMCConfig
from daca_jax.likelihood.stratified import StratifiedConfig
from daca_jax.config.rl import RLConfig
from daca_jax.config.rollout import RolloutConfig
from daca_jax.config.train import TrainConfig
from tests.fixed_logit_model import jax_logits, make_params, np_logits

V, MASK, EOS, P, G, PROMPTS = 12, 10, 11, 3, 4, 2
ROLLOUT = RolloutConfig(gen_length=8, block_length=4, steps=4, temperature=1.0)


def _np_bgpo(logp, old, ref, adv, credit, mask, inv_t, clip_eps, beta):
  """The bound as written: per row and sample, δ_j = Σ_i (1/t_j) credit m (logp − old); A >= 0:
  r = 1 + δ, A < 0: r = exp δ; loss = −mean_b mean_j min(rA, clip(r)A) + β k3 token mean."""
  b, n, length = logp.shape
  pg = 0.0
  for r in range(b):
    terms = []
    for j in range(n):
      d = sum(inv_t[r, j] * credit[r, i] * mask[r, j, i] * (logp[r, j, i] - old[r, j, i]) for i in range(length))
      ratio = 1.0 + d if adv[r] >= 0 else np.exp(d)
      terms.append(min(ratio * adv[r], np.clip(ratio, 1 - clip_eps, 1 + clip_eps) * adv[r]))
    pg -= np.mean(terms) / b
  x = ref - logp
  kl = np.sum((np.exp(x) - x - 1) * mask) / max(np.sum(mask), 1.0)
  return pg + beta * kl


def _batch_arrays(seed=0, b=6, n=3, length=5):
  rng = np.random.default_rng(seed)
  logp = -rng.uniform(0.1, 3.0, (b, n, length))
  old = logp + 0.05 * rng.standard_normal((b, n, length))
  ref = logp + 0.1 * rng.standard_normal((b, n, length))
  adv = np.array([1.0, -0.5, 0.0, 2.0, -2.0, 0.3])[:b]
  credit = rng.uniform(0.5, 2.0, (b, length))
  valid = (np.arange(length)[None] <= np.array([4, 2, 4, 0, 3, 4])[:b, None]).astype(float)  # EOS, padding
  credit = credit * valid
  masked = (rng.uniform(size=(b, n, length)) < 0.6).astype(float)
  mask = masked * valid[:, None]
  t = rng.uniform(0.05, 1.0, (b, n))
  inv_t = 1.0 / t
  return logp, old, ref, adv, credit, mask, inv_t


def _policy_batch(logp, old, ref, adv, credit, mask, inv_t):
  b, n, length = logp.shape
  flat = lambda x: jnp.asarray(x.reshape(b, n * length), jnp.float32)
  weights = credit[:, None, :] * (inv_t / n)[:, :, None]  # credit × the ELBO factor 1/(n t_j)
  return flat(logp), PolicyBatch(logp_old=flat(old), logp_ref=flat(ref), advantages=jnp.asarray(adv, jnp.float32),
                                 weights=flat(weights), mask=flat(mask), num_states=n)


def test_bgpo_loss_matches_the_numpy_bound():
  arrays = _batch_arrays()
  logp, batch = _policy_batch(*arrays)
  for clip_eps, beta in ((0.2, 0.04), (10.0, 0.0)):
    loss, aux = bgpo_loss(logp, batch, clip_eps=clip_eps, beta=beta)
    want = _np_bgpo(*arrays, clip_eps=clip_eps, beta=beta)
    np.testing.assert_allclose(float(loss), want, rtol=1e-5, atol=1e-6)
    assert float(aux["bound_gap"]) >= -1e-6  # the bound is below A·ρ


def test_bound_is_a_lower_bound_and_equivalent_on_policy():
  """Off-policy: bound <= A·exp(mean_j δ_j) row by row (both signs of A). On-policy (logp = old):
  the value is A and the gradient w.r.t. every target log-prob equals the exact ELBO-ratio
  objective's (BGPO's equivalence property)."""
  logp, old, ref, adv, credit, mask, inv_t = _batch_arrays(seed=1)
  for candidate in (logp, old):
    x, batch = _policy_batch(candidate, old, ref, adv, credit, mask, inv_t)
    delta = sample_log_ratios(x, batch)
    bound = jnp.mean(bgpo_terms(delta, batch.advantages, 1e9)[0], -1)
    exact = batch.advantages * jnp.exp(jnp.mean(delta, -1))
    assert bool(jnp.all(bound <= exact + 1e-6))
  x, batch = _policy_batch(old, old, ref, adv, credit, mask, inv_t)

  def exact_loss(lp):
    return -jnp.mean(batch.advantages * jnp.exp(jnp.mean(sample_log_ratios(lp, batch), -1)))

  g_bound = jax.grad(lambda lp: bgpo_loss(lp, batch, clip_eps=0.2, beta=0.0)[0])(x)
  g_exact = jax.grad(exact_loss)(x)
  np.testing.assert_allclose(np.asarray(g_bound), np.asarray(g_exact), rtol=1e-5, atol=1e-7)
  assert float(bgpo_loss(x, batch, clip_eps=0.2, beta=0.0)[0]) == pytest.approx(-float(np.mean(adv)), abs=1e-6)


def test_elbo_mc_estimator_against_numpy():
  """The estimator's contributions (row sums: the ELBO estimate) against a transcription: the
  sample masks from ``mc_samples`` under the estimator's key split, each masked token's log-prob
  (softmax over every id but [MASK]) times 1/(n t_j)."""
  params = make_params(P + 6, V, seed=3)
  rng = np.random.default_rng(0)
  tokens = jnp.asarray(np.concatenate([rng.integers(0, 9, (3, P)), rng.integers(0, 10, (3, 6))], 1), jnp.int32)
  key = jax.random.PRNGKey(5)
  cfg = LikelihoodConfig(elbo_mc=ELBOMCConfig(samples=4, stratified_t=True))
  scores = jax.jit(lambda prm: LIKELIHOOD.get("elbo_mc")(  # compiled: op by op took several times as long
      jax_logits, prm, tokens, P, key, cfg, mask_id=MASK))(jax.tree.map(jnp.asarray, params))
  _, k_est = jax.random.split(key)
  t, masked = (np.asarray(a) for a in mc_samples(k_est, 3, 6, 4, True))
  assert np.all((t >= np.arange(4)[:, None] / 4) & (t <= (np.arange(4)[:, None] + 1) / 4 + 1e-3))
  tok = np.asarray(tokens)
  want = np.zeros(3)
  for j in range(4):
    x = tok.copy()
    x[:, P:][masked[j]] = MASK
    logits = np_logits(params, x)[:, P:]
    logits[..., MASK] = -np.inf
    lp = logits - np.log(np.sum(np.exp(logits - logits.max(-1, keepdims=True)), -1, keepdims=True)) - logits.max(-1, keepdims=True)
    picked = np.take_along_axis(lp, tok[:, P:, None], -1)[..., 0]
    want += np.sum(masked[j] * picked, -1) / (4 * t[j])
  np.testing.assert_allclose(np.asarray(scores.contributions().sum(-1)), want, rtol=1e-4)


def _cfg(objective, samples, pass_accum, beta=0.04, strata_batch=0, likelihood="elbo_mc"):
  lik = LikelihoodConfig(elbo_mc=ELBOMCConfig(samples=samples), p_mask_prompt=0.2, strata_batch=strata_batch,
                         stratified=StratifiedConfig(num_strata=3), elbo=ELBOConfig(nodes=3))
  return TrainConfig(rollout=ROLLOUT, likelihood=lik,
                     rl=RLConfig(objective=objective, credit="dps", likelihood=likelihood, group_size=G,
                                 prompts_per_step=PROMPTS, clip_eps=0.2, beta=beta, pass_accum=pass_accum))


@functools.lru_cache(maxsize=None)
def _rollout():
  params = jax.tree.map(jnp.asarray, make_params(P + 8, V, seed=0, scale=1.0))
  learner = GRPOLearner(jax_logits, _cfg("diffu_grpo", 2, False), mask_id=MASK, eos_id=EOS)
  prompts = jnp.asarray(np.repeat(np.random.default_rng(0).integers(0, 9, (PROMPTS, P)), G, 0), jnp.int32)
  traj = learner.rollout(params, prompts, jax.random.PRNGKey(0))
  rewards = jnp.asarray([1.0, 0.0, 0.5, 0.0, 0.0, 1.0, 1.0, 0.0], jnp.float32)
  weights = learner.credit_weights(traj)
  ref = jax.tree.map(lambda x: 0.9 * x, params)
  old = jax.tree.map(lambda x: x + 0.05 * jnp.sin(3.0 * x), params)
  return params, ref, old, traj, rewards, weights


def _assert_same(want, got):
  """Both (grads, aux) pairs (first and later inner update) equal: gradients to 1e-5 of their size."""
  for (g_want, aux_want), (g_got, aux_got) in zip(want, got):
    size = max(float(jnp.max(jnp.abs(x))) for x in jax.tree.leaves(g_want))
    assert size > 1e-4
    for a, b in zip(jax.tree.leaves(g_want), jax.tree.leaves(g_got)):
      np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=1e-5 * size)
    for k in aux_want:
      np.testing.assert_allclose(float(aux_got[k]), float(aux_want[k]), rtol=1e-5, atol=1e-6, err_msg=k)


@pytest.mark.parametrize("likelihood", sorted(PASSES))
def test_one_pass_forms_add_up_to_the_estimator(likelihood):
  """Each per-pass form's log-probs, summed over its passes, are the estimator's; its target masks
  partition the targets; mask and weight are the estimator's in every pass."""
  params, _, _, traj, _, _ = _rollout()
  cfg = dataclasses.replace(_cfg("diffu_grpo", 4, False).likelihood, trajectory_steps=ROLLOUT.steps)
  key = jax.random.PRNGKey(3)
  rows = dict(mask_id=MASK, commit_step=traj.commit_step, commit_conf=traj.commit_conf,
              completion_mask=traj.completion_mask)
  full = jax.jit(lambda prm: LIKELIHOOD.get(likelihood)(  # compiled, as the per-pass forms below
      jax_logits, prm, traj.tokens, P, key, cfg, **rows))(params)
  form = PASSES[likelihood]
  one = jax.jit(lambda j: form.run(jax_logits, params, traj.tokens, P, key, cfg, pass_index=j, **rows))
  outs = [one(jnp.int32(j)) for j in range(form.num_passes(cfg))]
  np.testing.assert_allclose(np.asarray(sum(o[0].logp for o in outs)), np.asarray(full.logp), rtol=1e-6, atol=1e-6)
  np.testing.assert_array_equal(np.asarray(sum(o[1].astype(jnp.int32) for o in outs)), 1)
  for scores, _ in outs:
    np.testing.assert_array_equal(np.asarray(scores.mask), np.asarray(full.mask))
    assert scores.num_states == full.num_states and scores.kind == full.kind


@pytest.mark.parametrize("objective,beta,likelihood", [("bgpo", 0.04, "elbo_mc"), ("bgpo", 0.0, "elbo_mc"),
                                                       ("diffu_grpo", 0.04, "elbo_mc"), ("wd1", 0.04, "stratified"),
                                                       ("diffu_grpo", 0.04, "stratified"), ("diffu_grpo", 0.0, "elbo"),
                                                       ("wd1", 0.04, "trajectory")])
def test_pass_accumulated_gradient_equals_the_one_shot_gradient(objective, beta, likelihood):
  """rl.pass_accum (the passes one at a time: BGPO's n_t samples, SML's K strata, GDPO's nodes)
  against the one-shot gradient of the same loss under the same masks, at the first inner update
  (θ_old = θ) and a later one (θ_old given)."""
  params, ref, old, traj, rewards, weights = _rollout()
  key = jax.random.PRNGKey(7)
  out = []
  for pass_accum in (False, True):
    grad = make_objective_grad(jax_logits, _cfg(objective, 4, pass_accum, beta, likelihood=likelihood), mask_id=MASK)
    out.append(jax.jit(lambda p, r, o: (grad(p, r, traj, rewards, weights, key),
                                        grad(p, r, traj, rewards, weights, key, old_params=o)))(params, ref, old))
  _assert_same(*out)


@pytest.mark.parametrize("objective,likelihood", [("bgpo", "elbo_mc"), ("diffu_grpo", "stratified")])
def test_pass_accumulation_inside_micro_batches_equals_the_whole_batch(objective, likelihood):
  """rl.pass_accum with rl.grad_accum = 2 (each micro-batch differentiated pass by pass) against the
  whole batch's one-shot gradient under the same per-row masks (the oracle of test_grad_accum.py)."""
  from daca_jax.parallel import per_sequence_keys
  params, ref, old, traj, rewards, weights = _rollout()
  key = jax.random.PRNGKey(7)
  cfg = lambda pa, ga: TrainConfig(rollout=ROLLOUT, likelihood=_cfg(objective, 4, pa).likelihood,
                                   rl=RLConfig(objective=objective, credit="dps", likelihood=likelihood, group_size=G,
                                               prompts_per_step=PROMPTS, clip_eps=0.2, beta=0.04, pass_accum=pa,
                                               grad_accum=ga))
  out = []
  for pa, ga in ((False, 1), (True, 2)):
    est = per_sequence_keys(LIKELIHOOD.get(likelihood)) if ga == 1 else None
    grad = make_objective_grad(jax_logits, cfg(pa, ga), mask_id=MASK, estimator=est)
    out.append(jax.jit(lambda p, r, o: (grad(p, r, traj, rewards, weights, key),
                                        grad(p, r, traj, rewards, weights, key, old_params=o)))(params, ref, old))
  _assert_same(*out)


def _wide_logits(params, tokens):
  """A model whose activations dominate memory: embedding -> [B, T, H] -> logits."""
  h = jnp.tanh(params["emb"][tokens] + jnp.mean(params["emb"][tokens], axis=1, keepdims=True))
  h = jnp.tanh(h @ params["mid"])
  return h @ params["out"]


def _temp_bytes(samples, pass_accum):
  hidden, length = 512, 48
  rng = np.random.default_rng(0)
  params = {"emb": jnp.asarray(rng.standard_normal((V, hidden)), jnp.float32) * 0.1,
            "mid": jnp.asarray(rng.standard_normal((hidden, hidden)), jnp.float32) * 0.05,
            "out": jnp.asarray(rng.standard_normal((hidden, V)), jnp.float32) * 0.1}
  rollout = RolloutConfig(gen_length=length, block_length=length, steps=4, temperature=1.0)
  cfg = _cfg("bgpo", samples, pass_accum, beta=0.0)
  cfg = TrainConfig(rollout=rollout, likelihood=cfg.likelihood, rl=cfg.rl)
  b = PROMPTS * G
  tokens = jnp.asarray(rng.integers(0, 9, (b, P + length)), jnp.int32)
  traj = Trajectory(tokens=tokens, completion_mask=jnp.ones((b, length)), commit_step=jnp.zeros((b, length), jnp.int32),
                    commit_conf=jnp.ones((b, length)), prompt_len=P, mask_id=MASK)
  grad = make_objective_grad(_wide_logits, cfg, mask_id=MASK)
  f = jax.jit(lambda p: grad(p, p, traj, jnp.linspace(0, 1, b), jnp.ones((b, length)), jax.random.PRNGKey(0))[0])
  return f.lower(params).compile().memory_analysis().temp_size_in_bytes


def test_pass_accumulation_memory_is_flat_in_the_number_of_samples():
  """Compiled temporary memory of the gradient: per-pass accumulation at n_t = 2 and 16 within a
  small tolerance (only [B, n_t·L] log-prob arrays grow), while the vectorised one-shot gradient
  keeps every sample's activations ([n_t, B, L, H])."""
  flat = {n: _temp_bytes(n, True) for n in (2, 16)}
  naive = {n: _temp_bytes(n, False) for n in (2, 16)}
  print("temp bytes: pass_accum", flat, "vectorised", naive)
  assert flat[16] < 1.25 * flat[2], flat
  assert naive[16] > 4 * naive[2], naive
  assert flat[16] * 4 < naive[16]


def test_refused_combinations():
  with pytest.raises(ConfigError, match="Jensen"):
    configure.validate(TrainConfig(rl=RLConfig(objective="bgpo", likelihood="elbo")))
  with pytest.raises(ConfigError, match="couples the passes"):
    configure.validate(TrainConfig(rl=RLConfig(objective="gspo", likelihood="elbo_mc", pass_accum=True)))
  with pytest.raises(ConfigError, match="no per-pass form"):
    configure.validate(TrainConfig(rl=RLConfig(objective="bgpo", likelihood="mean_field", pass_accum=True)))
  with pytest.raises(ConfigError, match="spans every pass"):
    configure.validate(TrainConfig(rl=RLConfig(objective="bgpo", likelihood="stratified", pass_accum=True)))
  configure.validate(TrainConfig(rl=RLConfig(objective="bgpo", likelihood="elbo_mc", pass_accum=True)))


def test_bgpo_presets():
  """configs/paper.py:bgpo_<task>: BGPO's pieces on d1's recipe; the SML arm drops pass accumulation
  (refused there), the smoke form keeps the method."""
  from configs import paper
  from daca_jax.config.configure import train_config_from_dict
  cfg = train_config_from_dict(paper.get_config("bgpo_gsm8k"))
  assert (cfg.rl.objective, cfg.rl.likelihood, cfg.likelihood.elbo_mc.samples) == ("bgpo", "elbo_mc", 16)
  assert (cfg.rl.pass_accum, cfg.rl.num_iterations, cfg.rl.grad_accum) == (True, 1, 2)
  sml = train_config_from_dict(paper.get_config("bgpo_gsm8k_daca"))
  assert (sml.rl.likelihood, sml.rl.pass_accum, sml.rl.credit) == ("stratified", False, "dps")
  small = train_config_from_dict(paper.get_config("bgpo_gsm8k,smoke"))
  assert (small.rl.objective, small.rl.pass_accum, small.rl.grad_accum) == ("bgpo", True, 2)


def test_bgpo_presets_carry_its_steps_and_code_recipe():
  """THU-KEG/BGPO's README: 700 steps on math, 560 on code (5 epochs of 112) and Countdown, 400 on
  Sudoku; its code model card: 512 tokens in 512 steps, blocks of 32, learning rate 5e-7. With μ = 1
  the cadences in optimizer updates (d1's warmup ratio and save_steps 100) count rollouts."""
  from configs import paper
  from daca_jax.config.configure import train_config_from_dict
  get = lambda name: train_config_from_dict(paper.get_config(name))
  steps = {"gsm8k": 700, "math500": 700, "humaneval": 560, "mbpp": 560, "countdown": 560, "sudoku": 400}
  for task, n in steps.items():
    cfg = get(f"bgpo_{task}")
    assert (cfg.rl.steps, cfg.rl.num_iterations, cfg.rl.warmup_steps) == (n, 1, 1)
    assert (cfg.checkpoint.every, cfg.rl.eval_every) == (100, 100)
  code, d1_code, math = get("bgpo_humaneval"), get("d1_humaneval"), get("bgpo_gsm8k")
  assert (code.rl.learning_rate, code.rollout.gen_length, code.rollout.steps, code.rollout.block_length) == (
      5e-7, 512, 512, 32)
  assert d1_code.rl.learning_rate == math.rl.learning_rate == 3e-6 and math.rollout.gen_length == 256
  assert get("bgpo_json").rl.steps == get("d1_json").rl.steps  # no BGPO run on JSON: d1's bound
