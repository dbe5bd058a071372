"""A Hugging Face checkpoint's tokenizer with :class:`ByteTokenizer`'s interface, read from its own files.

:meth:`HFTokenizer.from_checkpoint` reads what transformers' ``AutoTokenizer.from_pretrained`` reads,
without importing any of the checkpoint's code:

* the vocabulary and merges: ``tokenizer.json`` (LLaDA), or ``vocab.json`` + ``merges.txt`` for the
  byte-level BPE of Qwen2's tokenizer class (Dream ships no tokenizer.json: its remote-code
  ``tokenization_dream.py`` is a copy of transformers' Qwen2Tokenizer, so the same pipeline is built
  here with the ``tokenizers`` library: NFC, Qwen2's pre-tokenization regex, byte-level BPE);
* the added tokens at their ids (``tokenizer_config.json``'s ``added_tokens_decoder``, checked against
  ``tokenizer.json`` / ``added_tokens.json``);
* the special tokens BY ROLE (``bos_token``, ``eos_token``, ``pad_token``, ``unk_token``, ``mask_token``,
  ... of ``tokenizer_config.json``, else of ``special_tokens_map.json``); a checkpoint whose tokenizer
  files name no mask token (LLaDA) takes it from ``config.json``'s ``mask_token_id``;
* the chat template (``chat_template.jinja``, else ``tokenizer_config.json``'s ``chat_template``) as a
  :class:`~daca_jax.tasks.chat.ChatTemplate` with the tokenizer's special tokens as variables.

Prompt encoding follows transformers: a prompt rendered with the chat template is encoded without
adding special tokens (``apply_chat_template(tokenize=True)``); a plain prompt as ``tokenizer(text)``,
whose BOS/EOS come from ``add_bos_token`` / ``add_eos_token`` when the config sets them or the
tokenizer has no post-processor (transformers' ``TokenizersBackend.update_post_processor``), else from
``tokenizer.json``'s post-processor.

Why one module over 350 lines: it is one job, reading one checkpoint's tokenizer files as transformers
reads them; its helpers are the steps of that one read, each used once.
"""
from __future__ import annotations

import logging
import os
import pathlib
from typing import Any, Mapping

import numpy as np

from daca_jax.errors import DataError
from daca_jax.models import checkpoint_folder
from daca_jax.tasks.chat import TEMPLATE_TOKEN_ROLES, ChatTemplate

log = logging.getLogger(__name__)

# LLaDA-8B-Instruct's special tokens (tokenizer.json): [MASK] is id 126336, <|endoftext|> 126081
# serves as EOS and padding, <|startoftext|> is the BOS its chat template prepends.
LLADA_SPECIAL = {"pad": "<|endoftext|>", "mask": "<|mdm_mask|>", "eos": "<|endoftext|>",
                 "bos": "<|startoftext|>"}

# Qwen2's pre-tokenization regex (transformers models/qwen2/tokenization_qwen2.py PRETOKENIZE_REGEX; the
# same in Dream-v0-Instruct-7B's tokenization_dream.py).
QWEN2_PRETOKENIZE_REGEX = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
                           r"""\s*[\r\n]+|\s+(?!\S)|\s+""")
# Tokenizer classes whose vocab.json + merges.txt are Qwen2's byte-level BPE.
QWEN2_BPE_CLASSES = ("Qwen2Tokenizer", "Qwen2TokenizerFast", "DreamTokenizer")
# The roles the library needs ids of.
REQUIRED_ROLES = ("eos", "pad", "mask")


