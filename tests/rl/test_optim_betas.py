"""rl.adam_b1 / rl.adam_b2 reach AdamW (d1 trains with betas (0.9, 0.99))."""
import jax.numpy as jnp
import numpy as np
import optax

from daca_jax.rl.optim import make_optimizer


def _two_updates(opt):
  params = {"w": jnp.array([1.0, -2.0, 3.0])}
  state = opt.init(params)
  out = []
  for g in (jnp.array([0.1, -0.3, 0.2]), jnp.array([-0.2, 0.1, 0.4])):
    upd, state = opt.update({"w": g}, state, params)
    out.append(np.asarray(upd["w"]))
  return out


def test_betas_are_adamws():
  ours, _ = make_optimizer(1e-3, 0, 0.1, 0.0, b1=0.8, b2=0.99)
  reference = optax.adamw(1e-3, b1=0.8, b2=0.99, eps=1e-8, weight_decay=0.1)
  for a, b in zip(_two_updates(ours), _two_updates(reference)):
    np.testing.assert_allclose(a, b, rtol=1e-6)
  default, _ = make_optimizer(1e-3, 0, 0.1, 0.0)
  assert not np.allclose(_two_updates(default)[1], _two_updates(ours)[1])  # the betas changed something


def test_new_fields_refuse_bad_values_naming_the_field():
  import pytest
  from daca_jax.errors import ConfigError
  from tests.smoke_config import smoke
  for field, value in (("rl__adam_b2", 1.0), ("rl__adam_b1", -0.1), ("rl__grad_accum", 0),
                       ("rl__rollout_batch", -1), ("model__lora_dropout", 1.0)):
    with pytest.raises(ConfigError, match=field.replace("__", r"\.")):
      smoke(**{field: value})
  assert smoke(rl__adam_b2=0.99, rl__grad_accum=2, model__lora_rank=4,
               model__lora_dropout=0.05).rl.adam_b2 == 0.99
