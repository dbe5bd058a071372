"""Checkpoint folders written by a hostile uploader, by class: each is refused with one DataError /
ConfigError naming the file (and the field and value, where there is one), quickly and without a large
allocation, by every reader (the weights' loader, the tokenizer, the chat template); the valid layouts
(both families, sharded or not, in-folder symlinks, a hub cache snapshot) still load.

The command-line tools print these errors as one ``error:`` line with exit status 2 (one end-to-end
check at the bottom)."""
import json
import os
import pathlib
import re
import resource
import shutil
import socket
import subprocess
import sys
import time

import pytest

from daca_jax.errors import ConfigError, DataError
from daca_jax.models import checkpoint_folder as cf
from daca_jax.models import checkpoint_loader as cl
from daca_jax.models.hf_import import load_hf_checkpoint
from daca_jax.tasks import chat
from daca_jax.tasks.hf_tokenizer import HFTokenizer
from tests.run.hf_checkpoint_fixture import tiny_checkpoint

pytest.importorskip("safetensors.numpy")
pytest.importorskip("tokenizers")
ROOT = pathlib.Path(__file__).resolve().parents[2]
_N_LAYERS = {"llada": "n_layers", "dream": "num_hidden_layers"}


@pytest.fixture(scope="module")
def valid(tmp_path_factory):
  """One valid folder per family, copied by each test that damages it."""
  base = tmp_path_factory.mktemp("valid")
  return {f: tiny_checkpoint(base / f, f) for f in ("llada", "dream")}


def _copy(valid, tmp_path, family="llada"):
  return pathlib.Path(shutil.copytree(valid[family], tmp_path / family, symlinks=True))


def _both_readers(folder):
  """The reads a run makes of a checkpoint folder: the tokenizer (with its template), the weights."""
  HFTokenizer.from_checkpoint(folder)
  return load_hf_checkpoint(folder)


def _edit_json(path, **fields):
  data = json.loads(path.read_text())
  data.update(fields)
  path.write_text(json.dumps(data))


def _quick(fn, *args, seconds=5.0):
  """``fn(*args)`` must raise within ``seconds``; returns the exception."""
  t0 = time.monotonic()
  with pytest.raises((DataError, ConfigError)) as e:
    fn(*args)
  assert time.monotonic() - t0 < seconds
  message = str(e.value)
  assert "\n" not in message and len(message) < 600, message
  return message


# --- files that are not regular files inside the folder ------------------------------------------------


def _fifo(path):
  os.mkfifo(path)


def _socket(path):
  # Bound by a name relative to its folder: AF_UNIX addresses hold ~107 bytes, less than a deep tmp path
  # (pytest-xdist's per-worker folders) takes.
  s = socket.socket(socket.AF_UNIX)
  cwd = os.getcwd()
  os.chdir(pathlib.Path(path).parent)
  try:
    s.bind(pathlib.Path(path).name)
  finally:
    os.chdir(cwd)
  return s


@pytest.mark.parametrize("name", ["config.json", "tokenizer.json", "tokenizer_config.json",
                                  "model-00001-of-00002.safetensors"])
@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "outside", "dangling", "directory", "socket"])
def test_a_file_that_is_not_a_regular_file_inside_the_folder_is_refused(valid, tmp_path, name, kind):
  folder = _copy(valid, tmp_path)
  target = folder / name
  secret = tmp_path / "secret.json"
  secret.write_bytes(target.read_bytes())  # a valid file, but outside the folder
  target.unlink()
  keep = None
  if kind == "fifo":
    _fifo(target)  # reading it would block forever
  elif kind == "dev_zero":
    target.symlink_to("/dev/zero")  # reading it would never end
  elif kind == "outside":
    target.symlink_to(os.path.relpath(secret, folder))
  elif kind == "dangling":
    target.symlink_to("nowhere.json")
  elif kind == "directory":
    target.mkdir()
  else:
    keep = _socket(target)
  why = {"fifo": "a FIFO", "dev_zero": "outside the checkpoint folder", "outside": "outside the checkpoint folder",
         "dangling": "does not resolve", "directory": "a directory", "socket": "a socket"}[kind]
  try:
    message = _quick(_both_readers, folder)
  finally:
    if keep is not None:
      keep.close()
  assert name in message and why in message, message


