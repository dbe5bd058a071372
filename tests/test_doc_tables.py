"""Every marked results table of README.md and docs/**/*.md equals its command's output
(daca_jax.reports.doc_tables, experiments/tables.py); a number edited by hand is caught; marker errors are
clear; table files (daca_jax.reports.table_files) render and validate."""
import json
import os
import re
import subprocess
import sys

import pytest

from daca_jax.errors import DataError
from daca_jax.reports import doc_tables as dt, table_commands
from daca_jax.reports.table_files import read_table_file, render_table

ROOT = dt.ROOT
ESTIMATOR = "python experiments/estimator_study.py --table_from=docs/results/estimator_study.json"
# Tables of the docs pages that hold no measurement (config fields, files, recipe sources): no marker.
REFERENCE_TABLES = {
    "| file | content |",
    "| config field | choices |",
    "| short | repository @ commit | files |",
    "| value | d1 | source | preset field |",
    "| task | d1 | in `/work/shared/data`? | preset |",
    "| task | terms (max) | correct = |",
    "| value | wd1 | source |",
    "| value | GDPO | source |",
    "| value | SPG | source |",
    "| value | ESPO | source |",
    "| method | what it estimates | passes per update (forward, per inner update) | memory | source |",
    "| registry | names | source |",
    "| target | compiler | devices | hosts | topology |",
    "| field | meaning | default |",
    "| old | new |",  # docs/changelog.md: moved names
    "| old module | new module |",  # docs/adding_a_method.md: the fields of a Method  # docs/scaling.md: what each --target names
    "| task (`task.name`) | data (`../shared/data`, or `$DACA_DATA_DIR`) | grading | checked on the real files |",
    # the credit pre-registration's protocol (docs/results/credit_preregistration.md): no measured numbers
    "| piece | where | what it does |",
    "| variant | knob | status |",
    "| arm | overrides | role |",
}


def test_every_marked_table_equals_its_commands_output():
  """The committed text of every marked table is what its command prints now (``tables.py --check``)."""
  report = dt.refresh_docs()
  assert report.tables >= 21
  assert not report.stale, "stale tables (run `python experiments/tables.py`):\n" + "\n".join(
      f"{s.where}: {s.command}\n{s.diff}" for s in report.stale)


def test_every_table_of_the_readme_and_docs_is_marked_or_a_reference_table():
  """A new results table in the README or docs/ gets a marker."""
  for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]:
    text = path.read_text(encoding="utf-8")
    marked = {i for b in dt.find_blocks(text, path.name) for i in range(b.first, b.last)}
    lines = text.split("\n")
    for i, line in enumerate(lines):
      starts = line.startswith("|") and (i == 0 or not lines[i - 1].startswith("|"))
      if starts and i not in marked:
        assert line in REFERENCE_TABLES, f"{path.relative_to(ROOT)}:{i + 1}: a table without a marker: {line[:80]}"


def _estimator_block() -> str:
  """docs/results.md's estimator-study block, markers included."""
  text = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
  block = next(b for b in dt.find_blocks(text, "results.md") if b.command == ESTIMATOR)
  return "\n".join(text.split("\n")[block.first - 1:block.last + 1])


