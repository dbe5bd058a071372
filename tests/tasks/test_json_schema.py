"""json_schema task: bounded parsing, schema compilation, JSONSchemaBench loading, generators, graders.

Oracles: fresh ``jsonschema`` validators built here from the schema's own ``$schema`` (independent of
the task's cached validators), the files on disk, and hand-written JSON.
"""
import json
import pathlib
import warnings

import jsonschema
import jsonschema.validators
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from daca_jax.data import local
from daca_jax.errors import ConfigError
from daca_jax.tasks.json_schema import generator as gen
from daca_jax.tasks import json_schema as js
from daca_jax.tasks.base import Example, make_task

BENCH = local.default_data_dir() / js.BENCH_DIR
needs_bench = pytest.mark.skipif(not BENCH.is_dir(), reason=f"JSONSchemaBench files not found at {BENCH}")


@pytest.fixture(scope="module")
def bench():
  """(schemas, report) of the whole bench: compiling all 3650 files takes ~15 s, so once per module."""
  return js.load_jsonschemabench(BENCH)


def _fresh_is_valid(schema, instance):
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
  return cls(schema).is_valid(instance)


@pytest.mark.parametrize("text,ok,value", [
    ('{"a": 1}', True, {"a": 1}),
    ('  \n[1, "x", null]\n', True, [1, "x", None]),
    ('```json\n{"a": true}\n```', True, {"a": True}),
    ("7", True, 7),
    ('{"a": 1', False, None),
    ('{"a": 1} trailing', False, None),
    ("NaN", False, None),
    ('{"a": Infinity}', False, None),
    ("", False, None),
    ("[" * 65 + "]" * 65, False, None),  # deeper than MAX_JSON_DEPTH
    ('"' + "[" * 100 + '"', True, "[" * 100),  # brackets inside a string do not count
    ("1" * 5000, False, None),  # beyond Python's int-digit limit: ValueError, caught
    ('{"a": "x", "a": 1}', False, None),  # a repeated key: json.loads keeps the last, a first-wins reader the first
    ('{"a": {"b": 1, "b": 2}}', False, None),
    ('{"a": 1, "b": {"a": 2}}', True, {"a": 1, "b": {"a": 2}}),  # the same key in two objects is fine
    ("-1e400", False, None),  # overflows to -inf: would pass {"maximum": 10}
    ('[1e308, 2.5]', True, [1e308, 2.5]),
    ('{"a": 1}<|eot_id|>', True, {"a": 1}),  # cut at the end-of-text marker, as every grader cuts
    ('```json\n{"a": 1}\n```<|im_end|>', True, {"a": 1}),
])
def test_parse_json(text, ok, value):
  assert js.parse_json(text) == (ok, value)


def test_parse_json_bounds_and_types():
  assert js.parse_json(None) == (False, None)
  assert js.parse_json(b"{}") == (False, None)
  assert js.parse_json(" " * 10 + "{}", max_chars=11) == (False, None)
  assert js.parse_json("[[1]]", max_depth=1) == (False, None)
  assert js.parse_json("[[1]]", max_depth=2) == (True, [[1]])


@pytest.mark.parametrize("schema,reason", [
    ([1, 2], "not_a_schema"),
    ({"type": 5}, "check_schema"),
    ({"$schema": "http://json-schema.org/draft-04/schema#", "minimum": "x"}, "check_schema"),
    ({"properties": {"a": {"$ref": "#/definitions/missing"}}}, "unresolvable_ref"),
    ({"$ref": "https://example.invalid/remote.json"}, "unresolvable_ref"),
    ({"x-vendor": {"pattern": "(unclosed"}}, "regex"),
    ({"$ref": "#"}, "validate_exception"),  # validating recurses forever
])
def test_compile_schema_reports_the_reason(schema, reason):
  with pytest.raises(js.SchemaCompileError) as e:
    js.compile_schema(schema)
  assert e.value.reason == reason


def test_compile_schema_resolves_local_and_nested_refs():
  schema = {"$schema": "http://json-schema.org/draft-07/schema#",
            "definitions": {"pos": {"type": "integer", "minimum": 1}},
            "type": "object", "properties": {"n": {"$ref": "#/definitions/pos"}}, "required": ["n"]}
  c = js.compile_schema(schema)
  assert c.validate({"n": 3}) and not c.validate({"n": 0}) and not c.validate({})
  assert c.instance(None) == {"n": 1}


