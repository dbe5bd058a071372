"""Export of a trained policy in its source checkpoint's layout (daca_jax.run.export,
daca_jax.models.hf_export): transformers loads the export (Llama for LLaDA's names, Qwen2 for Dream,
run bidirectionally) and gives the trained policy's logits, for full fine-tuning and LoRA; peft loads
the adapter onto the source model; the files, dtypes, shards and refusals.

Workdirs here are made the way a run from ``model.init_checkpoint`` leaves them (config.json, the
source's fingerprint record, orbax checkpoints under ``rl/``), with "trained" parameters drawn at
random, so that every tensor differs from the source's.
"""
import dataclasses
import json
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from daca_jax.errors import ConfigError, DataError
from daca_jax.io_utils import atomic_write_json
from daca_jax.models import lora, make_logits_fn
from daca_jax.models.hf_fingerprint import record_source
from daca_jax.models.hf_import import load_hf_checkpoint
from daca_jax.run.checkpoint import Checkpointer
from daca_jax.run.export import PROVENANCE_FILE, export_workdir, parse_shard_size
from daca_jax.run.eval_models import model_from_workdir
from daca_jax.config.train import TrainConfig
from tests.models.test_hf_import import (DREAM_CFG, LAYERS, LLADA_CFG, V, _llada_names, _random_weights,
                                         _write_ckpt)

pytest.importorskip("safetensors.numpy")  # the [hf] extra
pytest.importorskip("tokenizers")
ROOT = pathlib.Path(__file__).resolve().parents[2]
# Side files of a released checkpoint (the tokenizer's roles name ids of the WordLevel vocabulary below;
# the mask is config.json's mask_token_id); the remote code fails loudly if anything ever imports it.
SIDE_FILES = {"tokenizer_config.json": '{"model_max_length": 4096, "chat_template": "{{ messages }}", '
                                       '"eos_token": "t46", "pad_token": "t46"}',
              "special_tokens_map.json": '{"eos_token": "t46"}',
              "generation_config.json": '{"_from_model_config": true, "eos_token_id": 46}',
              "modeling_tiny.py": 'raise RuntimeError("remote code was imported")\n',
              "LICENSE": "MIT\n"}
EXTRA_TENSOR = "model.rotary_emb.inv_freq"  # a stored buffer no parameter uses


def _source(path, family, dtype=np.float32, shards=2):
  """A tiny checkpoint in the family's released layout: weights, an index with metadata (transformers
  refuses one without), a tokenizer.json, the side files above and one unused tensor.

  The one place that writes fixtures (switch to tests/hf_fixtures.write_tiny_checkpoint when it exists)."""
  from tokenizers import Tokenizer, models

  w = _random_weights(0 if family == "llada" else 1)
  tensors = _llada_names(w) if family == "llada" else dict(w)
  tensors[EXTRA_TENSOR] = np.arange(4, dtype=np.float32)
  tensors = {k: v.astype(dtype) if k != EXTRA_TENSOR else v for k, v in tensors.items()}
  ckpt = _write_ckpt(path, LLADA_CFG if family == "llada" else DREAM_CFG, tensors, shards=shards)
  index = json.loads((ckpt / "model.safetensors.index.json").read_text())
  index["metadata"] = {"total_size": sum(v.nbytes for v in tensors.values())}
  (ckpt / "model.safetensors.index.json").write_text(json.dumps(index))
  Tokenizer(models.WordLevel({f"t{i}": i for i in range(V)}, unk_token="t0")).save(str(ckpt / "tokenizer.json"))
  for name, text in SIDE_FILES.items():
    (ckpt / name).write_text(text)
  (ckpt / "pytorch_model.bin").write_bytes(b"stale weights")  # never exported
  return ckpt


