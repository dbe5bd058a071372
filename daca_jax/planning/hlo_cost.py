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

Programs compiled for compile-only TPU or GPU devices (:mod:`daca_jax.planning.targets`) cannot take
that route: XLA:GPU gives no cost analysis there and XLA:TPU's per-body analysis needs a TPU. Their
FLOPs, transcendentals and bytes are the library's own count of the optimized module
(:mod:`daca_jax.planning.hlo_count`, loops multiplied), and the record keeps XLA's once-per-loop count
beside the same count taken once per loop (``xla_once`` / ``own_once``) as a check. Trip counts XLA:TPU
does not print are inferred (:mod:`daca_jax.planning.hlo_text`).
"""
from __future__ import annotations

import dataclasses
import functools
import math
import re
from typing import Any

import jax
import jax.numpy as jnp

from daca_jax.planning import hlo_count
from daca_jax.planning.hlo_text import ARRAY, DTYPE_BYTES, Computation, Module, parse

_COST_KEYS = ("flops", "bytes accessed", "transcendentals")
_COLLECTIVES = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "collective-permute")
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
    xla_flops_once: XLA's plain count of the whole program (each loop body once), for reference (0
      where the compiler gives none: XLA:GPU for compile-only devices).
    counter: who counted ``flops`` / ``bytes_accessed``: ``"xla"`` (XLA's analysis per loop body) or
      ``"hlo_count"`` (the library's count of the optimized module, :mod:`daca_jax.planning.hlo_count`).
    xla_once: XLA's own count of the program, each loop body once (``flops``, ``bytes_accessed``,
      ``transcendentals``; empty where XLA gives none).
    own_once: the library's count of the same program, each loop body once: equal to ``xla_once`` where
      the two agree (the check of ``counter="hlo_count"``).
    inferred_trip_loops: loops whose trip count was inferred, not printed (XLA:TPU).
  """

  flops: float
  bytes_accessed: float
  transcendentals: float
  collective_bytes: dict[str, float]
  loops: tuple[tuple[int, str], ...]
  unknown_trip_loops: int
  exact_loops: bool
  xla_flops_once: float
  counter: str = "xla"
  xla_once: dict[str, float] = dataclasses.field(default_factory=dict)
  own_once: dict[str, float] = dataclasses.field(default_factory=dict)
  inferred_trip_loops: int = 0

  @property
  def link_bytes(self) -> float:
    """All collective bytes of one run."""
    return float(sum(self.collective_bytes.values()))

  def scaled(self, factor: float) -> dict[str, float]:
    """``flops``, ``bytes_accessed`` and ``link_bytes`` of ``factor`` runs."""
    return {"flops": self.flops * factor, "bytes_accessed": self.bytes_accessed * factor,
            "link_bytes": self.link_bytes * factor}


def _reachable(comps: dict[str, Computation], root: str) -> set[str]:
  seen, stack = set(), [root]
  while stack:
    c = stack.pop()
    if c in seen or c not in comps:
      continue
    seen.add(c)
    stack += [callee for _, callee in comps[c].refs]
  return seen


def _direct_loops(comps: dict[str, Computation], root: str) -> list[tuple[str, str, int]]:
  """Loops that ``root`` runs itself or through non-loop calls (fusions, calls, conditionals)."""
  out, seen, stack = [], set(), [root]
  while stack:
    c = stack.pop()
    if c in seen or c not in comps:
      continue
    seen.add(c)
    out += [(lp.body, lp.condition, lp.trip) for lp in comps[c].loops]
    loop_comps = {x for lp in comps[c].loops for x in (lp.body, lp.condition)}
    stack += [callee for _, callee in comps[c].refs if callee not in loop_comps]
  return out


def _xla_cost(client: Any, module: Module, root: str) -> dict[str, float]:
  """XLA's cost of computation ``root`` compiled into a module of its own (its loops' bodies once)."""
  from jaxlib import _hlo  # not public API: see the module docstring
  from jax._src.lib import _jax

  keep = _reachable(module.comps, root)
  # A module header without the entry layout (it names the original entry's parameters).
  parts = ["HloModule " + module.header.split()[1].rstrip(","), module.preamble]
  for name, comp in module.comps.items():
    if name not in keep:
      continue
    first = comp.lines[0].removeprefix("ENTRY ")
    parts.append(("ENTRY " if name == root else "") + first)
    parts += comp.lines[1:]
    parts.append("")
  hlo = _hlo.hlo_module_from_text("\n".join(parts))
  cost = _jax.hlo_module_cost_analysis(client, hlo)
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


def collectives(text: str | Module, devices: int) -> list[Collective]:
  """Every collective of a compiled program's text (``Compiled.as_text()``, or its parse), with how often
  it runs and the bytes one device sends (module docstring), in printed order. Asynchronous pairs
  (``-start`` / ``-done``) count once, and a collective inside a computation that an ``async-start`` or a
  fusion calls counts with its caller."""
  module = parse(text) if isinstance(text, str) else text
  return _collectives(module, devices) if module.entry else []


