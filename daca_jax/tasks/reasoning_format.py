"""Prompt styles and the ``<reasoning>``/``<answer>`` output format shared by the reasoning tasks.

Two prompt styles (constructor argument ``prompt_style`` of countdown, gsm8k and math500):

* ``"plain"``: a compact prompt for tiny byte-level models; the completion is the bare answer.
* ``"chat"``: LLaDA-8B-Instruct's chat template
  (:func:`daca_jax.tasks.hf_tokenizer.llada_chat_prompt`) around the question and an instruction to
  reason inside ``<reasoning>`` tags and give the final answer inside ``<answer>`` tags, the output
  format d1 trains with.

Format rewards follow d1's strict and soft layout checks (``diffu-grpo/reward_func.py``, 0.5 each),
with two fixes: every pattern uses ``re.DOTALL`` so that multi-line reasoning matches, and the
completion is first cut at the first end-of-text marker (the byte tokenizer's
decoder already stops at EOS; an HF decode may keep ``<|eot_id|>``/``<|endoftext|>`` as text).
"""
from __future__ import annotations

import re

from daca_jax.errors import ConfigError
from daca_jax.tasks.hf_tokenizer import llada_chat_prompt

PROMPT_STYLES = ("plain", "chat")

# End-of-text markers that an HF decode may leave in a completion; everything from the first one on
# is ignored by the graders.
_EOT_MARKERS = ("<|eot_id|>", "<|endoftext|>", "<|end_of_text|>")

FORMAT_INSTRUCTION = (
    "Think step by step inside <reasoning> </reasoning> tags, then give only the final answer "
    "inside <answer> </answer> tags, in this layout:\n"
    "<reasoning>\n...\n</reasoning>\n<answer>\n...\n</answer>")

_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_STRICT_RE = re.compile(r"<reasoning>\n.*?\n</reasoning>\n<answer>\n.*?\n</answer>\s*", re.DOTALL)
_SOFT_RE = re.compile(r"<reasoning>.*?</reasoning>\s*<answer>.*?</answer>", re.DOTALL)


def check_prompt_style(prompt_style: str) -> str:
  """Returns ``prompt_style``; raises ConfigError naming ``task.options.prompt_style`` otherwise."""
  if prompt_style not in PROMPT_STYLES:
    raise ConfigError("task.options.prompt_style", prompt_style, f"one of {list(PROMPT_STYLES)}")
  return prompt_style


def chat_prompt(question: str) -> str:
  """The ``"chat"`` prompt: the question plus :data:`FORMAT_INSTRUCTION` in LLaDA's chat template.

  The template's leading ``<|startoftext|>`` is left out: :meth:`Task.encode_prompts` prepends the
  tokenizer's BOS id itself.
  """
  return llada_chat_prompt(f"{question}\n\n{FORMAT_INSTRUCTION}", bos="")


def reasoning_target(reasoning: str, answer: str) -> str:
  """An SFT target in the exact layout that :func:`strict_format_reward` accepts."""
  return f"<reasoning>\n{reasoning}\n</reasoning>\n<answer>\n{answer}\n</answer>"


def clean_completion(text: str) -> str:
  """Cuts ``text`` at the first end-of-text marker (see module docstring)."""
  for marker in _EOT_MARKERS:
    cut = text.find(marker)
    if cut >= 0:
      text = text[:cut]
  return text


def extract_answer_tag(text: str) -> str | None:
  """Content (stripped) of the LAST complete ``<answer>...</answer>`` span, or None if there is none.

  As d1's ``extract_solution``; text after the closing tag is ignored.
  """
  matches = _ANSWER_RE.findall(clean_completion(text))
  return matches[-1].strip() if matches else None


def strict_format_reward(text: str) -> float:
  """0.5 iff the completion is exactly ``<reasoning>\\n...\\n</reasoning>\\n<answer>\\n...\\n</answer>``
  (reasoning and answer may span lines; trailing whitespace allowed, other trailing text is not)."""
  return 0.5 if _STRICT_RE.fullmatch(clean_completion(text).lstrip()) else 0.0


def soft_format_reward(text: str) -> float:
  """0.5 iff the completion starts (after whitespace) with ``<reasoning>...</reasoning>`` followed by
  ``<answer>...</answer>``; anything after ``</answer>`` is allowed."""
  return 0.5 if _SOFT_RE.match(clean_completion(text).lstrip()) else 0.0

