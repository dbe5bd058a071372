"""Keeps orbax's and TensorStore's secondary output off the console (one job: quiet failures).

When a checkpoint read or write fails, orbax closes its asyncio event loop while TensorStore reads
are still in flight. What follows is noise that repeats the one real error many times over:

* orbax logs every failure with a full traceback (``logging.error(..., exc_info=True)``), and
  its INFO chatter on every save;
* TensorStore's completion callbacks call ``loop.call_soon_threadsafe`` on the closed loop, and
  the resulting ``RuntimeError: Event loop is closed`` is printed with a traceback, once per
  pending read;
* the abandoned read coroutines are garbage-collected later and each prints its stored exception
  ("Exception ignored in: <coroutine ...>") with TensorStore's multi-line spec, and abandoned write
  tasks are reported by asyncio's logger ("Task exception was never retrieved", with a traceback)
  -- after the checkpointer's own error line.

:func:`install` (idempotent, done by :mod:`daca_jax.run.checkpoint` on import) filters exactly these:
orbax records below WARNING are dropped and the others keep their first line only (no traceback);
asyncio's reports about orbax/TensorStore tasks are dropped;
the closed-loop callback errors and the collected orbax/TensorStore coroutines are ignored. The real
error is raised by :class:`daca_jax.run.checkpoint.Checkpointer` as one clear exception; any other
unraisable exception or uncaught error is passed on to the previous hooks unchanged.
"""
from __future__ import annotations

import logging
import sys
import types
from typing import Any

_NOISY_PACKAGES = ("/orbax/", "/tensorstore/")
_MAX_LINE = 300


class _QuietOrbax(logging.Filter):
  """On the shared ``absl`` logger: drops orbax records below WARNING, shortens the rest to one
  line without traceback."""

  def filter(self, record: logging.LogRecord) -> bool:
    path = (record.pathname or "").replace("\\", "/")
    if "/orbax/" not in path:
      return True
    if record.levelno < logging.WARNING:
      return False
    message = record.getMessage().strip().splitlines()
    record.msg, record.args = (message[0][:_MAX_LINE] if message else ""), None
    record.exc_info = record.exc_text = record.stack_info = None
    return True


class _QuietAsyncio(logging.Filter):
  """On the ``asyncio`` logger: drops "Task exception was never retrieved" (and other loop error
  reports) about orbax/TensorStore coroutines -- the failed writes of a save whose error the
  checkpointer raises once; they are logged when the abandoned tasks are collected, after it."""

  def filter(self, record: logging.LogRecord) -> bool:
    message = record.getMessage()
    return not any(p in message for p in _NOISY_PACKAGES) and not (
        record.exc_info and _from_noisy_traceback(record.exc_info[2]))


def _from_noisy_traceback(tb: types.TracebackType | None) -> bool:
  while tb is not None:
    if any(p in tb.tb_frame.f_code.co_filename.replace("\\", "/") for p in _NOISY_PACKAGES):
      return True
    tb = tb.tb_next
  return False


def _from_noisy_package(obj: Any) -> bool:
  code = getattr(obj, "cr_code", None) or getattr(obj, "gi_code", None) or getattr(obj, "ag_code", None)
  filename = (getattr(code, "co_filename", "") or "").replace("\\", "/")
  return any(p in filename for p in _NOISY_PACKAGES)


def _is_closed_loop_callback(exc: BaseException | None, tb: types.TracebackType | None) -> bool:
  """``RuntimeError: Event loop is closed`` raised by ``call_soon_threadsafe`` called straight from
  native code (the traceback starts in that method: a TensorStore callback, not Python code)."""
  if not isinstance(exc, RuntimeError) or str(exc) != "Event loop is closed" or tb is None:
    return False
  code = tb.tb_frame.f_code
  return code.co_name == "call_soon_threadsafe" and "asyncio" in code.co_filename.replace("\\", "/")


def is_noise(exc: BaseException | None, tb: types.TracebackType | None, obj: Any = None) -> bool:
  """Whether an unraisable / uncaught exception is checkpoint teardown noise (module docstring)."""
  return _is_closed_loop_callback(exc, tb) or (obj is not None and _from_noisy_package(obj))


_installed = False


def install() -> None:
  """Installs the logging filter and the unraisable/except hooks once per process."""
  global _installed
  if _installed:
    return
  _installed = True
  absl_logger = logging.getLogger("absl")
  absl_logger.addFilter(_QuietOrbax())
  logging.getLogger("asyncio").addFilter(_QuietAsyncio())
  previous_unraisable, previous_except = sys.unraisablehook, sys.excepthook

  def unraisablehook(u: Any) -> None:
    if not is_noise(u.exc_value, u.exc_traceback, u.object):
      previous_unraisable(u)

  def excepthook(exc_type: type, exc: BaseException, tb: types.TracebackType | None) -> None:
    if not is_noise(exc, tb):
      previous_except(exc_type, exc, tb)

  sys.unraisablehook, sys.excepthook = unraisablehook, excepthook
