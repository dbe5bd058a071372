"""XLA's cost analysis of a compiled program with every loop counted as often as it runs.

``Compiled.cost_analysis()`` (XLA's ``HloCostAnalysis``) counts a ``while`` loop's body once,
whatever its trip count ("we cannot precisely compute the cost of a while node. For now compute the
cost of a single iteration", ``xla/service/hlo_cost_analysis.cc``, ``HandleWhile``), and this
library's programs are loops: the rollout's S denoising steps, the layer stack (one ``lax.scan``
body unless ``model.unroll_layers``), the μ inner updates, the ``rl.grad_accum`` micro-batches, SML's
strata. :func:`program_cost` therefore reads the compiled module's text, where XLA annotates each
loop with its ``known_trip_count``, asks XLA's own analysis for the cost of each loop body compiled
into a module of its own, and combines them bottom-up:

  ``T(c) = X(c) + Σ_w [n_w · T(body_w) + (n_w + 1) · X(cond_w) − X(body_w) − X(cond_w)]``

over the loops ``w`` that ``c`` runs directly (not inside another loop), where ``X`` is XLA's count
(each nested body once) and ``T`` the count of everything that runs. A conditional counts as its
costliest branch (XLA's rule), with the loops of every branch scaled as if that branch ran: an upper
bound where branches skip work (the rollout's threshold decoding skips finished steps). A loop
without a known trip count is counted once and reported (``unknown_trip_loops``).

Collectives (all-gather, reduce-scatter, all-reduce, all-to-all, collective-permute, and their
asynchronous ``-start`` forms) are read off the same text, weighted by how often their computation
runs, as the bytes one device sends over its links under a ring schedule (all-gather of a result of
R bytes over n devices: ``R (n - 1) / n``; reduce-scatter of an operand of R: the same; all-reduce:
twice that; collective-permute: R).

The per-body analysis uses two jaxlib entry points that are not public API
(``jaxlib._hlo.hlo_module_from_text``, ``jaxlib._jax.hlo_module_cost_analysis``); where they are
missing or fail, the whole program's ``cost_analysis()`` is returned with ``exact_loops=False``.
A backend whose own analysis already multiplies loop bodies by their trip counts (detected once per
backend with a loop of known cost, :func:`backend_counts_trips`) is used as it is.

Why one module (about 350 lines, at the bound): costing loops and counting collectives share one parse of the
compiled module's text (:func:`_parse`).
"""
from __future__ import annotations

import dataclasses
import functools
import math
import re
from typing import Any

import jax
import jax.numpy as jnp

_COST_KEYS = ("flops", "bytes accessed", "transcendentals")
_DTYPE_BYTES = {"pred": 1, "s2": 0.25, "u2": 0.25, "s4": 0.5, "u4": 0.5, "s8": 1, "u8": 1, "s16": 2, "u16": 2,
                "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8,
                "c128": 16, "f8e4m3fn": 1, "f8e5m2": 1, "f8e4m3": 1, "f8e3m4": 1, "f8e4m3fnuz": 1,
                "f8e5m2fnuz": 1, "f8e4m3b11fnuz": 1, "f8e8m0fnu": 1, "f4e2m1fn": 0.5}
_COLLECTIVES = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "collective-permute")

_COMP_HEADER = re.compile(r"^(ENTRY )?%([\w.\-]+) \(.*\{\s*$")
_SINGLE_REF = re.compile(r"\b(calls|to_apply|body|condition|true_computation|false_computation)=%([\w.\-]+)")
_LIST_REF = re.compile(r"\b(branch_computations|called_computations)=\{([^}]*)\}")
_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')
_ARRAY = re.compile(r"\b([a-z][a-z0-9]*)\[([\d,]*)\]")
_OPCODE = re.compile(r"^\s*(?:ROOT )?%[\w.\-]+ = (.*?) ([a-z][\w\-]*)\(")
_GROUPS_LIST = re.compile(r"replica_groups=\{\{([\d,]*)\}")
_GROUPS_IOTA = re.compile(r"replica_groups=\[(\d+),(\d+)\]")
_GROUPS_MESH = re.compile(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}")


