"""One ``error: <line>`` and a non-zero exit for the failures a user can act on (the scripts in
``experiments/``), and one ``preempted: <line>`` with exit 75 for a run stopped by SIGTERM.

Reported in one line, without traceback:

=================================================  ====  ==========================================
error                                              exit  examples
=================================================  ====  ==========================================
:class:`~daca_jax.errors.ConfigError`,              2     a bad config value, a workdir of another
:class:`~daca_jax.errors.DataError`,                      run, a damaged data or workdir file, an
``FileNotFoundError``, a symlink loop                     unreadable checkpoint, a path whose links
                                                          lead back to themselves
:class:`~daca_jax.errors.NonFiniteError`            3     a diverging run (NaN/inf loss, gradient,
                                                          parameters)
other ``OSError``, a bucket client's error          1     a read-only or full disk, no permission, a
(gcsfs, google-auth, aiohttp)                             bucket that answers 5xx or cannot be reached
:class:`~daca_jax.errors.WorkerDied`                1     a grid's worker process killed (out of
                                                          memory) with ``reproduce.py --jobs``
:class:`~daca_jax.errors.DoesNotFit`                1     ``train.py --compile_only --target``: the
                                                          run's programs do not fit the machine
:class:`~daca_jax.run.preemption.Preempted`         75    SIGTERM (preemption, a time limit): the
                                                          checkpoint of the current step is saved;
                                                          the same command resumes (``preempted:``
                                                          instead of ``error:``)
=================================================  ====  ==========================================

Anything else is a bug and keeps its traceback.

A script's flags are parsed before its ``main`` runs (:func:`run`): a bad flag, an unknown or mistyped
``--config.<field>``, and a ``--config`` file that is missing, does not run or defines no
``get_config()`` are one ``error: <line>`` with exit 2 (:func:`flag_error`, :func:`python_file_error`).
"""
from __future__ import annotations

import contextlib
import errno
import logging
import os
import sys
import traceback
import warnings
from typing import Any, Callable, Iterator, Sequence

from daca_jax import storage
from daca_jax.config.checks import INT_MAX
from daca_jax.errors import ConfigError, DataError, DoesNotFit, NonFiniteError, WorkerDied
from daca_jax.run.preemption import EXIT_PREEMPTED, Preempted

EXIT_BAD_INPUT, EXIT_DIVERGED, EXIT_OS_ERROR = 2, 3, 1
# A ``--seed`` flag's range: the one ``TrainConfig.seed`` takes, so a seed that trains also evaluates and
# draws, and one refused there is refused here (``flags.DEFINE_integer(..., **SEED_BOUNDS)``).
SEED_BOUNDS = {"lower_bound": 0, "upper_bound": INT_MAX}

_OS_HINTS = {
    errno.ENOSPC: "free some disk space or use a --workdir / --output_dir on another disk",
    errno.EDQUOT: "free some disk space or use a --workdir / --output_dir on another disk",
    errno.EROFS: "use a writable --workdir / --output_dir",
    errno.EACCES: "use a --workdir / --output_dir you may write to",
    errno.EPERM: "use a --workdir / --output_dir you may write to",
}


def symlink_loop(e: BaseException) -> str | None:
  """The path of the symlink loop ``e`` reports, else None: ``pathlib.Path.resolve`` raises
  ``RuntimeError("Symlink loop from '<path>'")`` (Python < 3.13), ``open``/``stat`` ``OSError`` ELOOP."""
  if isinstance(e, OSError) and e.errno == errno.ELOOP:
    return str(e.filename)
  prefix = "Symlink loop from "
  if type(e) is RuntimeError and str(e).startswith(prefix):
    return str(e)[len(prefix):].strip("'\"")
  return None


