"""Prompt styles and the ``<reasoning>``/``<answer>`` output format shared by the reasoning tasks.

Prompt styles (constructor argument ``prompt_style`` of countdown, gsm8k, math500 and sudoku4x4; the
code tasks have the first two, :data:`PROMPT_STYLES`):

* ``"plain"``: a compact prompt for tiny byte-level models; the completion is the bare answer.
* ``"chat"``: d1's evaluation prompt (dllm-reasoning/d1 ``eval/*.py``, ``create_prompt``): one user
  turn ``system_prompt + "\\n\\n" + question`` in the tokenizer's chat template (the checkpoint's own;
  LLaDA-8B-Instruct's for the byte tokenizer, :mod:`daca_jax.tasks.chat`), followed by :data:`GENERATION_PREFIX`
  (``"<reasoning>"``, d1's ``add_reasoning=True``), so the completion continues the reasoning and
  then gives the answer inside ``<answer>`` tags. Each task holds d1's system prompt for it.
* ``"d1_train"``: d1's RL training prompt (:mod:`daca_jax.tasks.d1_train_prompts`): another message,
  in the same chat template, with nothing pre-filled: the completion opens ``<reasoning>`` itself
  (:func:`completion_prefix` is ""). d1's training rewards (``task.reward=d1``) are written for it;
  the paper presets train on it and evaluate on ``"chat"`` (``task.train_prompt_style``).

Format rewards follow d1's strict and soft layout checks (``diffu-grpo/reward_func.py``, 0.5 each),
applied to ``GENERATION_PREFIX + completion`` in the chat style (the prompt opened the reasoning
tag). Where they differ from d1's patterns, and why:

* ``.`` also matches newlines (``re.DOTALL``), so multi-line reasoning matches (d1's training code
  adds the same flag; its regex alone would reject every real completion);
* the completion is first cut at the first end-of-text marker (the byte tokenizer's decoder already
  stops at EOS; an HF decode may keep ``<|eot_id|>``/``<|endoftext|>`` as text), and leading
  whitespace is ignored;
* strict: any trailing whitespace after ``</answer>`` is allowed (d1: exactly one newline), since
  the decode of trailing EOS/pad positions may leave whitespace.

All scans are linear in the text length (see :mod:`daca_jax.tasks.text_scan`): d1's lazy
``.*?`` patterns take quadratic time on hostile text, so the same decisions are made with
``str.find``; the tests compare both on random text.
"""
from __future__ import annotations

from daca_jax.errors import ConfigError
from daca_jax.tasks import text_scan
from daca_jax.tasks.chat import ChatTemplate

PROMPT_STYLES = ("plain", "chat")
D1_TRAIN = "d1_train"
# The styles of the four tasks d1 trains on (countdown, gsm8k, math500, sudoku4x4).
REASONING_PROMPT_STYLES = PROMPT_STYLES + (D1_TRAIN,)

# d1's create_prompt appends this to the chat prompt (add_reasoning=True): the model continues it.
GENERATION_PREFIX = "<reasoning>"

# End-of-text markers that an HF decode may leave in a completion; everything from the first one on
# is ignored by the graders.
_EOT_MARKERS = ("<|eot_id|>", "<|endoftext|>", "<|end_of_text|>", "<|im_end|>")  # LLaMA-3, GPT-2/LLaDA, Qwen/Dream

_STRICT_HEAD = "<reasoning>\n"
_STRICT_MIDDLE = "\n</reasoning>\n<answer>\n"
_STRICT_TAIL = "\n</answer>"


def check_prompt_style(prompt_style: str, allowed: tuple[str, ...] = PROMPT_STYLES) -> str:
  """Returns ``prompt_style``; raises ConfigError naming ``task.options.prompt_style`` otherwise."""
  if prompt_style not in allowed:
    raise ConfigError("task.options.prompt_style", prompt_style, f"one of {list(allowed)}")
  return prompt_style


def completion_prefix(prompt_style: str) -> str:
  """What the prompt of ``prompt_style`` pre-fills of the completion's layout: :data:`GENERATION_PREFIX`
  for ``"chat"`` (d1's evaluation prompt), "" otherwise (the format rewards read ``prefix + completion``)."""
  return GENERATION_PREFIX if prompt_style == "chat" else ""


def reasoning_answer_target(prompt_style: str, reasoning: str, answer: str) -> str:
  """The SFT target of a reasoning style (``"chat"`` / ``"d1_train"``): :func:`reasoning_target`, opened
  with ``<reasoning>`` where the prompt does not pre-fill it, so that ``completion_prefix + target`` is
  the exact layout :func:`strict_format_reward` accepts."""
  return GENERATION_PREFIX + reasoning_target(reasoning, answer) if prompt_style == D1_TRAIN else (
      reasoning_target(reasoning, answer))


