"""Per-pass gradient accumulation (``rl.pass_accum``): an update's gradient one likelihood pass at a
time, in memory constant in the number of passes — BGPO's per-sample back-propagation, offered to
every pass-local objective and every estimator with a per-pass form.

Why it is exact. A multi-pass estimator scores the completion in S independent forward passes (BGPO's
n_t Monte-Carlo samples, SML's K strata, GDPO's quadrature nodes); its targets are context-major,
``logp[:, j·L + i]`` from pass j. An objective is *pass-local* when the derivative of its loss with
respect to pass j's targets depends on the other passes' log-probs only through stop-gradient fields
(as *row-local*, :mod:`daca_jax.rl.accumulate`, is for rows): the token-level objectives (each target's
term reads its own log-prob; normalisers are mask counts) and BGPO's bound (each sample's term reads
that sample) are; GSPO/GDPO's exp of a sequence sum over every pass is not. For a pass-local loss the
gradient is the sum over j of the gradient of the loss in which pass j's targets are live and the
others constant, so

    grads = Σ_j ∇_θ loss(live_j(θ)),   live_j = pass j's log-probs on its targets, constants elsewhere,

computed in a ``lax.scan`` over j whose step runs pass j's forward and backward: what a step keeps
dies with it (JAX's form of BGPO's "backward per sample, graph freed"). Cost per inner update: S
forward + S backward passes, as the one-shot gradient (no rematerialisation), plus S no-gradient
passes for θ_old's log-probs after the first inner update and S for θ_ref's (β > 0), as there.

At the first inner update (θ = θ_old) pass j's θ_old log-probs are its own stop-gradient values, read
in its own step: no θ_old pass. The metrics are the objective's aux on the whole live log-probs,
collected pass by pass.

Refused up front (:func:`check_pass_accum`): objectives that are not pass-local (GSPO/GDPO), BGPO
over passes that are not whole samples (SML's strata), estimators without a per-pass form, ``elbo_terms="summed"`` (it sums the passes into each token), advantages that read the
KL (REINFORCE++). With ``rl.grad_accum > 1`` each micro-batch is differentiated pass by pass
(:func:`daca_jax.rl.accumulate.make_accumulated_grad`). Under ``parallel.strategy="pmap"`` each device
scores its rows of every pass, keyed by row (:func:`daca_jax.parallel.shard_rows`), as the one-shot
estimator there.
"""
from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

from daca_jax.config.train import TrainConfig
from daca_jax.contracts import ParamSplit, PolicyBatch, TokenScores, Trajectory, objective_inputs, objective_states
from daca_jax.errors import ConfigError
from daca_jax.rl.advantages import ADVANTAGES, AdvantageEstimator, advantage_name
from daca_jax.rl.methods import method, names_where, scored_positions

# (params, traj, key, pass_index int32 []) -> (TokenScores with only that pass's log-probs, bool [B, S·L]
# its targets)
PassScoresFn = Callable[[Any, Trajectory, jax.Array, jax.Array], tuple[TokenScores, jax.Array]]



def check_pass_accum(cfg: TrainConfig) -> None:
  """Refuses ``rl.pass_accum`` where it is not exact or not supported (one line, with the reason).

  Raises:
    ConfigError: see the module docstring.
  """
  from daca_jax.likelihood import PASSES

  rl = cfg.rl
  if not rl.pass_accum:
    return
  if not method(rl.objective).pass_local:
    raise ConfigError("rl.pass_accum", True, f"False with rl.objective={rl.objective!r}: its loss couples the "
                      f"passes (not a sum of per-pass terms); pass-local objectives: {names_where('pass_local')}")
  if rl.likelihood not in PASSES:
    raise ConfigError("rl.pass_accum", True, f"False with rl.likelihood={rl.likelihood!r}: it has no per-pass "
                      f"form; estimators with one: {sorted(PASSES)}")
  if cfg.likelihood.elbo_terms != "per_target":
    raise ConfigError("rl.pass_accum", True, "False with likelihood.elbo_terms='summed' (it sums every pass "
                      "into each token's term)")
  if ADVANTAGES.get(advantage_name(rl.objective, rl.advantage, rl.normalize_adv_std)).needs_kl:
    raise ConfigError("rl.pass_accum", True, "False with a KL-shaped advantage (REINFORCE++ reads every pass's "
                      "KL before any gradient)")


