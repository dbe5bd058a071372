"""Progress bars of the long loops (SFT, RL, evaluation), shared by the main job and the evaluation.

:func:`progress` is a ``tqdm`` bar on stderr; :class:`PhaseProgress` announces the first (compiling)
step before its bar starts. Below :mod:`daca_jax.evaluation` and :mod:`daca_jax.run`, which both use them.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable


def progress(
    iterable: Iterable[Any] | None = None,
    total: int | None = None,
    desc: str = "",
    disable: bool | None = None,
    initial: int = 0,
):
  """Returns a ``tqdm`` progress bar (on stderr) over ``iterable`` or for ``total`` updates.

  Args:
    iterable: items to iterate; None for a manual bar (``bar.update(n)``).
    total: number of items (defaults to ``len(iterable)`` when available).
    desc: label shown left of the bar.
    disable: passed to tqdm; ``None`` disables the bar when stderr is not a terminal.
    initial: steps already done when the bar starts (not counted in its rate).
  """
  import sys

  from tqdm import tqdm

  # Redirected to a file, a bar redrawn 10 times a second floods the log: redraw every 30 s there.
  interval = 0.1 if sys.stderr.isatty() else 30.0
  return tqdm(iterable, total=total, desc=desc, disable=disable, dynamic_ncols=True, mininterval=interval,
              initial=initial)


class PhaseProgress:
  """A progress bar that never looks stuck: it says what happens before the first step (compilation,
  typically), reports how long that step took, and only then starts the bar, so its rate and ETA are
  those of the compiled steps from the first finished one on.

  Iterate over it like over ``iterable``; ``set_postfix`` is passed to the bar once it exists.

  Args:
    iterable: the steps (a sized iterable, or give ``total``).
    total: number of steps.
    desc: the phase's label ("SFT", "RL diffu_grpo", "eval (before RL)").
    log: where the two status lines go (printed even when the bar is disabled, e.g. in a log file).
    first: what the first step does, e.g. "compiling the SFT step".
    disable: as :func:`progress`.
  """

  def __init__(self, iterable: Iterable[Any], total: int | None = None, desc: str = "", *,
               log: Callable[[str], None] = print, first: str = "compiling", disable: bool | None = None):
    self._iterable, self.desc, self._log, self._first, self._disable = iterable, desc, log, first, disable
    self.total = len(iterable) if total is None and hasattr(iterable, "__len__") else total
    self._bar: Any = None
    self.first_step_s: float | None = None

  def __iter__(self):
    import time

    if self.total == 0:
      return
    it = iter(self._iterable)
    # Timed from before the first item is drawn: a generator's step runs in next(), a range's in
    # the caller's loop body, and either way the first one compiles.
    self._log(f"{self.desc}: {self._first}…")
    t0 = time.perf_counter()
    try:
      item = next(it)
    except StopIteration:
      return
    yield item
    self.first_step_s = time.perf_counter() - t0
    self._log(f"{self.desc}: first step done in {self.first_step_s:.1f} s (compilation included)")
    self._bar = progress(total=self.total, desc=self.desc, disable=self._disable, initial=1)
    try:
      for item in it:
        yield item
        self._bar.update(1)
    finally:
      self._bar.close()

  def set_postfix(self, **kwargs: Any) -> None:
    if self._bar is not None:
      self._bar.set_postfix(**kwargs)
