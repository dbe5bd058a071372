"""The main job: SFT warm start → evaluation → GRPO (DACA or a baseline) → evaluation.

Everything ``experiments/train.py`` does starts here, so it can be imported and tested; read it top to
bottom. :func:`run_main_job` checks the config against the task, the devices and the workdir before any
work, builds the task's views, the splits and the model, then :func:`_run_phases` runs the phases, each
in a module of its own:

* :mod:`daca_jax.run.sft_loop`: the SFT warm start (its jitted step and loop);
* :mod:`daca_jax.run.job_eval`: the evaluations of the test set and the validation split;
* :mod:`daca_jax.run.rl_loop`: the RL loop (rollouts, rewards, credit, updates, metrics, images);
* :mod:`daca_jax.run.results`: ``results.json``, the plots and the before/after table.

Each phase is resumable from ``workdir`` (:mod:`daca_jax.run.workdir` says what is reused and what is run
again): the SFT warm start is cached in ``workdir/sft`` (reused when the job is run again), evaluations
are cached as JSON, RL checkpoints live in ``workdir/rl``. Data order and PRNG keys are pure functions of
``(seed, step)`` (:mod:`daca_jax.run.streams`), so a run killed mid-way and resumed reproduces the
uninterrupted run.
"""
from __future__ import annotations

import dataclasses
import pathlib
import time
from typing import Any, Callable, NamedTuple

import jax
from jax.sharding import Mesh

from daca_jax import parallel
from daca_jax.credit import CREDIT, TAGGERS
from daca_jax.errors import ConfigError
from daca_jax import storage
from daca_jax.io_utils import check_workdir_path, make_dir
from daca_jax.models import count_params, init_model, lora, make_logits_fn
from daca_jax.rl.learner import GRPOLearner
from daca_jax.parallel import aot
from daca_jax.run import from_checkpoint, lease
from daca_jax.run.dashboards import Dashboard, check_log_config
from daca_jax.run.job_eval import JobEvaluator
from daca_jax.run.preflight import check_batches_fit
from daca_jax.run.results import Evaluations, assemble_results, publish_results
from daca_jax.run.rl_loop import RLBatches, RLHooks, RLStart, RLStore, run_rl, trajectory_images
from daca_jax.run.sft_loop import run_sft
from daca_jax.run.streams import EVAL_STREAM, LORA_STREAM
from daca_jax.run.task_views import TaskViews, build_task_views, check_gen_length, draw_splits
from daca_jax.run.workdir import check_workdir_config, has_saved_state, val_name
from daca_jax.tasks.base import TASKS, Example, Task
from daca_jax.config.train import TrainConfig

__all__ = ["PLUMBING_NOTE", "run_main_job"]

PLUMBING_NOTE = ("This is a plumbing check (log.plumbing_check, the smoke presets): a tiny model trained for a "
                 "few steps to show that every stage runs end to end. Its metrics are expected to be near "
                 "zero; that is not a failure. Drop ':smoke' from --config for a real run.")


