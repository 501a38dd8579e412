"""Real servers for the remote-storage tests, on 127.0.0.1 and a free port, always stopped.

* :func:`moto_s3`: ``moto_server`` (from ``moto[server]``) in a subprocess: a local S3;
* :func:`gcs_emulator`: ``gcp-storage-emulator`` in a subprocess, in memory: a local GCS
  (JSON API), read by gcsfs with :func:`gcs_options`;
* :func:`azurite_blob`: Azurite's blob service (npm ``azurite``, installed by ``make setup``
  into ``.venv/azurite``) in a subprocess, in memory: a local Azure Blob, read by adlfs
  with :func:`azurite_options`;
* :class:`FileServer`: a threaded ``http.server`` serving a directory in this process, with
  a per-request delay, forced status codes per path, a request log and stop/restart.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_http(
    url: str, timeout: float = 30.0, process: subprocess.Popen[bytes] | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(url, timeout=1).close()
            return
        except OSError as error:
            if getattr(error, "code", None):  # an HTTP error status: the server answers
                return
            if process is not None and process.poll() is not None:
                raise RuntimeError(
                    f"the server of {url} exited with status {process.returncode}"
                ) from error
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not come up in {timeout} s") from error
            time.sleep(0.1)


@contextlib.contextmanager
def moto_s3() -> Iterator[str]:
    """Start ``moto_server`` on 127.0.0.1 and yield its endpoint URL; always stop it."""
    port = free_port()
    binary = shutil.which("moto_server", path=os.path.dirname(sys.executable))
    command = [binary] if binary else [sys.executable, "-m", "moto.server"]
    process = subprocess.Popen(
        [*command, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        endpoint = f"http://127.0.0.1:{port}"
        _wait_http(endpoint)
        yield endpoint
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextlib.contextmanager
def _server(command: list[str], probe: str) -> Iterator[None]:
    """Run ``command`` in a fresh temporary directory until ``probe`` answers; always stop it.

    Its output goes to a file, shown if it does not come up (a pipe nobody reads could fill
    and block it).
    """
    with tempfile.TemporaryDirectory(prefix="lrd-server-") as folder:
        log = Path(folder) / "server.log"
        with log.open("wb") as output:
            process = subprocess.Popen(
                command, cwd=folder, stdin=subprocess.DEVNULL, stdout=output, stderr=output
            )
            try:
                try:
                    _wait_http(probe, process=process)
                except RuntimeError as error:
                    tail = log.read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"{error}; {command[0]} said:\n{tail}") from None
                yield
            finally:
                _stop(process)


@contextlib.contextmanager
def gcs_emulator() -> Iterator[str]:
    """Start ``gcp-storage-emulator`` (in memory) on 127.0.0.1 and yield its endpoint URL.

    Read it with ``storage_options=gcs_options(endpoint)``; always stopped.
    """
    port = free_port()
    binary = shutil.which("gcp-storage-emulator", path=os.path.dirname(sys.executable))
    command = [binary] if binary else [sys.executable, "-m", "gcp_storage_emulator"]
    endpoint = f"http://127.0.0.1:{port}"
    start = ["start", "--host", "127.0.0.1", "--port", str(port), "--in-memory", "--quiet"]
    with _server([*command, *start], endpoint + "/storage/v1/b"):
        yield endpoint


def gcs_options(endpoint: str) -> dict[str, Any]:
    """gcsfs ``storage_options`` for :func:`gcs_emulator`: its endpoint, no credentials.

    (``STORAGE_EMULATOR_HOST=<endpoint>`` in the environment does the same as
    ``endpoint_url``.)
    """
    return {"endpoint_url": endpoint, "token": "anon", "project": "lrd-test"}


def azurite_binary() -> str | None:
    """``azurite-blob``: the one ``make setup`` installs in the venv, else one on ``PATH``."""
    local = Path(sys.prefix) / "azurite" / "node_modules" / ".bin" / "azurite-blob"
    if local.is_file():
        return str(local)
    return shutil.which("azurite-blob")


# Azurite's development account: public, documented, the same for every Azurite.
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


@contextlib.contextmanager
def azurite_blob() -> Iterator[str]:
    """Start Azurite's blob service (in memory) on 127.0.0.1 and yield its blob endpoint.

    The endpoint is ``http://127.0.0.1:PORT/devstoreaccount1``; read it with
    ``storage_options=azurite_options(endpoint)``. Always stopped.

    Raises:
        FileNotFoundError: No ``azurite-blob`` (``make setup`` installs it with npm).
    """
    binary = azurite_binary()
    if binary is None:
        raise FileNotFoundError(
            f"azurite-blob is not installed: `make setup` (with npm) installs it into "
            f"{Path(sys.prefix) / 'azurite'}, or `npm install -g azurite@3`."
        )
    port = free_port()
    options = [
        "--blobHost", "127.0.0.1", "--blobPort", str(port), "--inMemoryPersistence",
        "--skipApiVersionCheck", "--loose", "--silent", "--disableTelemetry",
    ]  # fmt: skip
    endpoint = f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}"
    with _server([binary, *options], endpoint + "?comp=list"):
        yield endpoint


def azurite_options(endpoint: str) -> dict[str, Any]:
    """adlfs ``storage_options`` for :func:`azurite_blob`: a connection string to it."""
    return {
        "connection_string": (
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};"
            f"AccountKey={AZURITE_KEY};BlobEndpoint={endpoint};"
        )
    }


class _Handler(http.server.SimpleHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _intercept(self) -> bool:
        self.server.requests.append((self.command, self.path))
        if self.server.delay:
            time.sleep(self.server.delay)
        if self.path in self.server.stall or "*" in self.server.stall:
            self.server.release.wait()  # the request was read; no answer until stop()
            self.close_connection = True
            return True
        status = self.server.status.get(self.path)
        if status is not None:
            self.send_error(status)
            return True
        return False

    def do_GET(self) -> None:
        if self._intercept():
            return
        if self.server.ranges and self.headers.get("Range", "").startswith("bytes="):
            self._send_range(self.headers["Range"].removeprefix("bytes="))
            return
        if self.server.cut.get(self.path, 0) > 0:  # half the body, then hang up
            self.server.cut[self.path] -= 1
            data = (Path(self.directory) / self.path.lstrip("/")).read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        super().do_GET()

    def _send_range(self, spec: str) -> None:
        """Answer ``Range: bytes=first-last`` with 206 and those bytes (one range only)."""
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            self.send_error(404)
            return
        size = path.stat().st_size
        first, _, last = spec.partition("-")
        start, stop = int(first), min(int(last) + 1 if last else size, size)
        with path.open("rb") as file:
            file.seek(start)
            data = file.read(max(stop - start, 0))
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {start}-{start + len(data) - 1}/{size}")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_HEAD(self) -> None:
        if not self._intercept():
            super().do_HEAD()


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    delay = 0.0
    ranges = False
    status: dict[str, int]
    stall: set[str]
    cut: dict[str, int]
    release: threading.Event
    requests: list[tuple[str, str]]


class FileServer:
    """Serve ``directory`` over HTTP on 127.0.0.1; :meth:`stop` and :meth:`start` again.

    Faults: ``delay`` before each answer; ``status[path]``, an error status;
    ``stall`` (paths, or ``"*"``), requests read and never answered until :meth:`stop`;
    ``cut[path] = n``, the next ``n`` GETs of ``path`` send half the body and hang up.
    ``ranges=True`` answers a ``Range`` header with those bytes (206), as object stores do;
    by default the whole file is sent, as ``python -m http.server`` does.
    """

    def __init__(self, directory: str | os.PathLike[str], *, ranges: bool = False) -> None:
        self.directory = Path(directory)
        self.ranges = ranges
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.delay = 0.0
        self.status: dict[str, int] = {}
        self.stall: set[str] = set()
        self.cut: dict[str, int] = {}
        self.requests: list[tuple[str, str]] = []
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        handler = functools.partial(_Handler, directory=str(self.directory))
        server = _Server(("127.0.0.1", self.port), handler)
        server.delay, server.status, server.requests = self.delay, self.status, self.requests
        server.ranges = self.ranges
        server.stall, server.cut, server.release = self.stall, self.cut, threading.Event()
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)
        self._thread.start()

    def set_delay(self, seconds: float) -> None:
        self.delay = seconds
        if self._server is not None:
            self._server.delay = seconds

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.release.set()  # stalled requests end
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> FileServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
