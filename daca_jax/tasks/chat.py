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
does not set (:class:`_BoundedEnvironment`): at most :data:`MAX_RENDER_SECONDS` of wall time, at most
:data:`MAX_RENDER_CHARS` characters of output and of any value it builds, every ``for`` loop counted
item by item. A value's size counts what it holds through nested lists, dicts and namespaces (a list
of one long string repeated is as large as its ``join``), so that no value, and nothing a template
keeps across loop items (namespaces, ``{% set %}`` blocks, macro output, ``~``), can outgrow the
bound; and an operation whose inputs already promise a result above :data:`MAX_CALL_ESTIMATE` (``*``,
``+``, ``%`` and ``format`` widths, ``s.replace('', s)``, ``s|indent(10**6)``, an integer product above
:data:`MAX_INT_BITS` bits) is refused before it runs, so that memory stays within a few times the
bound. Jinja's ``lipsum`` global is removed (it loops in Python out of the time bound's reach). The
checks run inside the rendering process, at every loop item, call, attribute or item access, operator,
filter and output chunk: a template has no other way to spend time (Jinja has no ``while``; ``range`` is
capped by the sandbox; calls nest at most :data:`MAX_RENDER_DEPTH` deep), so each bound is hit within one
loop item of being exceeded. A subprocess with a timeout would bound the same things, but costs a
process per prompt (tens of milliseconds each, thousands per evaluation) and cannot share the
compiled template. Every failure (syntax, an undefined name used, a sandbox refusal, recursion,
``raise_exception``, a bound) is one :class:`~daca_jax.errors.DataError` naming the template's file.

