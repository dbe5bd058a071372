"""experiments/iteration_check.py's library (daca_jax.planning.iteration): a setting that does not fit falls
back to LoRA, every phase is measured, and the report sets the measurement beside the prediction."""
import dataclasses

from configs import paper
from daca_jax.planning import iteration
from daca_jax.planning.devices import device_spec


def test_a_setting_that_does_not_fit_falls_back_to_lora_and_every_phase_is_measured():
  small = dataclasses.replace(device_spec("v5e"), hbm_bytes=1e3)  # nothing fits
  cfg, record, pred, note = iteration.plan_iteration(
      paper.get_config, small, mfu=0.4, usable=0.9, fallback_lora_rank=4, model="tiny", layers=1, method="d1",
      group_size=2, prompt_len=4, gen_length=8, block_length=8, steps=2, lora_rank=0)
  assert note.startswith("full fine-tuning needs") and note.endswith("LoRA r 4")
  assert cfg.model.lora_rank == 4 and record["spec"]["lora_rank"] == 4 and record["setting"]["update_rows"] == 2
  assert not pred["fits"] and pred["device"] == "v5e"
  measured = iteration.measure_iteration(cfg, 4)
  assert set(measured) == {"rollout_compile_and_run_s", "rollout_s", "likelihood_s", "update_compile_and_run_s",
                           "update_s"} and min(measured.values()) > 0
  text = iteration.iteration_report(record, pred, measured, device=small, mfu=0.4, peak_bytes=None)
  assert "LoRA r 4, B 2, L 8" in text and "predicted s (v5e)" in text and "n/a (no allocator stats" in text
