"""daca_jax: RL for masked diffusion language models (DACA-GRPO) in JAX/Flax.

Nothing is imported here. This file only keeps the old paths of modules that moved (:data:`MOVED`)
importable: ``import daca_jax.run.compare`` warns ``DeprecationWarning: daca_jax.run.compare moved to
daca_jax.reports.compare`` and gives the module object of ``daca_jax.reports.compare`` itself (so
``from daca_jax.run.compare import X`` is the new module's ``X``). The finder lives here, at the root,
rather than in the package the modules left: a module name it names counts as an import in
``tests/test_import_graph.py``, and the root is the one module no layer imports.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings

# Old dotted name -> the module it is now (issue 42: daca_jax/run/ holds only the main job).
MOVED: dict[str, str] = {
    "daca_jax.local_data": "daca_jax.data.local",
    "daca_jax.run.compare": "daca_jax.reports.compare",
    "daca_jax.run.doc_tables": "daca_jax.reports.doc_tables",
    "daca_jax.run.paired": "daca_jax.reports.paired",
    "daca_jax.run.reproduce": "daca_jax.reports.reproduce",
    "daca_jax.run.table_files": "daca_jax.reports.table_files",
    "daca_jax.run.variant_runs": "daca_jax.reports.variant_runs",
    "daca_jax.run.variants": "daca_jax.reports.variants",
    "daca_jax.run.evaluation": "daca_jax.evaluation.decode",
    "daca_jax.run.harness": "daca_jax.evaluation",
    "daca_jax.run.harness.files": "daca_jax.evaluation.files",
    "daca_jax.run.harness.harness": "daca_jax.evaluation.harness",
    "daca_jax.run.harness.loaders": "daca_jax.run.eval_models",
    "daca_jax.run.harness.protocol": "daca_jax.evaluation.protocol",
    "daca_jax.run.harness.reports": "daca_jax.evaluation.reports",
    "daca_jax.run.outcomes": "daca_jax.evaluation.outcomes",
    "daca_jax.run.benchmarking": "daca_jax.measure.benchmarking",
    "daca_jax.run.loader_memory": "daca_jax.measure.loader_memory",
    "daca_jax.run.method_costs": "daca_jax.measure.method_costs",
}
# Added to the warning where names of the old module went elsewhere than the new one.
_NOTES = {"daca_jax.run.harness": " (load_model, model_from_workdir, model_from_random_init: daca_jax.run.eval_models)"}


def _importer_stacklevel() -> int:
  """The ``stacklevel`` (for a warning raised in :meth:`_MovedModules.create_module`) of the first frame
  outside this file and importlib: the import statement, so that the warning names the line to change.
  ``warnings`` itself skips importlib's bootstrap frames when it counts."""
  frame, level = sys._getframe(1), 1
  while frame.f_back is not None:
    frame = frame.f_back
    name = frame.f_code.co_filename
    if "importlib" in name and "_bootstrap" in name:
      continue
    level += 1
    if name not in (__file__, importlib.__file__):
      break
  return level


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
  """Finds the old names of :data:`MOVED` and loads each as its new module (one object, two names)."""

  def find_spec(self, fullname: str, path=None, target=None) -> importlib.machinery.ModuleSpec | None:
    if fullname not in MOVED:
      return None
    return importlib.machinery.ModuleSpec(fullname, self)

  def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
    new = MOVED[spec.name]
    warnings.warn(f"{spec.name} moved to {new}{_NOTES.get(spec.name, '')}", DeprecationWarning,
                  stacklevel=_importer_stacklevel())
    module = importlib.import_module(new)
    spec.loader_state = module.__spec__  # the import system sets module.__spec__ to this spec next
    return module

  def exec_module(self, module: types.ModuleType) -> None:
    module.__spec__ = module.__spec__.loader_state  # already run as the new module: its own spec back


if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
  sys.meta_path.insert(0, _MovedModules())
