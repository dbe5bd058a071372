"""How close each credit assigner's per-token advantages come to a task's own per-token credit.

GRPO's update is ``Σ_{b,t} e[b, t] ∇ log π(token_{b,t})`` with ``e`` the effective advantage of each
token: the sequence advantage times the credit weight (``A_b · w[b, t]``: uniform, DPS, DTCA, DelTA)
or a per-token advantage (``position_value``, ``token_reward``). On a task that grades every token
(4x4 Sudoku: each blank cell right or wrong), ``token_reward`` gives the oracle ``e*``: a cell's
correctness minus its group's mean for that cell, 0 on the copied givens and the EOS padding. An
assigner can only help as far as its ``e`` moves towards ``e*``; this module measures that on the
same rollout batches from one policy (e.g. the SFT warm start), with no update:

* ``oracle_cos``: cosine between ``e`` and ``e*`` over every completion token of all batches (the
  cosine of the two updates if the tokens' score gradients were orthonormal);
* ``cell_sign_agreement``: among blank-cell tokens where both are non-zero, the fraction where
  ``e`` and ``e*`` have the same sign (uniform credit: whether the sequence's advantage has the
  sign of the cell's own);
* ``off_cell_share``: the share of ``Σ |e|`` on tokens the oracle gives no credit (givens, EOS,
  padding): signal spent where the task says there is none.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from daca_jax.errors import ConfigError, ShapeError
from daca_jax.models import make_logits_fn
from daca_jax.rl.learner import GRPOLearner
from daca_jax.studies.alignment_study import arm_config
from daca_jax.tasks.base import Example, Task
from daca_jax.config.train import TrainConfig

ORACLE = {"rl.credit": "token_reward"}

# Assigners compared with the oracle (every one on diffu-GRPO's group-mean advantages).
DEFAULT_ARMS: dict[str, dict[str, Any]] = {
    "uniform (d1)": {"rl.credit": "uniform"},
    "dps": {"rl.credit": "dps"},
    "dtca": {"rl.credit": "dtca"},
    "delta": {"rl.credit": "delta"},
    "position_value": {"rl.credit": "position_value"},
    "uniform + drop_agreed": {"rl.credit": "uniform", "credit.drop_agreed": True},
    "dps + drop_agreed": {"rl.credit": "dps", "credit.drop_agreed": True},
    # Signed contrasts (rl.credit="contrast"): a token's share can take the opposite sign to A.
    "contrast: commit_conf vs row": {"rl.credit": "contrast"},
    "contrast: commit_conf vs position": {"rl.credit": "contrast", "credit.contrast.baseline": "position"},
    "contrast: commit_conf vs position + drop_agreed": {"rl.credit": "contrast", "credit.contrast.baseline": "position",
                                                        "credit.drop_agreed": True},
    "contrast: dps vs position + drop_agreed": {"rl.credit": "contrast", "credit.contrast.signal": "dps",
                                                "credit.contrast.baseline": "position", "credit.drop_agreed": True},
    "position_value + contrast: commit_conf vs position": {"rl.credit": "contrast", "credit.contrast.base": "position_value",
                                                           "credit.contrast.baseline": "position"},
    "position_value + contrast (alpha 0.5)": {"rl.credit": "contrast", "credit.contrast.base": "position_value",
                                              "credit.contrast.baseline": "position", "credit.contrast.alpha": 0.5},
    "token_reward (oracle)": dict(ORACLE),
}


def effective_advantages(weights: Any, token_advantages: Any, advantages: Any) -> np.ndarray:
  """float64 [B, L] per-token advantage the objective uses (:func:`daca_jax.rl.methods.base.token_advantages`):
  ``token_advantages`` when the assigner gives them, else ``advantages[:, None] * weights``.

  Raises:
    ShapeError: weights not [B, L] or advantages not [B].
  """
  w = np.asarray(weights, np.float64)
  if token_advantages is not None:
    return np.asarray(token_advantages, np.float64)
  a = np.asarray(advantages, np.float64)
  if w.ndim != 2 or a.shape != (w.shape[0],):
    raise ShapeError("advantages", a.shape, f"[B] = ({w.shape[0] if w.ndim else '?'},) for weights of shape "
                     f"{w.shape} ([B, L])")
  return a[:, None] * w


def alignment_stats(effective: np.ndarray, oracle: np.ndarray, cell_mask: np.ndarray,
                    completion_mask: np.ndarray) -> dict[str, float]:
  """``oracle_cos``, ``cell_sign_agreement`` and ``off_cell_share`` (module docstring) of [N, L] arrays.

  Args:
    effective: an assigner's per-token advantages.
    oracle: the oracle's per-token advantages (0 off the cells).
    cell_mask: 1 on the tokens the oracle grades (the blank cells a completion reaches).
    completion_mask: 1 on completion tokens (EOS padding included, as the objectives count them).
  Raises:
    ShapeError: the four arrays differ in shape.
  """
  arrays = [np.asarray(x, np.float64) for x in (effective, oracle, cell_mask, completion_mask)]
  for name, x in zip(("oracle", "cell_mask", "completion_mask"), arrays[1:]):
    if x.shape != arrays[0].shape:
      raise ShapeError(name, x.shape, f"{arrays[0].shape}, the shape of the effective advantages [N, L]")
  e, o, cell, valid = arrays
  e, o = e * valid, o * valid
  ne, no = np.linalg.norm(e), np.linalg.norm(o)
  both = (cell * valid > 0) & (e != 0) & (o != 0)
  total = np.abs(e).sum()
  return {"oracle_cos": float((e * o).sum() / (ne * no)) if ne > 0 and no > 0 else 0.0,
          "cell_sign_agreement": float(np.mean(np.sign(e[both]) == np.sign(o[both]))) if both.any() else 0.0,
          "off_cell_share": float(np.abs(e * (1.0 - cell)).sum() / total) if total > 0 else 0.0}


def run_credit_alignment(cfg: TrainConfig, graphdef: Any, params: Any, task: Task, examples: Sequence[Example], *,
                         arms: Mapping[str, Mapping[str, Any]] = DEFAULT_ARMS, num_batches: int = 8,
                         seed: int = 0, log: Callable[[str], None] = print) -> dict[str, Any]:
  """Every arm's per-token advantages on the same ``num_batches`` rollout batches of ``cfg.rl`` size.

  Args:
    cfg: the run's config (rollout, credit options, ``rl.prompts_per_step`` × ``rl.group_size``).
    graphdef, params: the policy (:func:`daca_jax.models.init_model`'s split), e.g. the SFT warm start.
    task: a task with ``token_rewards`` (the oracle); examples: its prompts.
    arms: name -> ``{"section.field": value}`` overrides of ``cfg``.
    num_batches: rollout batches (>= 1); stateful assigners (DTCA) carry their state across them.
  Returns:
    ``{"arms": {name: stats}, "num_batches", "batch_rollouts", "reward_mean"}``; stats as
    :func:`alignment_stats` over all batches, plus ``off_cell_token_share`` (completion tokens the
    oracle does not grade), the same for every arm.
  Raises:
    ConfigError: ``num_batches`` < 1, no arms, a task without token rewards, or a bad override.
  """
  if num_batches < 1:
    raise ConfigError("num_batches", num_batches, "an int >= 1")
  if not arms:
    raise ConfigError("arms", arms, "at least one arm")
  if not getattr(task, "has_token_rewards", False):
    raise ConfigError("task.name", cfg.task.name, "a task that grades every token (token_rewards), e.g. sudoku4x4")
  rl, tok = cfg.rl, task.tokenizer
  if len(examples) < rl.prompts_per_step:
    raise ConfigError("examples", len(examples), f"at least rl.prompts_per_step = {rl.prompts_per_step} prompts")
  logits_fn = make_logits_fn(graphdef, logprob_chunk=cfg.model.logprob_chunk)
  hidden_fn = make_logits_fn(graphdef, return_hidden=True)
  make = lambda c, **kw: GRPOLearner(logits_fn, c, mask_id=cfg.model.mask_token_id, eos_id=tok.eos_id,
                                     tokenizer=tok, hidden_logits_fn=hidden_fn, **kw)
  learners = {name: make(arm_config(cfg, ov)) for name, ov in arms.items()}
  oracle = make(arm_config(cfg, ORACLE))
  # One sampler records what every assigner reads; records change no sampled token.
  roller = make(arm_config(cfg, {"rl.credit": "uniform"}),
                extra_records=("step_conf", "step_entropy", "commit_hidden"))
  states = {name: lrn.init_credit_state() for name, lrn in learners.items()}
  prompts_all = task.encode_prompts(list(examples))
  key = jax.random.PRNGKey(seed)
  parts: dict[str, list[np.ndarray]] = {name: [] for name in arms}
  oracle_parts, cells, valids, rewards_seen = [], [], [], []
  for i in range(num_batches):
    idx = np.random.default_rng([seed, i]).choice(len(examples), rl.prompts_per_step, replace=False)
    prompts = np.repeat(prompts_all[idx], rl.group_size, axis=0)
    batch_examples = [examples[j] for j in idx for _ in range(rl.group_size)]
    traj = roller.rollout(params, prompts, jax.random.fold_in(key, i))
    completion = np.asarray(traj.completion)
    rewards = jnp.asarray(task.reward(task.decode_completions(completion), batch_examples), jnp.float32)
    token_rewards = task.token_rewards(completion, batch_examples)
    rewards_seen.append(float(jnp.mean(rewards)))
    o = oracle.assign_credit(traj, rewards, oracle.init_credit_state(), token_rewards)
    oracle_parts.append(effective_advantages(o.weights, o.token_advantages, None))
    cells.append(np.asarray(token_rewards[1]) * np.asarray(traj.completion_mask))
    valids.append(np.asarray(traj.completion_mask))
    for name, lrn in learners.items():
      out = lrn.assign_credit(traj, rewards, states[name], token_rewards if lrn.credit.needs_token_rewards else None)
      if out.state is not None:
        states[name] = out.state
      adv = None if out.token_advantages is not None else lrn.advantages(rewards)
      parts[name].append(effective_advantages(out.weights, out.token_advantages, adv))
    log(f"batch {i + 1}/{num_batches}: reward {float(jnp.mean(rewards)):.3f}")
  oracle_all, cell_all, valid_all = (np.concatenate(x) for x in (oracle_parts, cells, valids))
  off_tokens = float(((1.0 - cell_all) * valid_all).sum() / max(valid_all.sum(), 1.0))
  results = {name: dict(alignment_stats(np.concatenate(parts[name]), oracle_all, cell_all, valid_all),
                        off_cell_token_share=off_tokens) for name in arms}
  return {"arms": results, "num_batches": num_batches, "batch_rollouts": rl.prompts_per_step * rl.group_size,
          "reward_mean": float(np.mean(rewards_seen))}


def markdown(results: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> str:
  """Table: one row per arm; with several results (seeds) each cell lists every value."""
  results = [results] if isinstance(results, Mapping) else list(results)
  cols = ("oracle_cos", "cell_sign_agreement", "off_cell_share")
  lines = ["| credit | " + " | ".join(cols) + " |", "|---" * (1 + len(cols)) + "|"]
  for name in results[0]["arms"]:
    cells = [" / ".join(f"{r['arms'][name][c]:+.3f}" for r in results) for c in cols]
    lines.append(f"| {name} | " + " | ".join(cells) + " |")
  return "\n".join(lines)


__all__ = ["DEFAULT_ARMS", "ORACLE", "alignment_stats", "effective_advantages", "markdown", "run_credit_alignment"]
