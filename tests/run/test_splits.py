"""What a study draws: the validation split (task.val_split; a fixed study split is the same for every
warm start and disjoint from every training pool and from the test set; the pool split is as before)
and RL's draw from a warm start (rl.replicate)."""
import dataclasses

import pytest

from configs import countdown_tiny, sudoku_tiny
from daca_jax.config.configure import train_config_from_dict
from daca_jax.errors import ConfigError
from daca_jax.reports import reproduce as rp
from daca_jax.run.task_views import build_task_views, draw_splits


def _cfg(module=sudoku_tiny, **task):
  c = module.get_config()
  c.sft.num_train_examples = 2000
  for k, v in task.items():
    setattr(c.task, k, v)
  return train_config_from_dict(c.to_dict())


def _puzzles(examples):
  return [ex.meta["puzzle"] for ex in examples]


def test_a_fixed_split_is_one_set_for_every_seed_and_disjoint_from_training_and_test():
  cfg = _cfg(num_val_examples=5000, val_split="fixed")
  views = build_task_views(cfg, log=None)
  test = set(_puzzles(views.eval.eval_examples()[0]))
  splits = {seed: draw_splits(views, dataclasses.replace(cfg, seed=seed)) for seed in (0, 1)}
  (train0, val0, source), (train1, val1, _) = splits[0], splits[1]
  assert _puzzles(val0) == _puzzles(val1) and len(set(_puzzles(val0))) == 5000
  assert "fixed, 5000 items generated from task.val_seed=20261205" in source
  for train in (train0, train1):
    assert len(train) == len(set(_puzzles(train))) == 2000
    assert not set(_puzzles(train)) & set(_puzzles(val0))
  assert not set(_puzzles(val0)) & test and not set(_puzzles(train0)) & test
  assert _puzzles(train0) != _puzzles(train1)  # each warm start still trains on its own pool
  # The pool of seed 0 would have held some of the validation items: they were skipped, nothing else.
  pool = views.train.train_examples(2000 + 5000, 0)
  kept = [p for p in _puzzles(pool) if p not in set(_puzzles(val0))]
  assert _puzzles(train0) == kept[:2000] and len(kept) < len(pool)
  # Another val_seed draws another split.
  other = draw_splits(views, dataclasses.replace(cfg, task=dataclasses.replace(cfg.task, val_seed=7)))[1]
  assert _puzzles(other[:100]) != _puzzles(val0[:100])


def test_the_pool_split_is_the_pool_after_the_training_items():
  cfg = _cfg(num_val_examples=50)
  views = build_task_views(cfg, log=None)
  train, val, source = draw_splits(views, cfg)
  pool = views.train.train_examples(2050, cfg.seed)
  assert _puzzles(train) == _puzzles(pool[:2000]) and _puzzles(val) == _puzzles(pool[2000:])
  assert source == "validation split: training-pool items 2000..2049 (seed 0), held out of SFT and RL"


def test_countdown_keeps_a_reordering_of_a_validation_item_out_of_training():
  cfg = _cfg(countdown_tiny, num_val_examples=300, val_split="fixed")
  views = build_task_views(cfg, log=None)
  train, val, _ = draw_splits(views, cfg)
  task = views.train
  ex = val[0]
  shuffled = task.make_example(tuple(reversed(ex.meta["numbers"])), ex.meta["target"])
  assert task.item_key(shuffled) == task.item_key(ex)
  assert not {task.item_key(e) for e in train} & {task.item_key(e) for e in val}
  assert len(train) == 2000


def test_the_credit_preset_validates_on_a_fixed_5000_item_split_before_and_after_rl():
  cfg = rp.credit_preset(_cfg())
  assert (cfg.task.val_split, cfg.task.num_val_examples, cfg.rl.eval_every) == ("fixed", 5000, cfg.rl.steps)
  assert rp.standard_preset(_cfg()).task.val_split == "pool"


def test_an_unknown_val_split_is_refused_naming_the_field():
  with pytest.raises(ConfigError, match=r"task\.val_split"):
    _cfg(val_split="random")


def test_an_rl_replicate_draws_other_prompts_and_keys_from_the_same_seed():
  import jax
  import numpy as np
  from daca_jax.run.rl_loop import rl_base_key, rl_prompt_rows
  cfg = _cfg()
  again = dataclasses.replace(cfg, rl=dataclasses.replace(cfg.rl, replicate=1))
  # replicate 0 is the stream every earlier run used: (seed, RL stream 2, step)
  legacy = np.random.default_rng([cfg.seed, 2, 5]).choice(2000, cfg.rl.prompts_per_step, replace=False)
  assert rl_prompt_rows(cfg.seed, cfg.rl, 5, 2000).tolist() == legacy.tolist()
  assert (jax.random.key_data(rl_base_key(cfg.seed, cfg.rl)) == jax.random.key_data(
      jax.random.fold_in(jax.random.PRNGKey(cfg.seed), 2))).all()
  assert rl_prompt_rows(again.seed, again.rl, 5, 2000).tolist() != legacy.tolist()
  assert len(set(rl_prompt_rows(again.seed, again.rl, 5, 2000).tolist())) == cfg.rl.prompts_per_step
  assert not (jax.random.key_data(rl_base_key(again.seed, again.rl)) == jax.random.key_data(rl_base_key(cfg.seed, cfg.rl))).all()
  with pytest.raises(ConfigError, match=r"rl\.replicate"):
    train_config_from_dict(dict(cfg.to_dict(), rl=dict(cfg.to_dict()["rl"], replicate=-1)))


def test_the_preregistered_arms_differ_from_sml_alone_only_in_their_credit():
  from configs import credit_protocol
  cfg = rp.credit_preset(train_config_from_dict(sudoku_tiny.get_config()))
  cells = rp.study_grid(["sudoku4x4"], [10, 11], credit_protocol.get_arms())
  assert [c.arm for c in cells[:6]] == [c.arm for c in cells[6:]] and {c.seed for c in cells[:6]} == {10}
  assert len({c.key for c in cells}) == 12  # arms interleaved per warm start, one folder each
  by_arm = {c.arm: rp.cell_config(cfg, c) for c in cells if c.seed == 10}
  base = by_arm["base"]
  assert (base.rl.credit, base.rl.likelihood, base.likelihood.stratified.partition) == (
      "uniform", "stratified", "commit_order")
  assert (base.task.val_split, base.task.num_val_examples, base.seed) == ("fixed", 5000, 10)
  credits = {"base (RL replicate 1)": "uniform", "DPS + SML": "dps", "drop_agreed + SML": "uniform",
             "position_value + SML": "position_value", "oracle token_reward + SML": "token_reward"}
  for arm, credit in credits.items():
    c = by_arm[arm]
    assert c.rl.credit == credit and c.sft == base.sft and c.task == base.task and c.likelihood == base.likelihood
    same_rl = dataclasses.replace(c.rl, credit="uniform", replicate=0)
    assert same_rl == base.rl, arm
  assert by_arm["base (RL replicate 1)"].rl.replicate == 1 and by_arm["drop_agreed + SML"].credit.drop_agreed
