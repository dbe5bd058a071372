"""experiments/plan.py's library (daca_jax/planning): the plan's memory equals the compiled program's,
the analytic parameter count equals the model's, and bad input fails before any compile."""
import dataclasses
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

from daca_jax.measure import benchmarking as bm
from daca_jax.config import configure
from daca_jax.errors import ConfigError
from daca_jax.models import count_params, init_model, lora
from configs import paper
from daca_jax.planning import analytic, plan, spec as plan_spec
from daca_jax.planning.compiled import EOS_ID
from daca_jax.rl.learner import GRPOLearner
from daca_jax.config.model import tiny_config as tiny_model
from daca_jax.models.llada import make_logits_fn

ROOT = pathlib.Path(__file__).resolve().parents[2]
# One device (strategy none), one layer, a short rollout: the whole plan compiles in seconds.
TINY = dict(model="tiny", layers=1, device="v5e", num_devices=1, method="d1", strategy="none", prompts_per_step=2,
            group_size=2, prompt_len=4, gen_length=8, block_length=8, steps=2)
BATCH, PROMPT_LEN = 4, 4


def tiny_config(**change):
  """The TrainConfig of TINY (with ``change``)."""
  flags = {k: v for k, v in {**TINY, **change}.items() if k not in ("device", "prompt_len")}
  return plan_spec.flag_config(paper.get_config, **flags)


@pytest.mark.parametrize("cfg", [
    tiny_model(), tiny_model(n_kv_heads=2, tie_embeddings=True), tiny_model(qkv_bias=True, n_layers=3),
    dataclasses.replace(plan_spec.MODELS["tiny"](), mlp_dim=96)])
def test_analytic_param_count_equals_the_model(cfg):
  _, params = init_model(cfg, 0)
  assert analytic.param_count(cfg) == count_params(params)
  for rank in (1, 8):
    c = dataclasses.replace(cfg, lora_rank=rank)
    assert analytic.lora_count(c, rank) == lora.trainable_count(lora.init_lora(c, jax.random.PRNGKey(0)))


def test_plan_memory_equals_the_compiled_programs_of_real_arrays():
  # The plan compiles from shapes only; the same learner's programs compiled for real, initialised
  # arrays must have exactly the same buffer sizes, and the iteration peak follows from them.
  record = plan_spec.plan_flags(paper.get_config, **TINY)
  cfg = tiny_config()
  graphdef, params = init_model(cfg.model, 0)
  learner = GRPOLearner(make_logits_fn(graphdef), cfg, mask_id=cfg.model.mask_token_id, eos_id=EOS_ID)
  prompts = jnp.zeros((BATCH, PROMPT_LEN), jnp.int32)
  key = jax.random.PRNGKey(0)
  rollout_mem = bm.compiled_memory(learner.rollout, params, prompts, key)
  assert rollout_mem == record["rollout"]["memory"]
  traj = learner.rollout(params, prompts, key)
  rewards = jnp.zeros((BATCH,), jnp.float32)
  opt_state = learner.init_opt_state(params)
  update_mem = bm.compiled_memory(learner.update, params, opt_state, params, traj, rewards,
                                  jnp.ones_like(traj.completion_mask), key)
  assert update_mem == record["update"]["memory"]
  opt_bytes = sum(x.nbytes for x in jax.tree.leaves(opt_state))
  param_bytes = sum(x.nbytes for x in jax.tree.leaves(params))
  assert record["state_bytes"] == {"params": param_bytes, "optimizer": opt_bytes, "reference": param_bytes,
                                   "shared_base": 0.0}
  assert record["iteration_peak_bytes"] == max(rollout_mem["peak_bytes"] + opt_bytes + param_bytes,
                                               update_mem["peak_bytes"])
  # The analytic count of the state is exact here (nothing is sharded), but for the optimizer's
  # scalar counters and metrics (a few int32 / float32 scalars), which it leaves out.
  assert record["analytic"]["params"] == param_bytes
  assert 0 <= opt_bytes - record["analytic"]["optimizer"] <= 64
  v5e = plan.DEVICES["v5e"]
  fits = plan.assess(record, v5e, mfu=0.5, usable_fraction=0.9)
  # each program: the largest of its compute, memory and link times (XLA's counts of the programs)
  want = sum(max(c["flops"] / (v5e.peak_bf16_flops * 0.5), c["bytes_accessed"] / v5e.hbm_bytes_per_s,
                 c["link_bytes"] / v5e.link_bytes_per_s) for c in record["cost_per_device"].values())
  assert fits["fits"] and fits["iteration_s"] == pytest.approx(want)
  assert record["flops_per_device"]["rollout"] == record["rollout"]["cost"]["flops"]  # one call, no calls x
  tight = dataclasses.replace(plan.DEVICES["v5e"], hbm_bytes=record["iteration_peak_bytes"] / 0.9 * 0.99)
  assert not plan.assess(record, tight, mfu=0.5, usable_fraction=0.9)["fits"]