def run_main_job(cfg: TrainConfig, workdir: str | pathlib.Path, *, show_progress: bool = True,
                 log: Callable[[str], None] = print,
                 sft_dir: str | pathlib.Path | None = None) -> dict[str, Any]:
  """SFT warm start → eval → RL → eval; writes ``results.json``, ``metrics.jsonl`` and plots.

  ``sft_dir`` (default ``workdir/sft``) lets several runs with the same model/SFT/task config share
  one cached warm start (``experiments/reproduce.py`` does).

  Multi-host (``jax.distributed`` initialised, e.g. by ``experiments/train.py``): every process runs
  this with the same config and ``workdir`` (a directory all of them see); each feeds its share of
  every batch, arrays are global over ``cfg.parallel``'s mesh, and process 0 alone writes the files
  and prints.

  With ``model.init_checkpoint`` the model, its weights and the task's tokenizer come from that
  checkpoint folder and the SFT phase is skipped (:mod:`daca_jax.run.from_checkpoint`); a config with
  ``model.require_checkpoint`` (the paper presets) refuses to run without one. With
  ``task.train_prompt_style`` RL trains on another view of the task than evaluation reads
  (:mod:`daca_jax.run.task_views`); ``eval.protocol`` says how the test set and the validation split are
  decoded (:mod:`daca_jax.run.job_eval`).

  Returns:
    The results dict written to ``workdir/results.json``:
    ``{"eval_before", "eval_after", "config", "eval_source", "timings", "outcomes"}`` (and ``val_before`` /
    ``val_after`` with a validation split, ``eval_protocol`` under d1's protocol); ``outcomes`` names the
    workdir's per-example outcomes file of each of those evaluations (:mod:`daca_jax.evaluation.outcomes`).
  Raises:
    ConfigError: a config value that does not fit the task, a preset for a pretrained checkpoint run
      without one (``model.init_checkpoint``), a workdir holding another run's config or leased by a
      live run (:mod:`daca_jax.run.lease`), or a ``workdir`` that is empty, a file or under a file.
    FileNotFoundError: an explicitly configured data path that does not exist.
    DataError: a checkpoint folder (``model.init_checkpoint``) with missing or malformed files.
  """
  workdir = check_workdir_path(workdir, "workdir")  # '', a file, a bad URL: refused before any work
  if parallel.is_primary():
    if storage.is_remote(workdir):
      try:
        storage.probe_write(workdir)  # a missing or unwritable bucket: refused before any work
      except OSError as e:
        raise ConfigError("workdir", str(workdir), f"a gs:// folder this machine can write: {e}") from None
      if storage.is_file(workdir):  # GCS would let a folder of that name sit beside the object
        raise ConfigError("workdir", str(workdir), "a folder; it is an object of the bucket")
    lease.check_free(workdir)  # a workdir in use: refused before any device or weight is touched
  if cfg.model.require_checkpoint and not cfg.model.init_checkpoint:
    raise ConfigError("model.init_checkpoint", "", "the folder of a pretrained LLaDA / Dream checkpoint in the "
                      "Hugging Face layout (--config.model.init_checkpoint=DIR): this config "
                      "(model.require_checkpoint=True, e.g. a configs/paper.py preset) is a recipe for RL from a "
                      "pretrained model and sets no architecture; its ',smoke' form takes a tiny checkpoint "
                      "(tests/hf_fixtures.py writes one)")
  start = None
  if cfg.model.init_checkpoint:  # the architecture from the checkpoint, every file checked, no weights read
    cfg, start = from_checkpoint.resolve_config(cfg, log if parallel.is_primary() else (lambda *_: None))
  # before creating the workdir: a bad path leaves nothing behind
  warn = log if parallel.is_primary() else None
  views = build_task_views(cfg, start.tokenizer if start is not None else None, log=warn)
  task = views.eval
  if cfg.eval.protocol == "d1":
    for length in cfg.eval.lengths:
      check_gen_length(cfg, task, length, "eval.gen_lengths", warn)
  mesh = None
  if cfg.parallel.strategy != "none":
    mesh = parallel.make_mesh(cfg.parallel)  # a mesh that does not fit the devices fails before any work
  check_batches_fit(cfg, mesh)  # batches that do not split over processes/devices: before any work
  placement_mesh = mesh  # where a checkpoint's weights go, also in one process
  if parallel.is_multiprocess():
    if not parallel.is_primary():
      log, show_progress = (lambda *_: None), False
  else:
    mesh = None  # one process: the jitted steps place their own inputs
  _check_credit_and_logs(cfg, views)
  if cfg.log.plumbing_check:
    log(PLUMBING_NOTE)
  eval_examples, source = _eval_set(cfg, task, log)
  # The validation split (distinct items, none from the evaluation set) is held out of SFT and RL; it
  # is drawn with the training pool or, for studies, fixed across seeds (task.val_split, draw_splits).
  t_prep = time.perf_counter()
  log(f"Preparing {cfg.sft.num_train_examples + cfg.task.num_val_examples} training/validation examples "
      "and the model…")
  train_examples, val_examples, val_source = draw_splits(views, cfg)  # validation: the evaluation's prompts
  if views.split:
    log(f"Training prompts: {cfg.task.name}'s {views.train.prompt_style!r} style (task.train_prompt_style); "
        f"evaluation and validation prompts: its {task.prompt_style!r} style (task.options.prompt_style).")

  if cfg.rl.steps and cfg.rl.prompts_per_step > len(train_examples):
    raise ConfigError("rl.prompts_per_step", cfg.rl.prompts_per_step,
                      f"<= the {len(train_examples)} training prompts (sft.num_train_examples)")
  graphdef, params = _initial_model(cfg, start, placement_mesh, mesh, log)
  logits_fn = make_logits_fn(graphdef, logprob_chunk=cfg.model.logprob_chunk)
  log(f"Prepared {len(train_examples) + len(val_examples)} examples and a {count_params(params):,}-parameter model in "
      f"{time.perf_counter() - t_prep:.1f} s.")
  make_dir(workdir)  # only now: a config refused above leaves no workdir
  with lease.holding(workdir, log):  # one run at a time: a second one is refused here, before any work
    check_workdir_config(workdir, cfg)  # after everything that can reject the config up front
    if start is not None:
      from_checkpoint.record_source(workdir, start, has_saved_state(workdir))
    dashboard = Dashboard(workdir, cfg.log, cfg.to_dict()) if parallel.is_primary() else None
    try:
      return _run_phases(cfg, views, JobData(train_examples, val_examples, eval_examples, source, val_source),
                         JobModel(graphdef, params, logits_fn, mesh),
                         JobIO(workdir, storage.as_path(sft_dir) if sft_dir is not None else workdir / "sft",
                               show_progress, log, dashboard))
    finally:
      if dashboard is not None:
        dashboard.close()


