"""experiments/evaluate.py and daca_jax.evaluation: d1's protocol on tiny models, summaries recomputed
from the generations, resumption equal to an uninterrupted run, greedy determinism, HF import path,
and the errors that name the flag at fault."""
import dataclasses
import json
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from daca_jax import evaluation as eh
from daca_jax.run import eval_models
from daca_jax.errors import ConfigError, DataError
from daca_jax.evaluation.decode import generate
from daca_jax.tasks.base import make_task
from daca_jax.tasks.tokenizer import ByteTokenizer
from daca_jax.config.configure import train_config_from_dict
from daca_jax.config.model import ModelConfig
from daca_jax.config.train import TaskConfig, TrainConfig

REPO = pathlib.Path(__file__).resolve().parents[2]
TINY = ModelConfig(d_model=32, n_layers=2, n_heads=2, mlp_dim=64)
# d1's geometry scaled down for byte models: one block of 32, steps = 32 / 2.
SMALL = eh.EvalProtocol(gen_lengths=(32,), block_length=32, batch_size=4, num_examples=6)


@pytest.fixture(scope="module")
def tiny_model():
  return eval_models.model_from_random_init(TrainConfig(model=TINY, task=TaskConfig(name="sudoku4x4")))


def _oracle_model() -> eh.EvalModel:
  """A 'model' that copies the puzzle's givens and writes '1' into every blank, then EOS: its d1
  reward per puzzle is the fraction of blanks whose solution digit is 1 (computed below in Python)."""
  tok = ByteTokenizer()

  def logits_fn(params, tokens):
    del params
    digits = tokens[:, 1:17]  # bos + 16 puzzle digits
    fill = jnp.where(digits == ord("0"), ord("1"), digits)
    target = jnp.full(tokens.shape, tok.eos_id, jnp.int32).at[:, 17:33].set(fill)
    return jax.nn.one_hot(target, tok.vocab_size) * 10.0

  return eh.EvalModel(logits_fn, {}, ModelConfig(), {"kind": "oracle"})


def _rows(path):
  return [json.loads(l) for l in pathlib.Path(path).read_text().splitlines()]


def test_summary_is_the_tasks_metrics_of_the_jsonl_and_matches_plain_python(tmp_path):
  summary = eh.run_evaluation(_oracle_model(), ["sudoku4x4"], SMALL, tmp_path, show_progress=False)
  task = make_task("sudoku4x4", data_dir="")
  examples = task.eval_examples()[0][:6]
  rows = _rows(tmp_path / "sudoku4x4" / "gen32.jsonl")
  assert [r["index"] for r in rows] == list(range(6))
  assert [r["prompt"] for r in rows] == [ex.prompt for ex in examples]
  # The oracle's completion and reward, by hand.
  expected_c = ["".join("1" if p == "0" else p for p in ex.meta["puzzle"]) for ex in examples]
  assert [r["completion"] for r in rows] == expected_c
  expected_r = [np.mean([s == "1" for p, s in zip(ex.meta["puzzle"], ex.meta["solution"]) if p == "0"])
                for ex in examples]
  np.testing.assert_allclose([r["reward"] for r in rows], expected_r, rtol=1e-6)
  got = summary["tasks"]["sudoku4x4"]["lengths"]["32"]
  assert got["metrics"] == task.metrics([r["completion"] for r in rows], examples)
  assert got["metrics"]["cell_accuracy"] == pytest.approx(np.mean(expected_r))
  assert 0 < got["metrics"]["cell_accuracy"] < 1
  assert got["num_examples"] == 6 and all(r["completion_tokens"] == 16 for r in rows)
  for r, ex in zip(rows, examples):  # per-row metrics are the task's metrics of that one example
    single = task.metrics([r["completion"]], [ex])
    assert r["metrics"] == {k: v for k, v in single.items() if k != "num_examples"}
  on_disk = json.loads((tmp_path / "summary.json").read_text())
  assert on_disk["tasks"]["sudoku4x4"]["lengths"]["32"]["metrics"] == got["metrics"]
  outcomes = _rows(tmp_path / "sudoku4x4" / "gen32.outcomes.jsonl")  # per example, pooling to the summary
  assert [o["index"] for o in outcomes] == list(range(6))
  assert np.mean([o["strict_solved"] for o in outcomes]) == got["metrics"]["strict_solved"]
  assert (sum(o["cells_correct"] for o in outcomes) / sum(o["cells_blank"] for o in outcomes)
          == got["metrics"]["cell_accuracy"])
  md = (tmp_path / "summary.md").read_text()
  assert "## sudoku4x4" in md and f"| cell_accuracy | {got['metrics']['cell_accuracy']:.4f} |" in md