@pytest.mark.parametrize("change, field, value, allowed", [
    (dict(device="h800"), "device", "h800", "one of ['a100', 'gh200', 'h100', 'h200', 'v4', 'v5e', 'v5p', 'v6e']"),
    (dict(num_devices=3, strategy="fsdp", prompts_per_step=2, group_size=2), "rl.prompts_per_step * rl.group_size",
     "4", "a multiple of the 3 batch shards"),
    (dict(method="grpo"), "method", "grpo", "one of ['d1', 'daca']"),
    (dict(model="llama"), "model", "llama", "one of"),
    (dict(lora_rank=-1), "model.lora_rank", "-1", "an integer >= 0"),
    (dict(remat="some"), "model.remat", "some", "one of"),
    (dict(layers=-2), "layers", "-2", "an integer >= 0"),
    (dict(prompt_len=0), "prompt_len", "0", "a positive integer"),
])
def test_bad_input_names_the_field_before_any_compile(change, field, value, allowed, monkeypatch):
  from daca_jax.planning import compiled

  monkeypatch.setattr(compiled, "build", lambda *_: pytest.fail("compiled before checking the input"))
  with pytest.raises(ConfigError) as e:
    plan_spec.plan_flags(paper.get_config, **{**TINY, **change})
  msg = str(e.value)
  assert field in msg and value in msg and allowed in msg


def test_device_count_must_match_the_simulated_devices():
  with pytest.raises(ConfigError, match=f"num_devices.*the {jax.device_count()} devices this process has"):
    plan_spec.plan_flags(paper.get_config, **{**TINY, "num_devices": 4, "strategy": "fsdp"})


def test_flag_setting_is_the_method_preset_with_the_table_setting_and_the_flags():
  """Each field has one source: the --method preset (configs/paper.py), TABLE_SETTING, then the flags."""
  cfg = plan_spec.flag_config(paper.get_config, method="daca", model="llada_8b", num_devices=8, lora_rank=128,
                              strata_batch=1)
  preset = configure.train_config_from_dict(paper.get_config("d1_gsm8k_daca"))
  assert (cfg.rl.objective, cfg.rl.credit, cfg.rl.likelihood) == (preset.rl.objective, "dps", "stratified")
  assert cfg.likelihood.p_mask_prompt == preset.likelihood.p_mask_prompt and cfg.rl.beta == preset.rl.beta
  for path, value in plan_spec.TABLE_SETTING.items():
    if path != "model.lora_rank":
      assert plan_spec.field_value(cfg, path) == value, path
  assert (cfg.model.lora_rank, cfg.likelihood.strata_batch, cfg.parallel.fsdp) == (128, 1, 8)
  assert cfg.model.d_model == plan_spec.MODELS["llada_8b"]().d_model
  spec = plan_spec.spec_record(cfg, method="daca", model="llada_8b", layers=0, device="h100", num_devices=8,
                               prompt_len=64)
  assert set(spec) == {"model", "layers", "device", "num_devices", "method", "prompt_len", *plan_spec.FLAG_FIELDS}
  assert spec["lora_rank"] == 128 and spec["rollout_weights"] == "auto" and spec["grad_agreement"] is True