def _workdir(path, ckpt, *, lora_rank=0, param_dtype="float32", store_base=True, seed=0):
  """A workdir as training leaves it, with parameters that differ from the source everywhere.

  Returns (workdir, the policy's logits_fn, its params)."""
  extra = dict(lora_rank=lora_rank, lora_alpha=2.0 * lora_rank) if lora_rank else {}
  cfg, gd, params, _ = load_hf_checkpoint(ckpt, param_dtype=param_dtype, **extra)
  key = jax.random.PRNGKey(seed)
  if lora_rank:
    adapters = lora.init_lora(cfg, key)
    adapters = {t: {"a": ab["a"], "b": 0.05 * jax.random.normal(jax.random.fold_in(key, i), ab["b"].shape,
                                                                    ab["b"].dtype)}
                for i, (t, ab) in enumerate(adapters.items())}
    params, logits_fn = lora.lora_params(params, adapters), lora.make_lora_logits_fn(gd)
  else:
    leaves, tree = jax.tree.flatten(params)
    noise = [0.05 * jax.random.normal(jax.random.fold_in(key, i), x.shape, x.dtype) for i, x in enumerate(leaves)]
    params, logits_fn = jax.tree.unflatten(tree, [x + n for x, n in zip(leaves, noise)]), make_logits_fn(gd)
  path.mkdir(parents=True)
  atomic_write_json(path / "config.json",
                    TrainConfig(model=dataclasses.replace(cfg, init_checkpoint=str(ckpt))).to_dict())
  record_source(path, ckpt)
  saved = params if store_base or not lora_rank else {"lora": params["lora"]}
  ckpt_dir = Checkpointer(path / "rl", async_save=False)
  ckpt_dir.save(3, {"params": saved, "opt_state": {"mu": jnp.ones(3)}}, metadata={"phase": "rl", "step": 3})
  ckpt_dir.close()
  return path, logits_fn, params


def _tokens():
  return jnp.asarray(np.random.default_rng(7).integers(0, 44, (2, 9)), jnp.int32)


# Each family's config.json keys of the transformers config fields (Llama's for LLaDA, Qwen2's for Dream).
_HF_KEYS = {"llada": {"hidden_size": "d_model", "intermediate_size": "mlp_hidden_size", "num_hidden_layers": "n_layers",
                      "num_attention_heads": "n_heads", "num_key_value_heads": "n_kv_heads",
                      "vocab_size": "embedding_size", "rms_norm_eps": "rms_norm_eps", "rope_theta": "rope_theta"},
            "dream": {k: k for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                                     "num_key_value_heads", "vocab_size", "rms_norm_eps", "rope_theta")}}


def _hf_model(folder, family):
  """transformers' Llama (LLaDA's names mapped) / Qwen2 (Dream's own names) loaded from ``folder`` by
  ``from_pretrained``, in float32, run bidirectionally as in tests/models/test_hf_import.py; sizes from
  the folder's config.json."""
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  hf = json.loads((pathlib.Path(folder) / "config.json").read_text())
  common = dict({k: hf[key] for k, key in _HF_KEYS[family].items()}, tie_word_embeddings=False, hidden_act="silu")
  layers = common["num_hidden_layers"]
  if family == "llada":
    cls = transformers.LlamaForCausalLM
    config = transformers.LlamaConfig(attention_bias=False, **common)
    llama = _random_weights(0, layers)  # for its tensor names
    mapping = {"^" + k.replace(".", r"\.") + "$": v for k, v in _llada_names({k: k for k in llama}, layers).items()}
  else:
    cls = transformers.Qwen2ForCausalLM
    config = transformers.Qwen2Config(**common)
    mapping = None
  config._attn_implementation = "eager"
  config.is_causal = False
  model, info = cls.from_pretrained(str(folder), config=config, key_mapping=mapping, dtype=torch.float32,
                                    output_loading_info=True)
  assert not info["missing_keys"] and set(info["unexpected_keys"]) <= {EXTRA_TENSOR}, info
  for m in model.modules():
    if hasattr(m, "is_causal"):
      m.is_causal = False
  return model.eval()


def _run(model, tokens, family):
  """Logits of a transformers model with every key visible; Dream's shifted one position as ours."""
  import torch

  t = torch.from_numpy(np.asarray(tokens, np.int64))
  with torch.no_grad():
    out = model(input_ids=t, attention_mask=torch.zeros((t.shape[0], 1, t.shape[1], t.shape[1]))).logits.numpy()
  return np.concatenate([out[:, :1], out[:, :-1]], axis=1) if family == "dream" else out


def _tensors(folder):
  from safetensors import safe_open

  out = {}
  for f in sorted(pathlib.Path(folder).glob("*.safetensors")):
    with safe_open(str(f), framework="numpy") as h:
      out.update({k: h.get_tensor(k) for k in h.keys()})
  return out


