"""Tiny Hugging Face checkpoints of LLaDA-8B-Instruct and Dream-v0-Instruct-7B in each release's layout.

:func:`write_tiny_checkpoint` writes a folder that looks like the released one, file for file, with
tiny layer sizes but the released vocabulary (embedding rows), special token ids, tokenizer
configuration and chat template, and random weights. Everything this library reads from a real
checkpoint is in it; the remote-code ``.py`` files are placeholders that raise when imported (the
library must never import them).

Where each fact comes from (all read from stored copies of the released files):

* LLaDA-8B-Instruct (``GSAI-ML/LLaDA-8B-Instruct``): ``config.json``, ``tokenizer_config.json``,
  ``special_tokens_map.json`` and ``generation_config.json`` from monash-yann/dllm-research
  ``models/LLaDA-8B-Instruct/`` @ecd7cd2f8cbe67f49c34763ba56a451078be5635; the first three are
  byte-identical in yinj66/support_basis ``LLaDA-8B-Instruct-B&S-light/``
  @fa6c180848024f5205c478dc76c81edd6ce81973 (so is generation_config.json). The release's file list
  (also from those copies): config.json, configuration_llada.py, generation_config.json,
  model-0000{1..6}-of-00006.safetensors + model.safetensors.index.json, modeling_llada.py,
  special_tokens_map.json, tokenizer.json, tokenizer_config.json. Special ids: bos ``<|startoftext|>``
  126080, eos = pad ``<|endoftext|>`` 126081, mask ``<|mdm_mask|>`` 126336 (no mask role in the
  tokenizer files: config.json's ``mask_token_id``), 269 added tokens 126080..126348, 126464
  embedding rows.
* Dream-v0-Instruct-7B (``Dream-org/Dream-v0-Instruct-7B``): ``config.json``,
  ``tokenizer_config.json``, ``special_tokens_map.json``, ``added_tokens.json`` and
  ``generation_config.json`` from monash-yann/dllm-research ``models/Dream-7B-Instruct/``
  @ecd7cd2f8cbe67f49c34763ba56a451078be5635 (their byte sizes, 927 / 7486 / 661 / 656 / 326, equal
  those of the ModelScope copy of the release). The release ships NO ``tokenizer.json``: its tokenizer
  is ``vocab.json`` + ``merges.txt`` read by the remote-code ``tokenization_dream.py`` (a copy of
  transformers' slow Qwen2Tokenizer: the same pre-tokenization regex and NFC normalisation). Special
  ids: eos = pad ``<|endoftext|>`` 151643, bos ``<|beginoftext|>`` 151665 (config.json says
  ``bos_token_id`` 151643), mask ``<|mask|>`` 151666, added tokens 151643..151666, 152064 embedding
  rows.

What is NOT the released content (not in the stored corpus, or too large for a test):

* the weights (random, tiny layer sizes; the tensor names and layouts are the releases', see
  :data:`daca_jax.models.hf_import.NAME_MAPS`);
* LLaDA's ``tokenizer.json`` (its text is not stored anywhere searchable): a byte-level BPE trained
  here on a small corpus, padded with filler tokens to the release's 126080 base ids, with every
  added token of ``tokenizer_config.json`` at its released id (so the pre-tokenizer, normaliser and
  merges are stand-ins; the ids of the special tokens are the release's);
* Dream's ``vocab.json`` / ``merges.txt`` (3.4 MB / 1.7 MB): the same kind of stand-in BPE, padded to
  the release's 151643 base ids, so that the added tokens land at their released ids.

Shapes: LLaDA ``d_model``, ``n_layers``, ``n_heads``, ``n_kv_heads``, ``mlp_hidden_size`` and Dream
``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``, ``num_key_value_heads``,
``intermediate_size`` are the tiny arguments; every other config field is the release's.
"""
from __future__ import annotations

import functools
import json
import pathlib
from typing import Any

import numpy as np

from daca_jax.tasks.chat import LLADA_CHAT_TEMPLATE

FAMILIES = ("llada", "dream")

# --- config.json, verbatim --------------------------------------------------------------------------

