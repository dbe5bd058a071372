"""Every shell command of the documentation, and the one table that says how the tests run each.

:func:`doc_commands` extracts the commands of README.md and docs/**/*.md: the lines of ```bash / ```sh
blocks, joined as bash joins them (a backslash-newline is removed), without comments and blank lines.
Three shorthands of the README are read as a reader reads them: ``a && b`` is two commands; a line
that starts with ``... `` is the previous command with more flags; ``[--flag=value]`` is an optional
flag, left out. A ``for ...; do ...; done`` line is run by bash as written.

:func:`plan` decides what happens to a command, from the table below (data: extend it here):

* :data:`SKIPS`: commands not run, each with its reason (matched by the start of the command), and any
  command naming a ``gs://`` bucket (:data:`BUCKET_SKIP`);
* :data:`RULES`: per script, the rewrites that shrink its commands to CPU size and whether they run
  in the default suite (the others are slow-marked; every script keeps a fast one);
* placeholders filled by the test: ``{shared}`` is ``../shared/data`` (skipped without it) and ``{tfds}`` a
  TFDS data directory holding the Sudoku dataset built from it;
* generic rewrites for every rule: ``/ckpt/<name>`` becomes a tiny checkpoint in the HF release layout
  of the family the name says (LLaDA or Dream, tests/hf_fixtures.py); ``runs/<x>`` becomes a
  temporary folder; a bare output file name (``--json=bench.json``) goes to the temporary folder.

A command neither skipped nor covered by a rule raises :class:`Uncovered`, so a new command in the
documentation is run by the tests, or skipped on purpose, from the day it is written.
"""
from __future__ import annotations

import dataclasses
import pathlib
import re
import shlex
from typing import Mapping

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOC_GLOBS = ("README.md", "docs/**/*.md")
_BLOCK = re.compile(r"^```(bash|sh|shell)\s*\n(.*?)^```", re.S | re.M)

# --- the table ---------------------------------------------------------------------------------------------

# (the command's first words, why it is not run)
SKIPS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("pip", "install"), "installs packages: the tests run in the environment it made"),
    (("python", "-m", "pytest"), "runs the test suite itself"),
    (("tensorboard",), "starts a web server that does not exit"),
    (("bash", "experiments/scripts/gpu_check.sh"), "needs a GPU with LLaDA-8B-sized memory"),
    (("hf", "download"), "downloads a released checkpoint (the tests never download: /ckpt/<name> in other "
                         "commands becomes a tiny checkpoint in the release layout)"),
)


# A command that names a gs:// bucket would need Google Cloud: tests/run/test_gcs_workdir.py runs the same
# scripts on gs:// paths against a local GCS server instead.
BUCKET_SKIP = "reads or writes a gs:// bucket (tests/run/test_gcs_workdir.py runs it against a local GCS server)"


@dataclasses.dataclass(frozen=True)
class Rule:
  """How the documented commands of one script are shrunk to CPU size.

  Attributes:
    set: flags set on every command (replacing the documented value, or added).
    replace: flags replaced only where the command gives them.
    default: flags added only where the command does not give them (before ``smoke``).
    smoke: flags naming config files (a comma-separated list for ``--configs``) whose preset becomes
      ``smoke``.
    first: flags whose comma-separated list keeps its first item.
    hf: flags set when the command evaluates an HF checkpoint (``--hf_checkpoint``), which also gets
      ``--data_dir`` of a few benchmark records (tests/tiny_data.py; skipped without ../shared/data).
    reads: flags (``""``: positional arguments) naming runs the command reads; each is made first by
      the documented command that writes it (its ``--workdir``), or by :data:`STAND_IN_RUN`'s.
    fast: the command runs in the default suite: True; False (slow-marked); or ``{flag: value}``, fast
      when it gives one of these flags (value None: any value).
    fast_set: flags of an extra default-suite variant of a slow command (the script's fast one).
    outputs: flags naming a folder the command writes; a relative path goes into the temporary folder.
    prepared: the runs it reads are prepared by the test as a LoRA run from a tiny checkpoint leaves them
      (the family its name says, else LLaDA; tests/run/test_export_hf.py ``_workdir``: config, the
      source's fingerprint record, an RL checkpoint of trained adapters without the frozen base), not
      made by train.py: a run of the tiny byte model has nothing to export, and a run from a checkpoint
      takes minutes (tests/run/test_paper_e2e.py trains and exports one for real).
  """

  set: Mapping[str, str] = dataclasses.field(default_factory=dict)
  replace: Mapping[str, str] = dataclasses.field(default_factory=dict)
  default: Mapping[str, str] = dataclasses.field(default_factory=dict)
  smoke: tuple[str, ...] = ()
  first: tuple[str, ...] = ()
  hf: Mapping[str, str] = dataclasses.field(default_factory=dict)
  reads: tuple[str, ...] = ()
  fast: bool | Mapping[str, str | None] = False
  fast_set: Mapping[str, str] | None = None
  outputs: tuple[str, ...] = ()
  prepared: bool = False


