"""The real rollout and update programs of a :class:`PlanSpec`, compiled from shapes alone.

The learner is the library's own :class:`daca_jax.rl.learner.GRPOLearner` (LoRA through
:mod:`daca_jax.models.lora` as the pipeline builds it); its sampler and update are lowered with
``lower(ShapeDtypeStruct args)`` on the current devices (simulated CPU devices for a plan) and the
mesh of ``spec.strategy``: nothing is allocated. ``compiled.memory_analysis()`` then gives the
per-device buffer sizes of the SPMD-partitioned program.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from daca_jax.run import benchmarking as bm
from daca_jax import parallel
from daca_jax.diffusion.rollout import whole_batch_struct
from daca_jax.models import lora
from daca_jax.models.llada import Transformer, make_logits_fn
from daca_jax.planning.spec import PlanSpec, train_config
from daca_jax.rl.learner import GRPOLearner

EOS_ID = 126081  # only its value's range matters for shapes


@dataclasses.dataclass
class Program:
  """Per-device compiled sizes (bytes) of one program, its compile time and XLA's FLOP count."""

  memory: dict[str, int]
  compile_s: float
  flops: float | None

  @classmethod
  def of(cls, lowered: Any) -> "Program":
    t0 = time.perf_counter()
    compiled = lowered.compile()
    compile_s = time.perf_counter() - t0
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    flops = float(cost["flops"]) if cost and "flops" in cost else None
    return cls(memory=bm.memory_stats(compiled), compile_s=compile_s, flops=flops)


@dataclasses.dataclass
class Built:
  """A learner and the abstract arguments of its two programs."""

  learner: GRPOLearner
  params: Any
  ref_params: Any
  opt_state: Any
  prompts: jax.ShapeDtypeStruct
  key: jax.ShapeDtypeStruct
  mesh: Any
  shared_base: Any  # LoRA: the base tree passed as both params["base"] and ref_params["base"]


def build(spec: PlanSpec) -> Built:
  """The learner of ``spec`` and abstract parameters, optimizer state, prompts and key."""
  cfg = train_config(spec)
  model = cfg.model
  graphdef, params = nnx.split(nnx.eval_shape(lambda: Transformer(model, nnx.Rngs(0))), nnx.Param)
  kw, shared = {}, None
  if model.lora_rank:
    adapters = jax.eval_shape(lambda: lora.init_lora(model, jax.random.PRNGKey(0)))
    shared = params
    params = lora.lora_params(params, adapters)
    ref_params = lora.reference_params(params)
    logits_fn = lora.make_lora_logits_fn(graphdef, logprob_chunk=model.logprob_chunk)
    kw = dict(hidden_logits_fn=lora.make_lora_logits_fn(graphdef, return_hidden=True),
              optimizer_wrapper=lora.lora_optimizer, param_split=lora.LORA_SPLIT)
  else:
    ref_params = params
    logits_fn = make_logits_fn(graphdef, logprob_chunk=model.logprob_chunk)
    kw = dict(hidden_logits_fn=make_logits_fn(graphdef, return_hidden=True))
  learner = GRPOLearner(logits_fn, cfg, mask_id=model.mask_token_id, eos_id=EOS_ID, **kw)
  opt_state = jax.eval_shape(learner.init_opt_state, params)
  prompts = jax.ShapeDtypeStruct((spec.batch, spec.prompt_len), jnp.int32)
  key = jax.eval_shape(lambda: jax.random.PRNGKey(0))
  mesh = parallel.make_mesh(cfg.parallel) if cfg.parallel.strategy != "none" else None
  return Built(learner, params, ref_params, opt_state, prompts, key, mesh, shared)


def compile_rollout(built: Built) -> tuple[Program, Any]:
  """Compiles the learner's sampler; returns (program, the abstract Trajectory it returns)."""
  lowered = built.learner.rollout.lower(built.params, built.prompts, built.key)
  traj = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), lowered.out_info)
  if getattr(built.learner.rollout, "rollout_batch", 0):  # one micro-batch's sampler (rl.rollout_batch)
    traj = whole_batch_struct(traj, built.prompts.shape[0])
  return Program.of(lowered), traj


def compile_update(built: Built, traj: Any) -> Program:
  """Compiles the learner's update for a rollout ``traj`` (abstract) and its credit weights."""
  learner = built.learner
  rewards = jax.ShapeDtypeStruct((built.prompts.shape[0],), jnp.float32)
  credit = jax.eval_shape(learner._assign, traj, rewards, None, learner.init_credit_state(), None)
  weights = credit.weights if credit.token_advantages is None else (credit.weights, credit.token_advantages)
  lowered = learner.update.lower(built.params, built.opt_state, built.ref_params, traj, rewards, weights,
                                 built.key)
  return Program.of(lowered)


def per_device_bytes(tree: Any, built: Built, spec: PlanSpec) -> float:
  """Bytes one device holds of a parameter-like ``tree`` placed as the strategy places parameters."""
  leaves = jax.tree.leaves(tree)
  if built.mesh is None or spec.strategy != "fsdp":
    return float(sum(np.prod(x.shape) * np.dtype(x.dtype).itemsize for x in leaves))
  shardings = jax.tree.leaves(parallel.fsdp_shardings(tree, built.mesh))
  return float(sum(np.prod(s.shard_shape(x.shape)) * np.dtype(x.dtype).itemsize
                   for x, s in zip(leaves, shardings)))
