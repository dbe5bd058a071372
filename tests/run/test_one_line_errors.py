"""One clear line instead of floods."""
import asyncio
import errno
import logging
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from daca_jax.run import checkpoint_noise, cli_errors
from daca_jax.run.checkpoint_files import os_error as _os_error
from daca_jax.data.local import read_sudoku_csv
from daca_jax.errors import ConfigError, DataError, NonFiniteError

REPO = pathlib.Path(__file__).resolve().parents[2]
TRAIN = [sys.executable, "experiments/train.py", "--config=configs/sudoku_tiny.py:smoke", "--progress=false"]


def test_os_errors_read_as_one_line_with_what_to_do():
  full = OSError(errno.ENOSPC, "No space left on device", "/runs/a/sft/10")
  assert cli_errors.one_line(full) == ("No space left on device: /runs/a/sft/10 (free some disk space or "
                                       "use a --workdir / --output_dir on another disk)")
  assert cli_errors.exit_code(full) == cli_errors.EXIT_OS_ERROR
  ro = OSError(errno.EROFS, "Read-only file system", "/mnt/ro/run")
  assert cli_errors.one_line(ro) == "Read-only file system: /mnt/ro/run (use a writable --workdir / --output_dir)"
  assert cli_errors.exit_code(ConfigError("rl.beta", 1, "x")) == cli_errors.EXIT_BAD_INPUT
  assert cli_errors.exit_code(DataError("x")) == cli_errors.EXIT_BAD_INPUT
  assert cli_errors.exit_code(NonFiniteError("RL", 3, "loss", "")) == cli_errors.EXIT_DIVERGED
  assert cli_errors.exit_code(RuntimeError("a bug")) is None
  assert cli_errors.one_line(DataError("line one\n  line two")) == "line one line two"


def test_reported_errors_prints_one_line_and_keeps_tracebacks_of_bugs(capsys):
  with pytest.raises(SystemExit) as e:
    with cli_errors.reported_errors():
      raise OSError(errno.EROFS, "Read-only file system", "/mnt/ro/run")
  assert e.value.code == 1
  assert capsys.readouterr().err == "error: Read-only file system: /mnt/ro/run (use a writable --workdir / --output_dir)\n"
  with pytest.raises(KeyError):
    with cli_errors.reported_errors():
      raise KeyError("a bug")


def test_an_aborted_write_coroutine_collected_at_exit_leaves_the_error_last():
  # An asynchronous checkpoint write that fails first leaves coroutines nobody awaits; collected at
  # interpreter shutdown they warned after the one line (seen in CI on the disk-full test below).
  script = textwrap.dedent("""
      from daca_jax.run import cli_errors
      async def write():
        pass
      pending = []
      with cli_errors.reported_errors():
        pending.append(write())
        raise OSError(27, "File too large", "/runs/a/sft/1")
      """)
  proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
  assert proc.returncode == cli_errors.EXIT_OS_ERROR, proc.stderr
  assert proc.stderr.strip().splitlines() == ["error: File too large: /runs/a/sft/1"], proc.stderr


def test_orbax_disk_errors_become_the_os_error():
  # The message TensorStore gives for a full disk, as orbax raises it (seen on a 1 MB tmpfs).
  e = ValueError('RESOURCE_EXHAUSTED: Failed writing: "/runs/a/sft/30.orbax-checkpoint-tmp/state/d/f32a": '
                 "Failed to write 3227 bytes to file 7: No space left on device [os_error_code='28']")
  os_err = _os_error(e, "/runs/a/sft")
  assert (os_err.errno, os_err.strerror, os_err.filename) == (
      errno.ENOSPC, "No space left on device", "/runs/a/sft/30.orbax-checkpoint-tmp/state/d/f32a")
  assert _os_error(ValueError("tree structure differs"), "/x") is None


def test_orbax_log_records_lose_their_tracebacks():
  f = checkpoint_noise._QuietOrbax()
  try:
    raise ValueError("RESOURCE_EXHAUSTED: ...\nmore")
  except ValueError:
    exc_info = sys.exc_info()
  rec = logging.LogRecord("absl", logging.ERROR, "/x/orbax/checkpoint/_src/async_checkpointer.py", 264,
                          "Failed to run %d commit operations\nsecond line", (4,), exc_info)
  assert f.filter(rec) and rec.getMessage() == "Failed to run 4 commit operations" and rec.exc_info is None
  info = logging.LogRecord("absl", logging.INFO, "/x/orbax/checkpoint/x.py", 1, "saved", (), None)
  assert not f.filter(info)
  other = logging.LogRecord("absl", logging.ERROR, "/x/mine.py", 1, "mine", (), exc_info)
  assert f.filter(other) and other.exc_info is exc_info  # not orbax: untouched


def test_closed_event_loop_callback_is_noise_but_other_errors_are_not():
  loop = asyncio.new_event_loop()
  loop.close()
  try:
    loop.call_soon_threadsafe(print)
  except RuntimeError as e:
    exc, tb = e, e.__traceback__.tb_next  # as native code sees it: the traceback starts in asyncio
  assert checkpoint_noise.is_noise(exc, tb)
  assert not checkpoint_noise.is_noise(exc, exc.__traceback__)  # raised in Python code: not ours
  assert not checkpoint_noise.is_noise(RuntimeError("other"), tb)


