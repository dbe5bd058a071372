"""GRPO-style RL for masked diffusion LMs, in two levels.

* The methods (:mod:`daca_jax.rl.methods`, one module each with its option section, and the
  ``rl.objective`` registry ``OBJECTIVES``) and the advantages (:mod:`daca_jax.rl.advantages`, registry
  ``ADVANTAGES``): below the composed config, which imports the methods' sections.
* The update built from a :class:`~daca_jax.config.train.TrainConfig`: the optimizer
  (:mod:`daca_jax.rl.optim`), the pure update-step factories (:mod:`daca_jax.rl.update`: ``make_update``,
  ``make_objective_grad``; :mod:`~daca_jax.rl.accumulate`, :mod:`~daca_jax.rl.pass_accum`) and the learner
  (:mod:`daca_jax.rl.learner`): above it.

So this ``__init__`` imports nothing: importing a method must not load the learner. Import each name from
the module that defines it (``from daca_jax.rl.learner import GRPOLearner``).
"""
