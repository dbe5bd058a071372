"""Worker process of :class:`daca_jax.tasks.math_answers.MathVerifier` (not for direct use).

  python -m daca_jax.tasks.math_verify_worker MEMORY_BYTES MATH_VERIFY_TIMEOUT

Reads one JSON line ``[gold, answer]`` per item from stdin and writes ``1`` or ``0`` per line
(:func:`daca_jax.tasks.grader_worker.serve`). It runs math-verify in this process's main thread,
where math-verify's ``signal.alarm`` timeouts work; the parent kills the whole process when an item
takes longer than its own limit.
"""
import logging
import sys

from daca_jax.tasks import grader_worker


def main() -> None:
  memory_bytes, timeout_seconds = int(sys.argv[1]), int(sys.argv[2])
  grader_worker.limit_memory(memory_bytes)
  logging.disable(logging.CRITICAL)  # math-verify logs every timeout; they are expected here
  import math_verify  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import  (before the ping)
  from daca_jax.tasks.math_answers import math_verify_equal  # pylint: disable=import-outside-toplevel

  def handle(item):
    gold, answer = item
    return 1 if math_verify_equal(str(gold), str(answer), timeout_seconds or None) else 0

  grader_worker.serve(handle, failure=0)


if __name__ == "__main__":
  main()
