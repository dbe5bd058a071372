"""4x4 Sudoku task (``sudoku4x4``): enumeration, puzzle generator, graders and data.

Grids are 16-character strings of digits in row-major order, ``'0'`` = blank (the format of
dllm-reasoning/d1 ``dataset/4x4_test_sudoku.csv``). A valid solution has every row, column and
2x2 box holding 1..4 exactly once; there are 288 such grids, enumerated here by backtracking.

Prompt styles (``prompt_style``):

* ``"plain"`` (tiny byte-level models): ``prompt = puzzle`` (16 digits; the tokenizer adds ``bos``,
  so ``prompt_len = 17``) and ``target = solution`` (16 digits; ``min_gen_length = 17`` with one
  EOS). The answer is the completion's first 16 characters after leading whitespace.
* ``"chat"`` (LLaDA-8B-Instruct, d1's protocol): d1's Sudoku evaluation prompt (d1
  ``eval/sudoku.py``: :data:`SYSTEM_PROMPT` and ``"Solve the following Sudoku puzzle: <puzzle>"``
  in LLaDA's chat template, then ``<reasoning>``); the answer is a 16-character string inside
  ``<answer>`` tags, read by :func:`extract_chat_answer` with d1's evaluation parser
  (``eval/parse_and_get_acc.py``, ``parse_sudoku_answers``): the first of its five patterns that
  finds a non-empty string (digits in a code fence inside the answer; the first answer span; the
  text after ``</answer>``; 16 digits before a ``</answer>``; a free-standing 16-digit number),
  whitespace removed, then padded with ``0`` or truncated to 16 characters for cell accuracy.
* ``"d1_train"``: d1's Sudoku training prompt (:func:`daca_jax.tasks.d1_train_prompts.sudoku_message`:
  the same system prompt and question, nothing pre-filled); answers are read as in ``"chat"``.

Rewards and metrics:

* ``reward`` (d1's reward): fraction of the puzzle's blank cells whose digit equals the stored
  solution (0 for a completion longer than :data:`daca_jax.tasks.text_scan.MAX_COMPLETION_CHARS`,
  a grader bound hit counted in the metric ``grader_bound_hits``).
* ``cell_accuracy`` (d1's reported Sudoku number): correct blank cells / all blank cells over the
  evaluation set (d1 sums cells over puzzles; its test puzzles all have 8 blanks, so this equals the
  mean reward there).
* ``strict_solved``: the answer is a valid complete grid keeping every given. Any valid
  completion counts, since d1's puzzles do not all have a unique solution (376 of 500 do).
* ``token_rewards`` (for the ``token_reward`` oracle credit; ``"plain"`` style only): each blank
  cell's token gets 1 if its digit equals the stored solution, else 0; givens and EOS padding carry
  none. Their sum divided by
  the number of blanks is d1's reward of an ASCII completion, exactly (a blank cell the completion
  does not reach is wrong and has no token).

The module is the task and its prompts; the grids, solution counting and puzzle generator are in
:mod:`daca_jax.tasks.sudoku_grids`, the answer readers and the cell reward (with where the chat grader
differs from d1's parser) in :mod:`daca_jax.tasks.sudoku_answers`; both are re-exported here.
"""
from __future__ import annotations

import os
import pathlib
from typing import Any, Sequence

import numpy as np

from daca_jax.data import local, sources
from daca_jax.errors import ConfigError, DataError
from daca_jax.tasks import d1_train_prompts
from daca_jax.tasks import reasoning_format as fmt
from daca_jax.tasks import text_scan
from daca_jax.tasks.base import DATA_OPTIONS, check_eval_path, TASKS, Example, Task
from daca_jax.tasks.sudoku_answers import (answer_grid, cell_reward, correct_cells, extract_chat_answer,
                                           parse_completion)
from daca_jax.tasks.sudoku_grids import (NUM_CELLS, NUM_SOLUTION_GRIDS, all_solution_grids, check_num_blanks,
                                         count_solutions, generate_puzzles, is_valid_solution, max_unique_blanks)
from daca_jax.tasks.tokenizer import Tokenizer

__all__ = ["D1_TEST_FILE", "NUM_CELLS", "NUM_SOLUTION_GRIDS", "SYSTEM_PROMPT", "Sudoku4x4Task", "all_solution_grids",
           "answer_grid", "cell_reward", "correct_cells", "count_solutions", "extract_chat_answer",
           "generate_puzzles", "is_valid_solution", "max_unique_blanks", "parse_completion"]

D1_TEST_FILE = "sudoku/d1_test.csv"  # relative to the data dir (see ../shared/data/SOURCES.md)

