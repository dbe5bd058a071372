"""In-sandbox launcher of :mod:`daca_jax.tasks.sandbox.runner` (standard library only; never imported).

Run as ``python -I -S launcher.py <config json>``, usually as PID 1 of fresh user, network,
PID, IPC and mount namespaces (``unshare``). It restricts itself, then forks the program and acts as
a minimal init until the program exits:

1. joins its pids cgroup (when the harness made one: where ``RLIMIT_NPROC`` is not enforced, as
   for real root);
2. in its mount namespace: mounts a size-limited tmpfs on the work directory (so the program cannot
   fill the host disk) and a fresh ``proc`` on ``/proc`` (only the sandbox's own processes);
3. sets resource limits (CPU seconds, address space, processes, file size, open files, no cores);
4. applies a Landlock ruleset (when the kernel has Landlock): reads only of the harness's read view
   (:mod:`daca_jax.tasks.sandbox.readview`) and the work directory; writes only beneath the work
   directory and to ``/dev/null``; execution only of the interpreter; no TCP bind/connect
   (ABI >= 4); no signals or abstract unix sockets to processes outside the sandbox (ABI >= 6);
5. makes itself non-dumpable (so the program, although it runs as the same user, cannot ptrace it
   to forge this report);
6. reads the program file and deletes it, forks; the child closes the status fd, drops every
   capability (an empty bounding set, then ``capset`` to zero: the program cannot mount, unmount
   the fresh ``/proc`` or ptrace), and runs the program itself as ``__main__`` -- no second
   interpreter start-up (the launcher runs under ``python -I -S`` with the scrubbed environment,
   stdin ``/dev/null``, cwd = the work directory, and the fds listed in ``pass_fds``); the parent
   reaps every child until the program's own exit.

It writes JSON lines to the status fd: ``{"exit": int|null, "signal": int|null,
"landlock_abi": int, "read_rules": bool, "tmpfs": bool, "proc": bool, "setup_error": str|null,
"done": bool}``, once with ``done`` false when the restrictions are in place (so the harness knows
them even if it kills the sandbox later) and once with ``done`` true at the end.
Everything the launcher starts dies with it: as PID 1 of a PID namespace, its exit kills the
namespace.
"""
import ctypes
import json
import os
import resource
import stat
import struct
import sys

# Landlock (linux/landlock.h); syscall numbers are the same on every architecture.
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_SYS_CAPSET = {"x86_64": 126, "aarch64": 91, "ppc64le": 184, "s390x": 185}.get(os.uname().machine, 126)
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_FS_WRITE_RIGHTS_V1 = sum(1 << b for b in (1, 4, 5, 6, 7, 8, 9, 10, 11, 12))  # write/remove/make*
_FS_REFER = 1 << 13  # ABI 2
_FS_TRUNCATE = 1 << 14  # ABI 3
_FS_IOCTL_DEV = 1 << 15  # ABI 5
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6
_PR_SET_DUMPABLE, _PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS = 4, 24, 38
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 2, 4, 8

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _syscall(*args):
  r = _libc.syscall(*args)
  if r < 0:
    err = ctypes.get_errno()
    raise OSError(err, os.strerror(err))
  return r


def _add_rule(ruleset, path, rights):
  """Adds a path-beneath rule; a missing path is skipped, a file gets only file rights."""
  try:
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
  except OSError:
    return
  try:
    if not stat.S_ISDIR(os.fstat(fd).st_mode):
      rights &= _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV
    rule = ctypes.create_string_buffer(struct.pack("=Qi", rights, fd), 12)
    _syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, rule, 0)
  finally:
    os.close(fd)


def _landlock(work_dir, read_rules):
  """Restricts this process and its descendants; returns the Landlock ABI used (0 = none) and
  whether reads are restricted."""
  try:
    abi = _syscall(_SYS_CREATE_RULESET, None, 0, _CREATE_RULESET_VERSION)
  except OSError:
    return 0, False
  fs = _FS_WRITE_RIGHTS_V1 | (_FS_REFER if abi >= 2 else 0) | (_FS_TRUNCATE if abi >= 3 else 0)
  if read_rules:  # without a read view, reads stay unrestricted (and the result says so)
    fs |= _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR | (_FS_IOCTL_DEV if abi >= 5 else 0)
  net = (_NET_BIND_TCP | _NET_CONNECT_TCP) if abi >= 4 else 0
  scope = (_SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL) if abi >= 6 else 0
  attr = struct.pack("=QQQ", fs, net, scope)
  size = 24 if abi >= 6 else (16 if abi >= 4 else 8)
  buf = ctypes.create_string_buffer(attr, len(attr))
  ruleset = _syscall(_SYS_CREATE_RULESET, buf, size, 0)
  try:
    read_dir, read_file = _FS_READ_FILE | _FS_READ_DIR, _FS_READ_FILE
    kinds = {"dir": read_dir, "list": _FS_READ_DIR, "file": read_file,
             "exec": read_file | _FS_EXECUTE}
    for path, kind in read_rules:
      _add_rule(ruleset, path, kinds[kind] & fs)
    work_rights = fs & ~(_FS_EXECUTE | _FS_IOCTL_DEV)  # no running of files the program wrote
    _add_rule(ruleset, work_dir, work_rights)
    _add_rule(ruleset, "/dev/null", (_FS_READ_FILE | _FS_WRITE_FILE | _FS_TRUNCATE) & fs)
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
      raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    _syscall(_SYS_RESTRICT_SELF, ruleset, 0)
  finally:
    os.close(ruleset)
  return abi, bool(read_rules)