def test_a_number_edited_by_hand_is_caught_and_rewritten(tmp_path):
  original = "# Copy\n\nSome prose.\n\n" + _estimator_block() + "\n\nMore prose.\n"
  assert "| mean_field | 1 | -0.090 | 0.000 | 0.284 | 0.777 |" in original
  edited = original.replace("| 0.284 | 0.777 |", "| 0.284 | 0.778 |")
  doc = tmp_path / "copy.md"
  doc.write_text(edited, encoding="utf-8")

  # the command line: --check changes nothing and exits 1 naming the file, line and command
  env = dict(os.environ, PYTHONPATH=str(ROOT))
  proc = subprocess.run([sys.executable, "experiments/tables.py", "--check", f"--files={doc}"], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 1, proc.stderr
  assert f"stale: {doc}:5: {ESTIMATOR}" in proc.stdout and "1 marked tables: 0 up to date, 1 stale" in proc.stdout
  assert doc.read_text(encoding="utf-8") == edited

  report = dt.refresh_docs([doc], write=True)
  assert report.tables == 1 and len(report.stale) == 1
  stale = report.stale[0]
  assert stale.where == f"{doc}:5" and stale.command == ESTIMATOR
  assert stale.diff.splitlines() == ["- | mean_field | 1 | -0.090 | 0.000 | 0.284 | 0.778 |",
                                     "+ | mean_field | 1 | -0.090 | 0.000 | 0.284 | 0.777 |"]
  assert doc.read_text(encoding="utf-8") == original


def test_an_indented_marker_indents_its_body_and_a_fenced_marker_is_text(tmp_path):
  body = render_table(read_table_file(ROOT / "docs/results/grader_bombs.json"))
  command = "python experiments/tables.py --render=docs/results/grader_bombs.json"
  text = (f"- a list item:\n\n  <!-- table: {command} -->\n  | stale |\n  <!-- /table -->\n\n"
          f"```markdown\n<!-- table: {command} -->\n| an example, not a table |\n```\n")
  blocks = dt.find_blocks(text, "x.md")
  assert [(b.line, b.indent, b.body) for b in blocks] == [(3, "  ", "  | stale |")]
  out = dt.Output(body + "\n", "", 0)
  new, stale = dt.refresh_text(text, blocks, {blocks[0].argv: out})
  assert [s.where for s in stale] == ["x.md:3"]
  assert new.split("\n")[3:3 + len(body.split("\n"))] == ["  " + ln for ln in body.split("\n")]
  assert new.endswith("```markdown\n<!-- table: " + command + " -->\n| an example, not a table |\n```\n")


@pytest.mark.parametrize("text,match", [
    ("<!-- table: python experiments/plan.py --render=x.json -->\n| a |\n",
     r"x\.md:1: the table opened here has no <!-- /table --> \(the file ends first\)"),
    ("| a |\n<!-- /table -->\n", r"x\.md:2: <!-- /table --> closes no table"),
    ("<!-- table: python experiments/plan.py -->\n| a |\n<!-- table: python experiments/plan.py -->\n",
     r"x\.md:1: the table opened here has no <!-- /table --> before the next table marker \(line 3\)"),
    ("<!-- table -->\n| a |\n<!-- /table -->\n", r"x\.md:1: malformed table marker"),
    ("<!-- table: -->\n| a |\n<!-- /table -->\n", r"x\.md:1: malformed table marker"),
    ("<!-- table: python scripts/make.py -->\n<!-- /table -->\n",
     r"x\.md:1: table command 'python scripts/make\.py' is not allowed: expected 'python experiments/<script>\.py"),
    ("<!-- table: bash experiments/scripts/gpu_check.sh -->\n<!-- /table -->\n", r"x\.md:1: .* is not allowed"),
    ("<!-- table: python experiments/../setup.py -->\n<!-- /table -->\n", r"x\.md:1: .* is not allowed"),
    ('<!-- table: python experiments/plan.py --render="x -->\n<!-- /table -->\n', r"cannot be split into words"),
])
def test_marker_errors_name_the_file_and_line(text, match):
  with pytest.raises(dt.TableError, match=match):
    dt.find_blocks(text, "x.md")


def test_a_failing_command_is_reported_with_its_stderr_before_any_file_is_written(tmp_path):
  good = tmp_path / "good.md"
  good.write_text(f"<!-- table: {ESTIMATOR} -->\n| stale |\n<!-- /table -->\n", encoding="utf-8")
  bad = tmp_path / "bad.md"
  bad.write_text('Intro\n\n<!-- table: python experiments/variants_table.py --arms="no such arm" -->\n'
                 "| a |\n<!-- /table -->\n", encoding="utf-8")
  with pytest.raises(dt.TableError) as e:
    dt.refresh_docs([good, bad], write=True)
  message = str(e.value)
  assert message.startswith(f"{bad}:3: table command 'python experiments/variants_table.py --arms=\"no such arm\"' "
                            "failed (exit 2):")
  assert "error: arms ['no such arm'] are not in the file" in message
  assert good.read_text(encoding="utf-8").count("| stale |") == 1  # nothing written


def test_the_subprocess_fallback_runs_a_command_as_the_fork_does():
  out = table_commands._run_subprocess(
      ("python", "experiments/tables.py", "--render=docs/results/grader_bombs.json"), ROOT, 120)
  assert out.returncode == 0 and out.stdout.rstrip("\n") == render_table(read_table_file(
      ROOT / "docs/results/grader_bombs.json"))


def test_short_diff_cuts_long_lines_around_the_change():
  old = "| " + "x" * 300 + " | 1.0 | " + "y" * 300 + " |"
  new = old.replace("| 1.0 |", "| 2.0 |")
  minus, plus = dt.short_diff(old, new).splitlines()
  assert minus.startswith("- …") and "1.0" in minus and plus.startswith("+ …") and "2.0" in plus
  assert len(minus) < 200
  assert dt.short_diff("a\nb", "a\nb\nc") == "+ c"


def test_table_files_render_and_validate(tmp_path):
  data = {"what": "w", "measured_by": "m", "date": "d", "machine": "2 cores", "columns": ["name", "value", "n"],
          "align": ["left", "right", "right"], "formats": ["", ".3f", "d"],
          "rows": [["a | b", 0.5, 3], ["c", "n/a", 12]]}
  path = tmp_path / "t.json"
  path.write_text(json.dumps(data))
  assert render_table(read_table_file(path)).splitlines() == [
      "| name | value | n |", "|---|---:|---:|", "| a \\| b | 0.500 | 3 |", "| c | n/a | 12 |"]
  for field, value, match in [("machine", None, r"'machine' must be a non-empty string"),
                              ("rows", [["a", 1]], r"rows\[0\] must be a list of 3 cells"),
                              ("rows", [["a", True, 1]], r"rows\[0\]\[1\] must be a string or a number"),
                              ("align", ["left"], r"'align' must be a list of 3 entries"),
                              ("columns", [], r"'columns' must be a non-empty list")]:
    path.write_text(json.dumps(dict(data, **{field: value}) if value is not None
                               else {k: v for k, v in data.items() if k != field}))
    with pytest.raises(DataError, match=match):
      read_table_file(path)


def test_every_table_file_under_docs_results_has_its_provenance():
  commands = [b.command for p in dt.doc_files() for b in dt.find_blocks(p.read_text(encoding="utf-8"), p.name)]
  files = sorted({m.group(1) for c in commands for m in [re.search(r"tables\.py --render=(\S+)", c)] if m})
  assert len(files) >= 8
  for f in files:
    data = read_table_file(ROOT / f)  # raises without what / measured_by / date / machine
    assert data["measured_by"] and data["date"][:4].isdigit()
