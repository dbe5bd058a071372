"""Device meshes and parallel updates.

``make_mesh`` builds the ``('data', 'fsdp', 'tensor')`` mesh; ``compile_update`` turns the learner's
one-device update into a ``pmap`` (replicated parameters, per-device gradients averaged) or ``fsdp``
(``jax.jit`` + ``NamedSharding``) step chosen by ``cfg.parallel.strategy``; ``distributed`` holds the
multi-host helpers.
"""
from daca_jax.parallel.data_parallel import make_pmap_update, per_sequence_keys, shard_rows
from daca_jax.parallel.distributed import (ProcessShare, global_batch, is_multiprocess, is_primary, maybe_initialize,
                                          process_slice, rows_to_devices, sync_processes, to_global,
                                          to_host)
from daca_jax.parallel.fsdp import fsdp_shardings, fsdp_spec, make_fsdp_update
from daca_jax.parallel.mesh import (AXES, BATCH_AXES, batch_shardings, check_batch_size, make_mesh,
                                    mesh_shape, num_batch_shards)
from daca_jax.parallel.strategy import (ROLLOUT_GATHER_FRACTION, compile_update, gathers_rollout_weights,
                                       shard_rollout, wrap_likelihood)

__all__ = ["AXES", "BATCH_AXES", "ProcessShare", "ROLLOUT_GATHER_FRACTION", "gathers_rollout_weights", "batch_shardings", "check_batch_size", "compile_update",
           "fsdp_shardings", "fsdp_spec", "global_batch", "is_multiprocess", "is_primary",
           "make_fsdp_update", "make_mesh", "make_pmap_update", "maybe_initialize", "mesh_shape",
           "num_batch_shards", "per_sequence_keys", "process_slice", "rows_to_devices", "shard_rollout",
           "shard_rows", "sync_processes", "to_global", "to_host", "wrap_likelihood"]
