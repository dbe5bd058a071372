"""daca_jax.registry.registry_from: each kind's registry from its one explicit list."""
import pytest

from daca_jax.credit import ASSIGNERS, CREDIT
from daca_jax.errors import ConfigError
from daca_jax.likelihood import ESTIMATORS, LIKELIHOOD, PASSES, PER_PASS
from daca_jax.registry import registry_from
from daca_jax.rl.methods import METHODS, OBJECTIVES


def test_registry_from_keeps_order_aliases_and_refuses_duplicates():
  reg = registry_from("toy", "rl.toy", [("b", 2), ("a", 1)], aliases=[("c", "a")])
  assert reg.get("a") == 1 and reg.get("c") == 1 and reg.aliases() == {"c": "a"}
  with pytest.raises(ConfigError, match=r"rl\.toy='z' is not allowed: expected one of \['a', 'b', 'c'\]"):
    reg.get("z")
  with pytest.raises(ValueError, match="already registered"):
    registry_from("toy", "rl.toy", [("a", 1), ("a", 2)])
  with pytest.raises(ValueError, match="not registered"):
    registry_from("toy", "rl.toy", [("a", 1)], aliases=[("c", "nope")])


def test_each_registry_is_exactly_its_list():
  """Nothing enters a registry but through its list (no registration on import)."""
  assert sorted(CREDIT.names()) == sorted(fn.credit_name for fn in ASSIGNERS)
  assert sorted(LIKELIHOOD.names()) == sorted(fn.estimator_name for fn in ESTIMATORS)
  assert sorted(PASSES) == sorted(fn.estimator_name for fn in PER_PASS) and set(PASSES) <= set(LIKELIHOOD.names())
  assert sorted(OBJECTIVES.names()) == sorted([m.name for m in METHODS] + [a for m in METHODS for a in m.aliases])
