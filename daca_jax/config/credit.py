"""The credit section: ``CreditConfig``, one sub-section per assigner of :mod:`daca_jax.credit`
(``credit.dps``, ``credit.dtca``, ...), each defined in its assigner's module.
"""
from __future__ import annotations

import dataclasses

from daca_jax.config.checks import _check_sections
from daca_jax.credit.contrast import ContrastConfig
from daca_jax.credit.delta import DeltaConfig
from daca_jax.credit.dps import DPSConfig
from daca_jax.credit.dtca import DTCAConfig
from daca_jax.credit.position_value import PositionValueConfig
from daca_jax.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class CreditConfig:
  """Options of the credit assigners, one section per assigner. The assigner is chosen by ``rl.credit``
  and receives only the sections it declares (DPS: ``dps``; DTCA, built on DPS's scores: ``dtca``
  and ``dps``; :class:`daca_jax.credit.CreditAssigner`).

  Attributes:
    dps: :class:`DPSConfig` (``credit.dps.*``).
    dtca: :class:`DTCAConfig` (``credit.dtca.*``).
    delta: :class:`DeltaConfig` (``credit.delta.*``).
    contrast: :class:`ContrastConfig` (``credit.contrast.*``).
    position_value: :class:`PositionValueConfig` (``credit.position_value.*``).
    drop_agreed: multiply every assigner's weights by the group-agreement mask: a token that all G
      rollouts of its group committed identically at that position gets weight 0 (its advantages sum
      to zero over the group; see :mod:`daca_jax.credit.agreement`).
  """

  dps: DPSConfig = DPSConfig()
  dtca: DTCAConfig = DTCAConfig()
  delta: DeltaConfig = DeltaConfig()
  contrast: ContrastConfig = ContrastConfig()
  position_value: PositionValueConfig = PositionValueConfig()
  drop_agreed: bool = False

  def validate(self, prefix: str = "credit") -> "CreditConfig":
    _check_sections(prefix, self)
    if not isinstance(self.drop_agreed, bool):
      raise ConfigError(f"{prefix}.drop_agreed", self.drop_agreed, "True or False")
    return self
