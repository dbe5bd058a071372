"""reproduce.py --jobs (daca_jax.reports.grid_pool): cells run side by side, a seed's shared warm start
written by one cell before the others of that seed start, and a cell's results the same as when run alone."""
import concurrent.futures as cf
import pickle
import threading
import time

import pytest

from daca_jax.errors import ConfigError, DataError, NonFiniteError, ShapeError
from daca_jax.reports import grid_pool
from daca_jax.run.preemption import Preempted


class _Recorder:
  def __init__(self):
    self.lock, self.events, self.live, self.most = threading.Lock(), [], 0, 0

  def run(self, key, fail=False):
    with self.lock:
      self.events.append(("start", key))
      self.live += 1
      self.most = max(self.most, self.live)
    time.sleep(0.2 if key.endswith("0") else 0.05)  # the groups' first jobs overlap on a loaded machine too
    with self.lock:
      self.live -= 1
      self.events.append(("end", key))
    if fail:
      raise ConfigError("rl.credit", "dpss", "a registered credit")
    return key.upper()


def _jobs(spec):
  return [grid_pool.Job(key, group, (key,) + extra) for key, group, extra in spec]


def test_a_groups_first_job_finishes_before_the_rest_of_its_group_starts():
  rec, finished = _Recorder(), []
  spec = [(f"{g}{i}", g, ()) for g in "abc" for i in range(3)]
  with cf.ThreadPoolExecutor(4) as pool:
    grid_pool.run_jobs(_jobs(spec), rec.run, 4, executor=pool, on_done=lambda j, r: finished.append((j.key, r)))
  assert sorted(finished) == sorted((k, k.upper()) for k, _, _ in spec)  # each job once, its own result
  assert rec.most == 4  # the workers were used
  order = [k for what, k in rec.events if what == "start"]
  ends = [k for what, k in rec.events if what == "end"]
  for g in "abc":
    first_end = rec.events.index(("end", f"{g}0"))
    assert all(rec.events.index(("start", f"{g}{i}")) > first_end for i in (1, 2)), rec.events
  assert set(order[:3]) == {"a0", "b0", "c0"}  # the first cells of the groups start side by side
  assert len(ends) == 9


def test_a_failed_job_stops_new_starts_lets_running_ones_finish_and_raises_its_error():
  rec, finished = _Recorder(), []
  spec = [("a0", "a", (True,)), ("b0", "b", ()), ("a1", "a", ()), ("b1", "b", ()), ("b2", "b", ())]
  pool = cf.ThreadPoolExecutor(2)

  def run(key, fail=False):
    if key == "b0":  # still running when a0 fails
      time.sleep(0.3)
    return rec.run(key, fail)

  with pytest.raises(ConfigError, match=r"rl.credit='dpss'"):
    grid_pool.run_jobs(_jobs(spec), run, 2, executor=pool, on_done=lambda j, r: finished.append(j.key))
  ended = {k for what, k in rec.events if what == "end"}
  pool.shutdown(wait=False)
  started = {k for what, k in rec.events if what == "start"}
  assert started == {"a0", "b0"}  # nothing started after the failure: not a1, nor b0's group once b0 ended
  assert ended == {"a0", "b0"}  # the running job finished before the error was raised


def test_workers_must_be_positive():
  with pytest.raises(ValueError, match=r"workers=0: expected an integer >= 1"):
    grid_pool.run_jobs([], print, 0, on_done=print)


@pytest.mark.parametrize("error", [ConfigError("rl.credit", "dpss", "a credit"), ShapeError("batch.x", (2, 3), "(2,)"),
                                   NonFiniteError("RL", 7, "loss", "rerun to resume"), DataError("f.csv: line 2"),
                                   Preempted("SFT", 3, "/tmp/sft")])
def test_errors_cross_a_process_as_they_were(error):
  # A worker's exception is pickled back to the grid: a ConfigError could not be rebuilt from its message.
  back = pickle.loads(pickle.dumps(error))
  assert type(back) is type(error) and str(back) == str(error) and vars(back) == vars(error)


def _worker_sees(cfg, fail):
  """Runs in a spawned worker: what it was given, and the memory setting it runs under."""
  if fail:
    raise ConfigError("rl.credit", cfg.rl.credit, "a credit the objective takes")
  import os
  return cfg, os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE")


