"""ant-research/Drift's reformatted MBPP files, read into examples of a code task (:mod:`daca_jax.tasks.code`).

``<data_dir>/mbpp/test.json`` (evaluation) and ``train.json`` (training); fields ``question``,
``test_list`` = one program defining ``check(candidate)`` and calling it, ``prefix`` =
``"Here is the completed code:\\n```python\\n"`` + imports + signature + docstring. The files hold NO
reference solutions.
"""
from __future__ import annotations

import ast
import builtins
import pathlib
import re
import warnings
from typing import Any

from daca_jax.data import local
from daca_jax.errors import DataError
from daca_jax.tasks.base import Example

MBPP_EVAL_FILE = "mbpp/test.json"
MBPP_TRAIN_FILE = "mbpp/train.json"
_MBPP_PREFIX_HEAD = "Here is the completed code:\n```python\n"
_MBPP_CALL_RE = re.compile(r"^check\(([A-Za-z_][A-Za-z0-9_]*)\)\s*$", re.MULTILINE)
# Names called at the start of an assert (``assert f(...)``, ``assert not f(...)``, ``assert set(f(``).
_ASSERTED_RE = re.compile(r"^\s*assert\s+(?:not\s+)?\(?\s*(?:set\(|sorted\()?\s*([A-Za-z_]\w*)\s*\(",
                          re.MULTILINE)


def _mbpp_record(record: Any, where: str) -> dict[str, str] | None:
  """Validates one Drift MBPP record; returns question, code_header, test, entry_point, or None
  for a record whose code header is not valid Python.

  The entry point is the function the asserts call. It is usually the one in the header and passed
  to ``check``; in 18 of the 498 test records (19 of the 472 train records) Drift's header holds a helper of the
  reference solution instead (e.g. ``str_to_list`` for tests of ``remove_dirty_chars``), so the
  model must also write the asserted function, whose name the question's example assert shows.
  """
  if not isinstance(record, dict):
    raise DataError(f"{where}: expected a JSON object")
  question, tests, prefix = record.get("question"), record.get("test_list"), record.get("prefix")
  if not isinstance(question, str) or not isinstance(prefix, str):
    raise DataError(f"{where}: 'question' and 'prefix' must be strings")
  if (not isinstance(tests, list) or len(tests) != 1 or not isinstance(tests[0], str)):
    raise DataError(f"{where}: 'test_list' must hold exactly one test program (a string)")
  calls = _MBPP_CALL_RE.findall(tests[0])
  if len(calls) != 1:
    raise DataError(f"{where}: the test program must end by calling check(<function>) once")
  asserted = [n for n in _ASSERTED_RE.findall(tests[0]) if n not in dir(builtins)]
  entry = calls[0] if calls[0] in asserted or not asserted else asserted[0]
  header = prefix[len(_MBPP_PREFIX_HEAD):] if prefix.startswith(_MBPP_PREFIX_HEAD) else prefix
  header = header.rstrip() + "\n"
  try:
    with warnings.catch_warnings():  # e.g. invalid escapes in docstrings are the data's business
      warnings.simplefilter("ignore")
      ast.parse(header)
  except SyntaxError:
    return None
  return {"question": question.strip(), "code_header": header, "test": tests[0],
          "entry_point": entry}


class MBPPLoader:
  """Reads Drift's MBPP files for a :class:`CodeTask`."""

  def __init__(self, task: Any, with_question: bool):
    """``task``: the :class:`~daca_jax.tasks.code.CodeTask` whose ``make_example`` builds the examples."""
    self.task = task
    self.with_question = with_question

  def load(self, path: pathlib.Path, what: str, train: bool) -> tuple[list[Example], str]:
    """Reads the local file ``path`` (:meth:`load_records`)."""
    return self.load_records(local.read_json_records(path), str(path), path.stem, what, train)

  def load_records(self, records: list[dict], where: str, stem: str, what: str,
                   train: bool) -> tuple[list[Example], str]:
    """The examples of ``records`` (read from ``where``, a file named ``<stem>.json``). A record with an
    invalid code header is skipped in training data (one of Drift's train records has a truncated
    signature) and an error in evaluation data."""
    examples, skipped = [], []
    for i, rec in enumerate(records):
      fields = _mbpp_record(rec, f"{where}: record {i}")
      if fields is None:
        if not train:
          raise DataError(f"{where}: record {i}: the code header in 'prefix' is not valid Python")
        skipped.append(i)
        continue
      examples.append(self.task.make_example(
          question=fields["question"] if self.with_question else "",
          code_header=fields["code_header"], test=fields["test"],
          entry_point=fields["entry_point"], body="", task_id=f"mbpp/{stem}/{i}"))
    if not examples:
      raise DataError(f"{where}: no records")
    note = f"; records {skipped} skipped: invalid code header" if skipped else ""
    return examples, (f"{what} {where} ({len(examples)} problems; ant-research/Drift's MBPP, no "
                      f"reference solutions{note})")
