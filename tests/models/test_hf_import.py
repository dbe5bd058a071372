"""HF checkpoint import: logits parity with transformers (Llama for LLaDA, Qwen2 for Dream, both run
bidirectionally) on tiny random checkpoints written in the HF layout, and the error messages."""
import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from daca_jax.diffusion import rollout
from daca_jax.errors import ConfigError, DataError
from daca_jax.models import make_logits_fn
from daca_jax.models.hf_import import DREAM_FIELDS, LLADA_FIELDS, config_from_hf, load_hf_checkpoint
from daca_jax.models.kv_cache import make_kv_fns
from daca_jax.config.rollout import RolloutConfig
from tests.hf_fixtures import random_llama_weights, to_llada_names, write_safetensors_checkpoint

safetensors_numpy = pytest.importorskip("safetensors.numpy")

D, F, H, KV, V, LAYERS = 32, 64, 4, 2, 48, 2
# Every field of LLaDA-8B-Instruct's config.json, at tiny sizes.
LLADA_CFG = {"model_type": "llada", "architectures": ["LLaDAModelLM"], "d_model": D, "n_layers": LAYERS,
             "n_heads": H, "n_kv_heads": KV, "mlp_hidden_size": F, "mlp_ratio": 4, "vocab_size": V,
             "embedding_size": V, "rope_theta": 500000.0, "rms_norm_eps": 1e-5, "weight_tying": False,
             "include_bias": False, "include_qkv_bias": False, "bias_for_layer_norm": False,
             "block_type": "llama", "block_group_size": 1, "activation_type": "silu",
             "layer_norm_type": "rms", "layer_norm_with_affine": True, "rope": True,
             "rope_full_precision": True, "alibi": False, "alibi_bias_max": 8.0,
             "attention_layer_norm": False, "attention_layer_norm_with_affine": True,
             "input_emb_norm": False, "scale_logits": False, "multi_query_attention": None,
             "attention_dropout": 0.0, "residual_dropout": 0.0, "embedding_dropout": 0.0,
             "flash_attention": False, "init_device": "meta", "init_fn": "mitchell", "init_std": 0.02,
             "init_cutoff_factor": None, "max_sequence_length": 4096, "precision": "amp_bf16",
             "use_cache": False, "mask_token_id": 47, "eos_token_id": 46, "pad_token_id": 46,
             "torch_dtype": "bfloat16", "transformers_version": "4.46.3"}
# Every field of Dream-v0-Instruct-7B's config.json, at tiny sizes.
DREAM_CFG = {"model_type": "Dream", "architectures": ["DreamModel"], "hidden_size": D,
             "num_hidden_layers": LAYERS, "num_attention_heads": H, "num_key_value_heads": KV,
             "intermediate_size": F, "vocab_size": V, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
             "tie_word_embeddings": False, "hidden_act": "silu", "mask_token_id": 47, "pad_token_id": 45,
             "bos_token_id": 45, "eos_token_id": 45, "attention_dropout": 0.0, "initializer_range": 0.02,
             "max_position_embeddings": 131072, "max_window_layers": 28, "rope_scaling": None,
             "sliding_window": 131072, "use_sliding_window": False, "use_cache": False,
             "torch_dtype": "bfloat16", "transformers_version": "4.46.2"}


def _random_weights(seed, layers=LAYERS):
  """Random weights in Llama (torch) names and layout: {name: [out, in] float32}."""
  return random_llama_weights(seed, layers=layers, d_model=D, n_heads=H, n_kv_heads=KV, mlp=F, vocab=V)


def _llada_names(w, layers=LAYERS, qkv_bias=False):
  """The same weights under LLaDA's (OLMo) names; LLaDA has no biases (unless include_qkv_bias)."""
  return to_llada_names(w, layers, qkv_bias)


