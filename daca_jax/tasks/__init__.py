"""Tasks: tokenizers, prompt formats, generators, rewards and metrics (registry ``TASKS``)."""
from daca_jax.tasks import sudoku as _sudoku  # noqa: F401  (registers "sudoku4x4")
from daca_jax.tasks.base import TASKS, Example, Task, make_task
from daca_jax.tasks.tokenizer import ByteTokenizer
