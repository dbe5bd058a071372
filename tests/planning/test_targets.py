"""Plans and preflights compiled by XLA:TPU and XLA:GPU for compile-only devices (daca_jax.planning.targets).

The compile tests need the [tpu] / [gpu] extras ([test] installs both, so CI runs them); without them
they skip with the install command. Each compile runs in a process of its own, set up as the scripts set
it up (the compiler's flags before jax is imported)."""
import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

from daca_jax.errors import ConfigError
from daca_jax.planning import targets

ROOT = pathlib.Path(__file__).resolve().parents[2]
HAS = {"tpu": importlib.util.find_spec("libtpu") is not None,
       "gpu": importlib.util.find_spec("jax_plugins.xla_cuda12") is not None}
needs = {k: pytest.mark.skipif(not v, reason=f"XLA:{k.upper()} is not installed: pip install -e '.[{k}]'")
         for k, v in HAS.items()}


def _env():
  env = dict(os.environ, PYTHONPATH=str(ROOT))
  env.pop("XLA_FLAGS", None)  # the script sets its target's own
  return env


def test_targets_are_named_and_bad_names_are_one_error():
  t = targets.target("tpu:v5p-8")
  assert (t.compiler, t.device, t.num_devices, t.topology) == ("tpu", "v5p", 4, "v5p:2x2x1")
  assert targets.target("GPU:H100x8").gpu_spec == "h100_sxm.txtpb"
  assert targets.target("cpu:16", device="v5e") == targets.Target("cpu:16", "cpu", "v5e", 16,
                                                                   source="XLA:CPU's simulated devices")
  for bad in ("tpu:v9-8", "cpu:0", "cpu:9000", "h100"):
    with pytest.raises(ConfigError, match=r"--target.*cpu:N"):
      targets.target(bad)
  # every GPU target's device description is committed, and names its device
  for t in targets.TARGETS.values():
    if t.compiler == "gpu":
      text = (targets.GPU_SPECS / t.gpu_spec).read_text()
      assert "core_count" in text and "device_memory_size" in text and "cuda_compute_capability" in text


def test_target_and_num_devices_together_are_refused(capsys, monkeypatch):
  from daca_jax.planning.simulate import simulate_devices
  monkeypatch.setenv("XLA_FLAGS", "")
  with pytest.raises(SystemExit) as info:
    simulate_devices(["--target=tpu:v5p-8", "--num_devices=4"])
  assert info.value.code == 2
  assert capsys.readouterr().err.startswith("error: --num_devices='4' is not allowed: expected unset with --target")
  with pytest.raises(SystemExit):
    simulate_devices(["--target=tpu:v7-8"])
  assert "error: --target='tpu:v7-8' is not allowed" in capsys.readouterr().err


def test_a_missing_compiler_names_the_extra(monkeypatch):
  monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
  assert "pip install -e '.[tpu]'" in targets.missing_compiler(targets.target("tpu:v5e-256"))
  assert "pip install -e '.[gpu]'" in targets.missing_compiler(targets.target("gpu:a100x8"))
  assert targets.missing_compiler(targets.target("cpu:2")) is None


_COLLECTIVES = """
import json, sys
from daca_jax.planning import targets
t = targets.target(sys.argv[1]); targets.prepare_process(t)
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
from daca_jax.planning.hlo_cost import program_cost
devs = targets.devices(t)
mesh = jax.sharding.Mesh(np.array(devs), ("fsdp",))
def f(x, w):  # w sharded over its input axis: each of 5 layers of 7 steps gathers its slice
  inner = lambda c, wi: (jnp.tanh(c @ wi), None)
  return jax.lax.scan(lambda c, _: (jax.lax.scan(inner, c, w)[0], None), x, None, length=7)[0]
x = jax.ShapeDtypeStruct((256, 512), jnp.bfloat16, sharding=NamedSharding(mesh, P("fsdp")))
w = jax.ShapeDtypeStruct((5, 512, 512), jnp.bfloat16, sharding=NamedSharding(mesh, P(None, "fsdp")))
c = jax.jit(f).lower(x, w).compile()
cost = program_cost(c, len(devs))
print(json.dumps({"n": len(devs), "coll": cost.collective_bytes, "flops": cost.flops, "counter": cost.counter,
                  "own_once": cost.own_once, "xla_once": cost.xla_once, "inferred": cost.inferred_trip_loops,
                  "loops": [t for t, _ in cost.loops]}))
"""


@pytest.mark.parametrize("name", [pytest.param("tpu:v5p-8", marks=needs["tpu"]),
                                  pytest.param("gpu:h100x8", marks=needs["gpu"])])