@dataclasses.dataclass(frozen=True)
class ProgramCost:
  """What one run of a compiled program does, per device.

  Attributes:
    flops: floating-point operations (XLA's count: 2 per multiply-add of a dot, 1 per elementwise op).
    bytes_accessed: bytes read and written by its operations (XLA's count, which assumes each
      operation reads its operands from and writes its result to memory: with the fusion of the
      compiler that produced it).
    transcendentals: exp / log / tanh ... evaluations.
    collective_bytes: bytes the device sends over its links per run, by collective opcode.
    loops: ``(trip count or 0 if unknown, body computation)`` of every loop, outermost first.
    unknown_trip_loops: loops without a known trip count (counted once).
    exact_loops: False when the per-loop analysis was unavailable and every loop body was counted
      once (XLA's plain count: a lower bound).
    xla_flops_once: XLA's plain count of the whole program (each loop body once), for reference.
  """

  flops: float
  bytes_accessed: float
  transcendentals: float
  collective_bytes: dict[str, float]
  loops: tuple[tuple[int, str], ...]
  unknown_trip_loops: int
  exact_loops: bool
  xla_flops_once: float

  @property
  def link_bytes(self) -> float:
    """All collective bytes of one run."""
    return float(sum(self.collective_bytes.values()))

  def scaled(self, factor: float) -> dict[str, float]:
    """``flops``, ``bytes_accessed`` and ``link_bytes`` of ``factor`` runs."""
    return {"flops": self.flops * factor, "bytes_accessed": self.bytes_accessed * factor,
            "link_bytes": self.link_bytes * factor}


@dataclasses.dataclass
class _Computation:
  name: str
  lines: list[str]
  refs: list[tuple[str, str]]  # (kind, callee)
  loops: list[tuple[str, str, int]]  # (body, condition, trip count or 0)


def _parse(text: str) -> tuple[str, dict[str, _Computation], str]:
  """(text before the first computation, computations by name in printed order, entry name)."""
  lines = text.splitlines()
  comps: dict[str, _Computation] = {}
  preamble_end, entry, current = None, "", None
  for i, line in enumerate(lines):
    if current is None:
      m = _COMP_HEADER.match(line)
      if m:
        preamble_end = i if preamble_end is None else preamble_end
        current = _Computation(m.group(2), [line], [], [])
        if m.group(1):
          entry = current.name
      continue
    current.lines.append(line)
    if line.strip() == "}":
      comps[current.name] = current
      current = None
      continue
    refs = [(k, c) for k, c in _SINGLE_REF.findall(line)]
    for kind, names in _LIST_REF.findall(line):
      refs += [(kind, n.strip().lstrip("%")) for n in names.split(",") if n.strip()]
    current.refs += refs
    if " while(" in line:
      body = next(c for k, c in refs if k == "body")
      cond = next(c for k, c in refs if k == "condition")
      trip = _TRIP.search(line)
      current.loops.append((body, cond, int(trip.group(1)) if trip else 0))
  return "\n".join(lines[1:preamble_end or 1]), comps, entry


def _reachable(comps: dict[str, _Computation], root: str) -> set[str]:
  seen, stack = set(), [root]
  while stack:
    c = stack.pop()
    if c in seen or c not in comps:
      continue
    seen.add(c)
    stack += [callee for _, callee in comps[c].refs]
  return seen


def _direct_loops(comps: dict[str, _Computation], root: str) -> list[tuple[str, str, int]]:
  """Loops that ``root`` runs itself or through non-loop calls (fusions, calls, conditionals)."""
  out, seen, stack = [], set(), [root]
  while stack:
    c = stack.pop()
    if c in seen or c not in comps:
      continue
    seen.add(c)
    out += comps[c].loops
    loop_comps = {x for b, cnd, _ in comps[c].loops for x in (b, cnd)}
    stack += [callee for _, callee in comps[c].refs if callee not in loop_comps]
  return out