@pytest.mark.parametrize("schema", [
    {"type": "integer", "minimum": 1e308, "multipleOf": 1e-300},  # overflows inside the generator
    {"type": "string", "pattern": "^[a-f]{8}$"},  # patterns are not generated
    {"not": {"type": "null"}},
    {"type": "array", "minItems": 10**9},  # would need 10^9 items
    {"type": "string", "minLength": 10**9},
    {"type": "array", "minItems": 50, "items": {"type": "array", "minItems": 50,
                                                "items": {"type": "array", "minItems": 50}}},
])
def test_instance_generator_reports_unsupported(schema):
  with pytest.raises(gen.Unsupported):
    js.compile_schema(schema).instance(None)


@pytest.mark.parametrize("schema", [
    {"type": "object", "required": 5},  # not a list
    {"type": "object", "properties": {"a": 3}, "required": ["a"]},
    {"type": "array", "items": [1, 2], "minItems": 1},
    {"allOf": [{"$ref": 7}]},
    {"type": "integer", "minimum": "3", "maximum": [1], "multipleOf": "x"},
    {"type": ["string", 3], "minLength": -4, "maxLength": "x"},
    {"anyOf": [{"type": "object", "minProperties": "2"}]},
    {"enum": {"a": 1}, "type": "object", "properties": {"x": {"const": 1}}, "required": ["x", 4]},
])
def test_generator_failures_on_odd_schemas_are_unsupported(schema):
  """Schemas the meta-schema would reject still never crash the generator."""
  try:
    gen.generate_instance(schema, lambda ref: {}, None)
  except gen.Unsupported:
    pass


_schema_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 10**12) | st.floats(allow_nan=False) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["type", "properties", "required", "items", "prefixItems", "minItems", "maxItems",
                         "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum",
                         "multipleOf", "enum", "const", "allOf", "anyOf", "oneOf", "$ref", "format",
                         "additionalProperties", "minProperties", "uniqueItems", "additionalItems",
                         "string", "integer", "number", "object", "array", "boolean", "null"]),
        inner, max_size=5),
    max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(_schema_values, st.integers(0, 2**32 - 1))
def test_generator_returns_or_raises_unsupported_on_anything(schema, seed):
  for rng in (None, np.random.default_rng(seed)):
    try:
      value = gen.generate_instance(schema, lambda ref: {"type": "integer"}, rng)
    except gen.Unsupported:
      continue
    json.dumps(value)  # a JSON value


