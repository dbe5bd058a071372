"""Shared base of the question-answer reasoning tasks read from benchmark files (gsm8k, math500).

Prompts: ``"chat"`` is d1's evaluation prompt (the subclass's ``SYSTEM_PROMPT`` + the question in the
tokenizer's chat template, see :func:`daca_jax.tasks.reasoning_format.d1_chat_prompt`); ``"d1_train"``
is d1's RL training prompt (the subclass's :meth:`~ReasoningQATask.d1_train_message` in the same
template, nothing pre-filled; :mod:`daca_jax.tasks.d1_train_prompts`); ``"plain"`` is the bare question.

Rewards: ``correct`` (1.0 or 0.0) plus, for the ``"chat"`` and ``"d1_train"`` prompt styles,
``format_weight`` times the d1 strict + soft format rewards (each 0 or 0.5; see :mod:`daca_jax.tasks.reasoning_format`), so a
completion scores >= 1 iff it is correct (d1 weighs correctness 2.0 and each format term 0.5; this
keeps the trainer's ``accuracy = reward >= 1`` meaningful). The ``"plain"`` style has no format term.
A completion that hits a grader bound (longer than ``text_scan.MAX_COMPLETION_CHARS``, or a
verification that ran out of time) gets reward 0 and is counted in the metric ``grader_bound_hits``
(and in the task's running total ``num_bound_hits``).
"""
from __future__ import annotations

import abc
import functools
import os
import pathlib
from typing import Any, Sequence

import numpy as np

from daca_jax.data import local, sources
from daca_jax.errors import ConfigError, DataError
from daca_jax.tasks import reasoning_format as fmt
from daca_jax.tasks import text_scan
from daca_jax.tasks.base import DATA_OPTIONS, check_eval_path, Example, Task
from daca_jax.tasks.tokenizer import Tokenizer