def _xla_cost(client: Any, header: str, preamble: str, comps: dict[str, _Computation], root: str
              ) -> dict[str, float]:
  """XLA's cost of computation ``root`` compiled into a module of its own (its loops' bodies once)."""
  from jaxlib import _hlo  # not public API: see the module docstring
  from jax._src.lib import _jax

  keep = _reachable(comps, root)
  parts = [header, preamble]
  for name, comp in comps.items():
    if name not in keep:
      continue
    first = comp.lines[0].removeprefix("ENTRY ")
    parts.append(("ENTRY " if name == root else "") + first)
    parts += comp.lines[1:]
    parts.append("")
  module = _hlo.hlo_module_from_text("\n".join(parts))
  cost = _jax.hlo_module_cost_analysis(client, module)
  return {k: float(cost.get(k, 0.0)) for k in _COST_KEYS}


def _plain(compiled: Any) -> dict[str, float]:
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  return {k: float((cost or {}).get(k, 0.0)) for k in _COST_KEYS}


def _group_size(line: str, default: int) -> int:
  """Devices of one replica group of a collective: ``{{0,1,..}}``, iota ``[groups,size]<=[..]`` or
  ``mesh['a'=2,'b'=4] {'a'}`` (the product of the named axes' sizes)."""
  m = _GROUPS_MESH.search(line)
  if m:
    sizes = dict(re.findall(r"'([^']+)'=(\d+)", m.group(1)))
    return math.prod(int(sizes.get(a, 1)) for a in re.findall(r"'([^']+)'", m.group(2))) or default
  m = _GROUPS_IOTA.search(line)
  if m:
    return int(m.group(2))
  m = _GROUPS_LIST.search(line)
  if m:
    return len([x for x in m.group(1).split(",") if x])
  return default


@dataclasses.dataclass(frozen=True)
class Collective:
  """One collective instruction of a compiled program.

  Attributes:
    op: the collective (``all-gather``, ``reduce-scatter``, ``all-reduce``, ``all-to-all``,
      ``collective-permute``; an asynchronous ``-start`` under its base name).
    dtype: the element type of the largest array it moves (``bf16``, ``f32``, ...).
    shape: that array's logical dimensions (the gathered / reduced result's).
    group: devices of one replica group.
    runs: how often it runs per run of the program (its computation's loop trip counts multiplied).
    sent: bytes one device sends per run of the program (``runs`` included, ring schedule).
  """

  op: str
  dtype: str
  shape: tuple[int, ...]
  group: int
  runs: float
  sent: float


def collectives(text: str, devices: int) -> list[Collective]:
  """Every collective of a compiled program's text (``Compiled.as_text()``), with how often it runs and
  the bytes one device sends (module docstring), in printed order."""
  _, comps, entry = _parse(text)
  return _collectives(comps, entry, devices) if entry else []


def _collectives(comps: dict[str, _Computation], entry: str, devices: int) -> list[Collective]:
  mult = {name: 0.0 for name in comps}
  mult[entry] = 1.0
  # XLA prints callees before callers: walking backwards visits every caller before its callees.
  for name in reversed(list(comps)):
    comp = comps[name]
    if not mult[name]:
      continue
    factor = {}
    for body, cond, trip in comp.loops:
      factor[body] = max(trip, 1)
      factor[cond] = max(trip, 1) + 1
    for _, callee in comp.refs:
      if callee in mult:
        mult[callee] += mult[name] * factor.get(callee, 1)
  out: list[Collective] = []
  for name, comp in comps.items():
    if not mult[name]:
      continue
    for line in comp.lines[1:]:
      m = _OPCODE.match(line)
      if not m:
        continue
      op = m.group(2)
      base = op.removesuffix("-start")
      if base not in _COLLECTIVES or op.endswith("-done"):
        continue
      arrays = _ARRAY.findall(m.group(1))
      if not arrays:
        continue
      sizes = [_DTYPE_BYTES.get(dt, 4) * math.prod(int(d) for d in dims.split(",") if d) for dt, dims in arrays]
      # an async start's result is a tuple (operands, results, ...): its largest array is the data moved
      size = max(sizes) if op.endswith("-start") else sum(sizes)
      dt, dims = arrays[sizes.index(max(sizes))]
      n = _group_size(line, devices)
      if base == "collective-permute":
        sent = size
      elif base == "all-reduce":
        sent = 2.0 * size * (n - 1) / n
      elif base == "reduce-scatter":
        sent = size * (n - 1)  # the result is one n-th of the operand
      else:
        sent = size * (n - 1) / n
      out.append(Collective(op=base, dtype=dt, shape=tuple(int(d) for d in dims.split(",") if d), group=n,
                            runs=mult[name], sent=mult[name] * sent))
  return out


