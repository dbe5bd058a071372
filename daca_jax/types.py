"""Typed, validated config sections.

``experiments/`` converts an ``ml_collections.ConfigDict`` into these frozen dataclasses once
(:func:`daca_jax.configure.train_config_from_dict`); the library only ever sees the dataclasses. Every
check raises :class:`daca_jax.errors.ConfigError` naming the field (``section.name``), the value and
what is allowed. The ``validate`` methods check values, types and cross-field constraints; the names
that registries resolve (``rl.credit``, ``task.name``, ...) are checked by
:func:`daca_jax.configure.validate`, which sits above the packages owning those registries (they all
import this module).
"""
from __future__ import annotations

import dataclasses
import math
import numbers
import typing
from typing import Any, Mapping

import jax.numpy as jnp
import numpy as np

from daca_jax.contracts import LogitsFn, ModelFns, PolicyBatch, Trajectory  # noqa: F401  (re-exported)
from daca_jax.errors import ConfigError

# Names the config validates here and the algorithms dispatch on (daca_jax.likelihood.stratified,
# daca_jax.rl.downsample): one list each, so the two cannot drift apart.
STRATA_PARTITIONS = ("random", "per_prompt", "strided", "contiguous", "commit_order")
DOWNSAMPLE_RULES = ("max_variance", "random")
LR_SCHEDULES = ("constant", "cosine")  # rl.lr_schedule (daca_jax.rl.optim.make_optimizer)

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}
_REMAT = ("none", "full", "dots", "dots_saveable")
_LORA_TARGETS = ("q", "k", "v", "o", "gate", "up", "down")


# Largest integer a config field may hold: sizes, counts and seeds become int32 array dimensions,
# indices or PRNG seeds, so anything beyond int32 cannot be used (and would fail late, e.g. with an
# OverflowError after SFT).
INT_MAX = 2**31 - 1
# Largest float magnitude: values are used in float32 (or bfloat16, same range) computations, where
# anything larger is inf.
FLOAT_MAX = float(np.finfo(np.float32).max)
# Float fields that may hold +-inf (none so far: every float field is a rate, a scale or a bound that
# must be a finite number). NaN is never allowed.
_INFINITE_OK: frozenset[str] = frozenset()


def _check_fields(prefix: str, obj: Any) -> None:
  """:func:`check_field_types` with the fields named ``<prefix>.<field>``."""
  check_field_types(obj, lambda name: f"{prefix}.{name}")


def check_field_types(obj: Any, field_name: typing.Callable[[str], str]) -> None:
  """Checks every field of a config dataclass against its declared type, generically.

  ``float`` fields hold finite real numbers within float32's range (bools excluded; ±inf only for
  the fields listed in ``_INFINITE_OK``), ``int`` fields integers in ``[-INT_MAX, INT_MAX]``, ``bool`` fields True/False
  and ``str`` fields strings. A section's own ``validate`` then checks the allowed ranges.

  Args:
    obj: a dataclass instance.
    field_name: how the error names a field (``"rl.beta"``, a flag ``"--temperature"``).
  Raises:
    ConfigError: naming the field, the value and what is allowed.
  """
  hints = typing.get_type_hints(type(obj))
  for f in dataclasses.fields(obj):
    kind, v, name = hints[f.name], getattr(obj, f.name), field_name(f.name)
    if kind is float:
      if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise ConfigError(name, v, "a number")
      if math.isnan(v) or (abs(v) > FLOAT_MAX and name not in _INFINITE_OK):
        raise ConfigError(name, v, f"a finite number (of magnitude <= {FLOAT_MAX:.4g}, float32's largest)")
    elif kind is int:
      if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise ConfigError(name, v, "an integer")
      if abs(v) > INT_MAX:
        raise ConfigError(name, v, f"an integer of magnitude <= {INT_MAX} (2**31 - 1)")
    elif kind is bool and not isinstance(v, bool):
      raise ConfigError(name, v, "True or False")
    elif kind is str and not isinstance(v, str):
      raise ConfigError(name, v, "a string")


def _check_sections(prefix: str, obj: Any) -> None:
  """:func:`_check_fields` of ``obj``'s own fields (sub-sections are not checked there), then each
  sub-section's ``validate`` under ``<prefix>.<section>``.

  Raises:
    ConfigError: a sub-section that is not its dataclass, or the first field that is not allowed.
  """
  _check_fields(prefix, obj)
  hints = typing.get_type_hints(type(obj))
  for f in dataclasses.fields(obj):
    kind = hints[f.name]
    if dataclasses.is_dataclass(kind):
      v = getattr(obj, f.name)
      if not isinstance(v, kind):
        raise ConfigError(f"{prefix}.{f.name}", v, f"a {kind.__name__} section ({prefix}.{f.name}.<field>=...)")
      v.validate(f"{prefix}.{f.name}")


def _check_values(name: str, value: Any) -> None:
  """The generic checks of :func:`_check_fields` for free-form values (``task.options``): floats
  finite, integers within int32, recursively through mappings and sequences."""
  if isinstance(value, Mapping):
    for k, v in value.items():
      _check_values(f"{name}.{k}", v)
  elif isinstance(value, (list, tuple)):
    for i, v in enumerate(value):
      _check_values(f"{name}[{i}]", v)
  elif isinstance(value, bool):
    return
  elif isinstance(value, numbers.Integral) and abs(value) > INT_MAX:
    raise ConfigError(name, value, f"an integer of magnitude <= {INT_MAX} (2**31 - 1)")
  elif isinstance(value, numbers.Real) and not abs(value) <= FLOAT_MAX:
    raise ConfigError(name, value, f"a finite number (of magnitude <= {FLOAT_MAX:.4g}, float32's largest)")


def _positive(prefix: str, obj: Any, *names: str) -> None:
  for name in names:
    v = getattr(obj, name)
    if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
      raise ConfigError(f"{prefix}.{name}", v, "a positive integer")


def _non_negative(prefix: str, obj: Any, *names: str) -> None:
  for name in names:
    v = getattr(obj, name)
    if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
      raise ConfigError(f"{prefix}.{name}", v, "a number >= 0")


def _one_of(prefix: str, obj: Any, name: str, allowed: tuple[str, ...]) -> None:
  v = getattr(obj, name)
  if v not in allowed:
    raise ConfigError(f"{prefix}.{name}", v, f"one of {list(allowed)}")


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


