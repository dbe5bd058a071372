"""A Hugging Face ``tokenizer.json`` tokenizer with :class:`ByteTokenizer`'s interface, and LLaDA's chat
template.

:class:`HFTokenizer` wraps ``tokenizers.Tokenizer`` (the fast Rust tokenizer that ships as
``tokenizer.json`` in LLaDA and Dream checkpoints). Special ids are resolved by token string, so the
same class serves both families; :meth:`HFTokenizer.for_llada` knows LLaDA's names.
"""
from __future__ import annotations

import pathlib
from typing import Any

import numpy as np

from daca_jax.errors import DataError

# LLaDA-8B-Instruct's special tokens (tokenizer.json): [MASK] is id 126336, <|endoftext|> 126081
# serves as EOS and padding, <|startoftext|> is the BOS its chat template prepends.
LLADA_SPECIAL = {"pad": "<|endoftext|>", "mask": "<|mdm_mask|>", "eos": "<|endoftext|>",
                 "bos": "<|startoftext|>"}


def llada_chat_prompt(prompt: str, bos: str = "<|startoftext|>") -> str:
  """One user turn in LLaDA-8B-Instruct's chat template, ready for the assistant's answer.

  Equals ``tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
  add_generation_prompt=True, tokenize=False)`` of the released tokenizer (a Llama-3-style template:
  BOS before the first message, each message ``<|start_header_id|>role<|end_header_id|>\\n\\n`` +
  stripped content + ``<|eot_id|>``).
  """
  return (f"{bos}<|start_header_id|>user<|end_header_id|>\n\n{prompt.strip()}<|eot_id|>"
          "<|start_header_id|>assistant<|end_header_id|>\n\n")


class HFTokenizer:
  """``tokenizer.json`` tokenizer with ``encode``/``decode``/``decode_batch`` and special ids.

  Args:
    path: a ``tokenizer.json`` file or a checkpoint directory that holds one.
    pad, mask, eos, bos: the special tokens' strings (each must be in the vocabulary).
    vocab_size: the model's vocabulary size when it exceeds the tokenizer's (LLaDA: 126464); ids at or
      above the tokenizer's own size decode to nothing.
  Raises:
    DataError: no tokenizer.json, or a special token missing from its vocabulary.
  """

  def __init__(self, path: str | pathlib.Path, *, pad: str, mask: str, eos: str, bos: str,
               vocab_size: int | None = None):
    from tokenizers import Tokenizer

    p = pathlib.Path(path)
    if p.is_dir():
      p = p / "tokenizer.json"
    if not p.exists():
      raise DataError(f"{p}: tokenizer.json not found")
    self.tok = Tokenizer.from_file(str(p))
    ids = {}
    for role, token in (("pad", pad), ("mask", mask), ("eos", eos), ("bos", bos)):
      ids[role] = self.tok.token_to_id(token)
      if ids[role] is None:
        raise DataError(f"{p}: special token {role}={token!r} is not in the vocabulary")
    self.pad_id, self.mask_id, self.eos_id, self.bos_id = (ids["pad"], ids["mask"], ids["eos"], ids["bos"])
    self._own_size = self.tok.get_vocab_size(with_added_tokens=True)
    self.vocab_size = max(vocab_size or 0, self._own_size)

  @classmethod
  def for_llada(cls, path: str | pathlib.Path, vocab_size: int = 126464) -> "HFTokenizer":
    """LLaDA-8B's tokenizer with its special tokens (:data:`LLADA_SPECIAL`)."""
    return cls(path, vocab_size=vocab_size, **LLADA_SPECIAL)

  @property
  def special_ids(self) -> tuple[int, ...]:
    """``(pad_id, mask_id, eos_id, bos_id)``."""
    return (self.pad_id, self.mask_id, self.eos_id, self.bos_id)

  def encode(self, text: str) -> list[int]:
    """Ids of ``text``; special-token strings inside it (e.g. a chat template's) map to their ids,
    and no BOS/EOS is added (callers add them, as with ByteTokenizer).

    Raises:
      TypeError: ``text`` is not a ``str``.
    """
    if not isinstance(text, str):
      raise TypeError(f"HFTokenizer.encode expects a str, got {type(text).__name__}")
    return self.tok.encode(text, add_special_tokens=False).ids

  def _clean(self, ids: Any, stop_at_eos: bool) -> list[int]:
    arr = np.asarray(ids)
    if arr.ndim != 1:
      raise ValueError(f"HFTokenizer.decode expects a 1-D sequence of ids, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
      raise ValueError(f"HFTokenizer.decode expects integer ids, got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    bad = (arr < 0) | (arr >= self.vocab_size)
    if bad.any():
      pos = int(np.argmax(bad))
      raise ValueError(f"HFTokenizer.decode: id {int(arr[pos])} at position {pos} is outside "
                       f"[0, {self.vocab_size})")
    if stop_at_eos:
      hit = np.flatnonzero(arr == self.eos_id)
      if hit.size:
        arr = arr[:hit[0]]
    keep = ~np.isin(arr, self.special_ids) & (arr < self._own_size)
    return arr[keep].tolist()

  def decode(self, ids: Any, stop_at_eos: bool = True) -> str:
    """Text of one id sequence ``[L]``: everything from the first EOS on is dropped when
    ``stop_at_eos``; pad/mask/bos/eos ids and other special tokens are skipped.

    Raises:
      ValueError: ``ids`` not 1-D integer, or an id outside ``[0, vocab_size)``.
    """
    return self.tok.decode(self._clean(ids, stop_at_eos), skip_special_tokens=True)

  def decode_batch(self, ids: Any, stop_at_eos: bool = True) -> list[str]:
    """:meth:`decode` of each row of ``ids`` ``[N, L]`` (or a list of sequences)."""
    rows = list(ids) if isinstance(ids, (list, tuple)) else list(np.asarray(ids))
    if not isinstance(ids, (list, tuple)) and np.asarray(ids).ndim != 2:
      raise ValueError(f"HFTokenizer.decode_batch expects shape [N, L], got {np.asarray(ids).shape}")
    return self.tok.decode_batch([self._clean(r, stop_at_eos) for r in rows], skip_special_tokens=True)

  def __repr__(self) -> str:
    return f"HFTokenizer(vocab_size={self.vocab_size}, mask_id={self.mask_id}, eos_id={self.eos_id})"