RULES: dict[str, Rule] = {
    "experiments/train.py": Rule(smoke=("--config",), set={"--progress": "false"},
                                 # a preflight for a GPU node or TPU slice runs on one simulated CPU device (the
                                 # target compilers' own runs: tests/planning/test_targets.py); a run from TFDS
                                 # datasets reads the Sudoku one, built once from ../shared/data
                                 replace={"--config.parallel.fsdp": "1", "--target": "cpu:1",
                                          "--config.data.tfds_dir": "{tfds}"},
                                 fast={"--workdir": "runs/sudoku"}),
    "experiments/evaluate.py": Rule(set={"--num_examples": "2", "--batch_size": "2", "--progress": "false"},
                                    hf={"--gen_lengths": "32", "--block_length": "32"}, reads=("--workdir",),
                                    fast={"--workdir": "runs/sudoku"}),
    "experiments/visualize.py": Rule(set={"--num_prompts": "1"}, reads=("--workdir",), fast=True),
    "experiments/compare.py": Rule(reads=("",), fast=True),
    "experiments/variants_table.py": Rule(fast=True),
    # as the check: the documented command rewrites the committed docs in place
    "experiments/tables.py": Rule(set={"--check": "true"}, fast=True),
    "experiments/benchmark.py": Rule(set={"--batch": "4", "--repeats": "1"}, fast_set={"--sections": "memory"}),
    "experiments/reproduce.py": Rule(default={"--configs": "configs/sudoku_tiny.py", "--bases": "diffu_grpo",
                                              "--arms": "base"}, smoke=("--configs",),
                                     replace={"--preset": "quick", "--num_val_examples": "8"}, set={"--seeds": "0"},
                                     first=("--bases", "--arms"), fast={"--table_from": None, "--findings_from": None}),
    "experiments/alignment_study.py": Rule(smoke=("--config",), set={"--num_batches": "2", "--preset": "quick"},
                                           fast={"--table_from": None}),
    "experiments/gradient_study.py": Rule(set={"--num_batches": "2", "--train_steps": "24", "--num_prompts": "2",
                                               "--group_size": "2"}, fast={"--table_from": None}),
    # a preset's plan compiled for the tiny model on 2 simulated devices (the 8B plan takes minutes; the target
    # compilers' own plans of the smoke preset: tests/planning/test_targets.py)
    "experiments/plan.py": Rule(smoke=("--config",), default={"--prompt_len": "16"},
                                replace={"--num_devices": "2", "--target": "cpu:2"}, set={"--model": "tiny"},
                                fast=True),
    # one dataset (the smoke run's), from the real files (the builder checks their published checksums)
    "experiments/build_tfds.py": Rule(set={"--datasets": "daca_sudoku4x4_d1", "--data_dir": "{shared}"},
                                      fast=True),
    "experiments/export_hf.py": Rule(reads=("--workdir",), outputs=("--output_dir",), prepared=True, fast=True),
}
# The run that stands in for one the documentation reads but no documented command writes
# (e.g. compare.py's runs/dps_s0 ... runs/d1_s1).
STAND_IN_RUN = "runs/sudoku"
# Flags whose bare file name is an output to put in the temporary folder.
OUTPUT_FILES = ("--json", "--output")

# --- extraction ----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class DocCommand:
  """One documented command.

  Attributes:
    where: ``file:line`` of its first line.
    text: the command as written (continuations joined, comment dropped).
    argv: its words (None: a shell construct that bash runs as written).
  """

  where: str
  text: str
  argv: tuple[str, ...] | None


