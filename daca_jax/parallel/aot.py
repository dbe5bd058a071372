"""Executables compiled ahead of time (a preflight, ``experiments/train.py --compile_only --target=...``)
that the run loads instead of compiling its rollout and update.

The preflight writes each compiled program's executable bytes (``jax.experimental.serialize_executable``)
into a folder, with ``manifest.json``: the machine it was compiled for (platform, device kind, device
and process counts, jax and jaxlib versions) and a SHA-256 of each program's lowering (its StableHLO
text, before the compiler) and of its bytes. The run (:func:`attach`) offers them to its programs when
the manifest's machine is the one it finds, and a program runs its executable only after its own
lowering, taken at its first call, has the same hash: the same config, shapes, shardings, constants and
library code; the executable is then loaded with that lowering's argument and result structure (no
pickle: the folder holds bytes and JSON). Anything else is one line and the run compiles as usual; an
executable never runs a program it was not compiled from. The folder is the run's own output, trusted
as its checkpoints are.

:class:`Slot` is the hook each of the library's compiled calls carries (``call.aot``): the update under
every ``parallel.strategy`` and the sharded rollout.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import pathlib
import re
from typing import Any, Callable, Iterator, Mapping, Sequence

import jax

from daca_jax import storage

MANIFEST = "manifest.json"
PROGRAMS = ("rollout", "update")


@contextlib.contextmanager
def fresh_compiles() -> Iterator[None]:
  """Compiles inside the block bypass JAX's persistent compilation cache (``JAX_COMPILATION_CACHE_DIR``), which
  is on again after it. An executable that the cache loaded serializes without the code of some of its kernels
  (seen with XLA:CPU, jax 0.10: the loaded copy fails to run elsewhere with "NOT_FOUND: Function
  iota_convert_fusion not found"), so the executables :func:`write` saves are compiled fresh."""
  from jax.experimental.compilation_cache import compilation_cache

  enabled = jax.config.jax_enable_compilation_cache
  jax.config.update("jax_enable_compilation_cache", False)
  compilation_cache.reset_cache()  # JAX decides once per process whether the cache is used
  try:
    yield
  finally:
    jax.config.update("jax_enable_compilation_cache", enabled)
    compilation_cache.reset_cache()


def fingerprint(lowered: Any) -> str:
  """SHA-256 of a ``jax.stages.Lowered``'s StableHLO text (no debug locations)."""
  return hashlib.sha256(lowered.as_text().encode()).hexdigest()


def _signature(args: Any, kw: Any, static: Sequence[str]) -> Any:
  """What a call's program depends on: the argument tree, each leaf's shape and dtype, the static values."""
  leaves, tree = jax.tree.flatten((args, {k: v for k, v in kw.items() if k not in static}))
  return (tree, tuple((tuple(getattr(x, "shape", ())), str(getattr(x, "dtype", type(x)))) for x in leaves),
          tuple(sorted((k, repr(v)) for k, v in kw.items() if k in static)))


class Slot:
  """An executable compiled ahead of time for one program, used in place of compiling it.

  ``run(jitted, *args, **kw)`` calls ``jitted`` (the program's ``jax.jit`` function) unless an executable
  was :meth:`offer`-ed: then, at the first call, the program is lowered for these arguments and, if the
  lowering's :func:`fingerprint` is the offered one, the executable is loaded with the lowering's argument
  and result structure and runs for every later call of the same arguments' shapes and static values (a
  call of others compiles as usual); otherwise ``log`` gets one line and ``jitted`` compiles as usual.
  ``static`` names keyword arguments that are compiled in (not passed to an executable).
  """

  def __init__(self, name: str, static: Sequence[str] = ()):
    self.name = name
    self.static = tuple(static)
    self._offered: tuple[bytes, str, Callable[[str], None]] | None = None
    self.executable: Any = None
    self._signature: Any = None

  def offer(self, payload: bytes, sha: str, log: Callable[[str], None]) -> None:
    """Offers the serialized executable ``payload`` of the program whose lowering hashes to ``sha``."""
    self._offered, self.executable, self._signature = (payload, sha, log), None, None

  def run(self, jitted: Any, *args: Any, **kw: Any) -> Any:
    if self._offered is not None:
      from jax.experimental import serialize_executable

      payload, sha, log = self._offered
      self._offered = None
      lowered = jitted.lower(*args, **kw)
      if fingerprint(lowered) == sha:
        try:
          self.executable = serialize_executable.deserialize_and_load(payload, lowered.in_tree, lowered.out_tree)
          self._signature = _signature(args, kw, self.static)
          log(f"{self.name}: running the executable compiled ahead of time (no compile)")
        except Exception as e:  # bytes XLA cannot load: the program it was compiled from still compiles
          log(f"{self.name}: the executable compiled ahead of time does not load ({type(e).__name__}): compiling "
              "as usual")
      else:
        log(f"{self.name}: the executable compiled ahead of time is of another program (config, shapes or "
            "library code differ): compiling as usual")
    if self.executable is not None and _signature(args, kw, self.static) == self._signature:
      return self.executable(*args, **{k: v for k, v in kw.items() if k not in self.static})
    return jitted(*args, **kw)


def _jaxlib_version() -> str:
  from importlib.metadata import version

  return version("jaxlib")


def _machine() -> dict[str, Any]:
  d = jax.devices()
  return {"platform": d[0].platform, "device_kind": d[0].device_kind, "num_devices": len(d),
          "process_count": jax.process_count(), "jax": jax.__version__, "jaxlib": _jaxlib_version()}


def write(folder: str | pathlib.Path, programs: Mapping[str, tuple[Any, str]], *, target: str,
          hosts: int = 1) -> pathlib.Path:
  """Serialises ``programs`` (``{"rollout": (Compiled, lowering's fingerprint), "update": ...}``) into
  ``folder`` with its manifest (module docstring): ``target`` names the machine, ``hosts`` its processes.
  Returns the folder.

  Raises:
    OSError: the folder cannot be written.
  """
  from jax.experimental import serialize_executable

  from daca_jax.io_utils import atomic_write_json

  folder = storage.as_path(folder)
  storage.makedirs(folder)
  with contextlib.suppress(FileNotFoundError):  # a half-written folder has no manifest: nothing is offered
    storage.remove(folder / MANIFEST)
  first, _ = next(iter(programs.values()))
  devices = {d for sh in jax.tree.leaves(first.input_shardings) for d in sh.device_set}
  one = next(iter(devices))
  manifest = {"target": target, "platform": one.platform, "device_kind": one.device_kind,
              "num_devices": len(devices), "process_count": hosts, "jax": jax.__version__,
              "jaxlib": _jaxlib_version(), "programs": {}}
  for name, (compiled, sha) in programs.items():
    payload, _, _ = serialize_executable.serialize(compiled)
    storage.write_bytes(folder / f"{name}.xla", payload)
    manifest["programs"][name] = {"file": f"{name}.xla", "lowered_sha256": sha,
                                  "bytes_sha256": hashlib.sha256(payload).hexdigest()}
  atomic_write_json(folder / MANIFEST, manifest)
  return folder


def mismatch(manifest: Mapping[str, Any]) -> str | None:
  """Why executables of ``manifest`` cannot run on this process's machine (one line), or None."""
  here = _machine()
  for key in ("platform", "device_kind", "num_devices", "process_count", "jax", "jaxlib"):
    if str(manifest.get(key)) != str(here[key]):
      return (f"compiled for {str(manifest.get('target'))[:60]} ({key} {str(manifest.get(key))[:60]!r}); this "
              f"machine has {key} {here[key]!r}")
  return None


# The largest executable file read (a serialized program of an 8B model is tens of MB).
MAX_EXECUTABLE_BYTES = 1 << 32
_FILE = re.compile(r"[A-Za-z0-9_.-]{1,128}")


def attach(folder: str | pathlib.Path, slots: Mapping[str, Slot], log: Callable[[str], None]) -> bool:
  """Offers the executables in ``folder`` to ``slots`` (``{"rollout": Slot, "update": Slot}``, e.g. a
  learner's ``aot_slots``) when they were compiled for this machine; otherwise one line to ``log``. A
  manifest or file that is not what :func:`write` writes is one line and the program compiles as usual;
  nothing outside ``folder`` is read. Returns whether any executable was offered (each still checks its
  program at its first call)."""
  folder = storage.as_path(folder)  # a gs:// workdir's executables are read from the bucket
  path = folder / MANIFEST
  try:
    if not path.is_file():
      return False
    manifest = json.loads(path.read_text())
    why = mismatch(manifest) if isinstance(manifest, dict) else "not a JSON object"
    programs = manifest.get("programs") if isinstance(manifest, dict) else None
    if why is None and not isinstance(programs, dict):
      why = "its 'programs' is not an object"
  except (OSError, ValueError, RecursionError) as e:
    why = f"unreadable manifest ({type(e).__name__}: {str(e)[:120]})"
  if why:
    log(f"executables in {folder}: {why}: compiling as usual")
    return False
  offered = False
  for name, slot in slots.items():
    entry = programs.get(name)
    file = entry.get("file") if isinstance(entry, dict) else None
    problem = None
    if not isinstance(file, str) or not _FILE.fullmatch(file) or file in (".", ".."):
      problem = f"names no file of its own folder ({file!r:.60})"
    else:
      try:
        target = folder / file
        if not target.is_file() or (not storage.is_remote(target) and target.is_symlink()):  # an object is no link
          problem = f"{file} is not a file there"
        elif storage.size(target) > MAX_EXECUTABLE_BYTES:
          problem = f"{file} is larger than {MAX_EXECUTABLE_BYTES} bytes"
        else:
          payload = storage.read_bytes(target)
          if hashlib.sha256(payload).hexdigest() != entry.get("bytes_sha256"):
            problem = f"{file} is not the file the manifest names"
      except OSError as e:
        problem = f"{file} cannot be read ({e.strerror or type(e).__name__})"
    if problem:
      log(f"executables in {folder}: {name}: {problem}: compiling {name} as usual")
      continue
    slot.offer(payload, str(entry.get("lowered_sha256")), log)
    offered = True
  return offered


__all__ = ["MANIFEST", "MAX_EXECUTABLE_BYTES", "PROGRAMS", "Slot", "attach", "fingerprint", "mismatch", "write"]
