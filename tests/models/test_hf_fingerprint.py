"""Fingerprints of a source checkpoint folder (daca_jax.models.hf_fingerprint)."""
import pytest

from daca_jax.errors import DataError
from daca_jax.models import hf_fingerprint as fp


def _folder(tmp_path):
  src = tmp_path / "ckpt"
  src.mkdir()
  (src / "config.json").write_text('{"model_type": "llada"}')
  (src / "model.safetensors").write_bytes(bytes(range(256)) * 256)  # 64 KiB: "large" below
  (src / ".cache").mkdir()
  (src / ".cache" / "lock").write_text("x")
  return src


@pytest.fixture
def small_limits(monkeypatch):
  """Files over 1 KiB count as large: ends of 256 bytes and 16 blocks of 64 bytes are hashed."""
  monkeypatch.setattr(fp, "FULL_HASH_BYTES", 1024)
  monkeypatch.setattr(fp, "_EDGE", 256)
  monkeypatch.setattr(fp, "_BLOCK", 64)


def test_fingerprint_sees_every_kind_of_change(tmp_path, small_limits):
  src = _folder(tmp_path)
  first = fp.fingerprint(src)
  assert sorted(first) == ["config.json", "model.safetensors"]  # hidden entries are not part of it
  assert fp.fingerprint(src) == first
  shard = src / "model.safetensors"
  data = bytearray(shard.read_bytes())
  for where in (10, len(data) - 5, 256 + (len(data) - 512) // 17):  # header, tail, first sampled block
    changed = bytearray(data)
    changed[where] ^= 1
    shard.write_bytes(bytes(changed))
    assert fp.fingerprint(src)["model.safetensors"] != first["model.safetensors"], where
  shard.write_bytes(bytes(data[:-1]))  # truncated
  assert fp.fingerprint(src)["model.safetensors"] != first["model.safetensors"]
  shard.write_bytes(bytes(data))
  (src / ".cache" / "lock").write_text("y")
  assert fp.fingerprint(src) == first


def test_check_source_names_what_changed(tmp_path, small_limits):
  src, wd = _folder(tmp_path), tmp_path / "wd"
  wd.mkdir()
  with pytest.raises(DataError, match=r"init_checkpoint.json is missing"):
    fp.check_source(wd, src)
  record = fp.record_source(wd, src)
  assert record["path"] == str(src.resolve())
  fp.check_source(wd, src)
  (src / "tokenizer.json").write_text("{}")
  (src / "config.json").write_text('{"model_type": "Dream"}')
  with pytest.raises(DataError, match=r"changed: \['config.json'\]; new: \['tokenizer.json'\]"):
    fp.check_source(wd, src)
  with pytest.raises(DataError, match=r"moved or was deleted; pass --source"):
    fp.check_source(wd, tmp_path / "elsewhere")
