"""Every Python example of README.md and docs/**/*.md runs as written.

Each ```python block is executed on its own, in a fresh namespace (an example must not lean on another
one). A block preceded by ``<!-- example-slow: <reason> -->`` runs only with ``--runslow``; the reason
is required, so a slow example is a decision on the page, not a silent skip. The docs are this
repository's own, trusted code.
"""
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"(?:<!-- example-slow: (?P<slow>[^>]*?) -->\s*\n)?^```python\n(?P<code>.*?)^```", re.S | re.M)


def doc_files() -> list[pathlib.Path]:
  return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def python_blocks(text: str) -> list[tuple[int, str, str | None]]:
  """``(line, code, slow reason or None)`` of every ```python block of a Markdown ``text``."""
  out = []
  for m in BLOCK.finditer(text):
    slow = m.group("slow")
    if slow is not None and not slow.strip():
      raise ValueError(f"line {text[:m.start()].count(chr(10)) + 1}: example-slow needs a reason")
    out.append((text[:m.start("code")].count("\n") + 1, m.group("code"), slow))
  return out


def _cases():
  for path in doc_files():
    for line, code, slow in python_blocks(path.read_text(encoding="utf-8")):
      rel = path.relative_to(ROOT)
      marks = [pytest.mark.slow] if slow else []
      yield pytest.param(path, line, code, id=f"{rel}:{line}", marks=marks)


def test_the_docs_have_examples():
  found = {p.relative_to(ROOT).as_posix() for p in doc_files() if python_blocks(p.read_text(encoding="utf-8"))}
  assert {"README.md", "docs/using_functions.md"} <= found, found


def test_block_parser_sees_code_and_slow_reasons():
  text = "a\n```python\nx = 1\n```\n<!-- example-slow: trains a model -->\n```python\ny = 2\n```\n```bash\nls\n```\n"
  assert python_blocks(text) == [(3, "x = 1\n", None), (7, "y = 2\n", "trains a model")]
  with pytest.raises(ValueError, match="needs a reason"):
    python_blocks("<!-- example-slow:  -->\n```python\nz = 3\n```\n")


@pytest.mark.parametrize("path,line,code", list(_cases()))
def test_example_runs_as_written(path, line, code):
  # Padding with newlines makes a traceback's line numbers those of the Markdown file.
  exec(compile("\n" * (line - 1) + code, str(path), "exec"), {"__name__": f"doc_example_{line}"})
