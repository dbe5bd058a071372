"""A paper preset run from a random LLaDA checkpoint, measured next to its plan (``gpu_check.sh``).

A GPU machine without network access cannot download LLaDA-8B-Instruct, so the check writes a folder
in its released layout with random weights (:func:`write_random_llada`: ``config.json``, safetensors
shards and index from :mod:`daca_jax.models.random_checkpoint`, and a tokenizer from
:func:`write_llada_tokenizer`), trains a preset from it for a few iterations with
``experiments/train.py``, and :func:`compare` puts the run's ``metrics.jsonl``
(:func:`daca_jax.run.metrics.read_metrics`) next to the plan
``experiments/plan.py`` made for the same setting.

The tokenizer. LLaDA-8B-Instruct's ``tokenizer.json`` is not available offline (h_tasks' test fixture,
``tests/hf_fixtures.py``, says the same), so :func:`write_llada_tokenizer` writes a stand-in that has
everything this library reads from the released one: a byte-level BPE (trained here on
:data:`BPE_CORPUS`, so that a task prompt is a few hundred tokens, as with the released vocabulary),
padded with never-produced filler tokens to the release's 126080 base ids, and the released added
tokens at their released ids (bos ``<|startoftext|>`` 126080, eos = pad ``<|endoftext|>`` 126081,
``<|mdm_mask|>`` 126336, the chat header tokens 126346-126348, reserved tokens in between), with
``tokenizer_config.json`` (roles, ``added_tokens_decoder``, the released chat template) and
``special_tokens_map.json``. Ids and roles: GSAI-ML/LLaDA-8B-Instruct's ``tokenizer_config.json`` and
``special_tokens_map.json`` as stored in monash-yann/dllm-research
``models/LLaDA-8B-Instruct/`` @ecd7cd2f8cbe67f49c34763ba56a451078be5635. The mask has no role there:
``config.json``'s ``mask_token_id`` names it.
"""
from __future__ import annotations

import functools
import json
import pathlib
from typing import Any, Iterable, Mapping, Sequence

from daca_jax.models.random_checkpoint import LLADA_8B_CONFIG, write_random_checkpoint
from daca_jax.tasks.chat import LLADA_CHAT_TEMPLATE

LLADA_BASE_IDS = 126080  # ids below the first added token (the BPE vocabulary)
# The named added tokens; every other id in 126084..126339 is <|reserved_token_{id - 126084}|>.
LLADA_NAMED_TOKENS = {126080: "<|startoftext|>", 126081: "<|endoftext|>", 126082: "[CLS]", 126083: "[gMASK]",
                      126336: "<|mdm_mask|>", 126340: "<role>", 126341: "</role>", 126342: "<|arithmetic_start|>",
                      126343: "<|arithmetic_end|>", 126344: "<|number_start|>", 126345: "<|number_end|>",
                      126346: "<|start_header_id|>", 126347: "<|end_header_id|>", 126348: "<|eot_id|>"}
LLADA_ADDED = {i: LLADA_NAMED_TOKENS.get(i, f"<|reserved_token_{i - 126084}|>") for i in range(126080, 126349)}
LLADA_ROLES = {"bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
               "cls_token": "[CLS]"}
LLADA_EXTRA_SPECIAL = ["<role>", "</role>", "<|arithmetic_start|>", "<|arithmetic_end|>", "<|number_start|>",
                       "<|number_end|>"]

# What the stand-in BPE learns its merges from: the words of the tasks' reasoning prompts (this
# library's own text), so that their prompts come out at a few characters per token.
BPE_CORPUS = (
    "You are a helpful assistant. Solve the problem step by step and think carefully. Respond in the "
    "following format: <reasoning> Your reasoning here </reasoning> <answer> ... </answer>. Using only the "
    "provided numbers, create an arithmetic expression that evaluates to exactly the provided target number. "
    "You may use the operations +, -, *, and / as needed, but each number must be used exactly once. After "
    "reasoning, provide only your final expression inside \\boxed{} tags without including an equals sign or "
    "the target number. For example: \\boxed{a + b * c}. Numbers: [12, 34, 56] Target: 78. Please solve the "
    "following 4x4 Sudoku puzzle. The puzzle is provided as a 16-character string reading left-to-right, "
    "top-to-bottom, where '0' represents empty cells. Rules: Fill empty cells with digits 1-4. Each row, "
    "each column and each 2x2 box must contain digits 1-4 exactly once. Important: your solution must be a "
    "complete 16-character string with only the digits 1-4, representing your final solved grid. A question "
    "about money, time, distance and how many items there are in total. What is the answer? 0 1 2 3 4 5 6 7 8 9")


@functools.lru_cache(maxsize=None)
def _stand_in_bpe(vocab_size: int, corpus: tuple[str, ...]) -> tuple[dict[str, int], list[tuple[str, str]]]:
  """A byte-level BPE trained on ``corpus``: (vocabulary, merges), deterministic."""
  from tokenizers import Tokenizer, models, pre_tokenizers, trainers

  tok = Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                show_progress=False)
  tok.train_from_iterator(list(corpus) * 4, trainer)
  model = json.loads(tok.to_str())["model"]
  merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
  return dict(model["vocab"]), merges