class HFTokenizer:
  """A ``tokenizers`` tokenizer with ``encode``/``decode``/``decode_batch``, special ids and a chat template.

  Args:
    path: a ``tokenizer.json`` file, a folder that holds one, or a ``tokenizers.Tokenizer``.
    pad, mask, eos, bos: the special tokens' strings (each must be in the vocabulary; ``bos`` may be
      None).
    vocab_size: the model's vocabulary size when it exceeds the tokenizer's (LLaDA: 126464); ids the
      tokenizer does not know decode to nothing.
    chat_template: the checkpoint's chat template (None: prompts cannot use the chat style).
    plain_affixes: ``(prefix ids, suffix ids)`` that ``tokenizer(text)`` adds to a plain prompt
      (None: the tokenizer's own post-processor decides).
    source: where the tokenizer came from (``repr``).
  Raises:
    DataError: no tokenizer.json, or a special token missing from its vocabulary.

  Use :meth:`from_checkpoint` for a checkpoint folder (roles and template from its files).
  """

  def __init__(self, path: Any, *, pad: str, mask: str, eos: str, bos: str | None,
               vocab_size: int | None = None, chat_template: ChatTemplate | None = None,
               plain_affixes: tuple[list[int], list[int]] | None = None, source: str = ""):
    if isinstance(path, (str, pathlib.Path)):
      tok = _read_tokenizer_json(pathlib.Path(path).expanduser())
      source = source or str(path)
    else:
      tok = path
    self.tok = tok
    self.source = source
    ids = {}
    for role, token in (("pad", pad), ("mask", mask), ("eos", eos), ("bos", bos)):
      ids[role] = -1 if token is None else tok.token_to_id(token)
      if ids[role] is None:
        raise DataError(f"{source}: special token {role}={token!r:.100} is not in the vocabulary")
    self.pad_id, self.mask_id, self.eos_id, self.bos_id = (ids["pad"], ids["mask"], ids["eos"], ids["bos"])
    known = np.fromiter(tok.get_vocab(with_added_tokens=True).values(), np.int64)
    checkpoint_folder.check_token_ids(known.tolist(), source or "the tokenizer")  # bounds the table below
    self._known = np.zeros(int(known.max()) + 1 if known.size else 0, bool)
    self._known[known] = True
    self.vocab_size = max(vocab_size or 0, self._known.size)
    self.chat_template = chat_template
    self._plain_affixes = plain_affixes

  @classmethod
  def from_checkpoint(cls, path: str | pathlib.Path, vocab_size: int | None = None) -> "HFTokenizer":
    """The tokenizer of a Hugging Face checkpoint folder (see the module docstring).

    Args:
      path: the checkpoint folder.
      vocab_size: the model's vocabulary (embedding rows), when larger than the tokenizer's ids.
    Raises:
      DataError: one message naming everything missing (tokenizer_config.json, tokenizer.json or
        vocab.json + merges.txt, a role's token, the mask token), a malformed file, a special token
        that is not in the vocabulary, or an added token whose id disagrees between the files.
    """
    if not pathlib.Path(path).expanduser().is_dir():
      raise DataError(f"{path}: not a checkpoint folder (expected tokenizer_config.json and tokenizer.json "
                      "or vocab.json + merges.txt in it)")
    p = checkpoint_folder.root(path)
    has = lambda name: checkpoint_folder.has(p, name)
    has_json = has("tokenizer.json")
    missing = [] if has("tokenizer_config.json") else [
        "tokenizer_config.json (the special tokens by role and the chat template)"]
    if not has_json and not (has("vocab.json") and has("merges.txt")):
      missing.append("tokenizer.json (or vocab.json + merges.txt)")
    if missing:
      raise DataError(f"{p}: the tokenizer files are missing: {'; '.join(missing)}")
    config = _read_json(p / "tokenizer_config.json")
    added = _added_tokens(config, p)
    tok = checkpoint_folder.read_tokenizer(p) if has_json else _qwen2_bpe(p, config, added)
    for i, token in added.items():
      if tok.token_to_id(token["content"]) != i:
        raise DataError(f"{p}: tokenizer_config.json's added token {i} {token['content']!r:.100} has id "
                        f"{tok.token_to_id(token['content'])} in the vocabulary")
    roles = _roles(p, config)
    unknown = {r: t for r, t in roles.items() if tok.token_to_id(t) is None}
    if unknown:
      raise DataError(f"{p}: special tokens not in the vocabulary: {unknown}")
    named = dict(roles)  # the template sees the roles of the tokenizer files only (as transformers)
    if "mask" not in roles and _config_mask_token(p, tok) is not None:
      roles["mask"] = _config_mask_token(p, tok)
    absent = [r for r in REQUIRED_ROLES if r not in roles]
    if absent:
      raise DataError(f"{p}: no {' / '.join(f'{r}_token' for r in absent)} in tokenizer_config.json or "
                      "special_tokens_map.json" + (" (nor mask_token_id in config.json)" if "mask" in absent else ""))
    template = _chat_template(p, config, {f"{r}_token": t for r, t in named.items()})
    affixes = _plain_affixes(config, tok, roles)
    return cls(tok, pad=roles["pad"], mask=roles["mask"], eos=roles["eos"], bos=roles.get("bos"),
               vocab_size=vocab_size, chat_template=template, plain_affixes=affixes, source=str(p))

  @classmethod
  def for_llada(cls, path: str | pathlib.Path, vocab_size: int = 126464) -> "HFTokenizer":
    """A bare ``tokenizer.json`` with LLaDA-8B's special tokens (:data:`LLADA_SPECIAL`) and no chat
    template; a checkpoint folder is read with :meth:`from_checkpoint` instead."""
    return cls(path, vocab_size=vocab_size, **LLADA_SPECIAL)

  @property
  def special_ids(self) -> tuple[int, ...]:
    """``(pad_id, mask_id, eos_id[, bos_id])``."""
    return tuple(i for i in (self.pad_id, self.mask_id, self.eos_id, self.bos_id) if i >= 0)

  def encode(self, text: str) -> list[int]:
    """Ids of ``text``; special-token strings inside it (e.g. a chat template's) map to their ids,
    and no BOS/EOS is added.

    Raises:
      TypeError: ``text`` is not a ``str``.
    """
    if not isinstance(text, str):
      raise TypeError(f"HFTokenizer.encode expects a str, got {type(text).__name__}")
    return self.tok.encode(text, add_special_tokens=False).ids

  def prompt_ids(self, text: str, chat: bool) -> list[int]:
    """The ids transformers gives a prompt: a chat-templated one encoded without adding special
    tokens (``apply_chat_template(tokenize=True)``), a plain one as ``tokenizer(text)``."""
    if chat:
      return self.encode(text)
    if self._plain_affixes is None:
      return self.tok.encode(text, add_special_tokens=True).ids
    head, tail = self._plain_affixes
    return head + self.encode(text) + tail

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
    known = np.zeros(arr.shape, bool)
    inside = arr < self._known.size
    known[inside] = self._known[arr[inside]]
    return arr[known & ~np.isin(arr, self.special_ids)].tolist()

  def decode(self, ids: Any, stop_at_eos: bool = True) -> str:
    """Text of one id sequence ``[L]``: everything from the first EOS on is dropped when
    ``stop_at_eos``; pad/mask/bos/eos ids, other special tokens and ids the tokenizer does not know
    (rows of the model's table past the tokenizer's) are skipped.

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
    return (f"HFTokenizer({self.source or 'in memory'}, vocab_size={self.vocab_size}, mask_id={self.mask_id}, "
            f"eos_id={self.eos_id})")


# --- reading the files -------------------------------------------------------------------------------


def _read_json(path: pathlib.Path, max_bytes: int = checkpoint_folder.MAX_JSON_BYTES) -> dict[str, Any]:
  """A JSON object from a file of a checkpoint folder, through its boundary
  (:func:`daca_jax.models.checkpoint_folder.read_json`)."""
  return checkpoint_folder.read_json(checkpoint_folder.root(path.parent), path.name, max_bytes=max_bytes)


def _read_tokenizer_json(p: pathlib.Path) -> Any:
  """``tokenizer.json`` given as the file or its folder (``--tokenizer``), through the boundary."""
  if p.is_dir():
    p = p / "tokenizer.json"
  if not os.path.lexists(p):
    raise DataError(f"{p}: tokenizer.json not found")
  return checkpoint_folder.read_tokenizer(checkpoint_folder.root(p.parent), p.name)


def _content(value: Any, where: str) -> str | None:
  """A role's token: a string, ``{"content": ...}`` (an AddedToken's fields) or null."""
  if value is None or isinstance(value, str):
    return value
  if isinstance(value, Mapping) and isinstance(value.get("content"), str):
    return value["content"]
  raise DataError(f"{where}: expected a token string or {{'content': ...}}, got {value!r:.100}")


def _roles(p: pathlib.Path, config: Mapping[str, Any]) -> dict[str, str]:
  """``{role: token}`` of the roles the tokenizer files name: tokenizer_config.json, then
  special_tokens_map.json for those it leaves unset (transformers reads the latter only as a legacy
  fallback)."""
  fallback = _read_json(p / "special_tokens_map.json") if checkpoint_folder.has(p, "special_tokens_map.json") else {}
  roles = {}
  for key in TEMPLATE_TOKEN_ROLES:
    role = key[:-len("_token")]
    token = _content(config.get(key), f"{p / 'tokenizer_config.json'}:{key}")
    other = _content(fallback.get(key), f"{p / 'special_tokens_map.json'}:{key}")
    if token is not None and other is not None and other != token:
      log.warning("%s: %s is %r in tokenizer_config.json and %r in special_tokens_map.json; using the former",
                  p, key, token, other)
    if token is None:
      token = other
    if token is not None:
      roles[role] = token
  return roles


def _config_mask_token(p: pathlib.Path, tok: Any) -> str | None:
  """The mask token of ``config.json``'s ``mask_token_id`` (LLaDA names its mask only there), or None."""
  if not checkpoint_folder.has(p, "config.json"):
    return None
  mask_id = _read_json(p / "config.json").get("mask_token_id")
  if mask_id is None:
    return None
  in_range = isinstance(mask_id, int) and not isinstance(mask_id, bool) and 0 <= mask_id < checkpoint_folder.MAX_TOKEN_ID
  token = tok.id_to_token(mask_id) if in_range else None
  if token is None:
    raise DataError(f"{p / 'config.json'}: mask_token_id={mask_id!r:.60} is not allowed: expected an id of "
                    "the tokenizer")
  return token