# d1's Sudoku evaluation system prompt (dllm-reasoning/d1 eval/sudoku.py, SUDOKU_SYSTEM_PROMPT),
# verbatim; the question that follows it is "Solve the following Sudoku puzzle: <puzzle>\n".
SYSTEM_PROMPT = """
Please solve the following 4x4 Sudoku puzzle. The puzzle is provided as a 16-character string reading left-to-right, top-to-bottom, where '0' represents empty cells.

Rules:
- Fill empty cells with digits 1-4
- Each row must contain digits 1-4 exactly once
- Each column must contain digits 1-4 exactly once
- Each 2x2 box must contain digits 1-4 exactly once

Important: Your solution must be a COMPLETE 16-character string with only the digits 1-4, representing your final solved grid.

Respond in this exact format:
<reasoning>
Your step-by-step solving process
</reasoning>
<answer>
[16-character solution string with no spaces or separators]
</answer>
"""
_CHAT_REASONING = ("Each row, column and 2x2 box must hold 1-4 once; filling the blanks in order "
                   "leaves one digit for each.")

# Bytes that str.lstrip() removes (the ASCII whitespace), for the token view of parse_completion.
_ASCII_SPACE = np.asarray([b for b in range(128) if chr(b).isspace()], np.int32)


@TASKS.register("sudoku4x4")
class Sudoku4x4Task(Task):
  """4x4 Sudoku: 16-digit puzzle in, 16-digit solution out.

  Args:
    data_dir: data directory (config field ``data.data_dir``): ``None`` = no local data; ``""`` =
      :func:`daca_jax.data.local.default_data_dir` if it exists; otherwise a directory that must
      exist; or a source of the benchmark files (:mod:`daca_jax.data.sources`, e.g. the TFDS datasets).
      The d1 test set is read from ``<data_dir>/sudoku/d1_test.csv`` when present.
    eval_path: explicit evaluation CSV (``Puzzle,Solution`` header, d1 layout); overrides
      ``data_dir``.
    num_blanks: blanks per generated puzzle (int or inclusive ``(lo, hi)``), used for training
      examples and for the generated fallback evaluation set.
    eval_size: size of the generated fallback evaluation set.
    seed: seed of the generated fallback evaluation set.
    prompt_style: ``"plain"``, ``"chat"`` (d1's evaluation prompt and answer format) or ``"d1_train"``
      (d1's training prompt); see the module docstring.
    tokenizer: the model's tokenizer (None: the byte tokenizer).

  Raises:
    FileNotFoundError: ``eval_path`` is given but does not exist (message names
      ``task.eval_path``), or ``data_dir`` is given but does not exist (names ``data.data_dir``).
    ConfigError: bad ``num_blanks`` / ``eval_size`` / ``prompt_style``, or the chat style with a
      tokenizer that has no chat template.
  """

  primary_metric = "strict_solved"

  name = "sudoku4x4"
  prompt_styles = fmt.REASONING_PROMPT_STYLES
  OPTIONS = {**DATA_OPTIONS, "num_blanks": 8, "eval_size": 500, "seed": 1234, "prompt_style": "plain"}

  def __init__(
      self,
      data_dir: str | os.PathLike[str] | None = None,
      eval_path: str = "",
      num_blanks: int | tuple[int, int] = 8,
      eval_size: int = 500,
      seed: int = 1234,
      prompt_style: str = "plain",
      tokenizer: Tokenizer | None = None,
  ):
    self.prompt_style = fmt.check_prompt_style(prompt_style, self.prompt_styles)
    self._set_tokenizer(tokenizer)
    check_num_blanks(num_blanks)
    if (isinstance(eval_size, bool) or not isinstance(eval_size, (int, np.integer))
        or eval_size < 1):
      raise ConfigError("task.eval_size", eval_size, "a positive int")
    self.num_blanks: int | tuple[int, int] = (
        tuple(num_blanks) if isinstance(num_blanks, (tuple, list)) else int(num_blanks))
    self.eval_size = int(eval_size)
    self.seed = int(seed)
    self.eval_path = check_eval_path(eval_path)
    self.benchmarks = sources.open_benchmarks(data_dir)
    self._eval: tuple[list[Example], str] | None = None
    self.num_bound_hits = 0
    self.has_token_rewards = self.prompt_style == "plain"
    # Prompts and targets have one length in bytes for every puzzle (16 digits each); another tokenizer
    # may merge digits, so each digit's run is probed.
    probes = self._examples([(d * NUM_CELLS, "1" * NUM_CELLS) for d in "01234"])
    self.prompt_len = max(len(self.prompt_ids(probe.prompt)) for probe in probes)
    self.min_gen_length = 1 + len(self.tokenizer.encode(probes[0].target))

  def _examples(self, rows: Sequence[tuple[str, str]]) -> list[Example]:
    if self.prompt_style == "plain":
      return [Example(prompt=p, target=s, meta={"puzzle": p, "solution": s}) for p, s in rows]
    return [Example(prompt=self._templated_prompt(p),
                    target=fmt.reasoning_answer_target(self.prompt_style, _CHAT_REASONING, s),
                    meta={"puzzle": p, "solution": s}) for p, s in rows]

  def _templated_prompt(self, puzzle: str) -> str:
    """d1's evaluation prompt (chat) or training prompt (d1_train) of ``puzzle``."""
    if self.prompt_style == fmt.D1_TRAIN:
      return self.chat_template.user_turn(d1_train_prompts.sudoku_message(SYSTEM_PROMPT, puzzle))
    return fmt.d1_chat_prompt(self.chat_template, SYSTEM_PROMPT, f"Solve the following Sudoku puzzle: {puzzle}\n")

  def _checked(self, rows: list[tuple[str, str]], where: str) -> list[Example]:
    for i, (puzzle, solution) in enumerate(rows):
      if not is_valid_solution(puzzle, solution):
        raise DataError(
            f"{where}: data row {i + 1}: {solution!r} is not a valid solution of {puzzle!r}")
    if not rows:
      raise DataError(f"{where}: no puzzles")
    return self._examples(rows)

  def eval_examples(self) -> tuple[list[Example], str]:
    """Returns ``(examples, source)``; loaded once and cached.

    Order of preference: ``eval_path``; ``<data_dir>/sudoku/d1_test.csv``; a GENERATED held-out set
    of ``eval_size`` puzzles (seed ``seed``), with a source string saying d1's file was not found.
    """
    if self._eval is None:
      if self.eval_path:
        path = pathlib.Path(self.eval_path).expanduser()
        examples = self._checked(local.read_sudoku_csv(path), str(path))
        source = f"{path} (task.eval_path, {len(examples)} puzzles)"
      else:
        data = self.benchmarks
        if data is not None and data.has(D1_TEST_FILE):
          d1 = data.where(D1_TEST_FILE)
          examples = self._checked(data.sudoku_rows(D1_TEST_FILE), d1)
          source = (f"d1 4x4 Sudoku test set {d1} ({len(examples)} puzzles; dllm-reasoning/d1 "
                    f"dataset/4x4_test_sudoku.csv)")
        else:
          where = (f"no data dir (data.data_dir unset and {local.default_data_dir()} absent)"
                   if data is None else f"{data.where(D1_TEST_FILE)} does not exist")
          rows = generate_puzzles(self.eval_size, self.num_blanks, seed=self.seed)
          examples = self._examples(rows)
          source = (f"GENERATED held-out set of {len(examples)} unique-solution puzzles "
                    f"(num_blanks={self.num_blanks!r}, seed={self.seed}): d1's test file "
                    f"{D1_TEST_FILE} was not found ({where})")
      self._eval = (examples, source)
    return list(self._eval[0]), self._eval[1]

  def train_examples(self, num: int, seed: int) -> list[Example]:
    """Generates ``num`` distinct unique-solution puzzles, none of them in the evaluation set."""
    exclude = frozenset(ex.meta["puzzle"] for ex in self.eval_examples()[0])
    return self._examples(generate_puzzles(num, self.num_blanks, seed=seed, exclude=exclude))

  def _grade(self, completions: Sequence[str],
             examples: Sequence[Example]) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """``(answer grids, correct blank cells [N], blank cells [N], bound hits [N])``."""
    self._check_lengths(completions, examples)
    hits = np.asarray([text_scan.over_limit(c) for c in completions], bool).reshape(len(examples))
    self.num_bound_hits += int(hits.sum())
    answers = [answer_grid(c, self.prompt_style) for c in completions]
    cells = np.asarray([correct_cells(a, ex.meta["puzzle"], ex.meta["solution"])
                        for a, ex in zip(answers, examples)], np.int64).reshape(len(examples), 2)
    return answers, cells[:, 0], cells[:, 1], hits

  def reward(self, completions: Sequence[str], examples: Sequence[Example]) -> np.ndarray:
    """d1's reward per completion: float32 ``[N]`` in [0, 1] (see :func:`cell_reward`)."""
    _, good, blanks, _ = self._grade(completions, examples)
    return np.where(blanks > 0, good / np.maximum(blanks, 1), 1.0).astype(np.float32)

  has_token_rewards = True  # the "plain" style; an instance of the "chat" style sets False

  @staticmethod
  def _check_lengths(completions: Sequence[Any], examples: Sequence[Example]) -> None:
    if len(completions) != len(examples):
      raise ValueError(f"got {len(completions)} completions for {len(examples)} examples")

  def token_rewards(self, completion_ids: np.ndarray,
                    examples: Sequence[Example]) -> tuple[np.ndarray, np.ndarray]:
    """Per-cell rewards: the token of blank cell c (the c-th byte after leading whitespace, as
    :func:`parse_completion` reads it) gets 1.0 if it is the solution's digit, else 0.0.
    ``"plain"`` style only: a chat answer's cells have no fixed token positions.

    Args:
      completion_ids: int32 ``[N, L]`` byte-tokenizer completion tokens.
      examples: the N examples.
    Returns:
      ``(rewards, mask)`` float32 ``[N, L]``; ``mask`` is 1 on the blank cells that the completion
      reaches (a cell past the EOS or past L is wrong and carries no token).
    """
    if not self.has_token_rewards:
      raise NotImplementedError("sudoku4x4 token rewards need prompt_style='plain' (chat answers have "
                                "no fixed token positions)")
    ids = np.asarray(completion_ids)
    self._check_lengths(list(ids), examples)
    n, length = ids.shape
    rewards = np.zeros((n, length), np.float32)
    mask = np.zeros((n, length), np.float32)
    space = np.isin(ids, _ASCII_SPACE)
    for row, ex in enumerate(examples):
      offset = int(np.argmin(space[row])) if not space[row].all() else length
      eos = np.flatnonzero(ids[row] == self.tokenizer.eos_id)
      end = int(eos[0]) if eos.size else length
      for cell, (given, digit) in enumerate(zip(ex.meta["puzzle"], ex.meta["solution"])):
        pos = offset + cell
        if given == "0" and pos < end:
          mask[row, pos] = 1.0
          rewards[row, pos] = float(ids[row, pos] == ord(digit))
    return rewards, mask

  def example_outcomes(self, completions: Sequence[str], examples: Sequence[Example]) -> dict[str, np.ndarray]:
    """Per-puzzle outcomes, float64 ``[N]`` each (:meth:`metrics` pools them).

    Returns:
      ``strict_solved``, ``exact_match`` (0/1); ``cells_correct`` and ``cells_blank`` (counts: the set's
      ``cell_accuracy`` is Σ cells_correct / Σ cells_blank); ``cell_accuracy`` (the puzzle's own fraction,
      1.0 without blanks: its mean is the set's when every puzzle has as many blanks, as in d1's test set
      and a generated set of one ``num_blanks``); ``grader_bound_hits`` (0/1).
    """
    answers, good, blanks, hits = self._grade(completions, examples)
    n = len(examples)
    return {
        "strict_solved": np.asarray([is_valid_solution(ex.meta["puzzle"], a) for a, ex in zip(answers, examples)],
                                    np.float64).reshape(n),
        "exact_match": np.asarray([a == ex.meta["solution"] for a, ex in zip(answers, examples)],
                                  np.float64).reshape(n),
        "cell_accuracy": np.where(blanks > 0, good / np.maximum(blanks, 1), 1.0).astype(np.float64),
        "cells_correct": good.astype(np.float64),
        "cells_blank": blanks.astype(np.float64),
        "grader_bound_hits": hits.astype(np.float64),
    }

  def metrics(self, completions: Sequence[str], examples: Sequence[Example]) -> dict[str, float]:
    """Evaluation metrics, pooled from :meth:`example_outcomes`.

    Returns:
      ``strict_solved``: fraction of completions whose answer is a valid complete grid keeping the
      givens (any valid grid counts); ``cell_accuracy``: correct blank cells / blank cells, summed
      over the completions (d1's Sudoku accuracy); ``exact_match``: fraction equal to the stored
      solution; ``grader_bound_hits``: completions not graded (too long); ``num_examples``: N.
      Rates are 0.0 when N = 0.
    """
    o = self.example_outcomes(completions, examples)
    n = len(examples)
    total = float(o["cells_blank"].sum())
    return {
        "strict_solved": float(o["strict_solved"].sum()) / n if n else 0.0,
        "cell_accuracy": (float(o["cells_correct"].sum()) / total if total else float(n > 0)) if n else 0.0,
        "exact_match": float(o["exact_match"].sum()) / n if n else 0.0,
        "grader_bound_hits": float(o["grader_bound_hits"].sum()),
        "num_examples": float(n),
    }

  def grading_rules(self) -> str:
    """One line naming the grading rules (evaluation summary)."""
    read = ("first 16 characters after leading whitespace" if self.prompt_style == "plain" else
            "d1 parse_sudoku_answers (fenced digits in <answer>, first <answer> span, text after "
            "</answer>, 16 digits before </answer>, free-standing 16 digits; whitespace removed; "
            "padded with 0 / cut to 16)")
    return (f"{read}; cell accuracy = correct blank cells / blank cells (d1); strict_solved = any "
            f"valid grid keeping the givens; completions > {text_scan.MAX_COMPLETION_CHARS} chars "
            "score 0")