@pytest.mark.parametrize("family", ["llada", "dream"])
def test_full_finetune_export_loads_in_transformers_with_the_policys_logits(tmp_path, family):
  ckpt = _source(tmp_path / "src", family)
  wd, logits_fn, params = _workdir(tmp_path / "wd", ckpt)
  result = export_workdir(wd, tmp_path / "out", log=lambda _: None)
  out = result.output_dir
  assert (result.phase, result.step) == ("rl", 3)
  x = _tokens()
  ours = np.asarray(logits_fn(params, x))
  theirs = _run(_hf_model(out, family), x, family)
  assert np.abs(ours - theirs).max() < 1e-4, np.abs(ours - theirs).max()
  # The source model's logits are far from these: the export holds the trained weights.
  assert np.abs(_run(_hf_model(ckpt, family), x, family) - theirs).max() > 0.05
  # Same files, tensor names, shapes and dtypes as the source; the unused tensor copied unchanged.
  src, exp = _tensors(ckpt), _tensors(out)
  assert {k: (v.shape, v.dtype) for k, v in src.items()} == {k: (v.shape, v.dtype) for k, v in exp.items()}
  np.testing.assert_array_equal(exp[EXTRA_TENSOR], src[EXTRA_TENSOR])
  src_index = json.loads((ckpt / "model.safetensors.index.json").read_text())
  index = json.loads((out / "model.safetensors.index.json").read_text())
  assert index["weight_map"] == src_index["weight_map"]
  assert index["metadata"]["total_size"] == sum(v.nbytes for v in exp.values())
  for name in ["config.json", "tokenizer.json", *SIDE_FILES]:
    assert (out / name).read_bytes() == (ckpt / name).read_bytes(), name
  assert not (out / "pytorch_model.bin").exists()
  assert json.loads((out / PROVENANCE_FILE).read_text())["step"] == 3
  # The export is itself a checkpoint this library imports, with the same logits.
  _, gd, reimported, _ = load_hf_checkpoint(out)
  assert np.abs(np.asarray(make_logits_fn(gd)(reimported, x)) - ours).max() < 1e-5


@pytest.mark.parametrize("family", ["llada", "dream"])
def test_lora_export_merged_and_peft_adapter_give_the_policys_logits(tmp_path, family):
  peft = pytest.importorskip("peft")
  ckpt = _source(tmp_path / "src", family)
  wd, logits_fn, params = _workdir(tmp_path / "wd", ckpt, lora_rank=4)
  merged = export_workdir(wd, tmp_path / "merged", log=lambda _: None).output_dir
  adapter = export_workdir(wd, tmp_path / "adapter", adapter_only=True, log=lambda _: None).output_dir
  x = _tokens()
  ours = np.asarray(logits_fn(params, x))
  merged_logits = _run(_hf_model(merged, family), x, family)
  assert np.abs(ours - merged_logits).max() < 1e-4, np.abs(ours - merged_logits).max()

  # PEFT's layout: lora_A [r, in] = a[i].T, lora_B [out, r] = b[i].T under the family's module names.
  config = json.loads((adapter / "adapter_config.json").read_text())
  stored = _tensors(adapter)
  a, b = (np.asarray(params["lora"]["o"][k][1]) for k in "ab")
  module = ("model.transformer.blocks.1.attn_out" if family == "llada" else "model.layers.1.self_attn.o_proj")
  np.testing.assert_array_equal(stored[f"base_model.model.{module}.lora_A.weight"], a.T)
  np.testing.assert_array_equal(stored[f"base_model.model.{module}.lora_B.weight"], b.T)
  assert len(stored) == 2 * 7 * LAYERS
  assert (config["peft_type"], config["task_type"], config["r"], config["lora_alpha"]) == ("LORA", "CAUSAL_LM", 4, 8)
  assert config["base_model_name_or_path"] == str(ckpt.resolve())
  if family == "llada":
    assert config["target_modules"] == ["attn_out", "ff_out", "ff_proj", "k_proj", "q_proj", "up_proj", "v_proj"]
    assert config["exclude_modules"] == ["model.transformer.ff_out"]  # the output head, also named ff_out
  else:
    assert config["target_modules"] == ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"]

  # peft onto the source model: Dream's module names are Qwen2's; LLaDA's are given by a module tree
  # that names the Llama model's own projections as LLaDA does (model.transformer.blocks.N.*).
  base = _hf_model(ckpt, family)
  target, install = _llada_module_tree(base) if family == "llada" else (base, lambda: None)
  peft_model = peft.PeftModel.from_pretrained(target, str(adapter))
  wrapped = [n for n, m in peft_model.named_modules() if n.endswith(".lora_A.default")]
  assert len(wrapped) == 7 * LAYERS and not any(n.endswith("transformer.ff_out.lora_A.default") for n in wrapped)
  install()
  loaded = peft_model.base_model.model.get_submodule(module)
  np.testing.assert_array_equal(loaded.lora_A["default"].weight.detach().numpy(), a.T)
  assert loaded.scaling["default"] == 2.0
  peft_logits = _run(base, x, family)
  assert np.abs(peft_logits - merged_logits).max() < 1e-4, np.abs(peft_logits - merged_logits).max()


