"""HFTokenizer: a checkpoint's tokenizer files read as transformers reads them (special tokens by role,
ids, chat template, prompt encoding), checked against transformers on tiny checkpoints in each family's
released layout; and the byte tokenizer's template, which keeps today's prompts bit for bit."""
import json
import shutil
import sys

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from daca_jax.errors import ConfigError, DataError
from daca_jax.tasks.chat import LLADA_CHAT_TEMPLATE, ChatTemplate
from daca_jax.tasks.hf_tokenizer import LLADA_SPECIAL, HFTokenizer
from daca_jax.tasks.tokenizer import ByteTokenizer
from tests import hf_fixtures as hf

tokenizers = pytest.importorskip("tokenizers")

WORDS = ["hello", "world", "the", "answer", "is", "4", "user", "assistant", "\n"]
SPECIAL = ["<|endoftext|>", "<|mdm_mask|>", "<|startoftext|>", "<|start_header_id|>", "<|end_header_id|>",
           "<|eot_id|>"]
# (bos, eos, pad, mask) of each release.
RELEASED_IDS = {"llada": (126080, 126081, 126081, 126336), "dream": (151665, 151643, 151643, 151666)}
TEXTS = ["  Solve the following Sudoku puzzle: 1234 \n", "Numbers: [30, 100, 93]\nTarget: 23",
         "Ünïcödé ﬁ 한국어 🙂 <tool_call> x <|mdm_mask|>\t\n\n ", "def f(x):\n    return x  # don't I'LL"]


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


@pytest.fixture(scope="module", params=hf.FAMILIES)
def ckpt(request, tmp_path_factory):
  return request.param, hf.write_tiny_checkpoint(tmp_path_factory.mktemp(request.param), request.param, layers=1)


def _transformers_tokenizer(family, path):
  transformers = pytest.importorskip("transformers")
  if family == "llada":
    return transformers.AutoTokenizer.from_pretrained(str(path), trust_remote_code=False)
  return transformers.Qwen2Tokenizer.from_pretrained(str(path))  # the class Dream's remote code copies


def test_special_ids_and_roundtrip(tok_path):
  tok = HFTokenizer.for_llada(tok_path.parent, vocab_size=64)
  assert (tok.pad_id, tok.mask_id, tok.eos_id, tok.bos_id) == (0, 1, 0, 2)
  assert tok.vocab_size == 64 and tok.chat_template is None
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


def test_missing_special_token_and_file(tok_path, tmp_path):
  with pytest.raises(DataError, match=r"mask='<\|nope\|>'"):
    HFTokenizer(tok_path, **dict(LLADA_SPECIAL, mask="<|nope|>"))
  with pytest.raises(DataError, match="tokenizer.json not found"):
    HFTokenizer.for_llada(tmp_path)


def _todays_llada_prompt(content: str) -> str:
  """The chat prompt every task built before the template came from the tokenizer
  (hf_tokenizer.llada_chat_prompt(content, bos="")), written out."""
  return (f"<|start_header_id|>user<|end_header_id|>\n\n{content.strip()}<|eot_id|>"
          "<|start_header_id|>assistant<|end_header_id|>\n\n")


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_byte_tokenizer_template_is_todays_prompt_bit_for_bit(content):
  byte = ByteTokenizer()
  text = byte.chat_template.user_turn(content)
  assert text == _todays_llada_prompt(content)
  assert byte.prompt_ids(text, chat=True) == [byte.bos_id] + list(text.encode("utf-8"))


@pytest.mark.parametrize("name,options", [
    ("sudoku4x4", {"eval_size": 4}), ("countdown", {"eval_size": 4}), ("gsm8k", {}), ("math500", {}),
    ("humaneval", {}), ("json_schema", {"eval_size": 4})])
def test_byte_tokenizer_task_prompts_are_todays(name, options):
  """Each chat prompt is today's LLaDA layout (BOS as an id, no BOS text) and encodes as bos + bytes."""
  from daca_jax.data import local
  from daca_jax.tasks.base import make_task

  if name in ("gsm8k", "math500") and local.resolve_data_dir("") is None:
    pytest.skip("needs the benchmark files (../shared/data)")
  task = make_task(name, data_dir="", prompt_style="chat", **options)
  examples = task.eval_examples()[0][:4]
  rows = task.encode_prompts(examples)
  for ex, row in zip(examples, rows):
    head = "<|start_header_id|>user<|end_header_id|>\n\n"
    assert ex.prompt.startswith(head) and "<|startoftext|>" not in ex.prompt
    content = ex.prompt[len(head):].split("<|eot_id|>", 1)[0]
    assert ex.prompt.startswith(_todays_llada_prompt(content))
    ids = [259] + list(ex.prompt.encode("utf-8"))
    assert row[-len(ids):].tolist() == ids and set(row[:-len(ids)].tolist()) <= {256}


