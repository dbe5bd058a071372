"""A small, bounded arithmetic parser for untrusted model output (Countdown answers).

Grammar (recursive descent; ``*``/``/`` bind tighter than ``+``/``-``; all operators are
left-associative)::

  expr    := term (("+" | "-") term)*
  term    := unary (("*" | "/") unary)*
  unary   := ("+" | "-") unary | primary
  primary := INTEGER | "(" expr ")"

``INTEGER`` is a run of ASCII digits without leading zeros (``0`` itself is fine; ``07`` is not, as in
Python source). Whitespace between tokens is ignored. Values are exact ``fractions.Fraction``.

Nothing is ever ``eval``-ed. Hostile input cannot exhaust the stack or the CPU: the text is limited to
``max_chars`` characters and the nesting (parentheses and unary signs) to ``max_depth`` levels, so
recursion depth and the size of every intermediate number are bounded.

Unary ``+``/``-`` are accepted because d1's Countdown grader (``eval`` on ``[\\d+\\-*/().\\s]``) accepts
them; Python-only syntax that d1's ``eval`` also accepts (``**``, ``//``, decimals such as ``3.0``) is
rejected here.
"""
from __future__ import annotations

import dataclasses
import fractions
import itertools
from typing import Iterator, Sequence

MAX_CHARS = 256
MAX_DEPTH = 32

_OPS = "+-*/"
_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}


class ExpressionError(ValueError):
  """The text is not a well-formed expression of the grammar above (or divides by zero)."""


@dataclasses.dataclass(frozen=True)
class ParsedExpression:
  """Result of :func:`parse_expression`.

  Attributes:
    value: exact value of the expression.
    numbers: the integer literals in order of appearance.
  """

  value: fractions.Fraction
  numbers: tuple[int, ...]


def _tokenize(text: str) -> list[str]:
  tokens: list[str] = []
  i, n = 0, len(text)
  while i < n:
    c = text[i]
    if c in " \t\n\r":
      i += 1
    elif "0" <= c <= "9":
      j = i
      while j < n and "0" <= text[j] <= "9":
        j += 1
      literal = text[i:j]
      if len(literal) > 1 and literal[0] == "0":
        raise ExpressionError(f"integer literal with a leading zero: {literal!r}")
      tokens.append(literal)
      i = j
    elif c in _OPS or c in "()":
      tokens.append(c)
      i += 1
    else:
      raise ExpressionError(f"character {c!r} at offset {i} is not a digit, operator or parenthesis")
  return tokens


class _Parser:
  """Recursive-descent parser over a token list; depth-limited."""

  def __init__(self, tokens: list[str], max_depth: int):
    self.tokens = tokens
    self.pos = 0
    self.depth = 0
    self.max_depth = max_depth
    self.numbers: list[int] = []

  def _peek(self) -> str | None:
    return self.tokens[self.pos] if self.pos < len(self.tokens) else None

  def _enter(self) -> None:
    self.depth += 1
    if self.depth > self.max_depth:
      raise ExpressionError(f"nesting deeper than {self.max_depth} levels")

  def _chain(self, ops: tuple[str, str], operand) -> fractions.Fraction:
    """A left-associative chain ``operand (op operand)*`` of one precedence level."""
    value = operand()
    while self._peek() in ops:
      op = self.tokens[self.pos]
      self.pos += 1
      result = _apply(op, value, operand())
      if result is None:
        raise ExpressionError("division by zero")
      value = result
    return value

  def expr(self) -> fractions.Fraction:
    return self._chain(("+", "-"), self.term)

  def term(self) -> fractions.Fraction:
    return self._chain(("*", "/"), self.unary)

  def unary(self) -> fractions.Fraction:
    tok = self._peek()
    if tok in ("+", "-"):
      self.pos += 1
      self._enter()
      value = self.unary()
      self.depth -= 1
      return -value if tok == "-" else value
    return self.primary()

  def primary(self) -> fractions.Fraction:
    tok = self._peek()
    if tok is None:
      raise ExpressionError("unexpected end of expression")
    if tok == "(":
      self.pos += 1
      self._enter()
      value = self.expr()
      self.depth -= 1
      if self._peek() != ")":
        raise ExpressionError("unbalanced '('")
      self.pos += 1
      return value
    if tok[0].isdigit():
      self.pos += 1
      self.numbers.append(int(tok))
      return fractions.Fraction(int(tok))
    raise ExpressionError(f"unexpected token {tok!r}")


