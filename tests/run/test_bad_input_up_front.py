"""Bad input to the experiments/*.py entry points is refused before any work, in one line naming the flag
(or the file) and what is allowed, with exit status 2: an output folder that is empty, a file or under a
file; a damaged or non-object JSON input; a --configs / --study file that does not run or returns the
wrong thing; a bad flag of any script (not absl's "FATAL Flags parsing error" or a usage dump, exit 1)."""
import os
import pathlib
import re
import subprocess
import sys

import pytest

from daca_jax.errors import ConfigError, DataError

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_an_output_folder_that_is_empty_a_file_or_under_a_file_is_refused(tmp_path):
  from daca_jax.io_utils import check_dir_path, check_file_path, check_output_dir

  blocker = tmp_path / "file"
  blocker.write_text("")
  with pytest.raises(ConfigError, match=r"^--workdir='' is not allowed: expected a folder path \(an empty one "
                                        r"would write into the current directory"):
    check_dir_path("", "--workdir")
  with pytest.raises(ConfigError, match=r"--workdir='.*/file' is not allowed: expected a folder; it is a file"):
    check_dir_path(blocker, "--workdir")
  with pytest.raises(ConfigError, match=r"--workdir='.*/file/a/b' is not allowed: expected a folder; .*/file is a file"):
    check_dir_path(blocker / "a" / "b", "--workdir")
  with pytest.raises(ConfigError, match=r"--output_dir='.*/file' is not allowed"):
    check_output_dir(blocker, overwrite=True)
  loop = tmp_path / "loop"  # a symlink loop: making the folder failed "File exists", exit 1
  loop.symlink_to(loop)
  for path, where in ((loop, "it is"), (loop / "run", f"{loop} is")):
    with pytest.raises(ConfigError, match=f"expected a folder; {where} a symlink loop"):
      check_dir_path(path, "--workdir")
  with pytest.raises(ConfigError, match=f"{loop} is a symlink loop"):
    check_file_path(loop / "out.json", "--json")
  (tmp_path / "to_nowhere").symlink_to(tmp_path / "not_yet")  # a dangling link is written where it leads
  assert check_dir_path(tmp_path / "to_nowhere", "--workdir") == tmp_path / "to_nowhere"
  assert check_dir_path(tmp_path / "new" / "run", "--workdir") == tmp_path / "new" / "run"  # made later
  assert check_dir_path(".", "--workdir") == pathlib.Path.cwd()  # the current directory, said explicitly
  with pytest.raises(ConfigError, match=r"--json='.*' is not allowed: expected a file path; it is a folder"):
    check_file_path(tmp_path, "--json")
  with pytest.raises(ConfigError, match=r"--json='.*/file/x.json' is not allowed: expected a file path in a folder; .*/file is a file"):
    check_file_path(blocker / "x.json", "--json")
  assert check_file_path(tmp_path / "d" / "x.json", "--json") == tmp_path / "d" / "x.json"


def test_run_main_job_refuses_an_empty_workdir_before_any_work(tmp_path, monkeypatch):
  """``--workdir=""`` wrote the whole run (checkpoints, results.json, ...) into the current directory."""
  from daca_jax.run.pipeline import run_main_job
  from daca_jax.config.train import TrainConfig

  monkeypatch.chdir(tmp_path)
  (tmp_path / "x").write_text("")
  for bad in ("", "x", "x/run"):
    with pytest.raises(ConfigError, match=rf"^workdir='{bad}' is not allowed: expected a folder"):
      run_main_job(TrainConfig(), bad, show_progress=False, log=lambda *_: None)
  assert sorted(p.name for p in tmp_path.iterdir()) == ["x"]


def test_evaluation_and_pictures_refuse_an_output_dir_that_is_a_file_before_loading_a_model(tmp_path):
  """evaluate.py --output_dir=<a file> failed with "Not a directory" only after loading the model."""
  from daca_jax.evaluation import EvalProtocol, run_evaluation
  from daca_jax.run.visualize import visualize_checkpoint

  blocker = tmp_path / "file"
  blocker.write_text("")
  with pytest.raises(ConfigError, match=r"--output_dir='.*/file' is not allowed: expected a folder; it is a file"):
    run_evaluation(None, ["sudoku4x4"], EvalProtocol(gen_lengths=(32,), block_length=32), blocker)
  with pytest.raises(ConfigError, match=r"--output_dir='.*/file/viz' is not allowed"):
    visualize_checkpoint(workdir=str(tmp_path / "no_run"), output_dir=blocker / "viz")


