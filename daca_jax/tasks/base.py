"""The task interface used by the trainer, and the task registry.

A task bundles prompt formatting, a tokenizer, reward functions, evaluation metrics and a data
source. Tasks are selected by name through :data:`TASKS` (config field
``task.name``) and built with :func:`make_task`.

A task is built for one model's tokenizer (constructor argument ``tokenizer``; None: the
:class:`~daca_jax.tasks.tokenizer.ByteTokenizer` of the tiny models, or e.g. a checkpoint's
:class:`~daca_jax.tasks.hf_tokenizer.HFTokenizer`); its chat prompt style renders the tokenizer's own
chat template. Every other constructor argument is an option the task DECLARES in its ``OPTIONS``
table (name -> default): configs (``task.options``) and the evaluation harness read that table.

Token layout shared by every task (see :meth:`Task.encode_prompts` / :meth:`Task.encode_targets`):

* prompt: ``[pad, ..., pad, prompt ids...]``, exactly ``prompt_len`` tokens (left-padded); the prompt
  ids are the tokenizer's :meth:`prompt_ids` (byte tokenizer: ``bos`` + the prompt's bytes);
* completion / SFT target: ``[target tokens..., eos, eos, ...]``, exactly ``gen_length`` tokens.
"""
from __future__ import annotations

import abc
import dataclasses
import json
import os
import pathlib
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np

from daca_jax.errors import ConfigError
from daca_jax.registry import Registry
from daca_jax.tasks.chat import ChatTemplate, require_chat_template
from daca_jax.tasks.tokenizer import ByteTokenizer, Tokenizer

# Options every file-backed task declares (name -> default).
DATA_OPTIONS = {"data_dir": None, "eval_path": ""}
# Options that come from TaskConfig fields (task.<name>) rather than task.options.
CONFIG_FIELD_OPTIONS = ("eval_path", "eval_size", "num_blanks")
# Prompt styles whose prompts are rendered with the tokenizer's chat template: d1's evaluation prompts
# ("chat") and its RL training prompts ("d1_train", daca_jax.tasks.d1_train_prompts).
TEMPLATED_PROMPT_STYLES = ("chat", "d1_train")


def check_eval_path(eval_path: Any) -> str:
  """``task.eval_path`` as a string ("" when unset), checked when the task is made, before any work.

  Raises:
    FileNotFoundError: the path does not exist (the message names ``task.eval_path``).
    ConfigError: it is a folder, not a string, or a file that is not UTF-8 text (a ``.gz`` file is
      read by its task).
  """
  if not eval_path:
    return ""
  if not isinstance(eval_path, (str, os.PathLike)):
    raise ConfigError("task.eval_path", eval_path, "a path to the evaluation file")
  path = pathlib.Path(eval_path).expanduser()
  if path.is_dir():
    raise ConfigError("task.eval_path", str(eval_path), "a data file; it is a folder")
  if not path.is_file():
    raise FileNotFoundError(f"task.eval_path={str(eval_path)!r}: file does not exist")
  if not path.name.endswith(".gz"):  # every task reads its eval file as text; the field named here, not later
    try:
      path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
      raise ConfigError("task.eval_path", str(eval_path),
                        f"a UTF-8 text file in the task's layout; byte {e.start} is not ({e.reason})") from None
  return str(eval_path)


@dataclasses.dataclass(frozen=True)
class Example:
  """One task example.

  Attributes:
    prompt: task input text given to the model (before tokenization; no special tokens).
    target: reference completion used as the SFT target (no EOS; :meth:`Task.encode_targets`
      appends EOS padding).
    meta: task-specific fields used by the grader (e.g. ``{"puzzle": ..., "solution": ...}``).
  """

  prompt: str
  target: str
  meta: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def _describe(example: Example, index: int, limit: int = 60) -> str:
  text = example.prompt if len(example.prompt) <= limit else example.prompt[:limit] + "..."
  return f"example {index} (prompt {text!r})"


