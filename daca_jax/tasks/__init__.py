"""Tasks: tokenizers, prompt formats, generators, rewards and metrics (registry ``TASKS``).

Every built-in task module is imported here, explicitly, so that it registers its task in ``TASKS``:
any import of a ``daca_jax.tasks`` module runs this file first, so ``make_task`` and ``TASKS.get``
always see every built-in task. A new task module adds its import here.
"""
from daca_jax.tasks import code as _code  # noqa: F401  (registers "humaneval", "mbpp")
from daca_jax.tasks import countdown as _countdown  # noqa: F401  (registers "countdown")
from daca_jax.tasks import gsm8k as _gsm8k  # noqa: F401  (registers "gsm8k")
from daca_jax.tasks import json_schema as _json_schema  # noqa: F401  (registers "json_schema")
from daca_jax.tasks import math500 as _math500  # noqa: F401  (registers "math500")
from daca_jax.tasks import sudoku as _sudoku  # noqa: F401  (registers "sudoku4x4")
from daca_jax.tasks.base import TASKS, Example, Task, make_task
from daca_jax.tasks.tokenizer import ByteTokenizer