def _readers():
  from daca_jax.planning import report, sweep
  from daca_jax.reports import reproduce, table_files, variants
  from daca_jax.studies import estimator_study
  return {"plan.py --render": lambda p: report.render_file(p, mfu=0.4, usable=0.9),
          "plan.py --sweep --json": lambda p: sweep.sweep(str(p), ["false"]),
          "plan.py --paper_sweep --json": lambda p: sweep.paper_sweep(str(p), ["false"], "c.py", ["x"]),
          "variants_table.py --results": variants.read_variants,
          "reproduce.py --table_from": reproduce.read_rows,
          "estimator_study.py --table_from": estimator_study.read_results,
          "tables.py --render": table_files.read_table_file}


@pytest.mark.parametrize("content, what", [('{"rows": [', r"is damaged: not valid JSON \(.* at line 1 column 11"),
                                           ("[1, 2]", r": not |rows\[0\] lacks|must be an object with the fields"),
                                           ('{"x": 1}', r": not |'what' must be"),
                                           (None, r"is a folder, not a JSON file")])
@pytest.mark.parametrize("reader", list(_readers()))
def test_a_damaged_or_foreign_json_input_is_a_data_error_naming_the_file(tmp_path, content, what, reader):
  """These readers raised JSONDecodeError / TypeError / KeyError tracebacks, or (reproduce.py --table_from)
  a line that did not name the file."""
  path = tmp_path / "in.json"
  if content is None:
    path.mkdir()
  else:
    path.write_text(content)
  with pytest.raises(DataError, match=what) as e:
    _readers()[reader](path)
  assert str(path) in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("body, getter_error", [
    ("raise RuntimeError('boom')\n", r"a file that runs: it raised RuntimeError: boom at .*/user.py:1$"),
    ("def get_config(\n", r"a Python file that parses: SyntaxError: "),
    ("X = 1\n", r"a file defining get_config\(\) \(as configs/\*.py do\); it defines no get_config$"),
    ("def get_config():\n  return 3\n", r"get_config\(\) returns a config .*; it returned int$"),
    ("def get_config():\n  return {}['x']\n", r"a file that runs: it raised KeyError: 'x' at .*/user.py:2$"),
    (None, r"an existing Python file .*user.py is no such file$"),
])
def test_a_configs_file_that_does_not_run_is_one_config_error(tmp_path, body, getter_error):
  """reproduce.py --configs=<file> gave the file's traceback (exit 1), or for a get_config() returning a
  number a line that named neither the flag nor the file."""
  from daca_jax.reports.reproduce_run import load_config

  path = tmp_path / "user.py"
  if body is not None:
    path.write_text(body)
  with pytest.raises(ConfigError, match=r"^--configs='.*/user.py' is not allowed: expected (a file whose )?" + getter_error):
    load_config(str(path))


@pytest.mark.parametrize("body, error", [
    ("raise RuntimeError('boom')\n", r"a file that runs: it raised RuntimeError: boom at .*/study.py:1$"),
    ("X = 1\n", r"a file defining get_arms\(\) .*; it defines no get_arms$"),
    ("def get_arms():\n  return [1]\n", r"get_arms\(\) returns \{arm name: .*; it returned list \[1\]$"),
    ("def get_arms():\n  return {'a': 'rl.credit=dps'}\n", r"get_arms\(\) returns .*; its arm 'a' is 'rl.credit=dps'$"),
    ("def get_arms():\n  return {'a': []}\ndef get_references():\n  return 1 / 0\n",
     r"a file that runs: it raised ZeroDivisionError: division by zero at .*/study.py:4$"),
    ("def get_arms():\n  return {'a': []}\ndef get_references():\n  return ['a']\n",
     r"get_references\(\) returns \{arm name: reference arm name\}; it returned \['a'\]$"),
])
def test_a_study_file_that_does_not_run_or_returns_the_wrong_type_is_one_config_error(tmp_path, body, error):
  """reproduce.py --study=<file>: a traceback of the file's error, or AttributeError 'list' object has no
  attribute 'values'."""
  from daca_jax.reports import reproduce_run as rr

  path = tmp_path / "study.py"
  path.write_text(body)
  with pytest.raises(ConfigError, match=r"^--study='.*/study.py' is not allowed: expected (a file whose )?" + error):
    rr.requested_cells({}, [0], bases=[], arms=[], study=str(path))


