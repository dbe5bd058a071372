"""Measurement: speed, FLOPs, memory and cost figures of the library's programs.

* :mod:`~daca_jax.measure.benchmarking`: the helpers (timing, interleaved runs and their ratios, compiled
  FLOPs and memory, model FLOPs and MFU, a PyTorch-eager LLaDA sampler as a baseline);
* the sections of ``experiments/benchmark.py``, one module per group: :mod:`~daca_jax.measure.bench`
  (:class:`~daca_jax.measure.bench.Bench`, what every section measures, and its options),
  :mod:`~daca_jax.measure.bench_sampler` (rollout, profile, fast, peak8b, torch),
  :mod:`~daca_jax.measure.bench_update` (likelihood, memory, scaling, costs),
  :mod:`~daca_jax.measure.bench_sft` (accuracy, rl_iteration) and
  :mod:`~daca_jax.measure.bench_sections` (the chosen sections in order, one table of figures);
* :mod:`~daca_jax.measure.method_costs`: every credit / likelihood method's compiled cost;
* :mod:`~daca_jax.measure.loader_memory`: the checkpoint loader's peak host memory.

Layering: above :mod:`daca_jax.run` (the sections build the job's task and run its SFT); the job imports
nothing from here, and :mod:`daca_jax.planning` uses the helpers (``tests/test_import_graph.py``).
Nothing is imported here, so ``import daca_jax.measure.benchmarking`` loads only what that module needs.
"""
