"""LoRA: zero-init equals the base exactly, gradients and updates reach the adapters only, a numpy
LoRA linear, merged weights, the reference policy without a weight copy, and a GRPO update."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from daca_jax.errors import ConfigError
from daca_jax.models import init_model, make_logits_fn, tiny_config
from daca_jax.models import lora
from daca_jax.models.llada import Block

CFG = tiny_config(d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, mlp_dim=48, vocab_size=40,
                  mask_token_id=39, lora_rank=4, lora_alpha=8.0)
X = jnp.asarray(np.random.default_rng(0).integers(0, 39, (2, 7)), jnp.int32)


def _setup(targets=None, b_scale=0.0):
  cfg = CFG if targets is None else dataclasses.replace(CFG, lora_targets=targets)
  gd, base = init_model(cfg, seed=1)
  ad = lora.init_lora(cfg, jax.random.key(2))
  if b_scale:  # non-zero B, as after some training
    ad = jax.tree.map(lambda x: x, ad)
    for i, t in enumerate(ad):
      ad[t]["b"] = b_scale * jax.random.normal(jax.random.key(10 + i), ad[t]["b"].shape)
  return cfg, gd, base, ad


def test_zero_init_equals_base_exactly_and_reference_shares_weights():
  cfg, gd, base, ad = _setup()
  assert all(float(jnp.abs(v["b"]).max()) == 0.0 for v in ad.values())
  params = lora.lora_params(base, ad)
  f = jax.jit(lora.make_lora_logits_fn(gd))
  np.testing.assert_array_equal(np.asarray(f(params, X)), np.asarray(jax.jit(make_logits_fn(gd))(base, X)))
  ref = lora.reference_params(params)
  assert all(a is b for a, b in zip(jax.tree.leaves(ref["base"]), jax.tree.leaves(base)))  # no copy
  np.testing.assert_array_equal(np.asarray(f(ref, X)), np.asarray(jax.jit(make_logits_fn(gd))(base, X)))
  d, r, n = 32, 4, 2
  sizes = {"q": (d, 32), "k": (d, 16), "v": (d, 16), "o": (32, d), "gate": (d, 48), "up": (d, 48),
           "down": (48, d)}
  assert lora.trainable_count(ad) == sum(n * (i * r + r * o) for i, o in sizes.values())


def test_lora_linear_matches_numpy():
  cfg = CFG
  blk = Block(cfg, nnx.Rngs(0))
  rng = np.random.default_rng(3)
  h = rng.normal(size=(2, 5, 32)).astype(np.float32)
  a = rng.normal(size=(32, 4)).astype(np.float32)
  b = rng.normal(size=(4, 48)).astype(np.float32)
  got = blk.proj("gate", jnp.asarray(h), {"gate": {"a": jnp.asarray(a), "b": jnp.asarray(b)}})
  w = np.asarray(blk.gate_proj.kernel[...])
  want = h @ w + (8.0 / 4) * (h @ a) @ b
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
  # a projection without an adapter is the plain linear
  np.testing.assert_allclose(np.asarray(blk.proj("up", jnp.asarray(h), {"gate": {"a": a, "b": b}})),
                             h @ np.asarray(blk.up_proj.kernel[...]), rtol=1e-5, atol=1e-5)


def test_adapters_equal_merged_weights():
  cfg, gd, base, ad = _setup(b_scale=0.1)
  got = jax.jit(lora.make_lora_logits_fn(gd))(lora.lora_params(base, ad), X)
  merged = lora.merge_lora(base, ad, cfg)
  want = jax.jit(make_logits_fn(gd))(merged, X)
  assert float(jnp.abs(got - jax.jit(make_logits_fn(gd))(base, X)).max()) > 1e-3  # adapters do something
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-5)


def test_gradient_reaches_adapters_only():
  cfg, gd, base, ad = _setup(targets="q,v,down", b_scale=0.1)
  f = jax.jit(lora.make_lora_logits_fn(gd))
  g = jax.jit(jax.grad(lambda p: jnp.sum(jax.nn.log_softmax(f(p, X))[..., 0])))(lora.lora_params(base, ad))
  assert all(float(jnp.abs(x).max()) == 0.0 for x in jax.tree.leaves(g["base"]))
  assert set(g["lora"]) == {"q", "v", "down"}
  assert all(float(jnp.abs(x).max()) > 0.0 for x in jax.tree.leaves(g["lora"]))


def test_one_optimizer_step_changes_only_adapters():
  cfg, gd, base, ad = _setup()
  f = jax.jit(lora.make_lora_logits_fn(gd))
  params = lora.lora_params(base, ad)
  opt = lora.lora_optimizer(optax.chain(optax.clip_by_global_norm(1.0),
                                        optax.adamw(1e-2, weight_decay=0.1)))
  state = opt.init(params)
  n_state = sum(int(x.size) for x in jax.tree.leaves(state))
  assert n_state <= 2 * lora.trainable_count(ad) + 8  # Adam moments of the adapters only
  g = jax.jit(jax.grad(lambda p: jnp.sum(jax.nn.log_softmax(f(p, X))[..., 0])))(params)
  step = jax.jit(lambda g, s, p: optax.apply_updates(p, opt.update(g, s, p)[0]))
  new = step(g, state, params)
  for a, b in zip(jax.tree.leaves(new["base"]), jax.tree.leaves(base)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))  # weight decay did not touch the base
  assert all(float(jnp.abs(new["lora"][t]["b"]).max()) > 0 for t in new["lora"])
  assert float(jnp.abs(f(new, X) - f(params, X)).max()) > 0


def test_grpo_learner_update_with_lora():
  from daca_jax.rl.learner import GRPOLearner
  from daca_jax.config.likelihood import LikelihoodConfig
  from daca_jax.likelihood.stratified import StratifiedConfig
  from daca_jax.config.rl import RLConfig
  from daca_jax.config.rollout import RolloutConfig
  from daca_jax.config.train import TrainConfig

  cfg, gd, base, ad = _setup()
  tc = TrainConfig(model=cfg, rollout=RolloutConfig(gen_length=4, block_length=4, steps=2),
                   likelihood=LikelihoodConfig(stratified=StratifiedConfig(num_strata=2)),
                   rl=RLConfig(group_size=2, prompts_per_step=2, beta=0.04, learning_rate=1e-2,
                               warmup_steps=0))
  learner = GRPOLearner(lora.make_lora_logits_fn(gd), tc, mask_id=39, eos_id=38,
                        optimizer_wrapper=lora.lora_optimizer)
  params = lora.lora_params(base, ad)
  prompts = jnp.asarray(np.random.default_rng(1).integers(0, 30, (4, 3)), jnp.int32)
  traj = learner.rollout(params, prompts, jax.random.key(0))
  rewards = jnp.asarray([1.0, 0.0, 0.0, 1.0])
  new, _, metrics = learner.update(params, learner.init_opt_state(params), lora.reference_params(params),
                                   traj, rewards, learner.credit_weights(traj), jax.random.key(1))
  assert np.isfinite(float(metrics["loss"]))
  for a, b in zip(jax.tree.leaves(new["base"]), jax.tree.leaves(base)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert any(float(jnp.abs(x).max()) > 0 for t in new["lora"] for x in [new["lora"][t]["b"]])


@pytest.mark.parametrize("strategy", ["none", "pmap", "fsdp"])
def test_lora_update_returns_adapters_only_and_keeps_the_callers_base(strategy):
  # LORA_SPLIT: the compiled step outputs the adapters, not a copy of the base (one model copy per
  # device less at every update), and the results are those of the step that returns everything.
  from daca_jax.rl.learner import GRPOLearner
  from daca_jax.config.likelihood import LikelihoodConfig
  from daca_jax.likelihood.stratified import StratifiedConfig
  from daca_jax.config.parallel import ParallelConfig
  from daca_jax.config.train import TrainConfig
  from daca_jax.config.rl import RLConfig
  from daca_jax.config.rollout import RolloutConfig

  cfg, gd, base, ad = _setup(b_scale=0.05)
  tc = TrainConfig(model=cfg, rollout=RolloutConfig(gen_length=4, block_length=4, steps=2),
                   likelihood=LikelihoodConfig(stratified=StratifiedConfig(num_strata=2)),
                   rl=RLConfig(group_size=2, prompts_per_step=2, beta=0.04, learning_rate=1e-2,
                               warmup_steps=0),
                   parallel=ParallelConfig(strategy=strategy))
  make = lambda **kw: GRPOLearner(lora.make_lora_logits_fn(gd), tc, mask_id=39, eos_id=38,
                                  optimizer_wrapper=lora.lora_optimizer, **kw)
  split, whole = make(param_split=lora.LORA_SPLIT), make()
  params = lora.lora_params(base, ad)
  prompts = jnp.asarray(np.random.default_rng(1).integers(0, 30, (4, 3)), jnp.int32)
  traj = split.rollout(params, prompts, jax.random.key(0))
  rewards = jnp.asarray([1.0, 0.0, 0.0, 1.0])
  args = (lora.reference_params(params), traj, rewards, split.credit_weights(traj), jax.random.key(1))
  outputs = {}
  for name, learner in (("split", split), ("whole", whole)):
    lowered = learner.update.lower(params, learner.init_opt_state(params), *args)
    outputs[name] = lowered.compile().memory_analysis().output_size_in_bytes
    new, _, metrics = learner.update(params, learner.init_opt_state(params), *args)
    outputs[name, "params"], outputs[name, "metrics"] = new, metrics
  base_bytes = sum(x.nbytes for x in jax.tree.leaves(base))
  assert outputs["whole"] > base_bytes > outputs["split"], (outputs["whole"], base_bytes, outputs["split"])
  new_split, new_whole = outputs["split", "params"], outputs["whole", "params"]
  placed_base = jax.tree.leaves(new_split["base"])
  if strategy == "none":  # the caller's own arrays, not copies
    assert all(a is b for a, b in zip(placed_base, jax.tree.leaves(params["base"])))
  for a, b in zip(placed_base + jax.tree.leaves(new_split["lora"]),
                  jax.tree.leaves(new_whole["base"]) + jax.tree.leaves(new_whole["lora"])):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)
  assert any(float(jnp.abs(a - b).max()) > 0 for a, b in zip(jax.tree.leaves(new_split["lora"]),
                                                              jax.tree.leaves(params["lora"])))
  for k in outputs["whole", "metrics"]:
    np.testing.assert_allclose(float(outputs["split", "metrics"][k]), float(outputs["whole", "metrics"][k]),
                               rtol=1e-5, atol=1e-7, err_msg=k)


def test_bad_lora_config():
  with pytest.raises(ConfigError, match=r"model\.lora_rank=0"):
    lora.init_lora(dataclasses.replace(CFG, lora_rank=0), jax.random.key(0))
  with pytest.raises(ConfigError, match=r"model\.lora_targets='q,attn'"):
    lora.init_lora(dataclasses.replace(CFG, lora_targets="q,attn"), jax.random.key(0))


def test_model_split_applies_adapters_for_the_chunked_gather():
  """``model.logprob_chunk`` with LoRA: the attached hidden/head split includes the adapters, so the
  chunked target log-probs equal the full logits' ones (the split once ran the base alone)."""
  from daca_jax.likelihood.common import score_targets, token_logprobs

  _, gd, base, ad = _setup(b_scale=0.1)
  params = lora.lora_params(base, ad)
  tgt = X[:, 2:]
  full = token_logprobs(lora.make_lora_logits_fn(gd)(params, X)[:, 2:], tgt)
  fn = lora.make_lora_logits_fn(gd, logprob_chunk=2)
  assert fn.logprob_chunk == 2 and fn.hidden_fn is not None  # the chunked path is the one taken
  chunked = score_targets(fn, params, X, tgt, 2)
  base_only = token_logprobs(make_logits_fn(gd)(base, X)[:, 2:], tgt)
  assert float(jnp.abs(full - base_only).max()) > 1e-3
  np.testing.assert_allclose(np.asarray(chunked), np.asarray(full), rtol=1e-5, atol=1e-5)
  assert not hasattr(lora.make_lora_logits_fn(gd), "graphdef")  # the K/V cache must refuse it


