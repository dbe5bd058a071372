"""Simulated CPU devices for a plan of a larger machine: set before jax is imported (no jax import here)."""
from __future__ import annotations

import os
import sys
from typing import Sequence

from daca_jax.errors import ConfigError


def simulate_devices(argv: Sequence[str], default: int = 8) -> None:
  """Sets ``XLA_FLAGS`` for ``--num_devices`` (from ``argv``; ``default`` when absent) simulated CPU devices
  and ``JAX_PLATFORMS=cpu`` unless set; must run before jax is imported. Exits 2 with one line
  ``error: --num_devices=... is not allowed: ...`` when the value is not a positive integer (absl's
  flags are not parsed yet)."""
  n = str(default)
  for i, a in enumerate(argv):
    if a.startswith("--num_devices="):
      n = a.split("=", 1)[1]
    elif a == "--num_devices" and i + 1 < len(argv):
      n = argv[i + 1]
  if not n.isdigit() or int(n) < 1:
    # The scripts' one-line form and exit status for bad input (daca_jax.run.cli_errors, which imports jax).
    print(f"error: {ConfigError('--num_devices', n, 'a positive integer')}", file=sys.stderr, flush=True)
    sys.exit(2)
  flags = os.environ.get("XLA_FLAGS", "")
  os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={n}".strip()
  os.environ.setdefault("JAX_PLATFORMS", "cpu")


__all__ = ["simulate_devices"]
