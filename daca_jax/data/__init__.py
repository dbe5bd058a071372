"""Data: local-file loaders (``local``), TFDS builders (``tfds_builders``) and grain pipelines (``pipeline``).

``daca_jax.data.pipeline.load_rows(benchmark, split)`` returns a benchmark's records through TFDS
(array_record) and grain. The TFDS/grain modules are not imported here, so that importing
``daca_jax.data.local`` (which every task does) stays cheap.
"""
