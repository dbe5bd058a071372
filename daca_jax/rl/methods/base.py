"""What an RL method is (:class:`Method`), how its loss is checked (:func:`objective`), and the terms the
methods share (the clipped surrogate, the k3 KL, token means).

A method's loss is ``fn(logp [B, L], batch: PolicyBatch, *, <the RLConfig fields it reads>) -> (loss,
aux)``: ``logp`` are the current policy's per-token log-probs (differentiable), ``batch`` the rollout's
stop-gradient quantities, and the keyword-only arguments the only options it sees: fields of
:class:`LossOptions` (``clip_eps``, ``beta``, ``group_size``, with their defaults) or the method's own
section, defined in its module (SPG's ``spg: SPGConfig``). The learner hands each loss exactly its
fields of the composed :class:`~daca_jax.config.rl.RLConfig` (:func:`daca_jax.registry.config_fields`). Every loss
checks its inputs at trace time (:func:`daca_jax.contracts.check_policy_batch`): a field of the wrong
shape is a :class:`daca_jax.errors.ShapeError`, never a silent broadcast.

Every loss is *row-local*: the derivative with respect to row r of ``logp`` depends on the other rows
only through ``batch`` (normalisers are token, group or row counts, never the other rows' ``logp``).
Gradient accumulation relies on it (:mod:`daca_jax.rl.accumulate`); ``tests/rl/test_grad_accum.py``
checks it for every method of :data:`daca_jax.rl.methods.METHODS`.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import Any, Callable

import jax
import jax.numpy as jnp

from daca_jax.config.checks import _check_fields, _non_negative, _positive
from daca_jax.contracts import PolicyBatch, check_policy_batch
from daca_jax.errors import ConfigError
from daca_jax.registry import Registry, check_options, declared_options, registry_from, section_kwargs

# The composed config, named for annotations, not imported: it imports the methods' sections, so it sits
# above them. JobConfig is the job's TrainConfig (a method's ``check`` and ``positions`` read it), RLSection
# its ``rl`` section (a registry entry hands each loss its fields of it).
JobConfig = Any
RLSection = Any


Aux = dict[str, jax.Array]
ObjectiveFn = Callable[..., tuple[jax.Array, Aux]]
# (cfg, completion_mask float32 [B, L], credit weights float32 [B, L]) -> (the positions the loss reads,
# their weights), both float32 [B, L].
PositionsFn = Callable[[JobConfig, jax.Array, jax.Array], tuple[jax.Array, jax.Array]]


@dataclasses.dataclass(frozen=True)
class LossOptions:
  """The fields of the ``rl`` section that any method's loss may read besides its own section; their
  defaults are :class:`~daca_jax.config.rl.RLConfig`'s, and its ``validate`` checks them here.

  Attributes:
    clip_eps: ε of the ratio clip (``rl.clip_eps``), >= 0.
    beta: β of the k3 KL penalty to the reference policy (``rl.beta``), >= 0; 0 skips the reference pass.
    group_size: G, completions per prompt (``rl.group_size``), >= 2.
  """

  clip_eps: float = 0.5
  beta: float = 0.04
  group_size: int = 8

  def validate(self, prefix: str = "rl") -> "LossOptions":
    _check_fields(prefix, self)
    _positive(prefix, self, "group_size")
    if self.group_size < 2:
      raise ConfigError(f"{prefix}.group_size", self.group_size, ">= 2 (group advantages)")
    _non_negative(prefix, self, "clip_eps", "beta")
    return self


def objective(name: str, *, per_group: bool = False) -> Callable[[ObjectiveFn], ObjectiveFn]:
  """Decorator that makes ``fn(logp, batch, *, <RLConfig fields>)`` a checked loss: a direct call
  (``diffu_grpo_loss(logp, batch, clip_eps=0.2, beta=0.04)``) checks its options, the shared ones by
  :class:`LossOptions` and a section by its own ``validate`` (an unknown option is a TypeError, a bad
  value a ConfigError)
  and ``(logp, batch)`` with :func:`~daca_jax.contracts.check_policy_batch` (with ``per_group``: B a
  multiple of the ``group_size`` option, which the loss must then declare). Registers nothing: a
  method enters the library through :data:`daca_jax.rl.methods.METHODS`.

  The returned function carries ``objective_name``, ``reads`` (the RLConfig fields it sees) and
  ``run(logp, batch, options)`` (the checked call with options already validated).

  Raises:
    TypeError: ``per_group`` without a keyword-only ``group_size``.
  """

  def deco(fn: ObjectiveFn) -> ObjectiveFn:
    reads = declared_options(fn, LossOptions)
    signature = inspect.signature(fn)
    if per_group and "group_size" not in reads:
      raise TypeError(f"objective {name!r} is per_group: it must declare the keyword-only group_size")

    def run(logp: jax.Array, batch: PolicyBatch, options: dict[str, Any]) -> tuple[jax.Array, Aux]:
      bound = signature.bind(logp, batch, **options)
      bound.apply_defaults()
      check_policy_batch(logp, batch, name, bound.arguments["group_size"] if per_group else 0)
      return fn(logp, batch, **options)

    @functools.wraps(fn)
    def checked(logp: jax.Array, batch: PolicyBatch, **options: Any) -> tuple[jax.Array, Aux]:
      check_options(fn, options, fn.__name__, LossOptions)
      return run(logp, batch, options)

    checked.objective_name, checked.reads, checked.run = name, reads, run
    return checked

  return deco


@dataclasses.dataclass(frozen=True)
class Method:
  """One RL method: its loss and what the rest of the library needs to know about it.

  Attributes:
    loss: the checked loss (:func:`objective`); its ``objective_name`` is the method's ``rl.objective``.
    reads_old: the loss reads ``batch.logp_old`` (a ratio to θ_old). False (wd1, SPG): the learner
      skips the θ_old pass of the μ > 1 inner updates.
    token_advantages: the loss is a sum of per-token terms, so per-token advantages
      (``batch.token_advantages``, credits of ``token_level``) are meaningful; otherwise refused, with
      ``sequence_reason`` as the reason.
    sequence_reason: why a per-token advantage has no place in the loss (shown when it is refused).
    pass_local: the loss's gradient with respect to likelihood pass j's targets reads pass j only,
      so ``rl.pass_accum`` may accumulate it pass by pass (:mod:`daca_jax.rl.pass_accum`).
    advantage: the method's own advantage estimator (a name of
      :data:`daca_jax.rl.advantages.ADVANTAGES`) used when ``rl.advantage`` is ""; "" for d1's group mean.
    check: ``check(cfg)`` refuses the combinations of the whole config that are not meaningful for
      this method (a one-line ConfigError with the reason); it runs for every config, whatever
      ``rl.objective`` names, so it may also refuse a piece of the method's used elsewhere.
    positions: which completion positions the loss reads and their credit weights
      (:data:`PositionsFn`); None: the completion mask and the weights as they are.
    aliases: other ``rl.objective`` names of the same loss (GDPO's ``"gdpo"`` for ``"gspo"``).
  """

  loss: ObjectiveFn
  reads_old: bool = True
  token_advantages: bool = False
  sequence_reason: str = "its loss is per sequence, so a per-token advantage has no term to weight"
  pass_local: bool = False
  advantage: str = ""
  check: Callable[[JobConfig], None] | None = None
  positions: PositionsFn | None = None
  aliases: tuple[str, ...] = ()

  @property
  def name(self) -> str:
    """``rl.objective`` of this method."""
    return self.loss.objective_name

  def entry(self) -> Callable[[jax.Array, PolicyBatch, RLSection], tuple[jax.Array, Aux]]:
    """The registry entry ``entry(logp, batch, rl_cfg)``: the loss with its own fields of the validated
    section ``rl_cfg``; carries ``reads``, ``reads_old`` and ``method``."""
    loss = self.loss

    def entry(logp: jax.Array, batch: PolicyBatch, cfg: RLSection) -> tuple[jax.Array, Aux]:
      return loss.run(logp, batch, section_kwargs(cfg, loss.reads))

    entry.reads, entry.reads_old, entry.method = loss.reads, self.reads_old, self
    entry.__doc__, entry.__name__ = loss.__doc__, loss.__name__
    return entry


def registry_of(methods: tuple[Method, ...]) -> Registry[Callable[..., tuple[jax.Array, Aux]]]:
  """The ``rl.objective`` registry of ``methods``, in their order, aliases included.

  Raises:
    ValueError: two methods (or aliases) of one name.
  """
  return registry_from("objective", "rl.objective", ((m.name, m.entry()) for m in methods),
                       ((alias, m.name) for m in methods for alias in m.aliases))


def token_advantages(batch: PolicyBatch) -> jax.Array:
  """float32 [B, L] advantage of every token: ``batch.token_advantages`` when given, else the
  sequence advantage times the credit weight."""
  if batch.token_advantages is not None:
    return batch.token_advantages
  return batch.advantages[:, None] * batch.weights


def sequence_advantages_only(batch: PolicyBatch, name: str) -> None:
  """Refuses per-token advantages (``batch.token_advantages``) in the loss of a sequence-level method.

  Raises:
    ValueError: ``batch.token_advantages`` is set.
  """
  if batch.token_advantages is not None:
    raise ValueError(f"objective {name!r} works on sequence advantages; per-token advantages "
                     "(rl.credit='token_reward') need an objective that sums per-token terms")


def token_mean(x: jax.Array, mask: jax.Array) -> jax.Array:
  """float32 [] ``Σ m x / max(Σ m, 1)``."""
  return jnp.sum(x * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def clipped_surrogate(ratio: jax.Array, advantages: jax.Array, clip_low: float,
                      clip_high: float | None = None) -> tuple[jax.Array, jax.Array]:
  """PPO's clipped surrogate ``min(ρA, clip(ρ, 1 − ε_low, 1 + ε_high) A)`` (to maximise), elementwise, with
  the references' gradient (PyTorch's ``clamp`` passes the gradient on its closed interval, ``min`` splits a
  tie): ``A·∇ρ`` wherever the clip does not take over, 0 where it does. Written as ``jnp.clip`` and
  ``jnp.minimum`` it would halve a tie's gradient at each of the two ties of ρ = 1 with ε = 0 (0.625 A,
  ESPO's Countdown recipe) and at a boundary of the interval.

  Args:
    ratio: float32 array ρ (any shape); advantages: A, broadcastable to it.
    clip_low: ε_low; clip_high: ε_high (None: ε_low, the symmetric clip).
  Returns:
    (surrogate like ``ratio * advantages``, bool: the clip took over).
  """
  high = clip_low if clip_high is None else clip_high
  unclipped = ratio * advantages
  clipped = jnp.clip(ratio, 1.0 - clip_low, 1.0 + high) * advantages
  binding = clipped < unclipped  # only outside the closed interval, where the clipped term's gradient is 0
  return jnp.where(binding, jax.lax.stop_gradient(clipped), unclipped), binding


def k3_kl(logp: jax.Array, logp_ref: jax.Array) -> jax.Array:
  """Schulman's k3 estimator of KL(π_θ || π_ref) per token: ``exp(r) − r − 1`` with r = logp_ref − logp."""
  r = logp_ref - logp
  return jnp.exp(r) - r - 1.0


__all__ = ["Aux", "Method", "ObjectiveFn", "PositionsFn", "clipped_surrogate", "k3_kl", "objective", "registry_of",
           "sequence_advantages_only", "token_advantages", "token_mean"]