@needs_bench
def test_jsonschemabench_compile_count(bench):
  schemas, report = bench
  files = {f"{s}/{p.name}" for s in js.BENCH_SUBSETS for p in (BENCH / s).glob("*.json")}
  skipped = {k for v in report.skipped.values() for k, _ in v}
  print(f"\nJSONSchemaBench: {report.summary()}")
  assert report.num_files == len(files) == 1943 + 1707  # the counts in SOURCES.md
  assert report.num_compiled == len(schemas)
  assert {s.key for s in schemas} | skipped == files and not {s.key for s in schemas} & skipped
  # Independent check of the meta-schema step: skipped-for-check_schema files fail check_schema here,
  # and every compiled schema passes it.
  for key, _ in report.skipped.get("check_schema", ()):
    schema = json.loads((BENCH / key).read_text())
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    with pytest.raises(jsonschema.SchemaError):
      cls.check_schema(schema)
  for s in schemas[::25]:
    cls = jsonschema.validators.validator_for(s.compiled.schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(s.compiled.schema)


@needs_bench
def test_generated_instances_validate_and_broken_ones_do_not(bench):
  schemas, _ = bench
  sample = schemas[::7]
  covered = broken_checked = 0
  for s in sample:
    try:
      inst = s.compiled.instance(None)
    except gen.Unsupported:
      continue
    covered += 1
    assert _fresh_is_valid(s.compiled.schema, inst), s.key
    broken = gen.break_instance(s.compiled.schema, inst)
    if broken is not None:
      broken_checked += 1
      assert not _fresh_is_valid(s.compiled.schema, broken[0]), (s.key, broken[1])
  print(f"\ninstance generator coverage on a sample of {len(sample)} compiling schemas: {covered} "
        f"({covered / len(sample):.1%}); broken variants checked: {broken_checked}")
  assert covered / len(sample) > 0.85
  assert broken_checked / covered > 0.9


def test_small_schema_generator_targets_are_valid_and_sized():
  task = make_task("json_schema", data_dir=None, eval_size=50)
  ev, source = task.eval_examples()
  tr = task.train_examples(300, seed=3)
  assert "GENERATED" in source and len(ev) == 50 and len(tr) == 300
  assert not {e.prompt for e in ev} & {e.prompt for e in tr}
  assert len({e.prompt for e in tr}) == 300
  assert [e.prompt for e in task.train_examples(300, seed=3)] == [e.prompt for e in tr]
  for e in ev + tr:
    schema = json.loads(e.prompt)
    assert schema["type"] == "object" and 1 <= len(schema["properties"]) <= 3
    assert _fresh_is_valid(schema, json.loads(e.target))
    assert len(e.prompt) <= js.GENERATED_MAX_SCHEMA_CHARS and len(e.target) <= js.GENERATED_MAX_TARGET_CHARS
  for e in tr[:50]:  # "minimal" targets: exactly the required properties, each at its first allowed value
    schema = json.loads(e.prompt)
    assert list(json.loads(e.target)) == [p for p in schema["properties"] if p in schema["required"]]
  random_targets = make_task("json_schema", data_dir=None, eval_size=50, target_style="random")
  rt = random_targets.train_examples(300, seed=3)
  assert all(_fresh_is_valid(json.loads(e.prompt), json.loads(e.target)) for e in rt)
  assert sum(set(json.loads(e.target)) != set(json.loads(e.prompt)["required"]) for e in rt) > 50
  prompts = task.encode_prompts(ev)
  targets = task.encode_targets(ev, task.min_gen_length)
  assert prompts.shape == (50, task.prompt_len) and targets.shape == (50, task.min_gen_length)


def test_rewards_and_metrics_exact():
  task = make_task("json_schema", data_dir=None, eval_size=4, parse_reward=0.25)
  ex = Example(prompt="", target="", meta={"schema": js.compact(
      {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"enum": ["x", "y"]}},
       "required": ["a"], "additionalProperties": False})})
  completions = ['{"a": 1, "b": "y"}', '{"a": 1, "c": 2}', '{"b": "x"}', "not json", ' {"a":-4} ', "[1]"]
  r = task.reward(completions, [ex] * len(completions))
  np.testing.assert_array_equal(r, np.array([1, 0.25, 0.25, 0, 1, 0.25], np.float32))
  m = task.metrics(completions, [ex] * len(completions))
  assert m == {"schema_adherence": 2 / 6, "json_parse_rate": 5 / 6, "validator_errors": 0.0,
               "grader_bound_hits": 0.0, "num_examples": 6.0}
  with pytest.raises(ValueError):
    task.reward(["{}"], [ex, ex])


def test_validator_exception_scores_zero_and_is_counted():
  # jsonschema's multipleOf divides the instance by a float: a 401-digit integer overflows there.
  task = make_task("json_schema", data_dir=None, eval_size=4)
  ex = Example(prompt="", target="", meta={"schema": js.compact({"type": "number", "multipleOf": 0.5})})
  huge = "1" + "0" * 400
  assert task.metrics([huge, "x", "3.5"], [ex] * 3) == {
      "schema_adherence": 1 / 3, "json_parse_rate": 2 / 3, "validator_errors": 1.0,
      "grader_bound_hits": 0.0, "num_examples": 3.0}
  assert task.reward([huge], [ex]).tolist() == [0.0]


def test_chat_prompt_style_and_bad_options():
  task = make_task("json_schema", data_dir=None, eval_size=3, prompt_style="chat")
  ev, _ = task.eval_examples()
  assert ev[0].prompt.startswith("<|start_header_id|>user<|end_header_id|>\n\n")
  assert ev[0].prompt.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")
  assert ev[0].meta["schema"] in ev[0].prompt
  assert task.encode_prompts(ev).shape == (3, task.prompt_len)
  for kwargs, field in [({"source": "web"}, "task.options.source"),
                        ({"prompt_style": "xml"}, "task.options.prompt_style"),
                        ({"eval_fraction": 0.0}, "task.options.eval_fraction"),
                        ({"parse_reward": 1.0}, "task.options.parse_reward"),
                        ({"subsets": "Github_easy"}, "task.options.subsets"),
                        ({"target_style": "max"}, "task.options.target_style")]:
    with pytest.raises(ConfigError, match=field):
      make_task("json_schema", data_dir=None, **kwargs)


@pytest.mark.slow
@needs_bench
def test_generator_on_every_jsonschemabench_schema(bench):
  """Both folders, all schemas that compile: every generated instance validates (checked here by
  a fresh jsonschema validator), every failure is Unsupported."""
  schemas, _ = bench
  covered = unsupported = 0
  for s in schemas:
    for rng in (None, np.random.default_rng(0)):
      try:
        inst = s.compiled.instance(rng)
      except gen.Unsupported:
        unsupported += 1
        continue
      assert _fresh_is_valid(s.compiled.schema, inst), s.key
      covered += 1
  print(f"\ngenerator on {len(schemas)} JSONSchemaBench schemas x 2 draws: {covered} valid instances, "
        f"{unsupported} Unsupported")
  assert covered > 0.85 * 2 * len(schemas)


