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

:data:`LLADA_CHAT_TEMPLATE` is LLaDA-8B-Instruct's released template; the byte tokenizer of the tiny
models renders it with an empty ``bos_token`` (its BOS is an id the tokenizer puts first), which gives
exactly the chat prompts the tasks wrote before templates came from the tokenizer (a test checks it).
"""
from __future__ import annotations

import datetime
import functools
import json
from typing import Any, Mapping, Sequence

from daca_jax.errors import ConfigError

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

  @functools.cached_property
  def _compiled(self) -> Any:
    import jinja2

    try:
      return _environment().from_string(self.source)
    except jinja2.TemplateSyntaxError as e:
      raise ConfigError("chat_template", f"line {e.lineno}: {e.message}",
                        f"a valid Jinja template ({self.origin or 'the tokenizer'})") from None

  def render(self, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = True) -> str:
    """The conversation as the model sees it.

    Args:
      messages: ``[{"role": ..., "content": ...}, ...]``.
      add_generation_prompt: end with the assistant's header (d1 and every evaluation here do).
    Returns:
      The rendered text (special tokens as text; encode it without adding special tokens).
    Raises:
      ValueError: no messages, or a message that is not a mapping.
      jinja2.TemplateError: the template raised (``raise_exception``) or failed.
    """
    if not messages:
      raise ValueError("a chat template needs at least one message")
    plain = []
    for m in messages:
      if not isinstance(m, Mapping):
        raise ValueError(f"chat messages are mappings, got {type(m).__name__}")
      plain.append({str(k): v for k, v in m.items() if v is not None})
    return self._compiled.render(messages=plain, tools=None, documents=None,
                                 add_generation_prompt=bool(add_generation_prompt), **self.variables)

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


@functools.lru_cache(maxsize=1)
def _environment() -> Any:
  """transformers' sandboxed template environment (see the module docstring); built once."""
  import jinja2
  import jinja2.ext
  from jinja2.sandbox import ImmutableSandboxedEnvironment

  class GenerationBlock(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}`` renders its body (transformers marks the assistant's
    tokens with it; nothing here reads the marks)."""

    tags = {"generation"}

    def parse(self, parser: Any) -> Any:
      lineno = next(parser.stream).lineno
      body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
      return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Any) -> str:
      return caller()

  class Namespace(jinja2.utils.Namespace):
    """Jinja's namespace without underscore-prefixed attributes (no way into Python internals)."""

    def __init__(*args: Any, **kwargs: Any):
      self, rest = args[0], args[1:]
      attrs = dict(*rest, **kwargs)
      for name in attrs:
        Namespace.check(name)
      jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
      Namespace.check(name)
      jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def check(name: Any) -> None:
      if isinstance(name, str) and name.startswith("_"):
        raise jinja2.exceptions.SecurityError(f"chat templates cannot set {name!r} on a namespace")

  class Dict:
    """``dict(...)`` / ``dict.fromkeys(...)`` without the type object itself."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict:
      return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
      return dict.fromkeys(*args, **kwargs)

  def raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)

  def tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
             sort_keys: bool = False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

  def strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)

  env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                      extensions=[GenerationBlock, jinja2.ext.loopcontrols])
  env.filters["tojson"] = tojson
  env.globals.update(raise_exception=raise_exception, strftime_now=strftime_now, dict=Dict(),
                     namespace=Namespace)
  return env
