"""What isolation this machine offers sandboxed programs: user/network/PID/mount namespaces (``unshare``),
Landlock's ABI, a cgroup-v1 ``pids`` hierarchy. Each probe runs once per process (cached) and restricts
nothing in this process. :mod:`daca_jax.tasks.sandbox.runner` re-exports the public probes.
"""
from __future__ import annotations

import ctypes
import functools
import pathlib
import shutil
import subprocess
import tempfile

# unshare's flags for a sandbox: fresh user (mapped to root inside), network, PID (with a fork so the
# launcher is PID 1, killed with its children), mount and IPC namespaces.
UNSHARE_ARGS = ("--user", "--map-root-user", "--net", "--pid", "--fork", "--kill-child", "--mount",
                "--ipc")
# The whole environment of a sandboxed process (HOME and TMPDIR are added per run).
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}


@functools.lru_cache(maxsize=None)
def namespaces_available() -> bool:
  """Whether ``unshare`` can create user, network, PID and mount namespaces here (checked once)."""
  unshare = shutil.which("unshare")
  if unshare is None:
    return False
  try:
    r = subprocess.run([unshare, *UNSHARE_ARGS, "true"], capture_output=True, timeout=10,
                       env=ENV, check=False)
  except (OSError, subprocess.SubprocessError):
    return False
  return r.returncode == 0


@functools.lru_cache(maxsize=None)
def landlock_abi() -> int:
  """The kernel's Landlock ABI version, 0 when Landlock is unavailable (checked once, without
  restricting this process)."""
  try:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    # landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION) returns the ABI version.
    return max(0, int(libc.syscall(444, None, 0, 1)))
  except (OSError, AttributeError):
    return 0


@functools.lru_cache(maxsize=None)
def pids_cgroup_base() -> pathlib.Path | None:
  """This process's cgroup in a cgroup-v1 ``pids`` hierarchy, if we may create children in it."""
  try:
    own = next(line.split(":", 2)[2].strip() for line in open("/proc/self/cgroup")
               if "pids" in line.split(":", 2)[1].split(","))
    for line in open("/proc/self/mountinfo"):
      fields, _, tail = line.partition(" - ")
      fstype, _, options = (tail.split() + ["", "", ""])[:3]
      if fstype == "cgroup" and "pids" in options.split(","):
        base = pathlib.Path(fields.split()[4]) / own.lstrip("/")
        probe = pathlib.Path(tempfile.mkdtemp(prefix="daca_sandbox_probe_", dir=base))
        ok = (probe / "pids.max").exists()
        probe.rmdir()
        return base if ok else None
  except (OSError, StopIteration, IndexError):
    pass
  return None
