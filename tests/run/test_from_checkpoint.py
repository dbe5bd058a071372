"""RL from a Hugging Face checkpoint (``model.init_checkpoint``): the architecture from config.json and
contradictions named, the tokenizer from the folder, the weights as the initial policy (bitwise the
loader's), SFT skipped, checkpoints, a resumed run equal to an uninterrupted one, refusals of a changed
checkpoint, FSDP shards read straight from the files on 8 simulated devices, and experiments/train.py."""
import dataclasses
import json
import os
import pathlib
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest
from flax import nnx

from configs import sudoku_tiny
from daca_jax.config.configure import train_config_from_dict
from daca_jax.errors import ConfigError, DataError
from daca_jax.models import lora, make_logits_fn
from daca_jax.models.hf_import import ARCHITECTURE_FIELDS, RUN_FIELDS, load_hf_checkpoint
from daca_jax.run import from_checkpoint
from daca_jax.run.checkpoint import load_pytree
from daca_jax.run.eval_models import model_from_workdir
from daca_jax.run.metrics import read_metrics
from daca_jax.run.pipeline import run_main_job
from daca_jax.config.model import ModelConfig
from tests.run.hf_checkpoint_fixture import tiny_checkpoint
from tests.run.interrupt import run_preempted_after

REPO = pathlib.Path(__file__).resolve().parents[2]
ARCH = {"d_model": 128, "n_layers": 4, "n_heads": 4, "mlp_dim": 384}  # ModelConfig's (base.py's) defaults


def _cfg(ckpt, **fields):
  """The Sudoku smoke run (plain prompts, d1's estimator and credit: the cheapest compile) from
  ``ckpt`` with LoRA; ``fields``: ``section__name=value`` overrides."""
  c = sudoku_tiny.get_config("smoke")
  c.model.update(ARCH)  # the smoke preset's tiny sizes would contradict the checkpoint: unset them
  c.model.init_checkpoint = str(ckpt)
  c.model.lora_rank, c.model.lora_alpha, c.model.lora_dropout = 4, 8.0, 0.05
  c.rl.credit, c.rl.likelihood = "uniform", "mean_field"
  c.rl.steps, c.checkpoint.every = 2, 2
  c.sft.num_train_examples, c.task.num_eval_examples, c.eval.batch_size = 40, 8, 8
  for dotted, v in fields.items():
    *sections, name = dotted.split("__")
    node = c
    for s in sections:
      node = node[s]
    node[name] = v
  return train_config_from_dict(c)


def test_architecture_and_run_fields_partition_the_model_config():
  names = [f.name for f in dataclasses.fields(ModelConfig)]
  assert sorted(ARCHITECTURE_FIELDS + RUN_FIELDS) == sorted(names)
  assert not set(ARCHITECTURE_FIELDS) & set(RUN_FIELDS)


@pytest.mark.parametrize("family", ["llada", "dream"])
def test_resolve_takes_the_architecture_and_keeps_the_runs_choices(tmp_path, family):
  ckpt = tiny_checkpoint(tmp_path / "c", family)
  cfg, start = from_checkpoint.resolve_config(
      _cfg(ckpt, model__param_dtype="bfloat16", model__remat="full", model__logprob_chunk=4), log=lambda _: None)
  m = cfg.model
  assert (m.d_model, m.n_layers, m.n_heads, m.n_kv_heads, m.mlp_dim, m.vocab_size, m.mask_token_id) == (
      32, 2, 4, 2, 64, 48, 47)
  assert (m.shift_logits, m.qkv_bias, m.left_pad_id) == ((True, True, 45) if family == "dream" else (False, False, -1))
  assert (m.param_dtype, m.remat, m.logprob_chunk, m.lora_rank, m.lora_dropout) == ("bfloat16", "full", 4, 4, 0.05)
  assert m.init_checkpoint == str(ckpt.resolve()) and start.family == family
  assert (start.tokenizer.mask_id, start.tokenizer.eos_id) == (47, 46 if family == "llada" else 45)
  # a field set to the checkpoint's own value is no contradiction
  same, _ = from_checkpoint.resolve_config(_cfg(ckpt, model__n_layers=2, model__n_heads=4), log=lambda _: None)
  assert same.model == m.__class__(**{**dataclasses.asdict(m), "param_dtype": "float32", "remat": "none",
                                      "logprob_chunk": 0})


