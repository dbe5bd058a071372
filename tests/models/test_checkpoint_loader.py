"""The checkpoint loader on hostile folders and its reads against ``safetensors`` itself: every malformed
header, index, dtype, shape, value or config.json entry is one DataError / ConfigError naming the file and
what is wrong, raised before any array is built; a folder's ``.py`` files never run."""
import json
import pathlib
import sys

import jax
import ml_dtypes
import numpy as np
import pytest
from flax import nnx

from daca_jax.errors import ConfigError, DataError
from daca_jax.models import checkpoint_loader as cl
from daca_jax.models import make_logits_fn
from daca_jax.models.hf_import import config_from_hf, load_hf_checkpoint
from daca_jax.models.llada import Transformer
from daca_jax.models.safetensors_file import read_header, read_rows
from tests.models.test_hf_import import DREAM_CFG, LLADA_CFG, _tokens
from tests.run.hf_checkpoint_fixture import hf_weights, tiny_checkpoint

safetensors_numpy = pytest.importorskip("safetensors.numpy")


def _st(path, tensors):
  safetensors_numpy.save_file(tensors, str(path))
  return path


def _raw(path, header: bytes, data: bytes = b"", length=None):
  """A file with header length ``length`` (default: the header's), ``header`` and ``data``."""
  n = len(header) if length is None else length
  path.write_bytes(n.to_bytes(8, "little") + header + data)
  return path


# --- safetensors headers ---------------------------------------------------------------------------


def test_reads_equal_safetensors_for_every_row_slice(tmp_path):
  rng = np.random.default_rng(0)
  tensors = {"a": rng.normal(size=(5, 3)).astype(np.float32),
             "b": rng.normal(size=(4, 6)).astype(ml_dtypes.bfloat16), "c": rng.normal(size=(7,)).astype(np.float16)}
  path = _st(tmp_path / "x.safetensors", tensors)
  oracle = safetensors_numpy.load_file(str(path))
  entries = read_header(path)
  assert {k: (e.dtype, e.shape) for k, e in entries.items()} == {
      "a": ("F32", (5, 3)), "b": ("BF16", (4, 6)), "c": ("F16", (7,))}
  for name, x in oracle.items():
    assert read_rows(entries[name]).dtype == x.dtype
    for rows in (slice(None), slice(1, 3), slice(2, 2), slice(0, 1)):
      np.testing.assert_array_equal(read_rows(entries[name], rows), x[rows])


@pytest.mark.parametrize("make,match", [
    (lambda p: p.write_bytes(b"\x01\x02"), r"2 bytes, shorter than the 8-byte header length"),
    (lambda p: _raw(p, b"", length=0), r"header length 0 is not in"),
    (lambda p: _raw(p, b"{}", length=10**12), r"header length 1000000000000 is not in"),
    (lambda p: _raw(p, b'{"a": 1}', length=400), r"header length 400 runs past the end of the 16-byte file"),
    (lambda p: _raw(p, b'{"a": {"dtype": '), r"not valid JSON"),
    (lambda p: _raw(p, b"\xff\xfe{}"), r"not UTF-8"),
    (lambda p: _raw(p, b"[1, 2]"), r"a JSON list, not an object"),
    (lambda p: _raw(p, b'{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},'
                       b' "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}', b"\0" * 4),
     r"duplicate key 'a'"),
    (lambda p: _raw(p, b'{"a": {"dtype": "F32", "shape": [NaN], "data_offsets": [0, 4]}}', b"\0" * 4),
     r"non-finite number NaN"),
    (lambda p: _raw(p, b'{"a": {"dtype": "F33", "shape": [1], "data_offsets": [0, 4]}}', b"\0" * 4),
     r"tensor 'a': unknown dtype 'F33'"),
    (lambda p: _raw(p, b'{"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}', b"\0" * 4),
     r"tensor 'a': shape \[-1\] is not a list"),
    (lambda p: _raw(p, b'{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}', b"\0" * 4),
     r"tensor 'a': data_offsets \[0, 8\] are not \[begin, end\] within the 4-byte data section"),
    (lambda p: _raw(p, b'{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}', b"\0" * 8),
     r"data_offsets \[0, 4\] hold 4 bytes; F32 x \(2,\) needs 8"),
    (lambda p: _raw(p, b'{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},'
                       b' "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}', b"\0" * 12),
     r"tensors 'a' and 'b' overlap"),
    (lambda p: _raw(p, b'{"a": {"dtype": "F32", "shape": [1]}}', b"\0" * 4), r"expected \{'dtype'"),
    (lambda p: _raw(p, b'{"__metadata__": {"k": 1}}'), r"__metadata__ is not a map of strings"),
])
def test_malformed_headers_are_one_error_naming_the_file(tmp_path, make, match):
  path = tmp_path / "bad.safetensors"
  make(path)
  with pytest.raises(DataError, match=match) as e:
    read_header(path)
  assert str(path) in str(e.value)