@dataclasses.dataclass(frozen=True)
class RolloutConfig:
  """Rollout sampler (LLaDA's semi-autoregressive low-confidence remasking).

  Attributes:
    gen_length: L, completion tokens generated per prompt.
    block_length: semi-autoregressive block size; must divide ``gen_length``.
    steps: S, denoising steps (= model calls); split evenly over the ``gen_length/block_length``
      blocks, so it must be a multiple of the number of blocks.
    temperature: Gumbel-max sampling temperature; 0 is greedy.
    remasking: "low_confidence" (commit the most confident candidates) or "random".
    threshold: Fast-dLLM-style parallel decoding (off when 0): besides the scheduled top-k, every
      still-masked position of the current block whose candidate probability is > threshold is
      committed in the same step; a block whose positions are all committed skips its remaining
      steps (no model call). ``steps`` stays the static upper bound; ``steps = gen_length`` with any
      threshold gives Fast-dLLM's rule "at least the most confident one per step". Values > 1 are
      never exceeded (plain decoding).
    kv_cache: block-wise K/V cache (Fast-dLLM): "none"; "prefix" (each block's first step is a
      full pass that caches K/V before the block, later steps run the block and everything after
      it against that cache); "dual" (caches before and after the block; later steps run only the
      block's positions). Needs a model-backed logits_fn (``daca_jax.models.make_logits_fn``). Both
      are approximations: attention is bidirectional, so the cached entries (computed at the block's
      first step) go stale as the block's tokens are committed.

  ``threshold`` and ``kv_cache`` apply to RL's training rollouts, where they are off by default (d1's
  sampler); the main job's evaluations always decode without them. On the main job (seeds 0-3, paired
  test points) the prefix cache made RL 1.22x faster at -0.6 +- 4.8, threshold 0.9 1.31x at
  -1.2 +- 4.0, both 1.32x at -5.3 +- 3.5 (the documentation's results page).
  """

  gen_length: int = 20
  block_length: int = 20
  steps: int = 10
  temperature: float = 1.0
  remasking: str = "low_confidence"
  threshold: float = 0.0
  kv_cache: str = "none"

  @property
  def num_blocks(self) -> int:
    return self.gen_length // self.block_length

  @property
  def steps_per_block(self) -> int:
    return self.steps // self.num_blocks

  def validate(self, prefix: str = "rollout") -> "RolloutConfig":
    _check_fields(prefix, self)
    _positive(prefix, self, "gen_length", "block_length", "steps")
    if self.gen_length % self.block_length:
      raise ConfigError(f"{prefix}.block_length", self.block_length,
                        f"a divisor of {prefix}.gen_length={self.gen_length}")
    if self.steps % self.num_blocks:
      raise ConfigError(f"{prefix}.steps", self.steps,
                        f"a multiple of the number of blocks gen_length/block_length="
                        f"{self.num_blocks}")
    if self.steps_per_block > self.block_length:
      raise ConfigError(f"{prefix}.steps", self.steps,
                        f"at most one step per token: <= gen_length={self.gen_length}")
    _non_negative(prefix, self, "temperature", "threshold")
    _one_of(prefix, self, "kv_cache", ("none", "prefix", "dual"))
    return self


@dataclasses.dataclass(frozen=True)
class DPSConfig:
  """Denoising Progress Scores (``rl.credit="dps"``, :mod:`daca_jax.credit.dps`); DTCA builds on them
  and reads the same fields.

  Attributes:
    alpha: z-score gain: ``w = clip(1 + alpha * z, w_min, w_max)``.
    w_min: lower clip of the weights.
    w_max: upper clip of the weights.
    scope: which still-masked positions measure step progress: "all" remaining or the current
      "block" only.
    signal: the certainty measure of step progress: "confidence" (top-1 probability) or
      "neg_entropy" (minus the predictive entropy).
    self_term: λ, weight of the token's own confidence rise from its block's first step to its
      commit step, added to the raw score.
  """

  alpha: float = 0.5
  w_min: float = 0.5
  w_max: float = 2.0
  scope: str = "all"
  signal: str = "confidence"
  self_term: float = 0.0

  def validate(self, prefix: str = "credit.dps") -> "DPSConfig":
    _check_fields(prefix, self)
    _non_negative(prefix, self, "alpha", "w_min", "self_term")
    if not self.w_max >= self.w_min:
      raise ConfigError(f"{prefix}.w_max", self.w_max, f">= {prefix}.w_min={self.w_min}")
    if not self.w_min <= 1.0 <= self.w_max:
      raise ConfigError(f"{prefix}.w_min", self.w_min, "w_min <= 1 <= w_max so that mean 1 is reachable")
    _one_of(prefix, self, "scope", ("all", "block"))
    _one_of(prefix, self, "signal", ("confidence", "neg_entropy"))
    return self


@dataclasses.dataclass(frozen=True)
class DTCAConfig:
  """DTCA (``rl.credit="dtca"``, :mod:`daca_jax.credit.dtca`). Its step progress and weights are
  DPS's (``credit.dps.scope``, ``signal``, ``self_term``, ``alpha``, ``w_min``, ``w_max``).

  Attributes:
    tagger: the token tagger (registry ``TAGGERS``): "rule" = NUM / OP / PUNCT / WORD / SPECIAL.
    top_frac: μ: fraction of each rollout's denoising states (steps) kept for training, ranked by
      their confidence gain; tokens committed at the other steps get weight 0.
    entropy_window: entropy calibration: the first N updates form the baseline of each category's
      mean predictive entropy (0 disables calibration).
    calib_min: lower clip of the calibration factor (entropy now / baseline entropy).
    calib_max: upper clip of that factor.
  """

  tagger: str = "rule"
  top_frac: float = 0.4
  entropy_window: int = 10
  calib_min: float = 0.5
  calib_max: float = 2.0

  def validate(self, prefix: str = "credit.dtca") -> "DTCAConfig":
    _check_fields(prefix, self)
    if not 0.0 < self.top_frac <= 1.0:
      raise ConfigError(f"{prefix}.top_frac", self.top_frac, "a fraction in (0, 1]")
    _non_negative(prefix, self, "entropy_window")
    if not 0.0 < self.calib_min <= 1.0 <= self.calib_max:
      raise ConfigError(f"{prefix}.calib_min", self.calib_min,
                        f"0 < calib_min <= 1 <= calib_max={self.calib_max}")
    return self


@dataclasses.dataclass(frozen=True)
class DeltaConfig:
  """DelTA (``rl.credit="delta"``, :mod:`daca_jax.credit.delta`).

  Attributes:
    lambda_min: λmin, weight of the least side-specific token.
    lambda_max: λmax, weight of the most side-specific token.
    gamma: γ, temperature of the sigmoid over the discriminator margins, in units of each side's
      margin std (the reference implementation's value: 1).
  """

  lambda_min: float = 0.8
  lambda_max: float = 1.2
  gamma: float = 1.0

  def validate(self, prefix: str = "credit.delta") -> "DeltaConfig":
    _check_fields(prefix, self)
    if not 0.0 < self.lambda_min <= 1.0 <= self.lambda_max:
      raise ConfigError(f"{prefix}.lambda_min", self.lambda_min,
                        f"0 < lambda_min <= 1 <= lambda_max={self.lambda_max}")
    if not 0 < self.gamma < float("inf"):
      raise ConfigError(f"{prefix}.gamma", self.gamma, "a finite number > 0")
    return self


