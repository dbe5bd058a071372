"""Every shell command of README.md and docs/**/*.md runs as written, shrunk to CPU size by the rewrites
of tests/doc_commands.py (its table says which commands are skipped and why; a command covered by no
rule fails here). Slow commands are slow-marked; every script keeps one in the default suite."""
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from tests import doc_commands as dc

COMMANDS = dc.doc_commands()


def _cases():
  seen = set()
  for cmd in COMMANDS:
    if (cmd.text, cmd.argv) in seen:
      continue  # the same command on another page (the docs repeat the README's): run once
    seen.add((cmd.text, cmd.argv))
    try:
      p = dc.plan(cmd)
    except dc.Uncovered:
      yield pytest.param(cmd, False, id=cmd.where)  # fails in the default suite
      continue
    if p.skip:
      continue  # listed by test_every_command_is_run_or_skipped_for_a_reason
    yield pytest.param(cmd, False, id=cmd.where, marks=() if p.fast else pytest.mark.slow)
    if dc.fast_variant(cmd) is not None:
      yield pytest.param(cmd, True, id=f"{cmd.where}-fast")


class _Env:
  """Temporary folders, tiny checkpoints, tiny data and the runs other commands read (made once)."""

  def __init__(self, tmp: pathlib.Path):
    self.tmp = tmp
    self.ckpts: dict[str, pathlib.Path] = {}
    self.runs: dict[str, pathlib.Path] = {}
    self.data: pathlib.Path | None = None
    self.count = 0

  def ckpt(self, family: str) -> pathlib.Path:
    if family not in self.ckpts:
      from tests.hf_fixtures import write_tiny_checkpoint

      # the smoke shape of configs/paper.py (equal fields are no contradiction of the checkpoint)
      self.ckpts[family] = write_tiny_checkpoint(self.tmp / "ckpt" / family, family, layers=1, n_heads=2,
                                                 n_kv_heads=2)
    return self.ckpts[family]

  def tiny_data(self) -> pathlib.Path:
    if self.data is None:
      from tests.tiny_data import write_tiny_data

      self.data = write_tiny_data(self.tmp / "data", n=2)
      if self.data is None:
        pytest.skip("the command evaluates benchmark files: ../shared/data is absent")
    return self.data

  def shared(self) -> pathlib.Path:
    from tests.tiny_data import shared_data

    data = shared_data()
    if data is None:
      pytest.skip("the command reads the benchmark files: ../shared/data is absent")
    return data

  def tfds(self) -> pathlib.Path:
    """A TFDS data directory with the Sudoku dataset, built once from ../shared/data."""
    out = self.tmp / "tfds"
    if not out.exists():
      pytest.importorskip("tensorflow_datasets")
      from daca_jax.data import tfds_builders

      tfds_builders.build(["daca_sudoku4x4_d1"], out, str(self.shared()), log=lambda _: None)
    return out

  def fresh(self) -> pathlib.Path:
    self.count += 1
    d = self.tmp / f"cmd{self.count}"
    d.mkdir()
    return d

  def prepared(self, run: str) -> pathlib.Path:
    """A LoRA run from the tiny checkpoint of the family ``run`` names (else LLaDA), as training leaves it
    (:attr:`tests.doc_commands.Rule.prepared`), made once."""
    if run not in self.runs:
      from tests.run.test_export_hf import _workdir

      family = "dream" if "dream" in run.lower() else "llada"
      self.runs[run], _, _ = _workdir(self.fresh() / "prepared", self.ckpt(family), lora_rank=4, store_base=False)
    return self.runs[run]

  def made(self, run: str) -> pathlib.Path:
    """The folder of a documented run, made once by the command that writes it (or the stand-in's)."""
    maker = dc.producer(run, COMMANDS)
    key = f"{maker.where} {maker.text}"
    if key not in self.runs:
      where = self.fresh()
      _check(_execute(dc.plan(maker), self, where), maker)
      self.runs[key] = where / dc.flag_values(maker.argv)["--workdir"]
    return self.runs[key]


def _fill(word: str, env: _Env, tmp: pathlib.Path) -> str:
  for family in ("llada", "dream"):
    if f"{{ckpt:{family}}}" in word:
      word = word.replace(f"{{ckpt:{family}}}", str(env.ckpt(family)))
  if "{data}" in word:
    word = word.replace("{data}", str(env.tiny_data()))
  if "{shared}" in word:
    word = word.replace("{shared}", str(env.shared()))
  if "{tfds}" in word:
    word = word.replace("{tfds}", str(env.tfds()))
  return word.replace("{tmp}", str(tmp))