# LLaDA's projection names -> where a transformers Llama layer keeps the same projection.
_LLADA_TO_LLAMA = {"q_proj": ("self_attn", "q_proj"), "k_proj": ("self_attn", "k_proj"),
                   "v_proj": ("self_attn", "v_proj"), "attn_out": ("self_attn", "o_proj"),
                   "ff_proj": ("mlp", "gate_proj"), "up_proj": ("mlp", "up_proj"), "ff_out": ("mlp", "down_proj")}


def _llada_module_tree(llama):
  """LLaDA's module tree (``model.transformer.blocks.N.{q_proj, ..., ff_out}``, output head
  ``model.transformer.ff_out``) over the very projection modules of a transformers Llama model, so that
  peft finds them under LLaDA's names. Returns ``(tree, install)``: ``install()`` puts the modules
  peft replaced (its LoRA layers around the same base Linear) into the Llama model, which then runs
  the forward pass."""
  from torch import nn

  root = nn.Module()
  root.model = nn.Module()
  root.model.transformer = nn.Module()
  root.model.transformer.blocks = nn.ModuleList()
  for layer in llama.model.layers:
    block = nn.Module()
    for name, (part, attr) in _LLADA_TO_LLAMA.items():
      setattr(block, name, getattr(getattr(layer, part), attr))
    root.model.transformer.blocks.append(block)
  root.model.transformer.ff_out = llama.lm_head
  root.config = llama.config  # what peft's causal-LM wrapper reads from a transformers model
  root.prepare_inputs_for_generation = llama.prepare_inputs_for_generation

  def install():
    for block, layer in zip(root.model.transformer.blocks, llama.model.layers):
      for name, (part, attr) in _LLADA_TO_LLAMA.items():
        setattr(getattr(layer, part), attr, getattr(block, name))

  return root, install


def test_bf16_source_exports_bf16_with_lora_merged_in_float32(tmp_path):
  ckpt = _source(tmp_path / "src", "llada", dtype=jnp.bfloat16)
  wd, _, params = _workdir(tmp_path / "wd", ckpt, lora_rank=4, param_dtype="float32")
  out = export_workdir(wd, tmp_path / "out", log=lambda _: None).output_dir
  src, exp = _tensors(ckpt), _tensors(out)
  assert all(exp[k].dtype == src[k].dtype for k in src) and exp["model.transformer.ln_f.weight"].dtype == jnp.bfloat16
  # Tensors without adapters come back bit for bit.
  for name in ("model.transformer.wte.weight", "model.transformer.blocks.1.attn_norm.weight"):
    np.testing.assert_array_equal(exp[name].view(np.uint16), src[name].view(np.uint16))
  # Adapted ones: bf16(W + 2 A B) with the sum in float32 (checked against float64, one rounding).
  name = "model.transformer.blocks.0.ff_proj.weight"
  w = src[name].astype(np.float64)
  a, b = (np.asarray(params["lora"]["gate"][k][0], np.float64) for k in "ab")
  exact = w + 2.0 * (a @ b).T
  want = exact.astype(np.float32).astype(jnp.bfloat16)
  got = exp[name]
  assert np.mean(got.view(np.uint16) != want.view(np.uint16)) < 1e-3
  assert np.abs(got.astype(np.float64) - exact).max() <= np.abs(exact).max() * 2.0 ** -8
  # A merge in bf16 arithmetic would round the update: it differs on many entries.
  bf = (src[name] + (2.0 * (a @ b).T).astype(jnp.bfloat16)).astype(jnp.bfloat16)
  assert np.mean(bf.view(np.uint16) != want.view(np.uint16)) > 0.01