def _write_ckpt(path, config, tensors, shards=2):
  """config.json + safetensors shards + model.safetensors.index.json, as HF writes them (each tensor in
  its own dtype)."""
  return write_safetensors_checkpoint(path, config, tensors, shards=shards, dtype=None)


def _torch_logits(model_cls, config_cls, w, tokens, attention_bias, key_mask=None, layers=LAYERS):
  """transformers' implementation with the same weights, run bidirectionally (float32, eager).

  ``key_mask`` (bool [B, T]): hide those keys from every other query and number positions over the
  kept ones (Dream's diffusion_generate; a hidden position still sees itself, so that its own row
  stays finite); None: every token attends to every token."""
  torch = pytest.importorskip("torch")
  cfg = config_cls(hidden_size=D, intermediate_size=F, num_hidden_layers=layers, num_attention_heads=H,
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
  b, n = t.shape
  kwargs = {}
  if key_mask is None:  # an explicit all-visible additive 4D mask [B, 1, T, T] of zeros
    mask = torch.zeros((b, 1, n, n), dtype=torch.float32)
  else:
    km = np.asarray(key_mask, bool)
    visible = km[:, None, :] | np.eye(n, dtype=bool)[None]
    mask = torch.from_numpy(np.where(visible, 0.0, -1e30).astype(np.float32))[:, None]
    kwargs["position_ids"] = torch.from_numpy(np.maximum(np.cumsum(km, -1) - 1, 0).astype(np.int64))
  with torch.no_grad():
    return model(input_ids=t, attention_mask=mask, **kwargs).logits.numpy()


def _tokens():
  """Random tokens below Dream's pad id (45), so no row starts with padding."""
  return jnp.asarray(np.random.default_rng(7).integers(0, 44, (2, 9)), jnp.int32)


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
  with pytest.raises(DataError, match=r"nowhere: not a directory"):
    load_hf_checkpoint(tmp_path / "nowhere")
  (tmp_path / "empty").mkdir()
  with pytest.raises(DataError, match=r"empty: no config\.json"):
    load_hf_checkpoint(tmp_path / "empty")


# --- config.json fields: refuse what is not implemented, follow the reference defaults ----------------


@pytest.mark.parametrize("field,value", [
    ("input_emb_norm", True), ("scale_logits", True), ("bias_for_layer_norm", True),
    ("include_bias", True), ("attention_layer_norm", True), ("layer_norm_type", "default"),
    ("layer_norm_type", "gemma_rms"), ("layer_norm_with_affine", False), ("activation_type", "swiglu"),
    ("activation_type", "gelu"), ("block_type", "sequential"), ("block_group_size", 2), ("rope", False),
    ("alibi", True), ("rope_full_precision", False)])
def test_llada_values_not_implemented_are_refused(field, value):
  with pytest.raises(ConfigError, match=rf"config\.json:{field}="):
    config_from_hf(dict(LLADA_CFG, **{field: value}))


@pytest.mark.parametrize("field", ["layer_norm_type", "rope", "activation_type", "block_type"])
def test_llada_absent_fields_take_the_reference_default(field):
  """An absent key is the reference's default (LayerNorm, no RoPE, swiglu, sequential block): refused."""
  cfg = {k: v for k, v in LLADA_CFG.items() if k != field}
  with pytest.raises(ConfigError, match=rf"config\.json:{field}=.*absent: the reference default"):
    config_from_hf(cfg)


def test_llada_defaults_when_fields_are_absent():
  base = {k: v for k, v in LLADA_CFG.items() if k not in ("mlp_hidden_size", "weight_tying", "n_kv_heads",
                                                             "embedding_size", "rope_theta")}
  cfg = config_from_hf(dict(base, mlp_ratio=3))
  # mlp_ratio * d_model, weight tying on, n_kv_heads = n_heads, embedding_size 50304, theta 1e4
  assert (cfg.mlp_dim, cfg.tie_embeddings, cfg.kv_heads, cfg.vocab_size, cfg.rope_theta) == (
      3 * D, True, H, 50304, 10000.0)
  assert config_from_hf(dict(base, mlp_hidden_size=None)).mlp_dim == 4 * D  # the reference's mlp_ratio 4
  assert config_from_hf(dict(LLADA_CFG, n_kv_heads=None, multi_query_attention=True)).kv_heads == 1
  assert config_from_hf(dict(LLADA_CFG, embedding_size=None)).vocab_size == V
  assert config_from_hf(dict(LLADA_CFG, bias_for_layer_norm=None)).qkv_bias is False  # inherits False
  with pytest.raises(ConfigError, match=r"config\.json:(include_bias|bias_for_layer_norm)=True"):
    config_from_hf(dict(LLADA_CFG, bias_for_layer_norm=None, include_bias=True))  # refused either way
  with pytest.raises(ConfigError, match=r"config\.json:n_kv_heads"):
    config_from_hf(dict(LLADA_CFG, multi_query_attention=True))  # n_kv_heads=2 contradicts MQA
  with pytest.raises(ConfigError, match=r"config\.json:mlp_ratio"):
    config_from_hf(dict(base, mlp_ratio=0))
  with pytest.raises(ConfigError, match=r"config\.json:mask_token_id"):
    config_from_hf({k: v for k, v in LLADA_CFG.items() if k != "mask_token_id"})


def test_dream_fields_and_defaults():
  for field, value in (("rope_scaling", {"rope_type": "linear", "factor": 2.0}), ("use_sliding_window", True),
                       ("hidden_act", "gelu"), ("head_dim", 16)):
    with pytest.raises(ConfigError, match=rf"config\.json:{field}="):
      config_from_hf(dict(DREAM_CFG, **{field: value}))
  bare = {k: v for k, v in DREAM_CFG.items() if k not in ("num_key_value_heads", "mask_token_id", "pad_token_id",
                                                             "rope_theta", "rms_norm_eps")}
  cfg = config_from_hf(dict(bare, num_attention_heads=32, hidden_size=64, vocab_size=152064))
  # DreamConfig's defaults: 32 kv heads, mask 151666, pad 151643, theta 1e4, eps 1e-6
  assert (cfg.kv_heads, cfg.mask_token_id, cfg.left_pad_id, cfg.rope_theta, cfg.norm_eps) == (
      32, 151666, 151643, 10000.0, 1e-6)
  assert config_from_hf(dict(DREAM_CFG, num_key_value_heads=None)).kv_heads == H
  assert config_from_hf(DREAM_CFG).left_pad_id == 45 and config_from_hf(LLADA_CFG).left_pad_id == -1


def test_every_real_config_field_is_accounted_for():
  """The tiny configs carry every key of the released config.json files: none is unknown."""
  from daca_jax.models.hf_import import unknown_fields

  assert unknown_fields(LLADA_CFG) == () and unknown_fields(DREAM_CFG) == ()
  assert unknown_fields(dict(LLADA_CFG, yarn=True)) == ("yarn",)
  assert set(LLADA_FIELDS) >= {"input_emb_norm", "bias_for_layer_norm", "scale_logits", "mlp_ratio"}
  assert set(DREAM_FIELDS) >= {"rope_scaling", "use_sliding_window", "pad_token_id"}


def test_llada_qkv_bias_matches_transformers_qwen2_unshifted(tmp_path):
  """include_qkv_bias: LLaDA's q/k/v biases (Qwen2's layout, without Dream's shift)."""
  transformers = pytest.importorskip("transformers")
  w = _random_weights(3)
  cfg = dict(LLADA_CFG, include_qkv_bias=True, rope_theta=1000000.0, rms_norm_eps=1e-6)
  c, gd, params, report = load_hf_checkpoint(_write_ckpt(tmp_path / "b", cfg, _llada_names(w, qkv_bias=True)))
  assert c.qkv_bias and report.unexpected == ()
  x = _tokens()
  ref = _torch_logits(transformers.Qwen2ForCausalLM, transformers.Qwen2Config, w, x, True)
  np.testing.assert_allclose(np.asarray(make_logits_fn(gd)(params, x)), ref, atol=1e-4, rtol=1e-4)


def _tokenizer_json(path, n_ids):
  """A WordLevel tokenizer.json with ids 0..n_ids-1."""
  tokenizers = pytest.importorskip("tokenizers")
  vocab = {f"w{i}": i for i in range(n_ids)}
  tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="w0")).save(str(path / "tokenizer.json"))


