"""Tests for daca_jax.tasks.tokenizer.ByteTokenizer."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from daca_jax.tasks.tokenizer import ByteTokenizer

TEXTS = [
    "", "hello", "3142243142131324", "héllo wörld ✓", "数独 puzzle 🧩", "tab\tnew\nline\x00nul",
]


def test_ids_and_vocab():
  tok = ByteTokenizer()
  assert (tok.pad_id, tok.mask_id, tok.eos_id, tok.bos_id) == (256, 257, 258, 259)
  assert tok.vocab_size == 260
  assert tok.special_ids == (256, 257, 258, 259)


@pytest.mark.parametrize("text", TEXTS)
def test_encode_is_utf8_bytes_and_round_trips(text):
  tok = ByteTokenizer()
  ids = tok.encode(text)
  assert ids == list(text.encode("utf-8"))
  assert all(isinstance(i, int) and 0 <= i < 256 for i in ids)
  assert tok.decode(ids) == text
  assert tok.decode(np.asarray(ids, dtype=np.int32)) == text
  assert tok.decode(jnp.asarray(ids, dtype=jnp.int32)) == text


def test_non_ascii_uses_several_bytes():
  tok = ByteTokenizer()
  assert tok.encode("é") == [0xC3, 0xA9]
  assert tok.encode("🧩") == [0xF0, 0x9F, 0xA7, 0xA9]


def test_specials_are_dropped_and_eos_stops():
  tok = ByteTokenizer()
  a, b = tok.encode("héllo"), tok.encode("✓ rest")
  ids = ([tok.pad_id, tok.pad_id, tok.bos_id] + a + [tok.mask_id] + [tok.eos_id] + b
         + [tok.eos_id, tok.pad_id])
  assert tok.decode(ids) == "héllo"
  assert tok.decode(ids, stop_at_eos=True) == "héllo"
  assert tok.decode(ids, stop_at_eos=False) == "héllo✓ rest"
  assert tok.decode([tok.eos_id] + a) == ""
  assert tok.decode(list(tok.special_ids)) == ""
  assert tok.decode(np.asarray(ids, dtype=np.int64), stop_at_eos=False) == "héllo✓ rest"
  assert tok.decode(jnp.asarray(ids, dtype=jnp.int32)) == "héllo"


def test_invalid_bytes_are_replaced_not_raised():
  tok = ByteTokenizer()
  assert tok.decode([0xFF, ord("A")]) == "\ufffdA"
  # A multi-byte character cut by an EOS becomes one replacement character.
  assert tok.decode(tok.encode("é")[:1] + [tok.eos_id] + tok.encode("x")) == "\ufffd"
  # A special id inside a multi-byte character is dropped before decoding.
  e = tok.encode("é")
  assert tok.decode([e[0], tok.mask_id, e[1]]) == "é"


def test_decode_errors():
  tok = ByteTokenizer()
  with pytest.raises(ValueError, match="260"):
    tok.decode([1, 260])
  with pytest.raises(ValueError, match="-1"):
    tok.decode([-1])
  with pytest.raises(ValueError, match="1-D"):
    tok.decode(np.zeros((2, 3), np.int32))
  with pytest.raises(ValueError, match="integer"):
    tok.decode(np.asarray([65.0, 66.0]))
  with pytest.raises(TypeError):
    tok.encode(b"bytes")  # type: ignore[arg-type]
  assert tok.decode([]) == ""
  assert tok.decode(np.zeros((0,), np.int32)) == ""


def test_decode_batch():
  tok = ByteTokenizer()
  rows = np.full((3, 6), tok.eos_id, dtype=np.int32)
  rows[0, :2] = tok.encode("ab")
  rows[1, :6] = tok.encode("abcdef")
  rows[2, 0] = tok.pad_id
  rows[2, 1] = ord("z")
  assert tok.decode_batch(rows) == ["ab", "abcdef", "z"]
  assert tok.decode_batch(jnp.asarray(rows)) == ["ab", "abcdef", "z"]
  assert tok.decode_batch([[ord("a")], [tok.eos_id, ord("b")]]) == ["a", ""]
  with pytest.raises(ValueError, match=r"\[N, L\]"):
    tok.decode_batch(np.zeros((2, 2, 2), np.int32))