@dataclasses.dataclass(frozen=True)
class ContrastConfig:
  """Signed contrast credit (``rl.credit="contrast"``, :mod:`daca_jax.credit.contrast`):
  ``e = base + alpha * |A| * z`` per token, ``z`` a rollout record standardised within the sequence.

  Attributes:
    alpha: gain of the contrast term; above 1 a token whose ``z`` is below ``-1 / alpha`` gets a share
      of the opposite sign to its rollout's advantage.
    signal: the per-token record contrasted: "commit_conf" (the probability of the committed token at
      its commit step) or "dps" (the DPS raw score: the step progress at the token's commit step,
      with ``credit.dps.scope`` / ``signal`` / ``self_term``).
    baseline: what ``z`` is measured from: "sequence" (the row's mean over its tokens) or "position"
      (the group's mean at the same completion position, over its G rollouts).
    base: the advantage the contrast is added to: "sequence" (the rollout's ``A``) or
      "position_value" (:func:`daca_jax.credit.position_value.position_value_advantages`).
  """

  alpha: float = 1.0
  signal: str = "commit_conf"
  baseline: str = "sequence"
  base: str = "sequence"

  def validate(self, prefix: str = "credit.contrast") -> "ContrastConfig":
    _check_fields(prefix, self)
    _non_negative(prefix, self, "alpha")
    _one_of(prefix, self, "signal", ("commit_conf", "dps"))
    _one_of(prefix, self, "baseline", ("sequence", "position"))
    _one_of(prefix, self, "base", ("sequence", "position_value"))
    return self


@dataclasses.dataclass(frozen=True)
class PositionValueConfig:
  """Position-value credit (``rl.credit="position_value"``, :mod:`daca_jax.credit.position_value`).

  Attributes:
    weights: what multiplies each token's position-value advantage: "none" (nothing) or "dps" (DACA's
      DPS weights, ``credit.dps.*``: the paper's "+DPS" on this assigner).
  """

  weights: str = "none"

  def validate(self, prefix: str = "credit.position_value") -> "PositionValueConfig":
    _check_fields(prefix, self)
    _one_of(prefix, self, "weights", ("none", "dps"))
    return self


@dataclasses.dataclass(frozen=True)
class CreditConfig:
  """Options of the credit assigners, one section per assigner. The assigner is chosen by ``rl.credit``
  and receives only the sections it declares (DPS: ``dps``; DTCA, built on DPS's scores: ``dtca``
  and ``dps``; :class:`daca_jax.credit.CreditAssigner`).

  Attributes:
    dps: :class:`DPSConfig` (``credit.dps.*``).
    dtca: :class:`DTCAConfig` (``credit.dtca.*``).
    delta: :class:`DeltaConfig` (``credit.delta.*``).
    contrast: :class:`ContrastConfig` (``credit.contrast.*``).
    position_value: :class:`PositionValueConfig` (``credit.position_value.*``).
    drop_agreed: multiply every assigner's weights by the group-agreement mask: a token that all G
      rollouts of its group committed identically at that position gets weight 0 (its advantages sum
      to zero over the group; see :mod:`daca_jax.credit.agreement`).
  """

  dps: DPSConfig = DPSConfig()
  dtca: DTCAConfig = DTCAConfig()
  delta: DeltaConfig = DeltaConfig()
  contrast: ContrastConfig = ContrastConfig()
  position_value: PositionValueConfig = PositionValueConfig()
  drop_agreed: bool = False

  def validate(self, prefix: str = "credit") -> "CreditConfig":
    _check_sections(prefix, self)
    if not isinstance(self.drop_agreed, bool):
      raise ConfigError(f"{prefix}.drop_agreed", self.drop_agreed, "True or False")
    return self


@dataclasses.dataclass(frozen=True)
class StratifiedConfig:
  """Stratified Masking Likelihood (``rl.likelihood="stratified"``, :mod:`daca_jax.likelihood.stratified`).

  Attributes:
    num_strata: K strata; 1 <= K <= gen_length.
    partition: how completion positions are split into strata: "random" (per sequence),
      "per_prompt" (one random partition shared by the completions of a prompt), "strided",
      "contiguous" or "commit_order".
  """

  num_strata: int = 4
  partition: str = "random"

  def validate(self, prefix: str = "likelihood.stratified") -> "StratifiedConfig":
    _check_fields(prefix, self)
    _positive(prefix, self, "num_strata")
    _one_of(prefix, self, "partition", STRATA_PARTITIONS)
    return self


@dataclasses.dataclass(frozen=True)
class CoupledConfig:
  """DiffuCoder's coupled estimator (``rl.likelihood="coupled"``, :mod:`daca_jax.likelihood.coupled`).

  Attributes:
    t_min: lower end of the masking rate t ~ U[t_min, t_max].
    t_max: upper end of that range (DiffuCoder: [0.2, 0.8]).
    full_pass: also run the fully-masked pass and average it in (DiffuCoder does).
  """

  t_min: float = 0.2
  t_max: float = 0.8
  full_pass: bool = True

  def validate(self, prefix: str = "likelihood.coupled") -> "CoupledConfig":
    _check_fields(prefix, self)
    if not 0.0 < self.t_min <= self.t_max < 1.0:
      raise ConfigError(f"{prefix}.t_min", self.t_min, f"0 < t_min <= t_max={self.t_max} < 1")
    return self


@dataclasses.dataclass(frozen=True)
class ELBOConfig:
  """GDPO's ELBO estimator (``rl.likelihood="elbo"``, :mod:`daca_jax.likelihood.elbo`).

  Attributes:
    nodes: Gauss–Legendre nodes in t (GDPO uses 2–3).
  """

  nodes: int = 2

  def validate(self, prefix: str = "likelihood.elbo") -> "ELBOConfig":
    _check_fields(prefix, self)
    _positive(prefix, self, "nodes")
    return self


@dataclasses.dataclass(frozen=True)
class TrajectoryConfig:
  """The sampler's own trajectory likelihood (``rl.likelihood="trajectory"``,
  :mod:`daca_jax.likelihood.trajectory`).

  Attributes:
    groups: passes: the S = ``likelihood.trajectory_steps`` steps are split into this many runs of
      consecutive steps and a token is
      scored in the state at the start of its commit step's run (0 means S: every token in its own
      commit state).
  """

  groups: int = 0

  def validate(self, prefix: str = "likelihood.trajectory") -> "TrajectoryConfig":
    _check_fields(prefix, self)
    _non_negative(prefix, self, "groups")
    return self


@dataclasses.dataclass(frozen=True)
class RLDFConfig:
  """RLDF's state sampling (``rl.likelihood="rldf"``, :mod:`daca_jax.likelihood.rldf`).

  Attributes:
    states: k, rollout states rebuilt per sequence (one pass each).
    sampling: how the k states are picked: "softmax" (probability ∝ softmax of each step's mean
      surprisal / temperature, without replacement), "uniform", or "topk" (the k most surprising
      steps).
    temperature: T of the "softmax" state sampling.
  """

  states: int = 4
  sampling: str = "softmax"
  temperature: float = 1.0

  def validate(self, prefix: str = "likelihood.rldf") -> "RLDFConfig":
    _check_fields(prefix, self)
    _positive(prefix, self, "states")
    if not self.temperature > 0:
      raise ConfigError(f"{prefix}.temperature", self.temperature, "a number > 0")
    _one_of(prefix, self, "sampling", ("softmax", "uniform", "topk"))
    return self