def parse_expression(text: str, max_chars: int = MAX_CHARS,
                     max_depth: int = MAX_DEPTH) -> ParsedExpression:
  """Parses and evaluates an arithmetic expression exactly.

  Args:
    text: the expression (untrusted; any string).
    max_chars: longest accepted text (characters, before stripping).
    max_depth: deepest accepted nesting of parentheses and unary signs.

  Returns:
    The exact value and the integer literals used.

  Raises:
    ExpressionError: ``text`` is not a str, too long, too deeply nested, not in the grammar, or
      divides by zero.
  """
  if not isinstance(text, str):
    raise ExpressionError(f"expected a str, got {type(text).__name__}")
  if len(text) > max_chars:
    raise ExpressionError(f"expression of {len(text)} characters is longer than {max_chars}")
  tokens = _tokenize(text)
  if not tokens:
    raise ExpressionError("empty expression")
  parser = _Parser(tokens, max_depth)
  value = parser.expr()
  if parser.pos != len(tokens):
    raise ExpressionError(f"unexpected token {tokens[parser.pos]!r} after a complete expression")
  return ParsedExpression(value=value, numbers=tuple(parser.numbers))


def _apply(op: str, a: fractions.Fraction, b: fractions.Fraction) -> fractions.Fraction | None:
  if op == "+":
    return a + b
  if op == "-":
    return a - b
  if op == "*":
    return a * b
  return None if b == 0 else a / b


def _join(left: str, op: str, right: str, left_op: str | None, right_op: str | None) -> str:
  """Writes ``left op right`` with only the parentheses the grammar needs."""
  if left_op is not None and _PRECEDENCE[left_op] < _PRECEDENCE[op]:
    left = f"({left})"
  if right_op is not None and _PRECEDENCE[right_op] <= _PRECEDENCE[op]:
    right = f"({right})"
  return f"{left}{op}{right}"


def three_number_expressions(
    numbers: Sequence[int]) -> Iterator[tuple[str, fractions.Fraction]]:
  """Every expression using each of three numbers exactly once with binary ``+ - * /``.

  Enumerates all 6 orders x 2 parenthesisations (``(a o b) o c`` and ``a o (b o c)``) x 16
  operator pairs (192 candidates); those that divide by zero are skipped. Each expression is written
  with the fewest parentheses that make :func:`parse_expression` read it as built.

  Args:
    numbers: exactly three non-negative ints.

  Yields:
    ``(expression, exact value)`` in a fixed order.

  Raises:
    ValueError: ``numbers`` is not three non-negative ints.
  """
  if len(numbers) != 3 or any(isinstance(x, bool) or not isinstance(x, int) or x < 0
                              for x in numbers):
    raise ValueError(f"expected three non-negative ints, got {numbers!r}")
  for a, b, c in itertools.permutations(numbers):
    fa, fb, fc = (fractions.Fraction(x) for x in (a, b, c))
    for o1, o2 in itertools.product(_OPS, repeat=2):
      inner = _apply(o1, fa, fb)  # (a o1 b) o2 c
      if inner is not None:
        value = _apply(o2, inner, fc)
        if value is not None:
          yield _join(_join(str(a), o1, str(b), None, None), o2, str(c), o1, None), value
      inner = _apply(o2, fb, fc)  # a o1 (b o2 c)
      if inner is not None:
        value = _apply(o1, fa, inner)
        if value is not None:
          yield _join(str(a), o1, _join(str(b), o2, str(c), None, None), None, o2), value


def solve_three(numbers: Sequence[int], target: int) -> list[str]:
  """All distinct expressions (see :func:`three_number_expressions`) that equal ``target``.

  Returns:
    The expressions in enumeration order; empty when the target is unreachable.
  """
  out: list[str] = []
  seen: set[str] = set()
  for expression, value in three_number_expressions(numbers):
    if value == target and expression not in seen:
      seen.add(expression)
      out.append(expression)
  return out