def test_unreadable_checkpoint_restore_prints_nothing_but_one_error(tmp_path):
  # Orbax closes its event loop when a read fails; the abandoned TensorStore reads then print
  # "Event loop is closed" and "Exception ignored in: <coroutine ...>" tracebacks.
  script = textwrap.dedent(f"""
      import gc, glob, jax, optax
      from daca_jax.run.checkpoint import Checkpointer, CorruptCheckpointError
      params = {{f"w{{i}}": jax.random.normal(jax.random.key(i), (1, 32, 32)) for i in range(12)}}
      state = {{"params": params, "opt_state": optax.adam(1e-3).init(params)}}
      ck = Checkpointer({str(tmp_path)!r}, async_save=False)
      ck.save(1, state); ck.save(2, state); ck.close()
      for f in glob.glob({str(tmp_path)!r} + "/*/state/ocdbt.process_0/d/*"):
        open(f, "wb").close()
      for step in (2, 1):
        ck = Checkpointer({str(tmp_path)!r})
        try:
          ck.restore(step, state)
        except CorruptCheckpointError as e:
          print("ERROR", e)
        ck.close()
      gc.collect()
      """)
  proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=900)
  assert proc.returncode == 0, proc.stderr[-3000:]
  lines = proc.stdout.strip().splitlines()
  assert len(lines) == 2 and all(l.startswith("ERROR checkpoint ") and "cannot be read" in l for l in lines)
  assert all(len(l) < 400 for l in lines)  # without TensorStore's multi-line spec
  assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr[-3000:]


def test_long_single_line_csv_is_one_data_error(tmp_path):
  path = tmp_path / "big.csv"
  path.write_text("Puzzle,Solution\n" + "1" * 300_000 + "\n")  # beyond csv's 131072-character field limit
  with pytest.raises(DataError, match=r"big\.csv:2: not a valid CSV row \(field larger than field limit"):
    read_sudoku_csv(path)


def test_unwritable_workdir_is_one_line(tmp_path):
  blocker = tmp_path / "file"
  blocker.write_text("")
  proc = subprocess.run(TRAIN + [f"--workdir={blocker}/run"], cwd=REPO, capture_output=True, text=True,
                        timeout=900)
  assert proc.returncode == cli_errors.EXIT_BAD_INPUT, proc.stderr[-3000:]  # refused before any work
  assert proc.stderr.strip().splitlines()[-1] == (f"error: --workdir='{blocker}/run' is not allowed: expected a "
                                                  f"folder; {blocker} is a file")
  assert "Traceback" not in proc.stderr


def test_disk_full_while_saving_a_checkpoint_is_one_line(tmp_path):
  # A file-size limit makes the first SFT checkpoint's writes fail the way a full disk does
  # (EFBIG instead of ENOSPC); today this printed orbax's background-thread tracebacks first.
  limit = textwrap.dedent("""
      import resource, runpy, signal, sys
      signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
      resource.setrlimit(resource.RLIMIT_FSIZE, (20000, resource.RLIM_INFINITY))
      sys.argv = sys.argv[1:]
      runpy.run_path(sys.argv[0], run_name="__main__")
      """)
  env_cache = {"JAX_ENABLE_COMPILATION_CACHE": "false"}  # the cache's own writes would hit the limit
  proc = subprocess.run([sys.executable, "-c", limit] + TRAIN[1:] + [f"--workdir={tmp_path}/run"],
                        cwd=REPO, capture_output=True, text=True, timeout=1200, env={**os.environ, **env_cache})
  assert proc.returncode == cli_errors.EXIT_OS_ERROR, proc.stderr[-3000:]
  last = proc.stderr.strip().splitlines()[-1]
  assert last.startswith("error: File too large: ") and "/run/sft/" in last, last
  assert "Traceback" not in proc.stderr, proc.stderr[-3000:]


def test_a_symlink_loop_is_bad_input_in_one_line(tmp_path):
  # Path.resolve() of a link loop raised RuntimeError (a traceback, exit 1) in evaluate.py, export_hf.py
  # and visualize.py --workdir; open() raised OSError ELOOP (exit 1, "Too many levels of symbolic links").
  loop = tmp_path / "a"
  loop.symlink_to(tmp_path / "b")
  (tmp_path / "b").symlink_to(loop)
  errors = []
  for action in (loop.resolve, lambda: open(loop)):
    try:
      action()
    except (RuntimeError, OSError) as e:  # resolve(): RuntimeError before Python 3.13, no error after
      errors.append(e)
  assert len(errors) >= 1
  for e in errors:
    assert cli_errors.exit_code(e) == cli_errors.EXIT_BAD_INPUT
    assert cli_errors.one_line(e) == (f"{loop}: a symlink loop (its links lead back to themselves); give a path "
                                      "to a real file or folder")
  assert cli_errors.exit_code(RuntimeError("something else")) is None  # a bug keeps its traceback


def test_a_reader_that_went_away_is_no_error_line(capsys):
  """`reproduce.py --table_from=... | head -1`: the closed pipe is not the user's error and gets no line."""
  with pytest.raises(SystemExit) as ended, cli_errors.reported_errors():
    raise BrokenPipeError(32, "Broken pipe")
  assert ended.value.code == cli_errors.EXIT_OS_ERROR and capsys.readouterr().err == ""
