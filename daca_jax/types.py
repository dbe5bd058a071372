"""Typed, validated config sections.

``experiments/`` converts an ``ml_collections.ConfigDict`` into these frozen dataclasses once
(:func:`daca_jax.configure.train_config_from_dict`); the library only ever sees the dataclasses. Every
check raises :class:`daca_jax.errors.ConfigError` naming the field (``section.name``), the value and
what is allowed. The ``validate`` methods check values, types and cross-field constraints; the names
that registries resolve (``rl.credit``, ``task.name``, ...) are checked by
:func:`daca_jax.configure.validate`, which sits above the packages owning those registries (they all
import this module).

The sections live in :mod:`daca_jax.config`, one module per section named as it is (``config.rl`` holds
``RLConfig``, ``config.likelihood`` holds ``LikelihoodConfig`` and its per-estimator sub-sections, ...);
this module gathers them in one namespace, the import path the library and its users write.
"""
from daca_jax.contracts import LogitsFn, ModelFns, PolicyBatch, Trajectory  # noqa: F401  (re-exported)
from daca_jax.config.checks import (DOWNSAMPLE_RULES, DTYPES, FLOAT_MAX, INT_MAX, LR_SCHEDULES,
                                    STRATA_PARTITIONS, check_field_types)  # noqa: F401
from daca_jax.config.model import (ModelConfig, dream_7b_config, llada_8b_config, tiny_config)  # noqa: F401
from daca_jax.config.rollout import RolloutConfig  # noqa: F401
from daca_jax.config.credit import (ContrastConfig, CreditConfig, DPSConfig, DTCAConfig, DeltaConfig,
                                    PositionValueConfig)  # noqa: F401
from daca_jax.config.likelihood import (CoupledConfig, ELBOConfig, ELBOMCConfig, ESPOELBOConfig,
                                        ESPO_STRATIFY, LikelihoodConfig, RLDFConfig, SPGBlockConfig,
                                        StepMergeConfig, StratifiedConfig, TrajectoryConfig)  # noqa: F401
from daca_jax.config.rl import (RLConfig, SPGConfig)  # noqa: F401
from daca_jax.config.train import (CheckpointConfig, DataConfig, EVAL_PROTOCOLS, EvalConfig, LogConfig,
                                   ParallelConfig, SFTConfig, TaskConfig, TrainConfig, VAL_SPLITS)  # noqa: F401
