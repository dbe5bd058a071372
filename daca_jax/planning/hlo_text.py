"""The text of a compiled XLA module (``Compiled.as_text()``) read into computations, instructions and loops.

What the plan's counters (:mod:`daca_jax.planning.hlo_cost`, :mod:`daca_jax.planning.hlo_count`) share:
one parse of the optimized module that XLA:CPU, XLA:GPU or XLA:TPU printed, and how often each loop runs.

Trip counts. XLA:CPU and XLA:GPU annotate a ``while`` with ``"known_trip_count":{"n":"N"}``; XLA:TPU's
printed module does not. A loop without the annotation gets the count XLA's own analysis
(``ComputeWhileLoopTripCount``) would find for the loops JAX emits (``lax.scan``, ``fori_loop``): the
condition's root compares the induction variable (a tuple element of the loop state) with a constant
(``LT`` / ``LE`` / ``GT`` / ``GE``), the state's initial value of that element is a constant (through
``copy`` / ``bitcast``), and the body adds a constant step to it (XLA:CPU's fusion wrappers of the
comparison and the add are seen through). Anything else (a step that is not a constant, a multiplied
counter) is a loop with an unknown count, which the counters count once and report.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import re
from typing import Iterator

DTYPE_BYTES = {"pred": 1, "s2": 0.25, "u2": 0.25, "s4": 0.5, "u4": 0.5, "s8": 1, "u8": 1, "s16": 2, "u16": 2,
               "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8,
               "c128": 16, "f8e4m3fn": 1, "f8e5m2": 1, "f8e4m3": 1, "f8e3m4": 1, "f8e4m3fnuz": 1,
               "f8e5m2fnuz": 1, "f8e4m3b11fnuz": 1, "f8e8m0fnu": 1, "f4e2m1fn": 0.5, "token": 0}

_COMP_HEADER = re.compile(r"^(ENTRY )?%([\w.\-]+) \(.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(ROOT )?%([\w.\-]+) = (.*?) ([a-z][\w\-]*)\(")
_SINGLE_REF = re.compile(r"\b(calls|to_apply|body|condition|true_computation|false_computation)=%([\w.\-]+)")
_LIST_REF = re.compile(r"\b(branch_computations|called_computations|calls)=\{([^}]*)\}")
_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')
ARRAY = re.compile(r"\b([a-z][a-z0-9]*)\[([\d,]*)\]")
_NAME = re.compile(r"%([\w.\-]+)")
_INDEX = re.compile(r"\bindex=(\d+)")
_DIRECTION = re.compile(r"direction=(LT|LE|GT|GE)")


@dataclasses.dataclass(frozen=True)
class Instruction:
  """One instruction of a computation.

  Attributes:
    name: its name (without ``%``).
    opcode: ``add``, ``fusion``, ``while``, ``all-gather-start``, ``custom-call``, ...
    shape: the result's shape text (an array ``bf16[4,64]{1,0}`` or a tuple of them).
    operands: the operands' names, in order.
    attrs: the text after the operand list (``calls=``, ``dimensions=``, ``backend_config=``, ...).
    root: whether it is its computation's ROOT.
    literal: a ``constant``'s value text (``4``, ``{1, 2}``), a ``parameter``'s number; "" otherwise.
  """

  name: str
  opcode: str
  shape: str
  operands: tuple[str, ...]
  attrs: str
  root: bool
  literal: str = ""

  def arrays(self) -> list[tuple[str, tuple[int, ...]]]:
    """``(dtype, dims)`` of every array of the result (a tuple's elements flattened)."""
    return arrays(self.shape)


@dataclasses.dataclass(frozen=True)
class Loop:
  """A ``while`` of a computation: its body and condition, its trip count (0: unknown) and whether the
  count was read off XLA's annotation (False: inferred, module docstring)."""

  body: str
  condition: str
  trip: int
  annotated: bool


@dataclasses.dataclass
class Computation:
  name: str
  lines: list[str]
  instructions: list[Instruction]
  refs: list[tuple[str, str]]  # (kind, callee) of every instruction, in order
  loops: list[Loop]

  @functools.cached_property
  def by_name(self) -> dict[str, Instruction]:
    return {i.name: i for i in self.instructions}

  @property
  def root(self) -> Instruction | None:
    return next((i for i in self.instructions if i.root), self.instructions[-1] if self.instructions else None)


def arrays(shape: str) -> list[tuple[str, tuple[int, ...]]]:
  """``(dtype, dims)`` of the arrays of a shape text (tuples flattened; layouts ignored)."""
  return [(dt, tuple(int(d) for d in dims.split(",") if d)) for dt, dims in ARRAY.findall(shape)]


def nbytes(shape: str) -> float:
  """Bytes of all arrays of a shape text (unknown element types: 4 bytes)."""
  return float(sum(DTYPE_BYTES.get(dt, 4) * math.prod(dims) for dt, dims in arrays(shape)))


def _operand_text(line: str, start: int) -> tuple[str, int]:
  """The text between the parenthesis at ``start - 1`` and its match, and the index after it."""
  depth, i = 1, start
  while i < len(line) and depth:
    depth += {"(": 1, ")": -1}.get(line[i], 0)
    i += 1
  return line[start:i - 1], i


def parse_instruction(line: str) -> Instruction | None:
  m = _INSTRUCTION.match(line)
  if not m:
    return None
  operands, end = _operand_text(line, m.end())
  literal = m.group(4) in ("constant", "parameter")
  return Instruction(name=m.group(2), opcode=m.group(4), shape=m.group(3),
                     operands=() if literal else tuple(_NAME.findall(operands)), attrs=line[end:],
                     root=bool(m.group(1)), literal=operands.strip() if literal else "")


@dataclasses.dataclass
class Module:
  """A parsed module: the text before its first computation, its computations by name in printed order
  (callees before callers, as XLA prints them) and the entry computation's name."""

  header: str
  preamble: str
  comps: dict[str, Computation]
  entry: str

  def loops(self) -> Iterator[Loop]:
    for comp in self.comps.values():
      yield from comp.loops


def parse(text: str) -> Module:
  """Reads ``Compiled.as_text()`` into a :class:`Module` (trip counts read or inferred)."""
  lines = text.splitlines()
  comps: dict[str, Computation] = {}
  preamble_end, entry, current = None, "", None
  for i, line in enumerate(lines):
    if current is None:
      m = _COMP_HEADER.match(line)
      if m:
        preamble_end = i if preamble_end is None else preamble_end
        current = Computation(m.group(2), [line], [], [], [])
        if m.group(1):
          entry = current.name
      continue
    current.lines.append(line)
    if line.strip() == "}":
      comps[current.name] = current
      current = None
      continue
    inst = parse_instruction(line)
    if inst is None:
      continue
    current.instructions.append(inst)
    refs = [(k, c) for k, c in _SINGLE_REF.findall(inst.attrs)]
    for kind, names in _LIST_REF.findall(inst.attrs):
      refs += [(kind, n.strip().lstrip("%")) for n in names.split(",") if n.strip()]
    # An async pair names its computation on both ends; it runs once, at the start.
    if not (inst.opcode.endswith("-done") or inst.opcode == "async-update"):
      current.refs += refs
  module = Module(lines[0] if lines else "", "\n".join(lines[1:preamble_end or 1]), comps, entry)
  for comp in comps.values():
    for inst in comp.instructions:
      if inst.opcode == "while":
        body = next(c for k, c in _SINGLE_REF.findall(inst.attrs) if k == "body")
        cond = next(c for k, c in _SINGLE_REF.findall(inst.attrs) if k == "condition")
        trip = _TRIP.search(inst.attrs)
        if trip:
          comp.loops.append(Loop(body, cond, int(trip.group(1)), True))
        else:
          comp.loops.append(Loop(body, cond, _infer_trip(module, comp, inst, body, cond), False))
  return module


def _resolve(comp: Computation, name: str) -> Instruction | None:
  """The instruction ``name`` of ``comp`` seen through ``copy`` / ``bitcast`` / ``convert``."""
  inst = comp.by_name.get(name)
  while inst is not None and inst.opcode in ("copy", "bitcast", "convert") and inst.operands:
    inst = comp.by_name.get(inst.operands[0])
  return inst


def _tuple_element(comp: Computation, name: str, index: int) -> Instruction | None:
  inst = _resolve(comp, name)
  if inst is not None and inst.opcode == "tuple" and index < len(inst.operands):
    return _resolve(comp, inst.operands[index])
  return None


def _gte_index(comp: Computation, name: str) -> int | None:
  """k when ``name`` is ``get-tuple-element(parameter, index=k)`` of ``comp``."""
  inst = _resolve(comp, name)
  if inst is None or inst.opcode != "get-tuple-element":
    return None
  m = _INDEX.search(inst.attrs)
  param = comp.by_name.get(inst.operands[0]) if inst.operands else None
  return int(m.group(1)) if m and param is not None and param.opcode == "parameter" else None


def _infer_trip(module: Module, caller: Computation, loop: Instruction, body: str, cond: str) -> int:
  """The trip count of a ``while`` without XLA's annotation (module docstring), 0 when it cannot be read."""
  c = module.comps.get(cond)
  compare = _compare(module, c)
  if compare is None:
    return 0
  direction = _DIRECTION.search(compare.attrs)
  a, b = compare.operands
  k, limit = _gte_index(c, a), _constant_value(c, b)
  if k is None or limit is None:  # constant on the left: flip the comparison
    k, limit = _gte_index(c, b), _constant_value(c, a)
    flip = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE"}
    direction = direction and flip[direction.group(1)]
  else:
    direction = direction and direction.group(1)
  if k is None or limit is None or not direction or not loop.operands:
    return 0
  start = _constant_value(caller, None, _tuple_element(caller, loop.operands[0], k))
  if start is None:
    return 0
  step = _body_step(module, module.comps.get(body), k)
  if not step:  # a step that cannot be read (data-dependent, multiplied, ...): unknown, not guessed
    return 0
  if direction in ("LT", "LE") and step > 0:
    n = -(-(limit - start + (direction == "LE")) // step)
  elif direction in ("GT", "GE") and step < 0:
    n = -(-(start - limit + (direction == "GE")) // -step)
  else:
    return 0
  return max(int(n), 0)


def _compare(module: Module, cond: Computation | None) -> Instruction | None:
  """The condition's root ``compare`` with operands named in ``cond`` (XLA:CPU wraps it in a fusion of its
  two operands: seen through it)."""
  root = cond.root if cond is not None else None
  if root is not None and root.opcode == "fusion":
    m = _SINGLE_REF.search(root.attrs)
    fused = module.comps.get(m.group(2)) if m else None
    inner = fused.root if fused is not None else None
    if inner is None or inner.opcode != "compare" or len(inner.operands) != 2:
      return None
    params = {i.name: int(i.literal) for i in fused.instructions if i.opcode == "parameter" and i.literal.isdigit()}
    if not all(o in params and params[o] < len(root.operands) for o in inner.operands):
      return None
    return dataclasses.replace(inner, operands=tuple(root.operands[params[o]] for o in inner.operands))
  if root is None or root.opcode != "compare" or len(root.operands) != 2:
    return None
  return root


def _constant_value(comp: Computation, name: str | None, inst: Instruction | None = None) -> int | None:
  """The integer value of a scalar ``constant`` (``name`` of ``comp``, or ``inst``), None otherwise."""
  inst = _resolve(comp, name) if inst is None else inst
  if inst is None or inst.opcode != "constant" or not re.fullmatch(r"-?\d+", inst.literal):
    return None
  return int(inst.literal)


def _body_step(module: Module, body: Computation | None, k: int) -> int | None:
  """The constant the body adds to tuple element ``k`` (XLA:CPU wraps the add in a fusion of its two
  operands: seen through it); None when it cannot be read."""
  if body is None or body.root is None or body.root.opcode != "tuple" or k >= len(body.root.operands):
    return None
  inst = _resolve(body, body.root.operands[k])
  if inst is not None and inst.opcode == "fusion":
    m = _SINGLE_REF.search(inst.attrs)
    fused = module.comps.get(m.group(2)) if m else None
    inner = fused.root if fused is not None else None
    params = {i.name: int(i.literal) for i in fused.instructions if i.opcode == "parameter"
              and i.literal.isdigit()} if fused is not None else {}
    if inner is None or len(inner.operands) != 2 or not all(o in params and params[o] < len(inst.operands)
                                                            for o in inner.operands):
      return None
    inst = dataclasses.replace(inner, operands=tuple(inst.operands[params[o]] for o in inner.operands))
  if inst is None or inst.opcode not in ("add", "subtract") or len(inst.operands) != 2:
    return None
  for var, const in (inst.operands, inst.operands[::-1]):
    value = _constant_value(body, const)
    if value is not None and _gte_index(body, var) == k:
      return value if inst.opcode == "add" else -value
  return None


_OP_NAME = re.compile(r'op_name="([^"]*)"')


def largest_buffers(module: Module, k: int = 3) -> list[tuple[float, str, str]]:
  """The ``k`` largest arrays a program materialises (an instruction's result outside fusions, or a
  parameter of its entry): ``(bytes, shape, where)``, ``where`` the JAX operation that made it (the
  instruction's ``op_name``, else "argument" / its opcode), largest first, one per shape and origin."""
  fused = {c for comp in module.comps.values() for i in comp.instructions if i.opcode == "fusion"
           for kind, c in _SINGLE_REF.findall(i.attrs) if kind == "calls"}
  found: dict[tuple[str, str], float] = {}
  for name, comp in module.comps.items():
    if name in fused:
      continue
    for inst in comp.instructions:
      if inst.opcode in ("tuple", "get-tuple-element", "bitcast", "while", "conditional", "call") or (
          inst.opcode == "parameter" and name != module.entry):
        continue
      m = _OP_NAME.search(inst.attrs)
      where = "argument" if inst.opcode == "parameter" else (m.group(1) if m else inst.opcode)
      for dt, dims in arrays(inst.shape):
        size = DTYPE_BYTES.get(dt, 4) * math.prod(dims)
        key = (f"{dt}[{','.join(map(str, dims))}]", where)
        found[key] = max(found.get(key, 0.0), size)
  ranked = sorted(((b, shape, where) for (shape, where), b in found.items()), reverse=True)
  return ranked[:k]


__all__ = ["ARRAY", "DTYPE_BYTES", "Computation", "Instruction", "Loop", "Module", "arrays", "largest_buffers",
           "nbytes", "parse", "parse_instruction"]
