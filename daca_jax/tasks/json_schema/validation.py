"""Bounded JSON-Schema grading of untrusted completions: parsing, schema compilation, validation.

Used by the ``json_schema`` task (:mod:`daca_jax.tasks.json_schema`), in-process for its own
generated data and in a worker process (:mod:`daca_jax.tasks.json_schema.worker`) for completions.

Parsing (:func:`parse_json`): the completion, stripped of surrounding whitespace (and of one enclosing
Markdown code fence), must be a single JSON value accepted by ``json.loads``; ``NaN``/``Infinity``
are rejected.

Compilation (:func:`compile_schema`): ``check_schema`` against the meta-schema, every ``$ref``
resolved (local documents and the bundled meta-schemas only: nothing is fetched), every
``pattern``/``patternProperties`` regex compiled with RE2, and a few probe instances validated, so
that lazy failures show up at load time. A schema that fails any step raises
:class:`SchemaCompileError` with its reason.

Validation: ``jsonschema`` with the validator class named by the schema's ``$schema`` (Draft
2020-12 when absent); ``format`` is an annotation only (jsonschema's default), as in the JSON Schema
specification. Bounds, so that one completion is graded in well under a second whatever it holds
(a completion that hits one scores 0 and is reported as a bound hit):

* text: at most :data:`daca_jax.tasks.text_scan.MAX_COMPLETION_CHARS` characters and
  :data:`MAX_JSON_DEPTH` levels of ``[``/``{`` nesting, checked by linear scans before parsing;
* regular expressions: ``pattern``, ``patternProperties`` (and the ``additionalProperties`` that
  depends on it) are matched with RE2 (google-re2: linear time, no backtracking) instead of Python's
  ``re``, so ``^(a+)+$`` cannot take exponential time. Patterns RE2 cannot express (backreferences,
  lookaround) make the schema unusable (reason ``regex``), rather than falling back to a
  backtracking engine; ECMA-262 ``\\uXXXX`` / ``\\u{...}`` escapes are rewritten to RE2's
  ``\\x{...}``. RE2 is closer to ECMA-262 (the regex dialect JSON Schema specifies) than Python's
  ``re``: ``$`` matches only at the end, ``\\d``/``\\w``/``\\b`` are ASCII. ``unevaluatedProperties``
  next to ``patternProperties`` is refused too (jsonschema evaluates those patterns itself, with
  ``re``);
* ``uniqueItems``: items are compared through a canonical hashable form in linear time (jsonschema
  compares unhashable items pairwise: 4000 objects took 11 s);
* work: every keyword evaluation is charged ``1 + len(instance) + len(keyword value)`` (lengths of
  strings, arrays and objects) and validation stops after :data:`MAX_VALIDATION_STEPS` units: nested
  ``anyOf`` over a recursive ``$ref`` explodes combinatorially otherwise (:class:`BoundExceeded`).
  The ``json_schema`` task adds a wall-clock limit per completion in a worker process for anything
  these bounds miss.

Parsing is in :mod:`daca_jax.tasks.json_schema.parsing`, the bounded validator (RE2, ``uniqueItems``, the
work budget) in :mod:`daca_jax.tasks.json_schema.bounded`; this module compiles schemas and grades, and
re-exports their public names.
"""
from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import jsonschema
import jsonschema.validators
import numpy as np
import referencing
import referencing.jsonschema
from jsonschema_specifications import REGISTRY as _META_SCHEMAS

from daca_jax.tasks.json_schema import generator as gen
from daca_jax.tasks.json_schema.bounded import (MAX_VALIDATION_STEPS, BoundExceeded, PatternError,
                                                bounded_validator_class, compile_pattern, work_budget)
from daca_jax.tasks.json_schema.parsing import MAX_JSON_DEPTH, parse_json
from daca_jax.tasks import text_scan

__all__ = ["MAX_JSON_DEPTH", "MAX_VALIDATION_STEPS", "SKIP_REASONS", "BoundExceeded", "CompiledSchema", "Grade",
           "PatternError", "SchemaCompileError", "bounded_validator_class", "compile_fast", "compile_pattern",
           "compile_schema", "parse_json"]