LLADA_CONFIG = {
    "activation_type": "silu", "alibi": False, "alibi_bias_max": 8.0, "architectures": ["LLaDAModelLM"],
    "attention_dropout": 0.0, "attention_layer_norm": False, "attention_layer_norm_with_affine": True,
    "auto_map": {"AutoConfig": "configuration_llada.LLaDAConfig",
                 "AutoModelForCausalLM": "modeling_llada.LLaDAModelLM", "AutoModel": "modeling_llada.LLaDAModelLM"},
    "bias_for_layer_norm": False, "block_group_size": 1, "block_type": "llama", "d_model": 4096,
    "embedding_dropout": 0.0, "embedding_size": 126464, "eos_token_id": 126081, "flash_attention": False,
    "include_bias": False, "include_qkv_bias": False, "init_cutoff_factor": None, "init_device": "meta",
    "init_fn": "mitchell", "init_std": 0.02, "input_emb_norm": False, "layer_norm_type": "rms",
    "layer_norm_with_affine": True, "mask_token_id": 126336, "max_sequence_length": 4096,
    "mlp_hidden_size": 12288, "mlp_ratio": 4, "model_type": "llada", "multi_query_attention": None,
    "n_heads": 32, "n_kv_heads": 32, "n_layers": 32, "pad_token_id": 126081, "precision": "amp_bf16",
    "residual_dropout": 0.0, "rms_norm_eps": 1e-05, "rope": True, "rope_full_precision": True,
    "rope_theta": 500000.0, "scale_logits": False, "transformers_version": "4.46.3", "use_cache": False,
    "vocab_size": 126464, "weight_tying": False}
DREAM_CONFIG = {
    "_name_or_path": "Dream-org/Dream-v0-Instruct-7B", "architectures": ["DreamModel"],
    "attention_dropout": 0.0,
    "auto_map": {"AutoConfig": "configuration_dream.DreamConfig", "AutoModel": "modeling_dream.DreamModel"},
    "bos_token_id": 151643, "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 3584,
    "initializer_range": 0.02, "intermediate_size": 18944, "mask_token_id": 151666,
    "max_position_embeddings": 131072, "max_window_layers": 28, "model_type": "Dream",
    "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4, "pad_token_id": 151643,
    "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000.0, "sliding_window": None,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.46.2",
    "use_cache": True, "use_mrope": False, "use_sliding_window": False, "vocab_size": 152064}
# The config fields the tiny arguments replace.
SIZE_FIELDS = {
    "llada": {"d_model": "d_model", "n_layers": "layers", "n_heads": "n_heads", "n_kv_heads": "n_kv_heads",
              "mlp_hidden_size": "mlp"},
    "dream": {"hidden_size": "d_model", "num_hidden_layers": "layers", "num_attention_heads": "n_heads",
              "num_key_value_heads": "n_kv_heads", "intermediate_size": "mlp"},
}

# --- generation_config.json, special_tokens_map.json, added_tokens.json, verbatim ---------------------

LLADA_GENERATION_CONFIG = {"_from_model_config": True, "bos_token_id": 126080, "eos_token_id": 126081,
                           "transformers_version": "4.38.2"}
DREAM_GENERATION_CONFIG = {"_from_model_config": True, "alg": "origin", "alg_temp": None, "bos_token_id": 151643,
                           "eos_token_id": 151643, "eps": 0.001, "mask_token_id": None, "output_history": False,
                           "pad_token_id": 151643, "steps": 512, "temperature": 0.0, "top_k": None, "top_p": None,
                           "transformers_version": "4.46.2"}


def _token(content: str) -> dict[str, Any]:
  return {"content": content, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False}


LLADA_SPECIAL_TOKENS_MAP = {
    "additional_special_tokens": ["<role>", "</role>", "<|arithmetic_start|>", "<|arithmetic_end|>",
                                  "<|number_start|>", "<|number_end|>"],
    "bos_token": _token("<|startoftext|>"), "cls_token": _token("[CLS]"), "eos_token": _token("<|endoftext|>"),
    "pad_token": _token("<|endoftext|>")}
