r"""URLs of object storage: recognise them, open their fsspec filesystem, print them safely.

A *URL* here is ``scheme://...`` with a scheme that fsspec knows (``s3``, ``gs``, ``az``,
``abfs``, ``http``, ``https``, ``file``, ...); anything else (``"shards"``,
``Path("/data")``, ``"C:\data"``) is a local path and never touches fsspec. Credentials
come from the backend's usual places (environment, config files, instance metadata) or from
``storage_options``; :func:`redact` strips user info and query strings before a URL reaches
an error message or a log.

Example:
    >>> is_url("s3://bucket/shards"), is_url("shards/index.json"), is_url("C:\\data")
    (True, False, False)
    >>> join_url("s3://bucket/shards/", "index.json")
    's3://bucket/shards/index.json'
    >>> redact("https://user:secret@host/a.bin?X-Amz-Signature=abc")
    'https://host/a.bin'
"""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

__all__ = ["filesystem", "is_url", "join_url", "redact", "url_name"]

_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.\-]+)://")


def is_url(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a ``scheme://`` URL (a one-letter scheme is a Windows drive)."""
    return isinstance(path, str) and _SCHEME.match(path) is not None


def join_url(base: str, name: str) -> str:
    """``base`` and a relative ``name`` joined with exactly one ``/``."""
    return base.rstrip("/") + "/" + name.lstrip("/")


def url_name(url: str) -> str:
    """The last path component of ``url`` (its file name), without a query string.

    Example:
        >>> url_name("gs://bucket/dir/shard_00001.bin?generation=3")
        'shard_00001.bin'
    """
    return urlsplit(url).path.rstrip("/").rsplit("/", 1)[-1]


def redact(url: str) -> str:
    """``url`` without user info, query or fragment: safe for errors and logs."""
    if not is_url(url):
        return url
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def filesystem(
    url: str,
    storage_options: dict[str, Any] | None = None,
    *,
    connect_timeout_s: float | None = None,
) -> tuple[Any, str]:
    """A fresh fsspec filesystem of ``url`` and the path within it.

    Fresh: never fsspec's cached instance of the same options, whose listings may be stale.

    Args:
        url: A ``scheme://`` URL.
        storage_options: Passed to the filesystem (e.g. ``{"client_kwargs":
            {"endpoint_url": "http://127.0.0.1:9000"}}`` for an S3-compatible server).
        connect_timeout_s: Connection timeout set on HTTP(S) and S3 filesystems unless
            ``storage_options`` sets one.

    Raises:
        ImportError: fsspec, or the backend of the scheme, is not installed (the message
            names the extra to install).
        ValueError: The scheme is unknown to fsspec.

    Example:
        >>> fs, path = filesystem("file:///tmp/shards")
        >>> type(fs).__name__, path
        ('LocalFileSystem', '/tmp/shards')
    """
    try:
        import fsspec
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"reading {redact(url)!r} needs fsspec: pip install 'lightning-resumable-data[remote]'"
            " (fsspec and s3fs; gcsfs or adlfs for gs:// or az://)."
        ) from None
    scheme = url.split("://", 1)[0].lower()
    try:
        cls = fsspec.get_filesystem_class(scheme)
    except ValueError:
        raise ValueError(
            f"{redact(url)!r} has the scheme {scheme!r}, which fsspec does not know; use s3://, "
            "gs://, az://, http(s):// or file://, or pass a local path."
        ) from None
    except ImportError as error:
        raise ImportError(
            f"reading {redact(url)!r} needs the fsspec backend of {scheme}://: {error}"
        ) from None
    options = {"skip_instance_cache": True, **(storage_options or {})}
    if connect_timeout_s is not None:
        options = _with_connect_timeout(scheme, options, connect_timeout_s)
    fs = cls(**options)
    return fs, cls._strip_protocol(url)


def _with_connect_timeout(scheme: str, options: dict[str, Any], seconds: float) -> dict[str, Any]:
    """``options`` with a connection timeout for the backends that have one, if unset."""
    if scheme in ("http", "https"):
        import aiohttp

        client = dict(options.get("client_kwargs") or {})
        client.setdefault("timeout", aiohttp.ClientTimeout(total=None, sock_connect=seconds))
        return {**options, "client_kwargs": client}
    if scheme in ("s3", "s3a"):
        config = dict(options.get("config_kwargs") or {})
        config.setdefault("connect_timeout", seconds)
        return {**options, "config_kwargs": config}
    return options
