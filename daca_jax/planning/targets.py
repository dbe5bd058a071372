"""The machines a plan compiles for: a compiler, a topology and a device description, named.

A :class:`Target` names what a run will be compiled for: ``tpu:v5p-8`` is XLA:TPU (libtpu) compiling for
a 2x2x1 slice of four v5p chips, ``gpu:h100x8`` XLA:GPU compiling for eight H100 SXM GPUs on one host,
``cpu:8`` XLA:CPU compiling for eight simulated CPU devices (the only target that needs no extra
install). The TPU and GPU compilers run on a CPU-only machine without the hardware: JAX's
``jax.experimental.topologies.get_topology_desc`` gives *compile-only* devices of the topology, and
``jax.jit(...).lower(...).compile()`` on a mesh of them produces the program the machine would run, with
XLA's memory analysis; nothing can execute. This is MaxText's ``train_compile.py`` approach.

* TPU: ``pip install 'daca_jax[tpu]'`` (libtpu, pinned by ``jax[tpu]`` to the installed jax). The
  topology names are Cloud TPU's (``v5p:2x2x1``); a slice's hosts are ``chips_per_host_bounds`` apart.
  Slice names count TensorCores for v5p (``v5p-8`` is 4 chips) and chips for v5e / v6e.
* GPU: ``pip install 'daca_jax[gpu]'`` (the CUDA 12 plugin and its libraries). The device is described by
  a ``GpuTargetConfig`` in text form committed in ``daca_jax/planning/gpu_specs/`` from the vendors'
  figures. The deviceless compile cannot autotune: :data:`GPU_COMPILE_FLAGS` turn autotuning and Triton
  GEMM fusions off (matrix products go to cuBLAS, as they would with autotuning off on the machine),
  without which the compile stops at "Couldn't find output tile sizes" for a bf16 dot.

Every process that compiles for a TPU or GPU target runs with ``JAX_PLATFORMS=cpu`` (set by
:func:`prepare_process` before jax is imported): the host's own backend is the CPU, and the plugins
skip their hardware checks.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import pathlib
import re
from typing import Any

from daca_jax.errors import ConfigError

GPU_SPECS = pathlib.Path(__file__).resolve().parent / "gpu_specs"
# XLA:GPU's deviceless compile: no autotuning (nothing to time kernels on), cuBLAS for matrix products.
GPU_COMPILE_FLAGS = ("--xla_gpu_enable_triton_gemm=false", "--xla_gpu_autotune_level=0")
# Set for libtpu's start-up on a host that is not a TPU VM (it otherwise logs that it cannot find them), and
# to let several processes compile at once (libtpu otherwise holds a machine-wide lock file, and a second
# process stops with "Internal error when accessing libtpu multi-process lockfile").
_TPU_ENV = {"TPU_ACCELERATOR_TYPE": "v5p-8", "TPU_WORKER_HOSTNAMES": "localhost", "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}


@dataclasses.dataclass(frozen=True)
class Target:
  """One machine a run can be compiled for.

  Attributes:
    name: ``<compiler>:<slice>`` as ``--target`` takes it (``tpu:v5p-8``, ``gpu:h100x8``, ``cpu:8``).
    compiler: ``tpu``, ``gpu`` or ``cpu`` (XLA:TPU, XLA:GPU, XLA:CPU).
    device: the :data:`daca_jax.hardware.DEVICES` kind whose bandwidths and peak time the plan uses.
    num_devices: devices (chips, GPUs) of the slice: the mesh.
    hosts: processes of the slice (hosts), each with ``num_devices / hosts`` devices.
    topology: TPU: Cloud TPU's topology name (``v5p:2x2x1``); GPU: ``<slices>x<hosts>x<devices per
      host>``; CPU: "".
    chips_per_host: TPU: the host bounds in chips (``(2, 2, 1)``: 4 chips a host).
    gpu_spec: GPU: the file in :data:`GPU_SPECS` describing the device.
    source: where the slice's shape comes from.
  """

  name: str
  compiler: str
  device: str
  num_devices: int
  hosts: int = 1
  topology: str = ""
  chips_per_host: tuple[int, int, int] = (1, 1, 1)
  gpu_spec: str = ""
  source: str = ""

  @property
  def simulated(self) -> bool:
    """True for XLA:CPU's simulated devices (today's CPU plan), False for a compile-only topology."""
    return self.compiler == "cpu"


_CLOUD_TPU = "Cloud TPU documentation, 'TPU v5p' / 'TPU v5e' / 'TPU v6e' (topologies, chips per host)"
TARGETS: dict[str, Target] = {t.name: t for t in (
    Target("tpu:v5p-8", "tpu", "v5p", 4, 1, "v5p:2x2x1", (2, 2, 1), source=_CLOUD_TPU),
    # v5p slice names count TensorCores: v5p-64 is 32 chips on 8 hosts of 4.
    Target("tpu:v5p-32", "tpu", "v5p", 16, 4, "v5p:2x2x4", (2, 2, 1), source=_CLOUD_TPU),
    Target("tpu:v5p-64", "tpu", "v5p", 32, 8, "v5p:2x4x4", (2, 2, 1), source=_CLOUD_TPU),
    Target("tpu:v5p-128", "tpu", "v5p", 64, 16, "v5p:4x4x4", (2, 2, 1), source=_CLOUD_TPU),
    Target("tpu:v5e-8", "tpu", "v5e", 8, 1, "v5e:2x4", (2, 4, 1), source=_CLOUD_TPU),
    Target("tpu:v5e-256", "tpu", "v5e", 256, 64, "v5e:16x16", (2, 2, 1), source=_CLOUD_TPU),
    Target("tpu:v6e-8", "tpu", "v6e", 8, 1, "v6e:2x4", (2, 4, 1), source=_CLOUD_TPU),
)}
_CPU = re.compile(r"cpu:([0-9]+)")
_GPU = re.compile(r"gpu:([a-z0-9]+)x([0-9]+)")
# GPU kinds a target can name, with their device description; a node holds 8 of them.
GPU_KINDS = {"h100": ("h100_sxm.txtpb", "HGX H100"), "h200": ("h200_sxm.txtpb", "HGX H200"),
             "a100": ("a100_sxm_80.txtpb", "HGX A100 80GB")}
GPUS_PER_NODE = 8
MAX_GPUS = 1024
# The most simulated CPU devices (daca_jax.planning.simulate.MAX_DEVICES: a v5p pod).
MAX_CPU_DEVICES = 8960


def allowed() -> str:
  return (f"one of {sorted(TARGETS)}, gpu:<{'|'.join(GPU_KINDS)}>xN (N GPUs: 1 to {GPUS_PER_NODE} on one node, "
          f"or a multiple of {GPUS_PER_NODE} up to {MAX_GPUS}, {GPUS_PER_NODE} a node) or cpu:N (N simulated CPU "
          f"devices, 1 <= N <= {MAX_CPU_DEVICES})")


def _gpu(kind: str, n: int) -> Target | None:
  if kind not in GPU_KINDS or not (1 <= n <= GPUS_PER_NODE or (n % GPUS_PER_NODE == 0 and n <= MAX_GPUS)):
    return None
  spec, node = GPU_KINDS[kind]
  hosts = max(n // GPUS_PER_NODE, 1)
  return Target(f"gpu:{kind}x{n}", "gpu", kind, n, hosts, f"1x{hosts}x{n // hosts}", gpu_spec=spec,
                source=f"{hosts} {node} node(s)" if n >= GPUS_PER_NODE else f"{n} GPU(s) of an {node} node")


def target(name: str, field: str = "--target", device: str = "h100") -> Target:
  """The :class:`Target` called ``name``; ``cpu:N`` is planned for device kind ``device``.

  Raises:
    ConfigError: an unknown name or an N out of range (the message lists the targets).
  """
  key = str(name).strip().lower()
  if key in TARGETS:
    return TARGETS[key]
  m = _CPU.fullmatch(key)
  if m and 1 <= int(m.group(1)) <= MAX_CPU_DEVICES:
    return Target(key, "cpu", device, int(m.group(1)), source="XLA:CPU's simulated devices")
  m = _GPU.fullmatch(key)
  found = _gpu(m.group(1), int(m.group(2))) if m else None
  if found is not None:
    return found
  raise ConfigError(field, name, allowed())


def target_from_argv(argv: list[str], flag: str = "--target") -> str | None:
  """The value of ``flag`` in ``argv`` as absl will read it (``--target=X``, ``--target X``, one dash or
  two; the last one given wins), None when absent: read before absl parses the flags, to set the process
  up before jax is imported (the entry points check afterwards that absl read the same value)."""
  name = flag.lstrip("-")
  found = None
  for i, a in enumerate(argv):
    for dashes in ("--", "-"):
      if a.startswith(f"{dashes}{name}="):
        found = a.split("=", 1)[1]
      elif a == f"{dashes}{name}" and i + 1 < len(argv):
        found = argv[i + 1]
  return found


PROCESS_TARGET = "DACA_JAX_PROCESS_TARGET"  # the target the process was set up for (prepare_process)


def check_process(name: str, field: str = "--target") -> None:
  """Raises ConfigError unless the process was set up for target ``name`` (a ``--target`` that the setup
  before jax's import did not see, e.g. one in a ``--flagfile``)."""
  was = os.environ.get(PROCESS_TARGET)
  if was is None:
    raise ConfigError(field, name, "a --target given on the command line (this process was not set up for a "
                      "target before its flags were parsed, e.g. one read from a --flagfile)")
  if target(name, field).name != was:
    raise ConfigError(field, name, f"{was}, the target this process was set up for before its flags were parsed "
                      "(give --target once, on the command line)")


def prepare_process(t: Target) -> None:
  """Sets the environment a compile for ``t`` needs; must run before jax is imported: the host backend
  is the CPU (``JAX_PLATFORMS=cpu``), ``cpu:N`` simulates N devices, ``gpu:*`` adds
  :data:`GPU_COMPILE_FLAGS` to ``XLA_FLAGS`` and ``tpu:*`` quiets libtpu's start-up."""
  flags = os.environ.get("XLA_FLAGS", "")
  given = {f.split("=", 1)[0] for f in flags.split()}
  if t.compiler == "cpu":
    flags = f"{flags} --xla_force_host_platform_device_count={t.num_devices}"
  elif t.compiler == "gpu":
    flags = " ".join([flags, *[f for f in GPU_COMPILE_FLAGS if f.split("=", 1)[0] not in given]])
  else:
    for k, v in _TPU_ENV.items():
      os.environ.setdefault(k, v)
  os.environ["XLA_FLAGS"] = flags.strip()
  os.environ["JAX_PLATFORMS"] = "cpu"  # every target compiles from the host's CPU backend
  os.environ[PROCESS_TARGET] = t.name


def missing_compiler(t: Target) -> str | None:
  """Why ``t``'s compiler cannot run in this environment (the package to install), or None."""
  import importlib.util

  if t.compiler == "tpu" and importlib.util.find_spec("libtpu") is None:
    return f"--target={t.name} needs XLA:TPU: pip install -e '.[tpu]' (libtpu)"
  if t.compiler == "gpu" and importlib.util.find_spec("jax_plugins.xla_cuda12") is None:
    return f"--target={t.name} needs XLA:GPU: pip install -e '.[gpu]' (the CUDA 12 plugin)"
  return None


@functools.lru_cache(maxsize=None)
def devices(t: Target) -> tuple[Any, ...]:
  """The devices of ``t``: compile-only TPU or GPU devices of its topology, or the process's simulated
  CPU devices (which must number ``t.num_devices``).

  Raises:
    ConfigError: the compiler is not installed, or the process does not have ``t``'s CPU devices.
  """
  import jax

  why = missing_compiler(t)
  if why:
    raise ConfigError("--target", t.name, why)
  if t.compiler == "cpu":
    found = jax.devices("cpu")
    if len(found) != t.num_devices:
      raise ConfigError("--target", t.name, f"the {len(found)} CPU devices this process has (set "
                        "--xla_force_host_platform_device_count before jax is imported: prepare_process)")
    return tuple(found)
  from jax.experimental import topologies

  if t.compiler == "tpu":
    for k, v in _TPU_ENV.items():  # read when libtpu starts, at the first topology (not at jax's import)
      os.environ.setdefault(k, v)
    topo = topologies.get_topology_desc(platform="tpu", topology_name=t.topology, chip_config_name="default",
                                        chips_per_host_bounds=t.chips_per_host, num_slices=1)
  else:
    spec = (GPU_SPECS / t.gpu_spec).read_text()
    topo = topologies.get_topology_desc(platform="cuda", target_config=spec, topology=t.topology)
  found = tuple(topo.devices)
  if len(found) != t.num_devices:  # a wrong table entry, not user input
    raise RuntimeError(f"{t.name}: the topology has {len(found)} devices, the table says {t.num_devices}")
  return found


def describe(t: Target) -> dict[str, Any]:
  """What a plan record says about the compiler and machine: target name, compiler, its version, the
  device kind the compiler reports, the topology, devices and hosts."""
  import jax
  import jaxlib

  devs = devices(t)
  version = f"jax {jax.__version__}, jaxlib {jaxlib.__version__}"
  if t.compiler == "tpu":
    from importlib.metadata import version as pkg_version

    version += f", libtpu {pkg_version('libtpu')}"
  elif t.compiler == "gpu":
    from importlib.metadata import version as pkg_version

    version += f", jax-cuda12-plugin {pkg_version('jax-cuda12-plugin')}"
  return {"target": t.name, "compiler": {"tpu": "XLA:TPU", "gpu": "XLA:GPU", "cpu": "XLA:CPU"}[t.compiler],
          "compiler_version": version, "device_kind": devs[0].device_kind, "topology": t.topology or
          f"{t.num_devices} simulated devices", "num_devices": t.num_devices, "hosts": t.hosts,
          "device": t.device, "compile_only": not t.simulated}


# The GPU nodes a table names (any gpu:<kind>xN is a target: :func:`target`).
TARGETS.update({t.name: t for t in (_gpu("h100", 8), _gpu("h200", 8), _gpu("a100", 8))})

__all__ = ["GPU_COMPILE_FLAGS", "GPU_SPECS", "PROCESS_TARGET", "TARGETS", "Target", "allowed", "check_process",
           "describe", "devices",
           "missing_compiler", "prepare_process", "target", "target_from_argv"]