def test_vocab_limit_from_tokenizer_json(tmp_path):
  w = _random_weights(0)
  ckpt = _write_ckpt(tmp_path / "d", dict(DREAM_CFG, mask_token_id=40, pad_token_id=39), w)
  cfg, *_, report = load_hf_checkpoint(ckpt)
  assert cfg.vocab_limit == 0 and report.vocab_limit == (0, "config.json")
  _tokenizer_json(ckpt, 48)  # as large as the table: no limit
  assert load_hf_checkpoint(ckpt)[0].vocab_limit == 0
  _tokenizer_json(ckpt, 42)  # the table is padded past the tokenizer (Dream: 152064 > 151667)
  cfg, gd, params, report = load_hf_checkpoint(ckpt)
  assert cfg.vocab_limit == 42 and report.vocab_limit == (42, "tokenizer.json")
  assert load_hf_checkpoint(ckpt, vocab_limit=0)[0].vocab_limit == 0
  # the sampler never proposes an id the tokenizer cannot decode, nor the mask
  rc = RolloutConfig(gen_length=16, block_length=16, steps=8, temperature=1.0)
  traj = rollout(make_logits_fn(gd), params, jnp.asarray(_prompts(b=8)), jax.random.PRNGKey(1), rc,
                 mask_id=40, eos_id=46)
  comp = np.asarray(traj.completion)
  assert comp.max() < 42 and (comp != 40).all() and bool(traj.finished)


