"""Name -> implementation registries for swappable pieces (credit, likelihood, objective, ...).

Each kind of swappable piece has one module-level :class:`Registry`. Configs select entries by
name; an unknown name raises :class:`daca_jax.errors.ConfigError` that lists the valid names.
"""
from __future__ import annotations

import contextlib
import dataclasses
import inspect
from typing import Callable, Generic, Iterable, Iterator, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
  """A mapping from names to implementations of one kind.

  Args:
    kind: human-readable kind ("credit assigner", "likelihood estimator", ...) used in errors.
    field: the config field that selects an entry (e.g. ``"rl.credit"``), used in errors.
  """

  def __init__(self, kind: str, field: str):
    self.kind = kind
    self.field = field
    self._entries: dict[str, T] = {}
    self._aliases: dict[str, str] = {}

  def register(self, name: str) -> Callable[[T], T]:
    """Decorator that registers ``obj`` under ``name``; raises ValueError on a duplicate name."""

    def deco(obj: T) -> T:
      if name in self._entries:
        raise ValueError(f"{self.kind} {name!r} is already registered")
      self._entries[name] = obj
      return obj

    return deco

  @contextlib.contextmanager
  def registered(self, name: str, obj: T) -> Iterator[T]:
    """Registers ``obj`` under ``name`` for the duration of a ``with`` block, then removes it.

    For probes and tests: an entry registered this way never outlives its block, so it cannot
    leak into code that enumerates the registry afterwards (``names()``).

    Raises:
      ValueError: ``name`` is already registered.
    """
    self.register(name)(obj)
    try:
      yield obj
    finally:
      self._entries.pop(name, None)

  def alias(self, name: str, target: str) -> None:
    """Registers ``name`` as another name of the entry ``target`` (the same object).

    Raises:
      ValueError: ``name`` is already registered, or ``target`` is not.
    """
    if target not in self._entries:
      raise ValueError(f"{self.kind} {target!r} is not registered (alias {name!r})")
    self.register(name)(self._entries[target])
    self._aliases[name] = target

  def aliases(self) -> dict[str, str]:
    """``{alias: target}`` of the names registered with :meth:`alias`."""
    return dict(self._aliases)

  def get(self, name: str) -> T:
    """Returns the entry for ``name``.

    Raises:
      ConfigError: ``name`` is not registered; the message names the config field, the value
        and the valid names.
    """
    if name not in self._entries:
      from daca_jax.errors import ConfigError

      raise ConfigError(self.field, name, f"one of {sorted(self._entries)} ({self.kind})")
    return self._entries[name]

  def names(self) -> list[str]:
    return sorted(self._entries)

  def __contains__(self, name: object) -> bool:
    return name in self._entries

  def __iter__(self) -> Iterator[str]:
    return iter(sorted(self._entries))


def registry_from(kind: str, field: str, entries: Iterable[tuple[str, T]],
                  aliases: Iterable[tuple[str, str]] = ()) -> Registry[T]:
  """A :class:`Registry` of ``(name, entry)`` pairs, in their order, and ``(alias, name)`` pairs: how each
  kind's registry is built from its one explicit list (the methods, credit assigners, estimators).

  Raises:
    ValueError: a name given twice, or an alias of a name not given.
  """
  registry: Registry[T] = Registry(kind, field)
  for name, entry in entries:
    registry.register(name)(entry)
  for alias, name in aliases:
    registry.alias(alias, name)
  return registry


def _is_section(value: object) -> bool:
  """``value`` is a config section: a dataclass instance with a ``validate(prefix)`` method."""

  return dataclasses.is_dataclass(value) and not isinstance(value, type) and hasattr(value, "validate")


def _concrete_number(value: object) -> object:
  """The Python number of a concrete one-element array (numpy or jax), else None (a tracer, or an array of
  several elements)."""
  if getattr(value, "size", None) != 1 or "Tracer" in type(value).__name__:
    return None
  try:
    return value.item()  # a jax tracer has no concrete value: it raises instead
  except Exception:  # noqa: BLE001 - any array type that cannot give one value is the caller's
    return None