# Keywords whose values are data, not subschemas; and keywords whose values map names to subschemas.
_DATA_KEYWORDS = frozenset({"enum", "const", "examples", "default", "required", "type", "format",
                            "description", "title", "$comment", "$schema", "$id", "id"})
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions",
                          "dependentSchemas"})
_PROBES: tuple[Any, ...] = (None, {}, [], "", 0, 1.5, True)

SKIP_REASONS = ("not_json", "not_a_schema", "check_schema", "unresolvable_ref", "regex",
                "validate_exception", "too_long")


class SchemaCompileError(Exception):
  """A schema cannot be used; ``reason`` is one of the :data:`SKIP_REASONS`."""

  def __init__(self, reason: str, detail: str):
    self.reason = reason
    self.detail = detail
    super().__init__(f"{reason}: {detail}")


@dataclasses.dataclass(frozen=True)
class Grade:
  """The verdict on one completion: it ``parsed`` as JSON, is ``valid``, the validator raised
  (``validator_error``; scores 0), or grading stopped at a bound (``bound_hit``; scores 0)."""

  parsed: bool = False
  valid: bool = False
  validator_error: bool = False
  bound_hit: bool = False


@dataclasses.dataclass(frozen=True)
class CompiledSchema:
  """A schema that passed :func:`compile_schema`.

  Attributes:
    schema: the schema (dict or bool).
    validator: a (bounded) jsonschema validator instance for it.
    resolver: a ``referencing`` resolver rooted at the schema (resolves its ``$ref`` strings).
  """

  schema: Any
  validator: Any
  resolver: referencing.Resolver

  def validate(self, instance: Any, max_steps: int = MAX_VALIDATION_STEPS) -> bool:
    """Whether ``instance`` is valid, within a budget of ``max_steps`` work units.

    Raises:
      BoundExceeded: validation needed more work.
      Exception: whatever the validator raises on this instance (a schema that compiled can still
        fail on a path the probes did not reach); :meth:`grade` catches it.
    """
    with work_budget(max_steps):
      return self.validator.is_valid(instance)

  def resolve(self, ref: str) -> Any:
    """The subschema a root-level ``$ref`` string points to (raises ``Unresolvable``)."""
    return self.resolver.lookup(ref).contents

  def grade(self, completion: Any) -> Grade:
    """Grades one completion within the bounds of the module docstring; never raises."""
    if text_scan.over_limit(completion):
      return Grade(bound_hit=True)
    ok, value = parse_json(completion)
    if not ok:
      return Grade()
    try:
      return Grade(parsed=True, valid=bool(self.validate(value)))
    except BoundExceeded:
      return Grade(parsed=True, bound_hit=True)
    except Exception:  # noqa: BLE001  a validator failure scores 0, counted by the caller
      return Grade(parsed=True, validator_error=True)

  def instance(self, rng: np.random.Generator | None = None) -> Any:
    """A valid instance from :func:`json_generator.generate_instance`, validated here.

    Raises:
      json_generator.Unsupported: the generator cannot build a valid instance of this schema (it
        failed, or its instance does not validate, or validation needed more than its budget).
    """
    def resolve(ref: str) -> Any:
      try:
        return self.resolve(ref)
      except Exception as e:  # noqa: BLE001  e.g. a ref relative to a nested $id
        raise gen.Unsupported(f"$ref {ref!r}") from e

    value = gen.generate_instance(self.schema, resolve, rng)
    try:
      valid = self.validate(value)
    except Exception as e:  # noqa: BLE001  BoundExceeded, or the validator itself failed
      raise gen.Unsupported(f"validating the generated instance raised {type(e).__name__}") from e
    if not valid:
      raise gen.Unsupported("generated instance does not validate")
    return value


