"""Measurement studies over the library's estimators (each driven by a script in ``experiments/``).

* :mod:`~daca_jax.studies.estimator_study`: bias and variance of every likelihood estimator against the
  exact any-order log-likelihood of enumerable toy completions.
* :mod:`~daca_jax.studies.gradient_study`: the GRPO update of every estimator x credit against the true
  gradient of the sampler's expected reward (cosine, batch agreement, KL-regularised bias), over
  :mod:`~daca_jax.studies.exact_gradient` (that gradient, enumerated) and :mod:`~daca_jax.studies.gradient_report`.
* :mod:`~daca_jax.studies.alignment_study`: on a real task, how closely each estimator's update
  follows the sampler's own trajectory policy gradient.
* :mod:`~daca_jax.studies.credit_alignment`: how close each credit assigner's per-token advantages
  come to a task's own per-token credit (Sudoku's per-cell correctness), on the same rollouts.
"""
