"""HF checkpoint import: logits parity with transformers (Llama for LLaDA, Qwen2 for Dream, both run
bidirectionally) on tiny random checkpoints written in the HF layout, and the error messages."""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from daca_jax.errors import ConfigError, DataError
from daca_jax.models import make_logits_fn
from daca_jax.models.hf_import import load_hf_checkpoint

safetensors_numpy = pytest.importorskip("safetensors.numpy")

D, F, H, KV, V, LAYERS = 32, 64, 4, 2, 48, 2
LLADA_CFG = {"model_type": "llada", "architectures": ["LLaDAModelLM"], "d_model": D, "n_layers": LAYERS,
             "n_heads": H, "n_kv_heads": KV, "mlp_hidden_size": F, "vocab_size": V, "embedding_size": V,
             "rope_theta": 500000.0, "rms_norm_eps": 1e-5, "weight_tying": False, "include_bias": False,
             "block_type": "llama", "activation_type": "silu", "layer_norm_type": "rms", "rope": True,
             "mask_token_id": 47, "eos_token_id": 46}
DREAM_CFG = {"model_type": "Dream", "architectures": ["DreamModel"], "hidden_size": D,
             "num_hidden_layers": LAYERS, "num_attention_heads": H, "num_key_value_heads": KV,
             "intermediate_size": F, "vocab_size": V, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
             "tie_word_embeddings": False, "hidden_act": "silu", "mask_token_id": 47}


def _random_weights(seed):
  """Random weights in Llama (torch) names and layout: {name: [out, in] float32}."""
  rng = np.random.default_rng(seed)
  n = lambda *s: rng.normal(0, 0.2, s).astype(np.float32)
  hd = D // H
  w = {"model.embed_tokens.weight": n(V, D), "model.norm.weight": 1 + n(D), "lm_head.weight": n(V, D)}
  for i in range(LAYERS):
    p = f"model.layers.{i}."
    w.update({p + "self_attn.q_proj.weight": n(H * hd, D), p + "self_attn.k_proj.weight": n(KV * hd, D),
              p + "self_attn.v_proj.weight": n(KV * hd, D), p + "self_attn.o_proj.weight": n(D, H * hd),
              p + "self_attn.q_proj.bias": n(H * hd), p + "self_attn.k_proj.bias": n(KV * hd),
              p + "self_attn.v_proj.bias": n(KV * hd),
              p + "mlp.gate_proj.weight": n(F, D), p + "mlp.up_proj.weight": n(F, D),
              p + "mlp.down_proj.weight": n(D, F), p + "input_layernorm.weight": 1 + n(D),
              p + "post_attention_layernorm.weight": 1 + n(D)})
  return w


def _llada_names(w):
  """The same weights under LLaDA's (OLMo) names; LLaDA has no biases."""
  out = {"model.transformer.wte.weight": w["model.embed_tokens.weight"],
         "model.transformer.ln_f.weight": w["model.norm.weight"],
         "model.transformer.ff_out.weight": w["lm_head.weight"]}
  ren = {"self_attn.q_proj.weight": "q_proj.weight", "self_attn.k_proj.weight": "k_proj.weight",
         "self_attn.v_proj.weight": "v_proj.weight", "self_attn.o_proj.weight": "attn_out.weight",
         "mlp.gate_proj.weight": "ff_proj.weight", "mlp.up_proj.weight": "up_proj.weight",
         "mlp.down_proj.weight": "ff_out.weight", "input_layernorm.weight": "attn_norm.weight",
         "post_attention_layernorm.weight": "ff_norm.weight"}
  for i in range(LAYERS):
    for a, b in ren.items():
      out[f"model.transformer.blocks.{i}.{b}"] = w[f"model.layers.{i}.{a}"]
  return out