def _logical_lines(block: str) -> list[tuple[int, str]]:
  """(line offset, text) of each logical line: bash's backslash-newline removed."""
  out, start, buf = [], 0, ""
  for i, line in enumerate(block.split("\n")):
    if not buf:
      start = i
    if line.endswith("\\"):
      buf += line[:-1]
      continue
    out.append((start, buf + line))
    buf = ""
  if buf:
    out.append((start, buf))
  return out


def extract(text: str, name: str) -> list[DocCommand]:
  """The commands of one markdown text (see the module docstring)."""
  commands: list[DocCommand] = []
  for m in _BLOCK.finditer(text):
    first = text.count("\n", 0, m.start(2)) + 1
    previous: tuple[str, ...] | None = None
    for offset, line in _logical_lines(m.group(2)):
      stripped = line.strip()
      if not stripped or stripped.startswith("#"):
        continue
      where = f"{name}:{first + offset}"
      if stripped.startswith("for ") or "; do " in stripped:
        commands.append(DocCommand(where, stripped, None))
        continue
      words = shlex.split(stripped, comments=True)
      if words[:1] == ["..."]:
        if previous is None:
          raise ValueError(f"{where}: '...' continues no command")
        words = list(previous) + words[1:]
      words = [w for w in words if not (w.startswith("[") and w.endswith("]"))]  # optional flags
      parts, part = [], []
      for w in words + ["&&"]:
        if w == "&&":
          parts.append(tuple(part))
          part = []
        else:
          part.append(w)
      for argv in parts:
        commands.append(DocCommand(where, shlex.join(argv), argv))
        previous = argv
  return commands


def doc_commands(root: pathlib.Path = ROOT) -> list[DocCommand]:
  """Every command of README.md and docs/**/*.md, in order."""
  files = sorted({p for g in DOC_GLOBS for p in root.glob(g) if p.is_file()})
  return [c for p in files for c in extract(p.read_text(encoding="utf-8"), str(p.relative_to(root)))]


# --- planning ----------------------------------------------------------------------------------------------


class Uncovered(Exception):
  """A documented command that no rule covers and no skip names."""


@dataclasses.dataclass(frozen=True)
class Plan:
  """What the test does with one command.

  Attributes:
    skip: the reason it is not run ("" when it is).
    argv: the rewritten command (placeholders ``{tmp}``, ``{ckpt:<family>}``, ``{data}``), or None for
      a shell command (``shell``).
    shell: the shell text, rewritten, for bash.
    reads: README run paths to make before it runs.
    prepared: whether the test prepares them (:attr:`Rule.prepared`) instead of running their producer.
    fast: whether it runs in the default suite.
    needs_data: whether it needs ../shared/data.
  """

  skip: str = ""
  argv: tuple[str, ...] | None = None
  shell: str = ""
  reads: tuple[str, ...] = ()
  prepared: bool = False
  fast: bool = False
  needs_data: bool = False


def flag_values(argv: tuple[str, ...]) -> dict[str, str]:
  """``{--flag: value}`` of the ``--flag=value`` words."""
  return dict(w.split("=", 1) for w in argv if w.startswith("--") and "=" in w)


def _set(argv: list[str], flag: str, value: str) -> list[str]:
  """``flag=value`` in place of the flag's first occurrence (absl reads ``--config.x`` overrides only
  after ``--config``), or appended; later occurrences dropped."""
  at = [i for i, w in enumerate(argv) if w == flag or w.startswith(flag + "=")]
  if not at:
    return argv + [f"{flag}={value}"]
  return [f"{flag}={value}" if i == at[0] else w for i, w in enumerate(argv) if i == at[0] or i not in at]


def _with_smoke(spec: str) -> str:
  """The smoke form of a ``--config`` value: ``file.py`` / ``file.py:default`` -> ``file.py:smoke`` (the
  tiny configs), ``file.py:<name>`` -> ``file.py:<name>,smoke`` (configs/paper.py's presets)."""
  path, _, preset = spec.partition(":")
  if preset in ("", "default", "smoke") or preset.endswith(",smoke"):
    return spec if preset.endswith("smoke") else f"{path}:smoke"
  return f"{spec},smoke"


def _with_smoke_list(specs: str) -> str:
  """:func:`_with_smoke` of each config file of a comma-separated ``--configs`` list."""
  return ",".join(_with_smoke(s) for s in specs.split(","))