DREAM_SPECIAL_TOKENS_MAP = {
    "additional_special_tokens": ["<|beginoftext|>", "<|mask|>"], "bos_token": _token("<|beginoftext|>"),
    "eos_token": _token("<|endoftext|>"), "mask_token": _token("<|mask|>"), "pad_token": _token("<|endoftext|>")}
# Dream's added tokens: id, content, special (the added_tokens_decoder of tokenizer_config.json).
DREAM_ADDED = (
    (151643, "<|endoftext|>", True), (151644, "<|im_start|>", True), (151645, "<|im_end|>", True),
    (151646, "<|object_ref_start|>", True), (151647, "<|object_ref_end|>", True), (151648, "<|box_start|>", True),
    (151649, "<|box_end|>", True), (151650, "<|quad_start|>", True), (151651, "<|quad_end|>", True),
    (151652, "<|vision_start|>", True), (151653, "<|vision_end|>", True), (151654, "<|vision_pad|>", True),
    (151655, "<|image_pad|>", True), (151656, "<|video_pad|>", True), (151657, "<tool_call>", False),
    (151658, "</tool_call>", False), (151659, "<|fim_prefix|>", False), (151660, "<|fim_middle|>", False),
    (151661, "<|fim_suffix|>", False), (151662, "<|fim_pad|>", False), (151663, "<|repo_name|>", False),
    (151664, "<|file_sep|>", False), (151665, "<|beginoftext|>", True), (151666, "<|mask|>", True))
# LLaDA's named added tokens; every other id in 126084..126339 is <|reserved_token_{id - 126084}|>.
LLADA_NAMED = {126080: "<|startoftext|>", 126081: "<|endoftext|>", 126082: "[CLS]", 126083: "[gMASK]",
               126336: "<|mdm_mask|>", 126340: "<role>", 126341: "</role>", 126342: "<|arithmetic_start|>",
               126343: "<|arithmetic_end|>", 126344: "<|number_start|>", 126345: "<|number_end|>",
               126346: "<|start_header_id|>", 126347: "<|end_header_id|>", 126348: "<|eot_id|>"}
LLADA_ADDED = tuple((i, LLADA_NAMED.get(i, f"<|reserved_token_{i - 126084}|>"), True) for i in range(126080, 126349))
BASE_IDS = {"llada": 126080, "dream": 151643}  # ids below the first added token (the BPE vocabulary)

# Dream-v0-Instruct-7B's tokenizer_config.json "chat_template", verbatim (Qwen2.5's template with the
# default system prompt "You are a helpful assistant.").
DREAM_CHAT_TEMPLATE = (
    '{%- if tools %}\n'
    "    {{- '<|im_start|>system\\n' }}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- messages[0]['content'] }}\n"
    '    {%- else %}\n'
    "        {{- 'You are a helpful assistant.' }}\n"
    '    {%- endif %}\n'
    '    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are '
    'provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}\n'
    '    {%- for tool in tools %}\n'
    '        {{- "\\n" }}\n'
    '        {{- tool | tojson }}\n'
    '    {%- endfor %}\n'
    '    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments '
    'within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": '
    '<args-json-object>}\\n</tool_call><|im_end|>\\n" }}\n'
    '{%- else %}\n'
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
    '    {%- else %}\n'
    "        {{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}\n"
    '    {%- endif %}\n'
    '{%- endif %}\n'
    '{%- for message in messages %}\n'
    '    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == '
    '"assistant" and not message.tool_calls) %}\n'
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    '    {%- elif message.role == "assistant" %}\n'
    "        {{- '<|im_start|>' + message.role }}\n"
    '        {%- if message.content %}\n'
    "            {{- '\\n' + message.content }}\n"
    '        {%- endif %}\n'
    '        {%- for tool_call in message.tool_calls %}\n'
    '            {%- if tool_call.function is defined %}\n'
    '                {%- set tool_call = tool_call.function %}\n'
    '            {%- endif %}\n'
    '            {{- \'\\n<tool_call>\\n{"name": "\' }}\n'
    '            {{- tool_call.name }}\n'
    '            {{- \'", "arguments": \' }}\n'
    '            {{- tool_call.arguments | tojson }}\n'
    "            {{- '}\\n</tool_call>' }}\n"
    '        {%- endfor %}\n'
    "        {{- '<|im_end|>\\n' }}\n"
    '    {%- elif message.role == "tool" %}\n'
    '        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}\n'
    "            {{- '<|im_start|>user' }}\n"
    '        {%- endif %}\n'
    "        {{- '\\n<tool_response>\\n' }}\n"
    '        {{- message.content }}\n'
    "        {{- '\\n</tool_response>' }}\n"
    '        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}\n'
    "            {{- '<|im_end|>\\n' }}\n"
    '        {%- endif %}\n'
    '    {%- endif %}\n'
    '{%- endfor %}\n'
    '{%- if add_generation_prompt %}\n'
    "    {{- '<|im_start|>assistant\\n' }}\n"
    '{%- endif %}\n')
