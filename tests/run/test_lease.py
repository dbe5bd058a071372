"""One run per workdir (daca_jax.run.lease): a second run on a workdir in use is refused with one line naming
the holder; a lease whose holder is dead or has stopped renewing is taken over, and the run says so."""
from __future__ import annotations

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import pytest

from daca_jax.errors import ConfigError
from daca_jax.run import lease as lease_mod
from daca_jax.run.lease import LEASE_FILE, WorkdirLease

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _write(workdir: pathlib.Path, **fields) -> None:
  record = {"run_id": "other", **lease_mod._machine(), "pid": os.getpid(),
            "pid_start": lease_mod._process_start(os.getpid()), "started_at": "then", "renewed": time.time()}
  (workdir / LEASE_FILE).write_text(json.dumps({**record, **fields}))


def _dead_pid() -> int:
  proc = subprocess.Popen([sys.executable, "-c", "pass"])
  proc.wait()
  return proc.pid


def test_a_held_workdir_is_refused_and_a_released_one_taken(tmp_path):
  first = WorkdirLease(tmp_path)
  with first:
    held = json.loads((tmp_path / LEASE_FILE).read_text())
    assert (held["pid"], held["host"], held["run_id"]) == (os.getpid(), socket.gethostname(), first.run_id)
    with pytest.raises(ConfigError, match=rf"--workdir=.*run {first.run_id} \(host .*pid {os.getpid()}.*holds it"):
      WorkdirLease(tmp_path).acquire()
  assert not (tmp_path / LEASE_FILE).exists()  # released
  with WorkdirLease(tmp_path):
    pass


@pytest.mark.parametrize("fields, why", [
    ({"pid": "DEAD"}, "its process is gone"),
    ({"pid_start": "1"}, "its process is gone"),  # the pid now belongs to another process
    ({"host": "elsewhere", "renewed": time.time() - 3600}, "not renewed for 600 s"),
])
def test_a_stale_lease_is_taken_over_and_said(tmp_path, fields, why):
  _write(tmp_path, **{k: (_dead_pid() if v == "DEAD" else v) for k, v in fields.items()})
  said = []
  with WorkdirLease(tmp_path, said.append) as lease:
    assert json.loads((tmp_path / LEASE_FILE).read_text())["run_id"] == lease.run_id
  assert len(said) == 1 and "taking over" in said[0] and "run other" in said[0] and why in said[0]


def test_a_live_lease_elsewhere_or_unreadable_and_recent_is_refused(tmp_path):
  _write(tmp_path, host="elsewhere", renewed=time.time() - 5)
  with pytest.raises(ConfigError, match="run other .*host elsewhere.*renewed 5 s ago.*after 600 s: 595 s from now"):
    WorkdirLease(tmp_path).acquire()
  with pytest.raises(ConfigError, match="run other"):
    lease_mod.check_free(tmp_path)  # the early look says the same, taking nothing
  # the same host name in another pid namespace (a container): its pids mean nothing here, the lapse decides
  _write(tmp_path, pid=_dead_pid(), pid_ns="pid:[1]")
  with pytest.raises(ConfigError, match="holds it"):
    WorkdirLease(tmp_path).acquire()
  # a renewal in the future (the holder's clock ahead) is not believed: the file's time decides
  _write(tmp_path, host="elsewhere", renewed=time.time() + 1e9)
  old = time.time() - 3600
  os.utime(tmp_path / LEASE_FILE, (old, old))
  with WorkdirLease(tmp_path, lambda _: None):
    pass
  (tmp_path / LEASE_FILE).write_text('{"run_id": "half')  # a write cut short, just now: someone is taking it
  with pytest.raises(ConfigError, match="a lease file this version cannot read.*holds it"):
    WorkdirLease(tmp_path).acquire()
  old = time.time() - 3600
  os.utime(tmp_path / LEASE_FILE, (old, old))
  with WorkdirLease(tmp_path, lambda _: None):
    pass


