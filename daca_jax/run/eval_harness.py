"""d1's evaluation protocol for any registered task and any checkpoint, resumable, with reports.

Protocol (d1, Zhao et al. 2025, ``eval/eval.py``): greedy decoding (temperature 0),
low-confidence remasking, generation lengths 128 / 256 / 512, semi-autoregressive blocks of 32 tokens,
``steps = gen_length / 2`` (two tokens committed per step). Every piece is a field of
:class:`EvalProtocol`, so tiny models can use short lengths.

Checkpoints (:class:`EvalModel`): a workdir of ``experiments/train.py`` (:func:`model_from_workdir`:
the latest RL checkpoint, else the latest SFT one, with the run's ``config.json``), a Hugging Face
LLaDA/Dream directory (:func:`model_from_hf`: its tokenizer.json and the chat prompt style), or a
random initialisation (:func:`model_from_random_init`, smoke tests).

Outputs of :func:`run_evaluation` under ``output_dir``:

* ``<task>/gen<L>.jsonl``: one row per example (``index``, ``prompt``, ``target``, ``completion``,
  ``reward``, ``metrics`` = the task's metrics of that one example, ``completion_tokens``, ``batch``,
  ``batch_seconds``), appended after each finished batch;
* ``<task>/gen<L>.fingerprint.json``: what produced the rows (checkpoint, protocol, task options,
  prompt length); a rerun with another fingerprint is refused instead of mixing rows;
* ``summary.json`` / ``summary.md``: per task its grading rules (``Task.grading_rules``) and, per
  length, the task's metrics recomputed from the JSONL completions, ``num_examples``, ``seconds`` (decode + grading, summed over the batches of every
  session, first batch includes compilation) and ``tokens_per_s`` (completion positions decoded per
  second of decoding).

Resumption: rows of finished batches are read back and skipped. Examples are cut into fixed batches
``[k * batch_size, (k + 1) * batch_size)`` and batch k decodes with ``fold_in(key, k)``, so the rows of
a resumed run are exactly those of an uninterrupted one; a batch that was only partly written (the
process died mid-write) is decoded again.
"""
from __future__ import annotations

import dataclasses
import inspect
import json
import os
import pathlib
import time
import types
from typing import Any, Callable, Mapping, Sequence

import jax
import numpy as np
from flax import nnx

from daca_jax.configure import train_config_from_dict, upgrade_config_dict
from daca_jax.diffusion.remasking import REMASKING
from daca_jax.diffusion.rollout import make_rollout_fn
from daca_jax.errors import ConfigError, DataError
from daca_jax.io_utils import atomic_write_json, atomic_write_text, read_json
from daca_jax.run.metrics import progress
from daca_jax.models import make_logits_fn
from daca_jax.models.llada import Transformer
from daca_jax.tasks.base import TASKS, Example, Task, make_task
from daca_jax.types import ModelConfig, RolloutConfig, TrainConfig, check_field_types

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
      REMASKING.get(cfg.remasking)  # names are checked above daca_jax.types (daca_jax.configure)
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
class EvalModel:
  """A model ready to evaluate.

  Attributes:
    logits_fn: pure ``(params, tokens[B, T]) -> logits[B, T, V]``.
    params: its parameters.
    model_cfg: the architecture (vocab size and mask id are checked against each task's tokenizer).
    identity: JSON-able description of the checkpoint (path, phase, step, ...); part of the
      fingerprint that guards resumption.
    tokenizer: tokenizer to use instead of each task's own (byte) tokenizer, e.g. an HFTokenizer;
      None keeps the task's.
    prompt_style: ``task.options.prompt_style`` given to every task that takes one (None: task
      default, or what the training run used).
    task_options: ``task name -> constructor kwargs`` for tasks built with specific options (a
      workdir's own task); other tasks get ``data_dir`` and ``prompt_style`` only.
    data_dir: benchmark folder given to the tasks ("" = the default data dir).
    max_seq_len: the model's context length (prompt + completion), 0 if unlimited.
    train_config: the training run's config (workdir and random-init models; None for HF
      checkpoints), e.g. for :mod:`daca_jax.viz` to rebuild the run's learner.
  """

  logits_fn: Callable[..., Any]
  params: Any
  model_cfg: ModelConfig
  identity: dict[str, Any]
  tokenizer: Any = None
  prompt_style: str | None = None
  task_options: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
  data_dir: str = ""
  max_seq_len: int = 0
  train_config: TrainConfig | None = None
  _rollouts: dict[Any, Callable[..., Any]] = dataclasses.field(default_factory=dict, repr=False)

  def rollout_fn(self, cfg: RolloutConfig, mask_id: int, eos_id: int) -> Callable[..., Any]:
    """The jitted sampler of ``cfg``, built once per model (reused by resumed and repeated runs)."""
    key = (cfg, mask_id, eos_id)
    if key not in self._rollouts:
      self._rollouts[key] = make_rollout_fn(self.logits_fn, cfg, mask_id=mask_id, eos_id=eos_id)
    return self._rollouts[key]