class ReasoningQATask(Task):
  """A task whose items come from local benchmark files (``<data_dir>/<EVAL_FILE>``, ``TRAIN_FILE``).

  Args:
    data_dir: data directory (``data.data_dir``; ``None`` = none, ``""`` = the default if it exists), or a
      source of the benchmark files (:mod:`daca_jax.data.sources`, e.g. the TFDS datasets).
    eval_path: explicit evaluation file (same layout as ``EVAL_FILE``); overrides ``data_dir``.
    prompt_style: ``"plain"``, ``"chat"`` or ``"d1_train"``.
    format_weight: weight of the format rewards (chat and d1_train styles), in [0, 1).
    prompt_len: fixed prompt length in tokens; 0 = the longest prompt of the data files.
    tokenizer: the model's tokenizer (None: the byte tokenizer).

  Raises:
    ConfigError: bad ``prompt_style``, ``format_weight`` or ``prompt_len``, or the chat style with a
      tokenizer that has no chat template.
    FileNotFoundError: ``eval_path`` or ``data_dir`` is given but does not exist.
  """

  EVAL_FILE: str = ""
  TRAIN_FILE: str = ""
  DESCRIPTION: str = ""
  SYSTEM_PROMPT: str = ""  # d1's system prompt of the task (chat style)
  prompt_styles = fmt.REASONING_PROMPT_STYLES
  OPTIONS = {**DATA_OPTIONS, "prompt_style": "chat", "format_weight": 0.1, "prompt_len": 0}

  def __init__(self, data_dir: str | os.PathLike[str] | None = None, eval_path: str = "",
               prompt_style: str = "chat", format_weight: float = 0.1, prompt_len: int = 0,
               tokenizer: Tokenizer | None = None):
    self.prompt_style = fmt.check_prompt_style(prompt_style, self.prompt_styles)
    self._set_tokenizer(tokenizer)
    if isinstance(format_weight, bool) or not isinstance(format_weight, (int, float)) or not (
        0 <= format_weight < 1):
      raise ConfigError("task.options.format_weight", format_weight, "a number in [0, 1)")
    if isinstance(prompt_len, bool) or not isinstance(prompt_len, (int, np.integer)) or prompt_len < 0:
      raise ConfigError("task.options.prompt_len", prompt_len, "an int >= 0 (0 = automatic)")
    self.format_weight = float(format_weight)
    self.eval_path = check_eval_path(eval_path)
    self.benchmarks = sources.open_benchmarks(data_dir)
    self._fixed_prompt_len = int(prompt_len)
    self._cache: dict[str, tuple[list[Example], str]] = {}
    self.num_bound_hits = 0

  # --- subclass hooks -------------------------------------------------------------------------------
  @abc.abstractmethod
  def make_example(self, record: dict, where: str) -> Example | None:
    """Builds an example from one file record; None for a record without a gold answer (skipped in
    training data, an error in evaluation data); raises DataError naming ``where`` if malformed."""

  @abc.abstractmethod
  def answer_only_target(self, example: Example) -> str:
    """The shortest completion that holds the example's full answer (sets ``min_gen_length``)."""

  @abc.abstractmethod
  def grade(self, completions: Sequence[str],
            examples: Sequence[Example]) -> tuple[list[bool], list[bool]]:
    """``(correct, bound_hit)`` per completion: whether its answer is right, and whether grading
    stopped at a bound (then ``correct`` is False)."""

  @abc.abstractmethod
  def d1_train_message(self, question: str) -> str:
    """d1's training prompt of ``question`` as one user message (:mod:`daca_jax.tasks.d1_train_prompts`)."""

  @abc.abstractmethod
  def grading_rules(self) -> str:
    """One line naming the extraction/equivalence rules and options in force (evaluation summary)."""

  def correct(self, completions: Sequence[str], examples: Sequence[Example]) -> list[bool]:
    """Whether each completion's answer is right."""
    self._check(completions, examples)
    return self.grade(completions, examples)[0]

  # --- data ----------------------------------------------------------------------------------------
  def _load(self, kind: str) -> tuple[list[Example], str]:
    if kind not in self._cache:
      rel = self.EVAL_FILE if kind == "eval" else self.TRAIN_FILE
      data = self.benchmarks
      if kind == "eval" and self.eval_path:
        path = pathlib.Path(self.eval_path).expanduser()
        if not path.is_file():
          raise DataError(f"task {self.name!r}: {path} does not exist (set by task.eval_path)")
        where, records = str(path), local.read_json_records(path)
      elif data is None:
        raise DataError(f"task {self.name!r} needs {rel} from the data directory, but data.data_dir is "
                        f"unset and {local.default_data_dir()} does not exist")
      elif not data.has(rel):
        raise DataError(f"task {self.name!r}: {data.where(rel)} does not exist (set by {data.field})")
      else:
        where, records = data.where(rel), data.json_records(rel)
      built = [self.make_example(r, f"{where}: record {i}") for i, r in enumerate(records)]
      examples = [ex for ex in built if ex is not None]
      skipped = len(built) - len(examples)
      if kind == "eval" and skipped:
        bad = next(i for i, ex in enumerate(built) if ex is None)
        raise DataError(f"{where}: record {bad} has no gold answer ({skipped} such records)")
      if not examples:
        raise DataError(f"{where}: no records")
      note = f", {skipped} records without a gold answer skipped" if skipped else ""
      self._cache[kind] = (examples, f"{self.DESCRIPTION} {where} ({len(examples)} items{note})")
    return self._cache[kind]

  def eval_examples(self) -> tuple[list[Example], str]:
    """Returns ``(examples, source)`` from ``eval_path`` or ``<data_dir>/EVAL_FILE`` (cached)."""
    examples, source = self._load("eval")
    return list(examples), source

  def train_examples(self, num: int, seed: int) -> list[Example]:
    """``num`` distinct records of ``<data_dir>/TRAIN_FILE`` in a seeded random order.

    Raises:
      DataError: the file is missing or holds fewer than ``num`` records.
    """
    examples, source = self._load("train")
    if num > len(examples):
      raise DataError(f"asked for {num} training examples (sft.num_train_examples) but {source} "
                      f"has only {len(examples)}")
    order = np.random.default_rng(seed).permutation(len(examples))[:num]
    return [examples[i] for i in order]

  @functools.cached_property
  def prompt_len(self) -> int:  # type: ignore[override]
    if self._fixed_prompt_len:
      return self._fixed_prompt_len
    kinds = ["eval"] + (["train"] if self.benchmarks is not None and self.benchmarks.has(self.TRAIN_FILE) else [])
    return max(len(self.prompt_ids(ex.prompt)) for k in kinds for ex in self._load(k)[0])

  @functools.cached_property
  def min_gen_length(self) -> int:  # type: ignore[override]
    return 1 + max(len(self.tokenizer.encode(self.answer_only_target(ex)))
                   for ex in self._load("eval")[0])

  def format_prompt(self, question: str) -> str:
    """The prompt text of ``question`` in this task's prompt style."""
    if self.prompt_style == "chat":
      return fmt.d1_chat_prompt(self.chat_template, self.SYSTEM_PROMPT, question)
    if self.prompt_style == fmt.D1_TRAIN:
      return self.chat_template.user_turn(self.d1_train_message(question))
    return f"{question}\n"

  # --- grading -------------------------------------------------------------------------------------
  def _check(self, completions: Sequence[str], examples: Sequence[Example]) -> None:
    if len(completions) != len(examples):
      raise ValueError(f"got {len(completions)} completions for {len(examples)} examples")

  def _format_scores(self, completions: Sequence[str]) -> np.ndarray:
    if self.prompt_style == "plain":
      return np.zeros(len(completions), np.float32)
    prefix = fmt.completion_prefix(self.prompt_style)
    return np.asarray([0.0 if text_scan.over_limit(c) else
                       fmt.strict_format_reward(c, prefix) + fmt.soft_format_reward(c, prefix)
                       for c in completions], np.float32).reshape(len(completions))

  def _graded(self, completions: Sequence[str],
              examples: Sequence[Example]) -> tuple[np.ndarray, np.ndarray]:
    self._check(completions, examples)
    correct, hits = self.grade(completions, examples)
    hits = np.asarray(hits, bool).reshape(len(examples))
    self.num_bound_hits += int(hits.sum())
    return np.asarray(correct, bool).reshape(len(examples)), hits

  def reward(self, completions: Sequence[str], examples: Sequence[Example]) -> np.ndarray:
    """float32 ``[N]``: correctness (0/1) + ``format_weight`` x (strict + soft) in the chat and d1_train
    styles; 0 for a
    completion that hit a grader bound."""
    correct, hits = self._graded(completions, examples)
    rewards = correct.astype(np.float32) + self.format_weight * self._format_scores(completions)
    return np.where(hits, 0.0, rewards).astype(np.float32)

  def metrics(self, completions: Sequence[str], examples: Sequence[Example]) -> dict[str, Any]:
    """``accuracy``, ``strict_format`` (chat, d1_train: layout exactly right), ``grader_bound_hits`` (count),
    ``num_examples``."""
    correct, hits = self._graded(completions, examples)
    n = len(examples)
    prefix = fmt.completion_prefix(self.prompt_style)
    strict = [not h and fmt.strict_format_reward(c, prefix) > 0 for c, h in zip(completions, hits)]
    return {"accuracy": float(np.mean(correct)) if n else 0.0,
            "strict_format": float(np.mean(strict)) if n else 0.0,
            "grader_bound_hits": float(hits.sum()),
            "num_examples": float(n)}