def _check_credit_and_logs(cfg: TrainConfig, views: TaskViews) -> None:
  """Checks, before any work, that the task grades what ``rl.credit`` needs and that ``cfg.log``'s
  dashboards and the credit's tagger can be used (their packages are installed).

  Raises:
    ConfigError: a credit that needs token rewards the training task does not define; an unusable
      tagger or dashboard.
  """
  if CREDIT.get(cfg.rl.credit).needs_token_rewards and not views.train.has_token_rewards:
    with_tokens = [n for n in TASKS.names() if TASKS.get(n).has_token_rewards]
    raise ConfigError("rl.credit", cfg.rl.credit, f"a credit that task {cfg.task.name!r} supports: it "
                      f"defines no token rewards (tasks that do: {with_tokens})")
  if CREDIT.get(cfg.rl.credit).needs_categories:
    TAGGERS.get(cfg.credit.dtca.tagger)(views.eval.tokenizer)  # e.g. 'pos' without spaCy fails before any work
  check_log_config(cfg.log)  # e.g. W&B asked for but not installed: before any work


def _eval_set(cfg: TrainConfig, task: Task, log: Callable[[str], None]) -> tuple[list[Example], str]:
  """The evaluation set (its first ``task.num_eval_examples`` when set) and its source, announced loudly
  when it is a generated stand-in for the benchmark file."""
  eval_examples, source = task.eval_examples()
  if cfg.task.num_eval_examples:
    eval_examples = eval_examples[:cfg.task.num_eval_examples]
  if "GENERATED" in source:
    log("!" * 80 + f"\nWARNING: evaluating on a generated set, not the benchmark file.\n{source}\n"
        "(point DACA_DATA_DIR or --config.data.data_dir at the benchmark files)\n" + "!" * 80)
  else:
    log(f"Evaluation set: {source}; using {len(eval_examples)} examples")
  return eval_examples, source


