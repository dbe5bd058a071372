"""transformers' sandboxed Jinja environment for chat templates, with the bounds of a render.

:func:`environment` builds it once: an ``ImmutableSandboxedEnvironment`` with transformers' options,
filters and globals (see :mod:`daca_jax.tasks.chat`), whose every loop, call, operator, attribute and
item access, filter and ``~`` runs the checks of :mod:`daca_jax.tasks.chat_bounds`. Jinja is imported
only when a template is first compiled.
"""
from __future__ import annotations

import datetime
import functools
import json
from typing import Any

from daca_jax.tasks.chat_bounds import (MAX_RENDER_DEPTH, Exceeded, binop_size, bounded_concat, bounded_filter,
                                        bounded_iter, budget, check_args, check_estimate, check_size, check_time,
                                        finalize)


@functools.lru_cache(maxsize=1)
def environment() -> Any:
  """transformers' sandboxed template environment (see the module docstring); built once."""
  import jinja2
  import jinja2.ext

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
      check_size(attrs)
      jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
      Namespace.check(name)
      # What a template keeps across loop items lives here: bounded like any value it builds, so that
      # a chain of namespaces cannot hold a new long string per item.
      check_size(value)
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

  env = _bounded_environment_class()(trim_blocks=True, lstrip_blocks=True, finalize=finalize,
                                     extensions=[GenerationBlock, jinja2.ext.loopcontrols])
  # Jinja's lorem-ipsum generator loops in Python for as many paragraphs as asked, out of reach of the
  # time bound (lipsum(10**6) runs for minutes); no chat template has a use for it.
  del env.globals["lipsum"]
  env.filters["tojson"] = tojson
  env.filters = {name: bounded_filter(f) for name, f in env.filters.items()}
  env.globals.update(raise_exception=raise_exception, strftime_now=strftime_now, dict=Dict(),
                     namespace=Namespace)
  return env


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
    bounded_iter = staticmethod(bounded_iter)
    bounded_concat = staticmethod(bounded_concat)
    concat = staticmethod(bounded_concat)  # a {% set %} block's and a macro's text

    def _parse(self, source: str, name: Any, filename: Any) -> Any:
      # Every for loop iterates through environment.bounded_iter (an attribute of the environment,
      # which no template can rebind), so that each item checks the time bound.
      tree = super()._parse(source, name, filename)
      for loop in tree.find_all(nodes.For):
        loop.iter = nodes.Call(nodes.EnvironmentAttribute("bounded_iter"), [loop.iter], [], None, None,
                               lineno=loop.lineno)
      return _ConcatBounder().visit(tree)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
      check_time()
      if __obj is not bounded_iter and __obj is not bounded_concat:
        check_args(args, kwargs)
        # A bound method ('sep'.join(l), s.replace(a, b)); the sandbox hands out str.format as a wrapper
        # of the bound method (functools.wraps: __wrapped__).
        owner = getattr(getattr(__obj, "__wrapped__", __obj), "__self__", None)
        if isinstance(owner, (str, list, tuple, dict)):
          fmt = owner if getattr(__obj, "__name__", "") in ("format", "format_map") else None
          check_estimate(owner, (*args, *kwargs.values()), fmt)
        elif args:
          check_estimate(args[0], (*args[1:], *kwargs.values()))
      depth = getattr(budget, "depth", 0)
      if depth >= MAX_RENDER_DEPTH:
        raise Exceeded(f"it recurses deeper than {MAX_RENDER_DEPTH} nested calls")
      budget.depth = depth + 1
      try:
        return check_size(super().call(__context, __obj, *args, **kwargs))
      finally:
        budget.depth = depth

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
      check_time()
      binop_size(operator, left, right)
      return super().call_binop(context, operator, left, right)

    def getattr(self, obj: Any, attribute: str) -> Any:
      check_time()
      return check_size(super().getattr(obj, attribute))

    def getitem(self, obj: Any, argument: Any) -> Any:
      check_time()
      return check_size(super().getitem(obj, argument))

  return _BoundedEnvironment
