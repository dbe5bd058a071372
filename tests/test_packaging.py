"""setup.py: the core install covers every third-party package the core algorithms import, and each
other import of daca_jax is declared by an extra that ``[test]`` (or ``[hf]`` / ``[wandb]``) pulls."""
import ast
import functools
import importlib.metadata
import pathlib
import re
import runpy
import sys

import pytest
import setuptools

from tests.test_import_graph import import_graph

ROOT = pathlib.Path(__file__).resolve().parents[1]
CORE_PACKAGES = ("daca_jax.diffusion", "daca_jax.credit", "daca_jax.likelihood", "daca_jax.rl")
# Imported inside a function for an optional backend that no extra installs (a user opts in).
OPTIONAL = {"spacy": "credit.taggers.spacy_pos_fn, an optional POS backend (the default tagger is rule-based)",
            # imported inside daca_jax.storage's functions only for a gs:// path (the [gcs] extra; a local workdir
            # never imports them, and a gs:// one without them is a one-line error naming the extra)
            "gcsfs": "daca_jax.storage, for gs:// workdirs", "fsspec": "daca_jax.storage, for gs:// workdirs",
            "etils": "daca_jax.storage, for gs:// workdirs"}


def _setup_kwargs(monkeypatch) -> dict:
  got = {}
  monkeypatch.setattr(setuptools, "setup", lambda **kw: got.update(kw))
  runpy.run_path(str(ROOT / "setup.py"))
  return got


def _dists(requirements) -> set[str]:
  return {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower().replace("_", "-") for r in requirements}


FIRST_PARTY = {"daca_jax", "configs"}  # setup.py ships configs/ as the package `configs`


def _third_party(module: str) -> set[str]:
  path = ROOT / (module.replace(".", "/") + ".py")
  if not path.exists():
    path = ROOT / module.replace(".", "/") / "__init__.py"
  tops = set()
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.Import):
      tops.update(a.name.split(".")[0] for a in node.names)
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
      tops.add(node.module.split(".")[0])
  return {t for t in tops if t not in sys.stdlib_module_names and t not in FIRST_PARTY}


@functools.lru_cache(maxsize=None)
def _packages_distributions() -> dict[str, list[str]]:
  return importlib.metadata.packages_distributions()  # scans every installed distribution: once


def _dist_names(top: str) -> set[str]:
  return {d.lower().replace("_", "-") for d in _packages_distributions().get(top, ())}


def test_core_install_covers_the_core_imports(monkeypatch):
  core = _dists(_setup_kwargs(monkeypatch)["install_requires"])
  graph = import_graph()
  seen, todo = set(), list(CORE_PACKAGES)
  while todo:
    m = todo.pop()
    if m not in seen:
      seen.add(m)
      todo.extend(graph[m])
  missing = {}
  for module in seen:
    for top in _third_party(module) - set(OPTIONAL):
      if not _dist_names(top) & core:
        missing[top] = module
  assert not missing, f"imported by the core but not in install_requires: {missing}"
  assert core <= {"jax", "flax", "optax", "numpy", "ml-collections"}, f"the core install is not light: {core}"


def test_extras_cover_every_import(monkeypatch):
  kw = _setup_kwargs(monkeypatch)
  extras = kw["extras_require"]
  test = _dists(kw["install_requires"]) | _dists(extras["test"])
  declared = test | _dists(extras["hf"]) | _dists(extras["wandb"])
  assert _dists(extras["all"]) >= set().union(*(_dists(extras[n]) for n in ("run", "hf", "wandb")))
  for name in ("tasks", "ckpt", "viz", "run"):
    assert _dists(extras[name]) <= test, f"[test] does not pull [{name}]"
  missing = {}
  for module in import_graph():
    for top in _third_party(module) - set(OPTIONAL):
      dists = _dist_names(top) or {top.lower().replace("_", "-")}  # not installed: the import name
      if not dists & declared:
        missing[top] = module
  assert not missing, f"imported but declared by no extra: {missing}"