def test_target_programs_count_their_loops_and_collectives(name):
  r = subprocess.run([sys.executable, "-c", _COLLECTIVES, name], capture_output=True, text=True, env=_env(),
                     cwd=ROOT, timeout=300)
  assert r.returncode == 0, r.stderr[-3000:]
  got = json.loads(r.stdout.strip().splitlines()[-1])
  n = got["n"]
  assert sorted(got["loops"]) == [5, 7] and got["counter"] == "hlo_count"
  assert got["inferred"] == (2 if name.startswith("tpu") else 0)  # XLA:TPU prints no trip counts
  # 35 gathers of a 512 x 512 bf16 slice, each device receiving the other devices' (n - 1) / n
  assert got["coll"]["all-gather"] == 35 * 512 * 512 * 2 * (n - 1) / n
  # every step's product on the device's rows: 2 * (256 / n) * 512 * 512 FLOPs, 35 times
  assert got["flops"] == pytest.approx(35 * 2 * (256 // n) * 512 * 512, rel=5e-3)  # + the bf16 converts
  if got["xla_once"]:  # XLA:TPU's own count, each loop body once, against ours taken the same way
    assert got["own_once"]["flops"] == pytest.approx(got["xla_once"]["flops"], rel=1e-3)


# The smoke form of the paper's DACA preset (LoRA, SML K 4, DPS, KL) at test size and a short recipe (one
# inner update, one 32-token block in 8 steps: each extra inner update or block adds compile time, not
# coverage), with a batch that splits over 8 devices.
_SMOKE = ["--config=configs/paper.py:d1_gsm8k_daca,smoke", "--model=tiny", "--prompt_len=16",
          "--config.rl.rollout_batch=0", "--config.rl.prompts_per_step=4", "--config.rl.grad_accum=1",
          "--config.rl.num_iterations=1", "--config.rollout.gen_length=32", "--config.rollout.steps=8"]


@pytest.mark.parametrize("name", [pytest.param("tpu:v5p-8", marks=needs["tpu"]),
                                  pytest.param("gpu:h100x8", marks=needs["gpu"])])
def test_plan_of_the_smoke_preset_compiled_for_the_target(name, tmp_path):
  out = tmp_path / "plan.json"
  r = subprocess.run([sys.executable, "experiments/plan.py", *_SMOKE, f"--target={name}", f"--json={out}"],
                     capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  rec = json.loads(out.read_text())
  t = targets.target(name)
  compiler = {"tpu": "XLA:TPU", "gpu": "XLA:GPU"}[t.compiler]
  assert rec["compiler"]["compiler"] == compiler and rec["compiler"]["compile_only"]
  assert rec["compiler"]["device_kind"] == {"tpu": "TPU v5", "gpu": "NVIDIA H100 80GB HBM3"}[t.compiler]
  assert rec["setting"]["num_devices"] == t.num_devices and f"compiled by {compiler}" in r.stdout
  for prog in ("rollout", "update"):
    m = rec[prog]["memory"]
    assert m["peak_bytes"] == m["argument_bytes"] + m["output_bytes"] + m["temp_bytes"] - m["alias_bytes"] > 0
    cost = rec[prog]["cost"]
    assert cost["counter"] == "hlo_count" and cost["unknown_trip_loops"] == 0
    if cost["xla_once"]:
      assert cost["own_once"]["flops"] == pytest.approx(cost["xla_once"]["flops"], rel=0.02)
      assert cost["own_once"]["transcendentals"] == pytest.approx(cost["xla_once"]["transcendentals"], rel=0.02)
  # every loop counted: the counted FLOPs sit just above the dense-transformer count (attention, softmax and
  # norms, a quarter at this tiny width; 1-5% at LLaDA-8B's), never a loop's factor off
  for prog in ("rollout", "update"):
    ratio = rec["cost_per_device"][prog]["flops"] / rec["analytic_flops_per_device"][prog]
    assert 1.0 <= ratio <= 1.5, (prog, ratio)
  # the update's weights are gathered (FSDP), and at least once per model pass a floor counts
  traffic = rec["traffic_per_device"]["update"]
  assert traffic["by_op"]["all-gather"] > 0 and traffic["by_what"]["weights"] > 0
  assert rec["iteration_peak_bytes"] >= rec["update_peak_bytes"] > 0


@needs["tpu"]
def test_preflight_verdict_and_exit_status(tmp_path):
  # Sudoku's main job at smoke size, FSDP over the 4 chips of a v5p-8, compiled by XLA:TPU: it fits;
  # with almost no usable memory it does not, and says so in one line with exit 1.
  args = [sys.executable, "experiments/train.py", "--config=configs/sudoku_tiny.py:smoke", "--target=tpu:v5p-8",
          "--compile_only", "--config.parallel.strategy=fsdp", "--config.parallel.fsdp=4",
          "--config.rl.prompts_per_step=4"]
  r = subprocess.run(args + [f"--workdir={tmp_path / 'a'}"], capture_output=True, text=True, env=_env(), cwd=ROOT,
                     timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  assert "fits tpu:v5p-8 (XLA:TPU, 4 x TPU v5)" in r.stdout
  manifest = json.loads((tmp_path / "a" / "executables" / "manifest.json").read_text())
  assert manifest["platform"] == "tpu" and manifest["num_devices"] == 4 and set(manifest["programs"]) == {
      "rollout", "update"}
  r = subprocess.run(args + [f"--workdir={tmp_path / 'b'}", "--usable_fraction=1e-6"], capture_output=True,
                     text=True, env=_env(), cwd=ROOT, timeout=600)
  assert r.returncode == 1
  line = r.stderr.strip().splitlines()[-1]
  assert line.startswith("error: does not fit tpu:v5p-8") and "largest buffers" in line and "try " in line
  assert "Traceback" not in r.stderr


_REFUSED = """
import sys, types
from daca_jax.planning import targets
t = targets.target("tpu:v5e-8"); targets.prepare_process(t)
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
from daca_jax.errors import DoesNotFit
from daca_jax.planning.compiled import Program
mesh = jax.sharding.Mesh(np.array(targets.devices(t)), ("d",))
x = jax.ShapeDtypeStruct((8 * 80_000,), jnp.float32, sharding=NamedSharding(mesh, P("d")))
# an outer product of each chip's 80,000 values: 25.6 GB of temporaries on a 16 GB v5e chip
lowered = jax.jit(lambda v: jnp.tanh(v[:, None] * v[None, :80_000]).sum(0)).lower(x)
try:
  Program.of(lowered, types.SimpleNamespace(platform="tpu"), "update")
except DoesNotFit as e:
  print("refused:", e)
"""


@needs["tpu"]
def test_a_program_xla_tpu_refuses_for_its_memory_is_one_line_naming_it():
  r = subprocess.run([sys.executable, "-c", _REFUSED], capture_output=True, text=True, env=_env(), cwd=ROOT,
                     timeout=300)
  assert r.returncode == 0, r.stderr[-3000:]
  line = r.stdout.strip().splitlines()[-1]
  assert line.startswith("refused: the update: XLA:TPU refuses to compile it: ") and "HBM" in line
  from daca_jax.planning.report import _refused
  assert _refused("does not fit tpu:v5e-8 (8 x v5e): the update: XLA:TPU refuses to compile it: Ran out of memory "
                  "on HBM, the total memory required for HLO temporaries (16.20G) exceeds available HBM (15.75G).") \
      == "temporaries 16.20 GB > 15.75 GB of HBM"
  assert _refused("...: XLA:TPU refuses to compile it: E1000: CompileTimeHbmOom: XLA:TPU compile permanent error. Ran "
                  "out of memory in memory space hbm. Used 15.76G of 15.75G hbm.") == "15.76 GB > 15.75 GB of HBM"


def test_the_target_is_read_as_absl_reads_it_and_checked_after_parsing(monkeypatch):
  assert targets.target_from_argv(["--target=cpu:8", "-target=gpu:h100x1"]) == "gpu:h100x1"  # the last, one dash
  assert targets.target_from_argv(["--target", "tpu:v5p-8"]) == "tpu:v5p-8"
  assert targets.target_from_argv(["--targets=x"]) is None
  monkeypatch.setenv(targets.PROCESS_TARGET, "cpu:8")
  targets.check_process("CPU:8")
  with pytest.raises(ConfigError, match="cpu:8, the target this process was set up for"):
    targets.check_process("gpu:h100x8")
  monkeypatch.delenv(targets.PROCESS_TARGET)
  with pytest.raises(ConfigError, match="a --target given on the command line"):
    targets.check_process("gpu:h100x8")
  with pytest.raises(ConfigError):  # a non-ASCII digit is not a device count
    targets.target("cpu:\u0662")


def test_a_flag_plan_on_a_cpu_target_uses_its_devices(tmp_path):
  # --target=cpu:2 without --config planned for the --num_devices default (8) and failed
  out = tmp_path / "p.json"
  r = subprocess.run([sys.executable, "experiments/plan.py", "--model=tiny", "--layers=1", "--target=cpu:2",
                      "--prompt_len=4", "--gen_length=8", "--block_length=8", "--steps=2", "--prompts_per_step=2",
                      "--group_size=2", f"--json={out}"], capture_output=True, text=True, env=_env(), cwd=ROOT,
                     timeout=300)
  assert r.returncode == 0, r.stderr[-3000:]
  assert json.loads(out.read_text())["setting"]["num_devices"] == 2