def test_tiny_model_rows_equal_plain_batched_decode_and_are_deterministic(tiny_model, tmp_path):
  protocol = dataclasses.replace(SMALL, num_examples=5)
  s1 = eh.run_evaluation(tiny_model, ["sudoku4x4", "countdown"], protocol, tmp_path / "a", show_progress=False)
  fresh = eval_models.model_from_random_init(TrainConfig(model=TINY, task=TaskConfig(name="sudoku4x4")))
  s2 = eh.run_evaluation(fresh, ["sudoku4x4"], protocol, tmp_path / "b", show_progress=False)
  a, b = (_rows(tmp_path / d / "sudoku4x4" / "gen32.jsonl") for d in "ab")
  assert [r["completion"] for r in a] == [r["completion"] for r in b]  # greedy: same outputs twice
  assert s1["tasks"]["sudoku4x4"]["lengths"]["32"]["metrics"] == s2["tasks"]["sudoku4x4"]["lengths"]["32"]["metrics"]
  assert len({r["completion"] for r in a}) > 1  # the outputs depend on the prompts
  for name in ("sudoku4x4", "countdown"):
    a = _rows(tmp_path / "a" / name / "gen32.jsonl")
    # The same decode through the library's plain batched evaluation (rollout + decode).
    task = make_task(name, data_dir="")
    examples = task.eval_examples()[0][:5]
    rollout = tiny_model.rollout_fn(protocol.rollout_config(32), task.tokenizer.mask_id, task.tokenizer.eos_id)
    ids = generate(rollout, tiny_model.params, task.encode_prompts(examples), 4, jax.random.PRNGKey(0))
    assert [r["completion"] for r in a] == task.decode_completions(ids)
    got = s1["tasks"][name]["lengths"]["32"]["metrics"]
    assert got == task.metrics([r["completion"] for r in a], examples)
    assert [r["reward"] for r in a] == pytest.approx(task.reward([r["completion"] for r in a], examples))


def test_resume_after_interruption_equals_uninterrupted(tiny_model, tmp_path):
  full = eh.run_evaluation(tiny_model, ["countdown", "sudoku4x4"], SMALL, tmp_path / "full", show_progress=False)
  part = tmp_path / "part"
  assert eh.run_evaluation(tiny_model, ["countdown", "sudoku4x4"], SMALL, part, max_batches=1,
                           show_progress=False) is None
  assert len(_rows(part / "countdown" / "gen32.jsonl")) == 4 and not (part / "summary.json").exists()
  # Interrupt the next batch mid-write: two of its rows plus half a line.
  assert eh.run_evaluation(tiny_model, ["countdown", "sudoku4x4"], SMALL, part, max_batches=2,
                           show_progress=False) is None
  sud = part / "sudoku4x4" / "gen32.jsonl"
  lines = sud.read_text().splitlines()
  assert len(lines) == 4
  sud.write_text("\n".join(lines[:2]) + "\n" + lines[2][:25])
  resumed = eh.run_evaluation(tiny_model, ["countdown", "sudoku4x4"], SMALL, part, show_progress=False)
  for name in ("countdown", "sudoku4x4"):
    assert ([r["completion"] for r in _rows(part / name / "gen32.jsonl")]
            == [r["completion"] for r in _rows(tmp_path / "full" / name / "gen32.jsonl")])
    a, b = full["tasks"][name]["lengths"]["32"], resumed["tasks"][name]["lengths"]["32"]
    assert (a["metrics"], a["num_examples"]) == (b["metrics"], b["num_examples"])
  # A finished run is reused as it is; other settings in the same folder are refused.
  again = eh.run_evaluation(tiny_model, ["countdown"], SMALL, part, max_batches=0, show_progress=False)
  assert again["tasks"]["countdown"]["lengths"]["32"]["metrics"] == full["tasks"]["countdown"]["lengths"]["32"]["metrics"]
  with pytest.raises(ConfigError, match=r"--output_dir.*rollout"):
    eh.run_evaluation(tiny_model, ["countdown"], dataclasses.replace(SMALL, steps=8), part, show_progress=False)


