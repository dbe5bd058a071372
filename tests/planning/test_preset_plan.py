"""Plans of a run's own config (experiments/plan.py --config=configs/paper.py:<name>): every field that
shapes an iteration's programs is compiled as configured, the architecture comes from the checkpoint's
config.json or --model, and what the plan cannot take as configured is reported."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

from configs import paper
from daca_jax.errors import ConfigError
from daca_jax.models.random_checkpoint import LLADA_8B_CONFIG
from daca_jax.planning.preset import resolve_plan_config

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_fields_the_plan_does_not_take_as_configured_are_reported():
  c = paper.get_config("d1_gsm8k_daca")
  c.rollout.threshold = 0.9
  c.rl.sample_group_size = 12
  cfg, notes = resolve_plan_config(c, num_devices=1, prompt_len=200, prompt_len_given=False)
  text = "\n".join(notes)
  assert "rollout.threshold=0.9" in text and "upper bound" in text
  assert "rl.sample_group_size=12" in text
  assert f"rl.eval_every={c.rl.eval_every}" in text and "evaluation" in text
  assert "prompt length 200" in text and "--prompt_len" in text
  assert "--model=llada_8b" in text and "replaced" not in text  # the preset sets no architecture
  assert cfg.parallel.strategy == "none"  # one device: nothing to change
  _, notes = resolve_plan_config(c, num_devices=8)
  assert any("FSDP over the 8 devices" in n for n in notes)


def test_model_flag_supplies_the_architecture():
  cfg, notes = resolve_plan_config(paper.get_config("d1_gsm8k"), num_devices=1, model="dream_7b")
  assert (cfg.model.d_model, cfg.model.n_layers, cfg.model.vocab_size, cfg.model.qkv_bias) == (3584, 28, 152064, True)
  assert cfg.model.lora_rank == 128 and cfg.model.remat == "full"  # the run's own fields stay
  assert not any("replaced" in n for n in notes)  # the presets set no architecture of their own
  c = paper.get_config("d1_gsm8k")
  c.model.d_model = 64  # a config that does set one: replaced, and said so
  cfg, notes = resolve_plan_config(c, num_devices=1, model="dream_7b")
  assert cfg.model.d_model == 3584 and any("model.d_model=64 -> 3584" in n for n in notes)
  cfg, _ = resolve_plan_config(paper.get_config("d1_gsm8k"), num_devices=1)
  assert (cfg.model.d_model, cfg.model.n_layers, cfg.model.vocab_size) == (4096, 32, 126464)
  with pytest.raises(ConfigError, match="--model.*llama"):
    resolve_plan_config(paper.get_config("d1_gsm8k"), num_devices=1, model="llama")


def test_architecture_from_a_checkpoint_folder_with_only_its_config(tmp_path):
  (tmp_path / "config.json").write_text(json.dumps(dict(LLADA_8B_CONFIG, n_layers=2)))
  c = paper.get_config("wd1_gsm8k")
  c.model.init_checkpoint = str(tmp_path)
  cfg, notes = resolve_plan_config(c, num_devices=1)  # no shards, no tokenizer in the folder
  assert (cfg.model.n_layers, cfg.model.d_model, cfg.model.mask_token_id) == (2, 4096, 126336)
  assert any("config.json of model.init_checkpoint" in n and "no weights read" in n for n in notes)
  with pytest.raises(ConfigError, match="--model"):
    resolve_plan_config(c, num_devices=1, model="llada_8b")
  c = paper.get_config("wd1_gsm8k")  # a config contradicting the checkpoint: train.py's own error
  c.model.n_layers, c.model.init_checkpoint = 32, str(tmp_path)
  with pytest.raises(ConfigError, match="model.n_layers.*config.json:n_layers"):
    resolve_plan_config(c, num_devices=1)


def test_a_device_layout_that_does_not_fit_fails_before_any_compile():
  c = paper.get_config("d1_gsm8k")
  c.parallel.strategy, c.parallel.fsdp = "fsdp", 3
  with pytest.raises(ConfigError, match="parallel"):
    resolve_plan_config(c, num_devices=8)
  c.parallel.fsdp = 4  # data = 0 takes the other 2
  cfg, _ = resolve_plan_config(c, num_devices=8)
  assert (cfg.parallel.strategy, cfg.parallel.fsdp) == ("fsdp", 4)


def test_cli_refuses_a_planspec_flag_with_config_in_one_line():
  r = subprocess.run([sys.executable, str(ROOT / "experiments/plan.py"), "--config=configs/paper.py:d1_gsm8k",
                      "--lora_rank=8", "--num_devices=1"], capture_output=True, text=True, cwd=ROOT, timeout=120)
  assert r.returncode == 2, r.stderr[-2000:]
  assert "error: --lora_rank" in r.stderr and "--config.model.lora_rank" in r.stderr and "Traceback" not in r.stderr


# Plans of one tiny shrink of a preset on 2 simulated devices, printed as JSON (one process: the
# device count is fixed before jax starts).
_PLANS = """
import json, sys
from configs import paper
from daca_jax.planning.plan import assess, plan_from_config
from daca_jax.planning.devices import device_spec
from daca_jax.planning.preset import resolve_plan_config

