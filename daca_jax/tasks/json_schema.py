"""JSON Schema task (``json_schema``): prompt = a JSON Schema, reward = the completion validates.

Grading (never ``eval``; bounded work per completion):

1. :func:`parse_json`: the completion, stripped of surrounding whitespace (and of one enclosing
   Markdown code fence), must be a single JSON value accepted by ``json.loads``; texts longer than
   ``max_chars`` or nested deeper than ``max_depth`` are rejected before parsing, and the non-JSON
   constants ``NaN``/``Infinity`` are rejected.
2. The value must validate with ``jsonschema`` using the validator class named by the schema's
   ``$schema`` (Draft 2020-12 when absent). ``format`` is an annotation only (jsonschema's default),
   as in the JSON Schema specification.

Schemas are compiled once (:func:`compile_schema`): ``check_schema`` against the meta-schema, every
``$ref`` resolved (local documents and the bundled meta-schemas only: nothing is fetched), every
``pattern``/``patternProperties`` regex compiled with Python's ``re`` (which jsonschema uses), and a
few probe instances validated, so that lazy failures show up at load time. A schema that fails any
step is skipped with its reason and counted (:class:`LoadReport`), never a crash.

Sources (constructor arg ``source``, config ``task.options.source``):

* ``"generated"``: small seeded object schemas (:mod:`daca_jax.tasks.json_generator`), SFT targets
  are valid instances from the seeded instance generator; sized for tiny byte-level models.
* ``"jsonschemabench"``: the schemas of guidance-ai/jsonschemabench (``data/<subset>/*.json``, one
  schema per file) under ``<data_dir>/jsonschemabench``; split into eval/train by a stable hash of
  ``subset/file``; SFT targets are generated instances where the generator covers the schema.

Prompt styles (``prompt_style``): ``"plain"`` (the compact schema JSON) and ``"chat"`` (an
instruction plus the schema in LLaDA's chat format, for instruction-tuned checkpoints).

Metrics: ``schema_adherence`` (fraction of completions that parse and validate, i.e. JSONSchemaBench's
compliance rate), ``json_parse_rate``, ``validator_errors`` (validations that raised; they score 0)
and ``num_examples``.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import pathlib
import re
import warnings
from typing import Any, Mapping, Sequence

import jsonschema
import jsonschema.validators
import numpy as np
import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema_specifications import REGISTRY as _META_SCHEMAS

from daca_jax.data import local
from daca_jax.errors import ConfigError, DataError
from daca_jax.tasks import json_generator as gen
from daca_jax.tasks.base import TASKS, Example, Task
from daca_jax.tasks.tokenizer import ByteTokenizer

BENCH_DIR = "jsonschemabench"  # relative to the data dir (see ../shared/data/SOURCES.md)
BENCH_SUBSETS = ("Github_easy", "Glaiveai2K")
SOURCES = ("generated", "jsonschemabench")
PROMPT_STYLES = ("plain", "chat")
TARGET_STYLES = ("minimal", "random")

MAX_COMPLETION_CHARS = 100_000  # parse_json bound: longer completions score 0 unparsed
MAX_JSON_DEPTH = 64  # parse_json bound on [ / { nesting (json.loads recurses)

# Generated-schema bounds: prompts and targets are resampled until they fit, so prompt_len and
# min_gen_length are fixed for the "generated" source.
GENERATED_MAX_SCHEMA_CHARS = 128
GENERATED_MAX_TARGET_CHARS = 31

# LLaDA-8B-Instruct's chat template (the tokenizer adds <|startoftext|> = bos itself).
_CHAT_TEMPLATE = ("<|start_header_id|>user<|end_header_id|>\n\n{}<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n")
_INSTRUCTION = "Reply with only a JSON value that is valid under this JSON Schema:\n{}"

# Keywords whose values are data, not subschemas; and keywords whose values map names to subschemas.
_DATA_KEYWORDS = frozenset({"enum", "const", "examples", "default", "required", "type", "format",
                            "description", "title", "$comment", "$schema", "$id", "id"})
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions",
                          "dependentSchemas"})
_PROBES: tuple[Any, ...] = (None, {}, [], "", 0, 1.5, True)
_FENCE = re.compile(r"\A```[A-Za-z0-9_-]*\s*\n(.*?)\n?```\Z", re.DOTALL)


def compact(value: Any) -> str:
  """Compact JSON text (no spaces), the prompt/target encoding of this task."""
  return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _reject_constant(name: str) -> Any:
  raise ValueError(f"{name} is not JSON")


def _nesting_depth(text: str) -> int:
  """Largest ``[``/``{`` nesting depth outside strings (linear scan, no recursion)."""
  depth = best = 0
  in_str = escaped = False
  for ch in text:
    if in_str:
      if escaped:
        escaped = False
      elif ch == "\\":
        escaped = True
      elif ch == '"':
        in_str = False
    elif ch == '"':
      in_str = True
    elif ch in "[{":
      depth += 1
      best = max(best, depth)
    elif ch in "]}":
      depth -= 1
  return best


def parse_json(text: Any, max_chars: int = MAX_COMPLETION_CHARS,
               max_depth: int = MAX_JSON_DEPTH) -> tuple[bool, Any]:
  """Parses a completion as one JSON value, within size and depth bounds.

  Args:
    text: the decoded completion (any object; non-strings fail).
    max_chars: longer texts fail without parsing.
    max_depth: deeper ``[``/``{`` nesting fails without parsing (``json.loads`` recurses).

  Returns:
    ``(True, value)`` on success, else ``(False, None)``. Never raises.
  """
  if not isinstance(text, str) or len(text) > max_chars:
    return False, None
  text = text.strip()
  fenced = _FENCE.match(text)
  if fenced:
    text = fenced.group(1).strip()
  if not text or _nesting_depth(text) > max_depth:
    return False, None
  try:
    return True, json.loads(text, parse_constant=_reject_constant)
  except (ValueError, RecursionError, TypeError):  # JSONDecodeError, int-digit limit, bad constants
    return False, None


class SchemaCompileError(Exception):
  """A schema cannot be used; ``reason`` is one of the :data:`SKIP_REASONS`."""

  def __init__(self, reason: str, detail: str):
    self.reason = reason
    self.detail = detail
    super().__init__(f"{reason}: {detail}")


SKIP_REASONS = ("not_json", "not_a_schema", "check_schema", "unresolvable_ref", "regex",
                "validate_exception", "too_long")


@dataclasses.dataclass(frozen=True)
class CompiledSchema:
  """A schema that passed :func:`compile_schema`.

  Attributes:
    schema: the schema (dict or bool).
    validator: a jsonschema validator instance for it.
    resolver: a ``referencing`` resolver rooted at the schema (resolves its ``$ref`` strings).
  """

  schema: Any
  validator: Any
  resolver: referencing.Resolver

  def validate(self, instance: Any) -> bool:
    """Whether ``instance`` is valid.

    Raises:
      Exception: whatever the validator raises on this instance (a schema that compiled can still
        fail on a path the probes did not reach); :meth:`grade` catches it.
    """
    return self.validator.is_valid(instance)

  def resolve(self, ref: str) -> Any:
    """The subschema a root-level ``$ref`` string points to (raises ``Unresolvable``)."""
    return self.resolver.lookup(ref).contents

  def grade(self, completion: Any) -> tuple[bool, bool, bool]:
    """Grades one completion; never raises.

    Returns:
      ``(parsed, valid, validator_error)``.
    """
    ok, value = parse_json(completion)
    if not ok:
      return False, False, False
    try:
      return True, bool(self.validate(value)), False
    except Exception:  # noqa: BLE001  a validator failure scores 0, counted by the caller
      return True, False, True

  def instance(self, rng: np.random.Generator | None = None) -> Any:
    """A valid instance from :func:`json_generator.generate_instance`.

    Raises:
      json_generator.Unsupported: the generator cannot build a valid instance of this schema.
    """
    def resolve(ref: str) -> Any:
      try:
        return self.resolve(ref)
      except Exception as e:  # noqa: BLE001  e.g. a ref relative to a nested $id
        raise gen.Unsupported(f"$ref {ref!r}") from e

    try:
      value = gen.generate_instance(self.schema, resolve, rng)
    except gen.Unsupported:
      raise
    except (ArithmeticError, TypeError, ValueError, RecursionError) as e:  # odd bounds, huge numbers
      raise gen.Unsupported(f"generator failed: {type(e).__name__}") from e
    try:
      valid = self.validate(value)
    except Exception as e:  # noqa: BLE001
      raise gen.Unsupported(f"validator raised {type(e).__name__}") from e
    if not valid:
      raise gen.Unsupported("generated instance does not validate")
    return value


def _walk(node: Any, resolver: referencing.Resolver, spec: referencing.Specification) -> None:
  """Resolves every ``$ref`` and compiles every regex of ``node``; raises SchemaCompileError."""
  if isinstance(node, list):
    for item in node:
      _walk(item, resolver, spec)
    return
  if not isinstance(node, dict):
    return
  if spec.id_of(node):
    resolver = resolver.in_subresource(spec.create_resource(node))
  for key, value in node.items():
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
        _walk(sub, resolver, spec)
    else:
      _walk(value, resolver, spec)


def _compile_regex(pattern: str) -> None:
  try:
    re.compile(pattern)
  except (re.error, RecursionError, OverflowError) as e:
    raise SchemaCompileError("regex", f"pattern {pattern!r}: {e}") from None


def compile_schema(schema: Any) -> CompiledSchema:
  """Checks a schema and builds its validator (see the module docstring for the steps).

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
  _walk(schema, resolver, spec)
  try:
    validator = cls(schema, registry=_META_SCHEMAS)  # adds the schema itself under its id or ""
  except Exception as e:  # noqa: BLE001
    raise SchemaCompileError("validate_exception", f"building the validator: {e!r}"[:200]) from None
  compiled = CompiledSchema(schema=schema, validator=validator, resolver=resolver)
  for probe in _PROBES:
    try:
      compiled.validate(probe)
    except Exception as e:  # noqa: BLE001
      raise SchemaCompileError("validate_exception", f"probe {probe!r}: {type(e).__name__}") from None
  return compiled


@dataclasses.dataclass(frozen=True)
class BenchSchema:
  """One JSONSchemaBench schema that compiled: ``subset`` folder, file ``name``, the schema."""

  subset: str
  name: str
  compiled: CompiledSchema

  @property
  def key(self) -> str:
    return f"{self.subset}/{self.name}"


@dataclasses.dataclass(frozen=True)
class LoadReport:
  """What :func:`load_jsonschemabench` found.

  Attributes:
    num_files: schema files read.
    num_compiled: schemas that compiled (the length of the returned list).
    skipped: ``{reason: [(subset/file, detail), ...]}`` for the files that did not.
  """

  num_files: int
  num_compiled: int
  skipped: Mapping[str, tuple[tuple[str, str], ...]]

  def summary(self) -> str:
    parts = ", ".join(f"{r}: {len(v)}" for r, v in sorted(self.skipped.items()))
    return (f"{self.num_compiled} of {self.num_files} schemas compile"
            + (f"; skipped {self.num_files - self.num_compiled} ({parts})" if parts else ""))


@functools.lru_cache(maxsize=4)
def _load_cached(root: str, subsets: tuple[str, ...]) -> tuple[tuple[BenchSchema, ...], LoadReport]:
  out: list[BenchSchema] = []
  skipped: dict[str, list[tuple[str, str]]] = {}
  num_files = 0
  for subset in subsets:
    folder = pathlib.Path(root) / subset
    if not folder.is_dir():
      raise DataError(f"{folder}: JSONSchemaBench subset folder does not exist "
                      f"(task.options.subsets={list(subsets)!r}; known: {list(BENCH_SUBSETS)})")
    for path in sorted(folder.glob("*.json")):
      num_files += 1
      key = f"{subset}/{path.name}"
      try:
        try:
          schema = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
          raise SchemaCompileError("not_json", str(e)[:200]) from None
        out.append(BenchSchema(subset, path.name, compile_schema(schema)))
      except SchemaCompileError as e:
        skipped.setdefault(e.reason, []).append((key, e.detail))
  report = LoadReport(num_files=num_files, num_compiled=len(out),
                      skipped={k: tuple(v) for k, v in skipped.items()})
  return tuple(out), report


def load_jsonschemabench(root: str | os.PathLike[str],
                         subsets: Sequence[str] = BENCH_SUBSETS) -> tuple[list[BenchSchema], LoadReport]:
  """Reads and compiles every ``<root>/<subset>/*.json`` schema (sorted by file name).

  Args:
    root: the ``jsonschemabench`` folder (guidance-ai/jsonschemabench ``data/`` layout).
    subsets: subset folder names.

  Returns:
    ``(schemas that compiled, report)``; cached per ``(root, subsets)``.

  Raises:
    DataError: a subset folder does not exist.
  """
  schemas, report = _load_cached(str(pathlib.Path(root).resolve()), tuple(subsets))
  return list(schemas), report


def _in_eval_split(key: str, eval_fraction: float) -> bool:
  """Stable split: the first 8 hex digits of sha1(key) as a fraction of 2**32."""
  return int(hashlib.sha1(key.encode()).hexdigest()[:8], 16) < eval_fraction * 2**32


@TASKS.register("json_schema")
class JSONSchemaTask(Task):
  """JSON Schema adherence: schema in, a valid JSON instance out.

  Args:
    data_dir: data directory (config ``data.data_dir``): ``None`` = none; ``""`` = the default if it
      exists. JSONSchemaBench is read from ``<data_dir>/jsonschemabench``.
    source: ``"generated"`` or ``"jsonschemabench"``.
    prompt_style: ``"plain"`` or ``"chat"``.
    eval_size: number of generated evaluation schemas (``source="generated"``).
    seed: seed of the generated evaluation set.
    subsets: JSONSchemaBench subset folders (``source="jsonschemabench"``).
    eval_fraction: share of JSONSchemaBench schemas in the evaluation split (the rest are training
      prompts), by a stable hash of ``subset/file``; 1.0 evaluates on all of them.
    max_schema_chars: JSONSchemaBench schemas whose compact JSON is longer are skipped (reason
      ``too_long``); 0 = no limit. Keeps ``prompt_len`` affordable.
    parse_reward: reward of a completion that parses as JSON but does not validate (0 = strict).
    target_style: SFT targets of generated schemas: ``"minimal"`` (the deterministic minimal
      instance: required properties in schema order, lowest allowed integer, first enum member,
      ``true``, empty arrays) or ``"random"`` (seeded optional properties and values). A masked
      diffusion model decodes positions in parallel, so targets that are a function of the prompt
      are far easier for a tiny model to learn than random ones (with "random", 300 SFT steps of
      the tiny config decode a mixture of several targets, e.g. ``{"":}}``).

  Raises:
    ConfigError: a bad option (the message names ``task.options.<name>``).
    DataError / FileNotFoundError: ``source="jsonschemabench"`` without the data folder.
  """

  name = "json_schema"
  primary_metric = "schema_adherence"

  def __init__(
      self,
      data_dir: str | os.PathLike[str] | None = None,
      source: str = "generated",
      prompt_style: str = "plain",
      eval_size: int = 200,
      seed: int = 1234,
      subsets: Sequence[str] = BENCH_SUBSETS,
      eval_fraction: float = 0.5,
      max_schema_chars: int = 0,
      parse_reward: float = 0.0,
      target_style: str = "minimal",
  ):
    self.tokenizer = ByteTokenizer()
    if source not in SOURCES:
      raise ConfigError("task.options.source", source, f"one of {list(SOURCES)}")
    if prompt_style not in PROMPT_STYLES:
      raise ConfigError("task.options.prompt_style", prompt_style, f"one of {list(PROMPT_STYLES)}")
    if isinstance(eval_size, bool) or not isinstance(eval_size, (int, np.integer)) or eval_size < 1:
      raise ConfigError("task.eval_size", eval_size, "a positive int")
    if not isinstance(eval_fraction, (int, float)) or not 0.0 < eval_fraction <= 1.0:
      raise ConfigError("task.options.eval_fraction", eval_fraction, "a number in (0, 1]")
    if isinstance(max_schema_chars, bool) or not isinstance(max_schema_chars, int) or max_schema_chars < 0:
      raise ConfigError("task.options.max_schema_chars", max_schema_chars, "an int >= 0 (0 = no limit)")
    if not isinstance(parse_reward, (int, float)) or not 0.0 <= parse_reward < 1.0:
      raise ConfigError("task.options.parse_reward", parse_reward, "a number in [0, 1)")
    if target_style not in TARGET_STYLES:
      raise ConfigError("task.options.target_style", target_style, f"one of {list(TARGET_STYLES)}")
    if isinstance(subsets, str) or not all(isinstance(s, str) for s in subsets) or not subsets:
      raise ConfigError("task.options.subsets", subsets,
                        f"a non-empty list of folder names, e.g. {list(BENCH_SUBSETS)}")
    self.source = source
    self.prompt_style = prompt_style
    self.eval_size = int(eval_size)
    self.seed = int(seed)
    self.subsets = tuple(subsets)
    self.eval_fraction = float(eval_fraction)
    self.max_schema_chars = int(max_schema_chars)
    self.parse_reward = float(parse_reward)
    self.target_style = target_style
    self.data_dir = None if data_dir is None else local.resolve_data_dir(str(data_dir))
    self._compiled: dict[str, CompiledSchema] = {}
    self._eval: tuple[list[Example], str] | None = None
    self._bench: tuple[list[Example], list[Example], str] | None = None
    overhead = len(self.tokenizer.encode(self.format_prompt("")))
    if source == "generated":
      self.prompt_len = 1 + overhead + GENERATED_MAX_SCHEMA_CHARS
      self.min_gen_length = GENERATED_MAX_TARGET_CHARS + 1
    else:
      bench_eval, bench_train, _ = self._bench_splits()
      longest = max(len(self.tokenizer.encode(ex.prompt)) for ex in bench_eval + bench_train)
      self.prompt_len = 1 + longest
      self.min_gen_length = 3  # "{}" + EOS: the shortest useful answer; real answers are longer

  # ----- prompts and data -----

  def format_prompt(self, schema_text: str) -> str:
    """The prompt for a compact schema text in this task's ``prompt_style``."""
    if self.prompt_style == "chat":
      return _CHAT_TEMPLATE.format(_INSTRUCTION.format(schema_text))
    return schema_text

  def _example(self, key: str, compiled: CompiledSchema, target: Any) -> Example:
    text = compact(compiled.schema)
    self._compiled.setdefault(text, compiled)
    return Example(prompt=self.format_prompt(text), target="" if target is None else compact(target),
                   meta={"schema": text, "schema_id": key})

  def _generated(self, num: int, seed: int, exclude: frozenset[str]) -> list[Example]:
    rng = np.random.default_rng(seed)
    out: list[Example] = []
    seen: set[str] = set()
    failures = 0
    while len(out) < num:
      schema = gen.generate_small_schema(rng)
      text = compact(schema)
      if text in seen or text in exclude or len(text) > GENERATED_MAX_SCHEMA_CHARS:
        failures += 1
        if failures > 100_000:
          raise DataError(f"could only generate {len(out)} of {num} distinct small schemas")
        continue
      compiled = self._compiled.get(text) or compile_fast(schema)
      instance = compiled.instance(rng if self.target_style == "random" else None)
      if len(compact(instance)) > GENERATED_MAX_TARGET_CHARS:
        instance = compiled.instance(None)  # the minimal instance
        if len(compact(instance)) > GENERATED_MAX_TARGET_CHARS:
          continue
      seen.add(text)
      out.append(self._example(f"generated/{seed}/{len(out)}", compiled, instance))
    return out

  def _bench_splits(self) -> tuple[list[Example], list[Example], str]:
    """(eval examples, train examples with a generated target, description); cached."""
    if self._bench is None:
      if self.data_dir is None or not (self.data_dir / BENCH_DIR).is_dir():
        where = "no data dir" if self.data_dir is None else str(self.data_dir / BENCH_DIR)
        raise DataError(f"task.options.source='jsonschemabench' needs the JSONSchemaBench folder "
                        f"<data.data_dir>/{BENCH_DIR} ({where} does not exist)")
      schemas, report = load_jsonschemabench(self.data_dir / BENCH_DIR, self.subsets)
      ev: list[Example] = []
      tr: list[Example] = []
      too_long = 0
      covered = 0
      for s in schemas:
        if self.max_schema_chars and len(compact(s.compiled.schema)) > self.max_schema_chars:
          too_long += 1
          continue
        if _in_eval_split(s.key, self.eval_fraction):
          ev.append(self._example(s.key, s.compiled, None))
          continue
        try:
          tr.append(self._example(s.key, s.compiled, s.compiled.instance(None)))
          covered += 1
        except gen.Unsupported:
          pass
      if not ev:
        raise DataError(f"no JSONSchemaBench evaluation schemas left ({report.summary()}; "
                        f"{too_long} longer than task.options.max_schema_chars={self.max_schema_chars})")
      desc = (f"JSONSchemaBench {list(self.subsets)} in {self.data_dir / BENCH_DIR}: {report.summary()}; "
              f"{too_long} longer than max_schema_chars skipped; {len(ev)} eval schemas "
              f"(eval_fraction={self.eval_fraction}), {len(tr)} train schemas with a generated target")
      self._bench = (ev, tr, desc)
    return self._bench

  def eval_examples(self) -> tuple[list[Example], str]:
    """Returns ``(examples, source)``; built once and cached."""
    if self._eval is None:
      if self.source == "generated":
        examples = self._generated(self.eval_size, self.seed, frozenset())
        self._eval = (examples, f"GENERATED held-out set of {len(examples)} small object schemas "
                                f"(seed={self.seed}; task.options.source='generated')")
      else:
        ev, _, desc = self._bench_splits()
        self._eval = (ev, desc)
    return list(self._eval[0]), self._eval[1]

  def train_examples(self, num: int, seed: int) -> list[Example]:
    """``num`` training examples: distinct generated schemas not in the eval set, or JSONSchemaBench
    train-split schemas with generated targets drawn with replacement (seeded)."""
    if self.source == "generated":
      exclude = frozenset(ex.meta["schema"] for ex in self.eval_examples()[0])
      return self._generated(num, seed, exclude)
    _, tr, _ = self._bench_splits()
    if not tr:
      raise DataError("no JSONSchemaBench training schemas with a generated target; raise "
                      "task.options.eval_fraction below 1.0")
    idx = np.random.default_rng(seed).integers(0, len(tr), num)
    return [tr[i] for i in idx]

  # ----- grading -----

  def _schema(self, example: Example) -> CompiledSchema:
    text = example.meta["schema"]
    compiled = self._compiled.get(text)
    if compiled is None:
      compiled = compile_schema(json.loads(text))
      self._compiled[text] = compiled
    return compiled

  def _grade(self, completions: Sequence[str], examples: Sequence[Example]) -> np.ndarray:
    """bool ``[N, 3]``: parsed, valid, validator error."""
    if len(completions) != len(examples):
      raise ValueError(f"got {len(completions)} completions for {len(examples)} examples")
    out = np.zeros((len(examples), 3), dtype=bool)
    for i, (c, ex) in enumerate(zip(completions, examples)):
      out[i] = self._schema(ex).grade(c)
    return out

  def reward(self, completions: Sequence[str], examples: Sequence[Example]) -> np.ndarray:
    """float32 ``[N]``: 1.0 if the completion parses and validates, ``parse_reward`` if it only
    parses, else 0.0."""
    g = self._grade(completions, examples)
    return np.where(g[:, 1], 1.0, np.where(g[:, 0], self.parse_reward, 0.0)).astype(np.float32)

  def metrics(self, completions: Sequence[str], examples: Sequence[Example]) -> dict[str, float]:
    """``schema_adherence``, ``json_parse_rate`` (fractions; 0.0 when N = 0), ``validator_errors``
    (count) and ``num_examples``."""
    g = self._grade(completions, examples)
    n = len(examples)
    return {
        "schema_adherence": float(g[:, 1].mean()) if n else 0.0,
        "json_parse_rate": float(g[:, 0].mean()) if n else 0.0,
        "validator_errors": float(g[:, 2].sum()),
        "num_examples": float(n),
    }


def compile_fast(schema: Any) -> CompiledSchema:
  """:class:`CompiledSchema` for a trusted generated Draft 2020-12 schema, without the meta-schema
  check and probes of :func:`compile_schema` (about 50x cheaper; used for generated data)."""
  resource = referencing.jsonschema.DRAFT202012.create_resource(schema)
  return CompiledSchema(schema=schema,
                        validator=jsonschema.Draft202012Validator(schema, registry=_META_SCHEMAS),
                        resolver=_META_SCHEMAS.with_resource("", resource).resolver(base_uri=""))
