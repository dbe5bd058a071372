"""The main job's rollout-protocol evaluation decodes with the exact sampler, whatever RL's training
rollouts use, and its cache is keyed on that sampler."""
import dataclasses
import json

import jax

from configs import sudoku_tiny
from daca_jax.config.configure import train_config_from_dict
from daca_jax.models import init_model, make_logits_fn
from daca_jax.run.job_eval import JobEvaluator
from daca_jax.run.task_views import build_task_views


def _cfg(**rollout):
  c = sudoku_tiny.get_config("smoke")
  c.task.eval_path = ""  # a generated set: no benchmark files needed
  c.rollout.gen_length, c.rollout.block_length, c.rollout.steps = 20, 10, 10  # two blocks: a dual cache is stale
  for k, v in rollout.items():
    setattr(c.rollout, k, v)
  return train_config_from_dict(c.to_dict())


def _evaluator(cfg):
  task = build_task_views(cfg, log=None).eval
  graphdef, params = init_model(cfg.model, 0)
  return JobEvaluator(cfg, task, make_logits_fn(graphdef), jax.random.PRNGKey(1), show_progress=False,
                      log=lambda *_: None), task, params


def test_fast_training_rollouts_leave_the_evaluation_sampler_exact():
  fast = _cfg(kv_cache="dual", threshold=0.5, temperature=1.0)
  (rcfg,) = _evaluator(fast)[0].rollout_configs().values()
  assert (rcfg.kv_cache, rcfg.threshold, rcfg.temperature) == ("none", 0.0, fast.eval.temperature)
  assert (rcfg.gen_length, rcfg.block_length, rcfg.steps, rcfg.remasking) == (20, 10, 10, "low_confidence")


def test_a_cache_decoded_by_another_sampler_is_decoded_again(tmp_path):
  ev, task, params = _evaluator(_cfg(kv_cache="prefix", threshold=0.9))
  examples = task.eval_examples()[0][:4]
  path = tmp_path / "eval_before.json"
  fingerprint = {"eval": "settings"}
  metrics, hit = ev.cached(params, examples, "eval", path, fingerprint)
  assert not hit
  stored = json.loads(path.read_text())
  assert stored["fingerprint"]["rollout"] == dataclasses.asdict(ev.rollout_configs()[20])
  assert ev.cached(params, examples, "eval", path, fingerprint) == (metrics, True)
  # A cache without the sampler in its fingerprint (written by the evaluation that used the training
  # rollouts' K/V cache and threshold) is not reused.
  stale = {"metrics": dict(metrics, strict_solved=-1.0), "fingerprint": fingerprint}
  path.write_text(json.dumps(stale))
  assert ev.cached(params, examples, "eval", path, fingerprint) == (metrics, False)


def test_every_evaluation_writes_per_example_outcomes_that_pool_to_its_metrics(tmp_path):
  ev, task, params = _evaluator(_cfg())
  examples = task.eval_examples()[0][:6]
  val = ev.run(params, examples, "validation", outcomes_to=tmp_path / "val_step3.json")
  rows = [json.loads(line) for line in (tmp_path / "val_step3.outcomes.jsonl").read_text().splitlines()]
  assert len(rows) == 6 and ev.outcomes_file(tmp_path / "val_step3.json") == tmp_path / "val_step3.outcomes.jsonl"
  assert sum(r["strict_solved"] for r in rows) / 6 == val["strict_solved"]
  assert sum(r["cells_correct"] for r in rows) / sum(r["cells_blank"] for r in rows) == val["cell_accuracy"]
  metrics, _ = ev.cached(params, examples, "eval", tmp_path / "eval_after.json", {"eval": "settings"})
  cached = [json.loads(line) for line in (tmp_path / "eval_after.outcomes.jsonl").read_text().splitlines()]
  assert metrics == val and cached == rows  # same decode key, same examples: the same outcomes