def _initial_model(cfg: TrainConfig, start: from_checkpoint.CheckpointStart | None,
                   placement_mesh: Mesh | None, mesh: Mesh | None, log: Callable[[str], None]) -> tuple[Any, Any]:
  """``(graphdef, params)``: the checkpoint's model (``start``, each device reading its own shard onto
  ``placement_mesh``) or ``cfg.model``'s from the seed, as global arrays over ``mesh`` in a multi-process run."""
  if start is not None:  # each device reads its own shard of the weights
    return from_checkpoint.initial_params(cfg, start, placement_mesh, log)
  graphdef, params = init_model(cfg.model, cfg.seed)
  if mesh is not None:  # the same initial values on every process, as global arrays
    params = parallel.to_global(params, mesh, parallel.fsdp_shardings(params, mesh)
                                if cfg.parallel.strategy == "fsdp" else None)
  return graphdef, params


class JobData(NamedTuple):
  """The examples the phases read: training (SFT and RL prompts), validation and evaluation, with where the
  evaluation and validation sets came from (part of their caches' fingerprints)."""

  train: list[Example]
  val: list[Example]
  eval: list[Example]
  eval_source: str
  val_source: str = ""


class JobModel(NamedTuple):
  """The model the phases start from, and the mesh of a multi-process run (None in one process)."""

  graphdef: Any
  params: Any
  logits_fn: Callable[..., Any]
  mesh: Mesh | None


class JobIO(NamedTuple):
  """Where the phases write and report: the workdir, the SFT checkpoint folder, progress, messages and the
  dashboard (None off process 0)."""

  workdir: pathlib.Path
  sft_dir: pathlib.Path
  show_progress: bool
  log: Callable[[str], None]
  dashboard: Dashboard | None


def _run_phases(cfg: TrainConfig, views: TaskViews, data: JobData, model: JobModel, io: JobIO) -> dict[str, Any]:
  """The phases of :func:`run_main_job` once its inputs are checked: SFT → eval → RL → eval. SFT and RL
  read the training view of the task, the evaluations its evaluation view."""
  workdir, sft_dir, show_progress, log, dashboard = io
  train_examples, val_examples, eval_examples, source, val_source = data
  graphdef, params, logits_fn, mesh = model
  task = views.eval
  tok = task.tokenizer
  timings: dict[str, float] = {}

  t0 = time.perf_counter()
  if cfg.model.init_checkpoint:
    log(from_checkpoint.SFT_SKIPPED.format(path=cfg.model.init_checkpoint))
  else:
    params, did_work = run_sft(cfg.sft, cfg.checkpoint, views.train, train_examples, logits_fn, params, sft_dir,
                               seed=cfg.seed, gen_length=cfg.rollout.gen_length, show_progress=show_progress,
                               log=log, mesh=mesh, dashboard=dashboard)
    if did_work:
      timings["sft_s"] = time.perf_counter() - t0

  policy = _rl_policy(cfg, graphdef, params, logits_fn, mesh, log)
  evaluator = JobEvaluator(cfg, task, policy.logits_fn,
                           jax.random.fold_in(jax.random.PRNGKey(cfg.seed), EVAL_STREAM),
                           mesh=mesh, show_progress=show_progress, log=log)

  def run_val(prm: Any, step: int) -> dict[str, float]:
    return evaluator.run(prm, val_examples, "validation", outcomes_to=workdir / val_name(step))

  fingerprint = {"eval": dataclasses.asdict(cfg.eval), "num_examples": len(eval_examples),
                 "source": source, "sft_steps": cfg.sft.steps}
  t0 = time.perf_counter()
  eval_before, cached_before = evaluator.cached(policy.params, eval_examples, "eval (before RL)",
                                                workdir / "eval_before.json", fingerprint)
  if not cached_before:
    timings["eval_before_s"] = time.perf_counter() - t0

  val_before = None
  if val_examples and cfg.rl.eval_every:
    val_before, _ = evaluator.cached(policy.params, val_examples, "validation (before RL)",
                                     workdir / "val_before.json",
                                     dict(fingerprint, split="validation", source=val_source,
                                          num_examples=len(val_examples)))

  learner = GRPOLearner(policy.logits_fn, cfg, mask_id=tok.mask_id, eos_id=tok.eos_id, tokenizer=tok,
                        hidden_logits_fn=policy.hidden_logits_fn, optimizer_wrapper=policy.optimizer_wrapper,
                        param_split=policy.param_split, mesh=mesh)
  # A preflight's executables (train.py --compile_only --target=...): used where they are this run's programs.
  aot.attach(workdir / "executables", learner.aot_slots, log)
  t0 = time.perf_counter()
  params, did_work = run_rl(
      cfg.rl, learner, RLStart(policy.params, policy.ref_params),
      RLBatches(views.train, train_examples, cfg.seed, cfg.task.reward, mesh),
      RLStore(workdir, cfg.checkpoint, from_checkpoint.rl_checkpoint_layout(cfg, policy.params)),
      RLHooks(run_val, trajectory_images(cfg, views.train), dashboard, show_progress, log))
  if did_work:
    timings["rl_s"] = time.perf_counter() - t0

  t0 = time.perf_counter()
  eval_after, cached = evaluator.cached(params, eval_examples, "eval (after RL)", workdir / "eval_after.json",
                                       dict(fingerprint, rl_steps=cfg.rl.steps))
  if not cached:
    timings["eval_after_s"] = time.perf_counter() - t0
  if cached_before or cached:
    log("Evaluation results " + ("before and after RL" if cached_before and cached else
                                 "before RL" if cached_before else "after RL")
        + " loaded from the workdir's cache (same settings, same trained steps).")

  results, records = assemble_results(cfg, workdir, evaluator, Evaluations(eval_before, eval_after, val_before),
                                      source, timings, log)
  if parallel.is_primary():
    publish_results(cfg, task.primary_metric, workdir, results, records, dashboard, log)
  return results


