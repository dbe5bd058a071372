"""daca_jax.config.configure: every name a registry resolves is checked, with the field in the error."""
import dataclasses

import pytest

from daca_jax.config import configure
from daca_jax.errors import ConfigError
from daca_jax.config.train import TrainConfig


@pytest.mark.parametrize("section,name,registry", configure.NAMED_FIELDS, ids=lambda x: getattr(x, "kind", x))
def test_every_named_field_is_checked(section, name, registry):
  assert registry.field == f"{section}.{name}"
  cfg = TrainConfig()

  def replaced(obj, path):  # obj with path[-1] of the (sub-)section path set to "no_such"
    head, *rest = path
    return dataclasses.replace(obj, **{head: replaced(getattr(obj, head), rest) if rest else "no_such"})

  bad = replaced(cfg, section.split(".") + [name])
  bad.validate()  # values and shapes are fine: only the name is wrong
  with pytest.raises(ConfigError, match=rf"{section}\.{name}='no_such' is not allowed: expected one of "
                                        rf"\[.*'{sorted(registry.names())[0]}'"):
    configure.validate(bad)
  assert configure.validate(cfg) is cfg


@pytest.mark.parametrize("d, field", [({"rl": 5}, "rl"), ({"rl": [1]}, "rl"), ({"credit": {"dps": 3}}, "credit.dps"),
                                      ({"likelihood": {"stepmerge": "x"}}, "likelihood.stepmerge")])
def test_a_section_that_is_not_a_mapping_is_a_config_error(d, field):
  # A saved config.json of the wrong shape (valid JSON) was a TypeError from deep in _build.
  with pytest.raises(ConfigError, match=rf"^{field}=.* expected a section of fields"):
    configure.train_config_from_dict(d)