def test_lora_checkpoint_without_its_base_reads_the_base_from_the_source(tmp_path):
  ckpt = _source(tmp_path / "src", "dream")
  wd_full, _, _ = _workdir(tmp_path / "full", ckpt, lora_rank=4)
  wd_lean, _, _ = _workdir(tmp_path / "lean", ckpt, lora_rank=4, store_base=False)
  a = export_workdir(wd_full, tmp_path / "a", log=lambda _: None).output_dir
  b = export_workdir(wd_lean, tmp_path / "b", log=lambda _: None).output_dir
  ta, tb = _tensors(a), _tensors(b)
  assert ta.keys() == tb.keys() and all(np.array_equal(ta[k], tb[k]) for k in ta)


def test_reshard_with_max_shard_size(tmp_path):
  ckpt = _source(tmp_path / "src", "llada", shards=1)
  wd, logits_fn, params = _workdir(tmp_path / "wd", ckpt)
  out = export_workdir(wd, tmp_path / "out", max_shard_size=16_000, log=lambda _: None).output_dir
  index = json.loads((out / "model.safetensors.index.json").read_text())
  files = sorted(set(index["weight_map"].values()))
  assert len(files) > 2 and files[0] == f"model-00001-of-{len(files):05d}.safetensors"
  sizes = {f: sum(v.nbytes for v in _tensors_of(out / f).values()) for f in files}
  assert all(s <= 16_000 for s in sizes.values()) and index["metadata"]["total_size"] == sum(sizes.values())
  x = _tokens()
  assert np.abs(np.asarray(logits_fn(params, x)) - _run(_hf_model(out, "llada"), x, "llada")).max() < 1e-4


def _tensors_of(file):
  from safetensors import safe_open

  with safe_open(str(file), framework="numpy") as h:
    return {k: h.get_tensor(k) for k in h.keys()}


@pytest.mark.parametrize("store_base", [True, False])
def test_evaluation_reads_a_lora_workdir_with_its_adapters(tmp_path, store_base):
  ckpt = _source(tmp_path / "src", "llada")
  wd, logits_fn, params = _workdir(tmp_path / "wd", ckpt, lora_rank=4, store_base=store_base)
  model = model_from_workdir(wd)
  x = _tokens()
  np.testing.assert_allclose(np.asarray(model.logits_fn(model.params, x)), np.asarray(logits_fn(params, x)),
                             atol=1e-5)
  assert (model.tokenizer.eos_id, model.tokenizer.mask_id, model.max_seq_len) == (46, 47, 4096)  # the source's
  if not store_base:  # the base comes from the source folder, which must be the one the run started from
    (ckpt / "config.json").write_text(json.dumps(dict(LLADA_CFG, rope_theta=10000.0)))
    with pytest.raises(DataError, match=r"not the folder the run started from .*changed: \['config.json'\]"):
      model_from_workdir(wd)


# --- refusals: one clear error each, before anything is written ---------------------------------------