# --- LoRA dropout (model.lora_dropout): the update's likelihood passes only -----------------------------


def test_lora_dropout_on_the_adapter_input_matches_numpy():
  cfg = dataclasses.replace(CFG, lora_dropout=0.25)
  blk = Block(cfg, nnx.Rngs(0))
  rng = np.random.default_rng(3)
  h = rng.normal(size=(2, 5, 32)).astype(np.float32)
  a = rng.normal(size=(32, 4)).astype(np.float32)
  b = rng.normal(size=(4, 48)).astype(np.float32)
  ad = {"gate": {"a": jnp.asarray(a), "b": jnp.asarray(b)}, "up": {"a": jnp.asarray(a), "b": jnp.asarray(b)}}
  key = jax.random.key(5)
  w = np.asarray(blk.gate_proj.kernel[...])
  plain = h @ w + 2.0 * (h @ a) @ b
  np.testing.assert_allclose(np.asarray(blk.proj("gate", jnp.asarray(h), ad)), plain, rtol=1e-5, atol=1e-5)
  got = np.asarray(blk.proj("gate", jnp.asarray(h), ad, key))
  x = h @ w  # the base path sees the whole input; only the adapter's input is dropped, and rescaled
  adapter = (got - x) / 2.0  # = (drop(h) a) b
  keep = np.asarray(jax.random.bernoulli(jax.random.fold_in(key, 4), 0.75, h.shape))  # "gate" is target 4
  assert 0.6 < keep.mean() < 0.9
  np.testing.assert_allclose(adapter, (np.where(keep, h / 0.75, 0.0) @ a) @ b, rtol=1e-4, atol=1e-4)
  other = np.asarray(blk.proj("up", jnp.asarray(h), ad, key)) - h @ np.asarray(blk.up_proj.kernel[...])
  assert not np.allclose(other, got - x, atol=1e-3)  # each target draws its own mask (PEFT: one module each)