# --- loading checkpoints ---------------------------------------------------------------------------


def _abstract_params(cfg: ModelConfig) -> tuple[nnx.GraphDef, Any]:
  abstract = nnx.eval_shape(lambda: Transformer(cfg, nnx.Rngs(0)))
  return nnx.split(abstract, nnx.Param)


def _committed_steps(directory: pathlib.Path) -> list[int]:
  """Finished checkpoint steps in a Checkpointer directory, read without touching it (a training
  job may be writing there)."""
  if not directory.is_dir():
    return []
  return sorted(int(p.name) for p in directory.iterdir()
                if p.name.isdigit() and (p / "commit_success.txt").is_file()
                and (p / "state" / "commit_success.txt").is_file())


def model_from_workdir(workdir: str | os.PathLike, phase: str = "latest",
                       tokenizer: Any = None) -> EvalModel:
  """The latest checkpoint of an ``experiments/train.py`` workdir and the run's config.

  Args:
    workdir: the run's ``--workdir`` (holds ``config.json``, ``sft/`` and ``rl/``).
    phase: "latest" (RL if it has a checkpoint, else SFT), "rl" or "sft".
    tokenizer: optional tokenizer replacing the tasks' own (see :class:`EvalModel`).
  Raises:
    DataError: no ``config.json`` or no finished checkpoint of the requested phase; the message names
      ``--workdir``.
    ConfigError: an unknown ``phase`` (``--phase``).
  """
  from daca_jax.run.checkpoint import load_pytree, verify_entry
  from daca_jax.run.pipeline import task_kwargs

  wd = pathlib.Path(workdir).expanduser().resolve()
  if phase not in ("latest", "rl", "sft"):
    raise ConfigError("--phase", phase, "one of ['latest', 'rl', 'sft']")
  if not (wd / "config.json").is_file():
    raise DataError(f"--workdir={workdir}: no config.json (expected a workdir of experiments/train.py)")
  cfg = train_config_from_dict(upgrade_config_dict(read_json(wd / "config.json", fix=(
      "it records the run's config, which the evaluation needs: restore it from a copy (the run's "
      "results.json holds the same config under 'config')"))))
  order = ("rl", "sft") if phase == "latest" else (phase,)
  for name in order:
    steps = _committed_steps(wd / name)
    if steps:
      break
  else:
    raise DataError(f"--workdir={workdir}: no finished checkpoint in {' or '.join(str(wd / n) for n in order)}")
  graphdef, abstract = _abstract_params(cfg.model)
  saved = load_pytree(wd / name / str(steps[-1]) / "state", None)  # read-only, whatever else it holds
  if "params" not in saved:
    raise DataError(f"--workdir={workdir}: checkpoint {wd / name / str(steps[-1])} holds no 'params'")
  try:
    nnx.replace_by_pure_dict(abstract, jax.tree.map(jax.numpy.asarray, _strip_value(saved["params"])))
  except (KeyError, ValueError) as e:
    raise DataError(f"--workdir={workdir}: checkpoint params do not match model config ({e})") from None
  verify_entry(wd / name / str(steps[-1]), "params", abstract)  # a damaged file is not evaluated silently
  return EvalModel(make_logits_fn(graphdef), abstract, cfg.model,
                   {"kind": "workdir", "path": str(wd), "phase": name, "step": steps[-1]},
                   tokenizer=tokenizer, task_options={cfg.task.name: task_kwargs(cfg)},
                   data_dir=cfg.data.data_dir, train_config=cfg)