:data:`LLADA_CHAT_TEMPLATE` is LLaDA-8B-Instruct's released template; the byte tokenizer of the tiny
models renders it with an empty ``bos_token`` (its BOS is an id the tokenizer puts first), which gives
exactly the chat prompts the tasks wrote before templates came from the tokenizer (a test checks it).
"""
from __future__ import annotations

import datetime
import functools
import itertools
import json
import re
import threading
import time
from typing import Any, Mapping, Sequence

from daca_jax.errors import ConfigError, DataError

# Bounds of one render (a released template renders a prompt in about a millisecond, a few kB).
MAX_RENDER_SECONDS = 2.0
MAX_RENDER_CHARS = 1_000_000
# The largest integer a template may compute with ``**`` (bits): far beyond any token id or length.
MAX_INT_BITS = 4096
# Calls (macros, recursive loops, functions) a template may nest; released templates nest a few. Far
# below Python's recursion limit, so a recursive template is stopped within microseconds rather than
# after a thousand Python frames (whose unwinding alone can pass the time bound on a loaded host).
MAX_RENDER_DEPTH = 64

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
      return _environment().from_string(self.source)
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
    _budget.deadline = time.monotonic() + MAX_RENDER_SECONDS
    _budget.depth = 0
    try:
      for chunk in compiled.generate(messages=plain, tools=None, documents=None,
                                     add_generation_prompt=bool(add_generation_prompt), **self.variables):
        size += len(chunk)
        if size > MAX_RENDER_CHARS:
          raise _Exceeded(f"it renders more than {MAX_RENDER_CHARS} characters")
        _check_time()
        out.append(chunk)
    except _Exceeded as e:
      raise self._refused(str(e)) from None
    except jinja2.exceptions.SecurityError as e:
      raise self._refused(f"the sandbox refused an operation ({_short(e)})") from None
    except jinja2.TemplateError as e:  # raise_exception, UndefinedError, a syntax error of an include
      raise self._refused(f"{type(e).__name__}: {_short(e)}") from None
    except RecursionError:  # nesting inside one call (the depth bound counts calls)
      raise self._refused("it recurses deeper than Python's recursion limit") from None
    except (TypeError, ValueError, ArithmeticError, LookupError, AttributeError, OverflowError) as e:
      raise self._refused(f"{type(e).__name__} while rendering: {_short(e)}") from None
    except MemoryError:  # the bounds above should make this unreachable; one line all the same
      raise self._refused("it needs more memory than the host has") from None
    finally:
      _budget.deadline = None
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
      _check_size(attrs)
      jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
      Namespace.check(name)
      # What a template keeps across loop items lives here: bounded like any value it builds, so that
      # a chain of namespaces cannot hold a new long string per item.
      _check_size(value)
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

  env = _bounded_environment_class()(trim_blocks=True, lstrip_blocks=True, finalize=_finalize,
                                     extensions=[GenerationBlock, jinja2.ext.loopcontrols])
  # Jinja's lorem-ipsum generator loops in Python for as many paragraphs as asked, out of reach of the
  # time bound (lipsum(10**6) runs for minutes); no chat template has a use for it.
  del env.globals["lipsum"]
  env.filters["tojson"] = tojson
  env.filters = {name: _bounded_filter(f) for name, f in env.filters.items()}
  env.globals.update(raise_exception=raise_exception, strftime_now=strftime_now, dict=Dict(),
                     namespace=Namespace)
  return env


# --- bounds of a render (module docstring) -----------------------------------------------------------

# .deadline: time.monotonic() by which the current render must end; .depth: calls now nested.
_budget = threading.local()


def _short(e: BaseException) -> str:
  return " ".join(str(e).split())[:200] or type(e).__name__


class _Exceeded(Exception):
  """A render went over one of its bounds (caught by :meth:`ChatTemplate.render`)."""


def _check_time() -> None:
  deadline = getattr(_budget, "deadline", None)
  if deadline is not None and time.monotonic() > deadline:
    raise _Exceeded(f"it runs longer than {MAX_RENDER_SECONDS} s")


# What a value costs, in characters and items (:func:`_size`), above which a call is refused before it
# runs (its inputs already promise a result this large); its result is then checked exactly.
MAX_CALL_ESTIMATE = 10 * MAX_RENDER_CHARS


def _size(value: Any, limit: int = MAX_CALL_ESTIMATE) -> int:
  """Characters and items ``value`` holds, counted through nested containers and namespaces (a shared
  element counts every time it appears: that is what printing or joining the value costs); stops
  counting past ``limit`` (returns more than ``limit``) so that a huge value costs ``limit`` steps.

  ``len`` alone does not bound memory: ``[s] * 1000`` is 1000 items whose ``join``, ``string`` or
  ``tojson`` is 1000 times ``s``."""
  import jinja2.utils

  if isinstance(value, (str, bytes, range)):  # the common case, without the walk
    return len(value)
  total, stack = 0, [value]
  while stack and total <= limit:
    node = stack.pop()
    if isinstance(node, (str, bytes, range)):
      total += len(node)
      continue
    if isinstance(node, jinja2.utils.Namespace):
      stack.append(object.__getattribute__(node, "_Namespace__attrs"))
      continue
    if isinstance(node, dict):
      items: Any = itertools.chain(node.keys(), node.values())
    elif isinstance(node, (list, tuple, set, frozenset)):
      items = node
    else:
      total += 1
      continue
    total += len(node)
    for item in items:  # strings counted here, containers walked later: one pass over a flat list
      if isinstance(item, str):
        total += len(item)
        if total > limit:
          break
      elif isinstance(item, jinja2.utils.Namespace) or (isinstance(item, _CONTAINERS) and item):
        stack.append(item)
  return total


_CONTAINERS = (list, tuple, set, frozenset, dict)


def _weight(value: Any, limit: int = MAX_CALL_ESTIMATE) -> int:
  """How much an argument can multiply a result: an integer by its magnitude (a width, a count),
  anything else by its :func:`_size` (either counted up to just past ``limit``)."""
  if isinstance(value, int) and not isinstance(value, bool):
    return min(abs(value), limit + 1)
  return _size(value, limit)


def _format_widths(fmt: Any) -> int:
  """An upper bound of the padding a ``%`` / ``str.format`` format string asks for: the sum of every
  number written in it (``'%999999999d'``, ``'{:>999999999}'``) whatever the rest of the spec says."""
  if not isinstance(fmt, str):
    return 0
  return sum(min(int(d), MAX_CALL_ESTIMATE + 1) for d in _DIGITS.findall(fmt[:MAX_RENDER_CHARS]))


_DIGITS = re.compile(r"\d{1,12}")


def _check_estimate(base: Any, others: Sequence[Any], fmt: Any = None) -> None:
  """Refuses an operation on ``base`` with arguments ``others`` before it runs when its result could
  exceed :data:`MAX_CALL_ESTIMATE`: at most ``size(base) x (1 + sum of the others' weights + format
  widths)`` (``s.replace('', s)``, ``s|indent(10**6)``, ``'%999999999d' % 1``, ``lines|join(s)``)."""
  factor = 1 + _format_widths(fmt)
  for a in others:
    factor += _weight(a, MAX_CALL_ESTIMATE)
  # Each size is counted only as far as the bound needs (a walk costs what it counts).
  if factor > MAX_CALL_ESTIMATE or max(_weight(base, MAX_CALL_ESTIMATE // factor), 1) * factor > MAX_CALL_ESTIMATE:
    raise _Exceeded(f"it calls a function whose result could hold more than {MAX_CALL_ESTIMATE} characters or "
                    "items")


def _check_size(value: Any) -> Any:
  """``value`` unless it holds more than :data:`MAX_RENDER_CHARS` characters and items (:func:`_size`)."""
  if not isinstance(value, (int, float, bool, type(None))) and _size(value, MAX_RENDER_CHARS) > MAX_RENDER_CHARS:
    raise _Exceeded(f"it builds a value of more than {MAX_RENDER_CHARS} items or characters")
  return value


def _check_args(args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
  """No integer argument large enough to allocate past the bound (``'x'.ljust(10**9)``, ``center``)."""
  for a in (*args, *kwargs.values()):
    if isinstance(a, int) and not isinstance(a, bool) and abs(a) > MAX_RENDER_CHARS:
      raise _Exceeded(f"it passes {a if abs(a) < 10**30 else 'a huge integer'} to a function (more than "
                      f"{MAX_RENDER_CHARS})")


def _data_args(args: Sequence[Any]) -> Sequence[Any]:
  """``args`` of a filter without the Jinja context / environment some filters are passed first."""
  import jinja2.nodes
  import jinja2.runtime

  skip = (jinja2.runtime.Context, jinja2.nodes.EvalContext, jinja2.Environment)
  i = 0
  while i < len(args) and isinstance(args[i], skip):
    i += 1
  return args[i:]


def _bounded_filter(f: Any) -> Any:
  """Filter ``f`` with the render's bounds checked on its arguments (before it runs) and its result."""

  @functools.wraps(f)  # keeps jinja's pass_context / pass_environment marks
  def bounded(*args: Any, **kwargs: Any) -> Any:
    _check_time()
    data = _data_args(args)
    _check_args(data[1:], kwargs)
    if data:
      _check_estimate(data[0], (*data[1:], *kwargs.values()), data[0] if f.__name__ == "do_format" else None)
    return _check_size(f(*args, **kwargs))

  return bounded


