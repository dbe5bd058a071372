"""The smoke preset of the main job (``configs/sudoku_tiny.py:smoke``) with field overrides, for tests."""
from configs import sudoku_tiny
from daca_jax.configure import train_config_from_dict
from daca_jax.types import TrainConfig


def smoke(**fields) -> TrainConfig:
  """``smoke(rl__steps=2, sft__learning_rate=1e-2)``: ``section__name=value`` overrides, validated."""
  c = sudoku_tiny.get_config("smoke")
  for dotted, v in fields.items():
    section, name = dotted.split("__")
    c[section][name] = v
  return train_config_from_dict(c)