@pytest.mark.parametrize("family,field,value,source", [
    ("llada", "d_model", 64, r"config\.json:d_model"), ("llada", "n_layers", 3, r"config\.json:n_layers"),
    ("llada", "vocab_size", 100, r"config\.json:embedding_size"),
    ("llada", "mask_token_id", 5, r"config\.json:mask_token_id"),
    ("llada", "qkv_bias", True, r"config\.json:include_qkv_bias"),
    ("llada", "shift_logits", True, r"config\.json:model_type \(LLaDA reads position i's logits at i\)"),
    ("llada", "vocab_limit", 40, r"tokenizer\.json \(its largest id \+ 1\)"),
    ("dream", "d_model", 64, r"config\.json:hidden_size"), ("dream", "n_kv_heads", 4, r"config\.json:num_key_value_heads"),
    ("dream", "left_pad_id", 3, r"config\.json:pad_token_id"), ("dream", "rope_theta", 5.0, r"config\.json:rope_theta"),
    ("dream", "tie_embeddings", True, r"config\.json:tie_word_embeddings"),
])
def test_a_contradicting_model_field_names_both(tmp_path, family, field, value, source):
  ckpt = tiny_checkpoint(tmp_path / "c", family)
  with pytest.raises(ConfigError, match=rf"model\.{field}={value!r} is not allowed: expected .*, which {source} "
                                        rf"of model\.init_checkpoint={ckpt}") as e:
    run_main_job(_cfg(ckpt, **{f"model__{field}": value}), tmp_path / "wd", log=lambda _: None)
  assert "leave model." in str(e.value)
  assert not (tmp_path / "wd").exists()  # refused before any work


def test_missing_and_mismatched_tokenizer(tmp_path):
  ckpt = tiny_checkpoint(tmp_path / "c", "llada")
  (ckpt / "tokenizer.json").unlink()
  with pytest.raises(DataError, match=r"the tokenizer files are missing: tokenizer\.json"):
    from_checkpoint.resolve_config(_cfg(ckpt), log=lambda _: None)
  # Dream's tokenizer files name the mask token (LLaDA's take it from config.json's mask_token_id)
  ckpt = tiny_checkpoint(tmp_path / "d", "dream", mask_token_id=44)
  with pytest.raises(DataError, match=r"tokenizer\.json: the mask token has id 47, but config\.json:mask_token_id is 44"):
    from_checkpoint.resolve_config(_cfg(ckpt), log=lambda _: None)
  ckpt = tiny_checkpoint(tmp_path / "e", "dream", pad_token_id=40)
  with pytest.raises(DataError, match=r"the padding token has id 45, but config\.json:pad_token_id is 40"):
    from_checkpoint.resolve_config(_cfg(ckpt), log=lambda _: None)
  with pytest.raises(DataError, match=r"nowhere: not a directory"):
    run_main_job(_cfg(tmp_path / "nowhere"), tmp_path / "wd", log=lambda _: None)


@pytest.mark.parametrize("family", ["llada", "dream"])
def test_initial_policy_is_the_checkpoint(tmp_path, family):
  ckpt = tiny_checkpoint(tmp_path / "c", family)
  cfg, start = from_checkpoint.resolve_config(_cfg(ckpt), log=lambda _: None)
  gd, params = from_checkpoint.initial_params(cfg, start, None, log=lambda _: None)
  _, hf_gd, hf_params, _ = load_hf_checkpoint(ckpt)
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(hf_params)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  policy = lora.lora_params(params, lora.init_lora(cfg.model, jax.random.key(0)))
  tokens = np.random.default_rng(0).integers(0, 44, (2, 9)).astype(np.int32)
  np.testing.assert_array_equal(np.asarray(lora.make_lora_logits_fn(gd)(policy, tokens)),
                                np.asarray(make_logits_fn(hf_gd)(hf_params, tokens)))


def _state(workdir, step):
  return load_pytree(workdir / "rl" / str(step) / "state", None)


def _run(cfg, workdir, lines=None):
  return run_main_job(cfg, workdir, show_progress=False, log=(lambda m: lines.append(str(m))) if lines is not None
                      else (lambda _: None))