def _write_ckpt(path, config, tensors, shards=2):
  """config.json + safetensors shards + model.safetensors.index.json, as HF writes them."""
  path.mkdir(parents=True, exist_ok=True)
  (path / "config.json").write_text(json.dumps(config))
  names = sorted(tensors)
  weight_map = {}
  for s in range(shards):
    fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
    part = {k: tensors[k] for k in names[s::shards]}
    safetensors_numpy.save_file(part, str(path / fname))
    weight_map.update({k: fname for k in part})
  (path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
  return path


def _torch_logits(model_cls, config_cls, w, tokens, attention_bias):
  """transformers' implementation with the same weights, run bidirectionally (float32, eager)."""
  torch = pytest.importorskip("torch")
  cfg = config_cls(hidden_size=D, intermediate_size=F, num_hidden_layers=LAYERS, num_attention_heads=H,
                   num_key_value_heads=KV, vocab_size=V, rms_norm_eps=LLADA_CFG["rms_norm_eps"]
                   if not attention_bias else DREAM_CFG["rms_norm_eps"],
                   rope_theta=500000.0 if not attention_bias else 1000000.0, tie_word_embeddings=False,
                   hidden_act="silu", **({"attention_bias": False} if not attention_bias else {}))
  cfg._attn_implementation = "eager"
  cfg.is_causal = False  # masking_utils builds a bidirectional mask
  model = model_cls(cfg).eval()
  for m in model.modules():
    if hasattr(m, "is_causal"):
      m.is_causal = False  # and no attention kernel falls back to its causal flag
  state = {k: torch.from_numpy(v) for k, v in w.items()
           if attention_bias or not k.endswith(".bias")}
  missing, unexpected = model.load_state_dict(state, strict=False)
  assert not unexpected and all("rotary" in k for k in missing), (missing, unexpected)
  t = torch.from_numpy(np.asarray(tokens, np.int64))
  # An explicit all-visible additive 4D mask [B, 1, T, T] of zeros.
  mask = torch.zeros((t.shape[0], 1, t.shape[1], t.shape[1]), dtype=torch.float32)
  with torch.no_grad():
    return model(input_ids=t, attention_mask=mask).logits.numpy()


def _tokens():
  return jnp.asarray(np.random.default_rng(7).integers(0, V, (2, 9)), jnp.int32)


def test_llada_checkpoint_matches_transformers_llama_bidirectional(tmp_path):
  transformers = pytest.importorskip("transformers")
  w = _random_weights(0)
  ckpt = _write_ckpt(tmp_path / "llada", LLADA_CFG, _llada_names(w))
  cfg, gd, params, report = load_hf_checkpoint(ckpt)
  assert (cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.kv_heads, cfg.mlp_dim, cfg.vocab_size) == (
      D, LAYERS, H, KV, F, V)
  assert cfg.rope_theta == 500000.0 and cfg.mask_token_id == 47 and not cfg.qkv_bias
  assert report.family == "llada" and report.unexpected == () and report.loaded == 3 + 9 * LAYERS
  x = _tokens()
  ours = np.asarray(make_logits_fn(gd)(params, x))
  ref = _torch_logits(transformers.LlamaForCausalLM, transformers.LlamaConfig, w, x, False)
  np.testing.assert_allclose(ours, ref, atol=1e-4, rtol=1e-4)
  # The reference really is bidirectional: the first position sees the last token.
  x2 = x.at[:, -1].set((x[:, -1] + 1) % V)
  ref2 = _torch_logits(transformers.LlamaForCausalLM, transformers.LlamaConfig, w, x2, False)
  assert np.abs(ref2[:, 0] - ref[:, 0]).max() > 1e-3


def test_dream_checkpoint_matches_transformers_qwen2_bidirectional_shifted(tmp_path):
  transformers = pytest.importorskip("transformers")
  w = _random_weights(1)
  ckpt = _write_ckpt(tmp_path / "dream", DREAM_CFG, w, shards=3)
  cfg, gd, params, report = load_hf_checkpoint(ckpt)
  assert cfg.qkv_bias and cfg.shift_logits and report.family == "dream" and report.unexpected == ()
  x = _tokens()
  ours = np.asarray(make_logits_fn(gd)(params, x))
  ref = _torch_logits(transformers.Qwen2ForCausalLM, transformers.Qwen2Config, w, x, True)
  # Dream reads token i's logits at position i - 1 (position 0 keeps its own).
  shifted = np.concatenate([ref[:, :1], ref[:, :-1]], axis=1)
  np.testing.assert_allclose(ours, shifted, atol=1e-4, rtol=1e-4)


def test_bf16_checkpoint_and_params(tmp_path):
  w = _llada_names(_random_weights(2))
  ckpt = _write_ckpt(tmp_path / "llada", LLADA_CFG, w, shards=1)
  # The same weights stored in bf16 (as the released LLaDA shards are) load to the rounded values.
  from safetensors.flax import save_file
  bf = tmp_path / "llada_bf16"
  bf.mkdir()
  (bf / "config.json").write_text(json.dumps(LLADA_CFG))
  save_file({k: jnp.asarray(v, jnp.bfloat16) for k, v in w.items()}, str(bf / "model.safetensors"))
  _, _, p_bf, _ = load_hf_checkpoint(bf)
  name = "model.transformer.blocks.0.ff_proj.weight"
  np.testing.assert_array_equal(np.asarray(p_bf["layers"]["gate_proj"]["kernel"][0]),
                                np.asarray(jnp.asarray(w[name], jnp.bfloat16), np.float32).T)
  cfg32, gd32, p32, _ = load_hf_checkpoint(ckpt)
  cfg16, gd16, p16, _ = load_hf_checkpoint(ckpt, param_dtype="bfloat16", dtype="bfloat16")
  assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(p16))
  k32 = np.asarray(p32["layers"]["q_proj"]["kernel"])
  k16 = np.asarray(p16["layers"]["q_proj"]["kernel"]).astype(np.float32)
  np.testing.assert_allclose(k16, k32, rtol=2 ** -8)
  np.testing.assert_array_equal(k32[1], w["model.transformer.blocks.1.q_proj.weight"].T)
  x = _tokens()
  a = np.asarray(make_logits_fn(gd32)(p32, x))
  b = np.asarray(make_logits_fn(gd16)(p16, x))
  assert b.dtype == np.float32 and np.abs(a - b).max() < 0.1 * np.abs(a).max()


