"""The model section: ``ModelConfig`` (the LLaDA/Dream architecture) and the released shapes (LLaDA-8B,
Dream-7B, the tiny test model).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from daca_jax.config.checks import DTYPES, _LORA_TARGETS, _REMAT, _check_fields, _one_of, _positive
from daca_jax.errors import ConfigError
from daca_jax.io_utils import check_local_path


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Transformer hyper-parameters (LLaDA architecture, Nie et al. 2025).

  Attributes:
    vocab_size: V, number of token ids (mask id included).
    d_model: D, residual width.
    n_layers: number of transformer blocks.
    n_heads: attention heads; ``d_model % n_heads == 0``.
    n_kv_heads: key/value heads (GQA); divides ``n_heads``. 0 means ``n_heads``.
    mlp_dim: SwiGLU hidden width.
    rope_theta: RoPE base (LLaDA uses 500000).
    norm_eps: RMSNorm epsilon.
    tie_embeddings: reuse the embedding matrix as the output projection.
    dtype: compute dtype name ("float32" / "bfloat16" / "float16").
    param_dtype: parameter dtype name.
    remat: per-layer rematerialisation: "none", "full" (recompute the block in the backward pass),
      "dots" (save the outputs of matmuls without batch dimensions, i.e. the projections;
      ``jax.checkpoint_policies.dots_with_no_batch_dims_saveable``) or "dots_saveable" (also save
      the batched attention matmuls; ``dots_saveable``).
    mask_token_id: id of ``[MASK]``.
    qkv_bias: biases on the q/k/v projections (Dream / Qwen2; LLaDA has none).
    shift_logits: the logits at position i are read from the hidden state at i-1 (position 0 keeps
      its own), as Dream does (an AR-initialised dLLM predicts token i at position i-1).
    lora_rank: r of the LoRA adapters (0: no LoRA); see :mod:`daca_jax.models.lora`.
    lora_alpha: LoRA scale numerator: the adapter output is multiplied by ``lora_alpha / lora_rank``.
    lora_targets: comma-separated projections that get adapters, from q,k,v,o,gate,up,down.
    lora_dropout: dropout probability on the LoRA adapters' input during updates (PEFT's
      ``lora_dropout``; d1 uses 0.05), in [0, 1).
    init_checkpoint: a local Hugging Face checkpoint folder (LLaDA-8B-Instruct / Dream-7B layout) that RL
      starts from; "" starts from the tiny model the job builds (and its SFT warm start).
      ``experiments/export_hf.py`` writes the trained policy back in its layout.
    require_checkpoint: the config is a recipe for a pretrained checkpoint (the ``configs/paper.py``
      presets, which set no architecture): the main job refuses to run without ``init_checkpoint``
      rather than train a random tiny model (:func:`daca_jax.run.pipeline.run_main_job`). The config
      itself still validates without one (plans and tests build it).
    logprob_chunk: positions per chunk when target log-probs are gathered from hidden states
      (:func:`daca_jax.likelihood.common.chunked_token_logprobs`); 0 scores all positions at once.
    unroll_layers: compile the layer stack unrolled rather than as one ``lax.scan`` body: longer
      compiles, and XLA's cost analysis (which counts a loop body once) then sees every layer, as
      :mod:`daca_jax.measure.method_costs` needs.
    vocab_limit: ids the sampler may propose are ``[0, vocab_limit)`` without ``mask_token_id``
      (the tokenizer's own size when the embedding table is padded beyond it, as Dream's 152064 and
      LLaDA's 126464 are); 0 means ``vocab_size``.
    left_pad_id: -1: every token is attended, pads included (LLaDA's released ``generate`` passes no
      attention mask). An id >= 0: a leading run of this id is left padding, kept out of attention
      and not counted in the positions (Dream's ``diffusion_generate``).

  ``lora_dropout`` drops the adapters' input on the update's likelihood passes of the policy only (never
  in rollouts, evaluation or the reference pass) and needs ``lora_rank > 0``; under
  ``parallel.strategy="pmap"`` every device draws its rows' masks from the same key (the masks then
  depend on the device count; FSDP's do not). With ``init_checkpoint`` the architecture fields
  (:data:`daca_jax.models.hf_import.ARCHITECTURE_FIELDS`) come from the checkpoint's ``config.json`` and
  ``tokenizer.json`` (a value set here must agree), the rest (:data:`~daca_jax.models.hf_import.RUN_FIELDS`)
  stays the run's, and the weights come from its safetensors (:mod:`daca_jax.run.from_checkpoint`).
  """

  vocab_size: int = 260
  d_model: int = 128
  n_layers: int = 4
  n_heads: int = 4
  n_kv_heads: int = 0
  mlp_dim: int = 384
  rope_theta: float = 10000.0
  norm_eps: float = 1e-5
  tie_embeddings: bool = False
  dtype: str = "float32"
  param_dtype: str = "float32"
  remat: str = "none"
  mask_token_id: int = 257
  qkv_bias: bool = False
  shift_logits: bool = False
  lora_rank: int = 0
  lora_alpha: float = 16.0
  lora_targets: str = "q,k,v,o,gate,up,down"
  lora_dropout: float = 0.0
  init_checkpoint: str = ""
  require_checkpoint: bool = False
  logprob_chunk: int = 0
  unroll_layers: bool = False
  vocab_limit: int = 0
  left_pad_id: int = -1

  @property
  def kv_heads(self) -> int:
    return self.n_kv_heads or self.n_heads

  @property
  def head_dim(self) -> int:
    return self.d_model // self.n_heads

  @property
  def lora_target_list(self) -> tuple[str, ...]:
    return tuple(t.strip() for t in self.lora_targets.split(",") if t.strip())

  def validate(self, prefix: str = "model") -> "ModelConfig":
    """Checks every field; with ``init_checkpoint`` set, the architecture (:meth:`validate_architecture`)
    is left to the checkpoint's config.json, which replaces it (the run's tiny-model values of those
    fields are placeholders then, and their relations to each other mean nothing)."""
    _check_fields(prefix, self)
    check_local_path(self.init_checkpoint, f"{prefix}.init_checkpoint")
    if not self.init_checkpoint:
      self.validate_architecture(prefix)
    _one_of(prefix, self, "dtype", tuple(DTYPES))
    _one_of(prefix, self, "param_dtype", tuple(DTYPES))
    _one_of(prefix, self, "remat", _REMAT)
    for name in ("lora_rank", "logprob_chunk"):
      v = getattr(self, name)
      if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise ConfigError(f"{prefix}.{name}", v, "an integer >= 0")
    if not isinstance(self.unroll_layers, bool):
      raise ConfigError(f"{prefix}.unroll_layers", self.unroll_layers, "True or False")
    if not 0.0 <= self.lora_dropout < 1.0:
      raise ConfigError(f"{prefix}.lora_dropout", self.lora_dropout, "a probability in [0, 1)")
    if self.lora_rank and not self.lora_alpha > 0:
      raise ConfigError(f"{prefix}.lora_alpha", self.lora_alpha, "a number > 0")
    targets = self.lora_target_list
    if not targets or any(t not in _LORA_TARGETS for t in targets):
      raise ConfigError(f"{prefix}.lora_targets", self.lora_targets,
                        f"a non-empty comma-separated subset of {list(_LORA_TARGETS)}")
    if self.lora_dropout and not self.lora_rank:
      raise ConfigError(f"{prefix}.lora_dropout", self.lora_dropout,
                        f"0 when {prefix}.lora_rank=0 (it drops the input of the LoRA adapters)")
    return self

  def validate_architecture(self, prefix: str = "model") -> "ModelConfig":
    """Checks the architecture fields and their relations (sizes, heads, token ids); returns ``self``."""
    _check_fields(prefix, self)
    _positive(prefix, self, "vocab_size", "d_model", "n_layers", "n_heads", "mlp_dim")
    for name in ("rope_theta", "norm_eps"):  # RoPE divides by theta**(i/d); RMSNorm by sqrt(ms + eps)
      if not getattr(self, name) > 0:
        raise ConfigError(f"{prefix}.{name}", getattr(self, name), "a number > 0")
    if self.d_model % self.n_heads:
      raise ConfigError(f"{prefix}.n_heads", self.n_heads, f"a divisor of d_model={self.d_model}")
    if self.head_dim % 2:
      raise ConfigError(f"{prefix}.n_heads", self.n_heads, "a value giving an even head_dim (RoPE)")
    if self.n_kv_heads < 0 or self.n_heads % self.kv_heads:
      raise ConfigError(f"{prefix}.n_kv_heads", self.n_kv_heads,
                        f"0 or a divisor of n_heads={self.n_heads}")
    if not 0 <= self.mask_token_id < self.vocab_size:
      raise ConfigError(f"{prefix}.mask_token_id", self.mask_token_id,
                        f"an id in [0, vocab_size={self.vocab_size})")
    if self.vocab_limit and not self.mask_token_id < self.vocab_limit <= self.vocab_size:
      raise ConfigError(f"{prefix}.vocab_limit", self.vocab_limit,
                        f"0 or in (mask_token_id={self.mask_token_id}, vocab_size={self.vocab_size}]")
    if not -1 <= self.left_pad_id < self.vocab_size:
      raise ConfigError(f"{prefix}.left_pad_id", self.left_pad_id,
                        f"-1 (pads attended) or an id in [0, vocab_size={self.vocab_size})")
    return self