def test_lora_dropout_only_in_training_passes_and_not_for_the_reference():
  cfg, gd, base, ad = _setup(b_scale=0.1)
  gd_drop, _ = init_model(dataclasses.replace(cfg, lora_dropout=0.3), seed=1)
  params = lora.lora_params(base, ad)
  plain, fns = lora.make_lora_logits_fn(gd), lora.make_lora_logits_fn(gd_drop)
  inference = np.asarray(fns(params, X))
  np.testing.assert_array_equal(inference, np.asarray(plain(params, X)))  # rollouts / evaluation: no dropout
  k1, k2 = jax.random.key(1), jax.random.key(2)
  t1 = np.asarray(fns.for_training(k1)(params, X))
  assert float(np.abs(t1 - inference).max()) > 1e-3
  np.testing.assert_array_equal(t1, np.asarray(fns.for_training(k1)(params, X)))  # a key is one mask
  assert float(np.abs(t1 - np.asarray(fns.for_training(k2)(params, X))).max()) > 1e-3
  ref = lora.reference_params(params)  # adapters off: nothing to drop
  np.testing.assert_array_equal(np.asarray(fns.for_training(k1)(ref, X)), np.asarray(fns(ref, X)))
  # rate 0 (and the plain model without adapters) trains on exactly the inference logits
  np.testing.assert_array_equal(np.asarray(plain.for_training(k1)(params, X)), inference)
  no_adapters = make_logits_fn(gd)
  assert no_adapters.train is None and no_adapters.for_training(k1) is no_adapters


