"""The job's sections (``sft``, ``task``, ``data``, ``eval``, ``checkpoint``, ``parallel``, ``log``) and
``TrainConfig``, which holds every section.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from daca_jax.config.checks import INT_MAX, _check_fields, _check_values, _non_negative, _one_of, _positive
from daca_jax.config.credit import CreditConfig
from daca_jax.config.likelihood import LikelihoodConfig
from daca_jax.config.model import ModelConfig
from daca_jax.config.parallel import ParallelConfig
from daca_jax.config.rl import RLConfig
from daca_jax.config.rollout import RolloutConfig
from daca_jax.errors import ConfigError
from daca_jax.io_utils import check_folder_or_bucket, check_local_path


@dataclasses.dataclass(frozen=True)
class SFTConfig:
  """Supervised warm start with LLaDA's masked-diffusion SFT loss (Nie et al. 2025).

  Attributes:
    steps: optimizer steps (0 skips SFT).
    batch_size: sequences per step.
    learning_rate: peak AdamW learning rate (cosine decay after warmup).
    warmup_steps: linear warmup steps.
    weight_decay: AdamW weight decay.
    max_grad_norm: global-norm gradient clip.
    num_train_examples: size of the generated training pool.
  """

  steps: int = 300
  batch_size: int = 64
  learning_rate: float = 1e-3
  warmup_steps: int = 50
  weight_decay: float = 0.01
  max_grad_norm: float = 1.0
  num_train_examples: int = 20000

  def validate(self, prefix: str = "sft") -> "SFTConfig":
    _check_fields(prefix, self)
    _non_negative(prefix, self, "steps", "learning_rate", "warmup_steps", "weight_decay",
                  "max_grad_norm")
    _positive(prefix, self, "batch_size", "num_train_examples")
    return self


VAL_SPLITS = ("pool", "fixed")  # task.val_split


@dataclasses.dataclass(frozen=True)
class TaskConfig:
  """Which task, and where its evaluation data comes from.

  Attributes:
    name: registered task name ("sudoku4x4").
    num_blanks: blanks per generated training puzzle (d1's test set has 8).
    eval_path: explicit evaluation file; "" means ``<data.data_dir>/sudoku/d1_test.csv`` when present,
      else a generated held-out set (announced loudly).
    eval_size: size of the generated held-out set used when no file is found.
    num_eval_examples: evaluate on the first N examples only (0: all).
    num_val_examples: size of the validation split, held out of training and disjoint from the
      evaluation set (generated items exclude it); ``rl.eval_every`` evaluates on it, so choices are
      made without touching the test set (0: none).
    val_split: how the validation split is drawn: "pool" = the items after the first
      ``sft.num_train_examples`` of the training pool of ``seed`` (so each warm start has its own);
      "fixed" = the first ``num_val_examples`` items the task generates from ``val_seed``, the same for
      every seed, removed from every training pool (the studies' split:
      :func:`daca_jax.run.task_views.draw_splits`).
    val_seed: the generator seed of a "fixed" validation split.
    options: task-specific options (e.g. ``{"prompt_style": "chat"}``), passed to the task class as
      keyword arguments; an option the task does not declare (its ``OPTIONS`` table) is a ConfigError
      naming ``task.options.<name>`` and listing the declared ones. ``num_blanks``, ``eval_path`` and
      ``eval_size`` are forwarded only to tasks that declare them.
    reward: the reward RL trains on: "" = the task's own graded reward (the one evaluation uses);
      "d1" = d1's training rewards as released, "d1_dotall" = with d1's later DOTALL format patterns
      (:mod:`daca_jax.tasks.training_rewards`, which also checks that the task has one).
    train_prompt_style: the prompt style RL trains on, when it differs from the one evaluation uses
      (``task.options.prompt_style``): "" = the same. d1, wd1 and GDPO train on d1's training prompts
      ("d1_train", :mod:`daca_jax.tasks.d1_train_prompts`) and evaluate on d1's evaluation prompts
      ("chat"); their rewards (``task.reward=d1``) are written for the training prompts. The main job
      then builds two views of the task (:func:`daca_jax.run.task_views.build_task_views`): the training
      view (this style) formats the training pool, RL's rollouts and rewards; the evaluation view
      (``task.options.prompt_style``) the test set and the validation split. Both views draw the same
      items. The task must declare ``prompt_style`` and offer this style (checked by
      :func:`daca_jax.config.configure.check_names`).
  """

  name: str = "sudoku4x4"
  num_blanks: int = 8
  eval_path: str = ""
  eval_size: int = 500
  num_eval_examples: int = 0
  num_val_examples: int = 0
  val_split: str = "pool"
  val_seed: int = 20261205
  options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  reward: str = ""
  train_prompt_style: str = ""

  def validate(self, prefix: str = "task") -> "TaskConfig":
    _check_fields(prefix, self)
    _check_values(f"{prefix}.options", self.options)
    _positive(prefix, self, "num_blanks", "eval_size")
    _non_negative(prefix, self, "num_eval_examples", "num_val_examples", "val_seed")
    _one_of(prefix, self, "val_split", VAL_SPLITS)
    return self


DATA_SOURCES = ("local", "tfds")  # data.source


@dataclasses.dataclass(frozen=True)
class DataConfig:
  """Where the benchmark files are read from.

  Attributes:
    source: ``local``: the files under ``data_dir``; ``tfds``: the TFDS datasets built from them
      (``experiments/build_tfds.py``) under ``tfds_dir``, read through ``tfds.data_source``. Both give
      the same records in the same order.
    data_dir: folder of benchmark files; "" means ``$DACA_DATA_DIR`` or ``../shared/data`` beside the
      repository. An explicitly given folder that does not exist is an error.
    tfds_dir: the TFDS data directory the datasets were built into (``source='tfds'`` only).
  """

  source: str = "local"
  data_dir: str = ""
  tfds_dir: str = ""

  def validate(self, prefix: str = "data") -> "DataConfig":
    _check_fields(prefix, self)
    _one_of(prefix, self, "source", DATA_SOURCES)
    check_local_path(self.data_dir, f"{prefix}.data_dir")
    check_folder_or_bucket(self.tfds_dir, f"{prefix}.tfds_dir")  # gs://: each host reads a local copy
    if self.source == "tfds" and not self.tfds_dir:
      raise ConfigError(f"{prefix}.tfds_dir", self.tfds_dir,
                        "the TFDS data directory the datasets were built into (data.source='tfds'; "
                        "python experiments/build_tfds.py --tfds_dir=...)")
    return self


EVAL_PROTOCOLS = ("rollout", "d1")  # eval.protocol


@dataclasses.dataclass(frozen=True)
class EvalConfig:
  """How the main job evaluates: the test set before and after RL, the validation split every
  ``rl.eval_every`` iterations.

  Two protocols (``protocol``):

  * "rollout" (the tiny main job's): one decode with the RL sampler's geometry (``rollout.gen_length``,
    ``block_length``, ``steps``, ``remasking``) at ``temperature``, with the exact sampler: no K/V
    cache and no threshold even when ``rollout.kv_cache`` / ``rollout.threshold`` speed up RL's
    training rollouts, so that how RL samples never changes how its policy is scored.
  * "d1": d1's evaluation protocol (dllm-reasoning/d1 @ 837888f ``eval/eval.py``, ``eval/generate.py``:
    low-confidence remasking, greedy at ``temperature`` 0) at each length of ``gen_lengths`` (d1: 128,
    256, 512), in blocks of ``block_length`` (32) with ``steps`` denoising steps (0: length / 2), the
    decoding of :class:`daca_jax.evaluation.EvalProtocol` (``experiments/evaluate.py``'s). Every length is
    reported (``L<length>/<metric>``); the plain metric names are the headline length's: ``rollout.gen_length``
    when it is evaluated, else the longest (:func:`daca_jax.run.job_eval.eval_protocol`).

  Attributes:
    batch_size: prompts decoded per call (the last batch is padded; shapes stay static).
    temperature: decoding temperature (0 = greedy, d1).
    protocol: "rollout" or "d1" (above).
    gen_lengths: the d1 protocol's completion lengths, comma-separated ("128,256,512"); each a multiple
      of ``block_length``. Unused by "rollout".
    block_length: the d1 protocol's semi-autoregressive block (d1: 32).
    steps: the d1 protocol's denoising steps at every length; 0: length / 2 (d1's).
  """

  batch_size: int = 250
  temperature: float = 0.0
  protocol: str = "rollout"
  gen_lengths: str = "128,256,512"
  block_length: int = 32
  steps: int = 0

  @property
  def lengths(self) -> tuple[int, ...]:
    """``gen_lengths`` as integers (ValueError if it does not parse; :meth:`validate` names the field)."""
    return tuple(int(x) for x in self.gen_lengths.split(",") if x.strip())

  def validate(self, prefix: str = "eval") -> "EvalConfig":
    _check_fields(prefix, self)
    _positive(prefix, self, "batch_size", "block_length")
    _non_negative(prefix, self, "temperature", "steps")
    _one_of(prefix, self, "protocol", EVAL_PROTOCOLS)
    allowed = f"comma-separated positive multiples of {prefix}.block_length={self.block_length}, e.g. '128,256,512'"
    try:
      lengths = self.lengths
    except ValueError:
      raise ConfigError(f"{prefix}.gen_lengths", self.gen_lengths, allowed) from None
    if not lengths or any(n < 1 or n % self.block_length for n in lengths) or len(set(lengths)) != len(lengths):
      raise ConfigError(f"{prefix}.gen_lengths", self.gen_lengths, allowed + " (distinct)")
    for n in lengths:
      steps = self.steps or n // 2
      if steps % (n // self.block_length) or steps > n:
        raise ConfigError(f"{prefix}.steps", self.steps, f"0 (length / 2) or a multiple of the blocks of every "
                          f"length, at most one step per token (length {n}: {n // self.block_length} blocks of "
                          f"{prefix}.block_length={self.block_length})")
    return self


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
  """How often checkpoints are saved, and how many are kept.

  Attributes:
    every: save an RL checkpoint every N iterations (and always at the end); SFT saves every
      ``sft_every`` steps.
    sft_every: SFT checkpoint interval (steps).
    max_to_keep: checkpoints kept per phase.
  """

  every: int = 10
  sft_every: int = 200
  max_to_keep: int = 2

  def validate(self, prefix: str = "checkpoint") -> "CheckpointConfig":
    _check_fields(prefix, self)
    _positive(prefix, self, "every", "sft_every", "max_to_keep")
    return self


@dataclasses.dataclass(frozen=True)
class LogConfig:
  """Dashboards and console output (:mod:`daca_jax.run.dashboards`); none of it changes what is trained.

  Attributes:
    tensorboard: write TensorBoard event files under ``<workdir>/tb/{sft,rl,eval}`` (the scalars of the
      metrics JSONL files, same names).
    wandb: a Weights & Biases project to log to ("" = off); needs the ``wandb`` package.
    trajectory_every: add a denoising-trajectory image (:mod:`daca_jax.viz`, the first rollout group of
      the iteration) to the dashboards every N RL iterations and at the last one (0 = never).
    plumbing_check: the run is a plumbing check (the smoke presets): its output says so, and that its
      metrics are expected to be near zero.
  """

  tensorboard: bool = True
  wandb: str = ""
  trajectory_every: int = 50
  plumbing_check: bool = False

  def validate(self, prefix: str = "log") -> "LogConfig":
    _check_fields(prefix, self)
    _non_negative(prefix, self, "trajectory_every")
    if self.wandb and not self.wandb.replace("-", "").replace("_", "").replace(".", "").isalnum():
      raise ConfigError(f"{prefix}.wandb", self.wandb, "a W&B project name (letters, digits, '-', '_', '.')")
    return self


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """The whole main job (``experiments/train.py``)."""

  seed: int = 0
  model: ModelConfig = ModelConfig()
  rollout: RolloutConfig = RolloutConfig()
  credit: CreditConfig = CreditConfig()
  likelihood: LikelihoodConfig = LikelihoodConfig()
  rl: RLConfig = RLConfig()
  sft: SFTConfig = SFTConfig()
  task: TaskConfig = TaskConfig()
  data: DataConfig = DataConfig()
  eval: EvalConfig = EvalConfig()
  checkpoint: CheckpointConfig = CheckpointConfig()
  parallel: ParallelConfig = ParallelConfig()
  log: LogConfig = LogConfig()

  def validate(self) -> "TrainConfig":
    if not isinstance(self.seed, int) or isinstance(self.seed, bool) or not 0 <= self.seed <= INT_MAX:
      raise ConfigError("seed", self.seed, f"an integer in [0, {INT_MAX}]")
    for f in dataclasses.fields(self):
      if f.name != "seed":
        getattr(self, f.name).validate(f.name)
    lik = self.likelihood
    if lik.trajectory_steps not in (0, self.rollout.steps):
      raise ConfigError("likelihood.trajectory_steps", lik.trajectory_steps,
                        f"0 or rollout.steps={self.rollout.steps}")
    if self.rl.likelihood == "stratified" and lik.stratified.num_strata > self.rollout.gen_length:
      raise ConfigError("likelihood.stratified.num_strata", lik.stratified.num_strata,
                        f"<= rollout.gen_length={self.rollout.gen_length} (one token per stratum at most)")
    if self.rl.eval_every and not self.task.num_val_examples:
      raise ConfigError("rl.eval_every", self.rl.eval_every, "0 unless task.num_val_examples > 0 (periodic "
                        "evaluation runs on the validation split, never on the test set)")
    if lik.trajectory.groups > self.rollout.steps:
      raise ConfigError("likelihood.trajectory.groups", lik.trajectory.groups,
                        f"<= rollout.steps={self.rollout.steps} (runs of at least one step)")
    if self.rl.likelihood == "rldf" and lik.rldf.states > self.rollout.steps:
      raise ConfigError("likelihood.rldf.states", lik.rldf.states,
                        f"<= rollout.steps={self.rollout.steps} (distinct states to rebuild)")
    # Batches whose completion tokens alone overflow int32 indexing cannot be used; refused here
    # rather than after SFT, when the first RL batch is built.
    eval_length = max(self.eval.lengths) if self.eval.protocol == "d1" else self.rollout.gen_length
    for field, rows, length, name in (
        ("rl.prompts_per_step * rl.group_size", self.rl.prompts_per_step * self.rl.group_size,
         self.rollout.gen_length, "rollout.gen_length"),
        ("sft.batch_size", self.sft.batch_size, self.rollout.gen_length, "rollout.gen_length"),
        ("eval.batch_size", self.eval.batch_size, eval_length,
         "eval.gen_lengths" if self.eval.protocol == "d1" else "rollout.gen_length")):
      if rows * length > INT_MAX:
        raise ConfigError(field, rows, f"a batch of at most {INT_MAX // length} rows "
                          f"(rows x {name}={length} tokens must fit int32)")
    return self

  def to_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)
