"""Estimator study: bias, variance and gradient quality of likelihood estimators vs the exact value.

On a tiny model trained briefly (so its conditionals are far from uniform) and short completions
(L ≤ 7), the exact any-order log-likelihood ``log p(o)`` and its parameter gradient are computed by
enumeration (:func:`daca_jax.likelihood.any_order_logprob`). Each estimator's sequence estimate is the
sum of its per-token values; over R mask draws we report bias, std and RMSE against the exact value and
the cosine between the gradient of its mean and the exact gradient.
"""
from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from daca_jax.diffusion import sft_loss
from daca_jax.errors import ConfigError, DataError
from daca_jax.io_utils import read_json
from daca_jax.likelihood import LIKELIHOOD, any_order_logprob
from daca_jax.models import init_model, make_logits_fn
from daca_jax.tasks.tokenizer import ByteTokenizer
from daca_jax.config.likelihood import LikelihoodConfig
from daca_jax.likelihood.elbo import ELBOConfig
from daca_jax.likelihood.stratified import StratifiedConfig
from daca_jax.config.model import ModelConfig

LETTERS = "abcd"


@dataclasses.dataclass(frozen=True)
class EstimatorSpec:
  """One row of the study: a registered estimator and its options."""

  label: str
  name: str
  cfg: LikelihoodConfig
  passes: int  # forward passes per estimate


def default_specs(length: int) -> list[EstimatorSpec]:
  """mean-field (with / without prompt masking), coupled, SML K = 2, 4, 8 (≤ L) and L, ELBO 2 and 3,
  and the trajectory estimator (RLDF / TraceRL: each token at its own commit state; one pass per
  rollout step, here S = L)."""
  lc = LikelihoodConfig(p_mask_prompt=0.0)
  specs = [EstimatorSpec("mean_field", "mean_field", lc, 1),
           EstimatorSpec("mean_field (p_mask_prompt=0.15)", "mean_field",
                         dataclasses.replace(lc, p_mask_prompt=0.15), 1),
           EstimatorSpec("coupled", "coupled", lc, 3)]
  for k in sorted({k for k in (2, 4, 8) if k < length} | {length}):
    label = f"stratified K={k}" + (" (=L, pseudo-likelihood)" if k == length else "")
    specs.append(EstimatorSpec(label, "stratified", dataclasses.replace(lc, stratified=StratifiedConfig(num_strata=k)), k))
  for n in (2, 3):
    specs.append(EstimatorSpec(f"elbo {n} nodes", "elbo", dataclasses.replace(lc, elbo=ELBOConfig(nodes=n)), n))
  specs.append(EstimatorSpec("trajectory (S=L, sampler's order)", "trajectory",
                             dataclasses.replace(lc, trajectory_steps=length), length))
  return specs


def toy_examples(num: int, seed: int) -> tuple[list[str], list[str]]:
  """Prompt: 4 letters from 'abcd'; completion: the letters sorted, then how many 'a's (L = 5 + EOS)."""
  rng = np.random.default_rng(seed)
  prompts, targets = [], []
  for _ in range(num):
    s = "".join(rng.choice(list(LETTERS), 4))
    prompts.append(s)
    targets.append("".join(sorted(s)) + str(s.count("a")))
  return prompts, targets


def encode(tok: ByteTokenizer, prompts: Sequence[str], targets: Sequence[str], length: int) -> np.ndarray:
  rows = []
  for p, t in zip(prompts, targets):
    comp = tok.encode(t)[:length]
    comp += [tok.eos_id] * (length - len(comp))
    rows.append([tok.bos_id] + tok.encode(p) + comp)
  return np.asarray(rows, np.int32)


_WARMUP = 20  # SFT warmup steps of train_tiny_model


def train_tiny_model(model_cfg: ModelConfig, tokens: np.ndarray, prompt_len: int, steps: int,
                     seed: int = 0, batch_size: int = 64, lr: float = 2e-3) -> tuple[Callable, Any]:
  """Briefly trains the model with the masked-diffusion SFT loss; returns (logits_fn, params).

  Raises:
    ConfigError: naming ``--train_steps`` when ``steps`` does not exceed the schedule's warmup.
  """
  if steps <= _WARMUP:
    raise ConfigError("--train_steps", steps, f"an int > {_WARMUP} (the SFT schedule warms up for {_WARMUP} steps)")
  gd, params = init_model(model_cfg, seed)
  logits_fn = make_logits_fn(gd)
  opt = optax.adamw(optax.warmup_cosine_decay_schedule(0.0, lr, _WARMUP, steps), weight_decay=0.01)
  state = opt.init(params)

  @jax.jit
  def step(params, state, batch, key):
    (loss, _), g = jax.value_and_grad(
        lambda p: sft_loss(logits_fn, p, batch, prompt_len, key, model_cfg.mask_token_id), has_aux=True)(params)
    upd, state = opt.update(g, state, params)
    return optax.apply_updates(params, upd), state, loss

  rng = np.random.default_rng(seed)
  for i in range(steps):
    batch = tokens[rng.integers(0, len(tokens), batch_size)]
    params, state, _ = step(params, state, batch, jax.random.PRNGKey(i))
  return logits_fn, params


