"""The job's configuration, in one home.

* The sections, one module per section and named as it is: ``model`` (``ModelConfig``), ``rollout``,
  ``credit`` (``CreditConfig`` and the credit methods' sub-sections), ``likelihood``, ``rl``, and ``train``
  (the job's own sections and ``TrainConfig``); ``checks`` holds the field checks they share. They are
  frozen dataclasses whose ``validate`` methods check values, types and cross-field constraints, each
  error a :class:`daca_jax.errors.ConfigError` naming the field (``section.name``), the value and what is
  allowed. They import nothing above the contracts, so every core package may import them.
* :mod:`daca_jax.config.configure`: a ``TrainConfig`` from an ``ml_collections.ConfigDict`` (what
  ``experiments/`` parses), old runs' ``config.json`` upgraded, and the names that registries resolve
  (``rl.credit``, ``task.name``, ...) and the methods' combinations checked: the one module of this package
  above the packages owning those registries.

Import each name from the module that defines it (``from daca_jax.config.rl import RLConfig``); this
``__init__`` imports nothing. Presets live in the repository's ``configs/``.
"""
