"""Test-session settings.

Many tests compile the same small programs (the smoke main job runs SFT, rollout, evaluation and
update steps of identical shapes, often in a subprocess). JAX's persistent compilation cache lets every
process of the session reuse them; the environment variables are read by each process's JAX at import,
so subprocesses inherit them. Results are unaffected: the cache is keyed by the compiled program.
"""
import os
import tempfile

os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(tempfile.gettempdir(), "daca_jax_test_xla_cache"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
