"""daca_jax.run.host: JAX on the CPU only where the host shows no accelerator and the user chose nothing."""
import os
import pathlib

import pytest

from daca_jax.run import host


def _bus(tmp_path: pathlib.Path, vendors: list[str]) -> pathlib.Path:
  bus = tmp_path / "devices"
  bus.mkdir()
  for i, v in enumerate(vendors):
    (bus / f"0000:00:0{i}.0").mkdir()
    (bus / f"0000:00:0{i}.0" / "vendor").write_text(v + "\n")
  return bus


@pytest.mark.parametrize("vendors, nodes, expected", [
    (["0x8086", "0x1af4"], (), False),  # a CPU VM: host bridge and virtio only
    (["0x8086", "0x1AE0"], (), True),  # a TPU VM (Google's vendor id, any case)
    (["0x8086", "0x10de"], (), True),  # an NVIDIA GPU
    ([], (), None),  # nothing listed: cannot tell
    (["0x8086"], ("EXISTS",), True),  # /dev/nvidia0 in a container that hides the bus
])
def test_has_accelerator_reads_the_pci_vendors_and_device_nodes(tmp_path, vendors, nodes, expected):
  nodes = tuple(str(tmp_path) if n == "EXISTS" else n for n in nodes)
  assert host.has_accelerator(_bus(tmp_path, vendors), nodes) is expected


def test_cpu_is_chosen_only_without_an_accelerator_or_a_users_choice(tmp_path, monkeypatch):
  import jax

  (tmp_path / "a").mkdir()
  (tmp_path / "b").mkdir()
  cpu_bus, gpu_bus = _bus(tmp_path / "a", ["0x8086"]), _bus(tmp_path / "b", ["0x10de"])
  updates = []
  monkeypatch.setattr(jax.config, "update", lambda name, value: updates.append((name, value)))
  monkeypatch.setenv("JAX_PLATFORMS", "cuda")
  assert not host.use_cpu_without_accelerator(cpu_bus, ())  # the user's choice stands
  monkeypatch.delenv("JAX_PLATFORMS")
  assert not host.use_cpu_without_accelerator(gpu_bus, ()) and "JAX_PLATFORMS" not in os.environ
  assert not host.use_cpu_without_accelerator(tmp_path / "no_bus", ())  # unreadable bus: JAX decides
  assert host.use_cpu_without_accelerator(cpu_bus, ())
  assert os.environ["JAX_PLATFORMS"] == "cpu" and updates == [("jax_platforms", "cpu")]
