"""Requests to object storage: one fsspec filesystem per scheme and process, bounded, retried.

:class:`RemoteClient` sends the three requests the cache needs (``info``, ``ls`` and a
ranged ``cat_file``), each cancelled after ``RetryPolicy.timeout_s`` and retried on
transient errors (:mod:`~lightning_resumable_data.remote.retry`). A forked worker opens
its own filesystem; none is pickled.

Example:
    >>> import os, tempfile
    >>> source = os.path.join(tempfile.mkdtemp(), "a.bin")
    >>> with open(source, "wb") as file:
    ...     _ = file.write(b"12345678")
    >>> client = RemoteClient({}, RetryPolicy())
    >>> client.stat("file://" + source).size, client.read_bytes("file://" + source, 2, 5)
    (8, b'345')
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import Any

from lightning_resumable_data.remote.objects import RemoteObject, remote_object
from lightning_resumable_data.remote.retry import RetryPolicy, with_retries
from lightning_resumable_data.remote.urls import filesystem, redact, url_name

__all__ = ["RemoteClient"]


class RemoteClient:
    """Stat, list and range-read remote files with ``storage_options``, under ``retry``.

    Args:
        storage_options: fsspec filesystem options (endpoint, credentials, ...).
        retry: Timeouts and retries of every request.
    """

    def __init__(self, storage_options: dict[str, Any], retry: RetryPolicy) -> None:
        self.storage_options = storage_options
        self.retry = retry
        self._fs: dict[str, tuple[Any, int]] = {}

    def _filesystem(self, url: str) -> tuple[Any, str]:
        scheme = url.split("://", 1)[0]
        entry = self._fs.get(scheme)
        if entry is None or entry[1] != os.getpid():  # a forked worker opens its own
            fs, _ = filesystem(
                url, self.storage_options, connect_timeout_s=self.retry.connect_timeout_s
            )
            self._fs[scheme] = entry = (fs, os.getpid())
        return entry[0], type(entry[0])._strip_protocol(url)

    def _request(self, fs: Any, method: str, path: str, **kwargs: Any) -> Any:
        """``fs.<method>(path, **kwargs)``, cancelled after ``retry.timeout_s`` seconds."""
        from fsspec.asyn import AsyncFileSystem, FSTimeoutError, sync

        timeout = self.retry.timeout_s
        if not isinstance(fs, AsyncFileSystem):  # local and in-memory files: no network
            return getattr(fs, method)(path, **kwargs)
        try:
            return sync(fs.loop, getattr(fs, "_" + method), path, timeout=timeout, **kwargs)
        except (FSTimeoutError, asyncio.TimeoutError) as error:
            raise TimeoutError(
                f"no complete answer within timeout_s={timeout:g} s (RetryPolicy)"
            ) from error

    def stat(self, url: str) -> RemoteObject:
        """Size and ETag of ``url`` (one request, retried)."""
        fs, path = self._filesystem(url)
        with contextlib.suppress(Exception):  # listings cached earlier may be stale; some
            fs.invalidate_cache(path)  # backends (adlfs) answer info() from the parent's
            fs.invalidate_cache(path.rstrip("/").rsplit("/", 1)[0])
        info = with_retries(lambda: self._request(fs, "info", path), url, self.retry, "stat")
        if info.get("size") is None:
            raise ValueError(f"{redact(url)!r} has no known size; the server must send one.")
        return remote_object(url, info)

    def listing(self, url: str) -> dict[str, RemoteObject]:
        """The files directly under the directory ``url`` by name (one request, retried).

        Backends without listings (a plain HTTP server without an index page) give ``{}``.
        """
        fs, path = self._filesystem(url)
        with contextlib.suppress(Exception):
            fs.invalidate_cache(path)  # listed afresh: objects may have changed since
        try:
            entries = with_retries(
                lambda: self._request(fs, "ls", path, detail=True), url, self.retry, "list"
            )
        except (FileNotFoundError, NotImplementedError, PermissionError):
            return {}
        out = {}
        for info in entries:
            if info.get("type") == "file" and info.get("size") is not None:
                child = url.rstrip("/") + "/" + str(info["name"]).rstrip("/").rsplit("/", 1)[-1]
                out[url_name(child)] = remote_object(child, info)
        return out

    def read_bytes(self, url: str, start: int | None = None, stop: int | None = None) -> bytes:
        """Bytes ``[start, stop)`` of ``url`` (the whole object by default), retried.

        A range request where the server supports one; a server that ignores ``Range``
        (``python -m http.server``) sends the whole object, which is sliced here.
        """
        fs, path = self._filesystem(url)

        def attempt() -> bytes:
            data: bytes = self._request(fs, "cat_file", path, start=start, end=stop)
            if start is not None and stop is not None:
                if len(data) > stop - start:  # the whole object: the server ignored Range
                    data = data[start:stop]
                if len(data) < stop - start:  # a complete answer, short: not retried
                    raise ValueError(
                        f"{redact(url)!r} sent {len(data)} bytes of the range [{start}, {stop})"
                        " asked for: the object is truncated or was replaced after it was "
                        "listed. Restore it (or reopen the shards if the change is intended)."
                    )
            return data

        return with_retries(attempt, url, self.retry)

    def __getstate__(self) -> dict[str, Any]:
        """Pickle the configuration only: a worker opens its own connections."""
        return {**self.__dict__, "_fs": {}}
