"""Analytic memory and FLOP counts of one RL iteration, to cross-check the compiled programs.

Parameters are counted from the architecture (:mod:`daca_jax.models.llada`): embedding ``V·D``, per
layer q/k/v/o (``D·Dh·(2H + 2Hkv)``, plus q/k/v biases with ``qkv_bias``), SwiGLU ``3·D·F`` and two
RMSNorm scales ``2·D``, a final norm ``D`` and the output head ``D·V`` unless tied. LoRA adapters of
rank r on a projection ``in -> out`` add ``r·(in + out)`` per layer (Hu et al. 2021).

Optimizer state (:func:`daca_jax.rl.optim.make_optimizer`): AdamW's two moments in the parameter
dtype (optax keeps ``mu``/``nu`` in the parameters' dtype) plus, with ``rl.grad_agreement``, one more
parameter-sized buffer (the previous batch's gradient). Activations follow the usual per-layer count
of a pre-norm transformer block (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models", without dropout masks): what one layer keeps for its backward pass per token.
FLOPs use :mod:`daca_jax.measure.benchmarking`'s dense-transformer count (Kaplan et al. 2020).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from daca_jax.measure import benchmarking as bm
from daca_jax.models.lora import adapter_shapes
from daca_jax.config.checks import DTYPES
from daca_jax.config.model import ModelConfig
from daca_jax.config.rollout import RolloutConfig


def _nbytes(dtype_name: str) -> int:
  return int(np.dtype(DTYPES[dtype_name]).itemsize)


def param_count(cfg: ModelConfig) -> int:
  """Exact number of parameters of :class:`daca_jax.models.llada.Transformer` for ``cfg``."""
  d, f, hd = cfg.d_model, cfg.mlp_dim, cfg.head_dim
  q, kv = cfg.n_heads * hd, cfg.kv_heads * hd
  per_layer = d * (q + 2 * kv) + q * d + 3 * d * f + 2 * d
  if cfg.qkv_bias:
    per_layer += q + 2 * kv
  head = 0 if cfg.tie_embeddings else d * cfg.vocab_size
  return cfg.vocab_size * d + cfg.n_layers * per_layer + d + head


def param_bytes(cfg: ModelConfig) -> float:
  """Bytes of the whole parameter tree in ``cfg.param_dtype``: the base and, with ``cfg.lora_rank``, the
  adapters (what an FSDP rollout holds per device when it gathers the weights)."""
  n = param_count(cfg) + (lora_count(cfg, cfg.lora_rank) if cfg.lora_rank else 0)
  return float(n * _nbytes(cfg.param_dtype))


def lora_count(cfg: ModelConfig, rank: int) -> int:
  """Adapter parameters of rank ``rank`` on ``cfg.lora_targets`` (:func:`daca_jax.models.lora.init_lora`)."""
  shapes = adapter_shapes(cfg)
  return cfg.n_layers * sum(rank * (shapes[t][0] + shapes[t][1]) for t in cfg.lora_target_list)


@dataclasses.dataclass(frozen=True)
class AnalyticMemory:
  """Bytes per device of the state an RL iteration keeps and of its largest transients.

  Attributes:
    params: the policy's parameters (base and adapters).
    reference: the reference policy's own copy (0 with LoRA: the base is shared).
    optimizer: AdamW moments (+ the grad-agreement buffer) of the trainable parameters.
    grads: one gradient of the trainable parameters (a transient of the update).
    activations: what the update keeps for its backward pass over all layers and passes.
    logits: float32 logits of the update's scored positions, all passes together.
    rollout_records: the rollout's [S, B, L] float32 step records (DPS's step confidences).
  """

  params: float
  reference: float
  optimizer: float
  grads: float
  activations: float
  logits: float
  rollout_records: float

  @property
  def state(self) -> float:
    """What stays resident between programs: parameters, reference and optimizer state."""
    return self.params + self.reference + self.optimizer


def layer_activation_bytes(cfg: ModelConfig, tokens: int, remat: str) -> float:
  """Bytes one layer keeps for the backward pass over ``tokens`` (rows x sequence) tokens.

  ``remat="full"`` keeps only the layer's input (the scan carry); otherwise, per token: the two norm
  outputs and the residual input (3 D), q/k/v and the attention output (2 Dh·H + 2 Dh·Hkv), the MLP's
  gate, up and their product (3 F) in the compute dtype, plus the float32 attention scores and
  probabilities over the T keys when attention is not rematerialised (``remat="dots"`` keeps
  the projections only; the scores are recomputed).
  """
  nb = _nbytes(cfg.dtype)
  d, f, hd = cfg.d_model, cfg.mlp_dim, cfg.head_dim
  if remat == "full":
    return float(tokens * d * nb)
  per_token = nb * (3 * d + 2 * hd * cfg.n_heads + 2 * hd * cfg.kv_heads + 3 * f)
  return float(tokens * per_token)


def attention_score_bytes(cfg: ModelConfig, rows: int, seq: int) -> float:
  """float32 scores and probabilities ``[rows, H, T, T]`` of one layer (XLA's unfused attention)."""
  return float(2 * 4 * rows * cfg.n_heads * seq * seq)


def analytic_memory(cfg: ModelConfig, rcfg: RolloutConfig, *, batch: int, prompt_len: int, devices: int,
                    fsdp: bool, lora_rank: int, passes: int, scored_per_pass: int, remat: str,
                    grad_agreement: bool, records: bool) -> AnalyticMemory:
  """Per-device bytes of an iteration's state and transients (see :class:`AnalyticMemory`).

  Args:
    cfg: the model; rcfg: the rollout.
    batch: B, sequences per step (all devices); rows per device are ``B / devices``.
    prompt_len: P.
    devices: devices the batch (and, with ``fsdp``, the state) is split over.
    fsdp: parameters and optimizer state sharded over the devices (else replicated).
    lora_rank: 0 for full fine-tuning.
    passes: policy forward passes whose activations the backward pass keeps at once (K for SML
      with every stratum at once, ``strata_batch`` otherwise, 1 for mean-field).
    scored_per_pass: positions whose logits one pass projects (``L / K`` for SML, L for mean-field).
    remat: the model's ``remat``.
    grad_agreement: whether the optimizer keeps the previous gradient.
    records: whether the rollout keeps [S, B, L] step records.
  """
  pb = _nbytes(cfg.param_dtype)
  shard = devices if fsdp else 1
  n_base = param_count(cfg)
  n_train = lora_count(cfg, lora_rank) if lora_rank else n_base
  params = (n_base + (n_train if lora_rank else 0)) * pb / shard
  reference = 0.0 if lora_rank else n_base * pb / shard
  optimizer = (3 if grad_agreement else 2) * n_train * pb / shard
  rows = batch // devices
  seq = prompt_len + rcfg.gen_length
  per_layer = layer_activation_bytes(cfg, rows * seq, remat)
  if remat == "none":
    per_layer += attention_score_bytes(cfg, rows, seq)
  activations = passes * cfg.n_layers * per_layer
  logits = passes * rows * scored_per_pass * cfg.vocab_size * 4.0
  rec = rcfg.steps * rows * rcfg.gen_length * 4.0 if records else 0.0
  return AnalyticMemory(params=params, reference=reference, optimizer=optimizer, grads=n_train * pb / shard,
                        activations=activations, logits=logits, rollout_records=rec)


def update_flops(cfg: ModelConfig, *, batch: int, seq: int, passes: int, scored: int, lora: bool,
                 remat: str, reference: bool, old_policy_passes: int = 0) -> float:
  """Model FLOPs of one update step (all devices): ``passes`` policy forward passes of ``batch``
  sequences of ``seq`` tokens, each projecting ``scored`` positions to the vocabulary, their backward
  (twice the forward; about once with LoRA, whose frozen weights need no weight gradient), one more
  forward per pass under ``remat`` other than "none", and a reference forward per pass when the KL
  term is on (``old_policy_passes`` extra forwards for θ_old after the first inner update)."""
  head_unscored = batch * (seq - scored) * 2.0 * cfg.d_model * cfg.vocab_size
  fwd = bm.forward_flops(cfg, batch, seq) - head_unscored
  backward = 1.0 if lora else 2.0
  recompute = 0.0 if remat == "none" else 1.0
  policy = passes * fwd * (1.0 + backward + recompute)
  extra = passes * fwd * ((1.0 if reference else 0.0) + old_policy_passes)
  return policy + extra