@dataclasses.dataclass(frozen=True)
class SPGBlockConfig:
  """SPG's block-wise masking (``rl.likelihood="spg_block"``, :mod:`daca_jax.likelihood.spg_block`;
  facebookresearch/SPG ``spg/spg_trainer.py`` ``SPGTrainer.forward_process``, ``forward_type="block_random"``).

  Attributes:
    num_t: masked contexts (forward passes) per sequence, each with its own block; at most the
      completion's ``gen_length / block_length`` blocks (SPG: 2).
    block_length: completion positions per block; divides ``rollout.gen_length``; 0 means
      ``rollout.block_length`` (the learner fills it in: SPG masks its generation blocks, 32 in its recipe).
      ``block_length = gen_length`` is SPG's ``forward_type="random"``.
    min_t: fewest positions of the chosen block masked, as a fraction of its valid positions (at least 1).
    max_t: most positions masked, as that fraction; ``min_t = max_t = 1`` is ``forward_type="block_all"``.
  """

  num_t: int = 2
  block_length: int = 0
  min_t: float = 0.0
  max_t: float = 1.0

  def validate(self, prefix: str = "likelihood.spg_block") -> "SPGBlockConfig":
    _check_fields(prefix, self)
    _positive(prefix, self, "num_t")
    _non_negative(prefix, self, "block_length")
    if not 0.0 <= self.min_t <= self.max_t <= 1.0:
      raise ConfigError(f"{prefix}.min_t", self.min_t, f"0 <= min_t <= max_t={self.max_t} <= 1")
    return self


ESPO_STRATIFY = ("row", "batch")


@dataclasses.dataclass(frozen=True)
class ESPOELBOConfig:
  """ESPO's ELBO estimator (``rl.likelihood="espo_elbo"``, :mod:`daca_jax.likelihood.espo_elbo`;
  ML-GSAI/ESPO ``espo/espo_trainer.py`` ``forward_process`` and ``ESPOTrainer._get_elbo``).

  Attributes:
    num_mc: Monte-Carlo mask draws per sequence, averaged (ESPO ``num_mc``: 1 by default, 2 in its recipes).
    coupled: also score the complement of every mask (ESPO ``reduce_var``: True), so every completion
      position is scored once per draw; two passes per draw instead of one.
    stratify: how mask counts are stratified: "row" (the ``num_mc`` draws of a sequence share one
      random offset on a grid of ``L+1`` counts: row-local, so independent of ``rl.grad_accum`` and the
      device count) or "batch" (ESPO's: the rows of one estimator call share the offset, row r at
      ``offset + r (L+1)/B``; refused with ``rl.grad_accum > 1`` and ``parallel.strategy="pmap"``, whose
      rows draw from their own keys).
  """

  num_mc: int = 1
  coupled: bool = True
  stratify: str = "row"

  def validate(self, prefix: str = "likelihood.espo_elbo") -> "ESPOELBOConfig":
    _check_fields(prefix, self)
    _positive(prefix, self, "num_mc")
    _one_of(prefix, self, "stratify", ESPO_STRATIFY)
    return self


@dataclasses.dataclass(frozen=True)
class ELBOMCConfig:
  """BGPO's Monte-Carlo ELBO (``rl.likelihood="elbo_mc"``, :mod:`daca_jax.likelihood.elbo_mc`).

  Attributes:
    samples: n_t, Monte-Carlo samples (t_j, mask_j) of the ELBO, one forward pass each (BGPO: 16).
    stratified_t: draw t_j in the j-th of n_t equal bins of (0, 1] (stratified) rather than i.i.d.
  """

  samples: int = 16
  stratified_t: bool = True

  def validate(self, prefix: str = "likelihood.elbo_mc") -> "ELBOMCConfig":
    _check_fields(prefix, self)
    _positive(prefix, self, "samples")
    return self


@dataclasses.dataclass(frozen=True)
class StepMergeConfig:
  """d2's StepMerge trajectory likelihood with MAP's position term (``rl.likelihood="stepmerge"``,
  :mod:`daca_jax.likelihood.stepmerge`).

  Attributes:
    segments: N, runs of consecutive denoising steps (MAP's gsm8k recipe: 32).
    sample: K segments scored per update (0: all N); MAP's recipe: 12.
    position: also return the unmasking-position log-probs (the objective ``map`` reads them).
    position_method: "softmax" (Plackett-Luce choice among the competitors) or "bradley_terry".
    position_scope: competitors of a token: "segment" (positions unmasked in later segments) or
      "position" (also later steps of its own segment).
    position_confidence: "max_logit" or "top_prob" (the competitors' confidence).
    position_source: "gt" (the committed token's logit / probability) or "max" (as the competitors').
    position_temperature: tau of the position scores (> 0).
  """

  segments: int = 32
  sample: int = 0
  position: bool = True
  position_method: str = "softmax"
  position_scope: str = "segment"
  position_confidence: str = "max_logit"
  position_source: str = "gt"
  position_temperature: float = 1.0

  def validate(self, prefix: str = "likelihood.stepmerge") -> "StepMergeConfig":
    _check_fields(prefix, self)
    _positive(prefix, self, "segments")
    _non_negative(prefix, self, "sample")
    if self.sample > self.segments:
      raise ConfigError(f"{prefix}.sample", self.sample, f"0 (all) or at most {prefix}.segments={self.segments}")
    _one_of(prefix, self, "position_method", ("softmax", "bradley_terry"))
    _one_of(prefix, self, "position_scope", ("segment", "position"))
    _one_of(prefix, self, "position_confidence", ("max_logit", "top_prob"))
    _one_of(prefix, self, "position_source", ("gt", "max"))
    if not self.position_temperature > 0:
      raise ConfigError(f"{prefix}.position_temperature", self.position_temperature, "a number > 0")
    return self


