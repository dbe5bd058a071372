"""The parallel section: ``ParallelConfig`` (the device mesh and update strategy of :mod:`daca_jax.parallel`)."""
from __future__ import annotations

import dataclasses

from daca_jax.config.checks import _check_fields, _one_of, _positive
from daca_jax.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class ParallelConfig:
  """Device mesh and update strategy (:mod:`daca_jax.parallel`).

  The mesh has axes ``('data', 'fsdp', 'tensor')``; its shape must multiply to the device count.

  Attributes:
    strategy: "none" (plain ``jax.jit`` on the default device), "pmap" (parameters replicated,
      the batch split over all ``data x fsdp`` devices, per-device gradients averaged with ``pmean``)
      or "fsdp" (``jax.jit`` with parameters and optimizer state sharded over 'fsdp', the batch over
      ``('data', 'fsdp')``).
    data: size of the 'data' axis; 0 means every device not used by ``fsdp * tensor``.
    fsdp: size of the 'fsdp' axis.
    tensor: size of the 'tensor' axis; must be 1 (no tensor-parallel layers yet, the axis is kept so
      that meshes and shardings keep their names when they come).
    distributed: call ``jax.distributed.initialize()`` before the first device query (multi-host);
      also done when the environment names a coordinator (``JAX_COORDINATOR_ADDRESS``).
    rollout_weights: how an FSDP rollout reads the sharded weights. "gathered": all-gathered once
      per rollout call and held for its S model calls (the whole model resident per device while
      sampling); "sharded": each layer's weights all-gathered at every model call (S x the
      traffic, nothing extra resident); "auto": "gathered" when the parameters take at most
      :data:`daca_jax.parallel.ROLLOUT_GATHER_FRACTION` of a device's memory (or the device does not
      report its memory, as CPUs), else "sharded". Ignored by the other strategies.
  """

  strategy: str = "none"
  data: int = 0
  fsdp: int = 1
  tensor: int = 1
  distributed: bool = False
  rollout_weights: str = "auto"

  def validate(self, prefix: str = "parallel") -> "ParallelConfig":
    _check_fields(prefix, self)
    _one_of(prefix, self, "strategy", ("none", "pmap", "fsdp"))
    _one_of(prefix, self, "rollout_weights", ("auto", "gathered", "sharded"))
    if not isinstance(self.data, int) or isinstance(self.data, bool) or self.data < 0:
      raise ConfigError(f"{prefix}.data", self.data, "an integer >= 0 (0: all remaining devices)")
    _positive(prefix, self, "fsdp", "tensor")
    if self.tensor != 1:
      raise ConfigError(f"{prefix}.tensor", self.tensor, "1 (tensor parallelism is not implemented)")
    if not isinstance(self.distributed, bool):
      raise ConfigError(f"{prefix}.distributed", self.distributed, "True or False")
    return self
