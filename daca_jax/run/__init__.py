"""The main job: what turns the algorithms into a training run, and nothing else.

* :mod:`~daca_jax.run.pipeline`: the main job, read top to bottom (SFT warm start → evaluation → RL →
  evaluation); its pieces: :mod:`~daca_jax.run.sft_loop` (the SFT loop and its jitted step),
  :mod:`~daca_jax.run.rl_loop` (the RL loop), :mod:`~daca_jax.run.workdir` (what a workdir holds, what a
  rerun reuses and runs again), :mod:`~daca_jax.run.results` (``results.json``, plots, the table) and
  :mod:`~daca_jax.run.streams` (the seed's random streams). :mod:`~daca_jax.run.preflight` checks a config
  before any work starts; :mod:`~daca_jax.run.presets` and :mod:`~daca_jax.run.task_views` (the
  configured task, training and evaluation views).
* :mod:`~daca_jax.run.job_eval` (the job's evaluations under ``cfg.eval``, through
  :mod:`daca_jax.evaluation`) and :mod:`~daca_jax.run.eval_models` (the job's checkpoints as models to
  evaluate: ``experiments/evaluate.py``, :mod:`~daca_jax.run.export`, :mod:`~daca_jax.run.visualize`).
* :mod:`~daca_jax.run.checkpoint` (orbax, with :mod:`~daca_jax.run.checksum` and
  :mod:`~daca_jax.run.checkpoint_noise`), :mod:`~daca_jax.run.from_checkpoint` (RL from a Hugging Face
  checkpoint), :mod:`~daca_jax.run.guards` (non-finite values stop a run before they reach a checkpoint),
  :mod:`~daca_jax.run.preemption`.
* :mod:`~daca_jax.run.metrics`, :mod:`~daca_jax.run.dashboards` (TensorBoard / W&B),
  :mod:`~daca_jax.run.cli_errors` (one-line errors).

Around it, one package per job: :mod:`daca_jax.evaluation` below (the evaluation protocol, which the job
uses), :mod:`daca_jax.reports` (reproduction grids, comparisons, tables) and :mod:`daca_jax.measure`
(benchmarks, method costs) above. The core packages (``contracts``, ``diffusion``, ``credit``,
``likelihood``, ``rl``, ``models``, ``parallel``) never import this package; the layers are checked by
``tests/test_import_graph.py``.

Nothing is imported here, so ``import daca_jax.run.metrics`` loads only what that module needs. The
modules that moved out of this package are listed in ``docs/changelog.md``.
"""
