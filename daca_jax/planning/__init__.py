"""Memory / time plans of RL runs from compiled programs (``experiments/plan.py``).

``devices``: accelerator table; ``simulate``: the simulated CPU devices of a plan (before jax loads);
``spec``: the flag setting (a paper preset, the table's geometry, the flags' fields) as a TrainConfig;
``preset``: a run's own config (e.g. ``configs/paper.py:<name>``) made ready for a plan; ``compiled``: the
learner's real rollout and update compiled from shapes; ``hlo_cost``: XLA's cost of a compiled program with
every loop counted; ``analytic``: the count they are checked against; ``plan``: the record, fit and
predicted time; ``report``: its text and the sweeps' tables; ``sweep``: the ``--sweep`` and
``--paper_sweep`` settings, one process each; ``iteration``: one iteration measured next to its plan
(``experiments/iteration_check.py``).
"""
