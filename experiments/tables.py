"""The documentation's results tables, each printed by the command in its marker (logic:
:mod:`daca_jax.reports.doc_tables`; marker format there).

  python experiments/tables.py                 # rewrites every marked table of README.md and docs/**/*.md
  python experiments/tables.py --check         # changes nothing; exit 1 naming each stale table
  python experiments/tables.py --render=docs/results/grader_bombs.json   # one table file as markdown

``--files=a.md,b.md`` limits the run to these files (the commands still run from the repository root).
Exit status: 0 done (or, with ``--check``, every table up to date), 1 stale tables (``--check``), 2 a
marker that cannot be used or a command that failed (file, line and the command's stderr named).
"""
import sys as _sys


from absl import flags

from daca_jax.reports import doc_tables
from daca_jax.run import cli_errors
from daca_jax.run.cli_errors import EXIT_BAD_INPUT, reported_errors
from daca_jax.reports.table_files import read_table_file, render_table

_CHECK = flags.DEFINE_bool("check", False, "Change nothing; exit 1 naming each stale table.")
_FILES = flags.DEFINE_list("files", None, "Markdown files to read (default: README.md and docs/**/*.md).")
_RENDER = flags.DEFINE_string("render", None, "Print this table file (docs/results/*.json) as markdown.")


def main(argv):
  del argv
  with reported_errors():
    if _RENDER.value:
      print(render_table(read_table_file(_RENDER.value)))
      return
    try:
      report = doc_tables.refresh_docs(_FILES.value, write=not _CHECK.value)
    except doc_tables.TableError as e:  # several lines: the command's stderr
      print(f"error: {e}", file=_sys.stderr)
      _sys.exit(EXIT_BAD_INPUT)
  for s in report.stale:
    print(f"{'stale' if _CHECK.value else 'rewrote'}: {s.where}: {s.command}\n{s.diff}\n")
  fresh = report.tables - len(report.stale)
  print(f"{report.tables} marked tables: {fresh} up to date, {len(report.stale)} "
        f"{'stale' if _CHECK.value else 'rewritten'}")
  if _CHECK.value and report.stale:
    _sys.exit(1)


if __name__ == "__main__":
  cli_errors.run(main)  # a bad flag: `error: <one line>`, exit 2
