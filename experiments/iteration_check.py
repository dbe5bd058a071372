"""One whole RL iteration at LLaDA-8B width on the devices at hand, measured next to plan.py's prediction.

  python experiments/iteration_check.py --device=h200 [--lora_rank=0] [--json=$OUT/iteration.json]
  python experiments/iteration_check.py --model=tiny --device=v5e   # CPU: the same code path, tiny

Random bf16 weights, random prompts. First the plan (:mod:`daca_jax.planning`) compiles the rollout and
the update for these devices with this backend's compiler, from shapes; when full fine-tuning does not
fit ``--device``'s memory the run switches to LoRA (``--fallback_lora_rank``). Then it allocates the
model, runs the rollout, the likelihood passes (one jitted call of the estimator) and one update, and
prints, per phase, the measured seconds and MFU next to the predicted ones, and the allocator's peak
bytes (GPU/TPU; 'n/a' on CPU) next to the compiled peak. Used by experiments/scripts/gpu_check.sh.
"""

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from daca_jax.measure import benchmarking as bm
from daca_jax.run.cli_errors import reported_errors
from daca_jax.io_utils import atomic_write_json
from daca_jax.run.metrics import format_table
from daca_jax.models import init_model, lora
from daca_jax.planning import plan, spec as plan_spec
from daca_jax.planning.compiled import build
from daca_jax.planning.devices import device_spec

_MODEL = flags.DEFINE_string("model", "llada_8b", "A key of daca_jax.planning.spec.MODELS.")
_LAYERS = flags.DEFINE_integer("layers", 0, "Override the model's layer count (0: all).")
_DEVICE = flags.DEFINE_string("device", "h200", "Device kind of the prediction (daca_jax/hardware.py).")
_METHOD = flags.DEFINE_string("method", "daca", "A key of daca_jax.planning.spec.METHODS.")
_LORA = flags.DEFINE_integer("lora_rank", 0, "0: full fine-tuning (LoRA when it does not fit).")
_FALLBACK = flags.DEFINE_integer("fallback_lora_rank", 128, "LoRA rank used when full fine-tuning does not fit.")
_PROMPTS = flags.DEFINE_integer("prompts_per_step", 1, "Prompts per step (B = prompts x group_size).")
_GROUP = flags.DEFINE_integer("group_size", 8, "G.")
_PROMPT_LEN = flags.DEFINE_integer("prompt_len", 64, "Prompt tokens.")
_GEN = flags.DEFINE_integer("gen_length", 256, "L.")
_BLOCK = flags.DEFINE_integer("block_length", 32, "Block length.")
_STEPS = flags.DEFINE_integer("steps", 128, "Sampler steps.")
_REMAT = flags.DEFINE_string("remat", "full", "model.remat.")
_STRATA_BATCH = flags.DEFINE_integer("strata_batch", 0, "likelihood.strata_batch.")
_MFU = flags.DEFINE_float("mfu", 0.4, "MFU of the prediction.")
_USABLE = flags.DEFINE_float("usable_fraction", 0.9, "Fraction of device memory the plan may use.")
_JSON = flags.DEFINE_string("json", "", "Write predicted and measured figures here.")


def _timed(fn, *args):
  t0 = time.perf_counter()
  out = jax.block_until_ready(fn(*args))
  return out, time.perf_counter() - t0


def main(argv):
  del argv
  with reported_errors():
    _run()