def _collective_bytes(comps: dict[str, _Computation], entry: str, devices: int) -> dict[str, float]:
  """Bytes one device sends per run of ``entry``, by collective, each weighted by how often it runs."""
  out: dict[str, float] = {}
  for c in _collectives(comps, entry, devices):
    out[c.op] = out.get(c.op, 0.0) + c.sent
  return out


@functools.lru_cache(maxsize=None)
def backend_counts_trips(platform: str) -> bool:
  """Whether ``platform``'s own ``cost_analysis()`` already counts a loop body once per iteration
  (measured on a 10-step loop of one matrix product)."""

  def f(x):
    return jax.lax.fori_loop(0, 10, lambda i, c: c @ c, x)

  device = jax.devices(platform)[0]
  x = jax.ShapeDtypeStruct((64, 64), jnp.float32, sharding=jax.sharding.SingleDeviceSharding(device))
  one = 2.0 * 64 ** 3
  flops = _plain(jax.jit(f).lower(x).compile())["flops"]
  return flops > 5 * one


def program_cost(compiled: Any, devices: int = 1) -> ProgramCost:
  """The cost of one run of ``compiled`` (a ``jax.stages.Compiled``) per device, loops counted.

  Args:
    compiled: the compiled program (of the current backend's client).
    devices: devices of the mesh it was partitioned for (collectives without replica groups span them).
  Returns:
    A :class:`ProgramCost`; see the module docstring for what is and is not counted.
  """
  plain = _plain(compiled)
  text = compiled.as_text()
  header_line, _, _ = text.partition("\n")
  preamble, comps, entry = _parse(text)
  collectives = _collective_bytes(comps, entry, devices) if entry else {}
  all_loops = [(trip, body) for comp in comps.values() for body, _, trip in comp.loops]
  unknown = sum(1 for trip, _ in all_loops if not trip)
  base = dict(collective_bytes=collectives, loops=tuple(all_loops), unknown_trip_loops=unknown,
              xla_flops_once=plain["flops"])
  platform = compiled.runtime_executable().client.platform if hasattr(compiled, "runtime_executable") else "cpu"
  if not all_loops or backend_counts_trips(platform):
    return ProgramCost(flops=plain["flops"], bytes_accessed=plain["bytes accessed"],
                       transcendentals=plain["transcendentals"], exact_loops=True, **base)
  # A module header without the entry layout (it names the original entry's parameters).
  header = "HloModule " + header_line.split()[1].rstrip(",")
  try:
    client = jax.devices(platform)[0].client
    x_cost = functools.lru_cache(maxsize=None)(lambda c: _xla_cost(client, header, preamble, comps, c))

    @functools.lru_cache(maxsize=None)
    def total(c: str) -> tuple[float, ...]:
      own = x_cost(c) if c != entry else plain
      t = [own[k] for k in _COST_KEYS]
      for body, cond, trip in _direct_loops(comps, c):
        n = max(trip, 1)
        tb, xb, xc = total(body), x_cost(body), x_cost(cond)
        for i, k in enumerate(_COST_KEYS):
          t[i] += n * tb[i] + (n + 1) * xc[k] - xb[k] - xc[k]
      return tuple(t)

    flops, nbytes, trans = total(entry)
  except Exception:  # the private entry points moved or refused the text: XLA's plain count
    return ProgramCost(flops=plain["flops"], bytes_accessed=plain["bytes accessed"],
                       transcendentals=plain["transcendentals"], exact_loops=False, **base)
  return ProgramCost(flops=flops, bytes_accessed=nbytes, transcendentals=trans, exact_loops=True, **base)


__all__ = ["Collective", "ProgramCost", "backend_counts_trips", "collectives", "program_cost"]
