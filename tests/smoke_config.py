"""The smoke preset of the main job (``configs/sudoku_tiny.py:smoke``) with field overrides, for tests."""
from configs import sudoku_tiny
from daca_jax.configure import train_config_from_dict
from daca_jax.types import TrainConfig


def smoke(**fields) -> TrainConfig:
  """``smoke(rl__steps=2, likelihood__stratified__num_strata=2)``: ``section[__subsection]__name=value``
  overrides, validated."""
  c = sudoku_tiny.get_config("smoke")
  for dotted, v in fields.items():
    *sections, name = dotted.split("__")
    node = c
    for section in sections:
      node = node[section]
    node[name] = v
  return train_config_from_dict(c)
