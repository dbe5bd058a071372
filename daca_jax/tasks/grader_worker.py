"""A grading worker process with a CPU-time budget per request and a wall-clock backstop.

Some grading work cannot be bounded by the algorithm alone: math-verify (sympy) can spend minutes on
one parsed expression, and a single big-integer operation cannot even be interrupted by a signal;
JSON-Schema validation of an unforeseen schema/instance pair may explode combinatorially. Such work
runs in a :class:`WorkerProcess`: a plain ``python -m <module>`` subprocess (not
``multiprocessing``, so it never re-imports the caller's ``__main__`` and is safe next to JAX's
threads) that reads one JSON request per line on stdin and writes one JSON response per line
(:func:`serve`).

Two limits per request:

* CPU time (``cpu_limit_s``), enforced inside the worker with ``setitimer(ITIMER_PROF)``: the
  request is abandoned (status :data:`TIMEOUT`) and the worker keeps serving. CPU time, not wall
  time, is what a completion costs; it does not depend on how loaded the machine is, so a
  legitimate completion is not failed because other jobs hold the cores.
* a backstop enforced by the caller, for native code that the CPU timer's signal cannot interrupt
  (a huge ``2**(10**10)``): the caller reads the worker's CPU time (``/proc/<pid>/stat``) while it
  waits and kills the worker with its process group once it has used the CPU limit plus 0.15 s
  (status :data:`TIMEOUT`); a fresh worker is started for the next request. A worker that merely
  waits for a core on a loaded machine uses no CPU and is not killed; ``wall_limit_s`` (generous)
  bounds that wait, and is the only backstop where ``/proc`` is missing.

A fresh worker is pinged before its first request, so start-up (imports) never counts against a
request's limits. The worker's address space is capped (``RLIMIT_AS``, :func:`limit_memory`) so
that a runaway computation fails with MemoryError instead of exhausting the machine.
"""
from __future__ import annotations

import json
import os
import pathlib
import resource
import select
import signal
import subprocess
import sys
import time
import weakref
from typing import Any, Callable, Sequence

OK, TIMEOUT, DIED = "ok", "timeout", "died"
# CPU seconds beyond the limit after which the caller kills a worker that its CPU timer did not stop.
_CPU_GRACE_S = 0.15
_PING = "__ping__"  # a fresh worker's first request: ["__ping__", cpu_limit_s]
_PONG = "__pong__"
_BATCH = "__batch__"  # ["__batch__", [request, ...]]: one line, each request under its own limit


def _stop(state: dict) -> None:
  proc = state.get("proc")
  if proc is not None:
    for stream in (proc.stdin, proc.stdout):
      try:
        stream.close()
      except OSError:
        pass
    if proc.poll() is None:
      try:
        os.killpg(proc.pid, signal.SIGKILL)  # the worker leads its own session (start_new_session)
      except OSError:
        proc.kill()
    proc.wait(5)
  state.clear()