def _walk(node: Any, resolver: referencing.Resolver, spec: referencing.Specification,
          seen: set[str]) -> None:
  """Resolves every ``$ref`` and compiles every regex of ``node``; raises SchemaCompileError."""
  if isinstance(node, list):
    for item in node:
      _walk(item, resolver, spec, seen)
    return
  if not isinstance(node, dict):
    return
  if spec.id_of(node):
    resolver = resolver.in_subresource(spec.create_resource(node))
  for key, value in node.items():
    seen.add(key)
    if key == "$ref" and isinstance(value, str):
      try:
        resolver.lookup(value)
      except Exception as e:  # noqa: BLE001  referencing raises several types
        raise SchemaCompileError("unresolvable_ref", f"$ref {value!r}: {type(e).__name__}") from None
    elif key == "pattern" and isinstance(value, str):
      _compile_regex(value)
    elif key in _DATA_KEYWORDS:
      continue
    elif key in _SCHEMA_MAPS and isinstance(value, dict):
      for name, sub in value.items():
        if key == "patternProperties":
          _compile_regex(name)
        _walk(sub, resolver, spec, seen)
    else:
      _walk(value, resolver, spec, seen)


def _compile_regex(pattern: str) -> None:
  try:
    compile_pattern(pattern)
  except PatternError as e:
    raise SchemaCompileError("regex", str(e)[:300]) from None


def _bounded(cls: type, schema: Any) -> Any:
  return bounded_validator_class(cls)(schema, registry=_META_SCHEMAS)


def compile_schema(schema: Any) -> CompiledSchema:
  """Checks a schema and builds its bounded validator (see the module docstring for the steps).

  Args:
    schema: a decoded JSON Schema.

  Returns:
    The :class:`CompiledSchema`.

  Raises:
    SchemaCompileError: with ``reason`` in ``not_a_schema``, ``check_schema``,
      ``unresolvable_ref``, ``regex``, ``validate_exception``.
  """
  if not isinstance(schema, (dict, bool)):
    raise SchemaCompileError("not_a_schema", f"a {type(schema).__name__}, not an object")
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # unknown $schema URIs warn and fall back to the default
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
  try:
    cls.check_schema(schema)
  except Exception as e:  # noqa: BLE001  SchemaError, or errors raised while checking
    msg = getattr(e, "message", str(e))
    raise SchemaCompileError("check_schema", f"{type(e).__name__}: {str(msg)[:200]}") from None
  spec = referencing.jsonschema.specification_with(
      cls.META_SCHEMA.get("$schema", cls.META_SCHEMA.get("$id", "")),
      default=referencing.jsonschema.DRAFT202012)
  resource = spec.create_resource(schema)
  base = resource.id() or ""
  resolver = _META_SCHEMAS.with_resource(base, resource).resolver(base_uri=base)
  seen: set[str] = set()
  _walk(schema, resolver, spec, seen)
  if {"unevaluatedProperties", "patternProperties"} <= seen:
    raise SchemaCompileError("regex", "unevaluatedProperties next to patternProperties: jsonschema "
                                      "matches those patterns with Python's backtracking re")
  try:
    validator = _bounded(cls, schema)  # adds the schema itself under its id or ""
  except Exception as e:  # noqa: BLE001
    raise SchemaCompileError("validate_exception", f"building the validator: {e!r}"[:200]) from None
  compiled = CompiledSchema(schema=schema, validator=validator, resolver=resolver)
  for probe in _PROBES:
    try:
      compiled.validate(probe)
    except Exception as e:  # noqa: BLE001
      raise SchemaCompileError("validate_exception", f"probe {probe!r}: {type(e).__name__}") from None
  return compiled


def compile_fast(schema: Any) -> CompiledSchema:
  """:class:`CompiledSchema` for a trusted generated Draft 2020-12 schema, without the meta-schema
  check and probes of :func:`compile_schema` (about 50x cheaper; used for generated data)."""
  resource = referencing.jsonschema.DRAFT202012.create_resource(schema)
  return CompiledSchema(schema=schema, validator=_bounded(jsonschema.Draft202012Validator, schema),
                        resolver=_META_SCHEMAS.with_resource("", resource).resolver(base_uri=""))