def test_index_entries_and_the_symlinks_they_name_stay_inside_the_folder(valid, tmp_path):
  folder = _copy(valid, tmp_path)
  index = json.loads((folder / cl.INDEX_FILE).read_text())
  shard = next(iter(index["weight_map"].values()))
  outside = tmp_path / "elsewhere.safetensors"
  shutil.move(folder / shard, outside)
  (folder / "inner.safetensors").symlink_to(outside)
  index["weight_map"] = {k: "inner.safetensors" if v == shard else v for k, v in index["weight_map"].items()}
  (folder / cl.INDEX_FILE).write_text(json.dumps(index))
  assert "outside the checkpoint folder" in _quick(cl.open_checkpoint, folder)
  index["weight_map"] = {k: "../elsewhere.safetensors" for k in index["weight_map"]}
  (folder / cl.INDEX_FILE).write_text(json.dumps(index))
  assert "expected a plain file name" in _quick(cl.open_checkpoint, folder)


@pytest.mark.parametrize("name", ["a\nb.safetensors", "\x1b]0;owned\x07.safetensors", "\u200b.safetensors",
                                  "x" * 5000 + ".safetensors", "\u00e9" * 128 + ".safetensors"])
def test_index_names_that_no_file_system_or_terminal_takes_are_refused(valid, tmp_path, name):
  """A shard name reaches the one-line error messages and the terminal: a newline, a terminal escape,
  an invisible character or a name longer than a file name may be (255 bytes) is refused, named short."""
  folder = _copy(valid, tmp_path)
  index = json.loads((folder / cl.INDEX_FILE).read_text())
  index["weight_map"][next(iter(index["weight_map"]))] = name
  (folder / cl.INDEX_FILE).write_text(json.dumps(index))
  message = _quick(cl.open_checkpoint, folder)
  assert "is not allowed: expected a plain file name" in message and "\x1b" not in message, message


def _first_shard(folder):
  return sorted(set(json.loads((folder / cl.INDEX_FILE).read_text())["weight_map"].values()))[0]


@pytest.mark.parametrize("swap", ["symlink_out", "fifo", "parent_moved"])
def test_a_file_swapped_between_its_check_and_its_open_is_refused(valid, tmp_path, monkeypatch, swap):
  """The check (:func:`cf.require`) and the open are two steps: whatever is swapped in between (a link
  out of the folder, a FIFO that would block the open, the folder itself replaced by a link elsewhere)
  is caught on the open descriptor, never read."""
  folder = _copy(valid, tmp_path)
  shard = _first_shard(folder)
  outside = tmp_path / "outside"
  outside.mkdir()
  real_require = cf.require

  def require(f, name, what):
    path = real_require(f, name, what)
    if name == shard:
      if swap == "symlink_out":
        shutil.copy(folder / shard, outside / shard)
        (folder / shard).unlink()
        (folder / shard).symlink_to(outside / shard)
      elif swap == "fifo":
        (folder / shard).unlink()
        os.mkfifo(folder / shard)
      else:  # the checked folder's path now leads elsewhere, to a copy holding the same names
        shutil.copytree(folder, outside / "copy")
        folder.rename(tmp_path / "moved")
        folder.symlink_to(outside / "copy")
    return path

  monkeypatch.setattr(cf, "require", require)
  message = _quick(cl.open_checkpoint, folder)
  assert shard in message, message
  assert {"symlink_out": "changed while being opened", "fifo": "a FIFO",
          "parent_moved": "outside the checkpoint folder"}[swap] in message, message


def test_a_shard_replaced_after_its_header_was_read_is_refused(valid, tmp_path):
  """The weights are read long after the headers were checked: a shard replaced meanwhile (another file
  under the same name) is refused, never read with the old header's offsets."""
  from daca_jax.models.hf_import import checkpoint_config

  folder = _copy(valid, tmp_path)
  files = cl.open_checkpoint(folder)
  shard = _first_shard(folder)
  shutil.copy(folder / shard, tmp_path / "other")
  os.replace(tmp_path / "other", folder / shard)
  cfg, family, _ = checkpoint_config(files)
  assert "replaced since its header was read" in _quick(cl.load_params, files, cfg, family)