def _strip_value(tree: Any) -> Any:
  """Orbax restores an nnx.State without a target as ``{..., leaf: {"value": array}}``."""
  if isinstance(tree, Mapping):
    if set(tree) == {"value"} and not isinstance(tree["value"], Mapping):
      return tree["value"]
    return {k: _strip_value(v) for k, v in tree.items()}
  return tree


def model_from_random_init(cfg: TrainConfig, tokenizer: Any = None) -> EvalModel:
  """A freshly initialised model of ``cfg.model`` (seed ``cfg.seed``), with ``cfg``'s task options."""
  from daca_jax.models import init_model
  from daca_jax.run.pipeline import task_kwargs

  graphdef, params = init_model(cfg.model, cfg.seed)
  return EvalModel(make_logits_fn(graphdef), params, cfg.model,
                   {"kind": "random_init", "seed": cfg.seed, "model": dataclasses.asdict(cfg.model)},
                   tokenizer=tokenizer, task_options={cfg.task.name: task_kwargs(cfg)},
                   data_dir=cfg.data.data_dir, train_config=cfg)


def model_from_hf(path: str | os.PathLike, *, dtype: str = "bfloat16", param_dtype: str = "bfloat16",
                  prompt_style: str = "chat", data_dir: str = "") -> EvalModel:
  """A local LLaDA (or Dream) Hugging Face directory with its tokenizer.json and chat prompts.

  Raises:
    DataError / ConfigError: see :func:`daca_jax.models.hf_import.load_hf_checkpoint` and
      :class:`daca_jax.tasks.hf_tokenizer.HFTokenizer` (missing files, mismatched tensors).
  """
  from daca_jax.models.hf_import import load_hf_checkpoint
  from daca_jax.tasks.hf_tokenizer import HFTokenizer

  p = pathlib.Path(path).expanduser().resolve()
  if not p.is_dir():
    raise DataError(f"--hf_checkpoint={path}: not a directory")
  cfg, graphdef, params, report = load_hf_checkpoint(p, dtype=dtype, param_dtype=param_dtype)
  tok = HFTokenizer.for_llada(p, vocab_size=cfg.vocab_size)
  hf = read_json(p / "config.json", fix="it is the checkpoint's model config: download it again")
  max_len = int(hf.get("max_sequence_length") or hf.get("max_position_embeddings") or 0)
  return EvalModel(make_logits_fn(graphdef), params, cfg,
                   {"kind": "hf", "path": str(p), "family": report.family, "dtype": dtype},
                   tokenizer=tok, prompt_style=prompt_style, data_dir=data_dir, max_seq_len=max_len)


# --- tasks ------------------------------------------------------------------------------------------


@dataclasses.dataclass
class PreparedTask:
  """A task with the prompts and tokenizer of one model.

  Attributes:
    task: the task (grading: ``reward`` / ``metrics``).
    examples: the evaluated examples (the first ``num_examples``).
    source: the task's description of its evaluation set.
    prompts: int32 [N, P] encoded prompts.
    tokenizer: the tokenizer used for prompts and completions.
    options: the task's constructor kwargs (recorded in the fingerprint).
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
  """Builds task ``name`` for ``model`` and encodes its prompts.

  With the model's own tokenizer (HF checkpoints) the prompt length is the longest prompt of the whole
  evaluation set plus BOS, so it does not change with ``num_examples``.

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
  task = make_task(name, **options)
  tok = model.tokenizer if model.tokenizer is not None else task.tokenizer
  where = f"task {name!r} with tokenizer {tok!r} (checkpoint {model.identity.get('path', model.identity['kind'])})"
  if model.model_cfg.vocab_size < tok.vocab_size:
    raise ConfigError("model.vocab_size", model.model_cfg.vocab_size, f">= {tok.vocab_size} for {where}")
  if model.model_cfg.mask_token_id != tok.mask_id:
    raise ConfigError("model.mask_token_id", model.model_cfg.mask_token_id, f"{tok.mask_id} for {where}")
  all_examples, source = task.eval_examples()
  examples = all_examples[:num_examples] if num_examples else all_examples
  if tok is task.tokenizer:
    prompts = task.encode_prompts(examples)
  else:
    plen = 1 + max(len(tok.encode(ex.prompt)) for ex in all_examples)
    view = types.SimpleNamespace(tokenizer=tok, prompt_len=plen, name=name)
    prompts = Task.encode_prompts(view, examples)  # the task's layout with another tokenizer
  return PreparedTask(task, examples, source, prompts, tok, _jsonable(options))


