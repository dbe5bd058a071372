"""What each credit / likelihood method costs, measured on one configuration.

For every method (credit assigner × likelihood estimator × objective) this measures, in one process:

* ``rollout_flops_ratio``: compiled FLOPs of the rollout with the records the credit assigner asks
  for, over the bare rollout (DPS / DTCA / DelTA read their signal off logits and hidden states the
  sampler already has: ≈ 1);
* ``likelihood_passes``: compiled FLOPs of one likelihood evaluation over those of a single forward
  pass of the batch (mean-field 1, SML K bodies but one output head, trajectory S, rldf k, ...);
* ``update_flops_ratio``: compiled FLOPs of one full update (θ, θ_ref passes, backward) over d1's
  (uniform credit, mean-field);
* wall-clock seconds of the rollout, the credit assignment and the update (medians of ``repeats``).

FLOPs come from XLA's own cost analysis of the compiled computations (``Compiled.cost_analysis``),
so they count what the program does, not what a formula says. The layer stack is compiled unrolled
for the measurement (``model.unroll_layers``), because the analysis counts a loop body once.
"""
from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from daca_jax.config import configure
from daca_jax.measure.benchmarking import compiled_flops
from daca_jax.models import init_model, make_logits_fn
from daca_jax.rl.learner import GRPOLearner
from daca_jax.tasks.tokenizer import ByteTokenizer
from daca_jax.config.train import TrainConfig


@dataclasses.dataclass(frozen=True)
class Method:
  """One row: a label and the (objective, credit, likelihood) it runs, plus RL overrides."""

  label: str
  objective: str
  credit: str
  likelihood: str
  rl_overrides: tuple[tuple[str, Any], ...] = ()


DEFAULT_METHODS = (
    Method("d1 (diffu-GRPO)", "diffu_grpo", "uniform", "mean_field"),
    Method("DACA-GRPO (DPS + SML)", "diffu_grpo", "dps", "stratified"),
    Method("DTCA", "diffu_grpo", "dtca", "mean_field"),
    Method("DelTA", "diffu_grpo", "delta", "mean_field"),
    Method("trajectory likelihood (TraceRL)", "diffu_grpo", "uniform", "trajectory"),
    Method("RLDF", "rldf", "uniform", "rldf", (("beta", 0.01),)),
)


def _compile(jitted: Any, *args: Any) -> tuple[Any, float]:
  """(compiled executable, its FLOPs); calling the executable avoids a second compilation."""
  compiled = jitted.lower(*args).compile()
  return compiled, compiled_flops(compiled)


def _flops(jitted: Any, *args: Any) -> float:
  return _compile(jitted, *args)[1]


def _median_seconds(fn: Any, repeats: int) -> float:
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - t0)
  return statistics.median(times)


def measure(cfg: TrainConfig, methods: Sequence[Method] = DEFAULT_METHODS, *, batch_prompts: int = 8,
            repeats: int = 3, seed: int = 0, timed: bool = True) -> list[dict[str, Any]]:
  """Measures every method on ``cfg``'s model and sampler with a byte-tokenizer batch.

  Args:
    cfg: a validated TrainConfig (model, rollout, credit, likelihood and rl sections are used).
    methods: rows to measure; the first is the reference of ``update_flops_ratio``.
    batch_prompts: prompts per batch; the batch is ``batch_prompts * rl.group_size`` sequences.
    repeats: timed repetitions (after one compile-and-warm-up call).
    timed: also measure wall-clock seconds (False: FLOPs only, NaN seconds).
  Returns:
    One dict per method: label, objective, credit, likelihood, rollout_flops_ratio,
    likelihood_passes, update_flops_ratio, rollout_s, credit_s, update_s.
  """
  tok = ByteTokenizer()
  # XLA's cost analysis counts a loop body once: unrolled layers make every layer count, so that
  # passes with different shares of body and output head compare correctly.
  cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, unroll_layers=True))
  graphdef, params = init_model(cfg.model, seed)
  logits_fn = make_logits_fn(graphdef)
  hidden_fn = make_logits_fn(graphdef, return_hidden=True)
  g = cfg.rl.group_size
  rng = np.random.default_rng(seed)
  prompts = jnp.asarray(np.repeat(rng.integers(48, 58, (batch_prompts, 17)), g, axis=0), jnp.int32)
  rewards = jnp.asarray(rng.uniform(size=prompts.shape[0]), jnp.float32)
  key = jax.random.PRNGKey(seed)
  tokens = jnp.zeros((prompts.shape[0], prompts.shape[1] + cfg.rollout.gen_length), jnp.int32)
  forward_flops = _flops(jax.jit(logits_fn), params, tokens)
  rows, ref_update = [], None
  bare_rollout_flops = None
  for m in methods:
    rl = dataclasses.replace(cfg.rl, objective=m.objective, credit=m.credit, likelihood=m.likelihood,
                             **dict(m.rl_overrides))
    c = configure.validate(dataclasses.replace(cfg, rl=rl))
    learner = GRPOLearner(logits_fn, c, mask_id=tok.mask_id, eos_id=tok.eos_id, tokenizer=tok,
                          hidden_logits_fn=hidden_fn)
    if bare_rollout_flops is None:
      plain = GRPOLearner(logits_fn, dataclasses.replace(c, rl=dataclasses.replace(rl, credit="uniform")),
                          mask_id=tok.mask_id, eos_id=tok.eos_id)
      bare_rollout_flops = _flops(plain.rollout, params, prompts, key)
    rollout, rollout_flops = _compile(learner.rollout, params, prompts, key)
    traj = rollout(params, prompts, key)
    state = learner.init_credit_state()
    credit = learner.assign_credit(traj, rewards, state) if timed or m.credit != "uniform" else None
    weights = traj.completion_mask if credit is None else credit.weights
    opt_state = learner.init_opt_state(params)
    lik_flops = _flops(jax.jit(learner.logprobs), params, traj, key)
    update_args = (params, opt_state, params, traj, rewards, weights, key)
    update, update_flops = _compile(learner.update, *update_args)
    ref_update = update_flops if ref_update is None else ref_update
    rows.append({
        "label": m.label, "objective": m.objective, "credit": m.credit, "likelihood": m.likelihood,
        "rollout_flops_ratio": rollout_flops / bare_rollout_flops,
        "likelihood_passes": lik_flops / forward_flops,
        "update_flops_ratio": update_flops / ref_update,
        "rollout_s": _median_seconds(lambda: rollout(params, prompts, key).tokens, repeats)
                     if timed else float("nan"),
        "credit_s": _median_seconds(lambda: learner.assign_credit(traj, rewards, state).weights, repeats)
                    if timed else float("nan"),
        # a fresh optimizer state per call: the update donates (consumes) it
        "update_s": _median_seconds(lambda: update(params, learner.init_opt_state(params), *update_args[2:])[0],
                                    repeats)
                    if timed else float("nan"),
    })
  return rows


def markdown(rows: Sequence[dict[str, Any]]) -> str:
  lines = ["| method | credit | likelihood | rollout FLOPs (× bare) | likelihood passes | update FLOPs (× d1) "
           "| rollout s | credit s | update s |", "|---|---|---|---|---|---|---|---|---|"]
  for r in rows:
    lines.append(f"| {r['label']} | {r['credit']} | {r['likelihood']} | {r['rollout_flops_ratio']:.3f} | "
                 f"{r['likelihood_passes']:.2f} | {r['update_flops_ratio']:.2f} | {r['rollout_s']:.3f} | "
                 f"{r['credit_s']:.4f} | {r['update_s']:.3f} |")
  return "\n".join(lines)