def d1_chat_prompt(template: ChatTemplate, system_prompt: str, question: str) -> str:
  """d1's evaluation prompt: ``system_prompt + "\\n\\n" + question`` as one user turn in ``template``
  (the tokenizer's chat template, rendered with the generation prompt), then :data:`GENERATION_PREFIX`."""
  return template.user_turn(f"{system_prompt}\n\n{question}") + GENERATION_PREFIX


def reasoning_target(reasoning: str, answer: str) -> str:
  """An SFT target that continues a chat prompt (which ends with :data:`GENERATION_PREFIX`) so that
  ``GENERATION_PREFIX + target`` is the exact layout :func:`strict_format_reward` accepts."""
  return f"\n{reasoning}\n</reasoning>\n<answer>\n{answer}\n</answer>"


def clean_completion(text: str) -> str:
  """Cuts ``text`` at the first end-of-text marker (see module docstring)."""
  for marker in _EOT_MARKERS:
    cut = text.find(marker)
    if cut >= 0:
      text = text[:cut]
  return text


def answer_spans(text: str) -> list[str]:
  """Contents (stripped) of the complete ``<answer>...</answer>`` spans of the cleaned completion,
  in order: the spans of d1's ``re.findall(r"<answer>(.*?)</answer>", text, re.DOTALL)``."""
  text = clean_completion(text)
  return [text[a:b].strip() for a, b in text_scan.tag_spans(text, "<answer>", "</answer>")]


def extract_answer_tag(text: str) -> str | None:
  """Content (stripped) of the LAST complete ``<answer>...</answer>`` span, or None if there is none.

  As d1's training rewards (``extract_solution``); text after the closing tag is ignored.
  """
  spans = answer_spans(text)
  return spans[-1] if spans else None


def last_answer(text: str) -> str | None:
  """The last non-empty complete answer span of the cleaned completion (stripped), else None."""
  spans = [span for span in answer_spans(text) if span]
  return spans[-1] if spans else None


def last_box_or_answer(text: str) -> str | None:
  """The content of the last closed, non-empty ``\\boxed{}``/``\\fbox{}`` of the cleaned completion,
  else :func:`last_answer`, else None (the order of d1's MATH and Countdown evaluation parsers)."""
  text = clean_completion(text)
  box = next((b.content for b in reversed(text_scan.boxes(text))
              if b.content is not None and b.content.strip()), None)
  return box if box is not None else last_answer(text)


def strict_format_reward(text: str, prefix: str = "") -> float:
  """0.5 iff ``prefix + text`` is exactly ``<reasoning>\\n...\\n</reasoning>\\n<answer>\\n...\\n</answer>``
  (reasoning and answer may span lines; trailing whitespace allowed, other trailing text is not).

  The decision of ``re.fullmatch(r"<reasoning>\\n.*?\\n</reasoning>\\n<answer>\\n.*?\\n</answer>\\s*",
  text, re.DOTALL)`` in linear time: the text must start with the head and (after trailing
  whitespace) end with the tail, and the middle separator must occur between them.
  """
  t = (prefix + clean_completion(text)).lstrip()
  body = len(t.rstrip())
  tail = body - len(_STRICT_TAIL)
  if not t.startswith(_STRICT_HEAD) or tail < len(_STRICT_HEAD) or not t.startswith(_STRICT_TAIL, tail):
    return 0.0
  return 0.5 if t.find(_STRICT_MIDDLE, len(_STRICT_HEAD), tail) >= 0 else 0.0


def soft_format_reward(text: str, prefix: str = "") -> float:
  """0.5 iff ``prefix + text`` starts (after whitespace) with ``<reasoning>...</reasoning>`` followed
  by ``<answer>...</answer>``; anything after ``</answer>`` is allowed.

  The decision of ``re.match(r"<reasoning>.*?</reasoning>\\s*<answer>.*?</answer>", text,
  re.DOTALL)`` in linear time: the first ``</reasoning>`` followed by whitespace and ``<answer>``
  is the only candidate that matters, since a ``</answer>`` after any later one is after it too.
  """
  t = (prefix + clean_completion(text)).lstrip()
  if not t.startswith("<reasoning>"):
    return 0.0
  pos = t.find("</reasoning>", len("<reasoning>"))
  while pos >= 0:
    i = pos + len("</reasoning>")
    while i < len(t) and t[i].isspace():
      i += 1
    if t.startswith("<answer>", i):
      return 0.5 if t.find("</answer>", i + len("<answer>")) >= 0 else 0.0
    pos = t.find("</reasoning>", pos + 1)
  return 0.0
