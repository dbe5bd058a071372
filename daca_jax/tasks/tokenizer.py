"""Byte-level tokenizer with special tokens, for tiny models trained from scratch.

Ids ``0..255`` are the raw UTF-8 bytes of the text; four special ids follow:

=========  ====  ==========================================================
name       id    use
=========  ====  ==========================================================
``pad``    256   left padding of prompts
``mask``   257   the absorbing "[MASK]" state of masked diffusion
``eos``    258   end of completion; completions are right-filled with it
``bos``    259   first token of every prompt
=========  ====  ==========================================================

``vocab_size`` is 260. Prompts are ``[bos] + bytes`` (:meth:`ByteTokenizer.prompt_ids`); the chat prompt
style renders LLaDA-8B-Instruct's chat template with an empty ``bos_token`` (the BOS is the id).
"""
from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from daca_jax.tasks.chat import LLADA_CHAT_TEMPLATE, ChatTemplate

_NUM_BYTES = 256
# LLaDA-8B-Instruct's template without its BOS text: the byte tokenizer's BOS is an id (prompt_ids).
BYTE_CHAT_TEMPLATE = ChatTemplate(LLADA_CHAT_TEMPLATE, {"bos_token": ""},
                                  origin="LLaDA-8B-Instruct's template, BOS as an id (byte tokenizer)")


class Tokenizer(Protocol):
  """What a task needs of a tokenizer (:class:`ByteTokenizer`, :class:`~daca_jax.tasks.hf_tokenizer.HFTokenizer`).

  Attributes:
    pad_id, mask_id, eos_id, bos_id: special ids (``bos_id`` -1 when the tokenizer has none).
    vocab_size: ids the model's table must hold.
    chat_template: the chat template prompts of the "chat" style render (None: none).
  """

  pad_id: int
  mask_id: int
  eos_id: int
  bos_id: int
  vocab_size: int
  chat_template: ChatTemplate | None

  @property
  def special_ids(self) -> tuple[int, ...]: ...

  def encode(self, text: str) -> list[int]: ...

  def prompt_ids(self, text: str, chat: bool) -> list[int]: ...

  def decode(self, ids: Any, stop_at_eos: bool = True) -> str: ...

  def decode_batch(self, ids: Any, stop_at_eos: bool = True) -> list[str]: ...


class ByteTokenizer:
  """UTF-8 byte tokenizer with ``pad``/``mask``/``eos``/``bos`` special ids.

  Stateless: every instance is equivalent. ``encode`` never adds special tokens; :meth:`prompt_ids`
  puts ``bos`` first, and :meth:`daca_jax.tasks.base.Task.encode_prompts` / ``encode_targets`` add the
  ``pad`` / ``eos`` padding.
  """

  pad_id: int = 256
  mask_id: int = 257
  eos_id: int = 258
  bos_id: int = 259
  vocab_size: int = 260
  chat_template: ChatTemplate = BYTE_CHAT_TEMPLATE

  @property
  def special_ids(self) -> tuple[int, ...]:
    """The special ids ``(pad_id, mask_id, eos_id, bos_id)``."""
    return (self.pad_id, self.mask_id, self.eos_id, self.bos_id)

  def encode(self, text: str) -> list[int]:
    """Encodes ``text`` as its UTF-8 bytes.

    Args:
      text: any Python string (non-ASCII characters become several byte ids).

    Returns:
      ``list[int]`` of ids in ``0..255``, one per UTF-8 byte; no special tokens.

    Raises:
      TypeError: ``text`` is not a ``str``.
    """
    if not isinstance(text, str):
      raise TypeError(f"ByteTokenizer.encode expects a str, got {type(text).__name__}")
    return list(text.encode("utf-8"))

  def prompt_ids(self, text: str, chat: bool) -> list[int]:
    """``[bos] + encode(text)`` for either prompt style (``chat`` is accepted for the shared interface:
    a chat prompt's template text carries no BOS here)."""
    del chat
    return [self.bos_id] + self.encode(text)

  def decode(self, ids: Any, stop_at_eos: bool = True) -> str:
    """Decodes one sequence of ids back to text.

    Args:
      ids: a 1-D sequence of integer ids: ``list[int]``, tuple, or a numpy/jax integer array of
        shape ``[L]``.
      stop_at_eos: if True, everything from the first ``eos_id`` on is dropped. Otherwise ``eos_id``
        is dropped like the other special ids.

    Returns:
      The decoded text. ``pad``/``mask``/``bos`` (and ``eos`` when not stopping) are dropped;
      the remaining bytes are decoded as UTF-8 with ``errors="replace"`` (invalid byte sequences
      become U+FFFD, never an exception).

    Raises:
      ValueError: ``ids`` is not 1-D, not integer, or holds an id outside ``[0, vocab_size)``.
    """
    arr = np.asarray(ids)
    if arr.ndim != 1:
      raise ValueError(f"ByteTokenizer.decode expects a 1-D sequence of ids, got shape {arr.shape}")
    if arr.size == 0:
      return ""
    if not np.issubdtype(arr.dtype, np.integer):
      raise ValueError(f"ByteTokenizer.decode expects integer ids, got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    bad = (arr < 0) | (arr >= self.vocab_size)
    if bad.any():
      pos = int(np.argmax(bad))
      raise ValueError(
          f"ByteTokenizer.decode: id {int(arr[pos])} at position {pos} is outside "
          f"[0, {self.vocab_size})")
    if stop_at_eos:
      eos_pos = np.flatnonzero(arr == self.eos_id)
      if eos_pos.size:
        arr = arr[:eos_pos[0]]
    data = arr[arr < _NUM_BYTES].astype(np.uint8).tobytes()
    return data.decode("utf-8", errors="replace")

  def decode_batch(self, ids: Any, stop_at_eos: bool = True) -> list[str]:
    """Decodes a batch of sequences.

    Args:
      ids: integer array-like of shape ``[N, L]`` (or a list of 1-D sequences of any lengths).
      stop_at_eos: see :meth:`decode`.

    Returns:
      ``list[str]`` of length N.

    Raises:
      ValueError: as :meth:`decode`, for any row.
    """
    if isinstance(ids, (list, tuple)):
      return [self.decode(row, stop_at_eos=stop_at_eos) for row in ids]
    arr = np.asarray(ids)
    if arr.ndim != 2:
      raise ValueError(f"ByteTokenizer.decode_batch expects shape [N, L], got {arr.shape}")
    return [self.decode(row, stop_at_eos=stop_at_eos) for row in arr]

  def __repr__(self) -> str:
    return f"ByteTokenizer(vocab_size={self.vocab_size})"
