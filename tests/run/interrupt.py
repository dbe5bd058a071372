"""Stopping an in-process run the way a preemption does: a SIGTERM once RL iteration ``k`` is logged.

The run then saves iteration ``k``'s checkpoint and raises :class:`~daca_jax.run.preemption.Preempted`;
rerunning the same config resumes it. (Shortening ``rl.steps`` instead would change the run itself
wherever the learning-rate schedule depends on its length.)
"""
import os
import signal

import pytest

from daca_jax.run import preemption
from daca_jax.run.metrics import MetricsWriter


def run_preempted_after(k, run, *args, **kwargs):
  """Calls ``run(*args, **kwargs)`` (e.g. ``pipeline.run_main_job``), SIGTERMs this process right after
  RL iteration ``k``'s metrics line, and returns the :class:`Preempted` it stopped with."""
  real = MetricsWriter.write

  def write(self, step, metrics):
    real(self, step, metrics)
    if os.path.basename(self.path) == "metrics.jsonl" and step == k:
      os.kill(os.getpid(), signal.SIGTERM)

  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(MetricsWriter, "write", write)
    with preemption.watching(), pytest.raises(preemption.Preempted) as stopped:
      run(*args, **kwargs)
  assert (stopped.value.phase, stopped.value.step) == ("RL", k)
  return stopped.value