@dataclasses.dataclass(frozen=True)
class LikelihoodConfig:
  """Options of the likelihood estimators: what they share, then one section per estimator. The
  estimator is chosen by ``rl.likelihood`` and receives only the fields it declares (SML:
  ``stratified``, ``p_mask_prompt``, ``strata_batch``; :func:`daca_jax.likelihood.base.register_estimator`).

  Attributes:
    p_mask_prompt: probability of masking each prompt token in the likelihood passes. 0 by default
      (the prompt is scored as given); d1 (Zhao et al. 2025) masks 15% of prompt tokens, so its
      reproductions set 0.15 explicitly.
    elbo_terms: how an objective reads the ELBO-type estimators (``elbo``, ``coupled``), whose token
      terms ``Σ_j (1/t_j) log p_j`` are not log-probs: "per_target" takes the ratio, the clip and the
      KL of each scored log-prob and multiplies its ELBO factor into the advantage (the same gradient
      at θ = θ_old); "summed" uses each token's summed term as its log-prob, as DiffuCoder's
      coupled-GRPO does (its ratio and k3 KL exponentiate ``1/t``-scaled log-ratios).
    strata_batch: passes kept at once by the multi-pass estimators (SML's strata, the trajectory
      estimator's step groups, RLDF's states): 0 vectorises all passes (``jax.vmap``); 0 < n < passes
      evaluates n at a time (``lax.map``, rematerialised): the update keeps the activations of n
      passes instead of all, at the price of one more forward pass each in the backward pass.
    trajectory_steps: denoising steps S of the rollouts the trajectory and rldf estimators rebuild;
      0 means ``rollout.steps`` (the learner sets it).
    stratified: :class:`StratifiedConfig` (``likelihood.stratified.*``, DACA's SML).
    coupled: :class:`CoupledConfig`.
    elbo: :class:`ELBOConfig`.
    trajectory: :class:`TrajectoryConfig`.
    rldf: :class:`RLDFConfig`.
    spg_block: :class:`SPGBlockConfig` (SPG's block-wise masks).
    espo_elbo: :class:`ESPOELBOConfig` (ESPO's stratified, coupled ELBO).
    elbo_mc: :class:`ELBOMCConfig` (BGPO).
    stepmerge: :class:`StepMergeConfig` (MAP).
  """

  p_mask_prompt: float = 0.0
  elbo_terms: str = "per_target"
  strata_batch: int = 0
  trajectory_steps: int = 0
  stratified: StratifiedConfig = StratifiedConfig()
  coupled: CoupledConfig = CoupledConfig()
  elbo: ELBOConfig = ELBOConfig()
  trajectory: TrajectoryConfig = TrajectoryConfig()
  rldf: RLDFConfig = RLDFConfig()
  spg_block: SPGBlockConfig = SPGBlockConfig()
  espo_elbo: ESPOELBOConfig = ESPOELBOConfig()
  elbo_mc: ELBOMCConfig = ELBOMCConfig()
  stepmerge: StepMergeConfig = StepMergeConfig()

  def validate(self, prefix: str = "likelihood") -> "LikelihoodConfig":
    _check_sections(prefix, self)
    if not 0.0 <= self.p_mask_prompt < 1.0:
      raise ConfigError(f"{prefix}.p_mask_prompt", self.p_mask_prompt, "a probability in [0, 1)")
    _one_of(prefix, self, "elbo_terms", ("per_target", "summed"))
    _non_negative(prefix, self, "strata_batch", "trajectory_steps")
    return self


@dataclasses.dataclass(frozen=True)
class SPGConfig:
  """SPG's sandwiched bound (``rl.objective="spg"``, :mod:`daca_jax.rl.spg`; facebookresearch/SPG
  ``spg/spg_trainer.py`` ``SPGTrainer._get_per_seq_logps``).

  Attributes:
    eubo_beta: β > 0 of the upper bound's power mean ``(1/β) log E[p^β / t]`` (SPG ``eubo_beta``:
      1.5 for GSM8K and MATH, 2.0 for Countdown, 1.0 for Sudoku).
    mix_weight: ω in [0, 1], the upper bound's share of a negative-advantage sequence's bound,
      ``ω·EUBO + (1−ω)·ELBO`` (SPG ``mix_weight`` 0.5 with ``logp_estimation="mix"``; 1 is its
      ``"eubo"``, 0 its ``"elbo"``). Positive-advantage sequences always use the ELBO.
  """

  eubo_beta: float = 1.5
  mix_weight: float = 0.5

  def validate(self, prefix: str = "rl.spg") -> "SPGConfig":
    _check_fields(prefix, self)
    if not self.eubo_beta > 0:
      raise ConfigError(f"{prefix}.eubo_beta", self.eubo_beta, "a number > 0")
    if not 0.0 <= self.mix_weight <= 1.0:
      raise ConfigError(f"{prefix}.mix_weight", self.mix_weight, "a number in [0, 1]")
    return self


