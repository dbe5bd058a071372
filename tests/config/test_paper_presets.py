"""configs/paper.py: every preset name resolves and validates, the names are exactly the cross product,
the recipes carry their sources' values, and the smoke forms are the same recipes at CPU size."""
import inspect
import itertools
import pathlib
import re

import pytest

from configs import paper
from daca_jax.config.configure import train_config_from_dict
from daca_jax.errors import ConfigError
from daca_jax.models.hf_import import ARCHITECTURE_FIELDS
from daca_jax.config.model import ModelConfig

REPO = pathlib.Path(__file__).resolve().parents[2]
ALL = paper.preset_names()
SMOKE = paper.preset_names(smoke=True)


def test_names_are_exactly_the_cross_product():
  expected = {f"{b}_{t}" + (f"_{a}" if a else "") for b, t, a in itertools.product(
      paper.BASES, ("gsm8k", "math500", "countdown", "sudoku", "humaneval", "mbpp", "json"),
      ("", "dps", "sml", "daca")) if a not in paper.NO_ARMS.get(b, ((), ""))[0]}
  assert {"d1", "wd1", "gdpo", "bgpo", "map"} <= set(paper.BASES)
  assert len(ALL) == len(set(ALL)) == len(expected) and set(ALL) == expected
  with pytest.raises(ConfigError, match="StepMerge"):
    paper.parse_name("map_gsm8k_sml")
  assert SMOKE == [n + ",smoke" for n in ALL]


def test_every_preset_and_its_smoke_form_validates():
  for name in ALL + SMOKE:
    cfg = train_config_from_dict(paper.get_config(name))  # raises ConfigError naming the field
    base, task, arm, _ = paper.parse_name(name)
    objective = {"d1": "diffu_grpo", "wd1": "wd1", "gdpo": "gdpo", "spg": "spg", "espo": "espo",
                 "bgpo": "bgpo", "map": "map"}[base]
    likelihood = {"d1": "mean_field", "wd1": "mean_field", "gdpo": "elbo", "spg": "spg_block",
                  "espo": "espo_elbo", "bgpo": "elbo_mc", "map": "stepmerge"}[base]
    assert cfg.rl.objective == objective, name
    assert cfg.rl.credit == ("dps" if arm in ("dps", "daca") else "uniform"), name
    assert cfg.rl.likelihood == ("stratified" if arm in ("sml", "daca") else likelihood), name
    d1_task = task in ("gsm8k", "math500", "countdown", "sudoku")
    assert cfg.task.reward == ("d1" if d1_task else ""), name
    # d1's training prompts where d1 trains the task; d1's evaluation prompts and protocol everywhere
    assert cfg.task.train_prompt_style == ("d1_train" if d1_task else ""), name
    assert cfg.task.options["prompt_style"] == "chat" and cfg.eval.protocol == "d1", name
    assert cfg.model.init_checkpoint == "" and cfg.sft.steps == 0, name  # the user passes the checkpoint
    assert cfg.model.require_checkpoint, name  # ... and a run without one is refused
    # no architecture: every field is ModelConfig's default, which the checkpoint's config.json replaces
    assert all(getattr(cfg.model, f) == getattr(ModelConfig(), f) for f in ARCHITECTURE_FIELDS), name


@pytest.mark.parametrize("bad", ["d2_gsm8k", "d1_sudoku4x4", "d1_gsm8k_foo", "d1_gsm8k,fast", "d1", "",
                                 "d1_gsm8k_daca_dps", "d1_gsm8k,smoke,smoke", "D1_gsm8k"])
def test_unknown_names_give_the_pattern(bad):
  with pytest.raises(ConfigError, match=re.escape("<base>_<task>[_<arm>][,smoke]")) as err:
    paper.get_config(bad)
  assert "'gdpo'" in str(err.value) and "'json'" in str(err.value) and "'daca'" in str(err.value)


