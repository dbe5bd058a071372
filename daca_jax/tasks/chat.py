"""Chat templates: a checkpoint's own ``chat_template``, rendered as transformers renders it.

:class:`ChatTemplate` renders a Jinja chat template (the ``chat_template`` string of a checkpoint's
``tokenizer_config.json``, or its ``chat_template.jinja``) the way transformers'
``tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)`` does
(transformers 5.x ``utils/chat_template_utils.py``, ``_cached_compile_jinja_template`` and
``render_jinja_template``; ``tokenization_utils_base.py``, ``apply_chat_template``):

* an ``ImmutableSandboxedEnvironment`` (a template from the internet is untrusted code) with
  ``trim_blocks=True``, ``lstrip_blocks=True`` and the ``loopcontrols`` extension;
* the ``tojson`` filter replaced by ``json.dumps`` without HTML escaping (``ensure_ascii=False``, and
  the ``indent`` / ``separators`` / ``sort_keys`` options), the globals ``raise_exception(message)``
  (a ``TemplateError``), ``strftime_now(format)``, ``dict`` and a ``namespace`` that refuses
  underscore-prefixed attributes, and a ``{% generation %}`` block that renders its body;
* the variables ``messages`` (message keys whose value is None dropped), ``tools=None``,
  ``documents=None``, ``add_generation_prompt`` and the tokenizer's named special tokens
  (``bos_token``, ``eos_token``, ``unk_token``, ``sep_token``, ``pad_token``, ``cls_token``,
  ``mask_token``; those the tokenizer does not define are not set).

A template from the internet is an untrusted program, so it also runs under bounds that transformers
does not set (:func:`daca_jax.tasks.chat_environment.environment`): at most :data:`MAX_RENDER_SECONDS`
of wall time, at most :data:`MAX_RENDER_CHARS` characters of output and of any value it builds, every
``for`` loop counted item by item. A value's size counts what it holds through nested lists, dicts and
namespaces (a list of one long string repeated is as large as its ``join``), so that no value, and
nothing a template keeps across loop items (namespaces, ``{% set %}`` blocks, macro output, ``~``), can
outgrow the bound; and an operation whose inputs already promise a result above
:data:`MAX_CALL_ESTIMATE` (``*``, ``+``, ``%`` and ``format`` widths, ``s.replace('', s)``,
``s|indent(10**6)``, an integer product above :data:`MAX_INT_BITS` bits) is refused before it runs, so
that memory stays within a few times the bound. Jinja's ``lipsum`` global is removed (it loops in Python
out of the time bound's reach). The checks run inside the rendering process, at every loop item, call,
attribute or item access, operator, filter and output chunk: a template has no other way to spend time
(Jinja has no ``while``; ``range`` is capped by the sandbox; calls nest at most :data:`MAX_RENDER_DEPTH`
deep), so each bound is hit within one loop item of being exceeded. A subprocess with a timeout would
bound the same things, but costs a process per prompt (tens of milliseconds each, thousands per
evaluation) and cannot share the compiled template. Every failure (syntax, an undefined name used, a
sandbox refusal, recursion, ``raise_exception``, a bound) is one :class:`~daca_jax.errors.DataError`
naming the template's file.

:data:`LLADA_CHAT_TEMPLATE` is LLaDA-8B-Instruct's released template; the byte tokenizer of the tiny
models renders it with an empty ``bos_token`` (its BOS is an id the tokenizer puts first), which gives
exactly the chat prompts the tasks wrote before templates came from the tokenizer (a test checks it).

This module renders; the sandboxed environment is built in :mod:`daca_jax.tasks.chat_environment` and the
bounds' checks are in :mod:`daca_jax.tasks.chat_bounds` (their constants are re-exported here).
"""
from __future__ import annotations

import functools
import time
from typing import Any, Mapping, Sequence

from daca_jax.errors import ConfigError, DataError
from daca_jax.tasks.chat_bounds import (MAX_CALL_ESTIMATE, MAX_INT_BITS, MAX_RENDER_CHARS, MAX_RENDER_DEPTH,
                                        MAX_RENDER_SECONDS, Exceeded, budget, check_time, short_error)
from daca_jax.tasks.chat_environment import environment

__all__ = ["LLADA_CHAT_TEMPLATE", "MAX_CALL_ESTIMATE", "MAX_INT_BITS", "MAX_RENDER_CHARS", "MAX_RENDER_DEPTH",
           "MAX_RENDER_SECONDS", "TEMPLATE_TOKEN_ROLES", "ChatTemplate", "require_chat_template"]

# LLaDA-8B-Instruct's tokenizer_config.json "chat_template", verbatim (GSAI-ML/LLaDA-8B-Instruct on the
# Hugging Face hub; read from the copies in monash-yann/dllm-research models/LLaDA-8B-Instruct/
# @ecd7cd2f8cbe67f49c34763ba56a451078be5635 and yinj66/support_basis LLaDA-8B-Instruct-B&S-light/
# @fa6c180848024f5205c478dc76c81edd6ce81973, byte-identical). It is Llama-3-Instruct's template: BOS
# before the first message, each message trimmed, and the assistant header always appended.
LLADA_CHAT_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
    "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}")

# The named special tokens transformers passes to a template (PreTrainedTokenizerBase's
# SPECIAL_TOKENS_ATTRIBUTES), in its order.
TEMPLATE_TOKEN_ROLES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                        "mask_token")


