"""What the cache knows of a remote file: ``RemoteObject`` (URL, size, ETag, version, MD5).

A :class:`RemoteObject` is built from a store's listing or ``info`` (:func:`remote_object`,
which reads the ETag, the version and the MD5 under each backend's own names); a
:class:`RemoteRange` is a byte range of one, cached as an entry of its own. Their ``key`` is
the cache file name: it changes when the object does, so a stale copy is never served.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import re
from dataclasses import dataclass
from typing import Any, Final

from lightning_resumable_data.remote.urls import redact, url_name

__all__ = ["RemoteObject", "RemoteRange", "remote_object"]

_MD5: Final = re.compile(r"^[0-9a-f]{32}$")


@dataclass(frozen=True, slots=True)
class RemoteObject:
    """One remote file as listed: URL, size, ETag and version (``None`` where unknown).

    The version is the store's own: S3's ``VersionId`` (versioned buckets), GCS's
    ``generation``, Azure's ``version_id``.
    """

    url: str
    size: int
    etag: str | None = None
    version: str | None = None
    md5: str | None = None  # hex MD5 of the bytes where the store gives it (checked)

    @property
    def identity(self) -> str | None:
        """What identifies the bytes (``"etag=..."``, ``"version=..."``), or ``None``.

        Example:
            >>> RemoteObject("s3://b/a.bin", 8, "9a0364b9", "3").identity
            'etag=9a0364b9 version=3'
        """
        named = (("etag", self.etag), ("version", self.version))
        return " ".join(f"{name}={value}" for name, value in named if value) or None

    @property
    def key(self) -> str:
        """The cache file name: the object's name, prefixed by a digest of URL, size, ETag."""
        digest = hashlib.sha1(f"{redact(self.url)}|{self.size}|{self.etag}".encode())
        return f"{digest.hexdigest()[:16]}-{url_name(self.url)}"


@dataclass(frozen=True, slots=True)
class RemoteRange:
    """Bytes ``[start, stop)`` of a remote object, cached as an entry of their own.

    Example:
        >>> part = RemoteRange(RemoteObject("s3://b/a.bin", 100, "9a03"), 64, 100)
        >>> part.size, part.key.endswith("-a.bin@64-100")
        (36, True)
    """

    whole: RemoteObject
    start: int
    stop: int

    @property
    def url(self) -> str:
        """The object's URL."""
        return self.whole.url

    @property
    def size(self) -> int:
        """Bytes in the range."""
        return self.stop - self.start

    @property
    def key(self) -> str:
        """The cache file name: the object's, then the range (a new object: new names)."""
        return f"{self.whole.key}@{self.start}-{self.stop}"


def _first(info: dict[str, Any], names: tuple[str, ...]) -> str | None:
    for name in names:
        value = info.get(name)
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value):
            return str(value).strip('"')
    return None


def _md5(info: dict[str, Any], etag: str | None) -> str | None:
    """The MD5 of the bytes: S3's single-part ETag, GCS's ``md5Hash``, Azure's content MD5."""
    if etag and _MD5.match(etag):
        return etag
    gcs = info.get("md5Hash")
    if isinstance(gcs, str):
        with contextlib.suppress(ValueError):
            digest = base64.b64decode(gcs, validate=True)
            if len(digest) == 16:
                return digest.hex()
    settings = info.get("content_settings")
    azure = (
        settings.get("content_md5")
        if isinstance(settings, dict)
        else getattr(settings, "content_md5", None)
    )
    if isinstance(azure, (bytes, bytearray)) and len(azure) == 16:
        return bytes(azure).hex()
    return None


def remote_object(url: str, info: dict[str, Any]) -> RemoteObject:
    """The :class:`RemoteObject` of ``url`` from its ``info`` or listing entry."""
    etag = _first(info, ("ETag", "etag", "md5"))
    version = _first(info, ("VersionId", "version_id", "generation"))
    return RemoteObject(url, int(info["size"]), etag, version, _md5(info, etag))
