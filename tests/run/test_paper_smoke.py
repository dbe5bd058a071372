"""The ``,smoke`` form of every paper preset task runs its iterations from a tiny checkpoint
(``configs/paper.py:<base>_<task>_daca,smoke`` for each base and task, and one base arm), through the
main job: the checkpoint's architecture, LoRA, d1's training prompts and rewards where d1 has them, d1's
evaluation protocol at the smoke lengths (32 and 64) before and after RL and on the validation split.

The benchmark tasks read a few records of ../shared/data (tests/tiny_data.py) and skip cleanly
without it; Sudoku and Countdown generate their items. Two cases run in the default suite (a LLaDA and
a Dream checkpoint); the others are slow-marked.
"""
from __future__ import annotations

import json
import math

import pytest

from configs import paper
from daca_jax.config.configure import train_config_from_dict
from daca_jax.run.metrics import read_metrics
from daca_jax.run.pipeline import run_main_job
from tests.run.hf_checkpoint_fixture import tiny_checkpoint
from tests.tiny_data import write_tiny_bench, write_tiny_data, write_tiny_humaneval

# (preset, checkpoint family) of the default suite; every other case is slow.
FAST = {("d1_sudoku_daca,smoke", "llada"), ("wd1_countdown_daca,smoke", "dream")}
CASES = ([(f"{b}_{t}_{'dps' if 'daca' in paper.NO_ARMS.get(b, ((), ''))[0] else 'daca'},smoke",
           "dream" if (b, t) == ("wd1", "countdown") else "llada")
          for b in paper.BASES for t in paper.TASKS] + [("d1_gsm8k,smoke", "llada")]
         + [("bgpo_sudoku,smoke", "llada")])  # BGPO's own ELBO samples with per-pass accumulation
_D1_TASKS = ("gsm8k", "math500", "countdown", "sudoku")


def _data(tmp_path, task: str):
  """``(data.data_dir, task.eval_path)`` for ``task``: a few records of the shared data (skips without them)."""
  if task in ("sudoku", "countdown"):
    return "", ""  # generated items (d1's test file when the shared data has it)
  data = write_tiny_data(tmp_path / "data", n=3)
  if data is None:
    pytest.skip("../shared/data is absent")
  if task == "json":
    write_tiny_bench(data)
  eval_path = str(write_tiny_humaneval(tmp_path / "humaneval.jsonl", n=2)) if task == "humaneval" else ""
  return str(data), eval_path


def _run(tmp_path, preset: str, family: str):
  base, task, arm, _ = paper.parse_name(preset)
  c = paper.get_config(preset)
  c.model.init_checkpoint = str(tiny_checkpoint(tmp_path / "ckpt", family))
  c.data.data_dir, c.task.eval_path = _data(tmp_path, task)
  cfg = train_config_from_dict(c)
  lines: list[str] = []
  results = run_main_job(cfg, tmp_path / "run", show_progress=False, log=lines.append)
  return cfg, results, lines


@pytest.mark.parametrize("preset,family", [
    pytest.param(p, f, marks=() if (p, f) in FAST else pytest.mark.slow) for p, f in CASES])
def test_smoke_preset_runs_from_a_tiny_checkpoint(tmp_path, preset, family):
  cfg, results, lines = _run(tmp_path, preset, family)
  _, task, _, _ = paper.parse_name(preset)
  text = "\n".join(lines)
  # the architecture came from the checkpoint (the fixture's shape), the run's choices from the preset
  model = results["config"]["model"]
  assert (model["d_model"], model["n_layers"], model["vocab_size"], model["lora_rank"]) == (32, 2, 48, 4)
  assert "SFT warm start skipped" in text and "LoRA: rank 4" in text
  # RL: both iterations, each with μ = 2 updates of 2 micro-batches; a checkpoint per iteration
  records = read_metrics(tmp_path / "run" / "metrics.jsonl")
  assert [r["step"] for r in records] == [1, 2]
  assert all(math.isfinite(r["loss"]) and math.isfinite(r["kl"]) for r in records)
  assert (tmp_path / "run" / "rl" / "2").is_dir()
  # d1's training prompts (another view of the task) where d1 trains it, the evaluation prompts elsewhere
  assert ("'d1_train' style (task.train_prompt_style)" in text) == (task in _D1_TASKS)
  # d1's protocol at the smoke lengths: every length reported, the training length (64) is the headline
  metric = next(k for k in results["eval_after"] if not k.startswith("L") and k != "num_examples")
  for phase in ("eval_before", "eval_after"):
    m = results[phase]
    assert {f"L32/{metric}", f"L64/{metric}"} <= set(m) and m[metric] == m[f"L64/{metric}"], phase
  assert results["eval_protocol"]["headline_length"] == 64
  assert {k: v["steps"] for k, v in results["eval_protocol"]["lengths"].items()} == {"32": 16, "64": 32}
  # the validation split (held out of RL) at the last iteration, at both lengths
  assert f"val/L32/{metric}" in records[-1] and f"val/L64/{metric}" in records[-1]
  assert set(results["val_after"]) >= {f"L32/{metric}", f"L64/{metric}"}
  # each length's test-set generations are cached in the workdir, prompted with the evaluation prompts
  rows = [json.loads(l) for l in (tmp_path / "run" / "eval_after_L32.generations.jsonl").read_text().splitlines()]
  assert len(rows) == cfg.task.num_eval_examples
  if task in _D1_TASKS:
    assert all(r["prompt"].endswith("<reasoning>") for r in rows)  # d1's evaluation prompt pre-fills it
