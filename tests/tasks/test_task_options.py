"""Tasks declare the options they take (``Task.OPTIONS``); configs and the evaluation harness read that
declaration, never a constructor signature (GSM8K/MATH500 took ``*args, **kwargs``, so
``evaluate.py --hf_checkpoint ... --tasks=gsm8k,math500`` refused their chat style)."""
import dataclasses
import inspect

import pytest

from daca_jax.errors import ConfigError
from daca_jax.evaluation.protocol import check_prompt_style
from daca_jax.run.task_views import task_kwargs
from daca_jax.tasks.base import TASKS
from tests.smoke_config import smoke


@pytest.mark.parametrize("name", TASKS.names())
def test_declared_options_are_the_constructor_arguments_with_their_defaults(name):
  cls = TASKS.get(name)
  params = inspect.signature(cls.__init__).parameters
  assert not [p for p in params.values() if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)], (
      f"{name}: a constructor with *args/**kwargs hides the options it takes")
  taken = {n: p.default for n, p in params.items() if n not in ("self", "tokenizer")}
  assert taken == dict(cls.OPTIONS)
  assert "tokenizer" in params and params["tokenizer"].default is None
  assert ("prompt_style" in cls.OPTIONS) == bool(cls.prompt_styles)


@pytest.mark.parametrize("name", ["gsm8k", "math500", "countdown", "sudoku4x4", "humaneval", "mbpp", "json_schema"])
def test_every_task_takes_the_chat_style_an_hf_checkpoint_asks_for(name):
  """The harness's check (what --hf_checkpoint's chat prompts go through): refused today for gsm8k and
  math500, whose constructors took *args/**kwargs."""
  assert check_prompt_style(TASKS.get(name), name, "chat") == "chat"


def test_task_options_are_checked_against_the_declaration():
  cfg = smoke(task__name="gsm8k", task__options={"last_number_fallback": True, "format_weight": 0.2})
  kwargs = task_kwargs(cfg)
  assert kwargs["last_number_fallback"] is True and kwargs["format_weight"] == 0.2
  assert set(kwargs) <= set(TASKS.get("gsm8k").OPTIONS) and "num_blanks" not in kwargs  # not declared
  bad = dataclasses.replace(cfg, task=dataclasses.replace(cfg.task, options={"temperature": 2}))
  with pytest.raises(ConfigError, match=r"task\.options\.temperature=2 .*one of the options task 'gsm8k' declares: "
                                        r"\['eval_path', 'format_weight', 'last_number_fallback', 'prompt_len', "
                                        r"'prompt_style'\]"):
    task_kwargs(bad)
  sudoku = task_kwargs(smoke())
  assert {"num_blanks", "eval_size", "eval_path", "data_dir"} <= set(sudoku)  # TaskConfig fields it declares


@pytest.mark.parametrize("name", ["sudoku4x4", "countdown", "gsm8k", "mbpp"])
def test_an_eval_path_that_is_a_folder_or_missing_is_named(name, tmp_path):
  # A folder was "file does not exist" (wrong, and the same text in four tasks' copies of the check).
  from daca_jax.tasks import make_task
  with pytest.raises(ConfigError, match=r"^task.eval_path='.*' is not allowed: expected a data file; it is a folder"):
    make_task(name, eval_path=str(tmp_path))
  with pytest.raises(FileNotFoundError, match=r"^task.eval_path='.*missing.jsonl': file does not exist"):
    make_task(name, eval_path=str(tmp_path / "missing.jsonl"))
  binary = tmp_path / "binary.jsonl"  # was the reader's "not UTF-8 text" naming the file only, at first read
  binary.write_bytes(b'{"a": 1}\n\x00\x01\xff\xfe')
  with pytest.raises(ConfigError, match=r"^task.eval_path='.*binary.jsonl' is not allowed: expected a UTF-8 text "
                                        r"file in the task's layout; byte 11 is not \(invalid start byte\)"):
    make_task(name, eval_path=str(binary))