def _bounded_concat(parts: Sequence[Any]) -> str:
  """``a ~ b ~ ...`` and the text of a ``{% set %}`` block or a macro, refused before it is joined
  when longer than :data:`MAX_RENDER_CHARS` (a block's or macro's output never reaches the output
  check of :meth:`ChatTemplate.render`, and ``s ~ s ~ ... ~ s`` multiplies a string in one node)."""
  _check_time()
  parts = list(parts)
  if sum(_size(p, MAX_RENDER_CHARS) for p in parts) > MAX_RENDER_CHARS:
    raise _Exceeded(f"it builds a value of more than {MAX_RENDER_CHARS} items or characters")
  return "".join(map(str, parts))


def _finalize(value: Any) -> Any:
  """Every ``{{ value }}``, checked before it is turned into text (``str`` of a list holding one long
  string many times would be the product)."""
  _check_time()
  return _check_size(value)


def _bounded_iter(items: Any) -> Any:
  """``items`` one by one, the time bound checked at each (a loop with an empty body over a long
  string calls nothing else)."""
  for item in items:
    _check_time()
    yield item


def _binop_size(operator: str, left: Any, right: Any) -> None:
  """Refuses ``*`` / ``+`` / ``**`` / ``%`` whose result would exceed the bounds, before computing it."""
  seq = (str, list, tuple)
  if operator == "*":
    if (isinstance(left, int) and isinstance(right, int)  # squaring in a loop doubles the bits each item
        and abs(left).bit_length() + abs(right).bit_length() > MAX_INT_BITS):
      raise _Exceeded(f"it computes an integer of more than {MAX_INT_BITS} bits")
    for a, n in ((left, right), (right, left)):
      if (isinstance(a, seq) and isinstance(n, int) and n > 0
          and _size(a, MAX_RENDER_CHARS // n) * n > MAX_RENDER_CHARS):
        raise _Exceeded(f"it repeats a value to more than {MAX_RENDER_CHARS} items or characters")
  elif operator == "+" and isinstance(left, seq) and isinstance(right, seq):
    if _size(left, MAX_RENDER_CHARS) + _size(right, MAX_RENDER_CHARS) > MAX_RENDER_CHARS:
      raise _Exceeded(f"it concatenates to more than {MAX_RENDER_CHARS} items or characters")
  elif operator == "**" and isinstance(left, int) and isinstance(right, int) and abs(left) > 1:
    if right > 0 and abs(left).bit_length() * right > MAX_INT_BITS:
      raise _Exceeded(f"it computes an integer of more than {MAX_INT_BITS} bits")
  elif operator == "%" and isinstance(left, str):  # printf-style formatting: widths in the string or args
    _check_args(right if isinstance(right, tuple) else (right,), {})
    _check_estimate(left, right if isinstance(right, tuple) else (right,), left)


@functools.lru_cache(maxsize=1)
def _concat_bounder_class() -> type:
  """A tree transformer: ``a ~ b ~ c`` (one ``Concat`` node, joined outside every other check) becomes
  ``environment.bounded_concat([a, b, c])``."""
  from jinja2 import nodes
  from jinja2.visitor import NodeTransformer

  class ConcatBounder(NodeTransformer):

    def visit_Concat(self, node: Any) -> Any:  # noqa: N802  (NodeTransformer's naming)
      node = self.generic_visit(node)
      return nodes.Call(nodes.EnvironmentAttribute("bounded_concat"), [nodes.List(node.nodes, lineno=node.lineno)],
                        [], None, None, lineno=node.lineno)

  return ConcatBounder


def _ConcatBounder() -> Any:  # noqa: N802
  return _concat_bounder_class()()


@functools.lru_cache(maxsize=1)
def _bounded_environment_class() -> type:
  """transformers' sandbox with the bounds of a render (module docstring)."""
  from jinja2 import nodes
  from jinja2.sandbox import ImmutableSandboxedEnvironment

  class _BoundedEnvironment(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset(["*", "+", "**", "%"])
    bounded_iter = staticmethod(_bounded_iter)
    bounded_concat = staticmethod(_bounded_concat)
    concat = staticmethod(_bounded_concat)  # a {% set %} block's and a macro's text

    def _parse(self, source: str, name: Any, filename: Any) -> Any:
      # Every for loop iterates through environment.bounded_iter (an attribute of the environment,
      # which no template can rebind), so that each item checks the time bound.
      tree = super()._parse(source, name, filename)
      for loop in tree.find_all(nodes.For):
        loop.iter = nodes.Call(nodes.EnvironmentAttribute("bounded_iter"), [loop.iter], [], None, None,
                               lineno=loop.lineno)
      return _ConcatBounder().visit(tree)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
      _check_time()
      if __obj is not _bounded_iter and __obj is not _bounded_concat:
        _check_args(args, kwargs)
        # A bound method ('sep'.join(l), s.replace(a, b)); the sandbox hands out str.format as a wrapper
        # of the bound method (functools.wraps: __wrapped__).
        owner = getattr(getattr(__obj, "__wrapped__", __obj), "__self__", None)
        if isinstance(owner, (str, list, tuple, dict)):
          fmt = owner if getattr(__obj, "__name__", "") in ("format", "format_map") else None
          _check_estimate(owner, (*args, *kwargs.values()), fmt)
        elif args:
          _check_estimate(args[0], (*args[1:], *kwargs.values()))
      depth = getattr(_budget, "depth", 0)
      if depth >= MAX_RENDER_DEPTH:
        raise _Exceeded(f"it recurses deeper than {MAX_RENDER_DEPTH} nested calls")
      _budget.depth = depth + 1
      try:
        return _check_size(super().call(__context, __obj, *args, **kwargs))
      finally:
        _budget.depth = depth

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
      _check_time()
      _binop_size(operator, left, right)
      return super().call_binop(context, operator, left, right)

    def getattr(self, obj: Any, attribute: str) -> Any:
      _check_time()
      return _check_size(super().getattr(obj, attribute))

    def getitem(self, obj: Any, argument: Any) -> Any:
      _check_time()
      return _check_size(super().getitem(obj, argument))

  return _BoundedEnvironment