def _header_file(path, header, data=b""):
  raw = json.dumps(header).encode()
  path.write_bytes(len(raw).to_bytes(8, "little") + raw + data)


@pytest.mark.parametrize("spec,match", [
    ({"dtype": ["F32"], "shape": [1], "data_offsets": [0, 4]}, r"unknown dtype \['F32'\]"),
    ({"dtype": {"F32": 1}, "shape": [1], "data_offsets": [0, 4]}, r"unknown dtype"),
    ({"dtype": "F32", "shape": [2**64, 2**64, 0], "data_offsets": [0, 4]}, r"needs 0"),
    ({"dtype": "F32", "shape": [2**40, 2**40], "data_offsets": [0, 4]}, r"needs \d+"),
])
def test_safetensors_header_fields_of_any_json_type_are_one_line(tmp_path, spec, match):
  from daca_jax.models.safetensors_file import read_header

  _header_file(tmp_path / "x.safetensors", {"t": spec}, b"\0" * 4)
  assert re.search(match, _quick(read_header, tmp_path / "x.safetensors")), match


def test_headers_are_bounded_per_file_and_per_folder(valid, tmp_path, monkeypatch):
  """A header is parsed into objects of ~1 kB per tensor, and an index may name thousands of shards
  (links to one file): the tensor count of a file is checked on its bytes before parsing, and the
  headers of all shards together are held to one header's bounds."""
  from daca_jax.models import safetensors_file

  monkeypatch.setattr(safetensors_file, "MAX_TENSORS", 10)
  many = {f"t{i}": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]} for i in range(11)}
  _header_file(tmp_path / "many.safetensors", many)
  assert "more than 10 tensors in one file" in _quick(safetensors_file.read_header, tmp_path / "many.safetensors")

  monkeypatch.undo()
  monkeypatch.setattr(cl, "MAX_HEADER_BYTES", 100_000)
  folder = _copy(valid, tmp_path)
  _header_file(folder / "big.safetensors", {"__metadata__": {"pad": "x" * 40_000}})
  index = json.loads((folder / cl.INDEX_FILE).read_text())
  for i in range(5):
    (folder / f"s{i}.safetensors").symlink_to("big.safetensors")
    index["weight_map"][f"pad{i}"] = f"s{i}.safetensors"
  (folder / cl.INDEX_FILE).write_text(json.dumps(index))
  assert "shards' headers hold more than 100000 bytes" in _quick(cl.open_checkpoint, folder)


# --- sizes and nesting ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name,limit", [("config.json", cf.MAX_JSON_BYTES), ("tokenizer.json", cf.MAX_TOKENIZER_BYTES),
                                        ("tokenizer_config.json", cf.MAX_JSON_BYTES)])
def test_an_oversize_file_is_refused_before_it_is_read(valid, tmp_path, name, limit):
  folder = _copy(valid, tmp_path)
  with open(folder / name, "r+b") as f:
    f.truncate(limit + 1)  # sparse: claims the size without holding it
  before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  message = _quick(_both_readers, folder)
  assert f"{limit + 1} bytes, more than the {limit}" in message and name in message
  assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 50_000  # kB: nothing was read


@pytest.mark.parametrize("name", ["config.json", "tokenizer_config.json", "special_tokens_map.json",
                                  cl.INDEX_FILE])
@pytest.mark.parametrize("body,match", [("[" * 100_000 + "]" * 100_000, r"nested too deeply|more than 32 levels"),
                                        ('{"a": ' * 40 + "1" + "}" * 40, r"more than 32 levels deep"),
                                        ("[1, 2]", r"a JSON list, expected an object"),
                                        ('{"a": NaN}', r"non-finite number NaN"),
                                        ('{"a": 1, "a": 2}', r"duplicate key 'a'")])
def test_malformed_json_files_are_one_line(valid, tmp_path, name, body, match):
  folder = _copy(valid, tmp_path)
  (folder / name).write_text(body)
  message = _quick(_both_readers, folder)
  assert name in message
  assert re.search(match, message), message


# --- config.json fields: type and range ------------------------------------------------------------------