def _path(value: str) -> str:
  """The generic rewrites of one path value."""
  if value.startswith("/ckpt/"):
    name = value[len("/ckpt/"):].lower()
    family = "llada" if "llada" in name else "dream" if "dream" in name else ""
    if not family:
      raise Uncovered(f"{value}: a checkpoint path must name its family (LLaDA or Dream)")
    return f"{{ckpt:{family}}}"
  if value.startswith("runs/"):
    return "{tmp}/" + value
  return value


def plan(cmd: DocCommand) -> Plan:
  """How :func:`tests.test_doc_commands` runs ``cmd`` (see the module docstring).

  Raises:
    Uncovered: the command is neither skipped nor covered by a rule.
  """
  if cmd.argv is None:
    if "experiments/train.py" not in cmd.text:
      raise Uncovered(f"{cmd.where}: shell command {cmd.text!r} is covered by no rule")
    return Plan(shell=re.sub(r"(?<![\w/.])runs/", "{tmp}/runs/", cmd.text), fast=False)
  for prefix, reason in SKIPS:
    if cmd.argv[:len(prefix)] == prefix:
      return Plan(skip=reason)
  if any(re.search(r"(^|=)gs://", w) for w in cmd.argv):
    return Plan(skip=BUCKET_SKIP)
  script = cmd.argv[1] if len(cmd.argv) > 1 and cmd.argv[0] == "python" else ""
  rule = RULES.get(script)
  if rule is None:
    raise Uncovered(f"{cmd.where}: {cmd.text!r} is covered by no rule (add one to tests/doc_commands.py RULES, "
                    "or a reason to SKIPS)")
  argv = list(cmd.argv)
  given = flag_values(cmd.argv)
  for flag, value in rule.default.items():
    if flag not in given:
      argv = _set(argv, flag, value)
  for flag in rule.smoke:
    value = flag_values(tuple(argv)).get(flag)
    if value is not None:
      argv = _set(argv, flag, _with_smoke_list(value) if flag == "--configs" else _with_smoke(value))
  for flag in rule.first:
    if flag in given:
      argv = _set(argv, flag, given[flag].split(",")[0])
  for flag, value in rule.replace.items():
    if flag in given:
      argv = _set(argv, flag, value)
  for flag, value in rule.set.items():
    argv = _set(argv, flag, value)
  hf = "--hf_checkpoint" in given
  if hf:
    for flag, value in rule.hf.items():
      argv = _set(argv, flag, value)
    argv = _set(argv, "--data_dir", "{data}")
  reads = tuple(v for f in rule.reads for v in ([w for w in cmd.argv[2:] if not w.startswith("-")] if f == ""
                                                else [given[f]] if f in given else []) if v.startswith("runs/"))
  out = []
  for w in argv:
    if w.startswith("--") and "=" in w:
      flag, value = w.split("=", 1)
      if flag in OUTPUT_FILES and "/" not in value:
        value = "{tmp}/" + value
      elif flag in rule.outputs and not value.startswith(("/", "runs/")):
        value = "{tmp}/" + value
      w = f"{flag}={_path(value)}"
    else:
      w = _path(w)
    out.append(w)
  if isinstance(rule.fast, bool):
    fast = rule.fast
  else:
    fast = any(f in given and (v is None or given[f] == v) for f, v in rule.fast.items())
  return Plan(argv=tuple(out), reads=reads, prepared=rule.prepared, fast=fast, needs_data=hf)


def fast_variant(cmd: DocCommand) -> Plan | None:
  """The default-suite variant of a slow command whose rule has ``fast_set`` (None otherwise)."""
  if cmd.argv is None or len(cmd.argv) < 2:
    return None
  rule = RULES.get(cmd.argv[1])
  p = plan(cmd)
  if rule is None or rule.fast_set is None or p.skip or p.fast:
    return None
  argv = list(p.argv)
  for flag, value in rule.fast_set.items():
    argv = _set(argv, flag, value)
  return dataclasses.replace(p, argv=tuple(argv), fast=True)


def producer(run: str, commands: list[DocCommand]) -> DocCommand:
  """The documented train.py command that writes ``run`` (else :data:`STAND_IN_RUN`'s)."""
  for target in (run, STAND_IN_RUN):
    for c in commands:
      if c.argv and c.argv[1:2] == ("experiments/train.py",) and flag_values(c.argv).get("--workdir") == target:
        return c
  raise Uncovered(f"no documented train.py command writes {run} or the stand-in {STAND_IN_RUN}")
