"""The tiny HF-layout checkpoints of tests/hf_fixtures.py: the release's files and ids, readable by
transformers and by daca_jax's importer, and remote code that is never imported."""
import hashlib
import json
import runpy

import pytest

from tests import hf_fixtures as hf

pytest.importorskip("tokenizers")
pytest.importorskip("safetensors")


@pytest.fixture(scope="module", params=hf.FAMILIES)
def ckpt(request, tmp_path_factory):
  return request.param, hf.write_tiny_checkpoint(tmp_path_factory.mktemp(request.param), request.param)


RELEASE_FILES = {
    "llada": {"config.json", "generation_config.json", "special_tokens_map.json", "tokenizer.json",
              "tokenizer_config.json", "model.safetensors.index.json", "configuration_llada.py", "modeling_llada.py"},
    "dream": {"config.json", "generation_config.json", "special_tokens_map.json", "tokenizer_config.json",
              "added_tokens.json", "vocab.json", "merges.txt", "model.safetensors.index.json",
              "configuration_dream.py", "modeling_dream.py", "generation_utils.py", "tokenization_dream.py"},
}
# (bos, eos, pad, mask) ids of each release.
RELEASED_IDS = {"llada": (126080, 126081, 126081, 126336), "dream": (151665, 151643, 151643, 151666)}


def test_files_and_config_are_the_releases(ckpt):
  family, path = ckpt
  names = {p.name for p in path.iterdir()}
  assert RELEASE_FILES[family] <= names
  assert ("tokenizer.json" in names) == (family == "llada")  # Dream's release has vocab.json + merges.txt
  cfg = json.loads((path / "config.json").read_text())
  released = hf.LLADA_CONFIG if family == "llada" else hf.DREAM_CONFIG
  assert set(cfg) == set(released)
  assert {k for k in cfg if cfg[k] != released[k]} == set(hf.SIZE_FIELDS[family])  # only the sizes differ
  tc = json.loads((path / "tokenizer_config.json").read_text())
  assert hashlib.sha256(tc["chat_template"].encode()).hexdigest() == hf.CHAT_TEMPLATE_SHA256[family]
  index = json.loads((path / "model.safetensors.index.json").read_text())
  assert len(set(index["weight_map"].values())) == 2 and index["metadata"]["total_size"] > 0


def test_transformers_reads_the_tokenizer_at_the_released_ids(ckpt):
  transformers = pytest.importorskip("transformers")
  family, path = ckpt
  if family == "llada":
    tok = transformers.AutoTokenizer.from_pretrained(str(path), trust_remote_code=False)
    mask = tok.convert_tokens_to_ids("<|mdm_mask|>")  # no mask role in LLaDA's tokenizer files
  else:
    # Dream's tokenizer class is remote code: transformers refuses it without trust_remote_code, and
    # its own Qwen2Tokenizer is the class that code copies.
    with pytest.raises(ValueError, match="trust_remote_code"):
      transformers.AutoTokenizer.from_pretrained(str(path), trust_remote_code=False)
    tok = transformers.Qwen2Tokenizer.from_pretrained(str(path))
    mask = tok.mask_token_id
  assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id, mask) == RELEASED_IDS[family]
  added = hf.LLADA_ADDED if family == "llada" else hf.DREAM_ADDED
  assert all(tok.convert_tokens_to_ids(c) == i for i, c, _ in added)


def test_importer_reads_the_weights_at_the_released_vocab(ckpt):
  from daca_jax.models.hf_import import load_hf_checkpoint

  family, path = ckpt
  cfg, _, params, report = load_hf_checkpoint(path, dtype="float32", param_dtype="float32")
  assert report.family == family and report.unexpected == ()
  assert (cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.kv_heads, cfg.mlp_dim) == (32, 2, 4, 2, 64)
  assert (cfg.vocab_size, cfg.mask_token_id) == {"llada": (126464, 126336), "dream": (152064, 151666)}[family]
  assert params["embed"]["embedding"].shape == (cfg.vocab_size, 32)


def test_remote_code_placeholders_raise_when_imported(ckpt):
  family, path = ckpt
  for name in hf.REMOTE_CODE[family]:
    with pytest.raises(ImportError, match="must never import"):
      runpy.run_path(str(path / name))


def test_bf16_shards_and_deterministic_tokenizer(tmp_path):
  from safetensors import safe_open

  a = hf.write_tiny_checkpoint(tmp_path / "a", "dream", dtype="bfloat16", shards=3, layers=1)
  with safe_open(str(a / "model-00001-of-00003.safetensors"), framework="numpy") as f:
    assert f.metadata() == {"format": "pt"}
  assert len(list(a.glob("model-*-of-00003.safetensors"))) == 3
  hf.stand_in_bpe.cache_clear()
  b = hf.write_tokenizer_files(tmp_path / "b", "dream")
  assert (a / "merges.txt").read_text() == (b / "merges.txt").read_text()  # the BPE training is repeatable