def _added_tokens(config: Mapping[str, Any], p: pathlib.Path) -> dict[int, dict[str, Any]]:
  """``{id: AddedToken fields}`` of tokenizer_config.json's ``added_tokens_decoder``, checked against
  ``added_tokens.json`` when the folder has one."""
  raw = config.get("added_tokens_decoder") or {}
  where = p / "tokenizer_config.json"
  if not isinstance(raw, Mapping):
    raise DataError(f"{where}: added_tokens_decoder is not a mapping of ids to tokens")
  added = {}
  for key, value in raw.items():
    if (not str(key).isdigit() or len(str(key)) > 9 or not isinstance(value, Mapping)
        or not isinstance(value.get("content"), str)):
      raise DataError(f"{where}: added_tokens_decoder entry {key!r:.60}: expected an id and {{'content': ...}}")
    added[int(key)] = dict(value)
  checkpoint_folder.check_token_ids(added, f"{where}:added_tokens_decoder")
  if checkpoint_folder.has(p, "added_tokens.json"):
    listed = _read_json(p / "added_tokens.json")
    checkpoint_folder.check_token_ids(listed.values(), str(p / "added_tokens.json"))
    by_content = {t["content"]: i for i, t in added.items()}
    wrong = {c: (i, by_content.get(c)) for c, i in listed.items() if c in by_content and by_content[c] != i}
    if wrong:
      raise DataError(f"{p}: added_tokens.json and tokenizer_config.json disagree on ids (token: "
                      f"(added_tokens.json, tokenizer_config.json)): {wrong}")
  return added