@needs_bench
def test_jsonschemabench_source():
  task = make_task("json_schema", data_dir="", source="jsonschemabench", max_schema_chars=400,
                   eval_fraction=0.5)
  ev, source = task.eval_examples()
  tr = task.train_examples(50, seed=0)
  assert "3649 of 3650 schemas compile" in source or "schemas compile" in source
  assert all(len(e.meta["schema"]) <= 400 for e in ev + tr)
  assert not {e.meta["schema_id"] for e in ev} & {e.meta["schema_id"] for e in tr}
  assert task.reward([e.target for e in tr], tr).tolist() == [1.0] * 50
  assert task.encode_prompts(ev[:5]).shape == (5, task.prompt_len)


# Completions: each hypothesis draw (a JSON value, a text and a seed) expands into 50 completions by
# cheap seeded mutations (cuts, insertions, deep nesting, number edge cases), 200 draws = 10k completions.
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=12)
_SPECIAL = ["NaN", "-Infinity", "1e999", "-0", "1" * 4400, '"\\ud800"', "\x00", "```json\n{}\n```", "",
            "[" * 300 + "]" * 300, '{"a":' * 100 + "1" + "}" * 100, "{" * 70, '{"a":1}{"b":2}']


def _expand(value, text, seed, n=50):
  rng = np.random.default_rng(seed)
  base = json.dumps(value)
  out = []
  for k in range(n):
    kind = k % 5
    if kind == 0:
      out.append(base)
    elif kind == 1:
      out.append(base[:int(rng.integers(0, len(base) + 1))])
    elif kind == 2:
      pos = int(rng.integers(0, len(base) + 1))
      out.append(base[:pos] + text + base[pos:])
    elif kind == 3:
      out.append(text)
    else:
      out.append(_SPECIAL[int(rng.integers(len(_SPECIAL)))])
  return out


@pytest.fixture(scope="module")
def fuzz_setup():
  task = make_task("json_schema", data_dir=None, eval_size=20)
  examples = task.eval_examples()[0]
  extra = [{"$ref": "#/$defs/t", "$defs": {"t": {"type": "array", "items": {"$ref": "#/$defs/t"}}}},
           {"type": "string", "pattern": "^a+$", "format": "date-time"},
           {"anyOf": [{"type": "integer", "multipleOf": 0.01}, {"const": {"a": [1]}}]}]
  examples += [Example(prompt="", target="", meta={"schema": js.compact(s)}) for s in extra]
  return task, examples


@settings(max_examples=200, deadline=None, derandomize=True)
@given(_json_values, st.text(max_size=20), st.integers(0, 2**32 - 1))
def test_graders_never_raise(fuzz_setup, value, text, seed):  # 200 draws x 50 = 10k completions
  task, examples = fuzz_setup
  completions = _expand(value, text, seed)
  batch = [examples[i % len(examples)] for i in range(len(completions))]
  r = task.reward(completions, batch)
  assert r.shape == (50,) and set(np.unique(r)) <= {0.0, 1.0}
  m = task.metrics(completions, batch)
  assert 0.0 <= m["schema_adherence"] <= m["json_parse_rate"] <= 1.0
  assert r[0] == (1.0 if js.compile_fast(json.loads(batch[0].meta["schema"])).validate(value) else 0.0)


@pytest.mark.slow  # json_schema end to end; the graders and generator are tested above, the main job on sudoku
def test_smoke_main_job(tmp_path):
  from configs.json_schema_tiny import get_config  # noqa: PLC0415
  from daca_jax.run.pipeline import run_main_job
  from daca_jax.config.configure import train_config_from_dict

  cfg = get_config("smoke")
  cfg.rl.steps = 2
  cfg.sft.steps = 20
  results = run_main_job(train_config_from_dict(cfg), tmp_path, show_progress=False, log=lambda s: None)
  for phase in ("eval_before", "eval_after"):
    assert set(results[phase]) == {"schema_adherence", "json_parse_rate", "validator_errors",
                                   "grader_bound_hits", "num_examples"}
    assert results[phase]["num_examples"] == 32.0
  lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
  assert len(lines) == 2 and all(0.0 <= json.loads(l)["reward_mean"] <= 1.0 for l in lines)
  assert pathlib.Path(tmp_path / "results.json").is_file()
