"""Tiny LLaDA / Dream checkpoints in the Hugging Face layout, with a tokenizer, for the runs that start
from a checkpoint (``model.init_checkpoint``).

The one place these tests make checkpoints: the weights and configs are those of
``tests/models/test_hf_import.py`` (which checks them against transformers), the tokenizer a
character-level WordLevel ``tokenizer.json`` of 48 ids whose special tokens carry each family's
released names at the config's ids (mask 47; EOS/pad 46 for LLaDA, 45 for Dream, as each family's
config.json says), with a ``tokenizer_config.json`` naming them by role and holding the family's
released chat template, so that a random model writes digits a Sudoku grader can score. These
checkpoints keep the vocabulary tiny for fast RL runs; ``tests/hf_fixtures.py:
write_tiny_checkpoint`` writes the release layout itself (full vocabulary, released ids and files).
"""
from __future__ import annotations

import json
import pathlib

import ml_dtypes
import numpy as np

from tests.models.test_hf_import import DREAM_CFG, LLADA_CFG, V, _llada_names, _random_weights, _write_ckpt

CHARS = "0123456789 \nabcdefghijklmnopqrstuvwxyz="  # ids 1..39 (0 is <unk>)
CHAT = {"llada": {"<|start_header_id|>": 40, "<|end_header_id|>": 41, "<|eot_id|>": 42, "<": 43, ">": 44},
        "dream": {"<|im_start|>": 40, "<|im_end|>": 41, "<|eot_id|>": 42, "<": 43, ">": 44}}
SPECIAL = {"llada": {"<|startoftext|>": 45, "<|endoftext|>": 46, "<|mdm_mask|>": 47},
           "dream": {"<|endoftext|>": 45, "<|beginoftext|>": 46, "<|mask|>": 47}}
# Roles as each release's tokenizer_config.json names them (LLaDA's mask comes from config.json).
ROLES = {"llada": {"bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"},
         "dream": {"bos_token": "<|beginoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
                   "mask_token": "<|mask|>"}}


def write_tokenizer(path: pathlib.Path, family: str) -> None:
  """A character-level ``tokenizer.json`` of :data:`V` ids with the family's special-token ids, and a
  ``tokenizer_config.json`` with the family's roles and released chat template."""
  from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
  from tests.hf_fixtures import tokenizer_config

  vocab = {"<unk>": 0, **{c: 1 + i for i, c in enumerate(CHARS)}, **CHAT[family], **SPECIAL[family]}
  assert sorted(vocab.values()) == list(range(V))
  tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
  tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
  tok.decoder = decoders.Fuse()
  tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in vocab if t.startswith("<|")])
  tok.save(str(path / "tokenizer.json"))
  released = tokenizer_config(family)
  config = {**ROLES[family], "chat_template": released["chat_template"],
            "added_tokens_decoder": {str(i): {"content": t, "special": True} for t, i in vocab.items() if t.startswith("<|")}}
  (path / "tokenizer_config.json").write_text(json.dumps(config))


def hf_weights(family: str, layers: int = 2, seed: int = 0) -> dict[str, np.ndarray]:
  """Random float32 weights under the family's tensor names (torch layout).

  The output rows of the digits 1-4 are scaled up and the others down, so that the random model
  writes Sudoku digits and RL on a plain Sudoku prompt sees rewards that vary within a group."""
  w = _random_weights(seed, layers)
  head = w["lm_head.weight"] * 0.1
  digits = [1 + CHARS.index(c) for c in "1234"]
  head[digits] *= 50.0
  w["lm_head.weight"] = head
  return _llada_names(w, layers) if family == "llada" else w


def tiny_checkpoint(path: pathlib.Path, family: str, *, layers: int = 2, seed: int = 0,
                    dtype: str = "float32", shards: int = 2, **config: object) -> pathlib.Path:
  """Writes a tiny ``family`` checkpoint folder (config.json, safetensors shards + index, tokenizer.json,
  a ``modeling_*.py`` that must never run) and returns it. ``config`` overrides config.json keys."""
  base = LLADA_CFG if family == "llada" else DREAM_CFG
  cfg = dict(base, **{"n_layers" if family == "llada" else "num_hidden_layers": layers})
  cfg.update(config)
  w = hf_weights(family, layers, seed)
  if dtype == "bfloat16":
    w = {k: v.astype(ml_dtypes.bfloat16) for k, v in w.items()}
  _write_ckpt(path, cfg, w, shards=shards)
  write_tokenizer(path, family)
  # A checkpoint's remote code: importing it would leave a marker file (the tests check there is none).
  (path / f"modeling_{family}.py").write_text(
      f"import pathlib\npathlib.Path({str(path / 'IMPORTED')!r}).write_text('imported')\n")
  (path / "configuration_x.py").write_text("raise SystemExit('a checkpoint .py file was executed')\n")
  cfg["auto_map"] = {"AutoModel": f"modeling_{family}.Model"}
  (path / "config.json").write_text(json.dumps(cfg))
  return path
