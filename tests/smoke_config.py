"""The smoke preset of the main job (``configs/sudoku_tiny.py:smoke``) with field overrides, for tests."""
from configs import sudoku_tiny
from daca_jax.config.configure import train_config_from_dict
from daca_jax.config.train import TrainConfig


def set_field(config, path, value) -> None:
  """``config[a][b][c] = value`` for ``path = ["a", "b", "c"]`` (a ConfigDict or a plain dict)."""
  *sections, name = path
  for section in sections:
    config = config[section]
  config[name] = value


def smoke(**fields) -> TrainConfig:
  """``smoke(rl__steps=2, likelihood__stratified__num_strata=2)``: ``section[__subsection]__name=value``
  overrides, validated."""
  c = sudoku_tiny.get_config("smoke")
  for dotted, v in fields.items():
    set_field(c, dotted.split("__"), v)
  return train_config_from_dict(c)