def _cos(a: Any, b: Any) -> float:
  va = jnp.concatenate([x.ravel() for x in jax.tree.leaves(a)])
  vb = jnp.concatenate([x.ravel() for x in jax.tree.leaves(b)])
  return float(jnp.dot(va, vb) / (jnp.linalg.norm(va) * jnp.linalg.norm(vb) + 1e-30))


def study(logits_fn: Callable, params: Any, tokens: jax.Array, prompt_len: int, mask_id: int,
          specs: Sequence[EstimatorSpec], draws: int = 32, seed: int = 0,
          commit_step: jax.Array | None = None) -> list[dict[str, Any]]:
  """Bias / std / RMSE of each estimator's ``Σ_i logp_i`` vs the exact ``log p(o)``, and gradient cosine.

  Args:
    tokens: int32 [B, P+L] with L ≤ 12.
    draws: R mask draws per estimator.
    commit_step: int32 [B, L] the sampler's commit steps (needed by the trajectory estimator; its
      value is the log-probability of the sampler's own unmasking order, a lower bound of
      ``log p(o)`` in expectation over orders, and deterministic without prompt masking).
  Returns:
    One dict per spec: label, passes, bias, std, rmse (nats per sequence), grad_cosine, exact_mean.
  """
  exact_fn = lambda p: any_order_logprob(logits_fn, p, tokens, prompt_len, mask_id=mask_id)
  exact, exact_grad = jax.jit(lambda p: (exact_fn(p), jax.grad(lambda q: jnp.sum(exact_fn(q)))(p)))(params)
  exact = np.asarray(exact)
  keys = jax.random.split(jax.random.PRNGKey(seed), draws)
  rows = []
  for spec in specs:
    est = LIKELIHOOD.get(spec.name)

    def seq_estimates(p, spec=spec, est=est):  # [R, B]
      return jax.lax.map(lambda k: jnp.sum(est(logits_fn, p, tokens, prompt_len, k, spec.cfg, mask_id=mask_id,
                                                  commit_step=commit_step).contributions(), axis=-1), keys)

    values, grad = jax.jit(lambda p: (seq_estimates(p), jax.grad(
        lambda q: jnp.sum(jnp.mean(seq_estimates(q), axis=0)))(p)))(params)
    values = np.asarray(values, np.float64)
    err = values - exact[None, :]
    rows.append({"label": spec.label, "passes": spec.passes, "bias": float(err.mean()),
                 "std": float(values.std(axis=0).mean()), "rmse": float(np.sqrt((err ** 2).mean())),
                 "grad_cosine": _cos(grad, exact_grad), "exact_mean": float(exact.mean())})
  return rows


ROW_FIELDS = ("label", "passes", "bias", "std", "rmse", "grad_cosine")


def read_results(path: str | pathlib.Path) -> list[dict[str, Any]]:
  """The rows of a results file: the study's own ``estimator_study.json`` (a list of rows), or an object
  holding them under ``"rows"`` beside the run's provenance (``docs/results/estimator_study.json``).

  Raises:
    FileNotFoundError: no such file.
    DataError: not JSON, neither form, or a row without one of :data:`ROW_FIELDS` (named).
  """
  data = read_json(path, fix="give an estimator_study.json (experiments/estimator_study.py)", kind=None)
  rows = data.get("rows") if isinstance(data, dict) else data
  if not isinstance(rows, list) or not rows:
    raise DataError(f"{path}: not an estimator study's results (expected a list of rows, or an object with "
                    "a 'rows' list)")
  for i, r in enumerate(rows):
    missing = [k for k in ROW_FIELDS if not isinstance(r, dict) or k not in r]
    if missing:
      raise DataError(f"{path}: rows[{i}] lacks {missing}")
  return rows


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
  lines = ["| estimator | passes | bias | std | RMSE | grad cosine |", "|---|---|---|---|---|---|"]
  for r in rows:
    lines.append(f"| {r['label']} | {r['passes']} | {r['bias']:+.3f} | {r['std']:.3f} | {r['rmse']:.3f} | "
                 f"{r['grad_cosine']:.3f} |")
  return "\n".join(lines)


def plot(rows: Sequence[dict[str, Any]], png_path: str, title: str = "") -> None:
  """Two bar panels: RMSE (nats) and gradient cosine per estimator."""
  from matplotlib.backends.backend_agg import FigureCanvasAgg
  from matplotlib.figure import Figure

  fig = Figure(figsize=(11, 4.5))
  FigureCanvasAgg(fig)
  labels = [r["label"] for r in rows]
  for i, (key, name) in enumerate((("rmse", "RMSE vs exact log p(o) [nats]"), ("grad_cosine", "cosine(∇ estimate, ∇ exact)"))):
    ax = fig.add_subplot(1, 2, i + 1)
    ax.barh(range(len(rows)), [r[key] for r in rows], color="tab:blue" if i == 0 else "tab:green")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels if i == 0 else [""] * len(rows), fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(name)
  if title:
    fig.suptitle(title)
  fig.tight_layout()
  fig.savefig(png_path, dpi=110)