class WorkerProcess:
  """``python -m module *args`` answering JSON lines, with per-request CPU and wall limits.

  Args:
    module: the worker's module (its ``main`` calls :func:`serve`).
    args: extra command-line arguments of the worker.
    cpu_limit_s: CPU seconds per request (> 0), enforced in the worker (and by the backstop).
    wall_limit_s: wall-clock seconds per request before the worker is killed whatever it is doing.
    startup_s: how long a fresh worker may take to start (its imports); pinged first, so start-up
      never counts against a request's limits.

  The worker starts lazily and is killed by :meth:`close`, garbage collection or interpreter exit.
  ``num_timeouts`` counts the requests that ran out of time; ``last_cpu_s`` is the CPU time the
  worker reported for the last answered request.
  """

  def __init__(self, module: str, args: Sequence[str] = (), cpu_limit_s: float = 1.0,
               wall_limit_s: float = 300.0, startup_s: float = 600.0):
    if not cpu_limit_s > 0:
      raise ValueError(f"WorkerProcess: cpu_limit_s must be > 0, got {cpu_limit_s}")
    self.module = module
    self.args = [str(a) for a in args]
    self.cpu_limit_s = float(cpu_limit_s)
    self.wall_limit_s = float(wall_limit_s)
    self.startup_s = float(startup_s)
    self.num_timeouts = 0
    self.last_cpu_s = 0.0
    self._generations = 0
    self._state: dict = {}
    self._finalizer = weakref.finalize(self, _stop, self._state)

  @property
  def generation(self) -> int:
    """Changes whenever a new worker process is started (state cached in a worker is then lost)."""
    return self._state.get("generation", -1)

  def _start(self) -> bool:
    """Starts a worker and waits (``startup_s``) until it answers the ping; False if it does not."""
    package_root = str(pathlib.Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    proc = subprocess.Popen(
        [sys.executable, "-m", self.module, *self.args], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, start_new_session=True,
        bufsize=0)
    self._generations += 1
    self._state.update(proc=proc, generation=self._generations, buffer=b"")
    if self._send([_PING, self.cpu_limit_s]):
      status, answer = self._receive(self.startup_s)
      if status == OK and answer[1] == _PONG:
        return True
    _stop(self._state)
    return False

  def _send(self, payload: Any) -> bool:
    try:
      self._state["proc"].stdin.write(json.dumps(payload).encode() + b"\n")
      return True
    except (OSError, ValueError):
      return False

  def _receive(self, wait: float, cpu_budget: float | None = None) -> tuple[str, Any]:
    """The next answer line ``[status, response, cpu]``, waiting up to ``wait`` seconds and, when
    ``cpu_budget`` is given, until the worker has used that much CPU time from now on.

    Reads the pipe's file descriptor directly (a buffered reader could hold a line that ``select``
    does not see).
    """
    proc = self._state["proc"]
    fd = proc.stdout.fileno()
    start_cpu = _cpu_seconds(proc.pid) if cpu_budget is not None else None
    deadline = time.monotonic() + wait
    try:
      while b"\n" not in self._state["buffer"]:
        left = deadline - time.monotonic()
        if left <= 0:
          return TIMEOUT, None
        ready, _, _ = select.select([fd], [], [], min(left, 0.05))
        if ready:
          chunk = os.read(fd, 1 << 16)
          if not chunk:
            return DIED, None
          self._state["buffer"] += chunk
        elif start_cpu is not None:
          used = _cpu_seconds(proc.pid)
          if used is not None and used - start_cpu > cpu_budget:
            return TIMEOUT, None
      line, self._state["buffer"] = self._state["buffer"].split(b"\n", 1)
      answer = json.loads(line)
    except (OSError, ValueError):
      return DIED, None
    if isinstance(answer, list) and len(answer) == 3:
      return OK, answer
    return DIED, None

  def _answered(self, answer: list[Any]) -> tuple[str, Any]:
    code, response, cpu = answer
    self.last_cpu_s = float(cpu)
    if code == TIMEOUT:
      self.num_timeouts += 1
      return TIMEOUT, None
    return OK, response

  def request(self, payload: Any) -> tuple[str, Any]:
    """Sends one request; returns ``(OK, response)``, ``(TIMEOUT, None)`` or ``(DIED, None)``.

    A worker that died between requests (e.g. killed for memory) is restarted once.
    """
    return self.request_many([payload])[0]

  def request_many(self, payloads: Sequence[Any]) -> list[tuple[str, Any]]:
    """:meth:`request` for each payload, sent in one batch line (each request keeps its own CPU
    limit in the worker, and the worker answers each on its own line as it finishes, so the CPU
    backstop applies to each request). After a kill, the rest of the batch goes to a fresh worker.
    """
    out: list[tuple[str, Any]] = []
    restarts = 0
    while len(out) < len(payloads):
      if not self._state and not self._start():
        return out + [(DIED, None)] * (len(payloads) - len(out))
      pending = payloads[len(out):]
      if not self._send([_BATCH, list(pending)]):
        status = DIED
      else:
        for _ in pending:
          status, answer = self._receive(self.wall_limit_s, self.cpu_limit_s + _CPU_GRACE_S)
          if status != OK:
            break
          out.append(self._answered(answer))
      if len(out) == len(payloads):
        break
      _stop(self._state)
      if status == TIMEOUT:  # the request at fault ran out of time; the rest get a fresh worker
        self.num_timeouts += 1
        out.append((TIMEOUT, None))
      else:  # the worker died: restart once for the same request, then give it up
        restarts += 1
        if restarts > 1:
          out.append((DIED, None))
          restarts = 0
    return out

  def close(self) -> None:
    """Stops the worker (a later request starts a new one)."""
    _stop(self._state)


def _cpu_seconds(pid: int) -> float | None:
  """User + system CPU seconds of process ``pid`` from ``/proc/<pid>/stat``; None if unreadable."""
  try:
    with open(f"/proc/{pid}/stat", "rb") as f:
      fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
  except (OSError, ValueError, IndexError):
    return None


def limit_memory(memory_bytes: int) -> None:
  """Caps this process's address space (``RLIMIT_AS``); 0 = no cap. Called by worker mains."""
  if memory_bytes > 0:
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))


class _CpuBudgetExceeded(BaseException):
  """Raised in the worker by the CPU timer. A BaseException, so that libraries' ``except
  Exception`` clauses (math-verify, sympy) do not swallow it."""


def _on_cpu_timer(signum, frame):  # pylint: disable=unused-argument
  raise _CpuBudgetExceeded()


def serve(handle: Callable[[Any], Any], failure: Any = None) -> None:
  """Worker main loop: one JSON request per stdin line, one JSON answer per stdout line.

  Each answer is ``[status, response, cpu_seconds]``: ``"ok"`` with ``handle(request)``;
  ``"timeout"`` when the request used up the CPU limit set by the caller's ping; ``"ok"`` with
  ``failure`` when ``handle`` raised anything else (MemoryError, RecursionError, ...), so the worker
  keeps serving. A batch line (:meth:`WorkerProcess.request_many`) is answered with one line per
  request, each written as soon as it is done. Must run in the main thread (the CPU timer's signal
  is delivered there).
  """
  limit = [0.0]
  signal.signal(signal.SIGPROF, _on_cpu_timer)

  def answer(request: Any) -> list[Any]:
    start = time.process_time()
    status, response = OK, failure
    try:
      signal.setitimer(signal.ITIMER_PROF, limit[0])
      try:
        response = handle(request)
      finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
    except _CpuBudgetExceeded:
      status, response = TIMEOUT, None
    except BaseException:  # pylint: disable=broad-except  (answer, keep serving)
      response = failure
    return [status, response, time.process_time() - start]

  for line in sys.stdin:
    try:
      request = json.loads(line)
    except ValueError:
      request = None
    if isinstance(request, list) and len(request) == 2 and request[0] == _PING:
      limit[0] = float(request[1])
      replies: Any = [[OK, _PONG, 0.0]]
    elif isinstance(request, list) and len(request) == 2 and request[0] == _BATCH:
      replies = (answer(r) for r in request[1])  # each written as soon as it is done
    else:
      replies = [answer(request)]
    for reply in replies:
      sys.stdout.write(json.dumps(reply) + "\n")
      sys.stdout.flush()