# sha256 of each released template string (UTF-8), to check the copies above.
CHAT_TEMPLATE_SHA256 = {"llada": "b48c47f6443892716176eb200bf4ef108f64e06ca26ed0fa8ebc0a4b3992fcb2",
                        "dream": "44d5f08f3f72b837eaad09f13a54c1f9f4eb58d75240334548b7fd52a5437fa5"}


def _added_decoder(added: tuple[tuple[int, str, bool], ...]) -> dict[str, dict[str, Any]]:
  return {str(i): dict(_token(content), special=special) for i, content, special in added}


def tokenizer_config(family: str) -> dict[str, Any]:
  """The released ``tokenizer_config.json`` of ``family``, as a dict (verbatim)."""
  if family == "llada":
    return {"add_bos_token": False, "add_eos_token": False, "added_tokens_decoder": _added_decoder(LLADA_ADDED),
            "additional_special_tokens": list(LLADA_SPECIAL_TOKENS_MAP["additional_special_tokens"]),
            "bos_token": "<|startoftext|>", "chat_template": LLADA_CHAT_TEMPLATE, "clean_up_tokenization_spaces": False,
            "cls_token": "[CLS]", "eos_token": "<|endoftext|>", "fast_tokenizer": True, "gmask_token": "[gMASK]",
            "merges_file": None, "model_input_names": ["input_ids", "attention_mask"],
            "model_max_length": 1000000000000000019884624838656, "pad_token": "<|endoftext|>",
            "tokenizer_class": "PreTrainedTokenizerFast", "trust_remote_code": True, "vocab_file": None}
  return {"add_bos_token": False, "add_prefix_space": False, "added_tokens_decoder": _added_decoder(DREAM_ADDED),
          "additional_special_tokens": ["<|beginoftext|>", "<|mask|>"],
          "auto_map": {"AutoTokenizer": ["tokenization_dream.DreamTokenizer", None]}, "bos_token": "<|beginoftext|>",
          "chat_template": DREAM_CHAT_TEMPLATE, "clean_up_tokenization_spaces": False, "eos_token": "<|endoftext|>",
          "errors": "replace", "mask_token": "<|mask|>", "model_max_length": 131072, "pad_token": "<|endoftext|>",
          "split_special_tokens": False, "tokenizer_class": "DreamTokenizer", "unk_token": None}


# Remote-code files of each release: present in the folder, never to be imported.
REMOTE_CODE = {"llada": ("configuration_llada.py", "modeling_llada.py"),
               "dream": ("configuration_dream.py", "modeling_dream.py", "generation_utils.py", "tokenization_dream.py")}
PLACEHOLDER = ('raise ImportError("{name}: a placeholder of the release\'s remote code in a test checkpoint; '
               'daca_jax must never import a checkpoint\'s .py files")\n')

# --- the stand-in BPE ------------------------------------------------------------------------------------

# Text the stand-in BPE is trained on: the words of the tasks' prompts, so that prompts stay short.
_CORPUS = (
    "You are a math expert. You will be given a question to solve. Solve it step by step. Wrap the final "
    "answer in a \\boxed{}. Respond in the following format: <reasoning> Your reasoning here </reasoning> "
    "<answer> \\boxed{...} </answer> Using the numbers, create an equation that equals the target. "
    "Numbers: [30, 100, 93] Target: 23. Please solve the following 4x4 Sudoku puzzle. Solve the following "
    "Sudoku puzzle: 1234 0000 4321. Complete the following Python function. def return the the answer is "
    "Reply with only a JSON value that is valid under this JSON Schema: {\"type\": \"object\", "
    "\"properties\": {}, \"required\": []} user assistant system 0 1 2 3 4 5 6 7 8 9 + - * / = ( ) ,")