def test_process_workers_get_the_cells_config_and_send_back_its_error(monkeypatch):
  monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE", raising=False)
  from configs import sudoku_tiny
  from daca_jax.reports import reproduce as rp
  cfg = rp.train_config_from_dict(sudoku_tiny.get_config("smoke"))
  cfgs = [rp.with_overrides(cfg, [("seed", s)]) for s in (3, 4)]
  got = {}
  grid_pool.run_jobs([grid_pool.Job(str(c.seed), c.seed, (c, False)) for c in cfgs], _worker_sees, 2,
                     on_done=lambda job, res: got.update({job.key: res}))
  assert got == {"3": (cfgs[0], "false"), "4": (cfgs[1], "false")}
  with pytest.raises(ConfigError, match=rf"^rl.credit='{cfg.rl.credit}' is not allowed: expected a credit the obj"):
    # more workers than jobs (was an OverflowError from the pool's semaphore): one process per job
    grid_pool.run_jobs([grid_pool.Job("x", 0, (cfg, True))], _worker_sees, 10**11, on_done=print)


@pytest.mark.slow  # ~20 s; the default suite checks the workers' arguments and errors above
@pytest.mark.parametrize("arms", [("base",), ("base", "+SML")])
def test_jobs_in_processes_give_the_results_of_one_process(tmp_path, arms):
  """Two seeds of the smoke grid with --jobs=3 (a process per cell) and with --jobs=1: the same numbers."""
  from configs import sudoku_tiny
  from daca_jax.reports import reproduce as rp
  cfg = rp.train_config_from_dict(sudoku_tiny.get_config("smoke"))
  cells = rp.grid(["sudoku4x4"], ["diffu_grpo"], [0, 1], arms=arms)
  logged = []
  parallel = rp.run_grid({"sudoku4x4": cfg}, cells, tmp_path / "p", log=logged.append, jobs=3)
  # seed 1 alone in this process: its SFT warm start and every arm trained here, not in a worker
  serial = rp.run_grid({"sudoku4x4": cfg}, [c for c in cells if c.seed == 1], tmp_path / "s", log=lambda *_: None)
  assert sorted(parallel) == sorted(c.key for c in cells) and len(serial) == len(arms)
  for key in serial:
    for phase in ("eval_before", "eval_after"):
      assert parallel[key][phase] == serial[key][phase], (key, phase)
  assert len(logged) == len(cells) and all("strict_solved" in line for line in logged)
  assert (tmp_path / "p" / "sft_cache" / "sudoku4x4_seed1").is_dir()
  with pytest.raises(ValueError, match=r"jobs=0: expected an integer >= 1"):
    rp.run_grid({"sudoku4x4": cfg}, cells, tmp_path / "p", jobs=0)


def _die_once_running(key, started_dir):
  import os
  import pathlib
  deadline = time.monotonic() + 120
  while not (pathlib.Path(started_dir) / "y").exists() and time.monotonic() < deadline:
    time.sleep(0.05)
  os._exit(9)  # as the kernel's OOM killer leaves it: no answer, no exception


def test_a_worker_that_dies_is_one_error_naming_the_cells_it_took_with_it_and_the_others_save_and_exit(tmp_path):
  # Python 3.12 joins the other workers of a broken pool without telling them to stop: they must exit by
  # themselves (having saved their step), or the grid hangs.
  from daca_jax.errors import WorkerDied
  from daca_jax.run.cli_errors import EXIT_OS_ERROR, exit_code
  jobs = [grid_pool.Job("seed1/x", 0, ("x", str(tmp_path))), grid_pool.Job("y", 1, ("y", str(tmp_path)))]
  with pytest.raises(WorkerDied, match=r"a worker process died .* while running (seed1/x, y|y, seed1/x); finished cells are "
                                       r"kept: rerun the same command to resume them, with fewer --jobs") as e:
    grid_pool.run_jobs(jobs, _die_or_stop, 2, on_done=print)
  assert exit_code(e.value) == EXIT_OS_ERROR
  assert (tmp_path / "y.saved").exists()  # the other worker saved its step before the grid returned


def _die_or_stop(key, started_dir):
  return (_die_once_running if key == "x" else _stops_at_a_step)(key, started_dir)


@pytest.fixture
def sigterm_restored():
  """watching() leaves SIGTERM ignored after one arrived (the process is on its way out); this test worker
  is not, so its handler is put back."""
  import signal
  before = signal.getsignal(signal.SIGTERM)
  yield
  signal.signal(signal.SIGTERM, before)


