"""Credit-assigner interface and registry.

A credit assigner maps a rollout's :class:`~daca_jax.diffusion.Trajectory` to token weights
``w [B, L] float32`` (stop-gradient, 0 outside ``completion_mask``) that multiply the advantage of
each completion token. Weights are computed once per rollout and reused for all inner iterations.

Some assigners need more than the trajectory: DelTA the sequence advantages, DTCA the token
categories of a :class:`~daca_jax.credit.taggers.TokenTagger` and a state carried across updates
(its entropy baseline). They get these through :class:`CreditInputs` and return a
:class:`CreditOutput`.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import flax.struct
import jax
import jax.numpy as jnp

from daca_jax.contracts import Trajectory, check_optional_shape, check_trajectory
from daca_jax.errors import ShapeError
from daca_jax.registry import Registry, check_options, config_fields, declared_options, registry_from, section_kwargs
from daca_jax.config.rollout import RolloutConfig

# The composed ``credit`` section (:class:`~daca_jax.config.credit.CreditConfig`), named for annotations, not
# imported: it imports the algorithms' sections, so it sits above them.
CreditSection = Any


# Names of the optional Trajectory records an assigner can ask the rollout for.
RECORDS = ("step_conf", "step_entropy", "commit_hidden")


@flax.struct.dataclass
class CreditInputs:
  """What an assigner may read besides the trajectory.

  Attributes:
    advantages: float32 [B] sequence advantages (group-normalised as the learner computes them).
    categories: int32 [B, L] token category ids from the configured tagger, or None.
    state: the assigner's state carried across updates (a pytree), or None when stateless.
    token_rewards: float32 [B, L] rewards the task defines per completion token (e.g. each Sudoku
      cell's correctness), or None.
    token_reward_mask: float32 [B, L], 1 where ``token_rewards`` is defined.
    group_size: G (static): the rollouts of a prompt are G adjacent rows.
  """

  advantages: jax.Array | None = None
  categories: jax.Array | None = None
  state: Any = None
  token_rewards: jax.Array | None = None
  token_reward_mask: jax.Array | None = None
  group_size: int = flax.struct.field(pytree_node=False, default=0)


@flax.struct.dataclass
class CreditOutput:
  """What an assigner returns.

  Attributes:
    weights: float32 [B, L] token weights multiplying the sequence advantage.
    state: the next state, or None.
    metrics: scalars to log.
    token_advantages: float32 [B, L] per-token advantages that replace ``A_b · w`` (assigners built
      on task-defined token rewards), or None. Only token-level objectives accept them.
  """

  weights: jax.Array
  state: Any = None
  metrics: dict[str, jax.Array] = flax.struct.field(default_factory=dict)
  token_advantages: jax.Array | None = None


CreditFn = Callable[..., Any]


def check_credit_inputs(traj: Trajectory, rollout_cfg: RolloutConfig,
                        inputs: CreditInputs | None = None) -> tuple[int, int]:
  """Checks an assigner's inputs at trace time: the trajectory against ``rollout_cfg``
  (:func:`daca_jax.contracts.check_trajectory`: ``gen_length``, ``steps``) and every field of
  ``inputs`` against the trajectory's ``[B, L]``.

  Returns:
    (B, L).
  Raises:
    ShapeError: naming the field, the shape found and the shape expected (e.g. a ``[B, 1]``
      advantage, or ``step_conf`` of a rollout with other ``steps`` than ``rollout_cfg``).
  """
  b, length = check_trajectory(traj, rollout_cfg)
  if inputs is None:
    return b, length
  check_optional_shape("inputs.advantages", inputs.advantages, (b,), "[B]: one advantage per sequence")
  rows = "[B, L] like the trajectory's completion"
  for attr in ("categories", "token_rewards", "token_reward_mask"):
    check_optional_shape(f"inputs.{attr}", getattr(inputs, attr), (b, length), rows)
  if inputs.group_size and b % inputs.group_size:
    raise ShapeError("trajectory.tokens", tuple(traj.tokens.shape),
                     f"B a multiple of inputs.group_size={inputs.group_size} (groups of G adjacent rows)")
  return b, length


def _no_records() -> frozenset[str]:
  return frozenset()


@dataclasses.dataclass(frozen=True)
class CreditAssigner:
  """A registered credit assigner.

  The assigner's functions declare the :class:`~daca_jax.config.credit.CreditConfig` sections they read (each
  defined beside its assigner, and given as the parameter's default) as
  keyword-only parameters named after them (DPS: ``dps``; DTCA, built on DPS's scores: ``dtca`` and
  ``dps``; uniform: none), and get only those (:func:`daca_jax.registry.config_fields`); the
  methods below take the whole ``credit`` section and hand each function its part.

  Attributes:
    fn: ``(trajectory, rollout_cfg, inputs, **sections) -> w [B, L]`` or a :class:`CreditOutput`.
    reads: the CreditConfig sections ``fn`` reads.
    records_fn: ``(**sections) -> frozenset`` of the :data:`RECORDS` the rollout must produce.
    needs_categories: the assigner reads ``inputs.categories``.
    needs_advantages: the assigner reads ``inputs.advantages``.
    init_state_fn: ``(num_categories, **sections) -> state`` for stateful assigners, else None.
    needs_token_rewards: the assigner reads ``inputs.token_rewards`` (the task must define them) and
      returns ``token_advantages``.
    token_level: the assigner returns ``token_advantages`` (per-token advantages replacing ``A_b · w``),
      which only the methods with ``Method.token_advantages`` accept (:mod:`daca_jax.rl.methods`).
  """

  fn: CreditFn
  reads: tuple[str, ...] = ()
  records_fn: Callable[..., frozenset[str]] = _no_records
  needs_categories: bool = False
  needs_advantages: bool = False
  init_state_fn: Callable[..., Any] | None = None
  needs_token_rewards: bool = False
  token_level: bool = False

  @property
  def stateful(self) -> bool:
    """The assigner carries a state across updates (:meth:`init_state`)."""
    return self.init_state_fn is not None

  def records(self, cfg: CreditSection) -> frozenset[str]:
    """The trajectory records (:data:`RECORDS`) the rollout must produce for this assigner."""
    return frozenset(self.records_fn(**section_kwargs(cfg, config_fields(self.records_fn))))

  def init_state(self, cfg: CreditSection, num_categories: int) -> Any:
    """The initial state of a stateful assigner.

    Raises:
      ValueError: the assigner is stateless.
    """
    if self.init_state_fn is None:
      raise ValueError("this credit assigner is stateless: it has no initial state")
    kwargs = section_kwargs(cfg, config_fields(self.init_state_fn))
    return self.init_state_fn(num_categories, **kwargs)

  def assign(self, traj: Trajectory, cfg: CreditSection, rollout_cfg: RolloutConfig,
             inputs: CreditInputs | None = None) -> CreditOutput:
    """Runs the assigner on its own sections of ``cfg``; weights and state are stop-gradient.

    Raises:
      ValueError: a required input (advantages, categories, state) is missing.
      ShapeError: the trajectory disagrees with ``rollout_cfg`` or an input has the wrong shape
        (:func:`check_credit_inputs`).
    """
    inputs = CreditInputs() if inputs is None else inputs
    check_credit_inputs(traj, rollout_cfg, inputs)
    if self.needs_advantages and inputs.advantages is None:
      raise ValueError("this credit assigner needs the sequence advantages (CreditInputs.advantages)")
    if self.needs_categories and inputs.categories is None:
      raise ValueError("this credit assigner needs token categories (CreditInputs.categories) from a "
                       "TokenTagger; build the learner with a tokenizer")
    if self.token_level and inputs.group_size < 1:
      raise ValueError("this credit assigner needs the group size (CreditInputs.group_size)")
    if self.needs_token_rewards and (inputs.token_rewards is None or inputs.token_reward_mask is None
                                     or inputs.group_size < 1):
      raise ValueError("this credit assigner needs the task's token rewards (CreditInputs.token_rewards, "
                       "token_reward_mask and group_size)")
    if self.stateful and inputs.state is None:
      raise ValueError("this credit assigner is stateful: pass CreditInputs.state (init_state(...))")
    out = self.fn(traj, rollout_cfg, inputs, **section_kwargs(cfg, self.reads))
    if not isinstance(out, CreditOutput):
      out = CreditOutput(weights=out)
    return jax.lax.stop_gradient(out)

  def __call__(self, traj: Trajectory, cfg: CreditSection, rollout_cfg: RolloutConfig,
               inputs: CreditInputs | None = None) -> jax.Array:
    """Token weights float32 [B, L] (see :meth:`assign`)."""
    return self.assign(traj, cfg, rollout_cfg, inputs).weights


def credit_assigner(name: str, records: Callable[..., frozenset[str]] | None = None, *,
                    needs_categories: bool = False, needs_advantages: bool = False,
                    init_state: Callable[..., Any] | None = None,
                    needs_token_rewards: bool = False, token_level: bool = False):
  """Decorator making ``fn(traj, rollout_cfg, inputs=None, *, <sections>)`` credit assigner ``name``
  (``records`` and ``init_state`` declare their sections the same way; fields as in :class:`CreditAssigner`).
  It registers nothing: the registry ``CREDIT`` is built from the list :data:`daca_jax.credit.ASSIGNERS`
  (:func:`registry_of`).

  Returns ``fn`` with its inputs checked (:func:`check_credit_inputs`), so that a direct call
  (``dps_credit(traj, rollout_cfg, dps=DPSConfig(alpha=1.0))``) is checked as
  :meth:`CreditAssigner.assign` is, carrying ``credit_name`` and ``assigner`` (the :class:`CreditAssigner`).
  """

  def deco(fn: CreditFn) -> CreditFn:
    declared_options(records or _no_records)  # a records / init_state option must be a section too
    if init_state is not None:
      declared_options(init_state)
    assigner = CreditAssigner(fn, declared_options(fn), records or _no_records, needs_categories,
                              needs_advantages, init_state, needs_token_rewards, token_level or needs_token_rewards)

    @functools.wraps(fn)
    def checked(traj: Trajectory, rollout_cfg: RolloutConfig, inputs: CreditInputs | None = None,
                **sections: Any):
      check_credit_inputs(traj, rollout_cfg, inputs)
      check_options(fn, sections, fn.__name__)
      return fn(traj, rollout_cfg, inputs, **sections)

    checked.credit_name, checked.assigner = name, assigner
    return checked

  return deco


def registry_of(assigners: tuple[CreditFn, ...]) -> Registry[CreditAssigner]:
  """The ``rl.credit`` registry of ``assigners`` (functions made by :func:`credit_assigner`), in their order.

  Raises:
    ValueError: two assigners of one name.
  """
  return registry_from("credit assigner", "rl.credit", ((fn.credit_name, fn.assigner) for fn in assigners))


def masked_mean(x: jax.Array, m: jax.Array, axis: Any = None, keepdims: bool = False) -> jax.Array:
  """Mean of ``x`` over entries where ``m`` is 1 (0 when there are none)."""
  n = jnp.sum(m, axis=axis, keepdims=keepdims)
  return jnp.sum(x * m, axis=axis, keepdims=keepdims) / jnp.maximum(n, 1.0)