def test_cli_random_init_stopped_by_max_batches_then_resumed_in_process(tmp_path):
  out = tmp_path / "cli"
  cmd = [sys.executable, str(REPO / "experiments" / "evaluate.py"), "--random_init",
         "--config=" + str(REPO / "configs" / "sudoku_tiny.py") + ":smoke", "--tasks=sudoku4x4",
         "--gen_lengths=32", "--num_examples=4", "--batch_size=2", "--max_batches=1", "--progress=false",
         f"--output_dir={out}"]
  proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  first = _rows(out / "sudoku4x4" / "gen32.jsonl")
  assert "--max_batches=1" in proc.stdout and len(first) == 2
  # Finish in this process: the CLI's two rows are kept, the other two decoded here.
  import importlib.util

  spec = importlib.util.spec_from_file_location("sudoku_tiny", REPO / "configs" / "sudoku_tiny.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  model = eval_models.load_model(random_init=train_config_from_dict(module.get_config("smoke")))
  protocol = eh.EvalProtocol(gen_lengths=(32,), batch_size=2, num_examples=4)
  summary = eh.run_evaluation(model, ["sudoku4x4"], protocol, out, show_progress=False)
  rows = _rows(out / "sudoku4x4" / "gen32.jsonl")
  assert rows[:2] == first and [r["index"] for r in rows] == [0, 1, 2, 3]
  fresh = eh.run_evaluation(model, ["sudoku4x4"], protocol, tmp_path / "fresh", show_progress=False)
  assert [r["completion"] for r in rows] == [r["completion"] for r in _rows(tmp_path / "fresh" / "sudoku4x4" / "gen32.jsonl")]
  assert summary["tasks"]["sudoku4x4"]["lengths"]["32"]["metrics"] == fresh["tasks"]["sudoku4x4"]["lengths"]["32"]["metrics"]
  bad = subprocess.run(cmd[:2] + ["--tasks=sudoku4x4", f"--output_dir={out}"], capture_output=True, text=True,
                       cwd=REPO, timeout=300)
  assert bad.returncode == 2 and "exactly one of --workdir, --hf_checkpoint, --random_init" in bad.stderr


@pytest.mark.parametrize("protocol,match", [
    (dataclasses.replace(SMALL, gen_lengths=(48,)), r"--gen_lengths=48 .*multiple of --block_length=32"),
    (dataclasses.replace(SMALL, gen_lengths=(16,), block_length=16), r"--gen_lengths=16 .*>= 17.*sudoku4x4"),
    (dataclasses.replace(SMALL, steps=64), r"--steps=64"),
    (dataclasses.replace(SMALL, batch_size=0), r"--batch_size=0"),
])
def test_bad_protocol_names_the_flag(tiny_model, tmp_path, protocol, match):
  with pytest.raises(ConfigError, match=match):
    eh.run_evaluation(tiny_model, ["sudoku4x4"], protocol, tmp_path, show_progress=False)
  assert not (tmp_path / "sudoku4x4").exists()  # nothing decoded or written


def test_unknown_task_and_checkpoint_sources(tiny_model, tmp_path):
  with pytest.raises(ConfigError, match="sudoku9x9"):
    eh.run_evaluation(tiny_model, ["sudoku9x9"], SMALL, tmp_path, show_progress=False)
  with pytest.raises(ConfigError, match="exactly one of"):
    eval_models.load_model(workdir=str(tmp_path), hf_checkpoint=str(tmp_path))
  with pytest.raises(DataError, match="--workdir=.*no config.json"):
    eval_models.load_model(workdir=str(tmp_path))


def _wordlevel_tokenizer(path, extra_words):
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers

  special = ["<|endoftext|>", "<|mdm_mask|>", "<|startoftext|>", "<|start_header_id|>",
             "<|end_header_id|>", "<|eot_id|>"]
  vocab = {t: i for i, t in enumerate(special + ["[UNK]"] + extra_words)}
  t = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
  t.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
  t.decoder = decoders.WordPiece(prefix="##")
  t.add_special_tokens(special)
  path.mkdir(parents=True, exist_ok=True)
  t.save(str(path / "tokenizer.json"))
  return path


def test_byte_model_with_an_hf_tokenizer_is_refused(tiny_model, tmp_path):
  big = _wordlevel_tokenizer(tmp_path / "big", [f"w{i}" for i in range(400)])  # 407 ids > 260
  model = eval_models.load_model(random_init=TrainConfig(model=TINY), tokenizer=str(big))
  with pytest.raises(ConfigError, match=r"model.vocab_size=260 .*>= 407"):
    eh.run_evaluation(model, ["countdown"], SMALL, tmp_path / "o", show_progress=False)
  small = _wordlevel_tokenizer(tmp_path / "small", ["a", "b"])
  model = eval_models.load_model(random_init=TrainConfig(model=TINY), tokenizer=str(small))
  with pytest.raises(ConfigError, match=r"model.mask_token_id=257 .*1 for task 'countdown'"):
    eh.run_evaluation(model, ["countdown"], SMALL, tmp_path / "o", show_progress=False)


@pytest.mark.parametrize("family", ["llada", "dream"])
def test_hf_checkpoint_uses_its_tokenizer_chat_template_and_context(tmp_path, family):
  """A tiny checkpoint in the family's released layout: tasks are built with its tokenizer, chat prompts
  are its own template, prompts are as long as the longest of the evaluation set."""
  from tests.hf_fixtures import write_tiny_checkpoint

  ckpt = write_tiny_checkpoint(tmp_path / family, family, layers=1)
  model = eval_models.load_model(hf_checkpoint=str(ckpt), hf_dtype="float32")
  assert model.identity["kind"] == "hf" and model.identity["family"] == family and model.prompt_style == "chat"
  protocol = dataclasses.replace(SMALL, num_examples=2, batch_size=2)
  summary = eh.run_evaluation(model, ["countdown"], protocol, tmp_path / "o", show_progress=False)
  rows = _rows(tmp_path / "o" / "countdown" / "gen32.jsonl")
  head = {"llada": "<|startoftext|><|start_header_id|>user<|end_header_id|>\n\n",
          "dream": "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"}[family]
  assert all(r["prompt"].startswith(head) and r["prompt"].endswith("<reasoning>") for r in rows)
  task = make_task("countdown", data_dir="", prompt_style="chat", tokenizer=model.tokenizer)
  prepared = eh.prepare_task("countdown", model)
  assert prepared.task.tokenizer is model.tokenizer
  longest = max(len(model.tokenizer.prompt_ids(ex.prompt, chat=True)) for ex in task.eval_examples()[0])
  assert prepared.prompts.shape[1] == longest  # the checkpoint's tokens, no BOS id added
  assert summary["tasks"]["countdown"]["lengths"]["32"]["metrics"] == task.metrics(
      [r["completion"] for r in rows], task.eval_examples()[0][:2])
  short = dataclasses.replace(model, max_seq_len=prepared.prompts.shape[1] + 16)
  with pytest.raises(ConfigError, match=r"--gen_lengths=32 .*<= 16: the model's context"):
    eh.run_evaluation(short, ["countdown"], protocol, tmp_path / "o2", show_progress=False)


def test_hf_checkpoint_without_tokenizer_files_is_one_error(tmp_path):
  from tests.hf_fixtures import write_tiny_checkpoint

  ckpt = write_tiny_checkpoint(tmp_path / "llada", "llada", layers=1)
  (ckpt / "tokenizer_config.json").unlink()
  with pytest.raises(DataError, match=r"the tokenizer files are missing: tokenizer_config\.json"):
    eval_models.load_model(hf_checkpoint=str(ckpt), hf_dtype="float32")


def test_hf_checkpoint_without_config_json_says_so():
  # Its tokenizer files are all there; it used to say "no mask_token in tokenizer_config.json ..." (LLaDA
  # names its mask token in config.json only).
  import tempfile

  from tests.hf_fixtures import write_tiny_checkpoint

  with tempfile.TemporaryDirectory() as tmp:
    ckpt = write_tiny_checkpoint(pathlib.Path(tmp) / "llada", "llada", layers=1)
    (ckpt / "config.json").unlink()
    with pytest.raises(DataError, match=r"config\.json is missing"):
      eval_models.load_model(hf_checkpoint=str(ckpt), hf_dtype="float32")


def test_prompt_style_a_task_does_not_have_is_refused_naming_the_task_and_its_styles():
  from daca_jax.tasks.base import TASKS
  from daca_jax.tasks.sudoku import Sudoku4x4Task

  chat = dataclasses.replace(_oracle_model(), prompt_style="chat")
  prepared = eh.prepare_task("sudoku4x4", chat, 2)  # d1's Sudoku chat style: taken, not dropped
  assert prepared.task.prompt_style == "chat" and prepared.options["prompt_style"] == "chat"
  assert "Please solve the following 4x4 Sudoku puzzle" in prepared.examples[0].prompt
  with pytest.raises(ConfigError, match=r"--prompt_style='markdown' .*one of \['plain', 'chat', 'd1_train'\] "
                                        r"for task 'sudoku4x4'"):
    eh.prepare_task("sudoku4x4", dataclasses.replace(chat, prompt_style="markdown"))

  class FixedPrompt(Sudoku4x4Task):
    """Takes no prompt_style: one fixed prompt format (sudoku's plain one)."""

    OPTIONS = {"data_dir": None}

    def __init__(self, data_dir=None, tokenizer=None):
      super().__init__(data_dir=data_dir, tokenizer=tokenizer)

  with TASKS.registered("fixed_prompt_probe", FixedPrompt):
    with pytest.raises(ConfigError, match=r"--prompt_style='chat' .*task 'fixed_prompt_probe': it has no "
                                          r"prompt styles"):
      eh.prepare_task("fixed_prompt_probe", chat)
    assert eh.prepare_task("fixed_prompt_probe", _oracle_model(), 1).task.name == "sudoku4x4"
  assert "fixed_prompt_probe" not in TASKS  # the probe does not leak into later tests' task lists


def test_summary_states_the_grading_rules(tmp_path):
  summary = eh.run_evaluation(_oracle_model(), ["sudoku4x4"], SMALL, tmp_path, show_progress=False,
                              log=lambda s: None)
  rules = make_task("sudoku4x4", data_dir="").grading_rules()
  assert rules and summary["tasks"]["sudoku4x4"]["grading_rules"] == rules
  assert f"Grading: {rules}" in (tmp_path / "summary.md").read_text()
  assert json.loads((tmp_path / "summary.json").read_text())["tasks"]["sudoku4x4"]["grading_rules"] == rules


def test_decode_batches_decodes_a_batch_the_same_alone_in_any_order_and_after_a_restart():
  """The one decode loop (main job and harness): batch k has fixed rows and key fold_in(key, k), so a
  resumed harness run samples what an uninterrupted one does, even at temperature 1."""
  from daca_jax.diffusion import make_rollout_fn
  from daca_jax.evaluation.decode import decode_batches
  from daca_jax.config.rollout import RolloutConfig
  from tests import fixed_logit_model

  vocab, mask, eos, plen = 9, 8, 7, 3
  params = jax.tree.map(jnp.asarray, fixed_logit_model.make_params(plen + 6, vocab, seed=1))
  rollout = jax.jit(make_rollout_fn(fixed_logit_model.jax_logits, RolloutConfig(6, 6, 3, temperature=1.0),
                                    mask_id=mask, eos_id=eos))
  prompts = np.random.default_rng(0).integers(0, 7, (7, plen)).astype(np.int32)  # 3 batches of 3: 3, 3, 1
  key = jax.random.PRNGKey(5)
  full = list(decode_batches(rollout, params, prompts, 3, key))
  assert [b.index for b in full] == [0, 1, 2] and [len(b.rows) for b in full] == [3, 3, 1]
  assert [b.ids.shape for b in full] == [(3, 6), (3, 6), (1, 6)]
  assert len({tuple(r) for b in full for r in b.ids}) > 1  # sampled, not constant
  alone = list(decode_batches(rollout, params, prompts, 3, key, batches=[2, 0]))
  for got in alone:
    np.testing.assert_array_equal(got.ids, full[got.index].ids)
    np.testing.assert_array_equal(got.rows, full[got.index].rows)
  np.testing.assert_array_equal(np.concatenate([b.ids for b in full]), generate(rollout, params, prompts, 3, key))
  other_key = list(decode_batches(rollout, params, prompts, 3, jax.random.PRNGKey(6), batches=[0]))[0]
  assert not np.array_equal(other_key.ids, full[0].ids)
  with pytest.raises(ValueError, match=r"batch 3 is outside \[0, 3\)"):
    decode_batches(rollout, params, prompts, 3, key, batches=[0, 3])  # refused at the call, before decoding
  with pytest.raises(ValueError, match="batch size >= 1"):
    generate(rollout, params, prompts, 0, key)
  with pytest.raises(ValueError, match="needs prompts"):
    generate(rollout, params, prompts[:0], 3, key, log=lambda *a: None)


def test_max_batches_must_be_a_count(tiny_model, tmp_path):
  with pytest.raises(ConfigError, match=r"--max_batches=-1 is not allowed: expected an int >= 0"):
    eh.run_evaluation(tiny_model, ["sudoku4x4"], SMALL, tmp_path, max_batches=-1, show_progress=False)
  assert not (tmp_path / "sudoku4x4").exists()
  assert eh.run_evaluation(tiny_model, ["sudoku4x4"], SMALL, tmp_path, max_batches=0, show_progress=False) is None