def test_missing_tensor_is_named(tmp_path):
  w = _llada_names(_random_weights(0))
  del w["model.transformer.blocks.1.up_proj.weight"]
  ckpt = _write_ckpt(tmp_path / "c", LLADA_CFG, w)
  with pytest.raises(DataError, match=r"'model\.transformer\.blocks\.1\.up_proj\.weight' is missing.*\(64, 32\)"):
    load_hf_checkpoint(ckpt)


def test_wrong_shape_names_tensor_expected_and_found(tmp_path):
  w = _llada_names(_random_weights(0))
  w["model.transformer.blocks.0.attn_out.weight"] = np.zeros((D, D + 2), np.float32)
  ckpt = _write_ckpt(tmp_path / "c", LLADA_CFG, w)
  with pytest.raises(DataError, match=r"'model\.transformer\.blocks\.0\.attn_out\.weight' has shape "
                                      r"\(32, 34\), expected \(32, 32\)"):
    load_hf_checkpoint(ckpt)


def test_unexpected_tensors_reported_and_bad_configs(tmp_path):
  w = _llada_names(_random_weights(0))
  w["model.transformer.blocks.0.extra.weight"] = np.zeros((2,), np.float32)
  _, _, _, report = load_hf_checkpoint(_write_ckpt(tmp_path / "a", LLADA_CFG, w))
  assert report.unexpected == ("model.transformer.blocks.0.extra.weight",)
  with pytest.raises(ConfigError, match=r"include_bias"):
    load_hf_checkpoint(_write_ckpt(tmp_path / "b", dict(LLADA_CFG, include_bias=True), w))
  with pytest.raises(ConfigError, match=r"model_type"):
    load_hf_checkpoint(_write_ckpt(tmp_path / "c", {"model_type": "gpt2"}, w))
  with pytest.raises(DataError, match=r"no config\.json"):
    load_hf_checkpoint(tmp_path / "nowhere")
