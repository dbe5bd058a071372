"""Data: TFDS builders (``tfds_builders``) and grain pipelines (``pipeline``).

``daca_jax.data.pipeline.load_rows(benchmark, split)`` returns a benchmark's records through TFDS
(array_record) and grain. The TFDS/grain modules are not imported here, so that importing
``daca_jax.local_data`` (which every task does) stays cheap.
"""
