"""What an evaluation runs: d1's decoding protocol (:class:`EvalProtocol`) and a task prepared
for one model's tokenizer and prompt style (:func:`prepare_task`)."""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from daca_jax.diffusion.remasking import REMASKING
from daca_jax.errors import ConfigError
from daca_jax.evaluation.files import jsonable
from daca_jax.evaluation.model import EvalModel
from daca_jax.tasks.base import TASKS, Example, Task, make_task
from daca_jax.config.rollout import RolloutConfig
from daca_jax.config.checks import check_field_types


D1_GEN_LENGTHS = (128, 256, 512)
D1_BLOCK_LENGTH = 32


@dataclasses.dataclass(frozen=True)
class EvalProtocol:
  """Decoding and batching of an evaluation (defaults: d1's protocol).

  Attributes:
    gen_lengths: completion lengths L to evaluate (flag ``--gen_lengths``); each a multiple of
      ``block_length``.
    block_length: semi-autoregressive block size (``--block_length``).
    steps: denoising steps for every length; 0 means ``L / 2`` (d1).
    temperature: 0 is greedy (d1).
    remasking: "low_confidence" (d1) or "random".
    batch_size: prompts per decode call (``--batch_size``); the last batch is padded.
    num_examples: evaluate the first N examples of each task (0: all).
    seed: PRNG seed (only matters for ``temperature > 0`` or random remasking).
  """

  gen_lengths: tuple[int, ...] = D1_GEN_LENGTHS
  block_length: int = D1_BLOCK_LENGTH
  steps: int = 0
  temperature: float = 0.0
  remasking: str = "low_confidence"
  batch_size: int = 32
  num_examples: int = 0
  seed: int = 0

  def rollout_config(self, gen_length: int) -> RolloutConfig:
    """The sampler config of one length.

    Raises:
      ConfigError: naming ``--gen_lengths`` / ``--block_length`` / ``--steps`` when the geometry
        does not fit (e.g. a length that is not a multiple of the block length).
    """
    if isinstance(gen_length, bool) or not isinstance(gen_length, (int, np.integer)) or gen_length < 1:
      raise ConfigError("--gen_lengths", gen_length, "positive integers")
    if not isinstance(self.block_length, int) or self.block_length < 1:
      raise ConfigError("--block_length", self.block_length, "a positive integer")
    if gen_length % self.block_length:
      raise ConfigError("--gen_lengths", gen_length, f"a multiple of --block_length={self.block_length}")
    steps = self.steps or gen_length // 2
    cfg = RolloutConfig(gen_length=int(gen_length), block_length=self.block_length, steps=steps,
                        temperature=float(self.temperature), remasking=self.remasking)
    try:
      REMASKING.get(cfg.remasking)  # names are checked by daca_jax.config.configure
      return cfg.validate()
    except ConfigError as e:
      flag = {"rollout.steps": "--steps", "rollout.temperature": "--temperature",
              "rollout.remasking": "--remasking"}.get(e.field, e.field)
      raise ConfigError(flag, e.value, f"{e.allowed} (for --gen_lengths={gen_length})") from None

  def validate(self) -> "EvalProtocol":
    check_field_types(self, lambda name: f"--{name}")
    if not self.gen_lengths:
      raise ConfigError("--gen_lengths", self.gen_lengths, "at least one length")
    for name in ("batch_size",):
      v = getattr(self, name)
      if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ConfigError(f"--{name}", v, "a positive integer")
    if isinstance(self.num_examples, bool) or not isinstance(self.num_examples, int) or self.num_examples < 0:
      raise ConfigError("--num_examples", self.num_examples, "an integer >= 0 (0: all)")
    for length in self.gen_lengths:
      self.rollout_config(length)
    return self


@dataclasses.dataclass
class PreparedTask:
  """A task with the prompts and tokenizer of one model.

  Attributes:
    task: the task (grading: ``reward`` / ``metrics``).
    examples: the evaluated examples (the first ``num_examples``).
    source: the task's description of its evaluation set.
    prompts: int32 [N, P] encoded prompts.
    tokenizer: the tokenizer used for prompts and completions (the task's).
    options: the task's options (recorded in the fingerprint).
  """

  task: Task
  examples: list[Example]
  source: str
  prompts: np.ndarray
  tokenizer: Any
  options: dict[str, Any]

  def decode(self, ids: np.ndarray) -> list[str]:
    return self.tokenizer.decode_batch(ids, stop_at_eos=True)


def prepare_task(name: str, model: EvalModel, num_examples: int = 0) -> PreparedTask:
  """Builds task ``name`` with ``model``'s tokenizer (the task's byte tokenizer when the model has none)
  and encodes its prompts.

  With the model's own tokenizer (HF checkpoints) the prompt length is the longest prompt of the whole
  evaluation set, so it does not change with ``num_examples``.

  Raises:
    ConfigError: an unknown task (``--tasks``), a prompt style the task does not have
      (``--prompt_style``, see :func:`check_prompt_style`), or a model whose vocabulary / mask id does
      not fit the tokenizer (``model.vocab_size`` / ``model.mask_token_id``).
    ValueError: a prompt longer than the task's fixed prompt length (names the example).
  """
  cls = TASKS.get(name)  # unknown name: ConfigError
  options = dict(model.task_options.get(name) or {"data_dir": model.data_dir})
  if model.prompt_style is not None:
    options["prompt_style"] = check_prompt_style(cls, name, model.prompt_style)
  task = make_task(name, tokenizer=model.tokenizer, **options)
  tok = task.tokenizer
  where = f"task {name!r} with tokenizer {tok!r} (checkpoint {model.identity.get('path', model.identity['kind'])})"
  if model.model_cfg.vocab_size < tok.vocab_size:
    raise ConfigError("model.vocab_size", model.model_cfg.vocab_size, f">= {tok.vocab_size} for {where}")
  if model.model_cfg.mask_token_id != tok.mask_id:
    raise ConfigError("model.mask_token_id", model.model_cfg.mask_token_id, f"{tok.mask_id} for {where}")
  all_examples, source = task.eval_examples()
  examples = all_examples[:num_examples] if num_examples else all_examples
  plen = None if model.tokenizer is None else max(len(task.prompt_ids(ex.prompt)) for ex in all_examples)
  prompts = task.encode_prompts(examples, prompt_len=plen)
  return PreparedTask(task, examples, source, prompts, tok, jsonable(options))


def check_prompt_style(cls: type[Task], name: str, prompt_style: str) -> str:
  """``prompt_style`` if task class ``cls`` (registered as ``name``) declares it (``cls.OPTIONS``).

  Raises:
    ConfigError: naming ``--prompt_style``, the task and the styles it has, when the task has no
      such style (or takes no prompt style at all): silently evaluating a chat model on a prompt
      format it was not asked for scores it near chance.
  """
  styles = tuple(getattr(cls, "prompt_styles", ()))
  takes = "prompt_style" in cls.OPTIONS
  if not takes or not styles:
    raise ConfigError("--prompt_style", prompt_style,
                      f"unset for task {name!r}: it has no prompt styles (one fixed prompt format); "
                      "an HF checkpoint asks for 'chat' (evaluate this task with another checkpoint "
                      "kind, or give it a chat style)")
  if prompt_style not in styles:
    raise ConfigError("--prompt_style", prompt_style, f"one of {list(styles)} for task {name!r}")
  return prompt_style