def test_every_script_parses_its_flags_up_front():
  """evaluate.py, export_hf.py, visualize.py and the others ran absl's app.run: a bad flag printed "FATAL
  Flags parsing error" with exit 1; gradient_study.py and loader_memory.py raised app.UsageError, which
  prints the whole usage text."""
  for script in sorted((REPO / "experiments").glob("*.py")):
    text = script.read_text()
    assert "app.run(" not in text and "UsageError" not in text, script.name
    assert "cli_errors.run(main)" in text, script.name


def test_a_bad_flag_and_an_empty_workdir_are_one_line_with_exit_2(tmp_path):
  env = dict(os.environ, PYTHONPATH=str(REPO), JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, str(REPO / "experiments/evaluate.py"), "--output_dir=x", "--bogus=1"],
                        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 2 and proc.stderr.strip().splitlines() == ["error: Unknown command line flag 'bogus'"], \
      proc.stderr[-2000:]
  proc = subprocess.run([sys.executable, str(REPO / "experiments/train.py"), f"--config={REPO}/configs/sudoku_tiny.py:smoke",
                         "--workdir="], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 2, proc.stderr[-2000:]
  assert proc.stderr.strip().splitlines()[-1].startswith("error: --workdir='' is not allowed: expected a folder path")
  assert "Traceback" not in proc.stderr and not list(tmp_path.iterdir())  # nothing written where it ran


def test_tables_py_refuses_a_folder_given_as_a_markdown_file(tmp_path):
  """It was an IsADirectoryError: exit 1 and no word on what to give."""
  from daca_jax.reports import doc_tables
  from daca_jax.reports.table_commands import TableError

  with pytest.raises(TableError, match="is a folder, not a markdown file"):
    doc_tables.refresh_docs([tmp_path])


def test_a_workdir_that_is_a_link_leading_nowhere_yet_gets_its_target_made(tmp_path):
  """train.py --workdir=<a dangling link> failed with 'File exists' (exit 1) after the model was built;
  the link is followed, as export_hf follows a dangling --output_dir."""
  from daca_jax.io_utils import check_dir_path, make_dir

  link = tmp_path / "runs"
  link.symlink_to(tmp_path / "elsewhere" / "run")
  assert check_dir_path(link, "--workdir") == link
  assert make_dir(link) == link and (tmp_path / "elsewhere" / "run").is_dir() and link.is_dir()
  assert make_dir(link) == link  # an existing folder: nothing to do


URLS = ("gs://bucket/run", "s3://bucket/run", " GS://Bucket/x", "file:///tmp/run")


@pytest.mark.parametrize("url", URLS)
def test_an_object_store_url_is_refused_where_a_local_path_is_read_or_written(url, tmp_path, monkeypatch):
  """``pathlib`` reads ``gs://bucket/run`` as the relative folders ``gs:/bucket/run``: the run went into a local
  folder named ``gs:`` and its TensorBoard writer failed with a traceback at the end. Every gate of a path read
  or written locally refuses a URL in one line, before any work, creating nothing; a run's workdir takes
  ``gs://`` (tests/run/test_gcs_workdir.py), and so does a TFDS folder; they refuse every other scheme."""
  from daca_jax.config.model import ModelConfig
  from daca_jax.config.train import DataConfig, TrainConfig
  from daca_jax.io_utils import check_dir_path, check_file_path, check_output_dir, is_url
  from daca_jax.run.eval_models import load_model, run_config
  from daca_jax.run.export import export_workdir
  from daca_jax.run.pipeline import run_main_job

  monkeypatch.chdir(tmp_path)
  expected = r"is not allowed: expected a path of this machine's file system \(this one is read or written locally"
  other_scheme = r"is not allowed: expected a folder path, or a gs://bucket/folder URL \(the only URL scheme"
  assert is_url(url) and is_url(pathlib.Path(url.strip())) and not is_url("runs/gs:x") and not is_url("/tmp/a://b")
  assert not is_url("") and not is_url("C://x") and not is_url("C:/x") and not is_url(pathlib.Path("runs/gs:/x"))
  local_gates = ((lambda: check_dir_path(url, "--workdir"), "--workdir"),
                 (lambda: check_output_dir(url, overwrite=True), "--output_dir"),
                 (lambda: check_file_path(url + "/plan.json", "--json"), "--json"),
                 (lambda: DataConfig(data_dir=url).validate(), "data.data_dir"),
                 (lambda: ModelConfig(init_checkpoint=url).validate(), "model.init_checkpoint"),
                 (lambda: load_model(hf_checkpoint=url), "--hf_checkpoint"),
                 (lambda: load_model(workdir=str(tmp_path), data_dir=url), "--data_dir"))
  workdir_gates = ((lambda: run_main_job(TrainConfig(), url, show_progress=False, log=lambda *_: None), "workdir"),
                   (lambda: run_config(url), "--workdir"),
                   (lambda: load_model(workdir=url), "--workdir"),
                   (lambda: export_workdir(url, tmp_path / "out"), "--workdir"),
                   (lambda: DataConfig(source="tfds", tfds_dir=url).validate(), "data.tfds_dir"))
  gates = [(call, field, expected) for call, field in local_gates]
  if not url.startswith("gs://"):  # gs:// is a workdir the bucket is asked about (tests/run/test_gcs_workdir.py)
    gates += [(call, field, other_scheme) for call, field in workdir_gates]
  for call, field, says in gates:
    given = url + "/plan.json" if field == "--json" else url
    with pytest.raises(ConfigError, match=rf"^{field}={re.escape(repr(given))} {says}"):
      call()
  with pytest.raises(ConfigError, match=rf"^--workdir='gs:/b/r' {expected}"):  # pathlib folds gs:// into gs:/
    check_dir_path(pathlib.Path("gs://b/r"), "--workdir")
  assert not list(tmp_path.iterdir())  # nothing written, no local folder named "gs:"


def test_train_py_refuses_another_url_scheme_in_one_line_and_writes_nothing(tmp_path):
  env = dict(os.environ, PYTHONPATH=str(REPO), JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, str(REPO / "experiments/train.py"), f"--config={REPO}/configs/sudoku_tiny.py:smoke",
                         "--workdir=s3://bucket/run"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 2, proc.stderr[-2000:]
  assert proc.stderr.strip().splitlines()[-1].startswith("error: --workdir='s3://bucket/run' is not allowed: expected a "
                                                         "folder path, or a gs://bucket/folder URL")
  assert "Traceback" not in proc.stderr and not list(tmp_path.iterdir())


@pytest.mark.parametrize("url, says", [
    ("gs://bucket/q?a", "it has ['?']"),  # TensorStore would write the arrays of gs://bucket/q?a into gs://bucket/q
    ("gs://bucket/x#y", "it has ['#']"),
    ("gs://bucket/a*b", "it has ['*']"),
    ("gs://bucket/c\x01d", "it has ['\\x01']"),
    ("gs://bucket//x", "without '.', '..' or empty segments"),
    ("gs://bucket/a/../b", "without '.', '..' or empty segments"),
    ("gs:/bucket/x", "two slashes after 'gs:'"),  # else the local folders gs:/bucket/x
    ("GS:/bucket/x", "two slashes after 'gs:'"),
    ("gs:bucket/x", "two slashes after 'gs:'"),  # else the local folder ./gs:bucket/x
    ("gs://bucket\n/x", "('bucket\\n' has not)"),  # a regex's '$' matches before a final newline
    (" gs://bucket/x", "without leading or trailing white space"),
    ("gs://bucket/x\n", "without leading or trailing white space"),
    ("gs://192.168.5.4/x", "not an IP address"),
    ("gs://goog-data/x", "not starting with 'goog'"),
    ("gs://a..b/x", "each part starting and ending with a letter or digit"),
    ("gs://bucket/" + "d" * 800, "at most 768 characters (this one has 800"),  # GCS: 1024-byte object names
])
def test_a_bucket_url_that_would_be_misread_is_refused_before_the_bucket_is_asked(url, says, tmp_path, monkeypatch):
  """Checked on the text alone (no bucket is contacted), for every flag that takes a bucket folder."""
  from daca_jax.io_utils import check_folder_or_bucket, check_workdir_path, existing_workdir

  monkeypatch.chdir(tmp_path)
  for check, flag in ((check_workdir_path, "--workdir"), (existing_workdir, "--workdir"),
                      (check_folder_or_bucket, "data.tfds_dir")):
    with pytest.raises(ConfigError, match=rf"^{flag}={re.escape(repr(url))} is not allowed: expected .*{re.escape(says)}"):
      check(url, flag)
  assert not list(tmp_path.iterdir())


def test_gcs_bucket_names_the_rules_allow_pass_the_check():
  from daca_jax import storage

  for url in ("gs://abc/x", "gs://my_bucket-1/run", "gs://data." + "x" * 60 + ".example.com/run",
              "gs://bucket/" + "d" * 768):
    assert storage.remote_problem(url) is None, url


@pytest.mark.parametrize("path, says", [
    ("~no-such-user-of-this-machine/run", "a path whose '~user' names a user of this machine"),
    (" /tmp/run", "a path without leading or trailing white space"),  # else the folder ' ' of the current one
    ("runs/" + "n" * 300, "names have at most 255 bytes each"),
    ("/tmp/" + "/".join(["d" * 200] * 20), "a path of at most 3840 bytes"),
    ("gs:bucket/run", "two slashes after 'gs:'"),
    ("S3:bucket/run", "the only URL scheme a workdir may have"),
])
def test_a_local_folder_the_file_system_would_misread_or_refuse_later_is_refused_first(path, says, tmp_path,
                                                                                       monkeypatch):
  """pathlib raised a RuntimeError traceback for an unknown ~user, read ' /tmp/x' as a folder named ' ', and
  took 'gs:bucket/run' as a local folder: the run wrote ./gs:bucket/run. Each is one line naming the flag, and
  nothing is made."""
  from daca_jax.io_utils import check_file_path, check_workdir_path, existing_workdir

  monkeypatch.chdir(tmp_path)
  file_says = "a path of this machine's file system" if path.lower().startswith(("gs:", "s3:")) else says
  for check, expected in ((check_workdir_path, says), (existing_workdir, says), (check_file_path, file_says)):
    with pytest.raises(ConfigError, match=rf"^--x={re.escape(repr(path))} is not allowed: expected .*"
                                          rf"{re.escape(expected)}"):
      check(path, "--x")
  assert not list(tmp_path.iterdir())
  assert check_workdir_path("exp:lr=1e-4", "--x") == tmp_path / "exp:lr=1e-4"  # a colon in a name is fine


def test_build_tfds_refuses_an_empty_or_blocked_folder_in_one_line(tmp_path):
  """An empty --tfds_dir built into the current folder without a word; a folder under a file said only
  'Not a directory'."""
  (tmp_path / "file").write_text("x")
  env = dict(os.environ, PYTHONPATH=str(REPO), JAX_PLATFORMS="cpu")
  for value, says in (("", "expected a folder path (an empty one would write into the current directory"),
                      (str(tmp_path / "file" / "sub"), "expected a folder; ")):
    proc = subprocess.run([sys.executable, str(REPO / "experiments/build_tfds.py"), f"--tfds_dir={value}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith(f"error: --tfds_dir={value!r} is not allowed: {says}")
  assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_bucket_folder_without_gcsfs_names_the_extra(monkeypatch):
  """Without the [gcs] extra a gs:// workdir or TFDS folder is one line naming it, before any work."""
  from daca_jax import storage
  from daca_jax.config.train import DataConfig
  from daca_jax.io_utils import check_workdir_path

  def missing():
    raise ImportError(f"a gs:// path needs gcsfs: {storage.REMOTE_EXTRA}")

  monkeypatch.setattr(storage, "_fs", missing)
  for call, flag in ((lambda: check_workdir_path("gs://bucket/run", "--workdir"), "--workdir"),
                     (lambda: DataConfig(source="tfds", tfds_dir="gs://bucket/tfds").validate(), "data.tfds_dir")):
    with pytest.raises(ConfigError, match=rf"^{re.escape(flag)}='gs://bucket/.*gcsfs installed \(pip install -e '\.\[gcs\]'\)"):
      call()
