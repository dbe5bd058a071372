"""Which JAX platform a script runs on when the user has not chosen one.

With ``jax[tpu]`` or ``jax[cuda12]`` installed (the ``[tpu]`` / ``[gpu]`` extras, which
``experiments/plan.py --target`` needs) on a host without that hardware, JAX's first backend start
tries each plugin: the CUDA plugin prints a ``cuInit`` traceback and libtpu a screen of start-up
errors before JAX falls back to the CPU, once per process (every cell of ``reproduce.py --jobs``).
:func:`use_cpu_without_accelerator` makes that fallback explicit instead: no TPU and no GPU on the
host's PCI bus and no ``JAX_PLATFORMS`` set → ``JAX_PLATFORMS=cpu``. The bus is read the way JAX's
own TPU detection reads it (``/sys/bus/pci/devices/*/vendor``); where it cannot be read (not Linux),
nothing changes.
"""
from __future__ import annotations

import os
import pathlib
import sys

PCI_DEVICES = pathlib.Path("/sys/bus/pci/devices")
# PCI vendor ids of accelerators JAX has plugins for: Google (TPU), NVIDIA (CUDA), AMD graphics (ROCm).
ACCELERATOR_VENDORS = frozenset({"0x1ae0", "0x10de", "0x1002"})
# Device nodes that mean an accelerator even where sysfs hides the bus (some containers).
# (WSL2 exposes its GPU as /dev/dxg behind a Microsoft bus; AWS Trainium as /dev/neuron0; Intel GPUs as DRI
# render nodes, which laptops' integrated graphics have too: such a host is left to JAX.)
ACCELERATOR_NODES = ("/dev/accel0", "/dev/nvidia0", "/dev/nvidiactl", "/dev/dxg", "/dev/kfd", "/dev/vfio/0",
                     "/dev/neuron0", "/dev/dri/renderD128")


def pci_vendors(devices: pathlib.Path = PCI_DEVICES) -> frozenset[str] | None:
  """The PCI vendor ids on the host's bus (``"0x10de"``, ...), or None where the bus cannot be read."""
  try:
    return frozenset(p.read_text(encoding="ascii").strip().lower() for p in devices.glob("*/vendor"))
  except OSError:
    return None


def has_accelerator(devices: pathlib.Path = PCI_DEVICES, nodes: tuple[str, ...] = ACCELERATOR_NODES) -> bool | None:
  """True when the host shows a TPU or GPU (a PCI vendor of :data:`ACCELERATOR_VENDORS` or a device node of
  :data:`ACCELERATOR_NODES`), False when its PCI bus lists devices and none is one, None when it cannot tell."""
  if any(os.path.exists(n) for n in nodes):
    return True
  vendors = pci_vendors(devices)
  if not vendors:
    return None
  return bool(vendors & ACCELERATOR_VENDORS)


def use_cpu_without_accelerator(devices: pathlib.Path = PCI_DEVICES,
                                nodes: tuple[str, ...] = ACCELERATOR_NODES) -> bool:
  """Sets ``JAX_PLATFORMS=cpu`` (the environment, inherited by worker processes, and JAX's config when JAX
  is imported already: it takes effect if no backend has started) when the user set no ``JAX_PLATFORMS``
  and :func:`has_accelerator` is False. Returns whether it did."""
  if os.environ.get("JAX_PLATFORMS") or has_accelerator(devices, nodes) is not False:
    return False
  os.environ["JAX_PLATFORMS"] = "cpu"
  if "jax" in sys.modules:
    sys.modules["jax"].config.update("jax_platforms", "cpu")
  return True


__all__ = ["ACCELERATOR_NODES", "ACCELERATOR_VENDORS", "has_accelerator", "pci_vendors", "use_cpu_without_accelerator"]