@dataclasses.dataclass(frozen=True)
class RLConfig:
  """GRPO learner.

  Attributes:
    objective: base method ("diffu_grpo", ...).
    credit: token credit assigner ("uniform", "dps").
    likelihood: per-token log-prob estimator ("mean_field", "stratified").
    steps: RL iterations (each: one rollout batch, ``num_iterations`` updates).
    prompts_per_step: distinct prompts per iteration; batch B = prompts_per_step * group_size.
    group_size: G, completions per prompt in every update.
    sample_group_size: n, completions sampled per prompt; the update trains on ``group_size`` of
      them chosen by ``downsample`` (PODS, Xu et al. 2025). 0 (or ``group_size``): no
      down-sampling.
    downsample: which ``group_size`` of the n: "max_variance" (PODS: the subset whose rewards
      vary most) or "random" (the control at the same batch sizes); :mod:`daca_jax.rl.downsample`.
    num_iterations: μ, policy updates per rollout batch (new likelihood mask each).
    clip_eps: ε of the ratio clip.
    beta: β of the k3 KL penalty to the reference policy (0 disables the reference pass).
    normalize_adv_std: divide group advantages by the group std (d1 does not); the same as
      ``advantage="group_std"``.
    advantage: sequence-advantage estimator (registry ``ADVANTAGES``, :mod:`daca_jax.rl.advantages`):
      "group_mean" (d1: r − group mean), "group_std" (GRPO: also / group std), "batch_whiten"
      (whitened over the whole batch), "reinforce_pp" (REINFORCE++: KL-shaped reward, whitened over
      the batch), "rloo" (leave-one-out group baseline, ESPO's); "" picks the objective's own
      (``reinforce_pp`` for that objective, ``rloo`` for ``espo``, else
      ``group_mean``, or ``group_std`` with ``normalize_adv_std``).
    learning_rate: peak AdamW learning rate.
    warmup_steps: linear warmup (optimizer updates).
    lr_schedule: after warmup, "constant" or "cosine" (decay to 10% of the peak at the last of the
      ``steps * num_iterations`` updates).
    weight_decay: AdamW weight decay.
    max_grad_norm: global-norm gradient clip.
    adam_eps: Adam's epsilon.
    adam_b1: Adam's first-moment decay β1, in [0, 1).
    adam_b2: Adam's second-moment decay β2, in [0, 1) (d1: 0.99).
    grad_accum: micro-batches per optimizer update: the rollout batch's B rows are scored and
      differentiated ``B / grad_accum`` rows at a time inside the compiled update (``lax.scan``, the
      activations of one micro-batch live at a time) and their gradients summed before one optimizer
      step. Every normalisation spans the whole batch (token counts, group and batch-whitened
      advantages, REINFORCE++'s KL-shaped whitening, the gradient-agreement monitor), so the update
      equals ``grad_accum = 1`` with per-row likelihood keys (:mod:`daca_jax.rl.accumulate`). B must
      be a multiple of ``grad_accum``, and each micro-batch whole groups of ``group_size`` rows split
      evenly over the ``parallel.data x parallel.fsdp`` devices. d1's recipe: 6 rows per device x 2.
    rollout_batch: rows sampled at once: the rollout of an iteration's ``prompts_per_step x
      sample_group_size`` (or ``group_size``) rows runs as consecutive calls of one compiled sampler of
      this many rows, whose noise is the matching rows of the full batch's draws, so the trajectories
      equal one call's (:func:`daca_jax.diffusion.rollout.rollout_in_micro_batches`). 0: all rows at
      once. Must divide the sampled batch and split over the batch devices.
    eval_every: evaluate on the validation split (``task.num_val_examples``) every N iterations and
      at the end (0: no periodic evaluation). The test set is evaluated only before and after RL.
    grad_agreement: log ``grad_cos``, the cosine between successive rollout batches' gradients (its
      mean over a run gives the gradient SNR, cos / (1 − cos)); costs one params-sized buffer in the
      optimizer state.
    rldf_tau: rldf's clean-state clip: a (state, position) target whose probability under the
      rollout policy is below tau is dropped unless the position was committed at that state.
    replicate: which draw of RL's randomness (rollout keys, prompt order) the run takes from its
      seed: 0 = the seed's own; k > 0 = another independent draw from the same SFT warm start (a
      second run of one arm per warm start measures the RL seed's share of the spread).
    spg: :class:`SPGConfig` (``rl.objective="spg"``: its bound's β and mixture weight).
    pass_accum: per-pass gradient accumulation (:mod:`daca_jax.rl.pass_accum`): the gradient of an
      objective that is a sum of per-pass terms (BGPO's bound, the token-level objectives) is
      accumulated one likelihood pass at a time inside a ``lax.scan``, each pass's graph dropped, so
      memory stays that of one pass whatever the number of passes (BGPO's n_t, SML's K).
    clip_eps_high: upper clip 1 + ε_high of ``map``'s sequence-level ratios (0: ``clip_eps``; the lower
      clip is always 1 − ``clip_eps``).
    map_position_weight: λ of MAP's position loss (``rl.objective="map"``).
  """

  objective: str = "diffu_grpo"
  credit: str = "dps"
  likelihood: str = "stratified"
  steps: int = 150
  prompts_per_step: int = 8
  group_size: int = 8
  sample_group_size: int = 0
  downsample: str = "max_variance"
  num_iterations: int = 1
  clip_eps: float = 0.5
  beta: float = 0.04
  normalize_adv_std: bool = False
  advantage: str = ""
  learning_rate: float = 1e-4
  warmup_steps: int = 5
  lr_schedule: str = "constant"
  weight_decay: float = 0.0
  max_grad_norm: float = 1.0
  adam_eps: float = 1e-8
  adam_b1: float = 0.9
  adam_b2: float = 0.999
  grad_accum: int = 1
  rollout_batch: int = 0
  eval_every: int = 0
  grad_agreement: bool = True
  rldf_tau: float = 0.6
  replicate: int = 0
  spg: SPGConfig = SPGConfig()
  pass_accum: bool = False
  clip_eps_high: float = 0.0
  map_position_weight: float = 1.0

  def validate(self, prefix: str = "rl") -> "RLConfig":
    _check_fields(prefix, self)
    self.spg.validate(f"{prefix}.spg")
    if self.advantage:
      if self.normalize_adv_std and self.advantage != "group_std":
        raise ConfigError(f"{prefix}.normalize_adv_std", self.normalize_adv_std,
                          f"False with {prefix}.advantage={self.advantage!r} (normalize_adv_std=True "
                          f"means {prefix}.advantage='group_std')")
    _positive(prefix, self, "prompts_per_step", "group_size", "num_iterations", "grad_accum")
    _non_negative(prefix, self, "clip_eps_high", "map_position_weight")
    _non_negative(prefix, self, "rollout_batch", "steps", "clip_eps", "beta", "learning_rate", "warmup_steps",
                  "weight_decay", "max_grad_norm", "adam_eps", "eval_every", "replicate")
    if self.group_size < 2:
      raise ConfigError(f"{prefix}.group_size", self.group_size, ">= 2 (group advantages)")
    if self.prompts_per_step % self.grad_accum:
      raise ConfigError(f"{prefix}.grad_accum", self.grad_accum,
                        f"a divisor of {prefix}.prompts_per_step={self.prompts_per_step} (every micro-batch "
                        f"holds whole groups of {prefix}.group_size={self.group_size} rows)")
    if not isinstance(self.sample_group_size, int) or isinstance(self.sample_group_size, bool) or (
        self.sample_group_size and self.sample_group_size < self.group_size):
      raise ConfigError(f"{prefix}.sample_group_size", self.sample_group_size,
                        f"0 (no down-sampling) or an int >= {prefix}.group_size={self.group_size}")
    sampled = self.prompts_per_step * (self.sample_group_size or self.group_size)
    if self.rollout_batch and sampled % self.rollout_batch:
      raise ConfigError(f"{prefix}.rollout_batch", self.rollout_batch,
                        f"0 (all rows at once) or a divisor of the {sampled} rows sampled per iteration "
                        f"({prefix}.prompts_per_step x {prefix}.sample_group_size or group_size)")
    _one_of(prefix, self, "downsample", DOWNSAMPLE_RULES)
    _one_of(prefix, self, "lr_schedule", LR_SCHEDULES)
    if not 0.0 <= self.rldf_tau <= 1.0:
      raise ConfigError(f"{prefix}.rldf_tau", self.rldf_tau, "a probability in [0, 1]")
    if not isinstance(self.grad_agreement, bool):
      raise ConfigError(f"{prefix}.grad_agreement", self.grad_agreement, "True or False")
    for name in ("adam_b1", "adam_b2"):  # Adam divides by 1 - beta**t: beta = 1 divides by zero
      if not 0.0 <= getattr(self, name) < 1.0:
        raise ConfigError(f"{prefix}.{name}", getattr(self, name), "a number in [0, 1)")
    if not self.adam_eps > 0:  # Adam divides by sqrt(nu) + eps: 0 gives 0/0 = NaN for a zero gradient
      raise ConfigError(f"{prefix}.adam_eps", self.adam_eps, "a number > 0")
    return self


@dataclasses.dataclass(frozen=True)
class SFTConfig:
  """Supervised warm start with LLaDA's masked-diffusion SFT loss (Nie et al. 2025).

  Attributes:
    steps: optimizer steps (0 skips SFT).
    batch_size: sequences per step.
    learning_rate: peak AdamW learning rate (cosine decay after warmup).
    warmup_steps: linear warmup steps.
    weight_decay: AdamW weight decay.
    max_grad_norm: global-norm gradient clip.
    num_train_examples: size of the generated training pool.
  """

  steps: int = 300
  batch_size: int = 64
  learning_rate: float = 1e-3
  warmup_steps: int = 50
  weight_decay: float = 0.01
  max_grad_norm: float = 1.0
  num_train_examples: int = 20000

  def validate(self, prefix: str = "sft") -> "SFTConfig":
    _check_fields(prefix, self)
    _non_negative(prefix, self, "steps", "learning_rate", "warmup_steps", "weight_decay",
                  "max_grad_norm")
    _positive(prefix, self, "batch_size", "num_train_examples")
    return self


VAL_SPLITS = ("pool", "fixed")  # task.val_split