def check_prompt_style(cls: type[Task], name: str, prompt_style: str) -> str:
  """``prompt_style`` if task class ``cls`` (registered as ``name``) takes it.

  Raises:
    ConfigError: naming ``--prompt_style``, the task and the styles it has, when the task has no
      such style (or takes no prompt style at all): silently evaluating a chat model on a prompt
      format it was not asked for scores it near chance.
  """
  styles = tuple(getattr(cls, "prompt_styles", ()))
  takes = "prompt_style" in inspect.signature(cls.__init__).parameters
  if not takes or not styles:
    raise ConfigError("--prompt_style", prompt_style,
                      f"unset for task {name!r}: it has no prompt styles (one fixed prompt format); "
                      "an HF checkpoint asks for 'chat' (evaluate this task with another checkpoint "
                      "kind, or give it a chat style)")
  if prompt_style not in styles:
    raise ConfigError("--prompt_style", prompt_style, f"one of {list(styles)} for task {name!r}")
  return prompt_style


def _jsonable(x: Any) -> Any:
  return json.loads(json.dumps(x, default=str))


# --- generations files ------------------------------------------------------------------------------


def read_generations(path: str | os.PathLike) -> list[dict[str, Any]]:
  """Rows of a generations JSONL; a last line cut short by an interrupted write is ignored.

  Raises:
    DataError: a damaged line other than the last (names the file and line).
  """
  p = pathlib.Path(path)
  if not p.exists():
    return []
  lines = p.read_text().split("\n")
  rows = []
  for i, line in enumerate(lines):
    if not line.strip():
      continue
    try:
      rows.append(json.loads(line))
    except json.JSONDecodeError:
      if i >= len(lines) - 2:  # the last line (possibly followed by nothing): half-written
        break
      raise DataError(f"{p}: line {i + 1} is not JSON; delete the file to regenerate it") from None
  return rows


def _finished_rows(rows: list[dict[str, Any]], examples: Sequence[Example], batch_size: int,
                   path: pathlib.Path) -> dict[int, dict[str, Any]]:
  """Rows of the batches that were written completely, by example index."""
  by_index = {}
  for r in rows:
    i = r.get("index")
    if not isinstance(i, int) or not 0 <= i < len(examples):
      continue  # beyond --num_examples this time: kept on disk, not used
    if r.get("prompt") != examples[i].prompt:
      raise DataError(f"{path}: row {i} was generated for another prompt than the task's example {i}; "
                      "the evaluation data changed: use a new --output_dir")
    by_index[i] = r
  done = {}
  n = len(examples)
  for start in range(0, n, batch_size):
    idx = range(start, min(start + batch_size, n))
    if all(i in by_index for i in idx):
      done.update({i: by_index[i] for i in idx})
  return done


def _write_rows(path: pathlib.Path, rows: Sequence[dict[str, Any]], mode: str) -> None:
  """Appends (``mode="a"``) or atomically replaces (``"w"``) the rows of a generations file."""
  text = "".join(json.dumps(r) + "\n" for r in rows)
  if mode != "a":
    atomic_write_text(path, text)
    return
  with open(path, "a") as f:  # a row cut short by a kill is dropped by read_generations
    f.write(text)
    f.flush()
    os.fsync(f.fileno())


def _check_fingerprint(path: pathlib.Path, fingerprint: dict[str, Any], gen_path: pathlib.Path) -> None:
  if path.exists() and gen_path.exists():
    old = read_json(path, fix=f"it records what produced {gen_path.name}: delete both to regenerate them")
    if old != fingerprint:
      diff = sorted(k for k in set(old) | set(fingerprint) if old.get(k) != fingerprint.get(k))
      raise ConfigError("--output_dir", str(path.parent.parent),
                        f"a new folder, or the settings of the run already there (differs in {diff}: "
                        f"{ {k: old.get(k) for k in diff} } vs { {k: fingerprint.get(k) for k in diff} })")
  atomic_write_json(path, fingerprint)


# --- evaluation --------------------------------------------------------------------------------------


