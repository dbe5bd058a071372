"""Peak host memory of the checkpoint loader (:func:`daca_jax.models.checkpoint_loader.load_params`),
measured in a fresh process.

The child process starts JAX (CPU devices, optionally several simulated ones for FSDP), resets its
resident-set high-water mark to its current resident set (Linux: ``5`` into ``/proc/self/clear_refs``, so
that JAX's own start-up peak does not hide the load's), loads the checkpoint into the devices, waits for
the arrays, and reads the high-water mark (``VmHWM``). On CPU the "devices" are host
memory, so the loaded model itself counts: the difference ``peak - before`` is the model plus the
loader's transient buffers, and ``peak - before - model`` the loader's own overhead (what an
accelerator run's host would see beyond nothing). Run by ``experiments/loader_memory.py``.
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from typing import Any


def measure(folder: str | pathlib.Path, *, param_dtype: str = "bfloat16", fsdp: int = 1,
            timeout: float = 1800) -> dict[str, Any]:
  """Loads checkpoint ``folder`` in a child process and returns its memory record.

  Args:
    folder: a LLaDA / Dream checkpoint folder.
    param_dtype: the dtype the parameters are held in.
    fsdp: > 1: that many simulated CPU devices, parameters FSDP-sharded over them.
  Returns:
    ``{"checkpoint_bytes", "model_bytes", "rss_before", "rss_peak", "seconds", "added_ratio",
    "overhead_ratio"}``: bytes of tensor data in the files, of the loaded parameters, the child's
    resident set before loading and its high-water mark during it (bytes), the load time, and
    ``(peak - before) / checkpoint_bytes`` and ``(peak - before - model_bytes) / checkpoint_bytes``.
  Raises:
    RuntimeError: the child failed (its stderr's last lines), e.g. not on Linux (no /proc).
  """
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  if fsdp > 1:
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={fsdp}"
  repo = str(pathlib.Path(__file__).resolve().parents[2])
  env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, env.get("PYTHONPATH", "")) if p)
  proc = subprocess.run([sys.executable, "-m", "daca_jax.measure.loader_memory", str(folder), param_dtype, str(fsdp)],
                        env=env, capture_output=True, text=True, timeout=timeout)
  if proc.returncode != 0:
    raise RuntimeError(f"loader memory child failed: {proc.stderr[-2000:]}")
  out = json.loads(proc.stdout.strip().splitlines()[-1])
  added = out["rss_peak"] - out["rss_before"]
  out["added_ratio"] = added / out["checkpoint_bytes"]
  out["overhead_ratio"] = (added - out["model_bytes"]) / out["checkpoint_bytes"]
  return out


def _rss() -> tuple[int, int]:
  """(current resident set, its high-water mark) of this process in bytes, from /proc/self/status."""
  fields = dict(line.split(":", 1) for line in pathlib.Path("/proc/self/status").read_text().splitlines() if ":" in line)
  return tuple(int(fields[k].split()[0]) * 1024 for k in ("VmRSS", "VmHWM"))


def _child(folder: str, param_dtype: str, fsdp: int) -> None:
  import time

  import jax
  from jax.sharding import NamedSharding

  from daca_jax import parallel
  from daca_jax.models import checkpoint_loader
  from daca_jax.models.hf_import import checkpoint_config
  from daca_jax.config.parallel import ParallelConfig

  import numpy as np

  jax.block_until_ready(jax.device_put(np.zeros(8)))  # the runtime's first transfer sets up its allocator
  files = checkpoint_loader.open_checkpoint(folder)
  cfg, family, _ = checkpoint_config(files, param_dtype=param_dtype)
  placement = None
  if fsdp > 1:
    mesh = parallel.make_mesh(ParallelConfig(strategy="fsdp", fsdp=fsdp))
    placement = lambda shape: NamedSharding(mesh, parallel.fsdp_spec(shape, fsdp))
  pathlib.Path("/proc/self/clear_refs").write_text("5")  # the high-water mark restarts from here
  before = _rss()[0]
  t0 = time.perf_counter()
  _, params = checkpoint_loader.load_params(files, cfg, family, placement)
  jax.block_until_ready(params)
  seconds = time.perf_counter() - t0
  model = sum(int(x.size) * x.dtype.itemsize for x in jax.tree.leaves(params))
  print(json.dumps({"checkpoint_bytes": files.nbytes, "model_bytes": model, "rss_before": before,
                    "rss_peak": _rss()[1], "seconds": seconds, "devices": jax.device_count()}))


if __name__ == "__main__":
  _child(sys.argv[1], sys.argv[2], int(sys.argv[3]))