@pytest.mark.parametrize("field,value,match", [
    ("architectures", 7, r"config\.json:architectures=7 .*a list of class names"),
    ("model_type", ["llada"], r"config\.json:model_type=\['llada'\] .*a string"),
    ("attention_dropout", "0.1", r"config\.json:attention_dropout='0.1' .*a probability in \[0, 1\]"),
    ("residual_dropout", 2.0, r"config\.json:residual_dropout=2\.0 .*a probability"),
    ("mask_token_id", -1, r"config\.json:mask_token_id=-1 .*a token id"),
    ("mask_token_id", 2**64, r"config\.json:mask_token_id=18446744073709551616 .*a token id"),
    ("eos_token_id", "x", r"config\.json:eos_token_id='x'"),
    ("rope", 1, r"config\.json:rope=1 .*true or false"),
    ("max_sequence_length", 10**30, r"config\.json:max_sequence_length=.* a positive integer"),
    ("init_std", "big", r"config\.json:init_std='big' .*a finite number > 0"),
    ("precision", {"a": 1}, r"config\.json:precision=\{'a': 1\} .*a JSON scalar"),
])
def test_config_fields_of_the_wrong_type_or_range_name_the_field(valid, tmp_path, field, value, match):
  folder = _copy(valid, tmp_path)
  _edit_json(folder / "config.json", **{field: value})
  assert re.search(match, _quick(load_hf_checkpoint, folder))


@pytest.mark.parametrize("family", ["llada", "dream"])
def test_a_config_with_fewer_layers_than_the_weights_is_refused(valid, tmp_path, family):
  folder = _copy(valid, tmp_path, family)
  _edit_json(folder / "config.json", **{_N_LAYERS[family]: 1})
  message = _quick(load_hf_checkpoint, folder)
  assert f"config.json:{_N_LAYERS[family]}=1, but the checkpoint holds tensors of layer 1" in message


def test_the_tokenizer_files_fields_are_checked(valid, tmp_path):
  folder = _copy(valid, tmp_path)
  _edit_json(folder / "tokenizer_config.json", eos_token=["<|endoftext|>"])
  assert "tokenizer_config.json:eos_token" in _quick(HFTokenizer.from_checkpoint, folder)
  folder = _copy(valid, tmp_path / "b")
  _edit_json(folder / "tokenizer_config.json", added_tokens_decoder={"99999999999999999999": {"content": "x"}})
  assert "added_tokens_decoder entry" in _quick(HFTokenizer.from_checkpoint, folder)
  folder = _copy(valid, tmp_path / "c")
  _edit_json(folder / "config.json", mask_token_id=-5)
  assert "config.json" in _quick(HFTokenizer.from_checkpoint, folder)


def _rewrite_vocab(path, token_id):
  """tokenizer.json with one token's id replaced."""
  data = json.loads(path.read_text())
  vocab = data["model"]["vocab"]
  vocab[next(iter(vocab))] = token_id
  path.write_text(json.dumps(data))


@pytest.mark.parametrize("token_id,match", [(-3, r"not a tokenizer the 'tokenizers' library can read"),
                                            (2**32 - 2, r"token id 4294967294 is not allowed"),
                                            (2**40, r"not a tokenizer the 'tokenizers' library can read")])
def test_vocabulary_ids_out_of_range_are_refused_without_allocating(valid, tmp_path, token_id, match):
  folder = _copy(valid, tmp_path)
  _rewrite_vocab(folder / "tokenizer.json", token_id)
  before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  for reader in (HFTokenizer.from_checkpoint, load_hf_checkpoint):
    message = _quick(reader, folder)
    assert "tokenizer.json" in message and re.search(match, message), message
  assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000  # kB: no 4 GB id table


def test_slow_tokenizer_vocab_ids_are_checked(tmp_path):
  from tests import hf_fixtures

  folder = hf_fixtures.write_tokenizer_files(tmp_path / "dream", "dream")
  vocab = json.loads((folder / "vocab.json").read_text())
  vocab[next(iter(vocab))] = -1
  (folder / "vocab.json").write_text(json.dumps(vocab))
  assert "vocab.json: token id -1 is not allowed" in _quick(HFTokenizer.from_checkpoint, folder)


# --- chat templates: untrusted programs ----------------------------------------------------------------


