"""In-sandbox launcher of :mod:`daca_jax.tasks.sandbox` (standard library only; never imported).

Run as ``python -I -S sandbox_launcher.py <config json>``, usually as PID 1 of fresh user, network,
PID and mount namespaces (``unshare``). It restricts itself, then forks the program and acts as a
minimal init until the program exits:

1. joins its pids cgroup (when the harness made one: where ``RLIMIT_NPROC`` is not enforced, as
   for real root);
2. mounts a size-limited tmpfs on the work directory (when in a mount namespace), so the program
   cannot fill the host disk;
3. sets resource limits (CPU seconds, address space, processes, file size, open files, no cores);
4. applies a Landlock ruleset (when the kernel has Landlock): writes only beneath the work directory
   and to ``/dev/null``; no TCP bind/connect (ABI >= 4); no signals or abstract unix sockets to
   processes outside the sandbox (ABI >= 6);
5. reads the program file and deletes it, forks; the child execs ``python -I -`` with the program on
   a stdin pipe (no copy of the source stays on disk), the scrubbed environment and cwd = the work
   directory; the parent writes the source, then reaps every child until the program's own exit.

It writes one JSON line to the status fd: ``{"exit": int|null, "signal": int|null,
"landlock_abi": int, "tmpfs": bool, "setup_error": str|null}``. Everything the launcher starts dies
with it: as PID 1 of a PID namespace, its exit kills the namespace.
"""
import ctypes
import json
import os
import resource
import struct
import sys

# Landlock (linux/landlock.h); syscall numbers are the same on every architecture.
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_FS_WRITE_FILE = 1 << 1
_FS_WRITE_RIGHTS_V1 = sum(1 << b for b in (1, 4, 5, 6, 7, 8, 9, 10, 11, 12))  # write/remove/make*
_FS_REFER = 1 << 13  # ABI 2
_FS_TRUNCATE = 1 << 14  # ABI 3
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6
_PR_SET_NO_NEW_PRIVS = 38
_MS_NOSUID, _MS_NODEV = 2, 4

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _syscall(*args):
  r = _libc.syscall(*args)
  if r < 0:
    err = ctypes.get_errno()
    raise OSError(err, os.strerror(err))
  return r


def _landlock(work_dir):
  """Restricts this process and its descendants; returns the Landlock ABI used (0 = none)."""
  try:
    abi = _syscall(_SYS_CREATE_RULESET, None, 0, _CREATE_RULESET_VERSION)
  except OSError:
    return 0
  fs = _FS_WRITE_RIGHTS_V1 | (_FS_REFER if abi >= 2 else 0) | (_FS_TRUNCATE if abi >= 3 else 0)
  net = (_NET_BIND_TCP | _NET_CONNECT_TCP) if abi >= 4 else 0
  scope = (_SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL) if abi >= 6 else 0
  attr = struct.pack("=QQQ", fs, net, scope)
  size = 24 if abi >= 6 else (16 if abi >= 4 else 8)
  buf = ctypes.create_string_buffer(attr, len(attr))
  ruleset = _syscall(_SYS_CREATE_RULESET, buf, size, 0)
  try:
    file_rights = _FS_WRITE_FILE | (_FS_TRUNCATE if abi >= 3 else 0)
    for path, rights in ((work_dir, fs), ("/dev/null", file_rights)):
      fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
      try:
        rule = ctypes.create_string_buffer(struct.pack("=Qi", rights, fd), 12)
        _syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, rule, 0)
      finally:
        os.close(fd)
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
      raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    _syscall(_SYS_RESTRICT_SELF, ruleset, 0)
  finally:
    os.close(ruleset)
  return abi


def _mount_tmpfs(path, size_bytes):
  opts = f"size={int(size_bytes)},mode=0777".encode()
  r = _libc.mount(b"tmpfs", path.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, opts)
  return r == 0


def _set_limits(cfg):
  cpu = int(cfg["cpu_time_s"])
  resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
  resource.setrlimit(resource.RLIMIT_AS, (cfg["memory_bytes"],) * 2)
  resource.setrlimit(resource.RLIMIT_FSIZE, (cfg["max_file_bytes"],) * 2)
  resource.setrlimit(resource.RLIMIT_NOFILE, (cfg["max_open_files"],) * 2)
  resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
  if cfg["max_processes"]:
    resource.setrlimit(resource.RLIMIT_NPROC, (cfg["max_processes"],) * 2)


def main():
  cfg = json.loads(sys.argv[1])
  status_fd = cfg["status_fd"]
  os.set_inheritable(status_fd, False)
  report = {"exit": None, "signal": None, "landlock_abi": 0, "tmpfs": False, "setup_error": None}
  work = cfg["work_dir"]
  try:
    if cfg["pids_cgroup"]:  # join the per-sandbox pids cgroup; descendants inherit it
      with open(os.path.join(cfg["pids_cgroup"], "cgroup.procs"), "w") as f:
        f.write("0")
    if cfg["tmpfs_bytes"]:
      report["tmpfs"] = _mount_tmpfs(work, cfg["tmpfs_bytes"])
    _set_limits(cfg)
    # The program reaches the interpreter through a pipe on stdin and its file is deleted first:
    # a program that reads its own source (e.g. to find the success marker) finds nothing on disk.
    source = b""
    if cfg.get("program_path"):
      with open(cfg["program_path"], "rb") as f:
        source = f.read()
      os.unlink(cfg["program_path"])
    stdin_r, stdin_w = os.pipe()
    report["landlock_abi"] = _landlock(work)
    if cfg["require_landlock"] and not report["landlock_abi"]:
      raise OSError("Landlock is required (filesystem isolation) but not available")
    pid = os.fork()
  except Exception as e:  # report any setup failure to the parent as status "error"
    report["setup_error"] = f"{type(e).__name__}: {e}"
    os.write(status_fd, (json.dumps(report) + "\n").encode())
    return
  if pid == 0:
    try:
      os.close(stdin_w)
      os.dup2(stdin_r, 0)
      os.close(stdin_r)
      os.chdir(work)
      os.execve(cfg["argv"][0], cfg["argv"], cfg["env"])
    finally:
      os.write(2, b"sandbox: could not start the program\n")
      os._exit(127)
  os.close(stdin_r)
  try:  # the interpreter reads all of stdin before it runs anything, so this cannot deadlock
    view = memoryview(source)
    while view:
      view = view[os.write(stdin_w, view):]
  except OSError:  # the program died before reading its source: its exit status says why
    pass
  finally:
    os.close(stdin_w)
  while True:  # reap every child (PID 1 duty) until the program itself exits
    try:
      done, status = os.waitpid(-1, 0)
    except ChildProcessError:
      break
    if done == pid:
      if os.WIFSIGNALED(status):
        report["signal"] = os.WTERMSIG(status)
      else:
        report["exit"] = os.waitstatus_to_exitcode(status)
      break
  os.write(status_fd, (json.dumps(report) + "\n").encode())


if __name__ == "__main__":
  main()