def _run():
  dev = device_spec(_DEVICE.value, "--device")
  n = jax.device_count()
  spec = plan_spec.PlanSpec(model=_MODEL.value, layers=_LAYERS.value, device=dev.name, num_devices=n,
                            method=_METHOD.value, strategy="none" if n == 1 else "fsdp",
                            prompts_per_step=_PROMPTS.value * n, group_size=_GROUP.value,
                            prompt_len=_PROMPT_LEN.value, gen_length=_GEN.value, block_length=_BLOCK.value,
                            steps=_STEPS.value, lora_rank=_LORA.value, remat=_REMAT.value,
                            strata_batch=_STRATA_BATCH.value)
  record = plan.run_plan(spec, n)
  pred = plan.assess(record, dev, mfu=_MFU.value, usable_fraction=_USABLE.value)
  if not pred["fits"] and spec.lora_rank == 0 and _FALLBACK.value:
    print(f"full fine-tuning needs {pred['iteration_peak_gb']:.1f} GB per device > {_USABLE.value:.0%} of "
          f"{dev.hbm_bytes / 1e9:.0f} GB: LoRA r {_FALLBACK.value}", flush=True)
    spec = dataclasses.replace(spec, lora_rank=_FALLBACK.value)
    record = plan.run_plan(spec, n)
    pred = plan.assess(record, dev, mfu=_MFU.value, usable_fraction=_USABLE.value)

  built = build(plan_spec.train_config(spec), spec.prompt_len)
  learner, cfg = built.learner, plan_spec.train_config(spec)
  _, params = init_model(cfg.model, 0)
  params = jax.tree.map(lambda x: x.astype(jnp.bfloat16) if x.dtype == jnp.float32 and
                        cfg.model.param_dtype == "bfloat16" else x, params)
  ref_params = params
  if spec.lora_rank:
    params = lora.lora_params(params, lora.init_lora(cfg.model, jax.random.PRNGKey(1)))
    ref_params = lora.reference_params(params)
  opt_state = learner.init_opt_state(params)
  rng = np.random.default_rng(0)
  vocab = cfg.model.vocab_limit or cfg.model.vocab_size
  prompts = jnp.asarray(rng.integers(0, min(vocab, cfg.model.mask_token_id), (spec.batch, spec.prompt_len)),
                        jnp.int32)
  key = jax.random.PRNGKey(0)

  measured = {}
  t0 = time.perf_counter()
  traj, _ = _timed(learner.rollout, params, prompts, key)  # compile + run
  measured["rollout_compile_and_run_s"] = time.perf_counter() - t0
  traj, measured["rollout_s"] = _timed(learner.rollout, params, prompts, jax.random.PRNGKey(1))
  rewards = jnp.asarray(rng.integers(0, 2, spec.batch), jnp.float32)
  credit = learner.assign_credit(traj, rewards, learner.init_credit_state())
  weights = credit.weights if credit.token_advantages is None else (credit.weights, credit.token_advantages)
  logp = jax.jit(learner.logprobs)
  _timed(logp, params, traj, key)
  _, measured["likelihood_s"] = _timed(logp, params, traj, jax.random.PRNGKey(2))
  step = lambda p, o: learner.update(p, o, ref_params, traj, rewards, weights, key)
  t0 = time.perf_counter()
  params, opt_state, _ = jax.block_until_ready(step(params, opt_state))
  measured["update_compile_and_run_s"] = time.perf_counter() - t0
  if spec.lora_rank:
    ref_params = lora.reference_params(params)
  (params, opt_state, _), measured["update_s"] = _timed(step, params, opt_state)
  peak_bytes = bm.device_peak_bytes()
  flops = bm.peak_flops()
  rows = []
  for phase in ("rollout", "update"):
    f = record["flops_per_device"][phase]
    mfu = f / measured[f"{phase}_s"] / flops if flops else None
    rows.append([phase, pred[f"{phase}_s"], measured[f"{phase}_s"], _MFU.value,
                 "n/a" if mfu is None else mfu, record[phase]["memory"]["peak_bytes"] / 1e9])
  print(f"\n{spec.model} x{n} {jax.devices()[0].device_kind}: {spec.method}, LoRA r {spec.lora_rank}, "
        f"B {spec.batch}, L {spec.gen_length}, remat {spec.remat}")
  print(format_table(rows, ["phase", f"predicted s ({dev.name})", "measured s", "predicted MFU",
                            "measured MFU", "compiled peak GB"]))
  print(f"likelihood passes (forward only): {measured['likelihood_s']:.3f} s")
  print(f"iteration peak per device: predicted {record['iteration_peak_bytes'] / 1e9:.2f} GB, allocator peak "
        f"{'n/a (no allocator stats on this backend)' if peak_bytes is None else f'{peak_bytes / 1e9:.2f} GB'}")
  if _JSON.value:
    atomic_write_json(_JSON.value, {"spec": dataclasses.asdict(spec), "predicted": pred, "measured": measured,
                                    "allocator_peak_bytes": peak_bytes, "plan": record})


if __name__ == "__main__":
  app.run(main)