@pytest.mark.parametrize("template,match", [
    ("{% set s = 'x' * 100000 %}{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}", r"runs longer than"),
    ("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}", r"runs longer than"),
    ("{% for a in range(100000) %}{{ 'x' * 100000 }}{% endfor %}", r"renders more than 1000000 characters"),
    ("{{ 'x' * 10**10 }}", r"repeats a value to more than"),
    ("{{ 'x'.ljust(10**9) }}{{ 'x'|center(10**9) }}", r"passes 1000000000 to a function"),
    ("{{ 10 ** (10 ** 10) }}", r"an integer of more than 4096 bits"),
    ("{% set ns = namespace(s='xx') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
     r"builds a value of more than"),
    ("{{ raise_exception('only user and assistant roles') }}", r"TemplateError: only user and assistant roles"),
    ("{{ messages[0].content.nope.deeper }}", r"UndefinedError"),
    ("{{ messages.__class__.__mro__ }}", r"the sandbox refused an operation"),
    ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", r"recurses deeper"),
    ("{% for m in messages recursive %}{{ loop([m]) }}{% endfor %}", r"recurses deeper"),
    ("{% for %}", r"line 1: .*not a valid Jinja template"),
    ("{{ 1 / 0 }}", r"ZeroDivisionError"),
])
@pytest.mark.parametrize("where", ["chat_template.jinja", "tokenizer_config.json"])
def test_a_chat_template_that_fails_loops_or_floods_is_stopped_and_named(valid, tmp_path, monkeypatch, template,
                                                                          match, where):
  monkeypatch.setattr(chat, "MAX_RENDER_SECONDS", 0.3)
  folder = _copy(valid, tmp_path)
  if where == "chat_template.jinja":
    (folder / where).write_text(template)
  else:
    _edit_json(folder / where, chat_template=template)
  message = _quick(HFTokenizer.from_checkpoint, folder, seconds=3.0)
  assert f"{where}" in message and "the chat template is refused" in message
  assert re.search(match, message), message


_LONG = "{% set s = 'x' * 999999 %}"


@pytest.mark.parametrize("template", [
    # one operation whose result is the product of its inputs' sizes
    "{{ '%999999999d' % 1 }}", "{{ '{:>999999999}'.format(1) }}", "{{ '%999999999s'|format('x') }}",
    _LONG + "{{ s|replace('', s) }}", _LONG + "{{ s.replace('x', s) }}",
    "{% set s = 'x\n' * 400000 %}{{ s|indent(999999) }}", "{{ ('\t' * 999999).expandtabs(999999) }}",
    "{{ ('x ' * 499999)|wordwrap(1, wrapstring='x' * 999999) }}",
    # a container holding one long string many times: its join / string / tojson is the product
    _LONG + "{{ ([s] * 999999)|join }}", _LONG + "{{ ''.join([s] * 999999) }}",
    _LONG + "{{ ([s] * 999)|string }}", _LONG + "{{ [s, s, s, s, s, s]|tojson }}", _LONG + "{{ [s, s, s] }}",
    # concatenation and text built outside the output check
    _LONG + "{{ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s }}",
    _LONG + "{% set t %}{% for i in range(100000) %}{{ s }}{% endfor %}{% endset %}{{ t|length }}",
    _LONG + "{% macro f() %}{% for i in range(100000) %}{{ s }}{% endfor %}{% endmacro %}{{ f()|length }}",
    # memory kept across loop items (each item within the bounds)
    "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] * 999999 %}{% endfor %}",
    "{% set ns = namespace(p=none) %}{% for i in range(100000) %}{% set ns.p = namespace(p=ns.p, s='x' * 999999) %}"
    "{% endfor %}",
    "{% set ns = namespace(d={}) %}{% for i in range(100000) %}{% set ns.d = dict(ns.d, **{('k' ~ i): 'x' * 999999}) %}"
    "{% endfor %}",
    "{% set ns = namespace(n=2) %}{% for i in range(100) %}{% set ns.n = ns.n * ns.n %}{% endfor %}",
    # Jinja's lorem-ipsum global loops in Python for minutes, out of the time bound's reach
    "{{ lipsum(10**6) }}",
])
def test_a_chat_template_cannot_allocate_past_its_bounds(template):
  """Every value a template builds is bounded by what it holds through nested containers (a list of one
  long string repeated is as long as its join), and an operation whose inputs promise a huge result is
  refused before it runs: one line, a fraction of a second, a few MB."""
  import tracemalloc

  t = chat.ChatTemplate(template, {"bos_token": "<s>"}, origin="/ckpt/chat_template.jinja")
  tracemalloc.start()
  try:
    message = _quick(t.user_turn, "Hello", seconds=4.0)  # tracemalloc slows the walks
    peak = tracemalloc.get_traced_memory()[1]
  finally:
    tracemalloc.stop()
  assert message.startswith("/ckpt/chat_template.jinja: the chat template is refused: "), message
  assert peak < 100 * 2**20, (peak, message)