def _stops_at_a_step(key, started_dir=None, sigterm=False):
  """A cell that runs steps until the grid's stop reaches it, then saves and stops as the RL loop does."""
  import os
  import pathlib
  import signal
  from daca_jax.run import preemption
  if started_dir is not None:
    (pathlib.Path(started_dir) / key).write_text(str(os.getpid()))
  if sigterm:
    os.kill(os.getpid(), signal.SIGTERM)
  for step in range(1, 2400):  # up to 2 min: a loaded machine may start the other worker late
    if preemption.stop_requested():
      if started_dir is not None:
        (pathlib.Path(started_dir) / f"{key}.saved").touch()
      raise preemption.Preempted("RL", step, f"/ckpt/{key}")
    time.sleep(0.05)
  return "never stopped"


def test_a_sigterm_stops_the_grid_lets_running_jobs_save_and_starts_nothing(sigterm_restored):
  from daca_jax.run import preemption
  from daca_jax.run.cli_errors import EXIT_PREEMPTED, exit_code
  finished = []
  jobs = [grid_pool.Job("a0", "a", ("a0", None, True)), grid_pool.Job("b0", "b", ("b0",)),
          grid_pool.Job("a1", "a", ("a1",)), grid_pool.Job("c0", "c", ("c0",))]
  with cf.ThreadPoolExecutor(2) as pool, preemption.watching():
    with pytest.raises(preemption.GridPreempted) as e:
      grid_pool.run_jobs(jobs, _stops_at_a_step, 2, executor=pool, on_done=lambda j, r: finished.append(j.key))
  assert sorted(s.split(" (RL step ")[0] for s in e.value.stopped) == ["a0", "b0"] and e.value.not_started == 2 and not finished
  assert str(e.value).startswith("stopped by SIGTERM: ") and "2 other cell(s) still to run" in str(e.value)
  assert exit_code(e.value) == EXIT_PREEMPTED
  back = pickle.loads(pickle.dumps(e.value))
  assert str(back) == str(e.value) and vars(back) == vars(e.value)


def test_the_grids_sigterm_reaches_its_worker_processes(tmp_path, sigterm_restored):
  import os
  import signal
  from daca_jax.run import preemption
  started = tmp_path / "started"
  started.mkdir()

  def sigterm_once_both_run():
    deadline = time.monotonic() + 120
    while len(list(started.iterdir())) < 2 and time.monotonic() < deadline:
      time.sleep(0.05)
    os.kill(os.getpid(), signal.SIGTERM)  # the grid's own process only, as `kill PID` does

  jobs = [grid_pool.Job(k, k, (k, str(started))) for k in ("x", "y", "z")]
  threading.Thread(target=sigterm_once_both_run, daemon=True).start()
  with preemption.watching():
    with pytest.raises(preemption.GridPreempted) as e:
      grid_pool.run_jobs(jobs, _stops_at_a_step, 2, on_done=lambda j, r: pytest.fail(f"{j.key} finished: {r}"))
  assert [s.split()[0] for s in sorted(e.value.stopped)] == ["x", "y"] and e.value.not_started == 1  # z never started
  assert sorted(p.name for p in started.iterdir()) == ["x", "x.saved", "y", "y.saved"]


