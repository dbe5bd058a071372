"""Accelerators: memory, dense bf16 peak and link bandwidth per device (plan targets, benchmark MFU),
and the allocator's peak memory of a live device (:func:`device_peak_bytes`).

Numbers are the vendors' data-sheet figures (dense, without structured sparsity):

* NVIDIA H100 SXM5 80GB: 989 TFLOP/s BF16 Tensor Core (the data sheet's 1,979 is with sparsity),
  80 GB HBM3 at 3.35 TB/s, NVLink 4 900 GB/s per GPU (both directions; 450 GB/s each way).
  (NVIDIA H100 Tensor Core GPU data sheet.)
* NVIDIA H200 SXM 141GB: the H100's compute (989 TFLOP/s dense BF16), 141 GB HBM3e at 4.8 TB/s,
  NVLink 900 GB/s. (NVIDIA H200 Tensor Core GPU data sheet.)
* NVIDIA A100 SXM 80GB: 312 TFLOP/s BF16 (624 with sparsity), 80 GB HBM2e at 2,039 GB/s, NVLink 3
  600 GB/s. (NVIDIA A100 Tensor Core GPU data sheet.)
* NVIDIA GH200: the H100's compute, 96 GB HBM3 at 4 TB/s. (NVIDIA GH200 Grace Hopper Superchip data
  sheet.)
* Google TPU v5p: 459 TFLOP/s BF16 per chip, 95 GB HBM2e at 2,765 GB/s, ICI 4,800 Gbps per chip. A
  "v5p-8" slice has 4 chips (the suffix counts TensorCores, two per chip; JAX sees one device per
  chip). (Cloud TPU documentation, "TPU v5p".)
* Google TPU v5e: 197 TFLOP/s BF16 per chip, 16 GB HBM2 at 819 GB/s, ICI 1,600 Gbps per chip;
  "v5e-8" is 8 chips. (Cloud TPU documentation, "TPU v5e".)
* Google TPU v6e: 918 TFLOP/s BF16, 32 GB HBM at 1,640 GB/s, ICI 3,584 Gbps; TPU v4: 275 TFLOP/s,
  32 GB HBM2 at 1,228 GB/s, ICI 2,400 Gbps. (Cloud TPU documentation, "TPU v6e", "TPU v4".)

Memory is the data sheet's capacity in bytes; what a program can use is less (the allocator, the
runtime and XLA's own reserve), hence the plan's ``usable_fraction``. On GPUs JAX preallocates 75% of
memory unless ``XLA_PYTHON_CLIENT_MEM_FRACTION`` is raised (e.g. to .95).
"""
from __future__ import annotations

import dataclasses

import jax

from daca_jax.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class DeviceSpec:
  """One accelerator kind.

  Attributes:
    name: the key of :data:`DEVICES`.
    hbm_bytes: memory per device (bytes, data sheet).
    peak_bf16_flops: dense bf16 peak FLOP/s per device.
    link_bytes_per_s: one direction of the device's interconnect bandwidth (bytes/s), used for a
      lower bound of the collectives' time.
    hbm_bytes_per_s: memory bandwidth (bytes/s, data sheet), used for a lower bound of a program's
      time from the bytes it reads and writes.
    slice_devices: devices in the slice the name usually denotes ("v5p-8" is 4 chips), for reports.
    device_kinds: lower-case ``jax.Device.device_kind`` strings of this kind (:func:`device_for_kind`).
  """

  name: str
  hbm_bytes: float
  peak_bf16_flops: float
  link_bytes_per_s: float
  hbm_bytes_per_s: float
  slice_devices: int = 8
  device_kinds: tuple[str, ...] = ()


DEVICES: dict[str, DeviceSpec] = {
    "h100": DeviceSpec("h100", 80e9, 989e12, 450e9, 3.35e12, device_kinds=("nvidia h100 80gb hbm3",)),
    "h200": DeviceSpec("h200", 141e9, 989e12, 450e9, 4.8e12, device_kinds=("nvidia h200",)),
    "a100": DeviceSpec("a100", 80e9, 312e12, 300e9, 2.039e12,
                       device_kinds=("nvidia a100-sxm4-80gb", "nvidia a100-sxm4-40gb", "nvidia a100 80gb pcie",
                                     "nvidia a100-pcie-40gb")),
    "gh200": DeviceSpec("gh200", 96e9, 989e12, 450e9, 4.0e12, device_kinds=("nvidia gh200 480gb",)),
    "v5p": DeviceSpec("v5p", 95e9, 459e12, 4800e9 / 8 / 2, 2.765e12, slice_devices=4,
                      device_kinds=("tpu v5", "tpu v5p")),
    "v5e": DeviceSpec("v5e", 16e9, 197e12, 1600e9 / 8 / 2, 819e9, device_kinds=("tpu v5 lite", "tpu v5e")),
    "v6e": DeviceSpec("v6e", 32e9, 918e12, 3584e9 / 8 / 2, 1.64e12, device_kinds=("tpu v6 lite", "tpu v6e")),
    "v4": DeviceSpec("v4", 32e9, 275e12, 2400e9 / 8 / 2, 1.228e12, slice_devices=4, device_kinds=("tpu v4",)),
}


def device_for_kind(device_kind: str) -> DeviceSpec | None:
  """The :class:`DeviceSpec` whose ``device_kinds`` hold ``device_kind`` (case-insensitive), or None."""
  kind = str(device_kind).strip().lower()
  return next((d for d in DEVICES.values() if kind in d.device_kinds), None)


def device_spec(name: str, field: str = "--device") -> DeviceSpec:
  """The :class:`DeviceSpec` called ``name`` (case-insensitive).

  Raises:
    ConfigError: ``name`` is not a key of :data:`DEVICES` (the message lists them).
  """
  key = str(name).strip().lower()
  if key not in DEVICES:
    raise ConfigError(field, name, f"one of {sorted(DEVICES)}")
  return DEVICES[key]


def device_peak_bytes(device: jax.Device | None = None) -> int | None:
  """The allocator's peak bytes in use on ``device`` (default: this process's first device; GPU/TPU), or
  None where it keeps no stats (CPU). Only a process's own devices report memory (in a multi-process run
  ``jax.devices()[0]`` belongs to process 0 and querying it elsewhere raises)."""
  device = device or jax.local_devices()[0]
  stats = device.memory_stats() if hasattr(device, "memory_stats") else None
  if not stats or "peak_bytes_in_use" not in stats:
    return None
  return int(stats["peak_bytes_in_use"])
