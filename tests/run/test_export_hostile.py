"""The export cannot hurt: a source folder's symlinks out of it never bring their targets into the
export (a folder users publish), FIFOs and devices are skipped, and an output folder that is, holds or
lies inside the run's workdir or the source is refused before anything is written or deleted."""
import os
import pathlib
import subprocess
import sys

import pytest

from daca_jax.errors import ConfigError, DataError
from daca_jax.run.checkpoint import Checkpointer
from daca_jax.run.export import export_workdir
from tests.run.test_export_hf import ROOT, _source, _workdir

pytest.importorskip("safetensors.numpy")
SECRET = "hf_secret_token_8d1f0c"  # in a file beside the source and in this process's environment
quiet = dict(log=lambda _: None)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  """A source with hostile side entries, and a workdir trained from it."""
  base = tmp_path_factory.mktemp("hostile_export")
  ckpt = _source(base / "src", "llada")
  (base / "token").write_text(SECRET)
  (ckpt / "README.md").symlink_to("../token")  # relative, out of the folder
  (ckpt / "NOTICE").symlink_to("/proc/self/environ")  # the exporting process's environment
  (ckpt / "LICENSE.txt").symlink_to("LICENSE")  # inside: copied as the target's bytes
  (ckpt / "broken").symlink_to("nowhere")
  os.mkfifo(ckpt / "pipe")  # reading it would block the export forever
  wd, _, _ = _workdir(base / "wd", ckpt)
  return ckpt, wd, base


def test_symlinks_out_of_the_source_are_never_followed(run, monkeypatch):
  ckpt, wd, base = run
  monkeypatch.setenv("DACA_TEST_SECRET", SECRET)
  done = export_workdir(wd, base / "out", **quiet)
  out = base / "out"
  names = sorted(p.name for p in out.iterdir())
  assert not {"README.md", "NOTICE", "pipe", "broken"} & set(names)
  assert (out / "LICENSE.txt").read_bytes() == (ckpt / "LICENSE").read_bytes()
  assert not any(p.is_symlink() for p in out.iterdir())
  for p in out.iterdir():
    assert SECRET.encode() not in p.read_bytes(), p
  assert sorted(s.split(" ")[0] for s in done.report.skipped) == ["NOTICE", "README.md", "broken", "pipe"]


@pytest.mark.parametrize("where", ["rl", ".", "nested/deeper", "link"])
def test_an_export_into_the_workdir_is_refused_and_the_checkpoints_stay(run, where):
  _, wd, base = run
  target = wd / where
  if where == "link":
    target = base / "link_to_rl"
    if not target.exists():
      target.symlink_to(wd / "rl")
  with pytest.raises(ConfigError, match=r"--output_dir=.*neither is, holds nor lies inside the run's workdir"):
    export_workdir(wd, target, overwrite=True, **quiet)
  ckpt = Checkpointer(wd / "rl")
  assert ckpt.all_steps() == [3]
  ckpt.restore(3, None)  # complete and verified against its checksums
  ckpt.close()


def test_an_output_that_holds_the_source_or_a_foreign_folder_is_refused(run):
  ckpt, wd, base = run
  for bad in (ckpt, ckpt / "export"):
    with pytest.raises(ConfigError, match=r"neither is, holds nor lies inside the source checkpoint"):
      export_workdir(wd, bad, overwrite=True, **quiet)
  foreign = base / "someone_elses"
  (foreign / "model").mkdir(parents=True)
  (foreign / "config.json").write_text("{}")
  with pytest.raises(DataError, match=r"is not an earlier export of run"):
    export_workdir(wd, foreign, overwrite=True, **quiet)
  assert (foreign / "config.json").read_text() == "{}" and (foreign / "model").is_dir()


def test_command_line_overwrite_into_the_workdir_exits_2(run):
  _, wd, _ = run
  cmd = [sys.executable, str(ROOT / "experiments" / "export_hf.py"), f"--workdir={wd}",
         f"--output_dir={wd / 'rl'}", "--overwrite"]
  out = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu"))
  assert out.returncode == 2, out.stderr
  assert out.stderr.strip().splitlines()[-1].startswith("error: --output_dir=") and "Traceback" not in out.stderr
  assert Checkpointer(wd / "rl").all_steps() == [3]


def test_an_output_that_is_a_symlink_is_written_where_it_leads(run):
  """``--output_dir`` a link to an empty folder, or a dangling one: the export is written at the target
  (the final rename cannot put a folder in place of the link: it failed after the whole export), the
  link is left as it was, and ``--overwrite`` through the link replaces the earlier export there."""
  _, wd, base = run
  (base / "empty_target").mkdir()
  (base / "to_empty").symlink_to(base / "empty_target")
  (base / "to_nowhere").symlink_to(base / "not_yet")
  for link, target in (("to_empty", "empty_target"), ("to_nowhere", "not_yet")):
    done = export_workdir(wd, base / link, **quiet)
    assert done.output_dir == base / target and (base / target / "daca_export.json").is_file()
    assert (base / link).is_symlink() and (base / link).resolve() == base / target
  (base / "empty_target" / "stale").write_text("from before")
  export_workdir(wd, base / "to_empty", overwrite=True, **quiet)
  assert (base / "to_empty").is_symlink() and not (base / "empty_target" / "stale").exists()
  assert (base / "empty_target" / "daca_export.json").is_file()
