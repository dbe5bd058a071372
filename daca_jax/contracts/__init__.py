"""The contracts between the library's parts, in one place.

* :mod:`~daca_jax.contracts.model`: ``LogitsFn`` (a Protocol) and :class:`ModelFns`, the model as the
  library uses it (logits, hidden/head split, chunked log-prob gathering, the graph for K/V caches);
  :func:`as_model_fns` wraps a user's plain function at every entry point.
* :mod:`~daca_jax.contracts.trajectory`: :class:`Trajectory`, what a rollout returns.
* :mod:`~daca_jax.contracts.scores`: :class:`TokenScores`, what every likelihood estimator returns
  (log-probs per scored context, with ELBO factors for the ELBO-type estimators), and
  :func:`objective_inputs`, how an objective reads it.
* :mod:`~daca_jax.contracts.batch`: :class:`PolicyBatch`, the stop-gradient inputs of an objective.
* :mod:`~daca_jax.contracts.params`: :class:`ParamSplit`, the part of the parameters an update changes
  (LoRA's adapters), so that a compiled step does not return a copy of the frozen rest.
* :mod:`~daca_jax.contracts.shapes`: the trace-time shape checks every public entry point runs; a bad
  shape is a :class:`daca_jax.errors.ShapeError` naming the argument, the shape found and the shape
  expected.
* :mod:`~daca_jax.contracts.sharding`: where batch-first activations live under a device mesh (rows over
  the batch axes), for the model's layer boundaries and for code that maps a batch row by row.

This package imports only JAX, NumPy, the standard library and :mod:`daca_jax.errors`, so every other
module may import it.
"""
from daca_jax.contracts.batch import PolicyBatch, check_policy_batch
from daca_jax.contracts.model import (HeadFn, HiddenFn, LogitsFn, ModelFns, as_model_fns, call_hidden,
                                      call_logits, check_logits)
from daca_jax.contracts.params import ParamSplit
from daca_jax.contracts.scores import (ELBO_TERMS, SCORE_KINDS, TokenScores, check_token_scores, objective_inputs,
                                       objective_states, token_scores)
from daca_jax.contracts.shapes import (check_completion_rows, check_integer, check_optional_shape, check_shape,
                                       check_static_int, check_tokens, shape_of)
from daca_jax.contracts.trajectory import Trajectory, check_trajectory
from daca_jax.errors import ShapeError
