"""Tests for daca_jax.data.local (local-file loaders; nothing is downloaded)."""
from __future__ import annotations

import hashlib
import pathlib

import pytest

import daca_jax
from daca_jax.data import local
from daca_jax.errors import DataError

SHARED_DATA = local.default_data_dir()  # $DACA_DATA_DIR or ../shared/data
D1_SUDOKU = SHARED_DATA / "sudoku" / "d1_test.csv"
# sha256 of sudoku/d1_test.csv as listed in ../shared/data/SOURCES.md.
D1_SUDOKU_SHA256 = "ef86c7c28ebef88484d85fda59b3909a7b621241aa1abf36343437dbc4a3ffb6"


def _write(path: pathlib.Path, text: str) -> pathlib.Path:
  path.write_text(text, encoding="utf-8")
  return path


def test_default_data_dir_env_and_repo_fallback(monkeypatch, tmp_path):
  monkeypatch.setenv("DACA_DATA_DIR", str(tmp_path))
  assert local.default_data_dir() == tmp_path
  monkeypatch.delenv("DACA_DATA_DIR")
  pkg_parent = pathlib.Path(daca_jax.__file__).resolve().parent.parent
  assert local.default_data_dir() == pkg_parent.parent / "shared" / "data"
  monkeypatch.setenv("DACA_DATA_DIR", "")
  assert local.default_data_dir() == pkg_parent.parent / "shared" / "data"


def test_resolve_data_dir(monkeypatch, tmp_path):
  monkeypatch.setenv("DACA_DATA_DIR", str(tmp_path))
  assert local.resolve_data_dir("") == tmp_path
  monkeypatch.setenv("DACA_DATA_DIR", str(tmp_path / "missing"))
  assert local.resolve_data_dir("") is None
  assert local.resolve_data_dir(str(tmp_path)) == tmp_path
  missing = tmp_path / "nope"
  with pytest.raises(FileNotFoundError, match="data.data_dir") as err:
    local.resolve_data_dir(str(missing))
  assert str(missing) in str(err.value)
  a_file = _write(tmp_path / "f.txt", "x")
  with pytest.raises(FileNotFoundError, match="data.data_dir"):
    local.resolve_data_dir(str(a_file))


def test_read_sudoku_csv_good(tmp_path):
  path = _write(tmp_path / "s.csv",
                "Puzzle,Solution\n"
                "3102200002100320,3142243142131324\n"
                "\n"
                "0000000000000000,1234341221434321\r\n")
  assert local.read_sudoku_csv(path) == [
      ("3102200002100320", "3142243142131324"),
      ("0000000000000000", "1234341221434321"),
  ]
  # Column order is taken from the header; extra columns are ignored.
  path2 = _write(tmp_path / "s2.csv", "id,Solution,Puzzle\n7,3142243142131324,3102200002100320\n")
  assert local.read_sudoku_csv(str(path2)) == [("3102200002100320", "3142243142131324")]


@pytest.mark.parametrize(
    "row, line_match",
    [
        ("310220000210032,3142243142131324", "puzzle"),       # 15 cells
        ("31022000021003200,3142243142131324", "puzzle"),     # 17 cells
        ("310220000210032x,3142243142131324", "puzzle"),      # non-digit
        ("3102200002100325,3142243142131324", "puzzle"),      # digit 5
        ("3102200002100320,3142243142131320", "solution"),    # 0 in a solution
        ("3102200002100320,2142243142131324", "changes given"),  # given 3 -> 2
        ("3102200002100320", "expected 2 fields"),
        ("3102200002100320,3142243142131324,extra", "expected 2 fields"),
    ])
def test_read_sudoku_csv_bad_row_names_file_and_line(tmp_path, row, line_match):
  path = _write(tmp_path / "bad.csv",
                "Puzzle,Solution\n3102200002100320,3142243142131324\n\n" + row + "\n")
  with pytest.raises(ValueError, match=line_match) as err:
    local.read_sudoku_csv(path)
  assert f"{path}:4:" in str(err.value)


def test_read_sudoku_csv_bad_header_and_missing(tmp_path):
  with pytest.raises(ValueError, match="Puzzle"):
    local.read_sudoku_csv(_write(tmp_path / "h.csv", "quizzes,solutions\n"))
  with pytest.raises(ValueError, match="empty"):
    local.read_sudoku_csv(_write(tmp_path / "e.csv", ""))
  with pytest.raises(FileNotFoundError):
    local.read_sudoku_csv(tmp_path / "missing.csv")


def test_read_real_d1_file():
  if not D1_SUDOKU.is_file():
    pytest.skip(f"shared benchmark data not found at {D1_SUDOKU} (set $DACA_DATA_DIR or place it at ../shared/data)")
  assert hashlib.sha256(D1_SUDOKU.read_bytes()).hexdigest() == D1_SUDOKU_SHA256
  rows = local.read_sudoku_csv(D1_SUDOKU)
  assert len(rows) == 500
  assert rows[0] == ("3102200002100320", "3142243142131324")
  assert len({p for p, _ in rows}) == 500


def test_an_unreadable_benchmark_file_is_bad_input_naming_it(tmp_path, monkeypatch):
  """A permission error reading a benchmark file names the file and the data fields, not a workdir."""
  path = _write(tmp_path / "test.jsonl", '{"a": 1}\n')
  (tmp_path / "schemas").mkdir()
  _write(tmp_path / "schemas" / "s.json", "{}")

  def denied(self):
    raise PermissionError(13, "Permission denied", str(self))

  monkeypatch.setattr(pathlib.Path, "read_bytes", denied)
  for read in (lambda: local.read_json_records(path), lambda: local.read_sudoku_csv(path),
               lambda: local.read_text_folder(tmp_path / "schemas", "*.json")):
    with pytest.raises(DataError, match=r"permission denied reading a benchmark file \(data\.data_dir"):
      read()
