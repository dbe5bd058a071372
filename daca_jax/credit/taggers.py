"""Token taggers for DTCA: map completion tokens to categories (registry ``TAGGERS``).

DTCA averages its per-token contributions within token categories and calibrates each category's
credit by the change of its predictive entropy. A tagger runs on the host, once per
rollout batch, on token ids; it never sees the model.

* ``rule`` (default): a fixed per-id table built from each id's decoded text —
  NUM (digits), OP (arithmetic / comparison symbols), PUNCT (other symbols and whitespace),
  WORD (letters) and SPECIAL (the tokenizer's special ids: pad, mask, eos, bos).
* ``pos``: a part-of-speech tagger for real text. It decodes each completion, asks a POS function
  for ``(start, end, tag)`` character spans and gives every token the tag of the span its text
  starts in; special ids stay SPECIAL. The POS function is pluggable (constructor argument); the
  default uses spaCy's ``en_core_web_sm`` when it is installed.
"""
from __future__ import annotations

import abc
from typing import Any, Callable, Sequence

import numpy as np

from daca_jax.errors import ConfigError
from daca_jax.registry import Registry

RULE_CATEGORIES = ("NUM", "OP", "PUNCT", "WORD", "SPECIAL")
# Universal POS tags (Petrov et al. 2012 / UD) plus the tokenizer's special ids.
POS_CATEGORIES = ("ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON",
                  "PROPN", "PUNCT", "SCONJ", "SYM", "VERB", "X", "SPACE", "SPECIAL")
_OPERATORS = frozenset("+-*/=<>^%×÷·−")


class TokenTagger(abc.ABC):
  """Maps token ids to category ids ``0..num_categories-1``.

  Attributes:
    categories: category names; ``categories[c]`` names id c.
  """

  categories: tuple[str, ...]

  @property
  def num_categories(self) -> int:
    return len(self.categories)

  @abc.abstractmethod
  def tag(self, token_ids: np.ndarray) -> np.ndarray:
    """Categories of completion tokens.

    Args:
      token_ids: int [B, L] completion ids.

    Returns:
      int32 [B, L] category ids.
    """


def _special_ids(tokenizer: Any) -> set[int]:
  ids = getattr(tokenizer, "special_ids", None)
  if ids is None:
    ids = [getattr(tokenizer, n) for n in ("pad_id", "mask_id", "eos_id", "bos_id") if hasattr(tokenizer, n)]
  return {int(i) for i in ids if i is not None}


def _token_text(tokenizer: Any, token_id: int) -> str:
  try:
    return tokenizer.decode([token_id], stop_at_eos=False)
  except TypeError:  # tokenizers without the stop_at_eos flag
    return tokenizer.decode([token_id])


def classify_text(text: str) -> str:
  """Rule category of one token's text: NUM, OP, PUNCT or WORD (never SPECIAL).

  A token mixing classes counts as NUM if it holds a digit, else WORD if it holds a letter, else OP
  if it holds an operator, else PUNCT. Whitespace-only text is PUNCT.
  """
  s = text.strip()
  if not s:
    return "PUNCT"
  if any(ch.isdigit() for ch in s):
    return "NUM"
  if any(ch.isalpha() for ch in s):
    return "WORD"
  if any(ch in _OPERATORS for ch in s):
    return "OP"
  return "PUNCT"