def _mount(source, target, fstype, flags, options):
  return _libc.mount(source, target.encode(), fstype, flags, options) == 0


def _drop_capabilities():
  """Empties the bounding set: the exec'd program (uid 0 of the user namespace, or real root)
  gets no capabilities. EPERM means this process lacks CAP_SETPCAP, i.e. it is an ordinary user
  whose exec'd program gets no capabilities anyway (no_new_privs also ignores file capabilities)."""
  cap = 0
  while _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) == 0:
    cap += 1
  err = ctypes.get_errno()
  if err not in (1, 22):  # EPERM (see above), EINVAL: past the last capability this kernel knows
    raise OSError(err, f"prctl(PR_CAPBSET_DROP, {cap}): {os.strerror(err)}")


def _capset_zero():
  """Clears this process's effective, permitted and inheritable capabilities (capset v3)."""
  header = ctypes.create_string_buffer(struct.pack("=Ii", 0x20080522, 0), 8)
  data = ctypes.create_string_buffer(bytes(24), 24)  # two {effective, permitted, inheritable}
  _syscall(_SYS_CAPSET, header, data)


def _become_program(cfg, source, pass_fds):
  """In the forked child: give up every capability, then run the program as ``__main__`` (as
  ``python -I -S -`` would: uncaught exceptions print a traceback and exit 1, ``SystemExit``
  sets the exit code, non-daemon threads are joined at exit)."""
  try:
    _drop_capabilities()
    _capset_zero()
    for fd in pass_fds:
      os.set_inheritable(fd, True)
    os.chdir(cfg["work_dir"])
    code = compile(source, "<stdin>", "exec")
  except BaseException as e:  # SyntaxError included: reported like the interpreter would
    if isinstance(e, SyntaxError):
      raise
    os.write(2, f"sandbox: could not start the program: {type(e).__name__}: {e}\n".encode())
    os._exit(127)
  main_module = type(sys)("__main__")
  sys.modules["__main__"] = main_module
  sys.argv[:] = ["-"]
  del cfg, source
  exec(code, main_module.__dict__)


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
  pass_fds = [int(fd) for fd in cfg.get("pass_fds", ())]
  report = {"exit": None, "signal": None, "landlock_abi": 0, "read_rules": False, "tmpfs": False,
            "proc": False, "setup_error": None, "done": False}
  work = cfg["work_dir"]
  try:
    if cfg["pids_cgroup"]:  # join the per-sandbox pids cgroup; descendants inherit it
      with open(os.path.join(cfg["pids_cgroup"], "cgroup.procs"), "w") as f:
        f.write("0")
    if cfg["tmpfs_bytes"]:
      opts = f"size={int(cfg['tmpfs_bytes'])},mode=0777".encode()
      report["tmpfs"] = _mount(b"tmpfs", work, b"tmpfs", _MS_NOSUID | _MS_NODEV, opts)
    if cfg.get("mount_proc"):
      report["proc"] = _mount(b"proc", "/proc", b"proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None)
    _set_limits(cfg)
    # The program's file is deleted before it runs (it cannot read its own source back from disk).
    source = b""
    if cfg.get("program_path"):
      with open(cfg["program_path"], "rb") as f:
        source = f.read()
      os.unlink(cfg["program_path"])
    if cfg["use_landlock"]:  # the harness found Landlock: it must then be applied
      report["landlock_abi"], report["read_rules"] = _landlock(work, cfg.get("read_rules") or [])
      if not report["landlock_abi"]:
        raise OSError("Landlock is required (filesystem isolation) but not available")
    if _libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
      raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0)")
    os.write(status_fd, (json.dumps(report) + "\n").encode())  # the isolation, if killed later
    report["done"] = True
    pid = os.fork()
  except Exception as e:  # report any setup failure to the parent as status "error"
    report["setup_error"] = f"{type(e).__name__}: {e}"
    report["done"] = True
    os.write(status_fd, (json.dumps(report) + "\n").encode())
    return
  if pid == 0:  # the program runs in this forked interpreter: no second interpreter start-up
    os.close(status_fd)  # the program must not be able to forge the report
    _become_program(cfg, source, pass_fds)
    return  # the program ended normally; the interpreter exits as after any script
  for fd in pass_fds:  # the program holds them now; the other end must see EOF when it exits
    os.close(fd)
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