def _qwen2_bpe(p: pathlib.Path, config: Mapping[str, Any], added: Mapping[int, Mapping[str, Any]]) -> Any:
  """Qwen2's byte-level BPE from ``vocab.json`` + ``merges.txt``, with the added tokens at their ids."""
  from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
  from tokenizers.models import BPE

  cls = config.get("tokenizer_class")
  if cls not in QWEN2_BPE_CLASSES:
    raise DataError(f"{p}: no tokenizer.json, and tokenizer_class={cls!r:.100} is not a vocab.json + merges.txt "
                    f"layout this library reads (one of {list(QWEN2_BPE_CLASSES)})")
  vocab = _read_json(p / "vocab.json", checkpoint_folder.MAX_TOKENIZER_BYTES)
  checkpoint_folder.check_token_ids(vocab.values(), str(p / "vocab.json"))
  merges = []
  text = checkpoint_folder.read_text(p, "merges.txt", checkpoint_folder.MAX_TOKENIZER_BYTES)
  for n, line in enumerate(text.splitlines()):
    if (n == 0 and line.startswith("#version")) or not line:
      continue
    pair = line.split(" ")
    if len(pair) != 2:
      raise DataError(f"{p / 'merges.txt'}: line {n + 1} is not two tokens separated by one space: {line!r:.100}")
    merges.append(tuple(pair))
  by_id = {i: t for t, i in vocab.items()}
  for i, token in added.items():
    if by_id.get(i, token["content"]) != token["content"]:
      raise DataError(f"{p}: added token {i} {token['content']!r:.100} collides with vocab.json's {by_id[i]!r:.100}")
    vocab[token["content"]] = i  # in the model as well, so that the id is kept as given
  tok = Tokenizer(BPE(vocab=vocab, merges=merges, dropout=None, unk_token=None, continuing_subword_prefix="",
                      end_of_word_suffix="", fuse_unk=False, byte_fallback=False))
  tok.normalizer = normalizers.NFC()
  tok.pre_tokenizer = pre_tokenizers.Sequence([
      pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
      pre_tokenizers.ByteLevel(add_prefix_space=bool(config.get("add_prefix_space") or False), use_regex=False)])
  tok.decoder = decoders.ByteLevel()
  tok.add_tokens([AddedToken(t["content"], single_word=bool(t.get("single_word", False)),
                             lstrip=bool(t.get("lstrip", False)), rstrip=bool(t.get("rstrip", False)),
                             normalized=bool(t.get("normalized", False)), special=bool(t.get("special", True)))
                  for _, t in sorted(added.items())])
  return tok


