"""A local GCS server for the tests: ``gcp-storage-emulator`` with GCS's upload preconditions.

The emulator serves the JSON API that gcsfs, google-cloud-storage and TensorStore speak, but it ignores
generation preconditions: an upload meant to create an object only if it is absent overwrites it, where real
GCS answers HTTP 412 (Precondition Failed). The workdir lease's mutex relies on that rule, and TensorStore's
OCDBT writes (orbax's checkpoints) rely on it and on the ``x-goog-generation`` header of a download, which the
emulator does not send either. This server adds both (:func:`_install_preconditions`), each check and the
write it guards under one lock, so that two racing creations cannot both pass.

Run as ``python tests/gcs_server.py PORT BUCKET`` (in memory; ``Ctrl-C`` or SIGTERM stops it); the fixture
:func:`gcs` in ``tests/run/test_gcs_workdir.py`` starts it on a free port and sets the environment the clients
read (:func:`client_env`).
"""
from __future__ import annotations

import os
import sys
import threading
from http import HTTPStatus

ENV_FLAGS = {
    # gcsfs 2026's hierarchical-namespace probe waits 60 s against a server without gRPC before falling back.
    "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
    "GOOGLE_AUTH_TOKEN_FOR_TESTING": "test",  # TensorStore: no credentials lookup
    "GOOGLE_CLOUD_PROJECT": "test",
}


def client_env(port: int) -> dict[str, str]:
  """The variables that point gcsfs, google-cloud-storage (TensorBoard's writer) and TensorStore (orbax's
  arrays) at the server on ``port``."""
  url = f"http://127.0.0.1:{port}"
  return {"STORAGE_EMULATOR_HOST": url, "TENSORSTORE_GCS_HTTP_URL": url, **ENV_FLAGS}


def _install_preconditions() -> None:
  """Adds to the emulator what GCS does and it does not: uploads, downloads and deletes honour
  ``ifGenerationMatch`` (HTTP 412) and downloads ``ifGenerationNotMatch`` (HTTP 304), and a download names the
  object's generation in ``x-goog-generation`` (TensorStore, under orbax's OCDBT checkpoints, reads an object's
  generation from that header and writes conditionally on it)."""
  from gcp_storage_emulator import server
  from gcp_storage_emulator.exceptions import NotFound
  from gcp_storage_emulator.handlers import objects

  lock = threading.RLock()  # a check and the write it guards happen as one step

  def generation(storage, bucket: str, name: str | None) -> str:
    try:
      return str(storage.get_file_obj(bucket, name).get("generation", "0"))
    except NotFound:
      return "0"

  def failed(response, status: HTTPStatus) -> None:
    response.status = status
    if status == HTTPStatus.PRECONDITION_FAILED:
      response.json({"error": {"code": 412, "message": "At least one of the pre-conditions you specified did not "
                               "hold.", "errors": [{"reason": "conditionNotMet"}]}})

  def upload_name(request) -> str | None:
    name = (request.query.get("name") or [None])[0]
    if name is None and isinstance(request.data, dict):
      name = (request.data.get("meta") or {}).get("name") or request.data.get("name")
    return name

  def guarded(handler, name_of, downloads: bool = False):
    def run(request, response, storage, *args, **kwargs):
      match = (request.query.get("ifGenerationMatch") or [None])[0]
      not_match = (request.query.get("ifGenerationNotMatch") or [None])[0]
      with lock:
        current = generation(storage, request.params["bucket_name"], name_of(request))
        if match is not None and current != str(match):
          return failed(response, HTTPStatus.PRECONDITION_FAILED)
        if downloads and not_match is not None and current == str(not_match):
          return failed(response, HTTPStatus.NOT_MODIFIED)
        if downloads and current != "0":
          response["x-goog-generation"] = current
          response["x-goog-metageneration"] = "1"
        return handler(request, response, storage, *args, **kwargs)
    return run

  object_id = lambda request: request.params.get("object_id")  # noqa: E731
  replaced = {objects.insert: guarded(objects.insert, upload_name),
              objects.download: guarded(objects.download, object_id, downloads=True),
              objects.delete: guarded(objects.delete, object_id)}
  get = objects.get

  def checked_get(request, response, storage, *args, **kwargs):
    if (request.query.get("alt") or [None])[0] == "media":
      return replaced[objects.download](request, response, storage, *args, **kwargs)
    return get(request, response, storage, *args, **kwargs)

  replaced[get] = checked_get
  for _, handlers in server.HANDLERS:  # the route table holds the functions themselves
    for method, handler in list(handlers.items()):
      if handler in replaced:
        handlers[method] = replaced[handler]
  objects.insert = replaced[objects.insert]  # the router's fallback for uploads reads the module attribute


def main(port: int, bucket: str) -> None:
  _install_preconditions()
  from gcp_storage_emulator.server import create_server

  server = create_server("127.0.0.1", port, in_memory=True, default_bucket=bucket)
  server.run()


if __name__ == "__main__":
  os.environ.setdefault("PYTHONUNBUFFERED", "1")
  main(int(sys.argv[1]), sys.argv[2])