def test_a_file_cut_short_after_its_header_is_named_on_read(tmp_path):
  path = _st(tmp_path / "x.safetensors", {"a": np.ones((64, 4), np.float32)})
  entry = read_header(path)["a"]
  path.write_bytes(path.read_bytes()[:-100])
  with pytest.raises(DataError, match=r"tensor 'a' ends past the end of the file"):
    read_rows(entry)


# --- checkpoint folders ----------------------------------------------------------------------------


def _ckpt(tmp_path, family="llada", name="c", **kw):
  return tiny_checkpoint(tmp_path / name, family, **kw)


@pytest.mark.parametrize("family", ["llada", "dream"])
def test_params_equal_the_checkpoint_tensors_and_keep_bf16(tmp_path, family):
  ckpt = _ckpt(tmp_path, family, dtype="bfloat16")
  cfg, gd, params, report = load_hf_checkpoint(ckpt, param_dtype="bfloat16")
  assert report.unexpected == () and not (ckpt / "IMPORTED").exists()
  assert not any(n.startswith(("modeling_", "configuration_")) for n in sys.modules)
  dtypes = {x.dtype for x in jax.tree.leaves(params)}
  assert dtypes == {np.dtype(ml_dtypes.bfloat16)}, dtypes  # never a float32 copy
  oracle = {}
  for shard in ckpt.glob("*.safetensors"):
    oracle.update(safetensors_numpy.load_file(str(shard)))
  pure = nnx.to_pure_dict(params)
  for key, template, transpose in cl.NAME_MAPS[family]:
    node = pure
    for k in key:
      node = node.get(k) if isinstance(node, dict) else None
    if node is None:
      continue
    got = np.asarray(node)
    for i in range(cfg.n_layers if key[0] == "layers" else 1):
      want = oracle[template.format(i=i)]
      np.testing.assert_array_equal(got[i] if key[0] == "layers" else got, want.T if transpose else want)
  # float32 params from the bf16 file: exactly the widened values
  f32 = load_hf_checkpoint(ckpt)[2]
  for a, b in zip(jax.tree.leaves(f32), jax.tree.leaves(params)):
    assert a.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b).astype(np.float32))


def test_expected_shapes_are_the_models_own():
  for hf in (LLADA_CFG, DREAM_CFG, dict(LLADA_CFG, weight_tying=True, include_qkv_bias=True)):
    cfg = config_from_hf(hf)
    abstract = nnx.to_pure_dict(nnx.split(nnx.eval_shape(lambda: Transformer(cfg, nnx.Rngs(0))), nnx.Param)[1])
    flat = {tuple(str(k.key) for k in p): v.shape for p, v in jax.tree_util.tree_flatten_with_path(abstract)[0]}
    mine = cl.hf_tensor_shapes(cfg)
    assert set(mine) == set(flat)
    for key, (shape, _) in mine.items():
      transpose = {k: t for k, _, t in cl.NAME_MAPS["llada"]}[key]
      want = flat[key][1:] if key[0] == "layers" else flat[key]
      assert (shape[::-1] if transpose else shape) == want, key
    total = sum(np.prod(s) for s in flat.values()) * 4
    assert cl.param_bytes(cfg) == total


