"""The main job's evaluations under ``cfg.eval``'s protocol: the test set before and after RL (cached in
the workdir) and the validation split during RL.

``eval.protocol="rollout"`` decodes once with the RL sampler's geometry at ``eval.temperature`` and
always with the exact sampler (:func:`exact_sampler`: no K/V cache, no threshold), whatever
``rollout.kv_cache`` / ``rollout.threshold`` make RL's training rollouts do, so that a change to how RL
samples never changes how its policy is scored; the metrics are the task's. ``eval.protocol="d1"``
decodes at every length of ``eval.gen_lengths`` with d1's protocol (:func:`eval_protocol`: a
:class:`daca_jax.evaluation.EvalProtocol`, so the main job and ``experiments/evaluate.py`` decode
alike) and reports

* ``L<length>/<metric>`` for every length and metric (``L128/accuracy``; TensorBoard groups them by length),
* the plain ``<metric>`` names with the headline length's values (:func:`headline_length`), so the
  tables, plots and tools that read one number per metric (``results.json``'s ``eval_after``,
  ``experiments/compare.py``, ``reward_curve.png``) keep working,
* ``num_examples`` once.

Each length of a test-set evaluation is cached on its own (``<stem>_L<length>.json``, its
``.generations.jsonl`` and its per-example ``.outcomes.jsonl``, :mod:`daca_jax.evaluation.outcomes`), so an
evaluation interrupted between lengths resumes at the next one; the validation passes during RL write
their per-example outcomes too (:meth:`JobEvaluator.run`).
Decoding goes through the main job's own decode loop (:func:`daca_jax.evaluation.decode.evaluate`, shared
with the harness), split over the processes of a multi-host run.
"""
from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Any, Callable, Sequence

import jax

from daca_jax import io_utils, parallel
from daca_jax.diffusion.rollout import make_rollout_fn
from daca_jax.evaluation import outcomes
from daca_jax.evaluation.decode import evaluate
from daca_jax.evaluation.protocol import EvalProtocol
from daca_jax.tasks.base import Example, Task
from daca_jax.config.rollout import RolloutConfig
from daca_jax.config.train import TrainConfig


def eval_protocol(cfg: TrainConfig) -> EvalProtocol | None:
  """The d1 protocol of ``cfg.eval`` (None for ``eval.protocol="rollout"``): its lengths, block and
  steps, greedy at ``eval.temperature``, low-confidence remasking (d1's), ``eval.batch_size``."""
  if cfg.eval.protocol != "d1":
    return None
  return EvalProtocol(gen_lengths=cfg.eval.lengths, block_length=cfg.eval.block_length, steps=cfg.eval.steps,
                      temperature=cfg.eval.temperature, batch_size=cfg.eval.batch_size, seed=cfg.seed)


def exact_sampler(rcfg: RolloutConfig, temperature: float) -> RolloutConfig:
  """``rcfg``'s geometry and remasking at ``temperature`` with Fast-dLLM's approximations off
  (``kv_cache="none"``, ``threshold=0``): the sampler the rollout protocol evaluates with."""
  return dataclasses.replace(rcfg, temperature=temperature, kv_cache="none", threshold=0.0)


def headline_length(cfg: TrainConfig) -> int:
  """The length whose metrics the plain names report: ``rollout.gen_length`` (the length RL trains at)
  when it is evaluated, else the longest of ``eval.gen_lengths``; ``rollout.gen_length`` under the
  rollout protocol."""
  if cfg.eval.protocol != "d1":
    return cfg.rollout.gen_length
  lengths = cfg.eval.lengths
  return cfg.rollout.gen_length if cfg.rollout.gen_length in lengths else max(lengths)


def combine_lengths(per_length: dict[int, dict[str, float]], headline: int) -> dict[str, float]:
  """One flat metrics dict from ``{length: task metrics}`` (module docstring's names)."""
  out = dict(per_length[headline])
  for length, metrics in per_length.items():
    out.update({f"L{length}/{k}": v for k, v in metrics.items() if k != "num_examples"})
  return out


def cached_eval(path: pathlib.Path, fingerprint: dict[str, Any], run: Callable[[], tuple[dict, list[str]]],
                examples: Sequence[Example], log: Callable[[str], None] = print,
                task: Task | None = None) -> tuple[dict[str, float], bool]:
  """Returns (metrics, from_cache). The cache is used only if it was made with the same
  ``fingerprint`` (eval settings, number of examples, training steps behind the parameters); a
  damaged cache is recomputed. The completions go to ``<path stem>.generations.jsonl`` and, with
  ``task``, their per-example outcomes to ``<path stem>.outcomes.jsonl``
  (:mod:`daca_jax.evaluation.outcomes`), both before the metrics, so a cache never stands without them; a
  cache written before outcomes were kept gets them from its generations (no decoding)."""
  cached = io_utils.read_json_cache(path, log)
  if cached is not None and cached.get("fingerprint") == fingerprint and isinstance(cached.get("metrics"), dict):
    if task is not None and parallel.is_primary() and not outcomes.outcomes_path(path).exists():
      outcomes.outcomes_from_generations(task, path.with_suffix(".generations.jsonl"), examples)
    return cached["metrics"], True
  metrics, completions = run()
  if not parallel.is_primary():
    return metrics, False
  io_utils.atomic_write_text(path.with_suffix(".generations.jsonl"), "".join(
      json.dumps({"prompt": ex.prompt, "target": ex.target, "completion": c}) + "\n"
      for ex, c in zip(examples, completions)))
  if task is not None:
    outcomes.write_outcomes(path, task, completions, examples)
  io_utils.atomic_write_json(path, {"metrics": metrics, "fingerprint": fingerprint})
  return metrics, False


