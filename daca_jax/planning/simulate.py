"""Simulated CPU devices for a plan of a larger machine: set before jax is imported (no jax import here)."""
from __future__ import annotations

import os
import sys
from typing import Sequence

from daca_jax.errors import ConfigError

# The most simulated devices: the largest single slice a plan describes (a TPU v5p pod, 8,960 chips). Past
# it, the CPU client's start-up alone grows faster than linearly (8,192 devices: 30 s; 16,384: minutes and
# GBs of host memory).
MAX_DEVICES = 8960


def simulate_devices(argv: Sequence[str], default: int = 8) -> None:
  """Sets ``XLA_FLAGS`` for ``--num_devices`` (from ``argv``; ``default`` when absent) simulated CPU devices
  and ``JAX_PLATFORMS=cpu`` unless set; must run before jax is imported. Exits 2 with one line
  ``error: --num_devices=... is not allowed: ...`` when the value is not an integer in
  [1, :data:`MAX_DEVICES`] (absl's flags are not parsed yet)."""
  n = str(default)
  for i, a in enumerate(argv):
    if a.startswith("--num_devices="):
      n = a.split("=", 1)[1]
    elif a == "--num_devices" and i + 1 < len(argv):
      n = argv[i + 1]
  if not n.isdigit() or not 1 <= int(n) <= MAX_DEVICES:
    # The scripts' one-line form and exit status for bad input (daca_jax.run.cli_errors, which imports jax).
    allowed = f"an integer in [1, {MAX_DEVICES}] (at most one slice: a TPU v5p pod)"
    print(f"error: {ConfigError('--num_devices', n, allowed)}", file=sys.stderr, flush=True)
    sys.exit(2)
  flags = os.environ.get("XLA_FLAGS", "")
  os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={n}".strip()
  os.environ.setdefault("JAX_PLATFORMS", "cpu")


__all__ = ["MAX_DEVICES", "simulate_devices"]