def _rewrite(ckpt, name, value):
  """Replaces tensor ``name`` in its shard (other tensors unchanged)."""
  index = json.loads((ckpt / cl.INDEX_FILE).read_text())["weight_map"]
  shard = ckpt / index[name]
  tensors = safetensors_numpy.load_file(str(shard))
  tensors[name] = value
  safetensors_numpy.save_file(tensors, str(shard))


def test_wrong_dtype_shape_value_and_missing_layers_are_named(tmp_path):
  name = "model.transformer.blocks.1.q_proj.weight"
  ckpt = _ckpt(tmp_path, name="int8")
  _rewrite(ckpt, name, np.zeros((32, 32), np.int8))
  with pytest.raises(DataError, match=r"'model\.transformer\.blocks\.1\.q_proj\.weight' has dtype I8; expected a "
                                      r"float weight"):
    load_hf_checkpoint(ckpt)
  ckpt = _ckpt(tmp_path, name="shape")
  _rewrite(ckpt, name, np.zeros((32, 30), np.float32))
  with pytest.raises(DataError, match=r"has shape \(32, 30\), expected \(32, 32\) \(32 from config\.json:n_heads, "
                                      r"32 from config\.json:d_model\)"):
    load_hf_checkpoint(ckpt)
  ckpt = _ckpt(tmp_path, name="nan")
  w = hf_weights("llada")[name].copy()
  w[3, 5] = np.nan
  _rewrite(ckpt, name, w)
  with pytest.raises(DataError, match=r"tensor 'model\.transformer\.blocks\.1\.q_proj\.weight' holds a non-finite "
                                      r"value \(nan at \(3, 5\)\)"):
    load_hf_checkpoint(ckpt)
  # a config claiming 10**9 layers fails on the headers, before the model (or its layer stack) exists
  ckpt = _ckpt(tmp_path, name="layers", n_layers=10**9)
  with pytest.raises(DataError, match=r"config\.json:n_layers=1000000000, but the checkpoint holds tensors for "
                                      r"2 layers"):
    load_hf_checkpoint(ckpt)


@pytest.mark.parametrize("family,key,value,match", [
    ("llada", "d_model", -32, r"config\.json:d_model=-32 is not allowed: expected a positive integer"),
    ("llada", "d_model", 32.0, r"config\.json:d_model=32\.0 .*a positive integer"),
    ("llada", "vocab_size", 2**40, r"config\.json:vocab_size=1099511627776 .*<= 2147483647"),
    ("llada", "embedding_size", "48", r"config\.json:embedding_size='48'"),
    ("llada", "n_heads", 5, r"config\.json:n_heads=5 .*a divisor of config\.json:d_model=32"),
    ("llada", "n_kv_heads", 3, r"config\.json:n_kv_heads=3 .*a divisor of config\.json:n_heads=4"),
    ("llada", "rope_theta", "big", r"config\.json:rope_theta='big' .*a finite number > 0"),
    ("llada", "rms_norm_eps", -1e-5, r"config\.json:rms_norm_eps=-1e-05"),
    ("llada", "mask_token_id", 48, r"config\.json:mask_token_id=48 .*a token id in \[0, 48\)"),
    ("llada", "weight_tying", "no", r"config\.json:weight_tying='no' .*true or false"),
    ("dream", "num_attention_heads", 0, r"config\.json:num_attention_heads=0"),
    ("dream", "num_hidden_layers", None, r"config\.json:num_hidden_layers=None"),
    ("dream", "intermediate_size", [64], r"config\.json:intermediate_size=\[64\]"),
    ("dream", "pad_token_id", -1, r"config\.json:pad_token_id=-1 .*or null"),
    ("dream", "hidden_size", 30, r"config\.json:num_attention_heads=4 .*divisor of config\.json:hidden_size=30 "
                                 r"giving an even head width"),
])
def test_absurd_config_values_are_one_config_error(tmp_path, family, key, value, match):
  ckpt = _ckpt(tmp_path, family, **{key: value})
  with pytest.raises(ConfigError, match=match):
    load_hf_checkpoint(ckpt)