@dataclasses.dataclass(frozen=True)
class TaskConfig:
  """Which task, and where its evaluation data comes from.

  Attributes:
    name: registered task name ("sudoku4x4").
    num_blanks: blanks per generated training puzzle (d1's test set has 8).
    eval_path: explicit evaluation file; "" means ``<data.data_dir>/sudoku/d1_test.csv`` when present,
      else a generated held-out set (announced loudly).
    eval_size: size of the generated held-out set used when no file is found.
    num_eval_examples: evaluate on the first N examples only (0: all).
    num_val_examples: size of the validation split, held out of training and disjoint from the
      evaluation set (generated items exclude it); ``rl.eval_every`` evaluates on it, so choices are
      made without touching the test set (0: none).
    val_split: how the validation split is drawn: "pool" = the items after the first
      ``sft.num_train_examples`` of the training pool of ``seed`` (so each warm start has its own);
      "fixed" = the first ``num_val_examples`` items the task generates from ``val_seed``, the same for
      every seed, removed from every training pool (the studies' split:
      :func:`daca_jax.run.task_views.draw_splits`).
    val_seed: the generator seed of a "fixed" validation split.
    options: task-specific options (e.g. ``{"prompt_style": "chat"}``), passed to the task class as
      keyword arguments; an option the task does not declare (its ``OPTIONS`` table) is a ConfigError
      naming ``task.options.<name>`` and listing the declared ones. ``num_blanks``, ``eval_path`` and
      ``eval_size`` are forwarded only to tasks that declare them.
    reward: the reward RL trains on: "" = the task's own graded reward (the one evaluation uses);
      "d1" = d1's training rewards as released, "d1_dotall" = with d1's later DOTALL format patterns
      (:mod:`daca_jax.tasks.training_rewards`, which also checks that the task has one).
    train_prompt_style: the prompt style RL trains on, when it differs from the one evaluation uses
      (``task.options.prompt_style``): "" = the same. d1, wd1 and GDPO train on d1's training prompts
      ("d1_train", :mod:`daca_jax.tasks.d1_train_prompts`) and evaluate on d1's evaluation prompts
      ("chat"); their rewards (``task.reward=d1``) are written for the training prompts. The main job
      then builds two views of the task (:func:`daca_jax.run.pipeline.build_task_views`): the training
      view (this style) formats the training pool, RL's rollouts and rewards; the evaluation view
      (``task.options.prompt_style``) the test set and the validation split. Both views draw the same
      items. The task must declare ``prompt_style`` and offer this style (checked by
      :func:`daca_jax.configure.check_names`).
  """

  name: str = "sudoku4x4"
  num_blanks: int = 8
  eval_path: str = ""
  eval_size: int = 500
  num_eval_examples: int = 0
  num_val_examples: int = 0
  val_split: str = "pool"
  val_seed: int = 20261205
  options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  reward: str = ""
  train_prompt_style: str = ""

  def validate(self, prefix: str = "task") -> "TaskConfig":
    _check_fields(prefix, self)
    _check_values(f"{prefix}.options", self.options)
    _positive(prefix, self, "num_blanks", "eval_size")
    _non_negative(prefix, self, "num_eval_examples", "num_val_examples", "val_seed")
    _one_of(prefix, self, "val_split", VAL_SPLITS)
    return self


@dataclasses.dataclass(frozen=True)
class DataConfig:
  """Where the benchmark files are read from.

  Attributes:
    data_dir: folder of benchmark files; "" means ``$DACA_DATA_DIR`` or ``../shared/data`` beside the
      repository. An explicitly given folder that does not exist is an error.
  """

  data_dir: str = ""

  def validate(self, prefix: str = "data") -> "DataConfig":
    _check_fields(prefix, self)
    return self


EVAL_PROTOCOLS = ("rollout", "d1")  # eval.protocol