def _write_json(path: pathlib.Path, obj: Any) -> None:
  path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def write_llada_tokenizer(folder: str | pathlib.Path, *, corpus: Sequence[str] = (BPE_CORPUS,),
                          bpe_vocab: int = 1024) -> pathlib.Path:
  """Writes LLaDA-8B-Instruct's tokenizer files with a stand-in vocabulary (module docstring) into
  ``folder``: ``tokenizer.json``, ``tokenizer_config.json``, ``special_tokens_map.json``.

  Args:
    corpus: texts the stand-in BPE learns its merges from.
    bpe_vocab: size of the trained BPE vocabulary (below LLADA_BASE_IDS; the rest are fillers).
  Returns:
    ``pathlib.Path(folder)``.
  Raises:
    ValueError: ``bpe_vocab`` not in [257, LLADA_BASE_IDS].
  """
  from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

  if not 257 <= bpe_vocab <= LLADA_BASE_IDS:
    raise ValueError(f"bpe_vocab={bpe_vocab}: between 257 and {LLADA_BASE_IDS}")
  folder = pathlib.Path(folder)
  folder.mkdir(parents=True, exist_ok=True)
  vocab, merges = _stand_in_bpe(bpe_vocab, tuple(corpus))
  vocab = dict(vocab)
  for i in range(len(vocab), LLADA_BASE_IDS):
    vocab[f"<|filler_{i}|>"] = i
  vocab.update({content: i for i, content in LLADA_ADDED.items()})  # in the model too: ids kept as given
  tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  tok.add_special_tokens([AddedToken(c, special=True, normalized=False) for c in LLADA_ADDED.values()])
  (folder / "tokenizer.json").write_text(tok.to_str(), encoding="utf-8")
  token = lambda c: {"content": c, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False}
  _write_json(folder / "tokenizer_config.json", {
      "add_bos_token": False, "add_eos_token": False,
      "added_tokens_decoder": {str(i): dict(token(c), special=True) for i, c in LLADA_ADDED.items()},
      "additional_special_tokens": LLADA_EXTRA_SPECIAL, **LLADA_ROLES, "chat_template": LLADA_CHAT_TEMPLATE,
      "clean_up_tokenization_spaces": False, "model_max_length": 4096,
      "tokenizer_class": "PreTrainedTokenizerFast"})
  _write_json(folder / "special_tokens_map.json", {"additional_special_tokens": LLADA_EXTRA_SPECIAL,
                                                   **{k: token(v) for k, v in LLADA_ROLES.items()}})
  return folder


# Sizes of write_random_llada: LLaDA-8B-Instruct's own, and a CPU-size one with its vocabulary.
SIZES = {"8b": {}, "tiny": {"d_model": 32, "n_layers": 1, "n_heads": 2, "n_kv_heads": 2, "mlp_hidden_size": 64}}


def write_random_llada(folder: str | pathlib.Path, size: str = "8b", *, fill: str = "fast", seed: int = 0
                       ) -> pathlib.Path:
  """A random-weight LLaDA-8B-Instruct folder (bf16 weights, its ``config.json`` with ``size``'s layer
  sizes, and :func:`write_llada_tokenizer`'s tokenizer) that ``model.init_checkpoint`` can start from.

  Args:
    size: a key of :data:`SIZES` ("8b": 16 GB of weights; "tiny": the vocabulary's embedding and head).
    fill: :func:`~daca_jax.models.random_checkpoint.write_random_checkpoint`'s ("fast" for 8B).
  Raises:
    ValueError: an unknown ``size``.
  """
  if size not in SIZES:
    raise ValueError(f"size={size!r}: one of {sorted(SIZES)}")
  folder = write_random_checkpoint(folder, dict(LLADA_8B_CONFIG, **SIZES[size]), fill=fill, seed=seed)
  return write_llada_tokenizer(folder)


def compare(plan: Mapping[str, Any], metrics: Iterable[Mapping[str, Any]], device: Any, *, mfu: float,
            usable: float) -> dict[str, Any]:
  """The measured iteration (the last one that compiled nothing) next to ``plan``'s prediction on
  ``device`` (:func:`daca_jax.planning.plan.assess`).

  Returns:
    ``{"predicted": assess(...), "measured": {"rollout_s", "update_s", "iteration_s", "device_peak_gb",
    "mfu"}, "rows": [[quantity, predicted, measured], ...]}``; ``device_peak_gb`` is None where the
    backend keeps no allocator statistics (CPU).
  Raises:
    ValueError: no iteration without compilation in ``metrics``.
  """
  from daca_jax.planning.plan import assess

  steady = [m for m in metrics if "rollout_s" in m and not m.get("includes_compile")]
  if not steady:
    raise ValueError("no RL iteration without compilation in the metrics (run at least 2 iterations)")
  last = steady[-1]
  pred = assess(plan, device, mfu=mfu, usable_fraction=usable)
  measured_s = last["rollout_s"] + last["update_s"]
  flops = plan["flops_per_device"]["rollout"] + plan["flops_per_device"]["update"]
  peak = last.get("device_peak_bytes")
  measured = {"rollout_s": last["rollout_s"], "update_s": last["update_s"], "iteration_s": measured_s,
              "device_peak_gb": None if peak is None else peak / 1e9,
              "mfu": flops / measured_s / device.peak_bf16_flops}
  rows = [["rollout s", pred["rollout_s"], last["rollout_s"]], ["update s (with credit, host work)",
          pred["update_s"], last["update_s"]], ["s / iteration", pred["iteration_s"], measured_s],
          ["MFU", mfu, measured["mfu"]],
          ["peak GB per device", pred["iteration_peak_gb"],
           "n/a (no allocator statistics)" if peak is None else peak / 1e9]]
  return {"predicted": pred, "measured": measured, "rows": rows}


__all__ = ["BPE_CORPUS", "LLADA_ADDED", "SIZES", "compare", "write_llada_tokenizer",
           "write_random_llada"]