def _execute(p: dc.Plan, env: _Env, tmp: pathlib.Path, timeout: float = 3600) -> subprocess.CompletedProcess:
  for run in p.reads:  # the runs it reads, copied from where they were made
    target = tmp / run
    if not target.exists():
      target.parent.mkdir(parents=True, exist_ok=True)
      shutil.copytree(env.prepared(run) if p.prepared else env.made(run), target)
  child = dict(os.environ, PYTHONPATH=str(dc.ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
  if p.argv is None:
    return subprocess.run(["bash", "-c", _fill(p.shell, env, tmp).replace("python ", f"{sys.executable} ")],
                          cwd=dc.ROOT, env=child, capture_output=True, text=True, timeout=timeout)
  argv = [sys.executable] + [_fill(w, env, tmp) for w in p.argv[1:]]
  return subprocess.run(argv, cwd=dc.ROOT, env=child, capture_output=True, text=True, timeout=timeout)


def _check(proc: subprocess.CompletedProcess, cmd: dc.DocCommand) -> None:
  assert proc.returncode == 0, (f"{cmd.where}: {cmd.text}\nexit {proc.returncode}\n"
                                f"{(proc.stdout + proc.stderr)[-3000:]}")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
  return _Env(tmp_path_factory.mktemp("doc_commands"))


@pytest.mark.parametrize("cmd,fast_variant", list(_cases()))
def test_documented_command_runs(cmd, fast_variant, env):
  p = dc.fast_variant(cmd) if fast_variant else dc.plan(cmd)  # Uncovered: the command has no rule
  _check(_execute(p, env, env.fresh()), cmd)


def test_every_command_is_run_or_skipped_for_a_reason():
  """The documentation has commands, each planned; every script with a command keeps a fast one."""
  assert len(COMMANDS) > 20
  plans = {c.where + " " + c.text: dc.plan(c) for c in COMMANDS}
  skipped = {k: p.skip for k, p in plans.items() if p.skip}
  assert skipped and all(skipped.values())
  scripts = {c.argv[1] for c in COMMANDS if c.argv and c.argv[0] == "python" and not dc.plan(c).skip}
  assert scripts <= set(dc.RULES)
  for script in scripts:
    cmds = [c for c in COMMANDS if c.argv and c.argv[1:2] == (script,)]
    assert any(dc.plan(c).fast or dc.fast_variant(c) for c in cmds), f"{script}: no command in the default suite"


MARKDOWN = """
Intro `python inline.py` is not a command.

```bash
pip install -e '.[run]' && python experiments/train.py --config=configs/sudoku_tiny.py --workdir=runs/a  # go
# a comment
python experiments/evaluate.py --hf_checkpoint=/ckpt/Dream-v0-Instruct-7B \\
    --tasks=gsm8k --output_dir=runs/dream_eval
... --seed=3 [--data_dir=/somewhere]
python experiments/reproduce.py --table_from=docs/results/x.json,\\
docs/results/y.json
for i in 0 1; do python experiments/train.py --config=configs/sudoku_tiny.py:smoke --workdir=runs/two & done; wait
```

```python
print("not a shell block")
```
"""


def test_extraction_and_rewrites_of_the_readme_shorthands():
  cmds = dc.extract(MARKDOWN, "X.md")
  assert [c.where for c in cmds] == ["X.md:5", "X.md:5", "X.md:7", "X.md:9", "X.md:10", "X.md:12"]
  assert cmds[0].argv == ("pip", "install", "-e", ".[run]") and dc.plan(cmds[0]).skip
  train = dc.plan(cmds[1])
  assert "--config=configs/sudoku_tiny.py:smoke" in train.argv and "--workdir={tmp}/runs/a" in train.argv
  dream = dc.plan(cmds[2])
  assert "--hf_checkpoint={ckpt:dream}" in dream.argv and "--data_dir={data}" in dream.argv
  assert "--gen_lengths=32" in dream.argv and dream.needs_data and not dream.fast
  assert cmds[3].argv[-1] == "--seed=3" and not any("somewhere" in w for w in cmds[3].argv)  # '...', [optional]
  assert cmds[4].argv[2] == "--table_from=docs/results/x.json,docs/results/y.json" and dc.plan(cmds[4]).fast
  shell = dc.plan(cmds[5])
  assert shell.argv is None and "--workdir={tmp}/runs/two" in shell.shell and not shell.fast
  with pytest.raises(dc.Uncovered, match="covered by no rule"):
    dc.plan(dc.DocCommand("Y.md:1", "python experiments/new_tool.py --x=1", ("python", "experiments/new_tool.py",
                                                                           "--x=1")))
  with pytest.raises(dc.Uncovered, match="must name its family"):
    dc.plan(dc.DocCommand("Y.md:2", "", ("python", "experiments/evaluate.py", "--hf_checkpoint=/ckpt/Other-7B")))


@pytest.mark.parametrize("extra", [(), ("--adapter_only",)])
def test_export_rule_runs_a_readme_export_command(env, extra):
  """The rule that runs README's export commands (none yet): on a prepared LoRA run from a checkpoint, the
  output folder moved into the temporary folder."""
  argv = ("python", "experiments/export_hf.py", "--workdir=runs/d1_gsm8k_daca", "--output_dir=exports/x", *extra)
  cmd = dc.DocCommand("X.md:1", " ".join(argv), argv)
  p = dc.plan(cmd)
  assert p.fast and p.prepared and p.reads == ("runs/d1_gsm8k_daca",)
  assert p.argv[2:4] == ("--workdir={tmp}/runs/d1_gsm8k_daca", "--output_dir={tmp}/exports/x")
  tmp = env.fresh()
  _check(_execute(p, env, tmp), cmd)
  provenance = json.loads((tmp / "exports" / "x" / "daca_export.json").read_text())
  assert provenance["kind"] == ("peft_adapter" if extra else "merged") and provenance["source"] == str(env.ckpt("llada"))
  assert (tmp / "exports" / "x" / ("adapter_model.safetensors" if extra else "model.safetensors.index.json")).is_file()
  assert not (dc.ROOT / "exports").exists()
