"""The accelerators a plan can target: :mod:`daca_jax.hardware` (shared with the benchmarks' MFU)."""
from daca_jax.hardware import DEVICES, DeviceSpec, device_for_kind, device_spec

__all__ = ["DEVICES", "DeviceSpec", "device_for_kind", "device_spec"]
