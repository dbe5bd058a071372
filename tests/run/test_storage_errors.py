"""A bucket's failures as the library meets them: gcsfs raises its own ``HttpError`` (not an ``OSError``) for a
5xx, 429 or 401 once its retries are spent, and google-auth and aiohttp raise their own types. Each must reach
the callers as an ``OSError`` (their ``except OSError`` covers a bucket as it covers a disk), never end the
lease's renewal thread, and end a script in one line. No server is needed: the client is stood in for."""
from __future__ import annotations

import importlib.util
import threading
import time

import pytest

from daca_jax import storage
from daca_jax.errors import ConfigError

pytestmark = pytest.mark.skipif(importlib.util.find_spec("gcsfs") is None,
                                reason="needs gcsfs (pip install -e '.[gcs]')")


def _http_error(code: int) -> Exception:
  from gcsfs.retry import HttpError

  return HttpError({"code": code, "message": f"the server said {code}"})


class _FailingFS:
  """A gcsfs stand-in whose every call raises ``error``."""

  def __init__(self, error: Exception):
    self.error = error

  def __getattr__(self, name):
    def call(*args, **kwargs):
      raise self.error
    return call


@pytest.mark.parametrize("op", [
    lambda p: storage.read_bytes(p), lambda p: storage.read_bytes(p, limit=3), lambda p: storage.write_bytes(p, b"x"),
    lambda p: storage.append_bytes(p, b"x"), lambda p: storage.exists(p), lambda p: storage.is_dir(p),
    lambda p: storage.is_file(p), lambda p: storage.listdir(p), lambda p: storage.size(p), lambda p: storage.mtime(p),
    lambda p: storage.remove(p), lambda p: storage.rmtree(p), lambda p: storage.move_tree(p, p + "2"),
    lambda p: storage.list_files(p), lambda p: storage.create_new(p, b"x"),
], ids=["read", "read_limit", "write", "append", "exists", "is_dir", "is_file", "listdir", "size", "mtime", "remove",
        "rmtree", "move_tree", "list_files", "create_new"])
def test_a_bucket_clients_own_error_is_an_oserror_naming_the_path_and_status(op, monkeypatch):
  monkeypatch.setattr(storage, "_fs", lambda: _FailingFS(_http_error(503)))
  with pytest.raises(OSError, match=r"^gs://bkt/run/f: HttpError 503: the server said 503") as raised:
    op("gs://bkt/run/f")
  assert isinstance(raised.value, storage.RemoteError) and raised.value.code == 503


def test_create_new_reads_only_a_failed_precondition_as_already_there(monkeypatch):
  """HTTP 412 is "the object exists"; an error that merely mentions 412 (a port, a folder's name) is not."""
  monkeypatch.setattr(storage, "_fs", lambda: _FailingFS(_http_error(412)))
  with pytest.raises(FileExistsError):
    storage.create_new("gs://bkt/run/lock", b"x")
  monkeypatch.setattr(storage, "_fs", lambda: _FailingFS(ConnectionRefusedError("127.0.0.1:24120 refused")))
  with pytest.raises(ConnectionRefusedError):
    storage.create_new("gs://bkt/exp-412/lock", b"x")
  monkeypatch.setattr(storage, "_fs", lambda: _FailingFS(_http_error(403)))
  with pytest.raises(storage.RemoteError) as raised:
    storage.create_new("gs://bkt/exp-412/lock", b"x")
  assert not isinstance(raised.value, FileExistsError) and raised.value.code == 403


def test_a_failed_renewal_does_not_end_the_lease_and_is_said(tmp_path, monkeypatch):
  """One 503 while renewing ended the renewal thread: the lease lapsed, another run took the workdir over, and
  this one kept writing it. The thread outlives the failure, says so once, and renews again."""
  from daca_jax.run import lease

  said: list[str] = []
  held = lease.WorkdirLease(tmp_path, said.append, renew_s=0.02, lapse_s=30)
  held.acquire()
  try:
    real, failures = lease._read, [_http_error(503), _http_error(503), RuntimeError("anything else")]

    def flaky(path):
      if failures:
        raise failures.pop(0)
      return real(path)

    monkeypatch.setattr(lease, "_read", flaky)
    before = real(held.path)["renewed"]
    deadline = time.time() + 30
    while (failures or real(held.path)["renewed"] == before) and time.time() < deadline:
      time.sleep(0.02)
    time.sleep(0.1)
    assert held._thread.is_alive() and real(held.path)["renewed"] > before
    held.check()  # still this run's
    assert sum("renewing" in s and "failed (HttpError" in s for s in said) == 1, said
    assert any("renewed again after" in s for s in said), said
  finally:
    held.release()
  assert not held.path.exists()


def test_a_bucket_error_past_the_file_layer_ends_a_script_in_one_line(capsys):
  """orbax, TensorStore and epath reach the bucket without daca_jax.storage: their gcsfs errors end a script as
  one line with exit 1, as an OSError does."""
  from daca_jax.run import cli_errors

  error = _http_error(503)
  assert cli_errors.exit_code(error) == cli_errors.EXIT_OS_ERROR
  with pytest.raises(SystemExit) as ended, cli_errors.reported_errors():
    raise error
  assert ended.value.code == cli_errors.EXIT_OS_ERROR
  lines = capsys.readouterr().err.strip().splitlines()
  assert lines == ["error: a bucket operation failed (HttpError 503: the server said 503); run the same command "
                   "again once the bucket answers"]
  assert cli_errors.exit_code(RuntimeError("a bug")) is None  # a bug keeps its traceback


def test_concurrent_local_appends_keep_every_line(tmp_path):
  path = tmp_path / "log"
  threads = [threading.Thread(target=lambda w=w: [storage.append_bytes(path, f"{w}-{i}\n".encode())
                                                  for i in range(50)]) for w in range(4)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert sorted(path.read_text().splitlines()) == sorted(f"{w}-{i}" for w in range(4) for i in range(50))


def test_a_release_that_cannot_reach_the_bucket_does_not_fail_the_finished_run(tmp_path, monkeypatch):
  from daca_jax.run import lease

  said: list[str] = []
  held = lease.WorkdirLease(tmp_path, said.append, renew_s=60)
  held.acquire()

  def unreachable(path):
    raise storage.RemoteError("gs://bkt/run/lease.json: HttpError 503", 503)

  monkeypatch.setattr(lease, "_read", unreachable)
  held.release()  # no exception
  assert any("could not remove" in s and "lapses" in s for s in said), said
  monkeypatch.undo()
  with pytest.raises(ConfigError):  # and the lease file is still there, held by a live process: refused
    lease.WorkdirLease(tmp_path).acquire()


def test_only_the_bucket_clients_errors_count_as_the_buckets():
  """A protobuf or any other library's error past the file layer is a bug: it keeps its traceback."""
  import google.auth.exceptions  # gcsfs's dependency

  DecodeError = pytest.importorskip("google.protobuf.message").DecodeError
  assert storage.is_transport_error(_http_error(503)) and storage.is_transport_error(
      google.auth.exceptions.RefreshError("expired"))
  assert not storage.is_transport_error(DecodeError("x")) and not storage.is_transport_error(ValueError("x"))