class RuleTagger(TokenTagger):
  """Rule-based tagger: one category per id, from the id's decoded text (a [V] lookup table).

  Args:
    tokenizer: anything with ``vocab_size``, ``decode(ids)`` and the special ids (ByteTokenizer or
      the HF tokenizer wrapper). Byte ids that are not valid UTF-8 alone decode to U+FFFD (PUNCT).
  """

  categories = RULE_CATEGORIES

  def __init__(self, tokenizer: Any):
    special = _special_ids(tokenizer)
    index = {name: i for i, name in enumerate(RULE_CATEGORIES)}
    table = np.empty(int(tokenizer.vocab_size), np.int32)
    for t in range(table.shape[0]):
      table[t] = index["SPECIAL"] if t in special else index[classify_text(_token_text(tokenizer, t))]
    self.table = table

  def tag(self, token_ids: np.ndarray) -> np.ndarray:
    ids = np.asarray(token_ids)
    if ids.size and (ids.min() < 0 or ids.max() >= self.table.shape[0]):
      raise ValueError(f"token ids must be in [0, {self.table.shape[0]}), got range "
                       f"[{ids.min()}, {ids.max()}]")
    return self.table[ids]


PosFn = Callable[[str], Sequence[tuple[int, int, str]]]


def spacy_pos_fn(model: str = "en_core_web_sm") -> PosFn:
  """A POS function backed by spaCy (``token.pos_`` over character spans).

  Raises:
    ConfigError: spaCy or the model is not installed (names ``credit.dtca.tagger``).
  """
  try:
    import spacy  # pylint: disable=import-outside-toplevel

    nlp = spacy.load(model, disable=["parser", "ner", "lemmatizer"])
  except (ImportError, OSError) as e:
    raise ConfigError("credit.dtca.tagger", "pos",
                      f"'rule', or install spaCy and its {model!r} model for 'pos' ({e})") from e

  def pos(text: str) -> list[tuple[int, int, str]]:
    return [(t.idx, t.idx + len(t.text), t.pos_) for t in nlp(text)]

  return pos


class PosTagger(TokenTagger):
  """Part-of-speech tagger over decoded text (categories: :data:`POS_CATEGORIES`).

  Args:
    tokenizer: as for :class:`RuleTagger`.
    pos_fn: ``text -> [(start, end, universal_pos_tag), ...]`` character spans; default spaCy.
      Unknown tags map to ``X``; characters outside every span (whitespace) to ``SPACE``.
  """

  categories = POS_CATEGORIES

  def __init__(self, tokenizer: Any, pos_fn: PosFn | None = None):
    self.tokenizer = tokenizer
    self.special = _special_ids(tokenizer)
    self.pos_fn = pos_fn if pos_fn is not None else spacy_pos_fn()
    self._index = {name: i for i, name in enumerate(POS_CATEGORIES)}
    self._text_cache: dict[int, str] = {}

  def _text(self, t: int) -> str:
    if t not in self._text_cache:
      self._text_cache[t] = _token_text(self.tokenizer, t)
    return self._text_cache[t]

  def _tag_row(self, row: np.ndarray) -> np.ndarray:
    pieces = ["" if int(t) in self.special else self._text(int(t)) for t in row]
    starts = np.cumsum([0] + [len(p) for p in pieces[:-1]])
    text = "".join(pieces)
    char_tag = np.full(len(text), self._index["SPACE"], np.int32)
    for start, end, tag in self.pos_fn(text):
      char_tag[max(start, 0):max(end, 0)] = self._index.get(tag, self._index["X"])
    out = np.empty(len(row), np.int32)
    for j, (t, piece, start) in enumerate(zip(row, pieces, starts)):
      if int(t) in self.special:
        out[j] = self._index["SPECIAL"]
      elif not piece.strip():
        out[j] = self._index["SPACE"]
      else:
        # The first non-space character decides (a token such as " cat" belongs to "cat").
        offset = len(piece) - len(piece.lstrip())
        pos = min(start + offset, len(text) - 1)
        out[j] = char_tag[pos]
    return out

  def tag(self, token_ids: np.ndarray) -> np.ndarray:
    ids = np.asarray(token_ids)
    return np.stack([self._tag_row(r) for r in ids]) if ids.shape[0] else ids.astype(np.int32)


TAGGERS: Registry[Callable[..., TokenTagger]] = Registry("token tagger", "credit.dtca.tagger")
TAGGERS.register("rule")(RuleTagger)
TAGGERS.register("pos")(PosTagger)
