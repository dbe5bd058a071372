"""Memory / time plans of RL runs from compiled programs (``experiments/plan.py``).

``devices``: accelerator table; ``spec``: a :class:`PlanSpec` setting and its checks; ``preset``: a run's
own config (e.g. ``configs/paper.py:<name>``) made ready for a plan; ``compiled``: the learner's real
rollout and update compiled from shapes; ``hlo_cost``: XLA's cost of a compiled program with every loop
counted; ``analytic``: the count they are checked against; ``plan``: the record, fit and predicted
time; ``report``: its text and the paper presets' table.
"""