def one_line(e: BaseException) -> str:
  """The message of ``e`` as one line; for an ``OSError``, its reason, file and what to do."""
  loop = symlink_loop(e)
  if loop is not None:  # a path given by the user (or a link in it) that never reaches a file
    return f"{loop}: a symlink loop (its links lead back to themselves); give a path to a real file or folder"
  if isinstance(e, OSError) and e.strerror and not isinstance(e, FileNotFoundError):
    where = f": {e.filename}" if e.filename else ""
    hint = _OS_HINTS.get(e.errno or 0)
    return f"{e.strerror}{where}" + (f" ({hint})" if hint else "")
  text = " ".join(line.strip() for line in str(e).strip().splitlines() if line.strip())
  if storage.is_transport_error(e):  # raised past daca_jax.storage (orbax, TensorStore, epath)
    code = getattr(e, "code", None)
    text = storage.transport_reason(e)
    return (f"a bucket operation failed ({type(e).__name__}{f' {code}' if isinstance(code, int) else ''}"
            f"{': ' + text[:300] if text else ''}); run the same command again once the bucket answers")
  return text or type(e).__name__


def exit_code(e: BaseException) -> int | None:
  """The exit status for ``e`` (table above), or None for an error that keeps its traceback."""
  if isinstance(e, (ConfigError, DataError, FileNotFoundError)) or symlink_loop(e) is not None:
    return EXIT_BAD_INPUT
  if isinstance(e, NonFiniteError):
    return EXIT_DIVERGED
  if isinstance(e, (WorkerDied, DoesNotFit)):
    return EXIT_OS_ERROR
  if isinstance(e, Preempted):
    return EXIT_PREEMPTED
  if isinstance(e, OSError) or storage.is_transport_error(e):
    return EXIT_OS_ERROR
  return None


@contextlib.contextmanager
def reported_errors() -> Iterator[None]:
  """Turns the errors of the table into ``error: <one line>`` on stderr and ``sys.exit(code)``."""
  try:
    yield
  except BrokenPipeError:  # the reader of the output went away (`... | head`): nothing to say, nobody to say it to
    with contextlib.suppress(OSError):
      os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so that the exit's flush does not fail again
    sys.exit(EXIT_OS_ERROR)
  except Exception as e:
    code = exit_code(e)
    if code is None:
      raise
    # The one line is the last word. A failed asynchronous checkpoint write (orbax / TensorStore) also
    # leaves asyncio futures holding the same error; collected at interpreter shutdown, they log "Future
    # exception was never retrieved" with a traceback after this line, and the coroutines it never ran warn
    # "coroutine ... was never awaited" when they are collected (seen in CI, not on every run).
    logging.getLogger("asyncio").setLevel(logging.CRITICAL + 1)
    warnings.filterwarnings("ignore", message=r"coroutine .* was never awaited", category=RuntimeWarning)
    print(f"{'preempted' if code == EXIT_PREEMPTED else 'error'}: {one_line(e)}", file=sys.stderr, flush=True)
    sys.exit(code)


def python_file_error(e: BaseException, flag: str, value: str) -> ConfigError | None:
  """The one-line error for ``e``, raised while a user's Python file ran (a ``--config``, ``--configs``
  or ``--study`` file, given as ``flag=value``, ``value`` = ``path[:preset]``), naming the file and the
  line that raised; None when ``e`` did not come from running that file.

  Covers a file that does not parse (``SyntaxError``), one that raises on import or in its getter (any
  exception with a frame in the file; the innermost such frame gives the line), and one without the
  getter the script calls (``AttributeError`` "module ... has no attribute 'get_...'"). A
  ``ValueError`` the file raises itself (a :class:`~daca_jax.errors.ConfigError`, or e.g. configs'
  "unknown preset") is its own message for the user and is left as it is (None).
  """
  path = os.path.realpath(value.split(":", 1)[0])
  chain = _chain(e)
  if isinstance(chain[-1], ValueError) and not isinstance(chain[-1], SyntaxError):
    return None
  for x in reversed(chain):  # the original exception first: wrappers re-raise it from elsewhere
    if isinstance(x, SyntaxError) and x.filename and os.path.realpath(x.filename) == path:
      return ConfigError(flag, value, f"a Python file that parses: SyntaxError: {x.msg} at {x.filename}:{x.lineno}")
    lines = [f.lineno for f in traceback.extract_tb(x.__traceback__) if os.path.realpath(f.filename) == path]
    if lines:
      return ConfigError(flag, value, f"a file that runs: it raised {type(x).__name__}: {one_line(x)} "
                         f"at {value.split(':', 1)[0]}:{lines[-1]}")
    if (isinstance(x, AttributeError) and isinstance(getattr(x, "obj", None), type(os))
        and str(getattr(x, "name", "")).startswith("get_")):
      return ConfigError(flag, value, f"a file defining {x.name}() (as configs/*.py do); it defines no {x.name}")
  return None