@functools.lru_cache(maxsize=None)
def stand_in_bpe(vocab_size: int = 512) -> tuple[tuple[tuple[str, int], ...], tuple[tuple[str, str], ...]]:
  """A byte-level BPE trained on :data:`_CORPUS`: ``(vocab items, merges)`` (deterministic)."""
  from tokenizers import Tokenizer, models, pre_tokenizers, trainers

  tok = Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                show_progress=False)
  tok.train_from_iterator([_CORPUS] * 4, trainer)
  model = json.loads(tok.to_str())["model"]
  merges = tuple(tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"])
  return tuple(sorted(model["vocab"].items(), key=lambda kv: kv[1])), merges


def _base_vocab(family: str) -> dict[str, int]:
  """The stand-in BPE vocabulary padded with never-produced filler tokens up to the release's base ids."""
  items, _ = stand_in_bpe()
  vocab = dict(items)
  for i in range(len(vocab), BASE_IDS[family]):
    vocab[f"<|filler_{i}|>"] = i
  return vocab


def _llada_tokenizer_json() -> str:
  """A ``tokenizer.json``: the stand-in byte-level BPE and LLaDA's added tokens at their released ids."""
  from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

  vocab = _base_vocab("llada")
  vocab.update({content: i for i, content, _ in LLADA_ADDED})  # in the model too: ids are kept as given
  tok = Tokenizer(models.BPE(vocab=vocab, merges=list(stand_in_bpe()[1])))
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  tok.add_special_tokens([AddedToken(c, special=True, normalized=False) for _, c, _ in LLADA_ADDED])
  return tok.to_str()


def _write_json(path: pathlib.Path, obj: Any) -> None:
  path.write_text(json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def write_tokenizer_files(path: str | pathlib.Path, family: str) -> pathlib.Path:
  """The tokenizer files of ``family``'s release into ``path``: LLaDA ``tokenizer.json``; Dream
  ``vocab.json``, ``merges.txt``, ``added_tokens.json``; both ``tokenizer_config.json`` and
  ``special_tokens_map.json``."""
  path = pathlib.Path(path)
  path.mkdir(parents=True, exist_ok=True)
  _write_json(path / "tokenizer_config.json", tokenizer_config(family))
  if family == "llada":
    (path / "tokenizer.json").write_text(_llada_tokenizer_json(), encoding="utf-8")
    _write_json(path / "special_tokens_map.json", LLADA_SPECIAL_TOKENS_MAP)
  else:
    _write_json(path / "vocab.json", _base_vocab("dream"))
    merges = "\n".join(f"{a} {b}" for a, b in stand_in_bpe()[1])
    (path / "merges.txt").write_text(f"#version: 0.2\n{merges}\n", encoding="utf-8")
    _write_json(path / "added_tokens.json", {c: i for i, c, _ in DREAM_ADDED})
    _write_json(path / "special_tokens_map.json", DREAM_SPECIAL_TOKENS_MAP)
  return path


# --- weights ---------------------------------------------------------------------------------------------


def random_llama_weights(seed: int, *, layers: int, d_model: int, n_heads: int, n_kv_heads: int, mlp: int,
                         vocab: int, scale: float = 0.2) -> dict[str, np.ndarray]:
  """Random weights in Llama / Qwen2 (torch) names and layout: ``{name: float32 [out, in]}``, q/k/v biases
  included (Dream's names are these)."""
  rng = np.random.default_rng(seed)
  n = lambda *s: rng.normal(0, scale, s).astype(np.float32)
  hd = d_model // n_heads
  w = {"model.embed_tokens.weight": n(vocab, d_model), "model.norm.weight": 1 + n(d_model),
       "lm_head.weight": n(vocab, d_model)}
  for i in range(layers):
    p = f"model.layers.{i}."
    w.update({p + "self_attn.q_proj.weight": n(n_heads * hd, d_model),
              p + "self_attn.k_proj.weight": n(n_kv_heads * hd, d_model),
              p + "self_attn.v_proj.weight": n(n_kv_heads * hd, d_model),
              p + "self_attn.o_proj.weight": n(d_model, n_heads * hd),
              p + "self_attn.q_proj.bias": n(n_heads * hd), p + "self_attn.k_proj.bias": n(n_kv_heads * hd),
              p + "self_attn.v_proj.bias": n(n_kv_heads * hd),
              p + "mlp.gate_proj.weight": n(mlp, d_model), p + "mlp.up_proj.weight": n(mlp, d_model),
              p + "mlp.down_proj.weight": n(d_model, mlp), p + "input_layernorm.weight": 1 + n(d_model),
              p + "post_attention_layernorm.weight": 1 + n(d_model)})
  return w


_LLADA_RENAME = {"self_attn.q_proj.weight": "q_proj.weight", "self_attn.k_proj.weight": "k_proj.weight",
                 "self_attn.v_proj.weight": "v_proj.weight", "self_attn.o_proj.weight": "attn_out.weight",
                 "mlp.gate_proj.weight": "ff_proj.weight", "mlp.up_proj.weight": "up_proj.weight",
                 "mlp.down_proj.weight": "ff_out.weight", "input_layernorm.weight": "attn_norm.weight",
                 "post_attention_layernorm.weight": "ff_norm.weight"}


def to_llada_names(w: dict[str, np.ndarray], layers: int, qkv_bias: bool = False) -> dict[str, np.ndarray]:
  """The same weights under LLaDA's (OLMo) names; no biases unless ``qkv_bias`` (``include_qkv_bias``)."""
  out = {"model.transformer.wte.weight": w["model.embed_tokens.weight"],
         "model.transformer.ln_f.weight": w["model.norm.weight"],
         "model.transformer.ff_out.weight": w["lm_head.weight"]}
  ren = dict(_LLADA_RENAME)
  if qkv_bias:
    ren.update({f"self_attn.{x}_proj.bias": f"{x}_proj.bias" for x in "qkv"})
  for i in range(layers):
    for a, b in ren.items():
      out[f"model.transformer.blocks.{i}.{b}"] = w[f"model.layers.{i}.{a}"]
  return out


def write_safetensors_checkpoint(path: str | pathlib.Path, config: dict[str, Any], tensors: dict[str, np.ndarray],
                                 shards: int = 2, dtype: str | None = "float32") -> pathlib.Path:
  """``config.json`` + ``model-0000k-of-0000n.safetensors`` shards + ``model.safetensors.index.json``, as
  transformers' ``save_pretrained`` writes them (tensors in sorted order, dealt round-robin), in ``dtype``
  ("float32" or "bfloat16"; None: each tensor's own)."""
  import ml_dtypes
  from safetensors.numpy import save_file

  path = pathlib.Path(path)
  path.mkdir(parents=True, exist_ok=True)
  (path / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
  np_dtype = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, None: None}[dtype]
  names = sorted(tensors)
  weight_map, total = {}, 0
  for s in range(shards):
    fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
    part = {k: np.ascontiguousarray(tensors[k].astype(np_dtype or tensors[k].dtype)) for k in names[s::shards]}
    save_file(part, str(path / fname), metadata={"format": "pt"})
    weight_map.update({k: fname for k in part})
    total += sum(a.nbytes for a in part.values())
  (path / "model.safetensors.index.json").write_text(
      json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2, sort_keys=True) + "\n")
  return path


def tiny_config(family: str, *, layers: int = 2, d_model: int = 32, n_heads: int = 4, n_kv_heads: int = 2,
                mlp: int = 64) -> dict[str, Any]:
  """The released ``config.json`` of ``family`` with the tiny layer sizes."""
  sizes = {"layers": layers, "d_model": d_model, "n_heads": n_heads, "n_kv_heads": n_kv_heads, "mlp": mlp}
  released = LLADA_CONFIG if family == "llada" else DREAM_CONFIG
  return dict(released, **{field: sizes[arg] for field, arg in SIZE_FIELDS[family].items()})


def write_tiny_checkpoint(path: str | pathlib.Path, family: str, *, layers: int = 2, d_model: int = 32,
                          n_heads: int = 4, n_kv_heads: int = 2, mlp: int = 64, seed: int = 0,
                          dtype: str = "float32", shards: int = 2, favour: tuple[int, ...] = (),
                          favour_logit: float = 25.0, favour_context: tuple[int, ...] = (),
                          block_out_scale: float = 1.0) -> pathlib.Path:
  """A tiny random checkpoint of ``family`` ("llada" or "dream") in the release's layout.

  Args:
    path: the folder to write (created).
    family: "llada" (LLaDA-8B-Instruct) or "dream" (Dream-v0-Instruct-7B).
    layers, d_model, n_heads, n_kv_heads, mlp: the tiny sizes (config.json's fields for them).
    seed: seed of the random weights (normal, std 0.2; norms 1 + that).
    dtype: "float32" or "bfloat16" (the releases store bfloat16).
    shards: number of safetensors shards (listed in ``model.safetensors.index.json``).
    favour: token ids the random model should write: their output-head rows are set to one shared vector
      along the (final-norm scaled) embeddings of the mask token and of ``favour_context``'s ids, of norm
      ``favour_logit`` / sqrt(d_model), so that the logits read at those tokens' positions (a masked
      position; e.g. a prompt's last token, where Dream reads its first completion token) are large for
      them and tie with each other: sampling writes each of them about equally often, and RL sees
      rewards that vary.
    favour_logit: see ``favour`` (about the logit at a masked position when the context is the mask only).
    favour_context: see ``favour``.
    block_out_scale: multiplies every block's output projections (``o_proj``, ``down_proj``). At 1 the
      blocks' outputs are several times the embeddings' norm (random std-0.2 weights), so a position's
      final state says little about its own (or, for Dream, its predecessor's) token, and ``favour``'s
      logits there can be anything; well below 1 the residual stream stays near that token's embedding,
      so ``favour_context`` decides them while attention and the MLP still contribute (and LoRA on them
      still gets gradients).
  Returns:
    ``pathlib.Path(path)``.
  Raises:
    ValueError: an unknown family or dtype.

  The vocabulary is the release's (LLaDA 126464, Dream 152064 embedding rows), so the embedding and
  head are ~16-20 MB in float32 at d_model 32; writing a checkpoint takes well under a second.
  """
  if family not in FAMILIES:
    raise ValueError(f"family={family!r}: one of {FAMILIES}")
  if dtype not in ("float32", "bfloat16"):
    raise ValueError(f"dtype={dtype!r}: 'float32' or 'bfloat16'")
  path = pathlib.Path(path)
  config = tiny_config(family, layers=layers, d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv_heads, mlp=mlp)
  rows = config["embedding_size"] if family == "llada" else config["vocab_size"]
  w = random_llama_weights(seed, layers=layers, d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv_heads,
                           mlp=mlp, vocab=rows)
  for name in w:
    if name.endswith(("self_attn.o_proj.weight", "mlp.down_proj.weight")):
      w[name] *= np.float32(block_out_scale)
  if favour:
    along = w["model.embed_tokens.weight"][[config["mask_token_id"], *favour_context]] * w["model.norm.weight"]
    direction = (along / np.linalg.norm(along, axis=1, keepdims=True)).sum(0)
    direction *= favour_logit / np.sqrt(d_model) / np.linalg.norm(direction)
    w["lm_head.weight"][list(favour)] = direction
  tensors = to_llada_names(w, layers) if family == "llada" else w
  write_safetensors_checkpoint(path, config, tensors, shards=shards, dtype=dtype)
  write_tokenizer_files(path, family)
  _write_json(path / "generation_config.json",
              LLADA_GENERATION_CONFIG if family == "llada" else DREAM_GENERATION_CONFIG)
  for name in REMOTE_CODE[family]:
    (path / name).write_text(PLACEHOLDER.format(name=name))
  return path
