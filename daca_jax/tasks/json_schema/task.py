"""JSON Schema task (``json_schema``): prompt = a JSON Schema, reward = the completion validates.

Grading (never ``eval``; bounded work per completion; :mod:`daca_jax.tasks.json_schema.validation`):

1. :func:`parse_json`: the completion, stripped of surrounding whitespace (and of one enclosing
   Markdown code fence), must be a single JSON value accepted by ``json.loads``; texts longer than
   ``text_scan.MAX_COMPLETION_CHARS`` or nested deeper than ``MAX_JSON_DEPTH`` are rejected before
   parsing, and the non-JSON constants ``NaN``/``Infinity`` are rejected.
2. The value must validate with ``jsonschema`` using the validator class named by the schema's
   ``$schema`` (Draft 2020-12 when absent). ``format`` is an annotation only (jsonschema's default),
   as in the JSON Schema specification. Regexes run on RE2, ``uniqueItems`` in linear time, and every
   validation has a work budget (json_validation's docstring lists the bounds).
3. Completions are graded in a worker process (:mod:`daca_jax.tasks.json_schema.worker`,
   :class:`~daca_jax.tasks.grader_worker.WorkerProcess`) with a CPU-time limit per completion
   (``grade_timeout_s``, default 0.6 s; a worker stuck in native code is killed and restarted), for
   whatever the bounds above miss. A completion that hits any bound scores 0 and is
   counted in the metric ``grader_bound_hits``.

Schemas are compiled once (:func:`compile_schema`): ``check_schema`` against the meta-schema, every
``$ref`` resolved (local documents and the bundled meta-schemas only: nothing is fetched), every
``pattern``/``patternProperties`` regex compiled with RE2 (patterns RE2 cannot express, such as
backreferences and lookaround, skip the schema with reason ``regex``), and a few probe instances
validated, so that lazy failures show up at load time. A schema that fails any step is skipped with
its reason and counted (:class:`LoadReport`), never a crash.

Sources (constructor arg ``source``, config ``task.options.source``):

* ``"generated"``: small seeded object schemas (:mod:`daca_jax.tasks.json_schema.generator`), SFT targets
  are valid instances from the seeded instance generator; sized for tiny byte-level models.
* ``"jsonschemabench"``: the schemas of guidance-ai/jsonschemabench (``data/<subset>/*.json``, one
  schema per file) under ``<data_dir>/jsonschemabench``; split into eval/train by a stable hash of
  ``subset/file``; SFT targets are generated instances where the generator covers the schema.

Prompt styles (``prompt_style``): ``"plain"`` (the compact schema JSON) and ``"chat"`` (an
instruction plus the schema in the tokenizer's chat template, for instruction-tuned checkpoints).

Metrics: ``schema_adherence`` (fraction of completions that parse and validate, i.e. JSONSchemaBench's
compliance rate), ``json_parse_rate``, ``validator_errors`` (validations that raised, or examples
whose schema does not compile, e.g. with a backreference pattern; they score 0),
``grader_bound_hits`` (completions that hit a grading bound; they score 0) and ``num_examples``.

Why one module over 350 lines: it is one task class, whose grading, prompt styles and sources are those
documented above; parsing, validation, generation and the bench's files are modules of their own.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Sequence

import numpy as np

from daca_jax.data import sources
from daca_jax.errors import ConfigError, DataError
from daca_jax.tasks import grader_worker
from daca_jax.tasks import text_scan
from daca_jax.tasks.base import TASKS, Example, Task
from daca_jax.tasks.json_schema import generator as gen
from daca_jax.tasks.json_schema import validation as json_validation
from daca_jax.tasks.json_schema.validation import (  # noqa: F401  (re-exported: the task's grading API)
    MAX_JSON_DEPTH, SKIP_REASONS, CompiledSchema, Grade, SchemaCompileError, compile_fast,
    compile_schema, parse_json)
from daca_jax.tasks.json_schema.bench import (BENCH_DIR, BENCH_SUBSETS, BenchSchema, LoadReport,  # noqa: F401
                                             compact, in_eval_split, load_jsonschemabench)
from daca_jax.tasks.tokenizer import Tokenizer

SOURCES = ("generated", "jsonschemabench")
PROMPT_STYLES = ("plain", "chat")
TARGET_STYLES = ("minimal", "random")

MAX_COMPLETION_CHARS = text_scan.MAX_COMPLETION_CHARS  # longer completions score 0 unparsed

# Generated-schema bounds: prompts and targets are resampled until they fit, so prompt_len and
# min_gen_length are fixed for the "generated" source.
GENERATED_MAX_SCHEMA_CHARS = 128
GENERATED_MAX_TARGET_CHARS = 31

_INSTRUCTION = "Reply with only a JSON value that is valid under this JSON Schema:\n{}"


@TASKS.register("json_schema")
class JSONSchemaTask(Task):
  """JSON Schema adherence: schema in, a valid JSON instance out.

  Args:
    data_dir: data directory (config ``data.data_dir``): ``None`` = none; ``""`` = the default if it
      exists; or a source of the benchmark files (:mod:`daca_jax.data.sources`, e.g. the TFDS datasets).
      JSONSchemaBench is read from ``<data_dir>/jsonschemabench``.
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
    grade_timeout_s: CPU seconds per graded completion in the grading worker (> 0, at most 10); a
      completion that needs more scores 0 and is a grader bound hit.
    worker_memory_mb: address-space cap of the grading worker (MiB, >= 256).
    tokenizer: the model's tokenizer (None: the byte tokenizer).

  Raises:
    ConfigError: a bad option (the message names ``task.options.<name>``), or the chat style with a
      tokenizer that has no chat template.
    DataError / FileNotFoundError: ``source="jsonschemabench"`` without the data folder.
  """

  name = "json_schema"
  primary_metric = "schema_adherence"
  prompt_styles = PROMPT_STYLES
  OPTIONS = {"data_dir": None, "source": "generated", "prompt_style": "plain", "eval_size": 200, "seed": 1234,
             "subsets": BENCH_SUBSETS, "eval_fraction": 0.5, "max_schema_chars": 0, "parse_reward": 0.0,
             "target_style": "minimal", "grade_timeout_s": 0.6, "worker_memory_mb": 2048}

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
      grade_timeout_s: float = 0.6,
      worker_memory_mb: int = 2048,
      tokenizer: Tokenizer | None = None,
  ):
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
    if (isinstance(grade_timeout_s, bool) or not isinstance(grade_timeout_s, (int, float))
        or not 0 < grade_timeout_s <= 10):
      raise ConfigError("task.options.grade_timeout_s", grade_timeout_s, "seconds in (0, 10]")
    if (isinstance(worker_memory_mb, bool) or not isinstance(worker_memory_mb, int)
        or worker_memory_mb < 256):
      raise ConfigError("task.options.worker_memory_mb", worker_memory_mb, "an int >= 256 (MiB)")
    if isinstance(subsets, str) or not all(isinstance(s, str) for s in subsets) or not subsets:
      raise ConfigError("task.options.subsets", subsets,
                        f"a non-empty list of folder names, e.g. {list(BENCH_SUBSETS)}")
    self.source = source
    self.prompt_style = prompt_style
    self._set_tokenizer(tokenizer)
    self.eval_size = int(eval_size)
    self.seed = int(seed)
    self.subsets = tuple(subsets)
    self.eval_fraction = float(eval_fraction)
    self.max_schema_chars = int(max_schema_chars)
    self.parse_reward = float(parse_reward)
    self.target_style = target_style
    self.benchmarks = sources.open_benchmarks(data_dir)
    self._compiled: dict[str, CompiledSchema] = {}
    self._eval: tuple[list[Example], str] | None = None
    self._bench: tuple[list[Example], list[Example], str] | None = None
    self.grade_timeout_s = float(grade_timeout_s)
    self.num_bound_hits = 0
    self._worker = grader_worker.WorkerProcess(
        "daca_jax.tasks.json_schema.worker", (int(worker_memory_mb) << 20,),
        cpu_limit_s=self.grade_timeout_s)
    self._sent: set[str] = set()  # schema keys the current worker process has compiled
    self._generated_texts: set[str] = set()  # schemas of this task's own generator (trusted)
    self._sent_generation = -1
    # The prompt around a schema (probed with "{}": the chat template trims an empty one away); a
    # schema's compact JSON is ASCII, at most one token per character.
    overhead = len(self.prompt_ids(self.format_prompt("{}"))) - len(self.tokenizer.encode("{}"))
    if source == "generated":
      self.prompt_len = overhead + GENERATED_MAX_SCHEMA_CHARS
      self.min_gen_length = GENERATED_MAX_TARGET_CHARS + 1
    else:
      bench_eval, bench_train, _ = self._bench_splits()
      self.prompt_len = max(len(self.prompt_ids(ex.prompt)) for ex in bench_eval + bench_train)
      self.min_gen_length = 3  # "{}" + EOS: the shortest useful answer; real answers are longer

  # ----- prompts and data -----

  def format_prompt(self, schema_text: str) -> str:
    """The prompt for a compact schema text in this task's ``prompt_style``."""
    if self.prompt_style == "chat":
      return self.chat_template.user_turn(_INSTRUCTION.format(schema_text))
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
      try:  # instance() validates what it returns: targets are always valid
        instance = compiled.instance(rng if self.target_style == "random" else None)
        if len(compact(instance)) > GENERATED_MAX_TARGET_CHARS:
          instance = compiled.instance(None)  # the minimal instance
      except gen.Unsupported:
        failures += 1
        continue
      if len(compact(instance)) > GENERATED_MAX_TARGET_CHARS:
        continue
      seen.add(text)
      self._generated_texts.add(text)
      out.append(self._example(f"generated/{seed}/{len(out)}", compiled, instance))
    return out

  def _bench_splits(self) -> tuple[list[Example], list[Example], str]:
    """(eval examples, train examples with a generated target, description); cached."""
    if self._bench is None:
      data = self.benchmarks
      if data is None or not any(data.has(f"{BENCH_DIR}/{s}") for s in self.subsets):
        where = "no data dir" if data is None else data.where(BENCH_DIR)
        raise DataError(f"task.options.source='jsonschemabench' needs the JSONSchemaBench folder "
                        f"<data.data_dir>/{BENCH_DIR} ({where} does not exist)")
      schemas, report = load_jsonschemabench(data, self.subsets)
      ev: list[Example] = []
      tr: list[Example] = []
      too_long = 0
      covered = 0
      for s in schemas:
        if self.max_schema_chars and len(compact(s.compiled.schema)) > self.max_schema_chars:
          too_long += 1
          continue
        if in_eval_split(s.key, self.eval_fraction):
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
      desc = (f"JSONSchemaBench {list(self.subsets)} in {data.where(BENCH_DIR)}: {report.summary()}; "
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

  def _payload(self, schema_text: str, completion: str, with_schema: bool) -> dict[str, Any]:
    payload = {"key": hashlib.sha1(schema_text.encode()).hexdigest(), "text": completion,
               "fast": schema_text in self._generated_texts}
    if with_schema:
      payload["schema"] = schema_text
    return payload

  def _grade_in_worker(self, items: Sequence[tuple[str, str]]) -> list[Grade]:
    """``(schema text, completion)`` pairs graded in the worker, one batch, each completion within
    its own CPU limit (see module docstring). A schema is sent the first time the current worker
    process needs it; a request the worker could not serve (it restarted and lacks the schema) is
    sent again with its schema."""
    worker = self._worker
    if self._sent_generation != worker.generation:
      self._sent.clear()
    payloads, sending = [], set()
    for schema_text, completion in items:
      key = hashlib.sha1(schema_text.encode()).hexdigest()
      payloads.append(self._payload(schema_text, completion, key not in self._sent and key not in sending))
      sending.add(key)
    answers = worker.request_many(payloads)
    grades = []
    for (schema_text, completion), payload, (status, response) in zip(items, payloads, answers):
      if status == grader_worker.OK and response is None:  # not served: resend with the schema
        status, response = worker.request(self._payload(schema_text, completion, True))
      if status == grader_worker.TIMEOUT:
        grades.append(Grade(parsed=parse_json(completion)[0], bound_hit=True))
      elif status == grader_worker.OK and isinstance(response, list) and len(response) == 4:
        grades.append(Grade(*map(bool, response)))
        self._sent.add(payload["key"])
      else:
        grades.append(Grade(parsed=parse_json(completion)[0], validator_error=True))
    self._sent_generation = worker.generation
    return grades

  def _grade(self, completions: Sequence[str], examples: Sequence[Example]) -> list[Grade]:
    if len(completions) != len(examples):
      raise ValueError(f"got {len(completions)} completions for {len(examples)} examples")
    grades: list[Grade | None] = []
    todo = []
    for i, (c, ex) in enumerate(zip(completions, examples)):
      try:
        self._schema(ex)
      except SchemaCompileError:  # e.g. a backreference pattern: refused, the completion scores 0
        grades.append(Grade(parsed=parse_json(c)[0], validator_error=True))
        continue
      if text_scan.over_limit(c):
        grades.append(Grade(bound_hit=True))
        continue
      grades.append(None)
      todo.append((i, ex.meta["schema"], c))
    for (i, _, _), grade in zip(todo, self._grade_in_worker([(t, c) for _, t, c in todo])):
      grades[i] = grade
    self.num_bound_hits += sum(g.bound_hit for g in grades)
    return grades

  def reward(self, completions: Sequence[str], examples: Sequence[Example]) -> np.ndarray:
    """float32 ``[N]``: 1.0 if the completion parses and validates, ``parse_reward`` if it only
    parses, else 0.0 (also for a completion that hit a grading bound)."""
    grades = self._grade(completions, examples)
    return np.asarray([0.0 if g.bound_hit else 1.0 if g.valid else self.parse_reward if g.parsed
                       else 0.0 for g in grades], np.float32).reshape(len(examples))

  def metrics(self, completions: Sequence[str], examples: Sequence[Example]) -> dict[str, float]:
    """``schema_adherence``, ``json_parse_rate`` (fractions; 0.0 when N = 0), ``validator_errors``
    and ``grader_bound_hits`` (counts), and ``num_examples``."""
    grades = self._grade(completions, examples)
    n = len(examples)
    return {
        "schema_adherence": sum(g.valid for g in grades) / n if n else 0.0,
        "json_parse_rate": sum(g.parsed for g in grades) / n if n else 0.0,
        "validator_errors": float(sum(g.validator_error for g in grades)),
        "grader_bound_hits": float(sum(g.bound_hit for g in grades)),
        "num_examples": float(n),
    }

  def grading_rules(self) -> str:
    """One line naming the grading rules (evaluation summary)."""
    return ("one JSON value (one Markdown fence allowed) validated by jsonschema under its $schema "
            "(format not asserted); regexes on RE2, linear uniqueItems, "
            f"{json_validation.MAX_VALIDATION_STEPS} work units and {self.grade_timeout_s:g} s CPU per "
            f"completion (worker); parse-only reward {self.parse_reward:g}; completions > "
            f"{text_scan.MAX_COMPLETION_CHARS} chars score 0")
