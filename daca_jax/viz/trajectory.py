"""What a denoising trajectory view shows: one rollout group, rows sorted by reward.

The view is read off the :class:`~daca_jax.diffusion.rollout.Trajectory` that the learner's own rollout
(:attr:`daca_jax.rl.learner.GRPOLearner.rollout`) returns, and off the credit weights of the learner's
own assigners, so a picture shows exactly what training sees: which token was committed where, at which
step, with what confidence, and how much credit DPS / DTCA / DelTA give it. Δ_s is the per-step progress
of DPS (:func:`daca_jax.credit.dps.step_progress`). No second sampling code path.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

import jax
import numpy as np

from daca_jax.credit import CREDIT
from daca_jax.credit.dps import certainty_signal, signal_records, step_progress
from daca_jax.contracts import Trajectory, as_model_fns
from daca_jax.errors import ConfigError
from daca_jax.parallel import to_host
from daca_jax.rl.learner import GRPOLearner
from daca_jax.tasks.base import Example, Task
from daca_jax.config.train import TrainConfig

# How special ids and invisible characters are shown in a cell.
_SPECIAL_NAMES = (("eos_id", "EOS"), ("pad_id", "PAD"), ("mask_id", "MASK"), ("bos_id", "BOS"))
_VISIBLE = {" ": "␣", "\n": "⏎", "\t": "⇥", "\r": "␍"}


@dataclasses.dataclass(frozen=True)
class TrajectoryView:
  """One rollout group ready to draw; row 0 is the highest reward (ties keep rollout order).

  Attributes:
    prompt: the prompt's text.
    text: [G][L] the committed token's text at every completion position (specials as ``EOS`` ...).
    token_ids: int32 [G, L] the committed token ids.
    commit_step: int32 [G, L] the step (0..S-1) at which each position was committed.
    commit_conf: float32 [G, L] the model's probability of the committed token at its commit step.
    valid: bool [G, L] completion mask (up to and including the first EOS).
    rewards: float32 [G].
    rows: int [G] each drawn row's index in the rollout batch.
    weights: credit name -> float32 [G, L] token weights (mean 1 over valid tokens).
    step_progress: float32 [G, S] DPS's Δ_s per step, or None when the rollout recorded no certainty.
    num_steps: S, the rollout's denoising steps.
  """

  prompt: str
  text: list[list[str]]
  token_ids: np.ndarray
  commit_step: np.ndarray
  commit_conf: np.ndarray
  valid: np.ndarray
  rewards: np.ndarray
  rows: np.ndarray
  weights: dict[str, np.ndarray]
  step_progress: np.ndarray | None
  num_steps: int


def token_text(tokenizer: Any, token_id: int) -> str:
  """The text of one token id as a cell shows it: special ids by name, whitespace made visible."""
  for attr, name in _SPECIAL_NAMES:
    if getattr(tokenizer, attr, None) == token_id:
      return name
  text = tokenizer.decode([int(token_id)], stop_at_eos=False)
  shown = "".join(_VISIBLE.get(ch, ch if ch.isprintable() else f"\\x{ord(ch):02x}") for ch in text)
  return shown or "∅"


def group_view(traj: Trajectory, rewards: Any, tokenizer: Any, rows: Sequence[int], *, prompt: str = "",
               weights: Mapping[str, Any] | None = None, progress: Any = None) -> TrajectoryView:
  """The rows ``rows`` of a rollout batch as a :class:`TrajectoryView`, sorted by reward.

  Args:
    traj: the rollout (``tokens`` [B, P+L], ``commit_step`` / ``commit_conf`` / ``completion_mask``
      [B, L], ``num_model_calls`` = S).
    rewards: float [B] rewards of the batch.
    tokenizer: turns ids into text (``decode(ids, stop_at_eos=False)``, special ids as attributes).
    rows: the batch rows of one group (e.g. ``range(g * G, (g + 1) * G)``).
    prompt: the prompt's text, shown as the view's title.
    weights: credit name -> float [B, L] weights of the whole batch.
    progress: float [S, B] Δ_s of the whole batch (:func:`daca_jax.credit.dps.step_progress`), or None.
  Returns:
    The view; its arrays are the batch's rows in descending-reward order.
  """
  rows = np.asarray(rows, np.int64)
  r = np.asarray(to_host(rewards), np.float32)[rows]
  order = rows[np.argsort(-r, kind="stable")]
  completion = np.asarray(to_host(traj.completion))[order]
  return TrajectoryView(
      prompt=prompt,
      text=[[token_text(tokenizer, t) for t in row] for row in completion],
      token_ids=completion.astype(np.int32),
      commit_step=np.asarray(to_host(traj.commit_step))[order].astype(np.int32),
      commit_conf=np.asarray(to_host(traj.commit_conf), np.float32)[order],
      valid=np.asarray(to_host(traj.completion_mask))[order] > 0,
      rewards=np.asarray(to_host(rewards), np.float32)[order],
      rows=order,
      weights={k: np.asarray(to_host(v), np.float32)[order] for k, v in (weights or {}).items()},
      step_progress=None if progress is None else np.asarray(to_host(progress), np.float32)[:, order].T,
      num_steps=int(traj.num_model_calls or traj.commit_step.max() + 1))


def progress_of(traj: Trajectory, cfg: TrainConfig) -> jax.Array | None:
  """DPS's Δ_s float32 [S, B] of a rollout under ``cfg.credit``, or None when the rollout recorded
  no certainty signal (a credit that does not read it, without ``extra_records``)."""
  try:
    signal = certainty_signal(traj, cfg.credit.dps)
  except ValueError:
    return None
  return step_progress(signal, traj.commit_step, cfg.rollout, cfg.credit.dps.scope)


def check_credits(credits: Sequence[str], field: str = "--credits") -> None:
  """Refuses names that are not sequence-level credit assigners (a view grades no single token).

  Raises:
    ConfigError: naming ``field``, the name and the allowed ones.
  """
  allowed = sorted(n for n in CREDIT.names() if not CREDIT.get(n).token_level)  # weights, not token advantages
  for name in credits:
    if name not in allowed:
      raise ConfigError(field, name, f"one of the sequence-level credits {allowed}")


def credit_learners(logits_fn: Any, cfg: TrainConfig, tokenizer: Any, credits: Sequence[str], *,
                    hidden_logits_fn: Any = None) -> tuple[GRPOLearner, dict[str, GRPOLearner]]:
  """The run's learner (its rollout records what every assigner in ``credits`` and Δ_s read) and
  one learner per credit name whose assigner gives that panel's weights.

  Raises:
    ConfigError: an unknown credit name, or one whose inputs the view cannot provide (names it).
  """
  check_credits(credits)
  records = set(signal_records(dps=cfg.credit.dps))
  for name in credits:
    records |= CREDIT.get(name).records(cfg.credit)
  fns = as_model_fns(logits_fn)
  if hidden_logits_fn is None and "commit_hidden" in records and fns.graph is not None and not fns.lora:
    from daca_jax.models import make_logits_fn

    hidden_logits_fn = make_logits_fn(fns.graph, return_hidden=True)
  kwargs = dict(mask_id=tokenizer.mask_id, eos_id=tokenizer.eos_id, tokenizer=tokenizer,
                hidden_logits_fn=hidden_logits_fn)
  main = GRPOLearner(logits_fn, cfg, extra_records=frozenset(records), **kwargs)
  per_credit = {}
  for name in credits:
    if name == cfg.rl.credit:
      per_credit[name] = main
    else:
      c = dataclasses.replace(cfg, rl=dataclasses.replace(cfg.rl, credit=name))
      per_credit[name] = GRPOLearner(logits_fn, c, **kwargs)
  return main, per_credit


def rollout_views(learner: GRPOLearner, params: Any, task: Task, examples: Sequence[Example],
                  key: jax.Array, *, credit_learners_: Mapping[str, GRPOLearner] | None = None,
                  tokenizer: Any = None) -> list[TrajectoryView]:
  """Rolls out one group of ``learner.cfg.rl.group_size`` completions per example with the learner's
  own rollout, grades them with the task, and returns one view per example.

  Args:
    learner: the run's learner (e.g. from :func:`credit_learners`); its rollout is what is drawn.
    params: the policy's parameters.
    task: grades the completions (``reward``) and encodes the prompts.
    examples: the prompts to draw (one group each).
    key: the rollout's PRNG key.
    credit_learners_: credit name -> learner whose assigner gives that panel's weights (the same
      rollout is scored by each); None draws no weight panel.
    tokenizer: for the cells' text (default: the task's).
  Returns:
    One :class:`TrajectoryView` per example, in order.
  """
  g = learner.cfg.rl.group_size
  prompts = np.repeat(task.encode_prompts(list(examples)), g, axis=0)
  batch_examples = [ex for ex in examples for _ in range(g)]
  traj = learner.rollout(params, prompts, key)
  completions = task.decode_completions(np.asarray(to_host(traj.completion)))
  rewards = np.asarray(task.reward(completions, batch_examples), np.float32)
  weights = {name: lrn.assign_credit(traj, rewards, lrn.init_credit_state()).weights
             for name, lrn in (credit_learners_ or {}).items()}
  progress = progress_of(traj, learner.cfg)
  tok = tokenizer if tokenizer is not None else task.tokenizer
  return [group_view(traj, rewards, tok, range(i * g, (i + 1) * g), prompt=ex.prompt, weights=weights,
                     progress=progress) for i, ex in enumerate(examples)]