def test_refusals(tmp_path):
  ckpt = _source(tmp_path / "src", "llada")
  wd, _, _ = _workdir(tmp_path / "wd", ckpt)
  quiet = dict(log=lambda _: None)
  with pytest.raises(ConfigError, match=r"--adapter_only=True .*a LoRA run.*fine-tuned every weight"):
    export_workdir(wd, tmp_path / "o1", adapter_only=True, **quiet)
  busy = tmp_path / "busy"
  busy.mkdir()
  (busy / "keep.txt").write_text("mine")
  for flag in (False, True):  # a folder of someone else's files is never replaced
    with pytest.raises(DataError, match=r"--output_dir=.*busy exists, is not empty and is not an earlier export"):
      export_workdir(wd, busy, overwrite=flag, **quiet)
  assert (busy / "keep.txt").read_text() == "mine"
  export_workdir(wd, tmp_path / "done", **quiet)
  with pytest.raises(DataError, match=r"done exists and is not empty \(an earlier export of this run\).*--overwrite"):
    export_workdir(wd, tmp_path / "done", **quiet)
  export_workdir(wd, tmp_path / "done", overwrite=True, **quiet)  # an earlier export of this run: replaced
  # would replace or change the source or the workdir (its checkpoints under rl/)
  for bad in (ckpt, ckpt / "export", wd, tmp_path, wd / "rl", wd / "export"):
    with pytest.raises(ConfigError, match=r"--output_dir=.*a folder that neither is, holds nor lies inside"):
      export_workdir(wd, bad, overwrite=True, **quiet)
  # The source moved: refused, and accepted again from its new place (same fingerprint).
  moved = ckpt.rename(tmp_path / "moved")
  with pytest.raises(DataError, match=r"is not a directory: it moved or was deleted; pass --source"):
    export_workdir(wd, tmp_path / "o2", **quiet)
  export_workdir(wd, tmp_path / "o3", source=str(moved), **quiet)
  # The source changed since training.
  (moved / "config.json").write_text(json.dumps(dict(LLADA_CFG, rope_theta=10000.0)))
  with pytest.raises(DataError, match=r"not the folder the run started from .*changed: \['config.json'\]"):
    export_workdir(wd, tmp_path / "o4", source=str(moved), **quiet)
  assert not any((tmp_path / n).exists() for n in ("o1", "o2", "o4"))
  # A run of the byte-level model.
  tiny = tmp_path / "tiny"
  tiny.mkdir()
  atomic_write_json(tiny / "config.json", TrainConfig().to_dict())
  with pytest.raises(ConfigError, match=r"model.init_checkpoint='' .*byte-level model"):
    export_workdir(tiny, tmp_path / "o5", **quiet)
  # A damaged shard in the (recorded) source.
  shard = sorted(moved.glob("model-*.safetensors"))[0]
  shard.write_bytes(b"\xff" * 8 + shard.read_bytes()[8:])
  record_source(wd, moved)
  with pytest.raises(DataError, match=r"model-00001-of-00002.safetensors: not a readable safetensors file"):
    export_workdir(wd, tmp_path / "o6", source=str(moved), **quiet)
  # A workdir without the source record.
  (wd / "init_checkpoint.json").unlink()
  with pytest.raises(DataError, match=r"init_checkpoint.json is missing"):
    export_workdir(wd, tmp_path / "o7", source=str(moved), **quiet)


def test_max_shard_size_flag():
  assert [parse_shard_size(t) for t in ("", "123", "5gb", " 500MB ")] == [None, 123, "5GB", "500MB"]
  for bad in ("0", "5GiB", "GB", "-3", "1.5GB"):
    with pytest.raises(ConfigError, match=r"--max_shard_size="):
      parse_shard_size(bad)


def test_interrupted_export_leaves_no_folder_and_keeps_the_old_one(tmp_path, monkeypatch):
  import safetensors.numpy

  ckpt = _source(tmp_path / "src", "dream", shards=3)
  wd, _, _ = _workdir(tmp_path / "wd", ckpt)
  real, calls = safetensors.numpy.save_file, []

  def dies_on_second_shard(*args, **kwargs):
    calls.append(1)
    if len(calls) == 2:
      raise KeyboardInterrupt  # as a Ctrl-C between two shards
    return real(*args, **kwargs)

  monkeypatch.setattr(safetensors.numpy, "save_file", dies_on_second_shard)
  with pytest.raises(KeyboardInterrupt):
    export_workdir(wd, tmp_path / "out", log=lambda _: None)
  assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))
  old = tmp_path / "old"
  old.mkdir()
  (old / "model.safetensors").write_text("previous export")
  atomic_write_json(old / PROVENANCE_FILE, {"workdir": str(wd.resolve())})
  calls.clear()
  with pytest.raises(KeyboardInterrupt):
    export_workdir(wd, old, overwrite=True, log=lambda _: None)
  assert sorted(p.name for p in old.iterdir()) == [PROVENANCE_FILE, "model.safetensors"]


def _cli(tmp_path, *flags):
  ckpt = _source(tmp_path / "src", "llada")
  wd, _, _ = _workdir(tmp_path / "wd", ckpt, lora_rank=4)
  cmd = [sys.executable, str(ROOT / "experiments" / "export_hf.py"), f"--workdir={wd}", *flags]
  return subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                        env=dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu"))


def test_command_line(tmp_path):
  ok = _cli(tmp_path, f"--output_dir={tmp_path / 'out'}", "--adapter_only")
  assert ok.returncode == 0, ok.stderr
  assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
      "adapter_config.json", "adapter_model.safetensors", PROVENANCE_FILE]


@pytest.mark.slow
def test_command_line_refusal_is_one_line(tmp_path):
  (tmp_path / "out").mkdir()
  (tmp_path / "out" / "x").write_text("x")
  bad = _cli(tmp_path, f"--output_dir={tmp_path / 'out'}", "--max_shard_size=5GB")
  assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].startswith("error: --output_dir=")
  assert "Traceback" not in bad.stderr
