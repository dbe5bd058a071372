"""The old paths of the modules that left daca_jax/run/ (issue 42) still import, as the new modules
themselves, with a DeprecationWarning naming the new path (``daca_jax.MOVED``, one finder); nothing in the
repository imports them any more."""
import ast
import importlib
import pathlib
import re
import sys
import warnings

import pytest

import daca_jax

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _forget(monkeypatch, old: str) -> None:
  """Drops ``old`` (and the old names below it) from ``sys.modules`` for this test only, so that the next
  import goes through the finder again."""
  for name in [n for n in sys.modules if n == old or n.startswith(old + ".")]:
    monkeypatch.delitem(sys.modules, name)


@pytest.mark.parametrize("old,new", sorted(daca_jax.MOVED.items()))
def test_old_path_imports_the_new_module_with_a_warning(monkeypatch, old, new):
  _forget(monkeypatch, old)
  with pytest.warns(DeprecationWarning, match=re.escape(f"{old} moved to {new}")) as record:
    module = importlib.import_module(old)
  assert module is importlib.import_module(new)
  assert module.__name__ == new and module.__spec__.name == new  # the new module keeps its own spec
  ours = [w for w in record if f"{old} moved to" in str(w.message)]
  assert ours[0].filename == __file__, "the warning names the importing line"


@pytest.mark.parametrize("old,new", sorted(daca_jax.MOVED.items()))
def test_import_statements_of_the_old_path(monkeypatch, old, new):
  """``import <old>`` binds the new module under the old dotted name; ``from <old> import X`` gives the
  new module's ``X``."""
  new_module = importlib.import_module(new)
  name = next(n for n in sorted(vars(new_module)) if not n.startswith("_"))
  _forget(monkeypatch, old)
  namespace = {}
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    exec(f"import {old}\nfrom {old} import {name} as picked", namespace)  # pylint: disable=exec-used
  obj = namespace["daca_jax"]
  for part in old.split(".")[1:]:
    obj = getattr(obj, part)
  assert obj is new_module
  assert namespace["picked"] is getattr(new_module, name)


def test_the_old_harness_package_still_reaches_its_submodules(monkeypatch):
  """``daca_jax.run.harness`` was a package: its old submodule paths resolve under the new package."""
  _forget(monkeypatch, "daca_jax.run.harness")
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from daca_jax.run.harness import EvalProtocol, protocol  # pylint: disable=import-outside-toplevel
  from daca_jax.evaluation import protocol as new_protocol  # pylint: disable=import-outside-toplevel
  assert protocol is new_protocol and EvalProtocol is new_protocol.EvalProtocol


def test_unmoved_names_are_not_intercepted():
  assert importlib.import_module("daca_jax.run.metrics").__spec__.name == "daca_jax.run.metrics"
  with pytest.raises(ModuleNotFoundError):
    importlib.import_module("daca_jax.run.no_such_module")


def _imported_modules(path: pathlib.Path) -> set[str]:
  names = set()
  for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
    if isinstance(node, ast.Import):
      names.update(a.name for a in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      names.add(node.module)
      names.update(f"{node.module}.{a.name}" for a in node.names)
    elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("daca_jax."):
      names.add(node.value)  # importlib / ``python -m`` module names
  return names


def test_nothing_in_the_repository_uses_an_old_path():
  """The deprecated paths are for code outside the repository: every import here names the new module."""
  files = [p for d in ("daca_jax", "experiments", "tests", "configs") for p in sorted((ROOT / d).rglob("*.py"))]
  skip = {ROOT / "daca_jax" / "__init__.py", pathlib.Path(__file__).resolve()}  # the table and this test
  used = {f"{p.relative_to(ROOT)}: {name}" for p in files if p not in skip
          for name in _imported_modules(p) if name in daca_jax.MOVED}
  assert not used, "old module paths:\n" + "\n".join(sorted(used))