def missing_python_file(flag: str, value: str) -> ConfigError | None:
  """The error for ``flag=value`` (``path[:preset]``) when ``path`` is not an existing file, else None."""
  path = value.split(":", 1)[0]
  if os.path.isfile(path):
    return None
  what = "a directory" if os.path.isdir(path) else "no such file"
  return ConfigError(flag, value, f"an existing Python file (configs/*.py[:preset]); {path} is {what}")


@contextlib.contextmanager
def running_python_file(flag: str, value: str) -> Iterator[None]:
  """Runs the block (which imports the user's file ``value`` = ``path[:preset]`` of ``flag``, or calls
  its getter) with the file's failures as one :class:`~daca_jax.errors.ConfigError` naming the flag,
  the file and the line (:func:`python_file_error`); a missing file is refused before the block runs.

  Raises:
    ConfigError: the file is missing or a directory (:func:`missing_python_file`), does not parse,
      raises, or lacks the getter the block calls; anything else the block raises passes through.
  """
  missing = missing_python_file(flag, value)
  if missing is not None:
    raise missing
  try:
    yield
  except Exception as e:
    error = python_file_error(e, flag, value)
    if error is None:
      raise
    raise error from None


def _chain(e: BaseException) -> list[BaseException]:
  """``e`` and the exceptions it was raised from or while handling, outermost first."""
  chain, seen = [], set()
  c: BaseException | None = e
  while c is not None and id(c) not in seen:
    seen.add(id(c))
    chain.append(c)
    c = c.__cause__ or c.__context__
  return chain


def _config_files(argv: Sequence[str]) -> list[tuple[str, str]]:
  """``(--flag, path[:preset])`` of each config-file flag (``DEFINE_config_file``) given in ``argv``."""
  from absl import flags
  from ml_collections.config_flags.config_flags import ConfigFileFlagParser
  names = {f"--{n}" for n in flags.FLAGS if isinstance(flags.FLAGS[n].parser, ConfigFileFlagParser)}
  return [(a.split("=", 1)[0], a.split("=", 1)[1]) for a in argv if "=" in a and a.split("=", 1)[0] in names]


def parse_flags(argv: Sequence[str]) -> list[str]:
  """Parses ``argv`` into absl's flags (``--help`` included) and returns the positional arguments.

  A bad flag is ``error: <one line>`` (:func:`flag_error`) on stderr and exit 2, before any work: a
  missing required flag, a value of the wrong type, an unknown ``--config.<field>``, a ``--config``
  file that does not exist, does not run or defines no ``get_config()``.
  """
  from absl import app, flags
  app.define_help_flags()  # --help / --helpshort / --helpfull, as under app.run
  try:
    for flag, value in _config_files(argv):  # ml_collections defers a missing file's error to first use
      missing = missing_python_file(flag, value)
      if missing is not None:
        raise missing
    return flags.FLAGS(list(argv))
  except Exception as e:  # flags parse user input only; the config files' own bugs get their file:line
    print(f"error: {flag_error(e, list(argv))}", file=sys.stderr, flush=True)
    sys.exit(EXIT_BAD_INPUT)


def run(main: Callable[[list[str]], Any], argv: Sequence[str] | None = None) -> None:
  """``absl.app.run(main)`` with the flags parsed first by :func:`parse_flags` (a bad flag: one line,
  exit 2, instead of absl's "FATAL Flags parsing error" and exit 1)."""
  from absl import app
  from daca_jax.run import host
  host.use_cpu_without_accelerator()  # no cuInit / libtpu start-up errors on a host without the hardware
  rest = parse_flags(sys.argv if argv is None else argv)
  app.run(main, argv=[sys.argv[0] if argv is None else argv[0]], flags_parser=lambda _: rest)


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
  chain = _chain(e)
  for flag, value in _config_files(argv):
    from_file = python_file_error(e, flag, value)
    if from_file is not None:
      return one_line(from_file)
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
