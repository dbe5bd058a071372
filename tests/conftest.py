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

# The suite runs on the CPU (8 simulated devices where it needs several). [test] installs XLA's TPU and GPU
# compilers (the target-compile tests), whose plugins, on a machine without the hardware, otherwise try
# to start at every `import jax` and print their failures; subprocesses inherit the setting.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# One cache per test session, removed at its end: a cache shared by concurrent sessions on one machine
# (two pytest runs, a run beside a training job's tests) let one read another's half-written entry,
# which crashed the reading process inside XLA's deserializer (a segmentation fault).
# Under pytest-xdist (``-n``) each worker process is a session of its own and gets its own cache (its
# subprocesses inherit it); the controller's, inherited by the workers, is replaced.
if ("JAX_COMPILATION_CACHE_DIR" not in os.environ
    or os.environ.get("_DACA_JAX_TEST_CACHE_OF") not in (None, os.environ.get("PYTEST_XDIST_WORKER", ""))):
  _CACHE = tempfile.mkdtemp(prefix="daca_jax_test_xla_cache_")
  os.environ["JAX_COMPILATION_CACHE_DIR"] = _CACHE
  os.environ["_DACA_JAX_TEST_CACHE_OF"] = os.environ.get("PYTEST_XDIST_WORKER", "")
  atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
try:  # a size limit turns on JAX's file lock around every cache read and write (processes run concurrently)
  import filelock  # noqa: F401  (what JAX's locked cache needs)

  os.environ.setdefault("JAX_COMPILATION_CACHE_MAX_SIZE", str(8 << 30))
except ImportError:
  pass
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

# Every compiled program stays mapped in the process (about six memory mappings each: code, constants)
# for as long as JAX's in-memory caches hold it. The test session compiles thousands of programs, and by
# about two thirds of the suite the process passed Linux's limit of 65,530 mappings per process
# (vm.max_map_count); the next mmap failed inside XLA and the process died with SIGSEGV, in compilation
# or in the persistent cache's (de)serialisation (CI stop 34, and twice on a loaded machine). Releasing
# the caches after each test module keeps the count to what one module compiles; the persistent cache
# makes a later module's recompilation of the same program a read.
import gc  # noqa: E402

import jax  # noqa: E402  (after the environment above, which subprocesses inherit)
import pytest  # noqa: E402


_MAPS = "/proc/self/maps"
_MAPS_CEILING = 30_000  # half the kernel's default limit: one heavy module must not reach it either


def _release_compiled_programs() -> None:
  jax.clear_caches()
  gc.collect()


@pytest.fixture(autouse=True, scope="module")
def _release_after_each_module():
  yield
  _release_compiled_programs()


def pytest_runtest_teardown(item):
  if os.path.exists(_MAPS):
    with open(_MAPS, "rb") as f:
      if sum(1 for _ in f) > _MAPS_CEILING:
        _release_compiled_programs()


def pytest_addoption(parser):
  parser.addoption("--runslow", action="store_true", default=False,
                   help="also run the tests marked slow (more main-job variants; the 8B benchmark path)")
  parser.addoption("--group", default=None, metavar="I/N",
                   help="run the I-th of N groups of the selected tests (1 <= I <= N): every N-th test of the "
                        "collection order, starting at the I-th; the slow tests' groups (docs/reliability.md)")


def pytest_configure(config):
  config.addinivalue_line("markers", "slow: a long test left out of the default run (use --runslow)")


def _group(spec: str) -> tuple[int, int]:
  """``(i, n)`` of ``--group=i/n``; a UsageError names the flag otherwise."""
  try:
    i, n = (int(x) for x in spec.split("/"))
  except ValueError:
    i = n = 0
  if not 1 <= i <= n:
    raise pytest.UsageError(f"--group={spec}: expected I/N with 1 <= I <= N, e.g. --group=2/4")
  return i, n


@pytest.hookimpl(trylast=True)  # after -m / -k have deselected: the groups split what is left
def pytest_collection_modifyitems(config, items):
  spec = config.getoption("--group")
  if spec:
    i, n = _group(spec)
    # Interleaved rather than contiguous: each group gets its share of every file's tests (the heavy
    # end-to-end files sit next to each other in collection order).
    keep = items[i - 1::n]
    kept = set(map(id, keep))
    config.hook.pytest_deselected(items=[x for x in items if id(x) not in kept])
    items[:] = keep
  if config.getoption("--runslow"):
    return
  skip = pytest.mark.skip(reason="slow: run with --runslow")
  for item in items:
    if "slow" in item.keywords:
      item.add_marker(skip)