def test_the_holder_renews_stops_when_taken_over_and_never_removes_another_runs_lease(tmp_path):
  lease = WorkdirLease(tmp_path, lambda _: None, renew_s=0.05)
  lease.acquire()
  first = json.loads((tmp_path / LEASE_FILE).read_text())["renewed"]
  time.sleep(0.3)
  assert json.loads((tmp_path / LEASE_FILE).read_text())["renewed"] > first
  lease.check()
  _write(tmp_path, run_id="usurper")  # taken over meanwhile (this run stopped renewing)
  time.sleep(0.3)
  with pytest.raises(ConfigError, match="run usurper .* took it over .*stopped without saving"):
    lease.check()
  lease.release()
  assert json.loads((tmp_path / LEASE_FILE).read_text())["run_id"] == "usurper"
  assert not (tmp_path / lease_mod.MUTEX_FILE).exists()


def test_two_runs_taking_over_one_stale_lease_at_once_one_wins(tmp_path):
  import threading

  _write(tmp_path, host="elsewhere", renewed=time.time() - 3600)
  leases = [WorkdirLease(tmp_path, lambda _: None) for _ in range(4)]
  outcomes = []

  def take(lease):
    try:
      lease.acquire()
      outcomes.append(lease.run_id)
    except ConfigError as e:
      outcomes.append(str(e))

  threads = [threading.Thread(target=take, args=(x,)) for x in leases]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  winners = [o for o in outcomes if o in {x.run_id for x in leases}]
  assert len(winners) == 1 and json.loads((tmp_path / LEASE_FILE).read_text())["run_id"] == winners[0]
  assert all("holds it" in o or "taking or releasing" in o for o in outcomes if o not in winners)
  for x in leases:
    x.release()


def test_a_lease_path_that_is_not_a_regular_file_is_named(tmp_path):
  (tmp_path / LEASE_FILE).mkdir()
  with pytest.raises(ConfigError, match="is not a regular file .*remove it"):
    WorkdirLease(tmp_path).acquire()
  (tmp_path / LEASE_FILE).rmdir()
  (tmp_path / LEASE_FILE).symlink_to(tmp_path / "nowhere")
  with pytest.raises(ConfigError, match="is not a regular file"):
    lease_mod.check_free(tmp_path)


HOLDER = r"""
import sys, time
from daca_jax.run.lease import WorkdirLease
WorkdirLease(sys.argv[1]).acquire()
print("held", flush=True)
time.sleep(600)
"""


def test_a_second_train_py_on_a_workdir_in_use_is_refused_in_one_line(tmp_path):
  """Real processes: a run holds the workdir; train.py on it exits 2 with one line naming the holder, before
  any work; once the holder is killed (kill -9: no release), the next train.py takes the lease over and runs."""
  workdir = tmp_path / "run"
  workdir.mkdir()
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(workdir)], stdout=subprocess.PIPE, text=True, env=env)
  try:
    assert holder.stdout.readline().strip() == "held"
    cmd = [sys.executable, str(ROOT / "experiments" / "train.py"), "--config=configs/sudoku_tiny.py:smoke",
           f"--workdir={workdir}", "--progress=false", "--config.sft.steps=2", "--config.rl.steps=1",
           "--config.task.num_eval_examples=4"]
    refused = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert refused.returncode == 2, refused.stderr[-2000:]
    errors = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"pid {holder.pid}" in errors[0] and "Traceback" not in refused.stderr
    assert sorted(p.name for p in workdir.iterdir()) == [LEASE_FILE]  # nothing written
  finally:
    holder.send_signal(signal.SIGKILL)
    holder.wait()
  resumed = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
  assert resumed.returncode == 0, resumed.stderr[-2000:]
  assert f"taking over {workdir / LEASE_FILE}" in resumed.stdout and "its process is gone" in resumed.stdout
  assert (workdir / "results.json").exists() and not (workdir / LEASE_FILE).exists()
