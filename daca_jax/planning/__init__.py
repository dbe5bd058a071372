"""Memory / time plans of RL runs from compiled programs (``experiments/plan.py``).

``devices``: accelerator table; ``spec``: what to plan and its checks; ``compiled``: the learner's real
rollout and update compiled from shapes; ``analytic``: the count they are checked against; ``plan``:
the record, fit and predicted time.
"""