def _resumed_equals_uninterrupted(tmp_path, family):
  """A run from a ``family`` checkpoint: SFT skipped, the frozen base bitwise the checkpoint, adapters
  trained; stopped after 2 iterations and resumed to 4, it equals the run of 4 done at once."""
  ckpt = tiny_checkpoint(tmp_path / "ckpt", family)
  straight, split = tmp_path / "straight", tmp_path / "split"
  lines = []
  run_preempted_after(2, _run, _cfg(ckpt, rl__steps=4), split, lines)  # its checkpoint of iteration 2 written
  text = "\n".join(lines)
  assert f"Model: {family} checkpoint {ckpt.resolve()}" in text and "SFT warm start skipped" in text
  assert not (split / "sft").exists() and (split / "rl" / "2").is_dir()
  recorded = json.loads((split / "config.json").read_text())["model"]
  assert recorded["init_checkpoint"] == str(ckpt.resolve()) and recorded["d_model"] == 32
  record = json.loads((split / "init_checkpoint.json").read_text())  # what the export checks
  assert record["path"] == str(ckpt.resolve()) and "model.safetensors.index.json" in record["files"]
  saved = _state(split, 2)["params"]
  assert set(saved) == {"lora"}  # the frozen base is the checkpoint folder's: not stored again
  assert max(float(np.abs(np.asarray(x["b"])).max()) for x in saved["lora"].values()) > 0  # trained
  # Evaluation rebuilds the policy from the folder and the adapters: the base stays the checkpoint.
  _, _, hf_params, _ = load_hf_checkpoint(ckpt)
  model = model_from_workdir(split)
  for a, b in zip(jax.tree.leaves(model.params["base"]), jax.tree.leaves(hf_params)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert model.tokenizer.mask_id == 47 and model.params["lora"].keys() == saved["lora"].keys()
  records = read_metrics(split / "metrics.jsonl")
  assert min(r["zero_std_groups"] for r in records) < 1.0, "no reward spread: the run trained on nothing"
  resumed = []
  _run(_cfg(ckpt, rl__steps=4), split, resumed)
  assert "RL: resuming from iteration 2." in resumed
  _run(_cfg(ckpt, rl__steps=4), straight)
  a, b = _state(straight, 4), _state(split, 4)
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  m1, m2 = read_metrics(straight / "metrics.jsonl"), read_metrics(split / "metrics.jsonl")
  assert [r["step"] for r in m2] == [1, 2, 3, 4]
  for r1, r2 in zip(m1, m2):
    for k in ("reward_mean", "loss", "kl", "grad_norm"):
      assert r1[k] == r2[k], (k, r1, r2)
  res1, res2 = (json.loads((d / "results.json").read_text()) for d in (straight, split))
  assert res1["eval_after"] == res2["eval_after"]
  return ckpt, split


def test_llada_run_resumes_exactly_and_refuses_another_checkpoint(tmp_path):
  ckpt, workdir = _resumed_equals_uninterrupted(tmp_path, "llada")
  # another checkpoint folder (even a copy) is another run
  other = shutil.copytree(ckpt, tmp_path / "copy")
  with pytest.raises(ConfigError, match=r"model\.init_checkpoint=.*copy.* as in the run already in --workdir"):
    _run(_cfg(other, rl__steps=4), workdir)
  # the same folder whose files changed since the run started
  shard = ckpt / "model-00001-of-00002.safetensors"
  from safetensors.numpy import load_file, save_file
  tensors = load_file(str(shard))
  save_file({k: v.astype(np.float16) for k, v in tensors.items()}, str(shard))
  with pytest.raises(DataError, match=r"is not the folder the run started from .*changed: "
                                      r"\['model-00001-of-00002\.safetensors'\]"):
    _run(_cfg(ckpt, rl__steps=4), workdir)


@pytest.mark.slow
def test_dream_run_resumes_exactly(tmp_path):
  _resumed_equals_uninterrupted(tmp_path, "dream")


@pytest.mark.slow  # the LoRA run above covers the pipeline; this adds the full fine-tuning branch
def test_full_fine_tuning_states_the_reference_copy(tmp_path):
  ckpt = tiny_checkpoint(tmp_path / "c", "llada")
  lines = []
  _run(_cfg(ckpt, model__lora_rank=0, model__lora_dropout=0.0, rl__steps=1, rl__lr_schedule="constant",
            checkpoint__every=1), tmp_path / "wd", lines)
  note = [l for l in lines if l.startswith("Full fine-tuning")]
  n_bytes = sum(np.asarray(x).nbytes for x in jax.tree.leaves(load_hf_checkpoint(ckpt)[2]))
  assert note and f"{n_bytes / 2**30:.2f} GiB" in note[0], lines
  saved = _state(tmp_path / "wd", 1)["params"]
  _, _, hf_params, _ = load_hf_checkpoint(ckpt)
  assert any(float(np.abs(np.asarray(a) - np.asarray(b)).max()) > 0
             for a, b in zip(jax.tree.leaves(saved), jax.tree.leaves(nnx.to_pure_dict(hf_params))))


# --- FSDP on 8 simulated devices: each device's shard read straight from the files --------------------

_FSDP_CHILD = r"""
import json, pathlib, sys, tracemalloc
import jax, ml_dtypes, numpy as np
from flax import nnx
from safetensors.numpy import load_file
from daca_jax import parallel
from daca_jax.models.checkpoint_loader import NAME_MAPS, open_checkpoint
from daca_jax.models.hf_import import checkpoint_config
from daca_jax.run import from_checkpoint
from daca_jax.config.parallel import ParallelConfig
from daca_jax.config.train import TrainConfig
ckpt = pathlib.Path(sys.argv[1])
files = open_checkpoint(ckpt)
model, family, _ = checkpoint_config(files, param_dtype="bfloat16")
cfg = TrainConfig(model=model, parallel=ParallelConfig(strategy="fsdp", fsdp=8))
mesh = parallel.make_mesh(cfg.parallel)
start = from_checkpoint.CheckpointStart(files, family, None)
tracemalloc.start()  # numpy's buffers are traced: the host side of the load
gd, params = from_checkpoint.initial_params(cfg, start, mesh, log=lambda _: None)
kept, peak = tracemalloc.get_traced_memory()  # on CPU the devices' arrays may alias numpy buffers (kept)
tracemalloc.stop()
oracle = {}
for shard in ckpt.glob("*.safetensors"):
  oracle.update(load_file(str(shard)))
pure = nnx.to_pure_dict(params)
checked, sharded, leaf_bytes = 0, 0, []
for key, template, transpose in NAME_MAPS[family]:
  node = pure
  for k in key:
    node = node.get(k) if isinstance(node, dict) else None
  if node is None:
    continue
  if key[0] == "layers":
    full = np.stack([oracle[template.format(i=i)].T if transpose else oracle[template.format(i=i)]
                     for i in range(model.n_layers)])
  else:
    full = oracle[template].T if transpose else oracle[template]
  assert node.dtype == ml_dtypes.bfloat16, (key, node.dtype)
  assert node.sharding.spec == parallel.fsdp_spec(full.shape, 8), (key, node.sharding.spec)
  sharded += node.sharding.spec != jax.sharding.PartitionSpec()
  leaf_bytes.append(full.size * 2)
  for s in node.addressable_shards:
    np.testing.assert_array_equal(np.asarray(s.data), full[s.index])
    checked += 1
print(json.dumps({"devices": jax.device_count(), "checked": checked, "sharded": sharded, "leaves": len(leaf_bytes),
                  "peak": peak, "kept": kept, "model_bf16": sum(leaf_bytes), "largest_leaf": max(leaf_bytes)}))
"""


def test_fsdp_each_device_reads_its_own_shard_of_the_checkpoint(tmp_path):
  from daca_jax.models.random_checkpoint import write_random_checkpoint
  from tests.models.test_hf_import import DREAM_CFG

  hf = dict(DREAM_CFG, hidden_size=128, intermediate_size=512, num_hidden_layers=16, vocab_size=1024,
            mask_token_id=1000, pad_token_id=1001)
  ckpt = write_random_checkpoint(tmp_path / "c", hf, dtype="bfloat16")
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu",
             PYTHONPATH=str(REPO))
  proc = subprocess.run([sys.executable, "-c", _FSDP_CHILD, str(ckpt)], env=env, capture_output=True,
                        text=True, timeout=300, cwd=REPO)
  assert proc.returncode == 0, proc.stderr[-3000:]
  out = json.loads(proc.stdout.strip().splitlines()[-1])
  assert out["devices"] == 8 and out["leaves"] == 15 and out["sharded"] == 15 and out["checked"] == 8 * 15
  # Beyond what the CPU "devices" keep (their arrays alias host buffers), the load held about one
  # parameter's shards at a time; and never a float32 copy of the model (twice the bf16 bytes).
  assert out["peak"] - out["kept"] < 1.5 * out["largest_leaf"] + 500_000 < 0.5 * out["model_bf16"], out
  assert out["peak"] < 1.2 * out["model_bf16"] + 1_000_000 < 2 * out["model_bf16"], out