def test_a_released_template_renders_well_inside_the_bounds(valid):
  tok = HFTokenizer.from_checkpoint(valid["dream"])
  t0 = time.monotonic()
  text = tok.chat_template.user_turn("What is 2 + 3?" * 200)
  assert time.monotonic() - t0 < 0.1 and "What is 2 + 3?" in text


# --- what must still load ----------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["llada", "dream"])
@pytest.mark.parametrize("shards", [1, 2])
def test_valid_folders_with_in_folder_symlinks_still_load(tmp_path, family, shards):
  folder = tiny_checkpoint(tmp_path / "src", family, shards=shards)
  blobs = folder / "blobs"
  blobs.mkdir()
  for name in ("config.json", "tokenizer.json"):
    shutil.move(folder / name, blobs / name)
    (folder / name).symlink_to(pathlib.Path("blobs") / name)
  HFTokenizer.from_checkpoint(folder)
  cfg, _, params, report = load_hf_checkpoint(folder)
  assert report.family == family and cfg.n_layers == 2


def test_a_hub_cache_snapshot_reads_its_blobs(tmp_path):
  """The hub cache's layout: ``snapshots/<rev>/<file>`` links to ``../../blobs/<hash>``."""
  repo = tmp_path / "hub" / "models--org--tiny"
  source = tiny_checkpoint(tmp_path / "plain", "dream", shards=1)
  snapshot = repo / "snapshots" / "abc123"
  (repo / "blobs").mkdir(parents=True)
  snapshot.mkdir(parents=True)
  for i, p in enumerate(sorted(source.iterdir())):
    shutil.copy(p, repo / "blobs" / f"blob{i}")
    (snapshot / p.name).symlink_to(f"../../blobs/blob{i}")
  HFTokenizer.from_checkpoint(snapshot)
  assert load_hf_checkpoint(snapshot)[3].family == "dream"
  assert {e.kind for e in cf.entries(snapshot)} == {"file"}


# --- the command line: one line, exit 2 -------------------------------------------------------------------


def test_evaluate_refuses_a_hostile_folder_in_one_line_with_exit_2(valid, tmp_path):
  folder = _copy(valid, tmp_path)
  (folder / "tokenizer.json").unlink()
  _fifo(folder / "tokenizer.json")
  cmd = [sys.executable, str(ROOT / "experiments" / "evaluate.py"), f"--hf_checkpoint={folder}",
         f"--output_dir={tmp_path / 'out'}", "--tasks=sudoku4x4"]
  run = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu"))
  assert run.returncode == 2, run.stderr
  last = run.stderr.strip().splitlines()[-1]
  assert last.startswith("error: ") and "tokenizer.json: a FIFO" in last and "Traceback" not in run.stderr


def test_train_refuses_a_hostile_folder_in_one_line_with_exit_2(valid, tmp_path):
  folder = _copy(valid, tmp_path)
  (folder / "config.json").write_text("[" * 100_000 + "]" * 100_000)
  cmd = [sys.executable, str(ROOT / "experiments" / "train.py"), "--config=configs/sudoku_tiny.py:smoke",
         f"--config.model.init_checkpoint={folder}", f"--workdir={tmp_path / 'wd'}", "--progress=false"]
  run = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu"))
  assert run.returncode == 2, run.stderr
  last = run.stderr.strip().splitlines()[-1]
  assert last.startswith("error: ") and "config.json" in last and "Traceback" not in run.stderr