# --- Dream's shifted logits in the K/V cache, padded rows, cached == uncached rollouts -----------------


MASK, PAD = 47, 45


def _load(tmp_path, family, layers=LAYERS, seed=0):
  w = _random_weights(seed, layers)
  if family == "llada":
    ckpt = _write_ckpt(tmp_path / f"llada{layers}", dict(LLADA_CFG, n_layers=layers), _llada_names(w, layers))
  else:
    ckpt = _write_ckpt(tmp_path / f"dream{layers}", dict(DREAM_CFG, num_hidden_layers=layers), w)
  cfg, gd, params, _ = load_hf_checkpoint(ckpt)
  return cfg, gd, params, w


def _prompts(b=3, p=5, seed=4):
  return np.random.default_rng(seed).integers(0, 44, (b, p)).astype(np.int32)


@pytest.mark.parametrize("family", ["llada", "dream"])
def test_fresh_cache_equals_full_pass(tmp_path, family):
  """prefill and extend (prefix and dual, a window at `start`) equal the full pass on a checkpoint:
  Dream's shifted first query reads the state at start - 1."""
  _, gd, params, _ = _load(tmp_path, family)
  kv, full_fn = make_kv_fns(gd), make_logits_fn(gd)
  x = jnp.asarray(np.concatenate([_prompts(), np.full((3, 9), MASK, np.int32)], 1))
  x = x.at[:, 6].set(3)  # a committed token inside the completion
  full = np.asarray(full_fn(params, x))
  pre, _, cache = kv.prefill(params, x)
  np.testing.assert_allclose(np.asarray(pre), full, atol=1e-5, rtol=1e-5)
  for start, width in ((5, 4), (9, 5), (0, 3)):
    dual, _ = kv.extend(params, x, start, width, cache, "dual")
    np.testing.assert_allclose(np.asarray(dual), full[:, start:start + width], atol=1e-5, rtol=1e-5)
    prefix, _ = kv.extend(params, x, start, x.shape[1] - start, cache.prefix(start), "prefix")
    np.testing.assert_allclose(np.asarray(prefix), full[:, start:], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family", ["llada", "dream"])
@pytest.mark.parametrize("mode", ["prefix", "dual"])
def test_cached_rollout_equals_uncached_token_for_token(tmp_path, family, mode):
  """One layer: a block's K/V outside the queries depend only on their (unchanged) tokens, so the cache
  is exact and the greedy cached rollout must equal the uncached one, several steps per block."""
  cfg, gd, params, _ = _load(tmp_path, family, layers=1, seed=5)
  fn = make_logits_fn(gd)
  rc = RolloutConfig(gen_length=12, block_length=4, steps=6, temperature=0.0)
  prompts = jnp.asarray(_prompts())
  run = lambda c: jax.jit(lambda p, x: rollout(fn, p, x, jax.random.PRNGKey(0), c, mask_id=MASK,
                                                 eos_id=46, record_step_conf=True))(params, prompts)
  plain = run(rc)
  cached = run(dataclasses.replace(rc, kv_cache=mode))
  np.testing.assert_array_equal(np.asarray(cached.tokens), np.asarray(plain.tokens))
  np.testing.assert_array_equal(np.asarray(cached.commit_step), np.asarray(plain.commit_step))
  assert bool(cached.finished) and int(cached.model_calls) == rc.steps


def _dream_padded(tmp_path, layers=LAYERS):
  cfg, gd, params, w = _load(tmp_path, "dream", layers)
  x = _prompts(b=2, p=6, seed=9)
  padded = np.concatenate([np.full((2, 3), PAD, np.int32), x], 1)
  padded[1, :3] = [PAD, 7, 8]  # row 1: one pad, then two real tokens
  return cfg, gd, params, w, x, padded


def test_dream_padded_row_equals_unpadded_logits(tmp_path):
  transformers = pytest.importorskip("transformers")
  _, gd, params, w, x, padded = _dream_padded(tmp_path)
  fn = make_logits_fn(gd)
  ours = np.asarray(fn(params, jnp.asarray(padded)))
  alone = np.asarray(fn(params, jnp.asarray(x[:1])))
  # row 0 is x[0] behind three pads: every position after the first real token matches
  np.testing.assert_allclose(ours[0, 4:], alone[0, 1:], atol=1e-5, rtol=1e-5)
  # and the padded batch equals transformers' Qwen2 with Dream's mask and renumbered positions
  key_mask = np.cumsum(padded != PAD, -1) > 0
  ref = _torch_logits(transformers.Qwen2ForCausalLM, transformers.Qwen2Config, w, padded, True, key_mask)
  shifted = np.concatenate([ref[:, :1], ref[:, :-1]], axis=1)
  real = np.concatenate([np.zeros((2, 1), bool), key_mask[:, :-1]], 1)  # positions read from a real state
  np.testing.assert_allclose(ours[real], shifted[real], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("mode", ["none", "dual"])
def test_dream_padded_row_equals_unpadded_greedy_rollout(tmp_path, mode):
  _, gd, params, _, x, padded = _dream_padded(tmp_path)
  fn = make_logits_fn(gd)
  rc = RolloutConfig(gen_length=8, block_length=4, steps=4, temperature=0.0, kv_cache=mode)
  go = lambda prompts: np.asarray(rollout(fn, params, jnp.asarray(prompts), jax.random.PRNGKey(0), rc,
                                          mask_id=MASK, eos_id=46).completion)
  np.testing.assert_array_equal(go(padded)[0], go(x[:1])[0])


def test_llada_attends_to_its_pads(tmp_path):
  """LLaDA's generate passes no attention mask: a padded LLaDA row equals transformers' Llama over
  the padded tokens with everything visible (and so differs from the unpadded row)."""
  transformers = pytest.importorskip("transformers")
  _, gd, params, _ = _load(tmp_path, "llada")
  w = _random_weights(0)
  x = _prompts(b=2, p=6, seed=9)
  padded = np.concatenate([np.full((2, 3), 46, np.int32), x], 1)
  ours = np.asarray(make_logits_fn(gd)(params, jnp.asarray(padded)))
  ref = _torch_logits(transformers.LlamaForCausalLM, transformers.LlamaConfig, w, padded, False)
  np.testing.assert_allclose(ours, ref, atol=1e-4, rtol=1e-4)
  alone = np.asarray(make_logits_fn(gd)(params, jnp.asarray(x)))
  assert np.abs(ours[:, 3:] - alone).max() > 1e-3


@pytest.mark.parametrize("family", ["llada", "dream"])
def test_sampled_rollout_on_a_checkpoint_equals_the_reference_loop_over_full_passes(tmp_path, monkeypatch, family):
  """The sampler's chunked-head path (hidden states projected a few completion positions at a time, Gumbel
  noise drawn per window) on a real checkpoint, Dream's shift and left-padded rows included, commits
  exactly the tokens of LLaDA's loop written in Python over the model's full forward pass, at
  temperature 0.9 and at every step."""
  from daca_jax.diffusion import decode
  from tests.diffusion.test_rollout import reference_rollout

  cfg, gd, params, _ = _load(tmp_path, family)
  fn = make_logits_fn(gd)
  prompts = _prompts(b=3, p=6, seed=2)
  if family == "dream":
    prompts[1, :2] = PAD  # a left-padded row: its pads are masked keys, its positions renumbered
  rc = RolloutConfig(gen_length=12, block_length=6, steps=6, temperature=0.9)
  monkeypatch.setattr(decode, "SAMPLE_CHUNK_BYTES", 4 * 3 * cfg.vocab_size * 2)  # chunks of 2 positions
  assert decode.chunk_size(rc.block_length, 3, cfg.vocab_size) == 2
  key = jax.random.PRNGKey(3)
  traj = jax.jit(lambda p, x, k: rollout(fn, p, x, k, rc, mask_id=MASK, eos_id=46, record_step_conf=True,
                                         vocab_limit=cfg.vocab_limit))(params, jnp.asarray(prompts), key)
  full = lambda p, x: np.asarray(fn.logits(p, jnp.asarray(x, jnp.int32)))
  ref_x, ref_commit, ref_conf = reference_rollout(params, prompts, key, rc, logits_of=full, mask=MASK,
                                                  vocab_limit=cfg.vocab_limit)
  np.testing.assert_array_equal(np.asarray(traj.tokens), ref_x)
  np.testing.assert_array_equal(np.asarray(traj.commit_step), ref_commit)
  np.testing.assert_allclose(np.asarray(traj.step_conf), ref_conf, rtol=1e-4, atol=1e-5)
  assert len(set(ref_x[:, 6:].ravel().tolist())) > 3  # sampled, not one token repeated


def test_the_released_shapes_have_one_source():
  """The release-layout config.json the library writes for LLaDA-8B imports as ``llada_8b_config()``:
  the architecture is stated once (daca_jax.config.model), the random checkpoint's file agrees with it."""
  import dataclasses

  from daca_jax.models.random_checkpoint import LLADA_8B_CONFIG
  from daca_jax.config.model import llada_8b_config

  released = config_from_hf(LLADA_8B_CONFIG)
  ours = llada_8b_config()
  differ = {f.name: (getattr(released, f.name), getattr(ours, f.name)) for f in dataclasses.fields(ours)
            if f.name != "dtype" and getattr(released, f.name) != getattr(ours, f.name)}
  assert not differ, differ  # dtype: the compute dtype is the run's choice, not the checkpoint's