class Task(abc.ABC):
  """Abstract task.

  Subclasses set the attributes below in ``__init__`` (or as class attributes) and implement the
  abstract methods.

  Attributes:
    name: registry name of the task (value of ``task.name``).
    OPTIONS: the constructor arguments the task takes besides ``tokenizer``, name -> default (a test
      checks it against the constructor). ``task.options`` may set any but ``data_dir``.
    tokenizer: the tokenizer used by :meth:`encode_prompts` / :meth:`encode_targets`.
    prompt_style: the prompt format ("plain"; "chat" and "d1_train", :data:`TEMPLATED_PROMPT_STYLES`,
      render the tokenizer's chat template).
    prompt_len: fixed number of prompt tokens P (the prompt ids, left-padded with pad_id).
    min_gen_length: smallest completion length (tokens, including one EOS) that can hold a full
      answer.
    primary_metric: the key of :meth:`metrics` that tables and the reproduction grid report.
    prompt_styles: the values the constructor's ``prompt_style`` argument accepts; ``()`` for a task
      with one fixed prompt format (and no such argument).
    num_bound_hits: running count of completions that hit a grader bound (too long, out of time);
      they score 0 and :meth:`metrics` reports the batch's count as ``grader_bound_hits``.
  """

  name: str
  OPTIONS: ClassVar[Mapping[str, Any]] = {}
  primary_metric: str = "accuracy"
  prompt_styles: tuple[str, ...] = ()
  prompt_style: str = "plain"
  num_bound_hits: int = 0
  tokenizer: Tokenizer
  prompt_len: int
  min_gen_length: int

  def _set_tokenizer(self, tokenizer: Tokenizer | None) -> None:
    """Sets ``tokenizer`` (None: the byte tokenizer); with a templated prompt style it must have a chat
    template (ConfigError naming ``task.options.prompt_style`` otherwise). Call after ``prompt_style``."""
    self.tokenizer = ByteTokenizer() if tokenizer is None else tokenizer
    if self.prompt_style in TEMPLATED_PROMPT_STYLES:
      require_chat_template(self.tokenizer, self.name, self.prompt_style)

  @property
  def chat_template(self) -> ChatTemplate:
    """The tokenizer's chat template (ConfigError if it has none)."""
    return require_chat_template(self.tokenizer, self.name, self.prompt_style)

  def prompt_ids(self, prompt: str) -> list[int]:
    """The ids of one prompt text: the tokenizer's :meth:`prompt_ids` in this task's prompt style."""
    return self.tokenizer.prompt_ids(prompt, chat=self.prompt_style in TEMPLATED_PROMPT_STYLES)

  @abc.abstractmethod
  def train_examples(self, num: int, seed: int) -> list[Example]:
    """Returns ``num`` training examples; deterministic for a given ``seed``."""

  def item_key(self, example: Example) -> str:
    """The identity of an example's item whatever its prompt style (two examples of one item have one
    key): its ``meta`` as sorted JSON. Held-out splits are kept apart by it."""
    return json.dumps(dict(example.meta), sort_keys=True, default=str)

  @abc.abstractmethod
  def eval_examples(self) -> tuple[list[Example], str]:
    """Returns ``(examples, source)``: the evaluation set and a human-readable description of it."""

  @abc.abstractmethod
  def reward(self, completions: Sequence[str], examples: Sequence[Example]) -> np.ndarray:
    """Returns float32 ``[N]`` rewards of decoded ``completions[i]`` for ``examples[i]``."""

  @abc.abstractmethod
  def metrics(self, completions: Sequence[str], examples: Sequence[Example]) -> dict[str, float]:
    """Returns evaluation metrics; always includes ``"num_examples"``."""

  # Metrics of :meth:`metrics` that count completions (their per-example outcomes sum to them); every
  # other metric but ``num_examples`` is a rate, the mean of its per-example outcomes.
  count_metrics: ClassVar[tuple[str, ...]] = ("grader_bound_hits", "validator_errors")

  def example_outcomes(self, completions: Sequence[str], examples: Sequence[Example]) -> dict[str, np.ndarray]:
    """Per-example evaluation outcomes: what :meth:`metrics` pools, one value per example.

    Args:
      completions: N decoded completions.
      examples: the N examples.
    Returns:
      ``{name: float64 [N]}`` with every key of :meth:`metrics` but ``num_examples``: a rate is the mean
      of its column, a count (:attr:`count_metrics`) the sum. A task may add columns (Sudoku's blank-cell
      counts) and say how they pool.

    The default grades each example alone with :meth:`metrics` (one grading call per example, so the
    rates it returns are exact for tasks whose rates are means over examples); tasks with per-example
    grades at hand override it and pool :meth:`metrics` from it. Like :meth:`metrics`, it adds the
    bound hits it grades to ``num_bound_hits``.
    """
    rows = [self.metrics([c], [ex]) for c, ex in zip(completions, examples, strict=True)]
    names = [k for k in (rows[0] if rows else self.metrics([], [])) if k != "num_examples"]
    return {k: np.asarray([float(r[k]) for r in rows], np.float64).reshape(len(rows)) for k in names}

  def grading_rules(self) -> str:
    """One line naming how completions are graded (printed in evaluation summaries); "" if the task
    does not say."""
    return ""

  # Whether :meth:`token_rewards` is defined (credit ``token_reward``).
  has_token_rewards: bool = False

  def token_rewards(self, completion_ids: np.ndarray,
                    examples: Sequence[Example]) -> tuple[np.ndarray, np.ndarray]:
    """Rewards of individual completion tokens, for tasks whose reward decomposes over tokens.

    Args:
      completion_ids: int32 ``[N, L]`` completion tokens (as sampled, EOS included).
      examples: the N examples.
    Returns:
      ``(rewards, mask)``: float32 ``[N, L]`` each; ``mask`` is 1 on the tokens that carry a reward.
    Raises:
      NotImplementedError: the task defines no token rewards (``has_token_rewards`` is False).
    """
    raise NotImplementedError(f"task {self.name!r} defines no token rewards")

  def encode_prompts(self, examples: Sequence[Example], prompt_len: int | None = None) -> np.ndarray:
    """Tokenizes prompts with :meth:`prompt_ids`, left-padded with ``pad_id``.

    Args:
      examples: N examples.
      prompt_len: P (None: the task's ``prompt_len``).

    Returns:
      int32 array ``[N, P]``.

    Raises:
      ValueError: a prompt needs more than P tokens; the message names the example.
    """
    tok = self.tokenizer
    p = int(self.prompt_len if prompt_len is None else prompt_len)
    out = np.full((len(examples), p), tok.pad_id, dtype=np.int32)
    for i, ex in enumerate(examples):
      ids = self.prompt_ids(ex.prompt)
      if len(ids) > p:
        raise ValueError(
            f"task {self.name!r}: {_describe(ex, i)} needs {len(ids)} prompt tokens, more than "
            f"prompt_len={p}")
      out[i, p - len(ids):] = ids
    return out

  def encode_targets(self, examples: Sequence[Example], gen_length: int) -> np.ndarray:
    """Tokenizes SFT targets as ``encode(target)`` followed by ``eos_id`` up to ``gen_length``.

    Every row holds at least one ``eos_id``.

    Args:
      examples: N examples.
      gen_length: completion length G (config field ``rollout.gen_length``).

    Returns:
      int32 array ``[N, gen_length]``.

    Raises:
      ConfigError (a ValueError): ``gen_length`` is not a positive int, or a target plus one EOS
        does not fit; the message names ``rollout.gen_length``, its value and the needed length.
    """
    if (isinstance(gen_length, bool) or not isinstance(gen_length, (int, np.integer))
        or gen_length < 1):
      raise ConfigError("rollout.gen_length", gen_length, "a positive int")
    tok = self.tokenizer
    g = int(gen_length)
    out = np.full((len(examples), g), tok.eos_id, dtype=np.int32)
    encoded = [tok.encode(ex.target) for ex in examples]
    if encoded:
      needed = max(len(ids) for ids in encoded) + 1
      if needed > g:
        worst = max(range(len(encoded)), key=lambda i: len(encoded[i]))
        raise ConfigError(
            "rollout.gen_length", g,
            f">= {needed} for task {self.name!r} (the target of "
            f"{_describe(examples[worst], worst)} is {needed - 1} tokens plus one EOS)")
    for i, ids in enumerate(encoded):
      out[i, :len(ids)] = ids
    return out

  def decode_completions(self, ids: Any) -> list[str]:
    """Decodes completion ids ``[N, G]`` to text, stopping at the first EOS of each row."""
    return self.tokenizer.decode_batch(ids, stop_at_eos=True)


TASKS: Registry[type[Task]] = Registry("task", "task.name")


def make_task(name: str, **kwargs: Any) -> Task:
  """Builds the task registered as ``name``.

  Args:
    name: a registered task name (config field ``task.name``), e.g. ``"sudoku4x4"``.
    **kwargs: forwarded to the task's constructor (its declared ``OPTIONS`` and ``tokenizer``).

  Returns:
    The task instance.

  Raises:
    ConfigError: ``name`` is not registered (the message lists the valid names).
  """
  # The built-in tasks are registered: importing this module ran daca_jax/tasks/__init__.py first.
  return TASKS.get(name)(**kwargs)


def declared_options(name: str) -> Mapping[str, Any]:
  """The options task ``name`` declares (its ``OPTIONS``: name -> default).

  Raises:
    ConfigError: ``name`` is not registered.
  """
  return TASKS.get(name).OPTIONS
