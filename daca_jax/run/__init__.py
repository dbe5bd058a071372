"""The application layer: what turns the algorithms into runs.

* :mod:`~daca_jax.run.pipeline`: the main job (SFT warm start, RL loop, evaluations, workdir and
  resume); :mod:`~daca_jax.run.preflight` checks a config before any work starts.
* :mod:`~daca_jax.run.evaluation` (one decode loop, d1's greedy protocol) and
  :mod:`~daca_jax.run.harness` (checkpoint loaders, resumable evaluation files, reports).
* :mod:`~daca_jax.run.checkpoint` (orbax, with :mod:`~daca_jax.run.checksum` and
  :mod:`~daca_jax.run.checkpoint_noise`), :mod:`~daca_jax.run.guards` (non-finite values stop a run
  before they reach a checkpoint).
* :mod:`~daca_jax.run.metrics`, :mod:`~daca_jax.run.dashboards` (TensorBoard / W&B),
  :mod:`~daca_jax.run.cli_errors` (one-line errors).
* :mod:`~daca_jax.run.reproduce` (seeded grids with paired confidence intervals),
  :mod:`~daca_jax.run.compare`, :mod:`~daca_jax.run.visualize`.
* :mod:`~daca_jax.run.benchmarking` and :mod:`~daca_jax.run.method_costs` (compiled FLOPs, memory,
  tokens/s).

The core packages (``contracts``, ``diffusion``, ``credit``, ``likelihood``, ``rl``, ``models``,
``parallel``) never import this package (``tests/test_import_graph.py``). Nothing is imported here,
so ``import daca_jax.run.metrics`` loads only what that module needs.
"""