def _chat_template(p: pathlib.Path, config: Mapping[str, Any], variables: dict[str, str]) -> ChatTemplate | None:
  """``chat_template.jinja`` if present, else tokenizer_config.json's ``chat_template`` (a string, or a
  list of named templates of which "default" is used); None when there is none."""
  if checkpoint_folder.has(p, "chat_template.jinja"):
    source = checkpoint_folder.read_text(p, "chat_template.jinja", checkpoint_folder.MAX_TEMPLATE_BYTES)
    template = ChatTemplate(source, variables, origin=str(p / "chat_template.jinja"))
    template.check()  # a template that cannot render one user message is refused now, not mid-run
    return template
  where = f"{p / 'tokenizer_config.json'}:chat_template"
  source = config.get("chat_template")
  if isinstance(source, list):
    named = {t.get("name"): t.get("template") for t in source if isinstance(t, Mapping)}
    if "default" not in named:
      raise DataError(f"{where} lists {sorted(map(str, named))[:20]}, no 'default'")
    source = named["default"]
  if source is None:
    return None
  if not isinstance(source, str) or not source or len(source) > checkpoint_folder.MAX_TEMPLATE_BYTES:
    raise DataError(f"{where}: {type(source).__name__} of {len(source) if isinstance(source, str) else '-'} "
                    f"characters is not allowed: expected a template string of 1 to "
                    f"{checkpoint_folder.MAX_TEMPLATE_BYTES} characters")
  template = ChatTemplate(source, variables, origin=where)
  template.check()
  return template


def _plain_affixes(config: Mapping[str, Any], tok: Any, roles: Mapping[str, str]) -> tuple[list[int], list[int]] | None:
  """What ``tokenizer(text)`` adds around a plain prompt, when transformers rebuilds the post-processor:
  the config sets ``add_bos_token`` / ``add_eos_token``, or the tokenizer has none (None: keep the
  tokenizer.json's own)."""
  if "add_bos_token" not in config and "add_eos_token" not in config and tok.post_processor is not None:
    return None
  head = [tok.token_to_id(roles["bos"])] if config.get("add_bos_token") and "bos" in roles else []
  tail = [tok.token_to_id(roles["eos"])] if config.get("add_eos_token") and "eos" in roles else []
  return head, tail