# --- experiments/train.py --------------------------------------------------------------------------


@pytest.mark.slow
def test_train_py_runs_dream_chat_from_a_checkpoint(tmp_path):
  ckpt = tiny_checkpoint(tmp_path / "ckpt", "dream")
  cmd = [sys.executable, "experiments/train.py", "--config=configs/countdown_tiny.py:smoke", "--progress=false",
         f"--workdir={tmp_path / 'wd'}", f"--config.model.init_checkpoint={ckpt}",
         # the smoke preset's tiny sizes: set to the checkpoint's (equal values are no contradiction)
         "--config.model.n_layers=2", "--config.model.n_heads=4",
         "--config.model.lora_rank=4", "--config.model.lora_dropout=0.05", "--config.task.options.prompt_style=chat",
         "--config.rollout.gen_length=128", "--config.rollout.block_length=32", "--config.rollout.steps=8",
         "--config.rl.steps=2", "--config.rl.credit=uniform", "--config.rl.likelihood=mean_field",
         "--config.sft.num_train_examples=20", "--config.task.num_eval_examples=4", "--config.eval.batch_size=4"]
  proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "SFT warm start skipped" in proc.stdout and "LoRA: rank 4" in proc.stdout
  res = json.loads((tmp_path / "wd" / "results.json").read_text())
  assert res["config"]["model"]["shift_logits"] and res["eval_after"]["num_examples"] == 4
  gens = [json.loads(l) for l in (tmp_path / "wd" / "eval_before.generations.jsonl").read_text().splitlines()]
  assert gens[0]["prompt"].startswith("<|start_header_id|>user<|end_header_id|>")  # the chat prompt
  assert not (ckpt / "IMPORTED").exists()
  bad = subprocess.run(cmd[:5] + [f"--config.model.init_checkpoint={ckpt}", "--config.model.n_layers=3"],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
  assert bad.returncode == 2 and "model.n_layers=3 is not allowed" in bad.stderr and "config.json:num_hidden_layers" \
      in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.slow  # 2-3 min: three processes compile the FSDP steps
def test_two_process_fsdp_run_from_a_checkpoint_equals_one_process(tmp_path):
  """A LoRA run from a checkpoint, FSDP over 2 processes x 2 CPU devices (each process reads only its
  devices' shards of the weights), equals the same run in one process with 4 devices."""
  ckpt = tiny_checkpoint(tmp_path / "ckpt", "llada", dtype="bfloat16")
  flags = ["--config=configs/sudoku_tiny.py:smoke", "--progress=false", f"--config.model.init_checkpoint={ckpt}",
           "--config.model.n_layers=2", "--config.model.n_heads=4", "--config.model.lora_rank=4",
           "--config.model.param_dtype=bfloat16", "--config.parallel.strategy=fsdp", "--config.parallel.fsdp=4",
           "--config.rl.steps=2", "--config.rl.credit=uniform", "--config.rl.likelihood=mean_field",
           "--config.sft.num_train_examples=40", "--config.task.num_eval_examples=8", "--config.eval.batch_size=8"]
  cmd = [sys.executable, str(REPO / "experiments" / "train.py")] + flags
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  import socket
  with socket.socket() as s:
    s.bind(("localhost", 0))
    port = s.getsockname()[1]
  multi = dict(env, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_COORDINATOR_ADDRESS=f"localhost:{port}",
               JAX_NUM_PROCESSES="2")
  procs = [subprocess.Popen(cmd + [f"--workdir={tmp_path / 'one'}"], cwd=REPO, text=True,
                            env=dict(env, XLA_FLAGS="--xla_force_host_platform_device_count=4"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)]
  procs += [subprocess.Popen(cmd + [f"--workdir={tmp_path / 'two'}"], cwd=REPO, text=True,
                             env=dict(multi, JAX_PROCESS_ID=str(i)), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for i in range(2)]
  outs = [p.communicate(timeout=600) for p in procs]
  for p, (out, err) in zip(procs, outs):
    assert p.returncode == 0, err[-3000:]
  assert "SFT warm start skipped" in outs[1][0] and "Results written" not in outs[2][0]
  one, two = read_metrics(tmp_path / "one" / "metrics.jsonl"), read_metrics(tmp_path / "two" / "metrics.jsonl")
  assert [r["step"] for r in two] == [1, 2]
  for a, b in zip(one, two):
    assert a["reward_mean"] == b["reward_mean"]
    for k in ("loss", "kl", "grad_norm"):
      assert b[k] == pytest.approx(a[k], rel=1e-4, abs=1e-6), k
  res = {r: json.loads((tmp_path / r / "results.json").read_text()) for r in ("one", "two")}
  assert res["one"]["eval_before"] == res["two"]["eval_before"]
  assert res["one"]["eval_after"] == res["two"]["eval_after"]
