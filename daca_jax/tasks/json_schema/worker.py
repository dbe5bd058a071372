"""Grading worker of the ``json_schema`` task (not for direct use).

  python -m daca_jax.tasks.json_schema.worker MEMORY_BYTES

One JSON request per stdin line, ``{"key", "text", "fast", ["schema"]}`` (``schema``: the schema's
JSON text, sent the first time a worker process sees ``key``; ``fast``: a trusted generated schema,
compiled without the meta-schema check), answered with ``[parsed, valid, validator_error,
bound_hit]`` (:meth:`daca_jax.tasks.json_schema.validation.CompiledSchema.grade`) or ``null`` when the request
could not be served. The parent (:class:`daca_jax.tasks.json_schema.JSONSchemaTask`) kills this
process when one completion takes longer than its time limit.
"""
import collections
import json
import sys

from daca_jax.tasks import grader_worker

_MAX_CACHED_SCHEMAS = 4096


def main() -> None:
  grader_worker.limit_memory(int(sys.argv[1]))
  from daca_jax.tasks.json_schema import validation as json_validation  # pylint: disable=import-outside-toplevel

  cache: collections.OrderedDict = collections.OrderedDict()

  def handle(request):
    key = request["key"]
    if key not in cache:
      schema = json.loads(request["schema"])  # missing: KeyError, answered null; the parent resends
      compile_ = json_validation.compile_fast if request.get("fast") else json_validation.compile_schema
      cache[key] = compile_(schema)
      while len(cache) > _MAX_CACHED_SCHEMAS:
        cache.popitem(last=False)
    grade = cache[key].grade(request["text"])
    return [grade.parsed, grade.valid, grade.validator_error, grade.bound_hit]

  grader_worker.serve(handle, failure=None)


if __name__ == "__main__":
  main()