class _Policy(NamedTuple):
  """What RL trains and evaluates: the policy, its reference and the functions and optimizer over them."""

  params: Any  # the policy's parameters (with LoRA: {"base", "lora"}, the adapters at zero)
  ref_params: Any  # the reference policy's (with LoRA: the same base, adapters off; no copy of the weights)
  logits_fn: Callable[..., Any]
  hidden_logits_fn: Callable[..., Any]
  optimizer_wrapper: Any  # None, or lora.lora_optimizer (only the adapters are updated)
  param_split: Any  # None, or lora.LORA_SPLIT


def _rl_policy(cfg: TrainConfig, graphdef: Any, params: Any, logits_fn: Callable[..., Any], mesh: Mesh | None,
               log: Callable[[str], None]) -> _Policy:
  """RL's policy: the full model (the SFT result or the checkpoint's), or (``model.lora_rank`` > 0) that
  model frozen plus LoRA adapters that start at zero, with the reference = the same base with adapters off."""
  if cfg.model.lora_rank:
    adapters = lora.init_lora(cfg.model, jax.random.fold_in(jax.random.PRNGKey(cfg.seed), LORA_STREAM))
    params = parallel.to_global(lora.lora_params(params, adapters), mesh)
    log(f"LoRA: rank {cfg.model.lora_rank} on {','.join(cfg.model.lora_target_list)}: "
        f"{lora.trainable_count(adapters):,} trainable parameters"
        + (f", dropout {cfg.model.lora_dropout} on their input in the update" if cfg.model.lora_dropout else ""))
    return _Policy(params, lora.reference_params(params),
                   lora.make_lora_logits_fn(graphdef, logprob_chunk=cfg.model.logprob_chunk),
                   lora.make_lora_logits_fn(graphdef, return_hidden=True), lora.lora_optimizer, lora.LORA_SPLIT)
  if cfg.model.init_checkpoint:
    log(from_checkpoint.reference_note(cfg, params))
  return _Policy(params, params, logits_fn, make_logits_fn(graphdef, return_hidden=True), None, None)
