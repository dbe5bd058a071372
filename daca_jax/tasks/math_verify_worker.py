"""Worker process of :class:`daca_jax.tasks.math_answers.MathVerifier` (not for direct use).

  python -m daca_jax.tasks.math_verify_worker MEMORY_BYTES MATH_VERIFY_TIMEOUT

Reads one JSON line ``[gold, answer]`` per item from stdin and writes ``1`` or ``0`` per line. It runs
math-verify in this process's main thread, where math-verify's ``signal.alarm`` timeouts work; the
parent kills the whole process when an item takes longer than its own limit.
"""
import json
import logging
import resource
import sys


def main() -> None:
  memory_bytes, timeout_seconds = int(sys.argv[1]), int(sys.argv[2])
  if memory_bytes > 0:
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
  logging.disable(logging.CRITICAL)  # math-verify logs every timeout; they are expected here
  from daca_jax.tasks.math_answers import math_verify_equal  # pylint: disable=import-outside-toplevel

  for line in sys.stdin:
    try:
      gold, answer = json.loads(line)
      ok = math_verify_equal(str(gold), str(answer), timeout_seconds or None)
    except BaseException:  # pylint: disable=broad-except  (MemoryError, math-verify's TimeoutException)
      ok = False
    sys.stdout.write("1\n" if ok else "0\n")
    sys.stdout.flush()


if __name__ == "__main__":
  main()
