"""Speed figures of the tiny Sudoku config, measured in one run, printed as ratios.

  python experiments/benchmark.py [--config=configs/sudoku_tiny.py] [--batch=64] [--json=bench.json]

Prints rollout tokens/s, the DPS on/off time ratio (rollout with step records + DPS weights vs. a
plain rollout: the design target is ≈ 1, no extra forward pass) and the SML K=4 / mean-field time
ratio of the per-token likelihood (design target ≈ K, no more) and of a full update step. Absolute
times are only meaningful on an accelerator; the ratios are what to compare.
"""
import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags, logging
from ml_collections import config_flags

from daca_jax.benchmarking import compiled_temp_bytes, time_fn
from daca_jax.credit import CREDIT
from daca_jax.likelihood import LIKELIHOOD
from daca_jax.diffusion import make_rollout_fn
from daca_jax.metrics import format_table
from daca_jax.models import count_params, init_model, make_logits_fn
from daca_jax.pipeline import build_task
from daca_jax.rl import GRPOLearner
from daca_jax.types import train_config_from_dict

_CONFIG = config_flags.DEFINE_config_file("config", "configs/sudoku_tiny.py", "Config file.")
_BATCH = flags.DEFINE_integer("batch", 64, "Sequences per rollout / likelihood call.")
_REPEATS = flags.DEFINE_integer("repeats", 5, "Timed repetitions (best is reported).")
_JSON = flags.DEFINE_string("json", "", "Also write every figure to this JSON file.")


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  cfg = train_config_from_dict(_CONFIG.value)
  b, r = _BATCH.value, _REPEATS.value
  gd, params = init_model(cfg.model, cfg.seed)
  logits_fn = make_logits_fn(gd)
  task = build_task(cfg)
  mask_id, eos_id = task.tokenizer.mask_id, task.tokenizer.eos_id
  p = task.prompt_len
  examples = task.train_examples(b, cfg.seed)
  prompts = jnp.asarray(task.encode_prompts(examples))
  key = jax.random.PRNGKey(0)
  res = {"batch": b, "gen_length": cfg.rollout.gen_length, "steps": cfg.rollout.steps,
         "params": count_params(params), "backend": jax.default_backend()}

  plain = make_rollout_fn(logits_fn, cfg.rollout, mask_id=mask_id, eos_id=eos_id)
  recorded = make_rollout_fn(logits_fn, cfg.rollout, mask_id=mask_id, eos_id=eos_id, record_step_conf=True)
  dps = CREDIT.get("dps")
  with_dps = jax.jit(lambda prm, x, k: dps(recorded(prm, x, k), cfg.credit, cfg.rollout))
  t_plain = time_fn(plain, params, prompts, key, repeats=r)
  t_dps = time_fn(with_dps, params, prompts, key, repeats=r)
  res["rollout_s"] = t_plain["best_s"]
  res["rollout_compile_s"] = t_plain["compile_s"]
  res["rollout_tokens_per_s"] = b * cfg.rollout.gen_length / t_plain["best_s"]
  res["rollout_with_dps_s"] = t_dps["best_s"]
  res["dps_on_off_ratio"] = t_dps["best_s"] / t_plain["best_s"]

  traj = plain(params, prompts, key)
  lik = {}
  for name, k in (("mean_field", 1), ("stratified", 4)):
    c = dataclasses.replace(cfg, rl=dataclasses.replace(cfg.rl, likelihood=name),
                            likelihood=dataclasses.replace(cfg.likelihood, num_strata=k))
    learner = GRPOLearner(logits_fn, c, mask_id=mask_id, eos_id=eos_id)
    logp = jax.jit(lambda prm, t, kk, lr=learner: lr.logprobs(prm, t, p, kk))
    lik[name] = time_fn(logp, params, traj.tokens, key, repeats=r)
    opt = learner.init_opt_state(params)
    rewards = jnp.asarray(np.random.default_rng(1).uniform(size=b), jnp.float32)
    weights = traj.completion_mask
    upd = time_fn(learner.update, params, opt, params, traj, rewards, weights, key, repeats=max(2, r // 2))
    res[f"{name}_logprob_s"] = lik[name]["best_s"]
    res[f"{name}_update_s"] = upd["best_s"]
    res[f"{name}_update_compile_s"] = upd["compile_s"]
  res["sml_k4_vs_mean_field_logprob_ratio"] = res["stratified_logprob_s"] / res["mean_field_logprob_s"]
  res["sml_k4_vs_mean_field_update_ratio"] = res["stratified_update_s"] / res["mean_field_update_s"]

  # Peak memory of SML with a 32k vocabulary: all K strata at once (vmap) vs one stratum at a time
  # (lax.map, likelihood.strata_batch=1); XLA's compiled scratch size, no execution needed.
  big = dataclasses.replace(cfg.model, vocab_size=32768, d_model=64, n_layers=1, n_heads=2, mlp_dim=128)
  gd_big, params_big = init_model(big, 0)
  big_fn = make_logits_fn(gd_big)
  toks = jnp.zeros((8, 64), jnp.int32)
  sml = lambda sb: (lambda prm, t, kk: LIKELIHOOD.get("stratified")(
      big_fn, prm, t, 32, kk, dataclasses.replace(cfg.likelihood, num_strata=4, strata_batch=sb),
      mask_id=big.mask_token_id))
  res["sml_v32k_full_logits_mb"] = 4 * 8 * 64 * 32768 * 4 / 2**20
  res["sml_v32k_vmap_temp_mb"] = compiled_temp_bytes(sml(0), params_big, toks, key) / 2**20
  res["sml_v32k_strata_batch1_temp_mb"] = compiled_temp_bytes(sml(1), params_big, toks, key) / 2**20

  rows = [[k, v] for k, v in res.items()]
  print(format_table(rows, ["figure", "value"]))
  if _JSON.value:
    with open(_JSON.value, "w") as f:
      json.dump(res, f, indent=2)


if __name__ == "__main__":
  app.run(main)
