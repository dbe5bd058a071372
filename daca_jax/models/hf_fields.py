"""The ``config.json`` fields of the two Hugging Face families :mod:`daca_jax.models.hf_import` reads.

Every field of LLaDA's ``configuration_llada.ModelConfig`` and Dream's ``configuration_dream.DreamConfig``
with the reference default (taken when the key is absent), the values this model implements, and what the
reference does with it (the error message and the docs). :mod:`daca_jax.models.hf_config` reads them.
"""
from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class _Field:
  """One ``config.json`` field of a family's reference config class.

  default: the reference's default, used when the key is absent (``configuration_llada.ModelConfig`` /
    ``configuration_dream.DreamConfig``).
  allowed: the only values this model implements (None: any value, mapped or irrelevant).
  note: what the reference does with it (the error message and the docs).
  """

  default: Any
  allowed: tuple[Any, ...] | None = None
  note: str = ""


# Every field of LLaDA's ModelConfig (GSAI-ML/LLaDA-8B-*, configuration_llada.py) and how its
# modeling_llada.py uses it. Absent keys take the reference's dataclass default.
LLADA_FIELDS: dict[str, _Field] = {
    "d_model": _Field(768), "n_heads": _Field(12), "n_layers": _Field(12),
    "n_kv_heads": _Field(None, note="None: 1 with multi_query_attention, else n_heads"),
    "multi_query_attention": _Field(None),
    "mlp_ratio": _Field(4, note="MLP width mlp_ratio * d_model when mlp_hidden_size is null"),
    "mlp_hidden_size": _Field(None),
    "activation_type": _Field("swiglu", ("silu",), "the Llama block computes act(ff_proj x) * up_proj x; "
                              "only SiLU gives SwiGLU (the reference default swiglu halves ff_proj)"),
    "block_type": _Field("sequential", ("llama",), "only LLaDALlamaBlock (q/k/v_proj, ff_proj, up_proj)"),
    "block_group_size": _Field(1, (1,), "grouped blocks are stored under other tensor names"),
    "alibi": _Field(False, (False,), "the reference asserts it off for masked diffusion"),
    "alibi_bias_max": _Field(8.0, note="ALiBi only"),
    "rope": _Field(False, (True,), "the reference asserts RoPE for masked diffusion"),
    "rope_full_precision": _Field(True, (True,), "RoPE is computed in float32 here"),
    "rope_theta": _Field(10000.0),
    "flash_attention": _Field(False, note="kernel choice only"),
    "attention_dropout": _Field(0.1, note="dropout: training only, never applied here"),
    "residual_dropout": _Field(0.1, note="dropout: training only, never applied here"),
    "embedding_dropout": _Field(0.1, note="dropout: training only, never applied here"),
    "attention_layer_norm": _Field(False, (False,), "q/k norms are not implemented"),
    "attention_layer_norm_with_affine": _Field(True, note="q/k norms only"),
    "input_emb_norm": _Field(False, (False,), "scaling embeddings by sqrt(d_model) is not implemented"),
    "layer_norm_type": _Field("default", ("rms",), "only RMSNorm (the reference default is LayerNorm)"),
    "layer_norm_with_affine": _Field(True, (True,), "norms without a learned scale are not implemented"),
    "rms_norm_eps": _Field(1e-5),
    "max_sequence_length": _Field(1024, note="context length (read by the evaluation harness)"),
    "include_qkv_bias": _Field(False),
    "include_bias": _Field(False, (False,), "biases outside q/k/v are not implemented"),
    "bias_for_layer_norm": _Field(None, (None, False), "norm biases are not implemented (null inherits "
                                  "include_bias)"),
    "scale_logits": _Field(False, (False,), "scaling logits by 1/sqrt(d_model) is not implemented"),
    "vocab_size": _Field(50257, note="the tokenizer's ids; the table has embedding_size rows"),
    "embedding_size": _Field(50304, note="null: vocab_size"),
    "weight_tying": _Field(True),
    "eos_token_id": _Field(50256), "pad_token_id": _Field(50256, note="attended: LLaDA's generate "
                                                          "passes no attention mask"),
    "mask_token_id": _Field(50256, note="required here (the reference default is GPT-2's EOS)"),
    "init_device": _Field(None), "init_fn": _Field("normal"), "init_std": _Field(0.02),
    "init_cutoff_factor": _Field(None), "precision": _Field(None), "use_cache": _Field(False),
}
# DreamConfig (Dream-org/Dream-v0-*-7B, configuration_dream.py) and modeling_dream.py.
DREAM_FIELDS: dict[str, _Field] = {
    "vocab_size": _Field(151936, note="embedding rows (the tokenizer has fewer ids)"),
    "hidden_size": _Field(4096), "intermediate_size": _Field(22016), "num_hidden_layers": _Field(32),
    "num_attention_heads": _Field(32),
    "num_key_value_heads": _Field(32, note="null: num_attention_heads"),
    "head_dim": _Field(None, note="must be hidden_size / num_attention_heads"),
    "hidden_act": _Field("silu", ("silu",), "only SiLU-gated MLPs are implemented"),
    "max_position_embeddings": _Field(32768, note="context length (read by the evaluation harness)"),
    "initializer_range": _Field(0.02), "rms_norm_eps": _Field(1e-6), "use_cache": _Field(False),
    "tie_word_embeddings": _Field(False), "rope_theta": _Field(10000.0),
    "rope_scaling": _Field(None, (None,), "only plain RoPE is implemented"),
    "use_sliding_window": _Field(False, (False,), "sliding-window attention is not implemented"),
    "sliding_window": _Field(4096, note="sliding window only"),
    "max_window_layers": _Field(28, note="sliding window only"),
    "attention_dropout": _Field(0.0, note="dropout: training only, never applied here"),
    "mask_token_id": _Field(151666),
    "pad_token_id": _Field(151643, note="left padding masked out of attention (diffusion_generate)"),
    "bos_token_id": _Field(None), "eos_token_id": _Field(None),
}
# Keys of config.json that describe the file rather than the model (never reported as unknown).
METADATA_FIELDS = ("model_type", "architectures", "auto_map", "transformers_version", "torch_dtype",
                   "_name_or_path")
FAMILY_FIELDS = {"llada": LLADA_FIELDS, "dream": DREAM_FIELDS}