def test_update_applies_lora_dropout_and_rollouts_do_not():
  from daca_jax.rl.learner import GRPOLearner
  from daca_jax.config.likelihood import LikelihoodConfig
  from daca_jax.likelihood.stratified import StratifiedConfig
  from daca_jax.config.rl import RLConfig
  from daca_jax.config.rollout import RolloutConfig
  from daca_jax.config.train import TrainConfig

  _, gd, base, ad = _setup(b_scale=0.05)
  grads, trajs = {}, {}
  for rate in (0.0, 0.3):
    cfg = dataclasses.replace(CFG, lora_dropout=rate)
    gd, _ = init_model(cfg, seed=1)
    tc = TrainConfig(model=cfg, rollout=RolloutConfig(gen_length=4, block_length=4, steps=2),
                     likelihood=LikelihoodConfig(stratified=StratifiedConfig(num_strata=2)),
                     rl=RLConfig(group_size=2, prompts_per_step=2, beta=0.04, warmup_steps=0))
    learner = GRPOLearner(lora.make_lora_logits_fn(gd), tc, mask_id=39, eos_id=38,
                          optimizer_wrapper=lora.lora_optimizer)
    params = lora.lora_params(base, ad)
    prompts = jnp.asarray(np.random.default_rng(1).integers(0, 30, (4, 3)), jnp.int32)
    trajs[rate] = traj = learner.rollout(params, prompts, jax.random.key(0))
    grads[rate], _ = jax.jit(learner.objective_grad)(params, lora.reference_params(params), traj,
                                            jnp.asarray([1.0, 0.0, 0.0, 1.0]), learner.credit_weights(traj),
                                            jax.random.key(1))
  np.testing.assert_array_equal(np.asarray(trajs[0.0].tokens), np.asarray(trajs[0.3].tokens))
  diff = max(float(jnp.abs(a - b).max()) for a, b in zip(jax.tree.leaves(grads[0.0]["lora"]),
                                                        jax.tree.leaves(grads[0.3]["lora"])))
  assert diff > 1e-4