class ChatTemplate:
  """A Jinja chat template with the special-token variables of one tokenizer.

  Args:
    source: the template text.
    variables: the named special tokens as strings (keys from :data:`TEMPLATE_TOKEN_ROLES`); the
      template sees exactly these.
    origin: where the template came from (error messages and ``repr``).
  Raises:
    ConfigError: ``source`` is not a string, or a variable is not one of the named special tokens.
  """

  def __init__(self, source: str, variables: Mapping[str, str] | None = None, origin: str = ""):
    if not isinstance(source, str) or not source:
      raise ConfigError("chat_template", type(source).__name__, f"a non-empty template string ({origin})")
    variables = dict(variables or {})
    unknown = sorted(set(variables) - set(TEMPLATE_TOKEN_ROLES))
    if unknown:
      raise ConfigError("chat_template variables", unknown, f"names from {list(TEMPLATE_TOKEN_ROLES)}")
    self.source = source
    self.variables = {k: str(v) for k, v in variables.items() if v is not None}
    self.origin = origin

  def _refused(self, why: str) -> DataError:
    return DataError(f"{self.origin or 'an inline chat template'}: the chat template is refused: {why}")

  @functools.cached_property
  def _compiled(self) -> Any:
    import jinja2

    try:
      return environment().from_string(self.source)
    except jinja2.TemplateSyntaxError as e:
      raise self._refused(f"line {e.lineno}: {' '.join(str(e.message).split())[:200]} (not a valid Jinja "
                          "template)") from None
    except RecursionError:
      raise self._refused("nested too deeply to compile") from None

  def check(self) -> None:
    """Compiles the template and renders one user message with it, as the library will.

    Raises:
      DataError: see :meth:`render`.
    """
    self.user_turn("Hello")

  def render(self, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = True) -> str:
    """The conversation as the model sees it.

    Args:
      messages: ``[{"role": ..., "content": ...}, ...]``.
      add_generation_prompt: end with the assistant's header (d1 and every evaluation here do).
    Returns:
      The rendered text (special tokens as text; encode it without adding special tokens).
    Raises:
      ValueError: no messages, or a message that is not a mapping.
      DataError: one line naming the template's origin: a syntax error, a Jinja error while rendering
        (``raise_exception``, an undefined value used, a sandbox refusal), recursion too deep, or a
        bound exceeded (:data:`MAX_RENDER_SECONDS`, :data:`MAX_RENDER_CHARS`, :data:`MAX_INT_BITS`,
        :data:`MAX_RENDER_DEPTH`).
    """
    import jinja2

    if not messages:
      raise ValueError("a chat template needs at least one message")
    plain = []
    for m in messages:
      if not isinstance(m, Mapping):
        raise ValueError(f"chat messages are mappings, got {type(m).__name__}")
      plain.append({str(k): v for k, v in m.items() if v is not None})
    compiled = self._compiled
    out: list[str] = []
    size = 0
    budget.deadline = time.monotonic() + MAX_RENDER_SECONDS
    budget.limit_s = MAX_RENDER_SECONDS
    budget.depth = 0
    try:
      for chunk in compiled.generate(messages=plain, tools=None, documents=None,
                                     add_generation_prompt=bool(add_generation_prompt), **self.variables):
        size += len(chunk)
        if size > MAX_RENDER_CHARS:
          raise Exceeded(f"it renders more than {MAX_RENDER_CHARS} characters")
        check_time()
        out.append(chunk)
    except Exceeded as e:
      raise self._refused(str(e)) from None
    except jinja2.exceptions.SecurityError as e:
      raise self._refused(f"the sandbox refused an operation ({short_error(e)})") from None
    except jinja2.TemplateError as e:  # raise_exception, UndefinedError, a syntax error of an include
      raise self._refused(f"{type(e).__name__}: {short_error(e)}") from None
    except RecursionError:  # nesting inside one call (the depth bound counts calls)
      raise self._refused("it recurses deeper than Python's recursion limit") from None
    except (TypeError, ValueError, ArithmeticError, LookupError, AttributeError, OverflowError) as e:
      raise self._refused(f"{type(e).__name__} while rendering: {short_error(e)}") from None
    except MemoryError:  # the bounds above should make this unreachable; one line all the same
      raise self._refused("it needs more memory than the host has") from None
    finally:
      budget.deadline = None
    return "".join(out)

  def user_turn(self, content: str) -> str:
    """One user message, ready for the assistant's answer (d1's ``create_prompt``)."""
    return self.render([{"role": "user", "content": content}], add_generation_prompt=True)

  def __repr__(self) -> str:
    return f"ChatTemplate({self.origin or 'inline'}, {len(self.source)} chars, variables={sorted(self.variables)})"


def require_chat_template(tokenizer: Any, task: str, prompt_style: str = "chat") -> ChatTemplate:
  """The tokenizer's chat template, for a task built with a templated ``prompt_style`` ("chat",
  "d1_train").

  Raises:
    ConfigError: naming ``task.options.prompt_style`` when the tokenizer has no chat template.
  """
  template = getattr(tokenizer, "chat_template", None)
  if template is None:
    raise ConfigError("task.options.prompt_style", prompt_style,
                      f"'plain' for task {task!r}: tokenizer {tokenizer!r} has no chat_template")
  return template
