"""The process a plan compiles in, set up from the command line before jax is imported (no jax import here).

``--target=<name>`` (:mod:`daca_jax.planning.targets`) sets it up for that compiler: XLA:TPU or XLA:GPU
compiling for compile-only devices, or ``cpu:N`` simulated CPU devices. Without it, ``--num_devices=N``
(default 8) is ``cpu:N``: the plan of earlier versions.
"""
from __future__ import annotations

import re
import sys
from typing import Sequence

from daca_jax.errors import ConfigError
from daca_jax.planning import targets

# The most simulated devices: the largest single slice a plan describes (a TPU v5p pod, 8,960 chips). Past
# it, the CPU client's start-up alone grows faster than linearly (8,192 devices: 30 s; 16,384: minutes and
# GBs of host memory).
MAX_DEVICES = targets.MAX_CPU_DEVICES


def _refuse(error: ConfigError) -> None:
  # The scripts' one-line form and exit status for bad input (daca_jax.run.cli_errors, which imports jax).
  print(f"error: {error}", file=sys.stderr, flush=True)
  sys.exit(2)


def simulate_devices(argv: Sequence[str], default: int = 8) -> targets.Target:
  """Sets the process up for the target ``argv`` names (``--target``, else ``--num_devices`` simulated
  CPU devices, ``default`` when absent) and returns it; must run before jax is imported. Exits 2 with
  one line ``error: --<flag>=... is not allowed: ...`` for an unknown target, a ``--num_devices`` that is
  not an integer in [1, :data:`MAX_DEVICES`] or given with ``--target``, and a target whose compiler is
  not installed (absl's flags are not parsed yet)."""
  argv = list(argv)
  name = targets.target_from_argv(argv)
  n = targets.target_from_argv(argv, "--num_devices")
  if name is not None and n is not None:
    _refuse(ConfigError("--num_devices", n, f"unset with --target={name} (cpu:N is N simulated devices)"))
  n = str(default) if n is None else n
  if name is None and (not re.fullmatch(r"[0-9]+", n) or not 1 <= int(n) <= MAX_DEVICES):
    _refuse(ConfigError("--num_devices", n, f"an integer in [1, {MAX_DEVICES}] (at most one slice: a TPU v5p pod)"))
  try:
    target = targets.target(name if name is not None else f"cpu:{n}")
  except ConfigError as e:
    _refuse(e)
  why = targets.missing_compiler(target)
  if why:
    _refuse(ConfigError("--target", target.name, why.split(": ", 1)[1]))
  targets.prepare_process(target)
  return target


__all__ = ["MAX_DEVICES", "simulate_devices"]
