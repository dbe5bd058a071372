"""d1's evaluation protocol for any registered task and any checkpoint, resumable, with reports.

Split by job: :mod:`.protocol` (what is decoded, for which task), :mod:`.loaders` (the checkpoint),
:mod:`.files` (resumable generation files), :mod:`.harness` (the loop), :mod:`.reports` (summaries).

Protocol (d1, Zhao et al. 2025, ``eval/eval.py``): greedy decoding (temperature 0),
low-confidence remasking, generation lengths 128 / 256 / 512, semi-autoregressive blocks of 32 tokens,
``steps = gen_length / 2`` (two tokens committed per step). Every piece is a field of
:class:`EvalProtocol`, so tiny models can use short lengths.

Checkpoints (:class:`EvalModel`): a workdir of ``experiments/train.py`` (:func:`model_from_workdir`:
the latest RL checkpoint, else the latest SFT one, with the run's ``config.json``), a Hugging Face
LLaDA/Dream directory (:func:`model_from_hf`: its tokenizer.json and the chat prompt style), or a
random initialisation (:func:`model_from_random_init`, smoke tests).

Outputs of :func:`run_evaluation` under ``output_dir``:

* ``<task>/gen<L>.jsonl``: one row per example (``index``, ``prompt``, ``target``, ``completion``,
  ``reward``, ``metrics`` = the task's metrics of that one example, ``completion_tokens``, ``batch``,
  ``batch_seconds``), appended after each finished batch;
* ``<task>/gen<L>.fingerprint.json``: what produced the rows (checkpoint, protocol, task options,
  prompt length); a rerun with another fingerprint is refused instead of mixing rows;
* ``summary.json`` / ``summary.md``: per task its grading rules (``Task.grading_rules``) and, per
  length, the task's metrics recomputed from the JSONL completions, ``num_examples``, ``seconds``
  (decode + grading, summed over the batches of every session, first batch includes compilation) and
  ``tokens_per_s`` (completion positions decoded per second of decoding).

Resumption: rows of finished batches are read back and skipped. Examples are cut into fixed batches
``[k * batch_size, (k + 1) * batch_size)`` and batch k decodes with ``fold_in(key, k)``, so the rows of
a resumed run are exactly those of an uninterrupted one; a batch that was only partly written (the
process died mid-write) is decoded again.
"""
from daca_jax.run.harness.files import read_generations
from daca_jax.run.harness.harness import check_length, evaluate_length, run_evaluation, summarize_generations
from daca_jax.run.harness.loaders import (EvalModel, load_model, model_from_hf, model_from_random_init,
                                          model_from_workdir)
from daca_jax.run.harness.protocol import (D1_BLOCK_LENGTH, D1_GEN_LENGTHS, EvalProtocol, PreparedTask,
                                           check_prompt_style, prepare_task)
from daca_jax.run.harness.reports import summary_markdown, write_summary

__all__ = ["D1_BLOCK_LENGTH", "D1_GEN_LENGTHS", "EvalModel", "EvalProtocol", "PreparedTask", "check_length",
           "check_prompt_style", "evaluate_length", "load_model", "model_from_hf", "model_from_random_init",
           "model_from_workdir", "prepare_task", "read_generations", "run_evaluation", "summarize_generations",
           "summary_markdown", "write_summary"]
