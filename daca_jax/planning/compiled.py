"""The real rollout and update programs of a :class:`~daca_jax.config.train.TrainConfig`, compiled from shapes.

The learner is the library's own :class:`daca_jax.rl.learner.GRPOLearner`, built as the main job builds
it (:func:`daca_jax.run.pipeline.run_main_job`: LoRA through :mod:`daca_jax.models.lora`, the hidden-state
model for the credit assigners that record it); its sampler and update are lowered with
``lower(ShapeDtypeStruct args)`` on the current devices (simulated CPU devices for a plan) and the mesh
of ``cfg.parallel``: nothing is allocated. ``compiled.memory_analysis()`` gives the per-device buffer
sizes of the SPMD-partitioned program and :func:`daca_jax.planning.hlo_cost.program_cost` what one run
of it computes, reads and sends, every loop counted.

With ``rl.rollout_batch`` the sampler is compiled for one call of that many rows (the program a step
holds in memory) and run ``rows / rollout_batch`` times; with ``rl.sample_group_size`` n > G the rollout
samples ``prompts_per_step x n`` rows and the update trains on ``prompts_per_step x G``.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from daca_jax import parallel
from daca_jax.errors import DoesNotFit
from daca_jax.parallel import aot
from daca_jax.diffusion.rollout import whole_batch_struct
from daca_jax.models import lora
from daca_jax.models.llada import Transformer, make_logits_fn
from daca_jax.planning.hlo_cost import ProgramCost, collectives, program_cost
from daca_jax.planning.traffic import breakdown
from daca_jax.rl.learner import GRPOLearner
from daca_jax.measure import benchmarking as bm
from daca_jax.config.train import TrainConfig

EOS_ID = 126081  # only its value's range matters for shapes


@dataclasses.dataclass
class Program:
  """One compiled program: per-device buffer sizes (bytes), compile seconds, what one run costs and what
  its collectives move (:class:`daca_jax.planning.traffic.Breakdown` as a dict, bytes per run)."""

  memory: dict[str, int]
  compile_s: float
  cost: ProgramCost
  traffic: dict[str, Any]
  lowered_sha256: str = ""

  @classmethod
  def of(cls, lowered: Any, built: "Built", name: str = "program") -> "Program":
    """Compiles ``lowered`` and reads it.

    Raises:
      DoesNotFit: the compiler refuses the program for the memory it needs (XLA:TPU checks its
        temporaries against the chip's memory at compile time: RESOURCE_EXHAUSTED), naming ``name``.
    """
    t0 = time.perf_counter()
    try:
      compiled = lowered.compile()
    except jax.errors.JaxRuntimeError as e:
      if "RESOURCE_EXHAUSTED" not in str(e):
        raise
      compiler = {"tpu": "XLA:TPU", "gpu": "XLA:GPU"}.get(built.platform, "XLA")
      why = str(e).split("RESOURCE_EXHAUSTED:", 1)[-1].strip().splitlines()[0]
      raise DoesNotFit(f"the {name}: {compiler} refuses to compile it: {why}") from None
    compile_s = time.perf_counter() - t0
    n = built.num_devices
    platform = built.platform
    colls = collectives(compiled.as_text(), n)
    program = cls(memory=bm.memory_stats(compiled), compile_s=compile_s,
                  cost=program_cost(compiled, n, platform=platform),
                  traffic=dataclasses.asdict(breakdown(colls, built.params, built.cfg, n)),
                  lowered_sha256=aot.fingerprint(lowered))
    program.executable = compiled  # not a field: the record (dataclasses.asdict) leaves it out
    return program


@dataclasses.dataclass
class Built:
  """A learner and the abstract arguments of its two programs.

  Attributes:
    cfg: the configuration it was built from.
    sampled_rows: rows one rollout samples (``prompts_per_step x (sample_group_size or group_size)``).
    update_rows: rows one update trains on (``prompts_per_step x group_size``).
    rollout_calls: calls of the compiled sampler per iteration (``sampled_rows / rl.rollout_batch``).
    shared_base: with LoRA, the base tree passed as both ``params["base"]`` and ``ref_params["base"]``.
  """

  cfg: TrainConfig
  learner: GRPOLearner
  params: Any
  ref_params: Any
  opt_state: Any
  prompts: jax.ShapeDtypeStruct
  key: jax.ShapeDtypeStruct
  mesh: Any
  shared_base: Any
  sampled_rows: int
  update_rows: int
  rollout_calls: int

  @property
  def num_devices(self) -> int:
    return 1 if self.mesh is None else int(self.mesh.size)

  @property
  def platform(self) -> str:
    """The platform its programs are compiled for (``cpu``, or a target's ``tpu`` / ``gpu``)."""
    return (jax.devices()[0] if self.mesh is None else self.mesh.devices.flat[0]).platform


def build(cfg: TrainConfig, prompt_len: int, devices: Sequence[Any] | None = None,
          token_ids: tuple[int, int] | None = None) -> Built:
  """The learner of ``cfg`` (validated) and abstract parameters, optimizer state, prompts
  ``int32 [sampled_rows, prompt_len]`` and key; its mesh spans ``devices`` (default: the process's;
  a target's compile-only devices, :func:`daca_jax.planning.targets.devices`). ``token_ids``: the
  ``(mask id, EOS id)`` the learner's programs use (default: the model's mask id and :data:`EOS_ID`)."""
  model = cfg.model
  graphdef, params = nnx.split(nnx.eval_shape(lambda: Transformer(model, nnx.Rngs(0))), nnx.Param)
  shared = None
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
  mesh = parallel.make_mesh(cfg.parallel, devices) if cfg.parallel.strategy != "none" else None
  mask_id, eos_id = token_ids or (model.mask_token_id, EOS_ID)
  learner = GRPOLearner(logits_fn, cfg, mask_id=mask_id, eos_id=eos_id, mesh=mesh, **kw)
  opt_state = jax.eval_shape(learner.init_opt_state, params)
  rl = cfg.rl
  sampled = rl.prompts_per_step * (rl.sample_group_size or rl.group_size)
  prompts = jax.ShapeDtypeStruct((sampled, prompt_len), jnp.int32)
  key = jax.eval_shape(lambda: jax.random.PRNGKey(0))
  return Built(cfg, learner, params, ref_params, opt_state, prompts, key, mesh, shared, sampled_rows=sampled,
               update_rows=rl.prompts_per_step * rl.group_size,
               rollout_calls=sampled // rl.rollout_batch if rl.rollout_batch else 1)


def compile_rollout(built: Built) -> tuple[Program, int, Any]:
  """Compiles one call of the learner's sampler; returns (program, the rows it samples per call, the
  abstract Trajectory of the rows the update trains on)."""
  lowered = built.learner.rollout.lower(built.params, built.prompts, built.key)
  traj = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), lowered.out_info)
  return (Program.of(lowered, built, "rollout"), int(traj.tokens.shape[0]),
          whole_batch_struct(traj, built.update_rows))


def compile_update(built: Built, traj: Any) -> Program:
  """Compiles the learner's update (its μ inner updates) for a rollout ``traj`` (abstract) and its
  credit weights."""
  learner = built.learner
  rewards = jax.ShapeDtypeStruct((built.update_rows,), jnp.float32)
  credit = jax.eval_shape(learner._assign, traj, rewards, None, learner.init_credit_state(), None)
  weights = credit.weights if credit.token_advantages is None else (credit.weights, credit.token_advantages)
  lowered = learner.update.lower(built.params, built.opt_state, built.ref_params, traj, rewards, weights,
                                 built.key)
  return Program.of(lowered, built, "update")


def per_device_bytes(tree: Any, built: Built) -> float:
  """Bytes one device holds of a parameter-like ``tree`` placed as the strategy places parameters."""
  leaves = jax.tree.leaves(tree)
  if built.mesh is None or built.cfg.parallel.strategy != "fsdp":
    return float(sum(np.prod(x.shape) * np.dtype(x.dtype).itemsize for x in leaves))
  shardings = jax.tree.leaves(parallel.fsdp_shardings(tree, built.mesh))
  return float(sum(np.prod(s.shard_shape(x.shape)) * np.dtype(x.dtype).itemsize
                   for x, s in zip(leaves, shardings)))