def plan(**fields):
  c = paper.get_config("d1_gsm8k,smoke")  # d1's recipe at CPU size: LoRA r 4, mu 2, accum 2, 2 rollout calls
  c.rollout.gen_length, c.rollout.block_length, c.rollout.steps = 16, 8, 4
  c.rl.num_iterations, c.rl.grad_accum, c.rl.rollout_batch = 1, 1, 0
  for key, value in fields.items():
    section, name = key.split("__")
    setattr(getattr(c, section), name, value)
  cfg, notes = resolve_plan_config(c, num_devices=2, model="tiny", prompt_len=8)
  r = plan_from_config(cfg, prompt_len=8, num_devices=2, notes=notes)
  a = assess(r, device_spec("h100"), mfu=0.4, usable_fraction=0.9)
  return {"rollout": r["rollout"], "update": r["update"], "cost": r["cost_per_device"], "notes": r["notes"],
          "setting": r["setting"], "update_s": a["update_s"]}

print(json.dumps({"base": plan(), "accum2": plan(rl__grad_accum=2),
                  "accum2_mu2": plan(rl__grad_accum=2, rl__num_iterations=2),
                  "half_rollout": plan(rl__rollout_batch=2)}))
"""


@pytest.mark.slow
def test_preset_plan_compiles_accumulation_rollout_batches_and_mu_as_configured():
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu",
             PYTHONPATH=str(ROOT))
  r = subprocess.run([sys.executable, "-c", _PLANS], capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
  assert r.returncode == 0, r.stderr[-3000:]
  p = json.loads(r.stdout.strip().splitlines()[-1])
  base, accum, mu2, half = p["base"], p["accum2"], p["accum2_mu2"], p["half_rollout"]
  assert base["setting"]["strategy"] == "fsdp" and base["setting"]["update_rows"] == 4
  # grad_accum 2: the update's temporaries are those of a micro-batch of 2 rows, not of all 4
  assert accum["update"]["memory"]["temp_bytes"] < 0.75 * base["update"]["memory"]["temp_bytes"]
  # rl.rollout_batch 2 of 4 rows: the compiled sampler takes half the rows and runs twice; the
  # iteration's rollout FLOPs are those of one whole-batch call
  assert (base["rollout"]["rows_per_call"], base["rollout"]["calls"]) == (4, 1)
  assert (half["rollout"]["rows_per_call"], half["rollout"]["calls"]) == (2, 2)
  assert half["rollout"]["memory"]["temp_bytes"] < base["rollout"]["memory"]["temp_bytes"]
  assert half["cost"]["rollout"]["flops"] == pytest.approx(base["cost"]["rollout"]["flops"], rel=0.02)
  # mu: with grad accumulation every inner update is the same work (theta_old's pass at the first one
  # too), so two inner updates cost twice one, and the predicted update time doubles
  assert mu2["cost"]["update"]["flops"] == pytest.approx(2 * accum["cost"]["update"]["flops"], rel=0.02)
  assert mu2["update_s"] == pytest.approx(2 * accum["update_s"], rel=0.02)
  # XLA's plain count (each loop body once) would have missed most of it
  assert accum["update"]["cost"]["xla_flops_once"] < 0.8 * accum["update"]["cost"]["flops"]
  assert not any("XLA's per-loop cost analysis was unavailable" in n for n in base["notes"])


def test_a_preset_is_spread_over_a_slice_its_batch_does_not_split_over():
  """d1's DACA preset (16 prompts x 6 = 96 rows, 2 micro-batches, rollout calls of 48) on larger slices: what
  does not split over the devices is fitted as a run there would set it, and said so; on 8 nothing changes."""
  cfg, notes = resolve_plan_config(paper.get_config("d1_gsm8k_daca"), num_devices=8)
  assert (cfg.rl.prompts_per_step, cfg.rl.grad_accum, cfg.rl.rollout_batch) == (16, 2, 48)
  assert not any("->" in n for n in notes)
  cfg, notes = resolve_plan_config(paper.get_config("d1_gsm8k_daca"), num_devices=32)  # a v5p-64
  assert (cfg.rl.prompts_per_step, cfg.rl.grad_accum, cfg.rl.rollout_batch) == (16, 1, 96)
  cfg, notes = resolve_plan_config(paper.get_config("d1_gsm8k_daca"), num_devices=256)  # a v5e-256
  assert (cfg.rl.prompts_per_step, cfg.rl.grad_accum, cfg.rl.rollout_batch) == (128, 1, 768)
  assert any(n.startswith("rl.prompts_per_step=16 -> 128: 96 rows do not split over the 256 devices") for n in notes)
  # a preflight (as_run) compiles the run as given: the same layout is the run's own error there
  c = paper.get_config("d1_gsm8k_daca")
  c.parallel.strategy, c.parallel.fsdp = "fsdp", 256
  cfg, _ = resolve_plan_config(c, num_devices=256, as_run=True)
  assert cfg.rl.prompts_per_step == 16
