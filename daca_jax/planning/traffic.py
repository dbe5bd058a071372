"""What a compiled program's collectives move, and the analytic floors a plan compares them with.

:func:`breakdown` sorts the collectives of a compiled program (:func:`daca_jax.planning.hlo_cost.collectives`)
by what they move, read off each array's shape:

* ``weights``: an all-gather whose result has the shape of a parameter (a layer's slice of a stacked
  leaf, or a whole leaf): FSDP gathering weights before use.
* ``gradients``: a reduce-scatter or all-reduce of a parameter's shape or of its FSDP shard's.
* ``logits``: arrays with a vocabulary-sized dimension (V, or V over the devices).
* ``activations``: everything else with two or more dimensions (rows of the batch).
* ``other``: scalars and vectors (norms, counters, flags).

XLA's CPU compiler computes bf16 matrix products in float32 and moves the converted copies: the weights
it gathers are float32 where the parameters are bf16, twice what a GPU or TPU program moves.
``weights_upcast`` is the part of ``weights`` that is float32 copies of narrower parameters; half of it
(for bf16) is the upcast.

The floors (:func:`collective_floor`, :func:`hbm_floor`) count what ZeRO-3 cannot avoid for a setting:
each layer's weights gathered once per model pass (forward, remat recompute, backward) and the
trainable gradients reduce-scattered once per micro-batch; the rollout's weights gathered once per call
(``parallel.rollout_weights="gathered"``) or once per model call (``"sharded"``). They are lower bounds
of a schedule, not predictions: XLA may gather a little more (the embedding table's lookup, layouts)
and the compiler's counts are the figures a plan predicts from.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable

import jax
import numpy as np

from daca_jax.planning.analytic import lora_count, param_count
from daca_jax.planning.hlo_cost import Collective
from daca_jax.config.checks import DTYPES
from daca_jax.config.train import TrainConfig

WHAT = ("weights", "gradients", "activations", "logits", "other")
# Passes an estimator vectorises over (one gather serves them all unless likelihood.strata_batch runs
# them in sequential groups).
_PASSES = {"stratified": lambda c: c.likelihood.stratified.num_strata, "elbo": lambda c: c.likelihood.elbo.nodes,
           "coupled": lambda c: 2}


def weight_shapes(params: Any, n_layers: int, shards: int) -> set[tuple[int, ...]]:
  """Shapes a parameter can have inside a program: each leaf's, a stacked leaf's one-layer slice
  (leading axis ``n_layers`` dropped), and either of those with one dimension divided by ``shards``
  (an FSDP shard, as a reduce-scatter returns it)."""
  out: set[tuple[int, ...]] = set()
  for leaf in jax.tree.leaves(params):
    shape = tuple(leaf.shape)
    forms = [shape] + ([shape[1:]] if len(shape) > 1 and shape[0] == n_layers else [])
    for form in forms:
      out.add(form)
      for i, d in enumerate(form):
        if shards > 1 and d % shards == 0:
          out.add(form[:i] + (d // shards,) + form[i + 1:])
  return out


def classify(c: Collective, shapes: set[tuple[int, ...]], vocab: int, devices: int) -> str:
  """What collective ``c`` moves (module docstring)."""
  if c.shape in shapes and c.op == "all-gather":
    return "weights"
  if c.shape in shapes and c.op in ("reduce-scatter", "all-reduce"):
    return "gradients"
  if vocab in c.shape or (devices > 1 and vocab % devices == 0 and vocab // devices in c.shape):
    return "logits"
  return "activations" if len(c.shape) >= 2 else "other"


@dataclasses.dataclass(frozen=True)
class Breakdown:
  """Bytes one device sends per run of a program, by collective and by what it moves.

  Attributes:
    by_op: ``{collective: bytes}``.
    by_what: ``{weights|gradients|activations|logits|other: bytes}``.
    weights_upcast: bytes of ``weights`` that are float32 copies of narrower (bf16) parameters: the CPU
      compiler's upcast (half of it is what a bf16 program would not move).
    weight_gathers: all-gathers of weights per run (instructions times how often they run).
  """

  by_op: dict[str, float]
  by_what: dict[str, float]
  weights_upcast: float
  weight_gathers: float

  def scaled(self, factor: float) -> "Breakdown":
    return Breakdown(by_op={k: v * factor for k, v in self.by_op.items()},
                     by_what={k: v * factor for k, v in self.by_what.items()},
                     weights_upcast=self.weights_upcast * factor, weight_gathers=self.weight_gathers * factor)


def breakdown(colls: Iterable[Collective], params: Any, cfg: TrainConfig, devices: int) -> Breakdown:
  """The :class:`Breakdown` of a program's collectives; ``params`` (arrays or abstract values) gives the
  parameter shapes, ``cfg.model`` the layer count, vocabulary and parameter dtype."""
  model = cfg.model
  shards = cfg.parallel.fsdp if cfg.parallel.strategy == "fsdp" else 1
  shapes = weight_shapes(params, model.n_layers, shards)
  narrow = np.dtype(DTYPES[model.param_dtype]).itemsize < 4
  by_op: dict[str, float] = {}
  by_what = {w: 0.0 for w in WHAT}
  upcast = gathers = 0.0
  for c in colls:
    what = classify(c, shapes, model.vocab_size, devices)
    by_op[c.op] = by_op.get(c.op, 0.0) + c.sent
    by_what[what] += c.sent
    if what == "weights":
      gathers += c.runs
      if narrow and c.dtype == "f32":
        upcast += c.sent
  return Breakdown(by_op=by_op, by_what=by_what, weights_upcast=upcast, weight_gathers=gathers)


def _dtype_bytes(name: str) -> int:
  return int(np.dtype(DTYPES[name]).itemsize)


def _model_bytes(cfg: TrainConfig) -> tuple[float, float]:
  """(bytes of the whole parameter tree, bytes of its trainable part) in ``model.param_dtype``."""
  m = cfg.model
  nb = _dtype_bytes(m.param_dtype)
  lora = lora_count(m, m.lora_rank) if m.lora_rank else 0
  total = (param_count(m) + lora) * nb
  return float(total), float((lora if m.lora_rank else param_count(m)) * nb)


def sequential_groups(cfg: TrainConfig) -> int:
  """Model calls an estimate runs one after another: 1 when its passes are vectorised (one weight gather
  serves them all), ``ceil(passes / likelihood.strata_batch)`` when ``strata_batch`` groups them."""
  passes = _PASSES.get(cfg.rl.likelihood, lambda c: 1)(cfg)
  sb = cfg.likelihood.strata_batch
  return math.ceil(passes / sb) if 0 < sb < passes else 1


def update_passes(cfg: TrainConfig) -> dict[str, int]:
  """Model passes over the whole batch in one update (its μ inner updates), by kind: ``old`` (θ_old's
  log-probs: from the second inner update on, and at every one with ``rl.grad_accum > 1``), ``reference``
  (β > 0), ``forward``, ``recompute`` (``model.remat`` other than "none") and ``backward`` of the
  gradient pass; each counted once per sequential estimator group (:func:`sequential_groups`)."""
  rl = cfg.rl
  mu, groups = rl.num_iterations, sequential_groups(cfg)
  old = mu if rl.grad_accum > 1 else mu - 1
  return {"old": old * groups, "reference": (mu if rl.beta > 0 else 0) * groups, "forward": mu * groups,
          "recompute": (mu if cfg.model.remat != "none" else 0) * groups, "backward": mu * groups}


def collective_floor(cfg: TrainConfig, *, devices: int, rollout_calls: int) -> dict[str, dict[str, float]]:
  """ZeRO-3's collective bytes per device for one iteration (module docstring), per program:
  ``{"rollout": {...}, "update": {...}}``, each with ``weight_gathers`` (gathers of the whole model),
  ``weights`` and ``gradients`` bytes and their ``total``. Zero without FSDP (pmap's gradient pmean is
  not a floor this counts)."""
  shards = cfg.parallel.fsdp if cfg.parallel.strategy == "fsdp" else 1
  frac = (shards - 1) / shards
  model_b, train_b = _model_bytes(cfg)
  rollout_gathers = rollout_calls * (1 if cfg.parallel.rollout_weights == "gathered" else cfg.rollout.steps)
  micro = cfg.rl.grad_accum
  passes = update_passes(cfg)
  upd_gathers = micro * sum(passes.values())
  grad_b = cfg.rl.num_iterations * micro * train_b * frac
  out = {"rollout": {"weight_gathers": float(rollout_gathers), "weights": rollout_gathers * model_b * frac,
                     "gradients": 0.0},
         "update": {"weight_gathers": float(upd_gathers), "weights": upd_gathers * model_b * frac,
                    "gradients": grad_b}}
  for v in out.values():
    v["total"] = v["weights"] + v["gradients"]
  return out


def hbm_floor(cfg: TrainConfig, *, devices: int, prompt_len: int, rollout_calls: int,
              update_rows: int, sampled_rows: int) -> dict[str, dict[str, float]]:
  """An analytic estimate of the HBM bytes one device reads and writes in an iteration, per program:
  the weights read once per model pass (the gathered layer from memory), the activations the remat
  policy keeps (written in the forward, read in the backward: the layer inputs under ``remat="full"``),
  the float32 logits of the scored positions (written and read once per pass), and unfused attention's
  float32 scores ``[rows, H, T, T]`` (written and read once per layer and pass; XLA's attention on CPU,
  which a fused / flash-attention kernel on a GPU or TPU keeps out of HBM). The rollout reads
  the weights and writes one step's logits per model call. XLA's figure counts every operation's
  operands and result as memory traffic (after the CPU compiler's fusion, with float32 copies of bf16
  values), so it sits above this estimate."""
  m = cfg.model
  nb = _dtype_bytes(m.dtype)
  model_b, _ = _model_bytes(cfg)
  seq = prompt_len + cfg.rollout.gen_length
  rows_dev = update_rows / devices
  passes = update_passes(cfg)
  n_pass = sum(passes.values())
  fwd_passes = passes["old"] + passes["reference"] + passes["forward"]
  vec = _PASSES.get(cfg.rl.likelihood, lambda c: 1)(cfg)  # contexts per row scored together
  act_pass = vec * rows_dev * seq * m.d_model * nb * m.n_layers
  kept = 2 * act_pass * cfg.rl.num_iterations  # layer inputs written forward, read backward
  scored = cfg.rollout.gen_length / (vec if cfg.rl.likelihood == "stratified" else 1)
  logits = 2 * 4.0 * fwd_passes * vec * rows_dev * scored * m.vocab_size
  scores = lambda rows: 2 * 4.0 * rows * m.n_heads * seq * seq * m.n_layers
  upd = {"weights": n_pass * model_b * cfg.rl.grad_accum, "activations": kept + n_pass * 2 * act_pass,
         "logits": logits, "attention": n_pass * scores(vec * rows_dev)}
  s_rows = sampled_rows / rollout_calls / devices
  steps = cfg.rollout.steps
  ro_act = 2 * s_rows * seq * m.d_model * nb * m.n_layers
  ro_logits = 2 * 4.0 * s_rows * cfg.rollout.gen_length * m.vocab_size
  roll = {"weights": rollout_calls * steps * model_b, "activations": rollout_calls * steps * ro_act,
          "logits": rollout_calls * steps * ro_logits, "attention": rollout_calls * steps * scores(s_rows)}
  out = {"rollout": roll, "update": upd}
  for v in out.values():
    v["total"] = sum(v.values())
  return out


__all__ = ["Breakdown", "WHAT", "breakdown", "classify", "collective_floor", "hbm_floor", "sequential_groups",
           "update_passes", "weight_shapes"]