def make_pass_accumulated_grad(pass_scores: PassScoresFn, num_passes: int, objective: Callable[..., Any],
                               advantage: AdvantageEstimator, cfg: TrainConfig,
                               param_split: ParamSplit | None = None) -> Callable[..., Any]:
  """``grad(params, ref_params, traj, rewards, weights, token_adv, key, old_params=None,
  advantages=None) -> (grads, aux)``, the arguments and results of
  :func:`daca_jax.rl.accumulate.make_accumulated_grad`'s, accumulated over the S passes.

  Args:
    pass_scores: the estimator's per-pass form (:mod:`daca_jax.likelihood.passes`) on a rollout.
    num_passes: S.
    objective: ``OBJECTIVES[rl.objective]``, pass-local (module docstring).
    advantage: ``ADVANTAGES[...]`` (not KL-reading).
    cfg: the validated config.
    param_split: the trainable part (LoRA's adapters); the rest of the gradient is zeros.
  """
  rl = cfg.rl
  elbo_terms = cfg.likelihood.elbo_terms
  trainable = param_split.trainable if param_split is not None else (lambda p: p)
  replace = param_split.replace if param_split is not None else (lambda p, t: t)
  passes = jnp.arange(num_passes, dtype=jnp.int32)

  def grad(params: Any, ref_params: Any, traj: Trajectory, rewards: jax.Array, weights: jax.Array,
           token_adv: jax.Array | None, key: jax.Array, old_params: Any = None,
           advantages: jax.Array | None = None) -> tuple[Any, dict[str, jax.Array]]:
    adv = advantage(rewards, rl.group_size) if advantages is None else advantages

    def inputs(scores: TokenScores):
      """(logp, mask, weights, commit_now, token advantages) of the objective, [B, S·L] each."""
      return objective_inputs(scores, *scored_positions(cfg, traj.completion_mask, weights), token_adv, elbo_terms)

    structure = jax.eval_shape(lambda: pass_scores(params, traj, key, passes[0])[0])  # no computation
    states = objective_states(structure, elbo_terms)
    shapes = jax.eval_shape(lambda: inputs(pass_scores(params, traj, key, passes[0])[0]))
    zeros = lambda s: jnp.zeros(s.shape, s.dtype)

    def sweep(prm: Any) -> jax.Array:
      """float32 [B, S·L] the whole log-probs under ``prm``, pass by pass, no gradient."""
      def body(acc, j):
        return acc + jax.lax.stop_gradient(inputs(pass_scores(prm, traj, key, j)[0])[0]), None
      return jax.lax.scan(body, zeros(shapes[0]), passes)[0]

    old_all = None if old_params is None else sweep(old_params)
    ref_all = sweep(ref_params) if rl.beta > 0 else None

    def policy_batch(fields, old: jax.Array) -> PolicyBatch:
      _, mask, w, commit_now, tok = fields
      return PolicyBatch(logp_old=old, logp_ref=old if ref_all is None else ref_all, advantages=adv, weights=w,
                         mask=mask, rewards=rewards, commit_now=commit_now, token_advantages=tok,
                         num_states=states)

    def step(carry, j):
      acc, live_sum, _ = carry

      def loss(t: Any):
        scores, here = pass_scores(replace(params, t), traj, key, j)
        fields = inputs(scores)
        # The other passes are constants: θ_old's log-probs, or (θ_old = θ, not yet known) zeros whose
        # θ_old value is zero too; a pass-local loss's gradient w.r.t. pass j does not read them.
        filler = 0.0 if old_all is None else old_all
        live = jnp.where(here, fields[0], filler)
        old = jnp.where(here, jax.lax.stop_gradient(fields[0]), filler) if old_all is None else old_all
        own = jax.lax.stop_gradient(jnp.where(here, fields[0], 0.0))
        return objective(live, policy_batch(fields, old), rl)[0], (own, fields[1:])

      (_, (own, fields)), g = jax.value_and_grad(loss, has_aux=True)(trainable(params))
      acc = jax.tree.map(lambda a, x: a + x.astype(jnp.float32), acc, g)
      return (acc, live_sum + own, fields), None

    acc0 = jax.tree.map(lambda x: jnp.zeros(x.shape, jnp.float32), trainable(params))
    carry0 = (acc0, zeros(shapes[0]), jax.tree.map(zeros, shapes[1:]))
    (acc, live_all, fields), _ = jax.lax.scan(step, carry0, passes)
    old = jax.lax.stop_gradient(live_all) if old_all is None else old_all
    value, aux = objective(live_all, policy_batch((live_all, *fields), old), rl)
    grads_t = jax.tree.map(lambda a, x: a.astype(x.dtype), acc, trainable(params))
    return replace(jax.tree.map(jnp.zeros_like, params), grads_t), dict(aux, loss=value)

  return grad


__all__ = ["check_pass_accum", "make_pass_accumulated_grad"]