def test_configs_ship_as_a_package_and_nothing_edits_sys_path(monkeypatch, tmp_path):
  """``configs`` is installed beside ``daca_jax`` (its files import ``configs.base``), so no script and no
  module of the package puts the repository on ``sys.path``; only the docs runner's emulation of
  ``python <script>`` (the script's own folder first) remains."""
  import subprocess

  assert "configs" in _setup_kwargs(monkeypatch)["packages"]
  out = subprocess.run([sys.executable, "-c", "import configs.paper, configs.base; print(configs.paper.__file__)"],
                       cwd=tmp_path, capture_output=True, text=True, check=True)
  assert pathlib.Path(out.stdout.strip()) == ROOT / "configs" / "paper.py"
  edits = [f"{p.relative_to(ROOT)}:{i}" for folder in ("daca_jax", "experiments", "configs")
           for p in sorted((ROOT / folder).rglob("*.py"))
           for i, line in enumerate(p.read_text().splitlines(), 1)
           if re.search(r"sys\.path\.(insert|append)", line) and "what `python <script>` does" not in line]
  assert not edits, f"sys.path edits: {edits}"


def _module_level_imports(path: pathlib.Path) -> set[str]:
  """Absolute module names ``path`` imports when it is imported: statements outside function bodies and
  outside ``try`` blocks that catch ImportError (an optional dependency)."""
  names: set[str] = set()

  def visit(nodes):
    for node in nodes:
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        continue
      if isinstance(node, ast.Try) and any(
          isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError") for h in node.handlers):
        continue
      if isinstance(node, ast.Import):
        names.update(a.name for a in node.names)
      elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        names.add(node.module)
        names.update(f"{node.module}.{a.name}" for a in node.names)
      visit(ast.iter_child_nodes(node))

  visit(ast.parse(path.read_text()).body)
  return names


def _file_of(module: str) -> pathlib.Path | None:
  for candidate in (ROOT / (module.replace(".", "/") + ".py"), ROOT / module.replace(".", "/") / "__init__.py"):
    if candidate.exists():
      return candidate
  return None


def _import_closure_tops(start: list[pathlib.Path]) -> dict[str, str]:
  """Third-party top-level packages loaded by importing the files ``start`` (module-level imports,
  followed through daca_jax and configs, and through each package's ``__init__``): ``{top: importer}``."""
  tops: dict[str, str] = {}
  seen: set[pathlib.Path] = set()
  todo = list(start)
  while todo:
    path = todo.pop()
    if path in seen:
      continue
    seen.add(path)
    for name in _module_level_imports(path):
      top = name.split(".")[0]
      if top in ("daca_jax", "configs"):
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # a.b.c loads a, a.b and a.b.c
          f = _file_of(".".join(parts[:i]))
          if f is not None:
            todo.append(f)
      elif top not in sys.stdlib_module_names and top != "__future__":
        tops.setdefault(top, str(path.relative_to(ROOT)))
  return tops


def _automodules() -> list[pathlib.Path]:
  mods = set()
  for rst in (ROOT / "docs" / "api").glob("*.rst"):
    mods.update(re.findall(r"^\.\. automodule:: (\S+)", rst.read_text(), flags=re.M))
  return [p for p in (_file_of(m) for m in sorted(mods)) if p is not None]


# (extras a documented command installs, the files it imports) of the README's and docs' commands.
_DOCUMENTED = {
    "docs": (("docs",), None),  # `pip install -e '.[docs]'`, then sphinx's autodoc of docs/api
    "run": (("run",), ("experiments/train.py", "experiments/evaluate.py", "experiments/reproduce.py",
                       "experiments/tables.py", "experiments/plan.py", "experiments/variants_table.py")),
    "run,pretrained": (("run", "pretrained"), ("experiments/train.py", "experiments/evaluate.py",
                                               "experiments/export_hf.py")),
}


@pytest.mark.parametrize("name", sorted(_DOCUMENTED))
def test_documented_extras_cover_what_their_commands_import(monkeypatch, name):
  """Each documented install (``pip install -e '.[<extras>]'``) provides every third-party package its
  commands load on import: the docs build's autodoc of every module in docs/api, the scripts'
  module-level imports through the package. (Imports inside functions are checked by
  :func:`test_extras_cover_every_import` against the extras as a whole.)"""
  kw = _setup_kwargs(monkeypatch)
  extras, files = _DOCUMENTED[name]
  declared = _dists(kw["install_requires"]).union(*(_dists(kw["extras_require"][e]) for e in extras))
  start = _automodules() if files is None else [ROOT / f for f in files]
  assert start
  missing = {top: by for top, by in _import_closure_tops(start).items()
             if top not in OPTIONAL and not ((_dist_names(top) or {top.lower().replace("_", "-")}) & declared)}
  assert not missing, f"[{','.join(extras)}] lacks what its commands import: {missing}"