def runs_per_computation(module: Module) -> dict[str, float]:
  """How often each computation of ``module`` runs per run of its entry (loops multiplied by their trip
  counts, a loop of unknown count once; every branch of a conditional as if it ran)."""
  mult = {name: 0.0 for name in module.comps}
  mult[module.entry] = 1.0
  # XLA prints callees before callers: walking backwards visits every caller before its callees.
  for name in reversed(list(module.comps)):
    comp = module.comps[name]
    if not mult[name]:
      continue
    factor = {}
    for lp in comp.loops:
      factor[lp.body] = max(lp.trip, 1)
      factor[lp.condition] = max(lp.trip, 1) + 1
    for _, callee in comp.refs:
      if callee in mult:
        mult[callee] += mult[name] * factor.get(callee, 1)
  return mult


def _collectives(module: Module, devices: int) -> list[Collective]:
  mult = runs_per_computation(module)
  out: list[Collective] = []
  for name, comp in module.comps.items():
    if not mult[name]:
      continue
    for inst in comp.instructions:
      op = inst.opcode
      base = op.removesuffix("-start")
      if base not in _COLLECTIVES or op.endswith("-done"):
        continue
      found = ARRAY.findall(inst.shape)
      if not found:
        continue
      sizes = [DTYPE_BYTES.get(dt, 4) * math.prod(int(d) for d in dims.split(",") if d) for dt, dims in found]
      # an async start's result is a tuple (operands, results, ...): its largest array is the data moved
      size = max(sizes) if op.endswith("-start") else sum(sizes)
      dt, dims = found[sizes.index(max(sizes))]
      n = _group_size(inst.attrs, devices)
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


def _collective_bytes(module: Module, devices: int) -> dict[str, float]:
  """Bytes one device sends per run of the entry, by collective, each weighted by how often it runs."""
  out: dict[str, float] = {}
  for c in _collectives(module, devices):
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


def compiled_platform(compiled: Any) -> str:
  """The platform a ``jax.stages.Compiled`` was compiled for (``cpu``, ``gpu``, ``tpu``), read from the
  devices of its input shardings: a compile-only device has no runtime client to ask."""
  for sharding in jax.tree.leaves(getattr(compiled, "input_shardings", ())):
    devices = getattr(sharding, "device_set", None)
    if devices:
      return next(iter(devices)).platform
  return jax.devices()[0].platform


def _counted(d: hlo_count.Count) -> dict[str, float]:
  return {"flops": d.flops, "bytes_accessed": d.bytes_accessed, "transcendentals": d.transcendentals}


def program_cost(compiled: Any, devices: int = 1, platform: str | None = None) -> ProgramCost:
  """The cost of one run of ``compiled`` (a ``jax.stages.Compiled``) per device, loops counted.

  Args:
    compiled: the compiled program (of the current backend's client, or of compile-only devices).
    devices: devices of the mesh it was partitioned for (collectives without replica groups span them).
    platform: the platform it was compiled for (default: read off its input shardings); ``tpu`` and
      ``gpu`` programs are counted by :mod:`daca_jax.planning.hlo_count`.
  Returns:
    A :class:`ProgramCost`; see the module docstring for what is and is not counted.
  """
  platform = platform or compiled_platform(compiled)
  plain = _plain(compiled)
  text = compiled.as_text()
  module = parse(text)
  colls = _collective_bytes(module, devices) if module.entry else {}
  all_loops = [(lp.trip, lp.body) for lp in module.loops()]
  unknown = sum(1 for trip, _ in all_loops if not trip)
  inferred = sum(1 for lp in module.loops() if lp.trip and not lp.annotated)
  base = dict(collective_bytes=colls, loops=tuple(all_loops), unknown_trip_loops=unknown,
              xla_flops_once=plain["flops"], inferred_trip_loops=inferred,
              xla_once={k.replace(" ", "_"): v for k, v in plain.items()} if any(plain.values()) else {})
  if platform in ("tpu", "gpu"):
    every, once = hlo_count.count(module), hlo_count.count(module, loops_once=True)
    return ProgramCost(flops=every.flops, bytes_accessed=every.bytes_accessed,
                       transcendentals=every.transcendentals, exact_loops=True, counter="hlo_count",
                       own_once=_counted(once), **base)
  if not all_loops or backend_counts_trips(platform):
    return ProgramCost(flops=plain["flops"], bytes_accessed=plain["bytes accessed"],
                       transcendentals=plain["transcendentals"], exact_loops=True, **base)
  comps, entry = module.comps, module.entry
  try:
    client = jax.devices(platform)[0].client
    x_cost = functools.lru_cache(maxsize=None)(lambda c: _xla_cost(client, module, c))

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


__all__ = ["Collective", "ProgramCost", "backend_counts_trips", "collectives", "compiled_platform", "program_cost",
           "runs_per_computation"]
