"""The evaluation protocol's one home: d1's protocol for any registered task and any checkpoint, the
decode loop the main job shares, resumable generation files, reports and per-example outcomes.

One module per job (the names say what is inside):

* :mod:`.protocol`: what is decoded, for which task (:class:`EvalProtocol`, :func:`prepare_task`);
* :mod:`.model`: what an evaluation needs of a model (:class:`EvalModel`), and a Hugging Face folder;
* :mod:`.decode`: the batched decode loop and grading, shared by the main job (formerly
  ``daca_jax.run.evaluation``);
* :mod:`.harness`: the loop over tasks and generation lengths, resumable (:func:`run_evaluation`);
* :mod:`.files`: resumable generation files; :mod:`.reports`: ``summary.json`` / ``summary.md``;
* :mod:`.outcomes`: per-example outcomes beside every evaluation's metrics.

Layering: this package sits below :mod:`daca_jax.run` (the main job's evaluator,
:mod:`daca_jax.run.job_eval`, and the readers of its checkpoints, :mod:`daca_jax.run.eval_models`, use
it) and never imports it (``tests/test_import_graph.py``).

Protocol (d1, Zhao et al. 2025, ``eval/eval.py``): greedy decoding (temperature 0),
low-confidence remasking, generation lengths 128 / 256 / 512, semi-autoregressive blocks of 32 tokens,
``steps = gen_length / 2`` (two tokens committed per step). Every piece is a field of
:class:`EvalProtocol`, so tiny models can use short lengths.

Checkpoints (:class:`EvalModel`): a Hugging Face LLaDA/Dream directory (:func:`model_from_hf`: its
tokenizer.json and the chat prompt style); the main job's own, a workdir of ``experiments/train.py`` (the
latest RL checkpoint, else the latest SFT one, with the run's ``config.json``) or a random initialisation
(smoke tests), come from :mod:`daca_jax.run.eval_models`, whose ``load_model`` picks one source for
``experiments/evaluate.py``.

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
from daca_jax.evaluation.files import read_generations
from daca_jax.evaluation.harness import check_length, evaluate_length, run_evaluation, summarize_generations
from daca_jax.evaluation.model import EvalModel, model_from_hf
from daca_jax.evaluation.protocol import (D1_BLOCK_LENGTH, D1_GEN_LENGTHS, EvalProtocol, PreparedTask,
                                          check_prompt_style, prepare_task)
from daca_jax.evaluation.reports import summary_markdown, write_summary

__all__ = ["D1_BLOCK_LENGTH", "D1_GEN_LENGTHS", "EvalModel", "EvalProtocol", "PreparedTask", "check_length",
           "check_prompt_style", "evaluate_length", "model_from_hf", "prepare_task", "read_generations",
           "run_evaluation", "summarize_generations", "summary_markdown", "write_summary"]
