"""Tasks: tokenizers, prompt formats, generators, rewards and metrics (registry ``TASKS``)."""
from daca_jax.tasks.base import TASKS, Example, Task, _import_builtin_tasks, make_task
from daca_jax.tasks.tokenizer import ByteTokenizer

_import_builtin_tasks()  # registers every built-in task (base._BUILTIN_TASK_MODULES) in TASKS
