"""The ``json_schema`` task, split by job.

* :mod:`~daca_jax.tasks.json_schema.validation`: the schema compiler and grading (no ``eval``), over
  :mod:`~daca_jax.tasks.json_schema.parsing` (JSON parsing with bounds) and
  :mod:`~daca_jax.tasks.json_schema.bounded` (linear-time regexes, a work budget per completion);
* :mod:`~daca_jax.tasks.json_schema.generator`: seeded small schemas and valid instances of them;
* :mod:`~daca_jax.tasks.json_schema.bench`: JSONSchemaBench files, compiled, with the stable split;
* :mod:`~daca_jax.tasks.json_schema.task`: :class:`JSONSchemaTask` (prompts, targets, rewards,
  metrics), registered as ``"json_schema"``;
* :mod:`~daca_jax.tasks.json_schema.worker`: the grading worker process the task talks to.
"""
from daca_jax.tasks.json_schema.bench import (BENCH_DIR, BENCH_SUBSETS, BenchSchema, LoadReport, compact,
                                             load_jsonschemabench)
from daca_jax.tasks.json_schema.task import (GENERATED_MAX_SCHEMA_CHARS, GENERATED_MAX_TARGET_CHARS,
                                            PROMPT_STYLES, SOURCES, TARGET_STYLES, JSONSchemaTask)
from daca_jax.tasks.json_schema.validation import (MAX_JSON_DEPTH, SKIP_REASONS, CompiledSchema, Grade,
                                                  SchemaCompileError, compile_fast, compile_schema, parse_json)

__all__ = ["BENCH_DIR", "BENCH_SUBSETS", "GENERATED_MAX_SCHEMA_CHARS", "GENERATED_MAX_TARGET_CHARS", "MAX_JSON_DEPTH",
           "PROMPT_STYLES", "SKIP_REASONS", "SOURCES", "TARGET_STYLES", "BenchSchema", "CompiledSchema", "Grade",
           "JSONSchemaTask", "LoadReport", "SchemaCompileError", "compact", "compile_fast", "compile_schema",
           "load_jsonschemabench", "parse_json"]
