"""One ``error: <line>`` and a non-zero exit for the failures a user can act on (the scripts in
``experiments/``), and one ``preempted: <line>`` with exit 75 for a run stopped by SIGTERM.

Reported in one line, without traceback:

=================================================  ====  ==========================================
error                                              exit  examples
=================================================  ====  ==========================================
:class:`~daca_jax.errors.ConfigError`,              2     a bad config value, a workdir of another
:class:`~daca_jax.errors.DataError`,                      run, a damaged data or workdir file, an
``FileNotFoundError``                                     unreadable checkpoint
:class:`~daca_jax.errors.NonFiniteError`            3     a diverging run (NaN/inf loss, gradient,
                                                          parameters)
other ``OSError``                                   1     a read-only or full disk, no permission
:class:`~daca_jax.run.preemption.Preempted`         75    SIGTERM (preemption, a time limit): the
                                                          checkpoint of the current step is saved;
                                                          the same command resumes (``preempted:``
                                                          instead of ``error:``)
=================================================  ====  ==========================================

Anything else is a bug and keeps its traceback.
"""
from __future__ import annotations

import contextlib
import errno
import logging
import sys
from typing import Iterator

from daca_jax.errors import ConfigError, DataError, NonFiniteError
from daca_jax.run.preemption import EXIT_PREEMPTED, Preempted

EXIT_BAD_INPUT, EXIT_DIVERGED, EXIT_OS_ERROR = 2, 3, 1

_OS_HINTS = {
    errno.ENOSPC: "free some disk space or use a --workdir / --output_dir on another disk",
    errno.EDQUOT: "free some disk space or use a --workdir / --output_dir on another disk",
    errno.EROFS: "use a writable --workdir / --output_dir",
    errno.EACCES: "use a --workdir / --output_dir you may write to",
    errno.EPERM: "use a --workdir / --output_dir you may write to",
}


def one_line(e: BaseException) -> str:
  """The message of ``e`` as one line; for an ``OSError``, its reason, file and what to do."""
  if isinstance(e, OSError) and e.strerror and not isinstance(e, FileNotFoundError):
    where = f": {e.filename}" if e.filename else ""
    hint = _OS_HINTS.get(e.errno or 0)
    return f"{e.strerror}{where}" + (f" ({hint})" if hint else "")
  text = " ".join(line.strip() for line in str(e).strip().splitlines() if line.strip())
  return text or type(e).__name__


def exit_code(e: BaseException) -> int | None:
  """The exit status for ``e`` (table above), or None for an error that keeps its traceback."""
  if isinstance(e, (ConfigError, DataError, FileNotFoundError)):
    return EXIT_BAD_INPUT
  if isinstance(e, NonFiniteError):
    return EXIT_DIVERGED
  if isinstance(e, Preempted):
    return EXIT_PREEMPTED
  if isinstance(e, OSError):
    return EXIT_OS_ERROR
  return None


@contextlib.contextmanager
def reported_errors() -> Iterator[None]:
  """Turns the errors of the table into ``error: <one line>`` on stderr and ``sys.exit(code)``."""
  try:
    yield
  except Exception as e:
    code = exit_code(e)
    if code is None:
      raise
    # The one line is the last word. A failed asynchronous checkpoint write (orbax / TensorStore) also
    # leaves asyncio futures holding the same error; collected at interpreter shutdown, they log "Future
    # exception was never retrieved" with a traceback after this line.
    logging.getLogger("asyncio").setLevel(logging.CRITICAL + 1)
    print(f"{'preempted' if code == EXIT_PREEMPTED else 'error'}: {one_line(e)}", file=sys.stderr, flush=True)
    sys.exit(code)


def flag_error(e: BaseException, argv: list[str]) -> str:
  """The one line to print for an exception raised while parsing a script's flags.

  absl and ml_collections wrap what went wrong (``IllegalFlagValueError`` around a re-raise of the
  config file's exception that may itself fail: a :class:`~daca_jax.errors.ConfigError` cannot be
  rebuilt from a message alone), so the line comes from the original exception at the end of the
  chain: a config file's own error (an unknown preset, a preset name that does not parse) as it was
  raised, and an unknown ``--config.<field>`` with ml_collections' suggestion and the flag that named
  it.

  Args:
    e: the exception ``flags.FLAGS(argv)`` raised.
    argv: the command line.
  """
  chain, seen = [], set()
  c: BaseException | None = e
  while c is not None and id(c) not in seen:
    seen.add(id(c))
    chain.append(c)
    c = c.__cause__ or c.__context__
  unknown = next((x for x in chain if isinstance(x, (AttributeError, KeyError)) and x.args
                  and isinstance(x.args[0], str)), None)
  if unknown is not None:
    name, _, hint = unknown.args[0].partition("\n")
    name = name.strip().strip("'\"")
    given = [a.split("=")[0] for a in argv if a.startswith("--config.") and a.split("=")[0].endswith(f".{name}")]
    where = f" in {given[0]}" if given else ""
    hint = f"; {hint.strip()}" if hint.strip() else ""
    return (f"unknown config field {name!r}{where}{hint} (the valid fields are listed in configs/base.py; "
            "task.options takes only the arguments the task's config declares)")
  original = chain[-1]
  if original is e or isinstance(original, (ConfigError, DataError)):
    return one_line(original)  # these name their field (ConfigError) or file (DataError) themselves
  flag = str(e).partition(": ")[0] if str(e).startswith("flag --") else ""
  return f"{flag}: {one_line(original)}" if flag else one_line(original)