@dataclasses.dataclass(frozen=True)
class EvalConfig:
  """How the main job evaluates: the test set before and after RL, the validation split every
  ``rl.eval_every`` iterations.

  Two protocols (``protocol``):

  * "rollout" (the tiny main job's): one decode with the RL sampler's geometry (``rollout.gen_length``,
    ``block_length``, ``steps``, ``remasking``) at ``temperature``, with the exact sampler: no K/V
    cache and no threshold even when ``rollout.kv_cache`` / ``rollout.threshold`` speed up RL's
    training rollouts, so that how RL samples never changes how its policy is scored.
  * "d1": d1's evaluation protocol (dllm-reasoning/d1 @ 837888f ``eval/eval.py``, ``eval/generate.py``:
    low-confidence remasking, greedy at ``temperature`` 0) at each length of ``gen_lengths`` (d1: 128,
    256, 512), in blocks of ``block_length`` (32) with ``steps`` denoising steps (0: length / 2), the
    decoding of :class:`daca_jax.evaluation.EvalProtocol` (``experiments/evaluate.py``'s). Every length is
    reported (``L<length>/<metric>``); the plain metric names are the headline length's: ``rollout.gen_length``
    when it is evaluated, else the longest (:func:`daca_jax.run.pipeline.eval_protocol`).

  Attributes:
    batch_size: prompts decoded per call (the last batch is padded; shapes stay static).
    temperature: decoding temperature (0 = greedy, d1).
    protocol: "rollout" or "d1" (above).
    gen_lengths: the d1 protocol's completion lengths, comma-separated ("128,256,512"); each a multiple
      of ``block_length``. Unused by "rollout".
    block_length: the d1 protocol's semi-autoregressive block (d1: 32).
    steps: the d1 protocol's denoising steps at every length; 0: length / 2 (d1's).
  """

  batch_size: int = 250
  temperature: float = 0.0
  protocol: str = "rollout"
  gen_lengths: str = "128,256,512"
  block_length: int = 32
  steps: int = 0

  @property
  def lengths(self) -> tuple[int, ...]:
    """``gen_lengths`` as integers (ValueError if it does not parse; :meth:`validate` names the field)."""
    return tuple(int(x) for x in self.gen_lengths.split(",") if x.strip())

  def validate(self, prefix: str = "eval") -> "EvalConfig":
    _check_fields(prefix, self)
    _positive(prefix, self, "batch_size", "block_length")
    _non_negative(prefix, self, "temperature", "steps")
    _one_of(prefix, self, "protocol", EVAL_PROTOCOLS)
    allowed = f"comma-separated positive multiples of {prefix}.block_length={self.block_length}, e.g. '128,256,512'"
    try:
      lengths = self.lengths
    except ValueError:
      raise ConfigError(f"{prefix}.gen_lengths", self.gen_lengths, allowed) from None
    if not lengths or any(n < 1 or n % self.block_length for n in lengths) or len(set(lengths)) != len(lengths):
      raise ConfigError(f"{prefix}.gen_lengths", self.gen_lengths, allowed + " (distinct)")
    for n in lengths:
      steps = self.steps or n // 2
      if steps % (n // self.block_length) or steps > n:
        raise ConfigError(f"{prefix}.steps", self.steps, f"0 (length / 2) or a multiple of the blocks of every "
                          f"length, at most one step per token (length {n}: {n // self.block_length} blocks of "
                          f"{prefix}.block_length={self.block_length})")
    return self


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
  """How often checkpoints are saved, and how many are kept.

  Attributes:
    every: save an RL checkpoint every N iterations (and always at the end); SFT saves every
      ``sft_every`` steps.
    sft_every: SFT checkpoint interval (steps).
    max_to_keep: checkpoints kept per phase.
  """

  every: int = 10
  sft_every: int = 200
  max_to_keep: int = 2

  def validate(self, prefix: str = "checkpoint") -> "CheckpointConfig":
    _check_fields(prefix, self)
    _positive(prefix, self, "every", "sft_every", "max_to_keep")
    return self


@dataclasses.dataclass(frozen=True)
class ParallelConfig:
  """Device mesh and update strategy (:mod:`daca_jax.parallel`).

  The mesh has axes ``('data', 'fsdp', 'tensor')``; its shape must multiply to the device count.

  Attributes:
    strategy: "none" (plain ``jax.jit`` on the default device), "pmap" (parameters replicated,
      the batch split over all ``data x fsdp`` devices, per-device gradients averaged with ``pmean``)
      or "fsdp" (``jax.jit`` with parameters and optimizer state sharded over 'fsdp', the batch over
      ``('data', 'fsdp')``).
    data: size of the 'data' axis; 0 means every device not used by ``fsdp * tensor``.
    fsdp: size of the 'fsdp' axis.
    tensor: size of the 'tensor' axis; must be 1 (no tensor-parallel layers yet, the axis is kept so
      that meshes and shardings keep their names when they come).
    distributed: call ``jax.distributed.initialize()`` before the first device query (multi-host);
      also done when the environment names a coordinator (``JAX_COORDINATOR_ADDRESS``).
    rollout_weights: how an FSDP rollout reads the sharded weights. "gathered": all-gathered once
      per rollout call and held for its S model calls (the whole model resident per device while
      sampling); "sharded": each layer's weights all-gathered at every model call (S x the
      traffic, nothing extra resident); "auto": "gathered" when the parameters take at most
      :data:`daca_jax.parallel.ROLLOUT_GATHER_FRACTION` of a device's memory (or the device does not
      report its memory, as CPUs), else "sharded". Ignored by the other strategies.
  """

  strategy: str = "none"
  data: int = 0
  fsdp: int = 1
  tensor: int = 1
  distributed: bool = False
  rollout_weights: str = "auto"

  def validate(self, prefix: str = "parallel") -> "ParallelConfig":
    _check_fields(prefix, self)
    _one_of(prefix, self, "strategy", ("none", "pmap", "fsdp"))
    _one_of(prefix, self, "rollout_weights", ("auto", "gathered", "sharded"))
    if not isinstance(self.data, int) or isinstance(self.data, bool) or self.data < 0:
      raise ConfigError(f"{prefix}.data", self.data, "an integer >= 0 (0: all remaining devices)")
    _positive(prefix, self, "fsdp", "tensor")
    if self.tensor != 1:
      raise ConfigError(f"{prefix}.tensor", self.tensor, "1 (tensor parallelism is not implemented)")
    if not isinstance(self.distributed, bool):
      raise ConfigError(f"{prefix}.distributed", self.distributed, "True or False")
    return self


@dataclasses.dataclass(frozen=True)
class LogConfig:
  """Dashboards and console output (:mod:`daca_jax.run.dashboards`); none of it changes what is trained.

  Attributes:
    tensorboard: write TensorBoard event files under ``<workdir>/tb/{sft,rl,eval}`` (the scalars of the
      metrics JSONL files, same names).
    wandb: a Weights & Biases project to log to ("" = off); needs the ``wandb`` package.
    trajectory_every: add a denoising-trajectory image (:mod:`daca_jax.viz`, the first rollout group of
      the iteration) to the dashboards every N RL iterations and at the last one (0 = never).
    plumbing_check: the run is a plumbing check (the smoke presets): its output says so, and that its
      metrics are expected to be near zero.
  """

  tensorboard: bool = True
  wandb: str = ""
  trajectory_every: int = 50
  plumbing_check: bool = False

  def validate(self, prefix: str = "log") -> "LogConfig":
    _check_fields(prefix, self)
    _non_negative(prefix, self, "trajectory_every")
    if self.wandb and not self.wandb.replace("-", "").replace("_", "").replace(".", "").isalnum():
      raise ConfigError(f"{prefix}.wandb", self.wandb, "a W&B project name (letters, digits, '-', '_', '.')")
    return self


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """The whole main job (``experiments/train.py``)."""

  seed: int = 0
  model: ModelConfig = ModelConfig()
  rollout: RolloutConfig = RolloutConfig()
  credit: CreditConfig = CreditConfig()
  likelihood: LikelihoodConfig = LikelihoodConfig()
  rl: RLConfig = RLConfig()
  sft: SFTConfig = SFTConfig()
  task: TaskConfig = TaskConfig()
  data: DataConfig = DataConfig()
  eval: EvalConfig = EvalConfig()
  checkpoint: CheckpointConfig = CheckpointConfig()
  parallel: ParallelConfig = ParallelConfig()
  log: LogConfig = LogConfig()

  def validate(self) -> "TrainConfig":
    if not isinstance(self.seed, int) or isinstance(self.seed, bool) or not 0 <= self.seed <= INT_MAX:
      raise ConfigError("seed", self.seed, f"an integer in [0, {INT_MAX}]")
    for f in dataclasses.fields(self):
      if f.name != "seed":
        getattr(self, f.name).validate(f.name)
    lik = self.likelihood
    if lik.trajectory_steps not in (0, self.rollout.steps):
      raise ConfigError("likelihood.trajectory_steps", lik.trajectory_steps,
                        f"0 or rollout.steps={self.rollout.steps}")
    if self.rl.likelihood == "stratified" and lik.stratified.num_strata > self.rollout.gen_length:
      raise ConfigError("likelihood.stratified.num_strata", lik.stratified.num_strata,
                        f"<= rollout.gen_length={self.rollout.gen_length} (one token per stratum at most)")
    if self.rl.eval_every and not self.task.num_val_examples:
      raise ConfigError("rl.eval_every", self.rl.eval_every, "0 unless task.num_val_examples > 0 (periodic "
                        "evaluation runs on the validation split, never on the test set)")
    if lik.trajectory.groups > self.rollout.steps:
      raise ConfigError("likelihood.trajectory.groups", lik.trajectory.groups,
                        f"<= rollout.steps={self.rollout.steps} (runs of at least one step)")
    if self.rl.likelihood == "rldf" and lik.rldf.states > self.rollout.steps:
      raise ConfigError("likelihood.rldf.states", lik.rldf.states,
                        f"<= rollout.steps={self.rollout.steps} (distinct states to rebuild)")
    # Batches whose completion tokens alone overflow int32 indexing cannot be used; refused here
    # rather than after SFT, when the first RL batch is built.
    eval_length = max(self.eval.lengths) if self.eval.protocol == "d1" else self.rollout.gen_length
    for field, rows, length, name in (
        ("rl.prompts_per_step * rl.group_size", self.rl.prompts_per_step * self.rl.group_size,
         self.rollout.gen_length, "rollout.gen_length"),
        ("sft.batch_size", self.sft.batch_size, self.rollout.gen_length, "rollout.gen_length"),
        ("eval.batch_size", self.eval.batch_size, eval_length,
         "eval.gen_lengths" if self.eval.protocol == "d1" else "rollout.gen_length")):
      if rows * length > INT_MAX:
        raise ConfigError(field, rows, f"a batch of at most {INT_MAX // length} rows "
                          f"(rows x {name}={length} tokens must fit int32)")
    return self

  def to_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)