def config_fields(fn: Callable[..., object], shared: type | None = None) -> tuple[str, ...]:
  """The config options ``fn`` reads: its keyword-only parameters that are either a whole section (their
  default is the section, e.g. ``stratified: StratifiedConfig = StratifiedConfig()``) or a field of
  ``shared``, the dataclass of the fields every algorithm of its kind may read (``p_mask_prompt``,
  ``clip_eps``, ...).

  A registered algorithm declares what it reads this way, and its registry entry hands it exactly those
  fields of the composed config it is given (:func:`section_kwargs`), so an algorithm never sees the
  options of another method, and needs neither the composed config nor its module: the sections live
  beside their algorithms, and the composed config (``daca_jax.config``) imports them.
  """

  names = {f.name for f in dataclasses.fields(shared)} if shared is not None else set()
  return tuple(p.name for p in inspect.signature(fn).parameters.values()
               if p.kind is inspect.Parameter.KEYWORD_ONLY and (p.name in names or _is_section(p.default)))


def declared_options(fn: Callable[..., object], shared: type | None = None, inputs: tuple[str, ...] = ()) -> tuple[str, ...]:
  """:func:`config_fields` of ``fn``, refusing a keyword-only parameter that is neither an option nor one of the
  algorithm's ``inputs`` (``mask_id``, row inputs): the registry entry would never set it from the config,
  so its value in the config would be ignored without a word.

  Raises:
    TypeError: naming the parameters and what an option must be.
  """

  reads = config_fields(fn, shared)
  stray = [p.name for p in inspect.signature(fn).parameters.values()
           if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in reads and p.name not in inputs]
  if stray:
    shared_names = [] if shared is None else [f.name for f in dataclasses.fields(shared)]
    raise TypeError(f"{getattr(fn, '__qualname__', fn)}: keyword-only parameters {stray} are not options the "
                    f"registry can hand over: an option is a field every algorithm of its kind shares "
                    f"({shared_names}) or the algorithm's own section, given as the parameter's default "
                    f"(``name: MyConfig = MyConfig()``, a field of the composed config)")
  return reads


def section_kwargs(cfg: object, fields: tuple[str, ...]) -> dict[str, object]:
  """``{field: getattr(cfg, field)}`` for the fields an algorithm declared (:func:`config_fields`)."""
  return {name: getattr(cfg, name) for name in fields}


def check_options(fn: Callable[..., object], options: dict[str, object], where: str,
                  shared: type | None = None) -> None:
  """Checks the options of a direct call (``diffu_grpo_loss(..., clip_eps=-1)``): each must be one ``fn``
  reads (:func:`config_fields`), a section must be an instance of its class and pass its own
  ``validate``, and the shared fields must pass ``shared(...).validate``, so a bad value is a one-line
  :class:`~daca_jax.errors.ConfigError` naming ``<where>.<field>``, not silent garbage.

  Traced options (a ``beta`` inside ``jax.jit``) and arrays of more than one element are the caller's to
  check; a concrete one-element array (``np.float64(-1)``, ``jnp.float32(0.1)``) is checked as its number.

  Raises:
    TypeError: an option ``fn`` does not read (names it and the ones it does).
    ConfigError: an option outside what its section allows.
  """

  from daca_jax.errors import ConfigError

  reads = config_fields(fn, shared)
  unknown = sorted(set(options) - set(reads))
  if unknown:
    raise TypeError(f"{where} takes the options {list(reads)}, not {unknown}")
  defaults = {p.name: p.default for p in inspect.signature(fn).parameters.values()}
  scalars = {}
  for name, value in options.items():
    if hasattr(value, "shape"):
      value = _concrete_number(value)
      if value is None:
        continue
    if _is_section(defaults[name]):
      kind = type(defaults[name])
      if not isinstance(value, kind):
        raise ConfigError(f"{where}.{name}", value, f"a {kind.__name__} section ({where}.{name}.<field>=...)")
      value.validate(f"{where}.{name}")
    else:
      scalars[name] = value
  if scalars:
    dataclasses.replace(shared(), **scalars).validate(prefix=where)
