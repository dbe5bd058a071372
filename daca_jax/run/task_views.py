"""The configured task as the main job uses it: built for the model's tokenizer, and split into a
training and an evaluation view when RL trains on other prompts than evaluation reads.

Why two views: d1 (and wd1 and GDPO, which reuse its data code) trains on its own training prompts
(``task.train_prompt_style="d1_train"``, :mod:`daca_jax.tasks.d1_train_prompts`) and evaluates on its
evaluation prompts (``task.options.prompt_style="chat"``). A task object holds one prompt style
(prompts are formatted into its examples), so the job builds the task twice, with the same options
but the prompt style (:func:`build_task_views`):

* the **training view** (``task.train_prompt_style``) formats the training pool; RL's rollouts, rewards
  (``task.reward``), token rewards and the SFT targets read it;
* the **evaluation view** (``task.options.prompt_style``) formats the test set and the validation split,
  and grades them with the library's graders.

Both views draw the same items in the same order (a task's item generators and file orders do not
depend on the prompt style), so the validation split holds exactly the items held out of the training
view's pool; :func:`validation_split` checks it. With ``task.train_prompt_style=""`` the two views are
one object and nothing is built twice.

Completion lengths (:func:`check_gen_length`): a task's ``min_gen_length`` is the longest reference
answer plus EOS under the tokenizer. A run that trains on reference answers (SFT of the tiny model)
cannot use a shorter completion, and it is refused. A run from a pretrained checkpoint trains on no
reference answers: a shorter completion can still hold a correct answer (answers vary in length;
d1 trains every task at 256 tokens), so it is a warning there, naming how long the longest reference
is. HumanEval's longest reference solution, for example, is 2007 bytes (1.7k-2k tokens of a
character-level tokenizer, several hundred of a BPE one): a refusal would block d1's 256-token recipe.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

from daca_jax.data import sources
from daca_jax.errors import ConfigError
from daca_jax.tasks.base import CONFIG_FIELD_OPTIONS, Example, Task, declared_options, make_task
from daca_jax.tasks.tokenizer import Tokenizer
from daca_jax.config.train import TrainConfig


def benchmark_source(cfg: TrainConfig) -> Any:
  """What the tasks read their benchmark files through (``data.source``): the folder's name for
  ``local``, the TFDS datasets under ``data.tfds_dir`` for ``tfds`` (:func:`daca_jax.data.sources.from_config`).

  Raises:
    DataError: ``tfds`` with a ``tfds_dir`` that is not a folder, or without tensorflow_datasets.
  """
  return sources.from_config(cfg.data.source, cfg.data.data_dir, cfg.data.tfds_dir)


def task_kwargs(cfg: TrainConfig) -> dict[str, Any]:
  """Options of the configured task, from what it declares (``OPTIONS``): ``data.data_dir``, the
  ``TaskConfig`` fields it declares (``eval_path``, ``eval_size``, ``num_blanks``) and ``task.options``.

  Raises:
    ConfigError: an entry of ``task.options`` that the task does not declare (the message lists the
      ones it does).
  """
  declared = declared_options(cfg.task.name)
  kwargs: dict[str, Any] = {"data_dir": benchmark_source(cfg)} if "data_dir" in declared else {}
  for name in CONFIG_FIELD_OPTIONS:
    if name in declared:
      kwargs[name] = getattr(cfg.task, name)
  allowed = sorted(n for n in declared if n != "data_dir")
  for name, value in cfg.task.options.items():
    if name not in allowed:
      raise ConfigError(f"task.options.{name}", value, f"one of the options task {cfg.task.name!r} declares: {allowed}")
    kwargs[name] = value
  return kwargs


def check_gen_length(cfg: TrainConfig, task: Task, length: int, field: str,
                     log: Callable[[str], None] | None = print) -> None:
  """Checks that completions of ``length`` tokens (config ``field``) hold ``task``'s longest answer:
  refused for a run that trains on reference answers, a warning for one from a checkpoint (module
  docstring).

  Raises:
    ConfigError: naming ``field``, without ``model.init_checkpoint``, when ``length`` is too short.
  """
  need = task.min_gen_length
  if length >= need:
    return
  what = f"the longest {task.name} answer ({task.prompt_style} prompts) plus EOS"
  if not cfg.model.init_checkpoint:
    raise ConfigError(field, length, f">= {need} ({what})")
  if log is not None:
    log(f"WARNING: {field}={length} is below {need} tokens, {what} under the checkpoint's tokenizer. RL from a "
        "checkpoint trains on no reference answers, so shorter correct answers still score; answers as long "
        "as the longest reference are cut.")


def build_task(cfg: TrainConfig, tokenizer: Tokenizer | None = None, *, prompt_style: str | None = None,
               log: Callable[[str], None] | None = print) -> Task:
  """Instantiates the configured task with ``tokenizer`` (None: the byte tokenizer) and checks that
  model and sampler fit the tokenizer.

  Args:
    prompt_style: replaces ``task.options.prompt_style`` (the training view's style); None keeps it.
    log: where a completion length below the task's longest answer is reported when it is only a
      warning (runs from a checkpoint; see :func:`check_gen_length`).
  Raises:
    ConfigError: an undeclared option, a vocabulary or mask id that does not fit the tokenizer, a
      completion length that cannot hold the answers (:func:`check_gen_length`), a prompt style the
      tokenizer cannot render (named ``task.train_prompt_style`` for the training view).
  """
  kwargs = task_kwargs(cfg)
  if prompt_style is not None:
    kwargs["prompt_style"] = prompt_style
  try:
    task = make_task(cfg.task.name, tokenizer=tokenizer, **kwargs)
  except ConfigError as e:
    if prompt_style is None or e.field != "task.options.prompt_style":
      raise
    raise ConfigError("task.train_prompt_style", e.value, e.allowed) from None
  tok = task.tokenizer
  if cfg.model.vocab_size < tok.vocab_size:
    raise ConfigError("model.vocab_size", cfg.model.vocab_size, f">= the tokenizer's {tok.vocab_size}")
  if cfg.model.mask_token_id != tok.mask_id:
    raise ConfigError("model.mask_token_id", cfg.model.mask_token_id, f"the tokenizer's mask id {tok.mask_id}")
  check_gen_length(cfg, task, cfg.rollout.gen_length, "rollout.gen_length", log)
  return task


@dataclasses.dataclass(frozen=True)
class TaskViews:
  """The task as RL trains on it and as it is evaluated (see the module docstring).

  Attributes:
    train: the training view (``task.train_prompt_style``).
    eval: the evaluation view (``task.options.prompt_style``); the same object as ``train`` when the
      styles agree.
  """

  train: Task
  eval: Task

  @property
  def split(self) -> bool:
    """Whether the two views differ."""
    return self.train is not self.eval


def build_task_views(cfg: TrainConfig, tokenizer: Tokenizer | None = None,
                     log: Callable[[str], None] | None = print) -> TaskViews:
  """The training and evaluation views of the configured task (one object when
  ``task.train_prompt_style`` is "" or equals the evaluation's style). Raises as :func:`build_task`."""
  eval_task = build_task(cfg, tokenizer, log=log)
  style = cfg.task.train_prompt_style
  if not style or style == eval_task.prompt_style:
    return TaskViews(eval_task, eval_task)
  return TaskViews(build_task(cfg, tokenizer, prompt_style=style, log=log), eval_task)


def validation_split(views: TaskViews, pool: Sequence[Example], num_train: int, seed: int) -> list[Example]:
  """The validation items (``pool[num_train:]`` of the training view's pool) as the evaluation view
  formats them.

  Raises:
    RuntimeError: the evaluation view drew other items than the training view (a task whose items
      depend on its prompt style; a bug of that task).
  """
  held_out = list(pool[num_train:])
  if not views.split or not held_out:
    return held_out
  val = views.eval.train_examples(len(pool), seed)[num_train:]
  if [dict(ex.meta) for ex in val] != [dict(ex.meta) for ex in held_out]:
    raise RuntimeError(f"task {views.eval.name!r}: its {views.train.prompt_style!r} and {views.eval.prompt_style!r} "
                       "prompt styles draw different items; the validation split would not be held out of RL")
  return val


def _pool_excluding(task: Task, num: int, seed: int, held: set[str]) -> list[Example]:
  """The first ``num`` items of the training pool of ``seed`` that are not in ``held`` (item keys).

  The pool's first items do not depend on its size, and at most ``len(held)`` of them are held out, so
  a pool of ``num + len(held)`` always holds enough.
  """
  if not held:
    return task.train_examples(num, seed)
  kept = [ex for ex in task.train_examples(num + len(held), seed) if task.item_key(ex) not in held]
  return kept[:num]


def draw_splits(views: TaskViews, cfg: TrainConfig) -> tuple[list[Example], list[Example], str]:
  """The training examples (training view), the validation split (evaluation view) and a line saying
  where the split comes from, under ``task.val_split``:

  * "pool": the training pool of ``seed`` holds ``sft.num_train_examples + task.num_val_examples``
    items; the first are the training examples, the rest the validation split (each warm start draws
    its own).
  * "fixed": the validation split is the first ``task.num_val_examples`` items the task generates
    from ``task.val_seed`` (the same items for every seed, so arms and warm starts are compared on
    one set); every training pool skips them (:meth:`Task.item_key`). Generated items exclude the
    evaluation set, so the three are disjoint.

  Raises:
    RuntimeError: see :func:`validation_split`.
  """
  n_train, n_val = cfg.sft.num_train_examples, cfg.task.num_val_examples
  if cfg.task.val_split == "pool" or not n_val:
    pool = views.train.train_examples(n_train + n_val, cfg.seed)
    source = (f"validation split: training-pool items {n_train}..{n_train + n_val - 1} (seed {cfg.seed}), "
              "held out of SFT and RL")
    return pool[:n_train], validation_split(views, pool, n_train, cfg.seed), source
  fixed = views.train.train_examples(n_val, cfg.task.val_seed)
  val = validation_split(views, fixed, 0, cfg.task.val_seed)
  train = _pool_excluding(views.train, n_train, cfg.seed, {views.train.item_key(ex) for ex in fixed})
  source = (f"validation split: fixed, {n_val} items generated from task.val_seed={cfg.task.val_seed} "
            "(the same for every seed), held out of SFT and RL")
  return train, val, source