class JobEvaluator:
  """Decodes and grades a task's examples under ``cfg.eval``'s protocol.

  Args:
    cfg: the run's config.
    task: the evaluation view of the task (its prompts and graders).
    logits_fn: the policy's ``(params, tokens) -> logits`` (LoRA-aware for a LoRA policy).
    key: the PRNG key of every decode (batch k of a decode uses ``fold_in(key, k)``).
    mesh: the device mesh of a multi-process run (each process decodes its slice of every batch), or
      None.
    show_progress, log: progress bars and messages.
  """

  def __init__(self, cfg: TrainConfig, task: Task, logits_fn: Callable[..., Any], key: jax.Array, *,
               mesh: Any = None, show_progress: bool = True, log: Callable[[str], None] = print):
    self.cfg, self.task, self.mesh = cfg, task, mesh
    self.show_progress, self.log = show_progress, log
    self.protocol = eval_protocol(cfg)
    self.headline = headline_length(cfg)
    tok = task.tokenizer
    self._rollouts = {length: self._sharded(make_rollout_fn(logits_fn, rcfg, mask_id=tok.mask_id, eos_id=tok.eos_id))
                      for length, rcfg in self.rollout_configs().items()}
    self._key = key
    self._compiled: set[int] = set()  # lengths whose sampler this process has compiled

  def rollout_configs(self) -> dict[int, RolloutConfig]:
    """The sampler config of every evaluated length."""
    if self.protocol is None:
      return {self.headline: exact_sampler(self.cfg.rollout, self.cfg.eval.temperature)}
    return {length: self.protocol.rollout_config(length) for length in self.protocol.gen_lengths}

  def _sharded(self, rollout: Callable[..., Any]) -> Callable[..., Any]:
    if self.mesh is None:
      return rollout
    mesh = self.mesh
    return lambda prm, prompts, key: rollout(prm, parallel.rows_to_devices(prompts, mesh, "eval.batch_size"),
                                             parallel.to_global(key, mesh))

  def _decode(self, params: Any, examples: Sequence[Example], desc: str, length: int) -> tuple[dict, list[str]]:
    announce = None if length in self._compiled else self.log  # the first decode of a length compiles
    self._compiled.add(length)
    label = desc if self.protocol is None else f"{desc} L={length}"
    return evaluate(self.task, self._rollouts[length], params, examples, self.cfg.eval.batch_size, self._key,
                    show_progress=self.show_progress, desc=label,
                    multiple_of=jax.device_count() if self.mesh is not None else 1, log=announce)

  def length_path(self, path: pathlib.Path, length: int) -> pathlib.Path:
    """The file of one length's evaluation: ``path`` under the rollout protocol, ``<stem>_L<length>.json``
    under d1's."""
    return path if self.protocol is None else path.with_name(f"{path.stem}_L{length}.json")

  def outcomes_file(self, path: pathlib.Path) -> pathlib.Path:
    """The per-example outcomes of the headline length of the evaluation cached at (or named) ``path``."""
    return outcomes.outcomes_path(self.length_path(path, self.headline))

  def run(self, params: Any, examples: Sequence[Example], desc: str,
          outcomes_to: pathlib.Path | None = None) -> dict[str, float]:
    """The metrics of ``examples`` (uncached: the validation split during RL); with ``outcomes_to``
    (a name like a cache's, e.g. ``val_step25.json``), each length's per-example outcomes are written to
    :func:`daca_jax.evaluation.outcomes.outcomes_path` of :meth:`length_path`."""
    per = {}
    for length in self._rollouts:
      per[length], completions = self._decode(params, examples, desc, length)
      if outcomes_to is not None and parallel.is_primary():
        outcomes.write_outcomes(self.length_path(outcomes_to, length), self.task, completions, examples)
    return per[self.headline] if self.protocol is None else combine_lengths(per, self.headline)

  def cached(self, params: Any, examples: Sequence[Example], desc: str, path: pathlib.Path,
             fingerprint: dict[str, Any]) -> tuple[dict[str, float], bool]:
    """The metrics of ``examples``, each length cached in the workdir (:func:`cached_eval`, with its
    per-example outcomes): under the rollout protocol ``path`` itself, under d1's
    ``<stem>_L<length>.json``, with the length's sampler in its fingerprint. Returns ``(metrics, every
    length from the cache)``."""
    # The sampler is part of the fingerprint: a cache decoded by another sampler (e.g. one written
    # before the rollout protocol dropped the training rollouts' K/V cache) is decoded again.
    per, all_cached = {}, True
    for length, rcfg in self.rollout_configs().items():
      per[length], hit = cached_eval(
          self.length_path(path, length), dict(fingerprint, rollout=dataclasses.asdict(rcfg)),
          lambda length=length: self._decode(params, examples, desc, length), examples, self.log, self.task)
      all_cached = all_cached and hit
    return (per[self.headline] if self.protocol is None else combine_lengths(per, self.headline)), all_cached

  def describe(self) -> dict[str, Any]:
    """What the evaluations decode (``results.json``'s ``eval_protocol``)."""
    return {"protocol": self.cfg.eval.protocol, "headline_length": self.headline,
            "lengths": {str(length): {"steps": r.steps, "block_length": r.block_length, "temperature": r.temperature,
                                      "remasking": r.remasking}
                        for length, r in self.rollout_configs().items()}}
