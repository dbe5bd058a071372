"""Every registered task evaluated with a tiny checkpoint of each family in its released HF layout
(tokenizer files and chat template included), on a few records of each benchmark; tasks that read
benchmark files skip cleanly without ../shared/data."""
import dataclasses
import json

import pytest

from daca_jax import evaluation as eh
from daca_jax.run import eval_models
from daca_jax.tasks.base import TASKS
from tests.hf_fixtures import write_tiny_checkpoint
from tests.tiny_data import write_tiny_data, write_tiny_humaneval

NEEDS_FILES = {"gsm8k", "math500", "mbpp"}
HEAD = {"llada": "<|startoftext|><|start_header_id|>user<|end_header_id|>\n\n",
        "dream": "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"}


@pytest.mark.parametrize("family", [pytest.param("llada", marks=pytest.mark.slow), "dream"])  # ~30 s each
def test_every_task_evaluates_with_the_checkpoints_tokenizer(tmp_path, family):
  pytest.importorskip("tokenizers")
  data = write_tiny_data(tmp_path / "data", n=2)
  tasks = [n for n in TASKS.names() if data is not None or n not in NEEDS_FILES]
  ckpt = write_tiny_checkpoint(tmp_path / family, family, layers=1)
  model = eval_models.load_model(hf_checkpoint=str(ckpt), hf_dtype="float32", data_dir=str(data or ""))
  # A few problems of the tasks whose evaluation set is not a file of the data folder.
  model.task_options.update({
      "humaneval": {"data_dir": str(data) if data else None, "eval_path": str(write_tiny_humaneval(tmp_path / "he.jsonl"))},
      "json_schema": {"data_dir": None, "eval_size": 2}})
  protocol = eh.EvalProtocol(gen_lengths=(32,), block_length=32, batch_size=2, num_examples=2)
  summary = eh.run_evaluation(model, tasks, protocol, tmp_path / "out", show_progress=False, log=lambda s: None)
  assert sorted(summary["tasks"]) == sorted(tasks)
  for name in tasks:
    result = summary["tasks"][name]["lengths"]["32"]
    assert result["num_examples"] == 2, name
    rows = [json.loads(l) for l in (tmp_path / "out" / name / "gen32.jsonl").read_text().splitlines()]
    assert all(r["prompt"].startswith(HEAD[family]) for r in rows), name  # the checkpoint's own template
    task = eh.prepare_task(name, model, 2).task
    assert result["metrics"] == {k: float(v) for k, v in task.metrics([r["completion"] for r in rows],
                                                                      task.eval_examples()[0][:2]).items()}, name
    # Every task's per-example outcomes pool to its metrics: rates are means, counts sums (Sudoku's
    # cell accuracy: its cell counts).
    outcomes = [json.loads(l) for l in (tmp_path / "out" / name / "gen32.outcomes.jsonl").read_text().splitlines()]
    assert len(outcomes) == 2, name
    for metric, value in result["metrics"].items():
      if metric == "num_examples":
        continue
      column = [o["cells_correct" if metric == "cell_accuracy" else metric] for o in outcomes]
      pooled = (sum(column) if metric in task.count_metrics else
                sum(column) / sum(o["cells_blank"] for o in outcomes) if metric == "cell_accuracy" and
                sum(o["cells_blank"] for o in outcomes) else sum(column) / len(column))
      assert pooled == pytest.approx(value, rel=1e-6), (name, metric)