def _row_metrics(task: Task, completion: str, example: Example) -> dict[str, float]:
  m = task.metrics([completion], [example])
  return {k: float(v) for k, v in m.items() if k != "num_examples"}


def check_length(prepared: PreparedTask, model: EvalModel, protocol: EvalProtocol,
                 gen_length: int) -> RolloutConfig:
  """The sampler config of ``gen_length`` once it fits the task and the model.

  Raises:
    ConfigError: naming ``--gen_lengths`` (or the protocol flag at fault): a length below the task's
      longest answer (own tokenizer), beyond the model's context with the task's prompts, or not a
      multiple of the block length.
  """
  name = prepared.task.name
  rcfg = protocol.rollout_config(gen_length)
  if prepared.tokenizer is prepared.task.tokenizer and gen_length < prepared.task.min_gen_length:
    raise ConfigError("--gen_lengths", gen_length,
                      f">= {prepared.task.min_gen_length} for task {name!r} (its longest answer plus EOS)")
  plen = prepared.prompts.shape[1]
  if model.max_seq_len and plen + gen_length > model.max_seq_len:
    raise ConfigError("--gen_lengths", gen_length,
                      f"<= {model.max_seq_len - plen}: the model's context is {model.max_seq_len} tokens "
                      f"and task {name!r} has {plen}-token prompts")
  return rcfg


