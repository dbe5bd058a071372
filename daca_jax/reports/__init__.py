"""Reports of finished runs: reproduction grids, comparisons, variant tables and the docs' tables.

* :mod:`~daca_jax.reports.reproduce`: the ablation grid driver (seeded cells of the main job, shared warm
  starts, mean and 95% CI, bar chart); :mod:`~daca_jax.reports.compare`: runs side by side.
* :mod:`~daca_jax.reports.variants` (the variants file and its tables),
  :mod:`~daca_jax.reports.variant_runs` (a grid's finished jobs as a variants file) and
  :mod:`~daca_jax.reports.paired` (paired bootstrap and seed-level intervals over per-example outcomes).
* :mod:`~daca_jax.reports.table_files` (results tables as files) and :mod:`~daca_jax.reports.doc_tables`
  (the marked tables of README.md and docs/ equal their commands' output; ``experiments/tables.py``; the
  commands run through :mod:`~daca_jax.reports.table_commands`).

Layering: above :mod:`daca_jax.run` (the grid runs the main job, the tables read its workdirs) and
:mod:`daca_jax.evaluation` (per-example outcomes); nothing below imports this package
(``tests/test_import_graph.py``). Nothing is imported here, so ``import daca_jax.reports.paired`` loads
only what that module needs.
"""