@pytest.mark.parametrize("index,match", [
    ({"weight_map": {"model.transformer.wte.weight": "../../etc/passwd.safetensors"}}, r"a plain"),
    ({"weight_map": {"model.transformer.wte.weight": "/abs/model.safetensors"}}, r"a plain"),
    ({"weight_map": {"model.transformer.wte.weight": 3}}, r"a plain"),
    ({"weight_map": {"model.transformer.wte.weight": "gone.safetensors"}}, r"shard gone\.safetensors .* does not exist"),
    ({"weight_map": {"model.transformer.nope": "model-00001-of-00002.safetensors"}},
     r"lists tensor 'model\.transformer\.nope' in model-00001-of-00002\.safetensors, whose header does not hold it"),
    ({"weights": {}}, r"no 'weight_map'"),
])
def test_bad_index_entries_are_refused(tmp_path, index, match):
  ckpt = _ckpt(tmp_path)
  (ckpt / cl.INDEX_FILE).write_text(json.dumps(index))
  with pytest.raises(DataError, match=match):
    cl.open_checkpoint(ckpt)


def test_missing_files_are_named(tmp_path):
  ckpt = _ckpt(tmp_path)
  (ckpt / cl.INDEX_FILE).unlink()
  for shard in ckpt.glob("*.safetensors"):
    shard.unlink()
  with pytest.raises(DataError, match=r"neither model\.safetensors\.index\.json nor model\.safetensors found"):
    cl.open_checkpoint(ckpt)
  (ckpt / "config.json").write_text("[]")
  with pytest.raises(DataError, match=r"config\.json: a JSON list, expected an object"):
    cl.open_checkpoint(ckpt)
  (ckpt / "config.json").unlink()
  with pytest.raises(DataError, match=r"no config\.json \(the model's config\)"):
    cl.open_checkpoint(ckpt)


def test_loaded_model_runs(tmp_path):
  cfg, gd, params, _ = load_hf_checkpoint(_ckpt(tmp_path, "dream"))
  logits = make_logits_fn(gd)(params, _tokens())
  assert logits.shape == (2, 9, cfg.vocab_size) and bool(np.isfinite(np.asarray(logits)).all())


def test_no_python_file_of_the_folder_is_imported(tmp_path, monkeypatch):
  ckpt = _ckpt(tmp_path)
  monkeypatch.syspath_prepend(str(ckpt))  # even on sys.path, nothing imports them
  load_hf_checkpoint(ckpt)
  from daca_jax.run.from_checkpoint import checkpoint_tokenizer
  checkpoint_tokenizer(ckpt, config_from_hf(LLADA_CFG))
  assert not (ckpt / "IMPORTED").exists()
  assert not [m for m in sys.modules if m.startswith(("modeling_", "configuration_x"))]
  assert pathlib.Path(ckpt / "modeling_llada.py").exists()


def test_loader_peak_host_memory_is_about_the_model(tmp_path, monkeypatch):
  """experiments/loader_memory.py's measurement on an 88 MB bf16 checkpoint: loading adds about the model
  itself to the process (on CPU the devices are host memory) plus one parameter's buffers; holding the
  parameters in float32 shows up as twice that.

  glibc's malloc keeps freed buffers below its (self-raising, up to 32 MB) mmap threshold in the
  process, which at this size adds a noisy 0.2-0.4x of retained-but-free memory; a fixed 1 MB
  threshold measures the loader's live buffers. (At 1 GB the raw measurement is 1.21x.)"""
  monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "1048576")
  from daca_jax.models.random_checkpoint import LLADA_8B_CONFIG, write_random_checkpoint
  from daca_jax.measure.loader_memory import measure

  hf = dict(LLADA_8B_CONFIG, d_model=512, n_layers=8, n_heads=4, n_kv_heads=4, mlp_hidden_size=1536,
            vocab_size=16384, embedding_size=16384, mask_token_id=16383, eos_token_id=16382, pad_token_id=16382)
  ckpt = write_random_checkpoint(tmp_path / "c", hf)
  bf16 = measure(ckpt)
  assert bf16["checkpoint_bytes"] == bf16["model_bytes"] > 80_000_000
  assert 0.9 < bf16["added_ratio"] < 1.5, bf16
  f32 = measure(ckpt, param_dtype="float32")
  assert f32["model_bytes"] == 2 * bf16["model_bytes"] and f32["added_ratio"] > 1.9, f32