def test_from_checkpoint_roles_and_ids_are_the_releases(ckpt):
  family, path = ckpt
  tok = HFTokenizer.from_checkpoint(path)
  assert (tok.bos_id, tok.eos_id, tok.pad_id, tok.mask_id) == RELEASED_IDS[family]
  assert tok.vocab_size == {"llada": 126349, "dream": 151667}[family]  # 1 + the largest added id
  assert HFTokenizer.from_checkpoint(path, vocab_size=200000).vocab_size == 200000
  # the variables the template sees are the roles the tokenizer files name (LLaDA's mask is config.json's)
  assert set(tok.chat_template.variables) == {"llada": {"bos_token", "eos_token", "pad_token", "cls_token"},
                                              "dream": {"bos_token", "eos_token", "pad_token", "mask_token"}}[family]
  assert not any(m in sys.modules for m in ("modeling_llada", "tokenization_dream", "configuration_dream"))


@pytest.mark.parametrize("messages", [
    [{"role": "user", "content": TEXTS[0]}], [{"role": "user", "content": TEXTS[2]}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": TEXTS[1]},
     {"role": "assistant", "content": "42"}, {"role": "user", "content": TEXTS[3]}]])
def test_template_render_and_ids_equal_transformers(ckpt, messages):
  family, path = ckpt
  ref = _transformers_tokenizer(family, path)
  tok = HFTokenizer.from_checkpoint(path)
  text = tok.chat_template.render(messages)
  assert text == ref.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
  ids = tok.prompt_ids(text, chat=True)
  assert ids == list(ref.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)["input_ids"])
  assert tok.decode(ids, stop_at_eos=False) == ref.decode(ids, skip_special_tokens=True)