def test_d1_recipe_values():
  cfg = train_config_from_dict(paper.get_config("d1_gsm8k"))
  m, r, rl = cfg.model, cfg.rollout, cfg.rl
  assert (m.lora_rank, m.lora_alpha, m.lora_dropout, m.lora_targets) == (128, 64.0, 0.05, "q,k,v,o,gate,up,down")
  assert (m.dtype, m.param_dtype, m.remat) == ("bfloat16", "bfloat16", "full")
  assert (cfg.eval.lengths, cfg.eval.block_length, cfg.eval.steps, cfg.eval.temperature) == ((128, 256, 512), 32, 0, 0.0)
  assert cfg.task.num_val_examples == 250 and cfg.sft.num_train_examples == 7223  # GSM8K train = pool + validation
  assert (r.gen_length, r.block_length, r.steps, r.temperature) == (256, 32, 128, 0.9)
  assert (rl.group_size, rl.prompts_per_step, rl.num_iterations, rl.grad_accum) == (6, 16, 12, 2)
  assert (rl.clip_eps, rl.beta, cfg.likelihood.p_mask_prompt, rl.advantage) == (0.5, 0.04, 0.15, "group_mean")
  assert (rl.learning_rate, rl.lr_schedule, rl.weight_decay, rl.max_grad_norm) == (3e-6, "constant", 0.1, 0.2)
  assert (rl.adam_b1, rl.adam_b2, cfg.seed) == (0.9, 0.99, 42)
  # warmup_ratio 1e-4 of all updates, rounded up; checkpoints every 100 updates
  assert rl.warmup_steps == -(-rl.steps * 12 // 10_000) and cfg.checkpoint.every == 9
  assert train_config_from_dict(paper.get_config("d1_countdown")).rl.num_iterations == 8  # sbatch NUM_ITER
  wd1 = train_config_from_dict(paper.get_config("wd1_sudoku"))
  assert (wd1.rl.prompts_per_step, wd1.rl.beta, wd1.rl.num_iterations) == (8, 0.0, 8)  # 4 GPUs, no KL
  gdpo = train_config_from_dict(paper.get_config("gdpo_math500_dps"))
  assert (gdpo.likelihood.elbo.nodes, gdpo.likelihood.p_mask_prompt, gdpo.rl.beta) == (3, 0.0, 0.0)
  assert (gdpo.rl.prompts_per_step, gdpo.rl.learning_rate, gdpo.rollout.temperature) == (32, 3e-7, 1.0)
  json_cfg = train_config_from_dict(paper.get_config("d1_json"))
  assert json_cfg.task.name == "json_schema" and json_cfg.task.options["source"] == "jsonschemabench"


def test_spg_and_espo_recipe_values():
  """SPG's spg_mix sbatch flags on d1's train.yaml; ESPO's run_<task>_llada.sh on its train.yaml."""
  spg = train_config_from_dict(paper.get_config("spg_gsm8k"))
  blk = spg.likelihood.spg_block
  assert (blk.num_t, blk.block_length, blk.min_t, blk.max_t, spg.likelihood.p_mask_prompt) == (2, 32, 0.0, 1.0, 0.15)
  assert (spg.rl.spg.eubo_beta, spg.rl.spg.mix_weight, spg.rl.beta, spg.rl.num_iterations) == (1.5, 0.5, 0.0, 4)
  assert (spg.rl.group_size, spg.rl.prompts_per_step, spg.rl.grad_accum, spg.rollout.temperature) == (6, 16, 2, 0.9)
  assert spg.rl.advantage == "group_mean" and spg.rl.learning_rate == 3e-6
  # d1's warmup_ratio 1e-4 and save_steps 100 count optimizer updates: converted with SPG's μ = 4, not d1's 12
  assert (spg.rl.warmup_steps, spg.checkpoint.every, spg.rl.eval_every) == (-(-spg.rl.steps * 4 // 10_000), 25, 250)
  sudoku = train_config_from_dict(paper.get_config("spg_sudoku"))
  assert (sudoku.rl.spg.eubo_beta, sudoku.rollout.temperature, sudoku.rl.grad_accum) == (1.0, 0.3, 4)
  assert (sudoku.checkpoint.every, sudoku.rl.warmup_steps) == (25, -(-sudoku.rl.steps * 4 // 10_000))  # not d1's μ 8
  espo = train_config_from_dict(paper.get_config("espo_gsm8k"))
  e = espo.likelihood.espo_elbo
  assert (e.num_mc, e.coupled, e.stratify, espo.likelihood.elbo_terms, espo.likelihood.p_mask_prompt) == (
      2, True, "row", "summed", 0.0)
  assert (espo.rl.advantage, espo.rl.beta, espo.rl.clip_eps, espo.rl.num_iterations) == ("rloo", 1e-3, 0.2, 8)
  assert (espo.rl.group_size, espo.rl.prompts_per_step, espo.rl.grad_accum, espo.rollout.steps) == (6, 16, 4, 256)
  assert (espo.rl.learning_rate, espo.rl.weight_decay, espo.rl.max_grad_norm, espo.rollout.temperature) == (
      3e-6, 0.01, 0.2, 1.0)
  countdown = train_config_from_dict(paper.get_config("espo_countdown"))
  assert (countdown.rl.beta, countdown.rl.clip_eps, countdown.rollout.steps) == (3e-3, 0.0, 128)
  assert train_config_from_dict(paper.get_config("espo_sudoku")).rl.beta == 1e-2
  code = train_config_from_dict(paper.get_config("espo_mbpp"))
  assert (code.rl.group_size, code.rl.beta, code.rl.grad_accum, code.rl.rollout_batch) == (10, 1e-2, 16, 80)
  # run_code_llada.sh: --max_grad_norm 0.8, --use_peft false, and train.yaml's lr and weight decay
  assert (code.rl.learning_rate, code.rl.weight_decay, code.rl.max_grad_norm) == (1e-6, 0.1, 0.8)
  assert (code.model.lora_rank, code.model.lora_dropout) == (0, 0.0)
  # run_math_llada.sh: G 16, 2 rows per GPU x 8 x gradient_accumulation_steps 16 = 256 rows = 16 prompts
  math = train_config_from_dict(paper.get_config("espo_math500"))
  assert (math.rl.group_size, math.rl.prompts_per_step, math.rl.grad_accum, math.rl.rollout_batch) == (16, 16, 16, 64)
  assert (math.rl.beta, math.rl.learning_rate, math.rl.weight_decay, math.rollout.steps) == (1e-3, 3e-6, 0.01, 256)
  # the SML arm swaps the estimator and keeps the method's objective
  assert train_config_from_dict(paper.get_config("espo_sudoku_sml")).rl.likelihood == "stratified"
  assert train_config_from_dict(paper.get_config("spg_gsm8k_daca")).rl.objective == "spg"


def test_smoke_forms_are_tiny_and_keep_the_recipe():
  method_fields = ("rl.objective", "rl.credit", "rl.likelihood", "rl.advantage", "rl.clip_eps", "rl.beta",
                   "rl.learning_rate", "rl.adam_b2", "rl.weight_decay", "rl.max_grad_norm",
                   "likelihood.p_mask_prompt", "likelihood.elbo.nodes", "rollout.block_length",
                   "likelihood.elbo_terms", "likelihood.spg_block", "likelihood.espo_elbo", "rl.spg",
                   "rollout.temperature", "task.name", "task.reward", "task.train_prompt_style", "task.options",
                   "model.lora_dropout", "model.require_checkpoint", "eval.protocol", "eval.block_length",
                   "eval.steps", "eval.temperature", "seed")
  for name in ALL:
    full = train_config_from_dict(paper.get_config(name))
    small = train_config_from_dict(paper.get_config(name + ",smoke"))
    for field in method_fields:
      get = lambda cfg: __import__("functools").reduce(getattr, field.split("."), cfg)
      assert get(small) == get(full), (name, field)
    assert small.model == ModelConfig(**{**vars(full.model), **{f: getattr(small.model, f) for f in (
        "dtype", "param_dtype", "remat", "lora_rank", "lora_alpha")}}), name  # the checkpoint sets the rest
    assert small.model.lora_rank <= 4 and small.model.dtype == "float32" and small.rl.steps == 2
    assert small.rollout.gen_length <= 64 and small.rl.prompts_per_step * small.rl.group_size <= 4
    assert max(small.eval.lengths) <= 64 and small.task.num_eval_examples <= 2 and small.sft.num_train_examples <= 8
    assert small.log.plumbing_check and small.rl.num_iterations >= 2 and small.rl.grad_accum == 2


def test_every_recipe_line_names_its_source():
  # each assignment in the recipe functions carries a comment (on its line or the line above)
  for fn in (paper._d1, paper._wd1, paper._gdpo, paper._spg, paper._espo, paper._bgpo, paper._map, paper._arm):
    previous = ""
    for line in inspect.getsource(fn).splitlines():
      if re.match(r"\s*c\.[\w.]+ = ", line):
        assert "#" in line or previous.strip().startswith("#"), (fn.__name__, line)
      previous = line


def test_config_flags_passes_the_text_after_the_colon():
  from absl import flags
  from ml_collections import config_flags
  fv = flags.FlagValues()
  config_flags.DEFINE_config_file("config", None, "", flag_values=fv)
  fv(["prog", f"--config={REPO / 'configs' / 'paper.py'}:d1_gsm8k_daca,smoke"])
  cfg = train_config_from_dict(fv.config)
  assert cfg.rl.credit == "dps" and cfg.rl.likelihood == "stratified" and cfg.rl.steps == 2
