"""The job's configuration, in one home.

* The sections, one module per section and named as it is. They are frozen dataclasses whose
  ``validate`` methods check values, types and cross-field constraints, each error a
  :class:`daca_jax.errors.ConfigError` naming the field (``section.name``), the value and what is allowed.
* The core's sections: ``model`` (``ModelConfig``), ``rollout``, ``parallel``, and ``checks`` (the field
  checks every section shares). They import nothing above the contracts, so every core package may
  import them.
* The composed sections: ``credit`` (``CreditConfig``), ``likelihood``, ``rl``, and ``train`` (the job's
  own sections and ``TrainConfig``). Each method's own sub-section is defined beside the method
  (``credit.dps`` is :class:`daca_jax.credit.dps.DPSConfig`, ``rl.spg`` is
  :class:`daca_jax.rl.methods.spg.SPGConfig`), with the fields every method of a kind may read
  (:class:`daca_jax.rl.methods.base.LossOptions`, :class:`daca_jax.likelihood.base.EstimatorOptions`), so
  these modules sit above the algorithms, which name their classes in annotations only.
* :mod:`daca_jax.config.configure`: a ``TrainConfig`` from an ``ml_collections.ConfigDict`` (what
  ``experiments/`` parses), old runs' ``config.json`` upgraded, and the names that registries resolve
  (``rl.credit``, ``task.name``, ...) and the methods' combinations checked: the one module of this package
  above the packages owning those registries.

Import each name from the module that defines it (``from daca_jax.config.rl import RLConfig``); this
``__init__`` imports nothing. Presets live in the repository's ``configs/``.
"""