def test_plain_prompt_ids_equal_transformers(ckpt):
  family, path = ckpt
  ref = _transformers_tokenizer(family, path)
  tok = HFTokenizer.from_checkpoint(path)
  for text in TEXTS:
    assert tok.prompt_ids(text, chat=False) == ref(text)["input_ids"]
    assert tok.encode(text) == ref(text, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("name,question", [
    ("countdown", "Numbers: [30, 100, 93]\nTarget: 23"),
    ("gsm8k", None), ("sudoku4x4", None)])
def test_task_chat_prompts_are_the_checkpoints_template(ckpt, name, question):
  """d1's prompt in the checkpoint's own template: transformers' rendering of the user turn, then
  "<reasoning>", encoded to transformers' ids."""
  from daca_jax.tasks import countdown, gsm8k, sudoku
  from daca_jax.tasks.base import make_task

  from daca_jax.data import local

  if name == "gsm8k" and local.resolve_data_dir("") is None:
    pytest.skip("needs the benchmark files (../shared/data)")
  family, path = ckpt
  ref = _transformers_tokenizer(family, path)
  tok = HFTokenizer.from_checkpoint(path)
  task = make_task(name, data_dir="", prompt_style="chat", tokenizer=tok, **(
      {"eval_size": 3} if name != "gsm8k" else {"prompt_len": 1024}))
  ex = task.eval_examples()[0][0]
  system = {"countdown": countdown.SYSTEM_PROMPT, "gsm8k": gsm8k.SYSTEM_PROMPT, "sudoku4x4": sudoku.SYSTEM_PROMPT}[name]
  if question is None:
    question = {"gsm8k": lambda: task.benchmarks.json_records("gsm8k/test.jsonl")[0]["question"],
                "sudoku4x4": lambda: f"Solve the following Sudoku puzzle: {ex.meta['puzzle']}\n"}[name]()
  else:
    question = f"Numbers: {list(ex.meta['numbers'])}\nTarget: {ex.meta['target']}"
  want = ref.apply_chat_template([{"role": "user", "content": f"{system}\n\n{question}"}],
                                 add_generation_prompt=True, tokenize=False) + "<reasoning>"
  assert ex.prompt == want
  row = task.encode_prompts([ex])[0]
  ids = ref(want, add_special_tokens=False)["input_ids"]
  assert row[-len(ids):].tolist() == ids and set(row[:-len(ids)].tolist()) <= {tok.pad_id}


def test_missing_files_are_one_error_naming_them(tmp_path, ckpt):
  family, path = ckpt
  with pytest.raises(DataError, match=r"tokenizer_config\.json .*; tokenizer\.json \(or vocab\.json \+ merges\.txt\)"):
    HFTokenizer.from_checkpoint(tmp_path)
  bare = tmp_path / "bare"
  shutil.copytree(path, bare)
  (bare / "tokenizer_config.json").unlink()
  with pytest.raises(DataError, match=r"missing: tokenizer_config\.json \(the special tokens") as e:
    HFTokenizer.from_checkpoint(bare)
  assert "tokenizer.json (or" not in str(e.value)
  with pytest.raises(DataError, match="not a checkpoint folder"):
    HFTokenizer.from_checkpoint(tmp_path / "nowhere")


def test_hostile_tokenizer_files_are_clear_errors(tmp_path):
  src = hf.write_tokenizer_files(tmp_path / "dream", "dream")

  def variant(name, edit):
    d = tmp_path / name
    shutil.copytree(src, d)
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    edit(d, cfg)
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    return d

  def wrong_id(d, cfg):
    (d / "added_tokens.json").write_text(json.dumps({"<|mask|>": 7}))

  with pytest.raises(DataError, match=r"added_tokens\.json and tokenizer_config\.json disagree.*<\|mask\|>"):
    HFTokenizer.from_checkpoint(variant("ids", wrong_id))
  with pytest.raises(DataError, match=r"special tokens not in the vocabulary: \{'pad': '<\|nope\|>'\}"):
    HFTokenizer.from_checkpoint(variant("role", lambda d, c: c.update(pad_token="<|nope|>")))
  with pytest.raises(DataError, match=r"tokenizer_class='GPT2Tokenizer' is not a vocab\.json \+ merges\.txt"):
    HFTokenizer.from_checkpoint(variant("cls", lambda d, c: c.update(tokenizer_class="GPT2Tokenizer")))

  def no_mask(d, cfg):
    cfg.pop("mask_token")
    (d / "special_tokens_map.json").unlink()

  with pytest.raises(DataError, match=r"no mask_token .*\(nor mask_token_id in config\.json\)"):
    HFTokenizer.from_checkpoint(variant("mask", no_mask))
  (tmp_path / "mask" / "config.json").write_text(json.dumps({"mask_token_id": 151666}))
  assert HFTokenizer.from_checkpoint(tmp_path / "mask").mask_id == 151666  # config.json's, as LLaDA's
  (tmp_path / "ids" / "added_tokens.json").write_text("{not json")
  with pytest.raises(DataError, match=r"added_tokens\.json: not valid JSON"):
    HFTokenizer.from_checkpoint(tmp_path / "ids")


def test_chat_template_is_sandboxed_and_renders_as_transformers():
  """The environment's extras (tojson without HTML escaping, namespace, loop controls, generation
  blocks, raise_exception) equal transformers' render_jinja_template; Python internals are refused."""
  jinja2 = pytest.importorskip("jinja2")
  chat_utils = pytest.importorskip("transformers.utils.chat_template_utils")
  source = ("{%- set ns = namespace(n=0) %}{% for m in messages %}{% if m.role == 'skip' %}{% continue %}{% endif %}"
            "{% set ns.n = ns.n + 1 %}{% generation %}{{ m | tojson }}{% endgeneration %}\n{% endfor %}"
            "{{ ns.n }}{{ bos_token }}{% if add_generation_prompt %}<go>{% endif %}")
  messages = [{"role": "user", "content": "<a & 'b'> ü"}, {"role": "skip", "content": "x"},
              {"role": "user", "content": "2", "extra": None}]
  ours = ChatTemplate(source, {"bos_token": "<s>"}).render(messages)
  theirs, _ = chat_utils.render_jinja_template(conversations=[[{k: v for k, v in m.items() if v is not None}
                                                               for m in messages]],
                                               chat_template=source, add_generation_prompt=True, bos_token="<s>")
  assert ours == theirs[0] and '"<a & \'b\'> ü"' in ours
  with pytest.raises(DataError, match="t.jinja: the chat template is refused: TemplateError: roles must alternate"):
    ChatTemplate("{{ raise_exception('roles must alternate') }}", origin="t.jinja").user_turn("x")
  with pytest.raises(DataError, match="the sandbox refused an operation"):
    ChatTemplate("{{ messages.__class__.__mro__ }}").user_turn("x")
  with pytest.raises(DataError, match="the sandbox refused an operation .*cannot set '_x'"):
    ChatTemplate("{% set ns = namespace() %}{% set ns._x = 1 %}").user_turn("x")
  assert ChatTemplate("{{ strftime_now('%Y') }}").user_turn("x").isdigit()
  with pytest.raises(DataError, match="t.jinja: the chat template is refused: line 1: .*not a valid Jinja"):
    ChatTemplate("{% for %}", origin="t.jinja").user_turn("x")
  with pytest.raises(ConfigError, match="chat_template variables"):
    ChatTemplate(LLADA_CHAT_TEMPLATE, {"user_token": "u"})
