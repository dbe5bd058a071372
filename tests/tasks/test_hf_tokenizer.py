"""HFTokenizer over a tiny tokenizer.json built in-process, and LLaDA's chat template."""
import numpy as np
import pytest

from daca_jax.errors import DataError
from daca_jax.tasks.hf_tokenizer import LLADA_SPECIAL, HFTokenizer, llada_chat_prompt

tokenizers = pytest.importorskip("tokenizers")

WORDS = ["hello", "world", "the", "answer", "is", "4", "user", "assistant", "\n"]
SPECIAL = ["<|endoftext|>", "<|mdm_mask|>", "<|startoftext|>", "<|start_header_id|>", "<|end_header_id|>",
           "<|eot_id|>"]


@pytest.fixture(scope="module")
def tok_path(tmp_path_factory):
  """A WordLevel tokenizer.json with LLaDA's special tokens (ids 0..5), words after them."""
  from tokenizers import Tokenizer, models, pre_tokenizers, decoders

  vocab = {t: i for i, t in enumerate(SPECIAL + WORDS + ["[UNK]"])}
  t = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
  t.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
  t.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
  t.add_special_tokens(SPECIAL)
  path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
  t.save(str(path))
  return path


def test_special_ids_and_roundtrip(tok_path):
  tok = HFTokenizer.for_llada(tok_path.parent, vocab_size=64)
  assert (tok.pad_id, tok.mask_id, tok.eos_id, tok.bos_id) == (0, 1, 0, 2)
  assert tok.vocab_size == 64
  ids = tok.encode("hello world the answer is 4")
  assert ids == [6, 7, 8, 9, 10, 11]
  assert tok.decode(ids) == "hello world the answer is 4"
  # EOS stops decoding; mask/bos/out-of-tokenizer ids (model vocab > tokenizer vocab) are skipped.
  row = [tok.bos_id, 6, tok.mask_id, 7, 60, tok.eos_id, 8, 8]
  assert tok.decode(row) == "hello world"
  assert tok.decode(row, stop_at_eos=False) == "hello world the the"
  assert tok.decode_batch(np.array([row, [8, 9, 0, 0, 0, 0, 0, 0]])) == ["hello world", "the answer"]
  with pytest.raises(ValueError, match="id 64 at position 1"):
    tok.decode([6, 64])


def test_llada_chat_template_tokens(tok_path):
  text = llada_chat_prompt("  the answer is 4 \n")
  assert text == ("<|startoftext|><|start_header_id|>user<|end_header_id|>\n\nthe answer is 4<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n")
  tok = HFTokenizer.for_llada(tok_path)
  ids = tok.encode(text)
  assert ids[:3] == [2, 3, 12] and ids[-2:] == [13, 4]  # bos, header(user) ... header(assistant) end
  assert 5 in ids  # <|eot_id|> is one special id


def test_missing_special_token_and_file(tok_path, tmp_path):
  with pytest.raises(DataError, match=r"mask='<\|nope\|>'"):
    HFTokenizer(tok_path, **dict(LLADA_SPECIAL, mask="<|nope|>"))
  with pytest.raises(DataError, match="tokenizer.json not found"):
    HFTokenizer.for_llada(tmp_path)