def test_cli_bad_device_is_one_line_and_exit_2():
  r = subprocess.run([sys.executable, str(ROOT / "experiments/plan.py"), "--device=tpu9", "--num_devices=1",
                      "--strategy=none"], capture_output=True, text=True, cwd=ROOT, timeout=120)
  assert r.returncode == 2
  assert "error: device" in r.stderr and "'tpu9'" in r.stderr and "'v5p'" in r.stderr
  assert "Traceback" not in r.stderr


@pytest.mark.slow
def test_gpu_check_script_runs_every_step_at_tiny_size_on_cpu(tmp_path):
  import json
  import os

  r = subprocess.run(["bash", "experiments/scripts/gpu_check.sh"], cwd=ROOT, capture_output=True, text=True,
                     env=dict(os.environ, GPU_CHECK_SIZE="tiny", OUT=str(tmp_path),
                              GPU_CHECK_CHECKPOINT=str(tmp_path / "random_llada")), timeout=1800)
  assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
  for step in ("bench", "iteration", "preset"):
    assert f"{step}: ok in" in r.stdout
  it = json.loads((tmp_path / "iteration_check.json").read_text())
  assert set(it["measured"]) >= {"rollout_s", "likelihood_s", "update_s"}
  assert it["predicted"]["fits"] and it["plan"]["rollout"]["memory"]["peak_bytes"] > 0
  assert "measured MFU" in r.stdout and "predicted" in r.stdout
  assert (tmp_path / "gpu_check.json").exists()
  # the preset step: a random LLaDA checkpoint in the HF layout, the paper preset trained from it for 2
  # iterations by train.py, and its plan for the same setting (the task's prompt length with the
  # checkpoint's tokenizer, the checkpoint's architecture)
  plan_rec = json.loads((tmp_path / "preset_plan.json").read_text())
  check = json.loads((tmp_path / "preset_check.json").read_text())
  metrics = [json.loads(x) for x in (tmp_path / "preset_run" / "metrics.jsonl").read_text().splitlines()]
  assert len(metrics) == 2 and metrics[1]["includes_compile"] == 0.0
  assert check["measured"]["iteration_s"] == pytest.approx(metrics[1]["rollout_s"] + metrics[1]["update_s"])
  assert plan_rec["setting"]["model"]["d_model"] == 32 and plan_rec["setting"]["credit"] == "dps"
  assert any("config.json of model.init_checkpoint" in n for n in plan_rec["notes"])
  assert "s / iteration" in r.stdout and "peak GB per device" in r.stdout


def test_flags_of_a_setting_are_refused_with_config():
  from daca_jax.planning.preset import check_config_flags

  check_config_flags({"model": "tiny", "device": "v5e", "num_devices": 2, "prompt_len": 8})
  with pytest.raises(ConfigError, match="--lora_rank.*8.*unset with --config"):
    check_config_flags({"device": "v5e", "lora_rank": 8})
  r = subprocess.run([sys.executable, str(ROOT / "experiments/plan.py"), "--config=configs/paper.py:d1_gsm8k",
                      "--num_devices=1", "--strata_batch=2"], capture_output=True, text=True, cwd=ROOT, timeout=120)
  assert r.returncode == 2 and "error: --strata_batch" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("value", ["0", "-8", "abc", "", "8961", "100000"])
def test_a_bad_num_devices_is_one_error_line_with_exit_2(value, capsys, monkeypatch):
  # Was "--num_devices: '0' is not allowed; ..." with exit 1, unlike every other bad flag (error:, exit 2);
  # 100000 was taken and the CPU client spent minutes and 8 GB creating the devices.
  from daca_jax.planning.simulate import MAX_DEVICES, simulate_devices
  monkeypatch.setenv("XLA_FLAGS", "")
  with pytest.raises(SystemExit) as info:
    simulate_devices([f"--num_devices={value}"])
  assert info.value.code == 2 and MAX_DEVICES == 8960
  assert capsys.readouterr().err == (f"error: --num_devices={value!r} is not allowed: expected an integer in [1, 8960] "
                                     "(at most one slice: a TPU v5p pod)\n")
  simulate_devices(["--num_devices=8960"])  # the largest slice is taken
  assert os.environ["XLA_FLAGS"] == "--xla_force_host_platform_device_count=8960"