def test_lora_dropout_config():
  with pytest.raises(ConfigError, match=r"model\.lora_dropout=1\.0 .*a probability in \[0, 1\)"):
    dataclasses.replace(CFG, lora_dropout=1.0).validate()
  with pytest.raises(ConfigError, match=r"model\.lora_dropout=0\.05 .*0 when model\.lora_rank=0"):
    dataclasses.replace(CFG, lora_dropout=0.05, lora_rank=0).validate()


def test_lora_dropout_per_row_under_gradient_accumulation():
  """With rl.grad_accum each row's dropout mask follows from its own row key, so the accumulated
  gradient equals the whole batch's under per-row keys (the oracle: one pass of per_sequence_keys over
  the estimator with its training passes inside); a mask shared by all rows would not."""
  from daca_jax.likelihood import LIKELIHOOD
  from daca_jax.parallel import per_sequence_keys
  from daca_jax.rl.learner import GRPOLearner
  from daca_jax.rl.update import make_objective_grad
  from daca_jax.rl.update import training_passes
  from daca_jax.config.likelihood import LikelihoodConfig
  from daca_jax.likelihood.stratified import StratifiedConfig
  from daca_jax.config.rl import RLConfig
  from daca_jax.config.rollout import RolloutConfig
  from daca_jax.config.train import TrainConfig

  _, _, base, ad = _setup(b_scale=0.1)
  cfg = dataclasses.replace(CFG, lora_dropout=0.3)
  gd, _ = init_model(cfg, seed=1)
  fns = lora.make_lora_logits_fn(gd)

  def train_cfg(grad_accum):
    return TrainConfig(model=cfg, rollout=RolloutConfig(gen_length=4, block_length=4, steps=2),
                       likelihood=LikelihoodConfig(stratified=StratifiedConfig(num_strata=2)),
                       rl=RLConfig(group_size=2, prompts_per_step=4, beta=0.04, warmup_steps=0,
                                   grad_accum=grad_accum))

  params = lora.lora_params(base, ad)
  learner = GRPOLearner(fns, train_cfg(1), mask_id=39, eos_id=38, optimizer_wrapper=lora.lora_optimizer)
  prompts = jnp.asarray(np.random.default_rng(1).integers(0, 30, (8, 3)), jnp.int32)
  traj = learner.rollout(params, prompts, jax.random.key(0))
  rewards = jnp.asarray([1.0, 0.0, 0.0, 1.0, 0.5, 0.0, 1.0, 1.0])
  weights = learner.credit_weights(traj)
  ref, key = lora.reference_params(params), jax.random.key(3)
  est = LIKELIHOOD.get("stratified")

  def grads(grad_accum, estimator=None):
    g = make_objective_grad(fns, train_cfg(grad_accum), mask_id=39, estimator=estimator)
    return jax.jit(g)(params, ref, traj, rewards, weights, key)[0]["lora"]

  want = grads(1, per_sequence_keys(training_passes(est)))
  shared = grads(1, per_sequence_keys(est))  # one dropout draw for every row
  got = grads(2)
  diff = lambda a, b: max(float(jnp.abs(x - y).max()) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))
  scale = max(float(jnp.abs(x).max()) for x in jax.tree.leaves(want))
  assert diff(got, want) < 1e-5 * scale
  assert diff(shared, want) > 1e-3 * scale