def evaluate_length(prepared: PreparedTask, model: EvalModel, protocol: EvalProtocol, gen_length: int,
                    out_dir: pathlib.Path, *, max_batches: int | None = None, show_progress: bool = True,
                    log: Callable[[str], None] = print) -> tuple[dict[str, Any] | None, int]:
  """Evaluates one task at one length, appending rows to ``out_dir/gen<L>.jsonl``.

  Args:
    max_batches: stop after decoding this many new batches (None: all); an unfinished length returns
      None and is finished by the next call.
  Returns:
    ``(result, batches decoded by this call)``; ``result`` is :func:`summarize_generations`' dict, or
    None when stopped early by ``max_batches``.
  Raises:
    ConfigError: a length that does not fit the task or the model (``--gen_lengths``), or an
      ``--output_dir`` holding rows made with other settings.
  """
  name = prepared.task.name
  rcfg = check_length(prepared, model, protocol, gen_length)
  plen = prepared.prompts.shape[1]
  out_dir.mkdir(parents=True, exist_ok=True)
  gen_path = out_dir / f"gen{gen_length}.jsonl"
  fingerprint = {"checkpoint": model.identity, "rollout": dataclasses.asdict(rcfg),
                 "batch_size": protocol.batch_size, "seed": protocol.seed, "task": name,
                 "task_options": prepared.options, "prompt_len": int(plen)}
  _check_fingerprint(out_dir / f"gen{gen_length}.fingerprint.json", fingerprint, gen_path)
  examples, n, bs = prepared.examples, len(prepared.examples), protocol.batch_size
  done = _finished_rows(read_generations(gen_path), examples, bs, gen_path)
  _write_rows(gen_path, [done[i] for i in sorted(done)], "w")  # drop rows of half-written batches
  todo = [k for k in range(-(-n // bs)) if k * bs not in done]
  if done:
    log(f"{name} L={gen_length}: {len(done)}/{n} rows already in {gen_path}; {len(todo)} batches to go")
  tok = prepared.tokenizer
  rollout = model.rollout_fn(rcfg, tok.mask_id, tok.eos_id)
  key = jax.random.PRNGKey(protocol.seed)
  bar = progress(total=n, desc=f"{name} L={gen_length}", disable=not show_progress)
  bar.update(len(done))
  for count, k in enumerate(todo):
    if max_batches is not None and count >= max_batches:
      bar.close()
      return None, count
    idx = np.arange(k * bs, min((k + 1) * bs, n))
    batch = prepared.prompts[np.minimum(np.arange(k * bs, (k + 1) * bs), n - 1)]  # [bs, P], padded
    t0 = time.perf_counter()
    ids = np.asarray(rollout(model.params, batch, jax.random.fold_in(key, k)).completion)[:len(idx)]
    t_decode = time.perf_counter() - t0
    completions = prepared.decode(ids)
    exs = [examples[i] for i in idx]
    rewards = np.asarray(prepared.task.reward(completions, exs), np.float32)
    lengths = _completion_tokens(ids, tok.eos_id)
    seconds = time.perf_counter() - t0
    rows = [{"index": int(i), "prompt": ex.prompt, "target": ex.target, "completion": c,
             "reward": float(r), "metrics": _row_metrics(prepared.task, c, ex),
             "completion_tokens": int(nt), "batch": int(k), "batch_seconds": seconds,
             "decode_seconds": t_decode}
            for i, ex, c, r, nt in zip(idx, exs, completions, rewards, lengths)]
    _write_rows(gen_path, rows, "a")
    bar.update(len(idx))
  bar.close()
  return summarize_generations(prepared, gen_path, protocol.batch_size, gen_length), len(todo)


def _completion_tokens(ids: np.ndarray, eos_id: int) -> np.ndarray:
  """Tokens before the first EOS of each row of ``ids [N, L]``."""
  is_eos = ids == eos_id
  return np.where(is_eos.any(-1), is_eos.argmax(-1), ids.shape[1])


def summarize_generations(prepared: PreparedTask, gen_path: pathlib.Path, batch_size: int,
                          gen_length: int) -> dict[str, Any]:
  """The task's metrics recomputed from the completions in ``gen_path`` plus time and throughput.

  Raises:
    DataError: the file lacks rows of some evaluated examples.
  """
  done = _finished_rows(read_generations(gen_path), prepared.examples, batch_size, gen_path)
  n = len(prepared.examples)
  if len(done) != n:
    raise DataError(f"{gen_path}: {n - len(done)} of {n} examples have no generation yet")
  completions = [done[i]["completion"] for i in range(n)]
  metrics = {k: float(v) for k, v in prepared.task.metrics(completions, prepared.examples).items()}
  batches = {r["batch"]: r for r in done.values()}
  seconds = sum(r["batch_seconds"] for r in batches.values())
  decode = sum(r["decode_seconds"] for r in batches.values())
  return {"metrics": metrics, "num_examples": n, "seconds": seconds, "decode_seconds": decode,
          "tokens_per_s": n * gen_length / decode if decode > 0 else 0.0,
          "mean_completion_tokens": float(np.mean([done[i]["completion_tokens"] for i in range(n)]))}


def run_evaluation(model: EvalModel, task_names: Sequence[str], protocol: EvalProtocol,
                   output_dir: str | os.PathLike, *, max_batches: int | None = None,
                   show_progress: bool = True, log: Callable[[str], None] = print) -> dict[str, Any] | None:
  """Evaluates every task at every length; writes the generations and ``summary.json``/``summary.md``.

  Every task and length is checked (tokenizer fit, lengths, prompt lengths) before any decoding.

  Args:
    max_batches: decode at most this many new batches in this call (all tasks together), then return
      None; rerunning finishes the evaluation (used to test resumption).
  Returns:
    The summary dict written to ``summary.json`` (``checkpoint``, ``protocol``, ``tasks``:
    ``{task: {"source", "primary_metric", "lengths": {str(L): {...}}}}``), or None when stopped by
    ``max_batches``.
  Raises:
    ConfigError / DataError: see :func:`prepare_task` and :func:`evaluate_length`.
  """
  protocol.validate()
  if not task_names:
    raise ConfigError("--tasks", list(task_names), "at least one task name")
  out = pathlib.Path(output_dir)
  prepared = {}
  for name in task_names:
    prepared[name] = p = prepare_task(name, model, protocol.num_examples)
    if "GENERATED" in p.source:
      log(f"WARNING: {name}: evaluating on a generated set, not the benchmark file: {p.source}")
    else:
      log(f"{name}: {p.source}; evaluating {len(p.examples)} examples")
    log(f"{name}: grading: {p.task.grading_rules() or 'not stated by the task'}")
    for length in protocol.gen_lengths:  # every length checked before any decoding
      check_length(p, model, protocol, length)
  summary: dict[str, Any] = {"checkpoint": model.identity, "protocol": _jsonable(dataclasses.asdict(protocol)),
                             "tasks": {}}
  left = max_batches
  for name, p in prepared.items():
    entry = {"source": p.source, "primary_metric": p.task.primary_metric,
             "grading_rules": p.task.grading_rules(), "lengths": {}}
    for length in protocol.gen_lengths:
      res, decoded = evaluate_length(p, model, protocol, length, out / name, max_batches=left,
                                     show_progress=show_progress, log=log)
      if left is not None:
        left -= decoded
      if res is None:
        log(f"Stopped after --max_batches={max_batches}; rerun the same command to finish.")
        return None
      entry["lengths"][str(length)] = res
    summary["tasks"][name] = entry
  write_summary(summary, out)
  log("\n" + summary_markdown(summary))
  return summary


def summary_markdown(summary: Mapping[str, Any]) -> str:
  """One markdown table per task: a row per metric (then examples, seconds, tokens/s), a column per
  generation length."""
  ident = summary["checkpoint"]
  parts = [f"# Evaluation of {ident.get('path', ident['kind'])}", ""]
  for name, entry in summary["tasks"].items():
    res = entry["lengths"]
    lengths = list(res)
    keys = [k for k in res[lengths[0]]["metrics"] if k != "num_examples"]
    rows = [[k] + [f"{res[L]['metrics'][k]:.4f}" for L in lengths] for k in keys]
    rows += [["num_examples"] + [str(res[L]["num_examples"]) for L in lengths],
             ["seconds"] + [f"{res[L]['seconds']:.1f}" for L in lengths],
             ["tokens_per_s"] + [f"{res[L]['tokens_per_s']:.0f}" for L in lengths]]
    grading = entry.get("grading_rules") or "not stated by the task"
    parts += [f"## {name} (primary metric: {entry['primary_metric']})", "", entry["source"], "",
              f"Grading: {grading}", "",
              "| metric | " + " | ".join(f"L={L}" for L in lengths) + " |",
              "|---|" + "---:|" * len(lengths)]
    parts += ["| " + " | ".join(r) + " |" for r in rows]
    parts.append("")
  return "\n".join(parts)


def write_summary(summary: Mapping[str, Any], output_dir: str | os.PathLike) -> None:
  out = pathlib.Path(output_dir)
  out.mkdir(parents=True, exist_ok=True)
  for fname, text in (("summary.json", json.dumps(summary, indent=2)), ("summary.md", summary_markdown(summary))):
    atomic_write_text(out / fname, text)


def load_model(*, workdir: str = "", phase: str = "latest", hf_checkpoint: str = "",
               random_init: TrainConfig | None = None, tokenizer: str = "", prompt_style: str = "",
               data_dir: str = "", hf_dtype: str = "bfloat16") -> EvalModel:
  """The model named by exactly one of ``workdir`` / ``hf_checkpoint`` / ``random_init`` (the flags of
  ``experiments/evaluate.py``).

  Args:
    tokenizer: a tokenizer.json (or its folder) to use instead of each task's own tokenizer
      (workdir and random-init models; HF checkpoints always use their own).
    prompt_style: overrides ``task.options.prompt_style`` for every task that takes one.
    data_dir: overrides the benchmark folder.
  Raises:
    ConfigError: none or several checkpoint sources (names the flags).
  """
  given = [f for f, v in (("--workdir", workdir), ("--hf_checkpoint", hf_checkpoint),
                          ("--random_init", random_init is not None)) if v]
  if len(given) != 1:
    raise ConfigError("checkpoint", given or None,
                      "exactly one of --workdir, --hf_checkpoint, --random_init (with --config)")
  tok = None
  if tokenizer:
    if hf_checkpoint:
      raise ConfigError("--tokenizer", tokenizer, "unset with --hf_checkpoint (it uses its own tokenizer.json)")
    from daca_jax.tasks.hf_tokenizer import HFTokenizer

    tok = HFTokenizer.for_llada(tokenizer, vocab_size=None)
  if hf_checkpoint:
    model = model_from_hf(hf_checkpoint, dtype=hf_dtype, param_dtype=hf_dtype, data_dir=data_dir)
  elif workdir:
    model = model_from_workdir(workdir, phase, tokenizer=tok)
  else:
    model = model_from_random_init(random_init, tokenizer=tok)
  if prompt_style:
    model.prompt_style = prompt_style
    for options in model.task_options.values():
      options.pop("prompt_style", None)
  if data_dir:
    model.data_dir = data_dir
    for options in model.task_options.values():
      options["data_dir"] = data_dir
  return model
