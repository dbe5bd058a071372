"""The library's own count of what a compiled program computes and reads, from its optimized HLO text.

XLA:GPU gives no cost analysis of a program compiled for compile-only devices (``cost_analysis()`` is
None), and XLA:TPU's counts each loop body once and cannot analyse a computation on its own without a
TPU (``hlo_module_cost_analysis`` needs a runnable client). So for those targets the plan counts the
target's optimized module itself, with XLA's ``HloCostAnalysis`` conventions, every loop multiplied by
its trip count (:mod:`daca_jax.planning.hlo_text`), and checks the count against XLA's where XLA gives
one (the XLA:TPU count of the same program with each loop body once; XLA:CPU's loop-exact count).

FLOPs, per instruction, inside fusions too:

* ``dot``: 2 x result elements x the product of the lhs contracting dimensions; ``convolution`` (XLA:TPU
  writes matrix products as convolutions): 2 x result elements x the kernel's elements per output
  feature / ``feature_group_count``; cuBLAS / cuBLASLt GEMM custom-calls (XLA:GPU's matrix products): as
  ``dot``, from their ``dot_dimension_numbers``;
* elementwise arithmetic, comparisons, selects and conversions: 1 per result element; ``exponential``,
  ``log``, ``tanh``, ``logistic``, ``sqrt``, ``rsqrt``, ``power``, trigonometric and ``erf``: 1
  transcendental per element instead;
* ``reduce`` / ``scatter``: 1 per input (update) element; ``reduce-window``: 1 per output element and
  window position; ``sort``: n log2 n comparisons per sorted row.
* Data movement (copies, slices, broadcasts, transposes, gathers, collectives) computes nothing.

Bytes accessed: what each instruction of a non-fused computation reads and writes in memory, a fusion as
one unit: its operands and results, except that an operand the fusion only slices
(``dynamic-slice`` / ``slice`` / ``gather``) is read as the slices' bytes, an operand updated in place
(operand 0 of a ``dynamic-update-slice`` at the fusion's root) is neither read nor written beyond the
update, and a result that is such an update writes only the update (as XLA's analysis does: a
layer-stacked residual buffer updated one layer per loop iteration costs one layer per iteration, not the
whole stack). Bookkeeping instructions (parameters, constants, tuples, bitcasts, the ``-done`` end of an
asynchronous pair, loop and call boundaries) move nothing.

A ``while`` counts ``trip x body + (trip + 1) x condition``; a ``conditional`` each property's largest
branch (XLA's rule); a ``call``, an ``async``/``call-start`` its computation once; an asynchronous
``fusion-start`` as the fusion it wraps.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
from typing import Any

import numpy as np

from daca_jax.planning.hlo_text import DTYPE_BYTES, Computation, Instruction, Module, arrays, nbytes, parse

_TRANSCENDENTAL = {"exponential", "exponential-minus-one", "log", "log-plus-one", "tanh", "logistic", "sqrt",
                   "rsqrt", "cbrt", "power", "sine", "cosine", "tan", "atan2", "erf"}
_ELEMENTWISE = {"add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "negate", "abs",
                "sign", "floor", "ceil", "round-nearest-afz", "round-nearest-even", "compare", "select", "clamp",
                "and", "or", "xor", "not", "shift-left", "shift-right-logical", "shift-right-arithmetic",
                "convert", "is-finite", "popcnt", "count-leading-zeros", "real", "imag", "complex",
                "stochastic-convert"}
# Instructions that neither compute nor move data of their own.
_FREE = {"parameter", "constant", "tuple", "get-tuple-element", "bitcast", "while", "conditional", "call",
         "after-all", "add-dependency", "opt-barrier", "partition-id", "replica-id", "domain", "iota",
         "async-start", "async-update", "async-done", "call-start", "call-done", "copy-done", "send-done",
         "recv-done", "all-gather-done", "all-reduce-done", "collective-permute-done", "reduce-scatter-done",
         "all-to-all-done", "fusion-done", "fusion-update", "get-dimension-size", "set-dimension-size"}
_GEMM_TARGETS = re.compile(r'custom_call_target="(__cublas\$gemm|__cublas\$lt\$matmul[\w$]*|__cublas\$[\w$]*gemm'
                           r'[\w$]*)"')
_SLICING = {"dynamic-slice", "slice", "gather"}


@dataclasses.dataclass(frozen=True)
class Count:
  """FLOPs, transcendentals and bytes accessed of one run of a computation (or of a program)."""

  flops: float = 0.0
  transcendentals: float = 0.0
  bytes_accessed: float = 0.0

  def __add__(self, other: "Count") -> "Count":
    return Count(self.flops + other.flops, self.transcendentals + other.transcendentals,
                 self.bytes_accessed + other.bytes_accessed)

  def __mul__(self, factor: float) -> "Count":
    return Count(self.flops * factor, self.transcendentals * factor, self.bytes_accessed * factor)


def _elements(shape: str) -> int:
  return sum(math.prod(dims) for _, dims in arrays(shape))


def _first_array(shape: str) -> tuple[str, tuple[int, ...]] | None:
  found = arrays(shape)
  return found[0] if found else None


def _dims_attr(attrs: str, key: str) -> list[int]:
  m = re.search(rf"\b{key}=\{{([\d,]*)\}}", attrs)
  return [int(d) for d in m.group(1).split(",") if d] if m else []


def _parameters(comp: Computation) -> dict[int, str]:
  """Parameter number -> name of a computation."""
  return {int(i.literal): i.name for i in comp.instructions if i.opcode == "parameter" and i.literal.isdigit()}


class _Counter:
  """Counts one parsed module; results memoised per computation."""

  def __init__(self, module: Module, loops_once: bool = False):
    self.module = module
    self.loops_once = loops_once

  def operand_shape(self, comp: Computation, name: str) -> str:
    inst = comp.by_name.get(name)
    return inst.shape if inst is not None else ""

  def flops(self, comp: Computation, inst: Instruction) -> Count:
    op = inst.opcode
    if op in ("fusion", "fusion-start"):  # an asynchronous fusion as XLA re-prints an async-wrapped op
      callee = self._callee(inst, "calls")
      return Count(*self.fused(callee.name)) if callee else Count()
    if op in _TRANSCENDENTAL:
      return Count(transcendentals=_elements(inst.shape))
    if op in _ELEMENTWISE:
      return Count(flops=_elements(inst.shape))
    if op == "dot":
      lhs = _first_array(self.operand_shape(comp, inst.operands[0])) if inst.operands else None
      k = math.prod(lhs[1][d] for d in _dims_attr(inst.attrs, "lhs_contracting_dims")) if lhs else 1
      return Count(flops=2.0 * _elements(inst.shape) * k)
    if op == "convolution":
      return Count(flops=2.0 * self._conv_macs(comp, inst))
    if op == "custom-call" and _GEMM_TARGETS.search(inst.attrs):
      return Count(flops=self._gemm(comp, inst))
    if op == "reduce":
      return Count(flops=sum(_elements(self.operand_shape(comp, o)) for o in inst.operands[:len(inst.operands) // 2]))
    if op == "reduce-window":  # XLA's: every output element reduces its window
      m = re.search(r"window=\{size=([\dx]+)", inst.attrs)
      window = math.prod(int(d) for d in m.group(1).split("x")) if m else 1
      return Count(flops=_elements(inst.shape) * window)
    if op == "scatter":
      return Count(flops=_elements(self.operand_shape(comp, inst.operands[-1])) if inst.operands else 0)
    if op == "sort":
      first = _first_array(inst.shape)
      if first and first[1]:
        dim = (_dims_attr(inst.attrs, "dimensions") or [len(first[1]) - 1])[0]
        n = first[1][dim]
        return Count(flops=math.prod(first[1]) * max(math.log2(n), 1.0))
    return Count()

  def _callee(self, inst: Instruction, kind: str) -> Computation | None:
    m = re.search(rf"\b{kind}=%([\w.\-]+)", inst.attrs)
    return self.module.comps.get(m.group(1)) if m else None

  def _conv_macs(self, comp: Computation, inst: Instruction) -> float:
    """Multiply-adds of a convolution, counting only the window positions that land on input elements
    (padding and ``lhs_dilate`` holes skipped, as XLA's analysis does: XLA:TPU writes batched matrix
    products as convolutions whose batch dimensions are dilated windows, one real element per output)."""
    labels = re.search(r"dim_labels=([\w?]+)_([\w?]+)->([\w?]+)", inst.attrs)
    shapes = [_first_array(self.operand_shape(comp, o)) for o in inst.operands[:2]] + [_first_array(inst.shape)]
    if labels is None or any(s is None for s in shapes):
      return float(_elements(inst.shape))
    (lhs_l, rhs_l, out_l), (lhs, rhs, out) = labels.groups(), [s[1] for s in shapes]
    if (len(lhs_l), len(rhs_l), len(out_l)) != (len(lhs), len(rhs), len(out)):
      return float(_elements(inst.shape))
    window = re.search(r"window=\{([^}]*)\}", inst.attrs)
    fields = dict(kv.split("=", 1) for kv in (window.group(1).split() if window else []) if "=" in kv)
    digits = sorted(ch for ch in rhs_l if ch.isdigit())

    def per_dim(key: str, default: int) -> list[int]:
      vals = fields.get(key, "").split("x") if key in fields else []
      return [int(v.split("_")[0]) for v in vals] if vals else [default] * len(digits)

    stride, lhs_dil, rhs_dil = per_dim("stride", 1), per_dim("lhs_dilate", 1), per_dim("rhs_dilate", 1)
    pad_lo = per_dim("pad", 0)
    macs = float(out[out_l.index("b")] * out[out_l.index("f")] * rhs[rhs_l.index("i")])
    for j, d in enumerate(digits):
      size_in, size_k, size_out = lhs[lhs_l.index(d)], rhs[rhs_l.index(d)], out[out_l.index(d)]
      o = np.arange(size_out)[:, None]
      k = np.arange(size_k)[None, :]
      pos = o * stride[j] + k * rhs_dil[j] - pad_lo[j]
      valid = (pos >= 0) & (pos % lhs_dil[j] == 0) & (pos // lhs_dil[j] < size_in)
      macs *= float(valid.sum())
    return macs

  def _gemm(self, comp: Computation, inst: Instruction) -> float:
    out = _first_array(inst.shape)
    lhs = _first_array(self.operand_shape(comp, inst.operands[0])) if inst.operands else None
    m = re.search(r"backend_config=(\{.*\})\s*$", inst.attrs)
    k = 1
    if m and lhs:
      try:
        dims = json.loads(m.group(1))["gemm_backend_config"]["dot_dimension_numbers"]
        k = math.prod(lhs[1][int(d)] for d in dims.get("lhs_contracting_dimensions", []))
      except (ValueError, KeyError, IndexError, TypeError):
        k = 1
    return 2.0 * (math.prod(out[1]) if out else 0) * k

  @functools.lru_cache(maxsize=None)
  def fused(self, name: str) -> tuple[float, float]:
    """(FLOPs, transcendentals) of one run of fused computation ``name`` (nested fusions included)."""
    comp = self.module.comps[name]
    total = Count()
    for inst in comp.instructions:
      total = total + self.flops(comp, inst)
    return total.flops, total.transcendentals

  def _param_read(self, fused: Computation, pname: str, full: float) -> float:
    """Bytes a fused computation reads of its parameter ``pname`` (``full`` bytes): the slices it takes,
    nothing where it only updates it in place, and through nested fusions and bitcasts the same."""
    users = [i for i in fused.instructions if pname in i.operands]
    if not users:
      return 0.0
    read = 0.0
    for u in users:
      if u.opcode in _SLICING and u.operands[0] == pname and pname not in u.operands[1:]:
        read += nbytes(u.shape)
      elif u.opcode == "dynamic-update-slice" and u.operands[0] == pname and pname not in u.operands[1:]:
        continue  # updated in place: the update is what is written
      elif u.opcode == "bitcast":
        read += self._param_read(fused, u.name, full)
      elif u.opcode == "fusion" and (inner := self._callee(u, "calls")) is not None:
        params = _parameters(inner)
        for j, o in enumerate(u.operands):
          if o == pname and j in params:
            read += self._param_read(inner, params[j], full)
      else:
        return full
      if read >= full:
        return full
    return read

  def fusion_bytes(self, comp: Computation, inst: Instruction) -> float:
    """Bytes a fusion reads and writes (module docstring: slices and in-place updates)."""
    fused = self._callee(inst, "calls")
    if fused is None:
      return sum(nbytes(self.operand_shape(comp, o)) for o in inst.operands) + nbytes(inst.shape)
    written = 0.0
    root = fused.root
    outputs = ([fused.by_name[o] for o in root.operands if o in fused.by_name] if root and root.opcode == "tuple"
               else [root] if root else [])
    for out in outputs:
      if out.opcode == "dynamic-update-slice" and len(out.operands) > 1 and out.operands[1] in fused.by_name:
        written += nbytes(fused.by_name[out.operands[1]].shape)
      else:
        written += nbytes(out.shape)
    params = _parameters(fused)
    read = sum(self._param_read(fused, params[j], nbytes(self.operand_shape(comp, o)))
               for j, o in enumerate(inst.operands) if j in params)
    return read + written

  def instruction_bytes(self, comp: Computation, inst: Instruction) -> float:
    op = inst.opcode
    if op in _FREE:
      return 0.0
    if op in ("fusion", "fusion-start"):
      return self.fusion_bytes(comp, inst)
    if op in ("dynamic-slice", "slice", "gather"):
      return 2.0 * nbytes(inst.shape)
    if op == "dynamic-update-slice" and len(inst.operands) > 1:
      return 2.0 * nbytes(self.operand_shape(comp, inst.operands[1]))
    if op == "custom-call" and _GEMM_TARGETS.search(inst.attrs):  # the result's workspace is scratch
      first = _first_array(inst.shape)
      out = DTYPE_BYTES.get(first[0], 4) * math.prod(first[1]) if first else 0.0
      return sum(nbytes(self.operand_shape(comp, o)) for o in inst.operands) + out
    if op.endswith("-start"):  # an asynchronous collective or copy: its operand read, its result written
      return sum(nbytes(self.operand_shape(comp, o)) for o in inst.operands) + max(
          (DTYPE_BYTES.get(dt, 4) * math.prod(d) for dt, d in arrays(inst.shape)), default=0.0)
    return sum(nbytes(self.operand_shape(comp, o)) for o in inst.operands) + nbytes(inst.shape)

  @functools.lru_cache(maxsize=None)
  def total(self, name: str) -> Count:
    """One run of computation ``name`` with everything it calls (module docstring)."""
    comp = self.module.comps[name]
    total = Count()
    loops = {(lp.body, lp.condition): lp.trip for lp in comp.loops}
    for inst in comp.instructions:
      op = inst.opcode
      if op == "while":
        body = re.search(r"\bbody=%([\w.\-]+)", inst.attrs).group(1)
        cond = re.search(r"\bcondition=%([\w.\-]+)", inst.attrs).group(1)
        n = 1 if self.loops_once else max(loops.get((body, cond), 0), 1)
        total = total + self.total(body) * n + self.total(cond) * (n + 1 if not self.loops_once else 1)
        continue
      if op == "conditional":
        branches = [c for k, c in re.findall(r"\b(true_computation|false_computation)=%([\w.\-]+)", inst.attrs)]
        m = re.search(r"branch_computations=\{([^}]*)\}", inst.attrs)
        branches += [b.strip().lstrip("%") for b in m.group(1).split(",")] if m else []
        counts = [self.total(b) for b in branches if b in self.module.comps]
        if counts:  # XLA's rule: each property's largest branch
          total = total + Count(max(c.flops for c in counts), max(c.transcendentals for c in counts),
                                max(c.bytes_accessed for c in counts))
        continue
      if op in ("call", "async-start", "call-start"):
        for kind in ("to_apply", "calls"):
          callee = self._callee(inst, kind)
          if callee is not None:
            total = total + self.total(callee.name)
        continue
      c = self.flops(comp, inst)
      total = total + Count(c.flops, c.transcendentals, self.instruction_bytes(comp, inst))
    return total


def count(text_or_module: str | Module, *, loops_once: bool = False) -> Count:
  """The :class:`Count` of one run of a compiled program (its ``as_text()``, or the parsed module), every
  loop multiplied by its trip count (a loop whose count is unknown: once); ``loops_once``: each loop body
  once, as XLA's own ``cost_analysis()`` counts."""
  module = parse(text_or_module) if isinstance(text_or_module, str) else text_or_module
  return _Counter(module, loops_once).total(module.entry) if module.entry else Count()


__all__ = ["Count", "count"]