def tiny_config(**overrides: Any) -> ModelConfig:
  """≈0.9 M parameters for the byte tokenizer (V = 260); trains in minutes on a 2-core CPU."""
  return dataclasses.replace(ModelConfig(), **overrides)


def llada_8b_config(**overrides: Any) -> ModelConfig:
  """LLaDA-8B-Instruct: D 4096, 32 layers, 32 heads, MLP 12288, V 126464, mask 126336, theta 5e5.

  The library's one statement of the released shapes (the plan, the benchmarks and the random
  release-layout checkpoint read it; ``tests/models/test_hf_import.py`` holds the release
  config.json's import equal to it)."""
  base = ModelConfig(vocab_size=126464, d_model=4096, n_layers=32, n_heads=32, n_kv_heads=32,
                     mlp_dim=12288, rope_theta=500000.0, dtype="bfloat16", mask_token_id=126336)
  return dataclasses.replace(base, **overrides)


def dream_7b_config(**overrides: Any) -> ModelConfig:
  """Dream-v0-Instruct-7B (Qwen2.5-7B geometry, ``Dream-org/Dream-v0-Instruct-7B`` config.json):
  D 3584, 28 layers, 28 heads, 4 K/V heads, MLP 18944, V 152064, q/k/v biases, shifted logits."""
  base = ModelConfig(vocab_size=152064, d_model=3584, n_layers=28, n_heads=28, n_kv_heads=4, mlp_dim=18944,
                     rope_theta=1e6, norm_eps=1e-6, dtype="bfloat16", param_dtype="bfloat16",
                     mask_token_id=151666, qkv_bias=True, shift_logits=True, left_pad_id=151643,
                     vocab_limit=151667)
  return dataclasses.replace(base, **overrides)