def test_workers_of_a_killed_grid_save_their_step_and_exit(tmp_path):
  """SIGKILL (the OOM killer) to the grid's process: its worker stops its cell at a step boundary and exits,
  instead of running the cell to its end and then waiting for work forever, holding memory."""
  import os
  import pathlib
  import signal
  import subprocess
  import sys
  root = pathlib.Path(__file__).resolve().parents[2]
  grid = ("from daca_jax.reports import grid_pool\n"
          "from tests.reports.test_grid_pool import _stops_at_a_step\n"
          f"grid_pool.run_jobs([grid_pool.Job('x', 0, ('x', {str(tmp_path)!r}))], _stops_at_a_step, 1, on_done=print)\n")
  proc = subprocess.Popen([sys.executable, "-c", grid], cwd=root, env=dict(os.environ, PYTHONPATH=str(root)))
  try:
    deadline = time.monotonic() + 120
    while not (tmp_path / "x").exists() or not (tmp_path / "x").read_text():
      assert proc.poll() is None and time.monotonic() < deadline, "the worker never started its cell"
      time.sleep(0.05)
    worker = int((tmp_path / "x").read_text())
    proc.send_signal(signal.SIGKILL)
    proc.wait()

    def running():  # an exited orphan may stay a zombie where PID 1 does not reap it (a container's shell)
      try:
        return pathlib.Path(f"/proc/{worker}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
      except (FileNotFoundError, ProcessLookupError):
        return False

    deadline = time.monotonic() + 60
    while running() and time.monotonic() < deadline:
      time.sleep(0.1)
    assert not running(), "the orphaned worker is still running"
    assert (tmp_path / "x.saved").exists()  # it stopped its cell at a step boundary, with the step saved
  finally:
    proc.kill()


def test_one_process_grid_starts_no_cell_after_a_sigterm(tmp_path, monkeypatch, sigterm_restored):
  import os
  import signal
  from configs import sudoku_tiny
  from daca_jax.reports import reproduce as rp
  from daca_jax.run import preemption
  cfg = rp.train_config_from_dict(sudoku_tiny.get_config("smoke"))
  cells = rp.grid(["sudoku4x4"], ["diffu_grpo"], [0, 1, 2], arms=("base",))
  ran = []

  def cell_without_steps_left(cfg, cdir, sft_dir, show_progress):  # the SIGTERM lands in its final eval
    ran.append(cdir.name)
    os.kill(os.getpid(), signal.SIGTERM)
    return {"eval_after": {"strict_solved": 0.5}}, 1.0

  monkeypatch.setattr(rp, "run_cell", cell_without_steps_left)
  logged = []
  with preemption.watching():
    with pytest.raises(preemption.GridPreempted, match=r"^stopped by SIGTERM: 2 other cell\(s\) still to run"):
      rp.run_grid({"sudoku4x4": cfg}, cells, tmp_path, log=logged.append)
  assert ran == ["seed0"] and len(logged) == 1


def _finishes_after_a_sigterm(key, started_dir):
  """A cell whose SIGTERM lands after its last step boundary (its final evaluation): it finishes."""
  import os
  import pathlib
  import signal
  deadline = time.monotonic() + 120
  while not (pathlib.Path(started_dir) / "y").exists() and time.monotonic() < deadline:
    time.sleep(0.05)
  os.kill(os.getpid(), signal.SIGTERM)
  time.sleep(0.2)
  return f"{key} finished"


def _fails_before_a_sigterm_to_the_grid(key, started_dir):
  import os
  import pathlib
  deadline = time.monotonic() + 120
  while not (pathlib.Path(started_dir) / "y").exists() and time.monotonic() < deadline:
    time.sleep(0.05)
  import subprocess
  # the grid's process, a second after this failure: it is waiting on y by then
  subprocess.Popen(["sh", "-c", f"sleep 1; kill -TERM {os.getppid()}"], start_new_session=True)
  raise ConfigError("rl.credit", "dpss", "a registered credit")


def _one_of(key, started_dir, first):
  return (first if key == "x" else _stops_at_a_step)(key, started_dir)


@pytest.mark.parametrize("first", ["sigterm_to_a_worker_after_its_last_step", "sigterm_to_the_grid_after_a_failure"])
def test_a_sigterm_that_no_step_boundary_sees_still_stops_the_grid(tmp_path, first, sigterm_restored):
  """A SIGTERM to one worker after its cell's last step, or to the grid while it waits on running cells
  after a failure: the grid still stops, and the running cell saves its step (it ran to its end before)."""
  from daca_jax.run import preemption
  fn = {"sigterm_to_a_worker_after_its_last_step": _finishes_after_a_sigterm,
        "sigterm_to_the_grid_after_a_failure": _fails_before_a_sigterm_to_the_grid}[first]
  jobs = [grid_pool.Job(k, k, (k, str(tmp_path), fn)) for k in ("x", "y", "z")]
  finished = []
  t0 = time.monotonic()
  with preemption.watching():
    if fn is _finishes_after_a_sigterm:
      with pytest.raises(preemption.GridPreempted) as e:
        grid_pool.run_jobs(jobs, _one_of, 2, on_done=lambda j, r: finished.append(r))
      assert finished == ["x finished"] and e.value.not_started == 1  # z did not start
      assert [s.split()[0] for s in e.value.stopped] == ["y"]
    else:
      with pytest.raises(ConfigError, match=r"rl.credit='dpss'"):
        grid_pool.run_jobs(jobs, _one_of, 2, on_done=lambda j, r: finished.append(r))
  assert (tmp_path / "y.saved").exists() and not (tmp_path / "z").exists()
  assert time.monotonic() - t0 < 100  # y stopped when told, not at the end of its 2 minutes
