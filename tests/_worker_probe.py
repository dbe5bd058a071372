"""A test worker for daca_jax.tasks.grader_worker (run as ``python -m tests._worker_probe``).

Requests: ``["echo", x]`` answers x; ``["spin"]`` loops in Python forever (the worker's CPU timer
stops it); ``["sleep", s]`` sleeps s seconds (no CPU: only the caller's wall-clock limit stops it);
``["burn"]`` burns CPU inside one C call (the CPU timer's signal cannot interrupt it: only the
caller's CPU-time backstop stops it); ``["raise"]`` raises (answered with the failure value).
"""
import time

from daca_jax.tasks import grader_worker


def handle(request):
  kind = request[0]
  if kind == "echo":
    return request[1]
  if kind == "spin":
    while True:
      pass
  if kind == "burn":
    return sum(range(10**13))
  if kind == "sleep":
    time.sleep(request[1])
    return "slept"
  raise RuntimeError("asked to raise")


if __name__ == "__main__":
  grader_worker.serve(handle, failure="failed")
