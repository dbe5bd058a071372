"""Test-session settings.

Many tests compile the same small programs (the smoke main job runs SFT, rollout, evaluation and
update steps of identical shapes, often in a subprocess). JAX's persistent compilation cache lets every
process of the session reuse them; the environment variables are read by each process's JAX at import,
so subprocesses inherit them. Results are unaffected: the cache is keyed by the compiled program.
"""
import atexit
import os
import shutil
import tempfile

# One cache per test session, removed at its end: a cache shared by concurrent sessions on one machine
# (two pytest runs, a run beside a training job's tests) let one read another's half-written entry,
# which crashed the reading process inside XLA's deserializer (a segmentation fault).
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  _CACHE = tempfile.mkdtemp(prefix="daca_jax_test_xla_cache_")
  os.environ["JAX_COMPILATION_CACHE_DIR"] = _CACHE
  atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
try:  # a size limit turns on JAX's file lock around every cache read and write (processes run concurrently)
  import filelock  # noqa: F401  (what JAX's locked cache needs)

  os.environ.setdefault("JAX_COMPILATION_CACHE_MAX_SIZE", str(8 << 30))
except ImportError:
  pass
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

# The cache serves the subprocesses (each `train.py` of a test recompiles the same smoke programs). The
# test session's own process compiles thousands of programs once each and gains little from it; twice
# in one day on a loaded 2-core machine it crashed (SIGSEGV) inside the cache's executable
# (de)serialisation, which killed the whole session. It keeps its in-memory cache only.
import jax  # noqa: E402  (after the environment above, which subprocesses inherit)

jax.config.update("jax_enable_compilation_cache", False)


def pytest_addoption(parser):
  parser.addoption("--runslow", action="store_true", default=False,
                   help="also run the tests marked slow (more main-job variants; the 8B benchmark path)")


def pytest_configure(config):
  config.addinivalue_line("markers", "slow: a long test left out of the default run (use --runslow)")


def pytest_collection_modifyitems(config, items):
  if config.getoption("--runslow"):
    return
  import pytest

  skip = pytest.mark.skip(reason="slow: run with --runslow")
  for item in items:
    if "slow" in item.keywords:
      item.add_marker(skip)
