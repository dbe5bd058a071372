"""Typed, validated config sections, one module per section (``model``, ``rollout``, ``credit``,
``likelihood``, ``rl``, and the job's sections with ``TrainConfig`` in ``train``); ``checks`` holds the
field checks they share. :mod:`daca_jax.types` gathers every section in one namespace. The package
imports nothing above the contracts, so every core package may import it.
"""
