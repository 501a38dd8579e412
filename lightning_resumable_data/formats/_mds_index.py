"""An MDS dataset's ``index.json`` (version 2) and its shards' compression.

``index.json`` is ``{"version": 2, "shards": [...]}``; each shard entry, as
``MDSWriter`` writes it, names its columns (``column_names``, ``column_encodings``,
``column_sizes``: ``null`` for a variable-size column), its sample count, its files
(``raw_data``: the uncompressed shard; ``zip_data``: the compressed file, when
``compression`` is set) with their byte counts. Reading checks the entry, before any shard
file is touched.
"""

from __future__ import annotations

import bz2
import gzip
import importlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeGuard

__all__ = ["INDEX_FILE", "MDSShardInfo", "decompress", "parse_mds_index", "read_mds_index"]

INDEX_FILE: Final = "index.json"
# compression family: (module, how to call it, pip package), tried in order
_CODECS: Final[dict[str, list[tuple[str, str]]]] = {
    "zstd": [("zstd", "decompress"), ("zstandard", "stream"), ("compression.zstd", "decompress")],
    "snappy": [("snappy", "decompress"), ("cramjam", "snappy")],
    "br": [("brotli", "decompress"), ("brotlicffi", "decompress")],
}
_PIP: Final = {"zstd": "zstd (or zstandard)", "snappy": "python-snappy", "br": "brotli"}
COMPRESSIONS: Final = ("br", "bz2", "gz", "snappy", "zstd")


@dataclass(frozen=True)
class MDSShardInfo:
    """One shard entry of an MDS ``index.json``, checked.

    Attributes:
        raw_basename: The uncompressed shard file, relative to the index's directory.
        raw_bytes: Its size.
        samples: Samples in the shard.
        column_names: Columns, in the shard's order (sorted by ``MDSWriter``).
        column_encodings: Their MDS encodings.
        column_sizes: Their fixed sizes in bytes, ``None`` for a variable-size column.
        compression: ``None``, or the compression (``"zstd:7"``, ``"gz"``, ...).
        zip_basename: The compressed file, when ``compression`` is set.
        zip_bytes: Its size.
    """

    raw_basename: str
    raw_bytes: int
    samples: int
    column_names: tuple[str, ...]
    column_encodings: tuple[str, ...]
    column_sizes: tuple[int | None, ...]
    compression: str | None = None
    zip_basename: str | None = None
    zip_bytes: int | None = None

    @classmethod
    def from_json(cls, entry: Mapping[str, Any], where: str = "index.json") -> MDSShardInfo:
        """Check a shard entry of ``index.json`` (``where`` names it in errors).

        Example:
            >>> info = MDSShardInfo.from_json({
            ...     "format": "mds", "version": 2, "samples": 3, "compression": None,
            ...     "column_names": ["x"], "column_encodings": ["int"], "column_sizes": [8],
            ...     "raw_data": {"basename": "shard.00000.mds", "bytes": 44}, "zip_data": None})
            >>> info.raw_basename, info.samples
            ('shard.00000.mds', 3)
        """

        def bad(problem: str) -> ValueError:
            return ValueError(
                f"{where} is not an MDS shard entry MDSWriter writes: {problem}. Rewrite the "
                "dataset with streaming.MDSWriter, or fix its index.json."
            )

        if not isinstance(entry, Mapping):
            raise bad(f"it is a {type(entry).__name__}, not an object")
        if entry.get("format") != "mds":
            raise bad(
                f"format={entry.get('format')!r}; only 'mds' shards are read here (Streaming's "
                "json and csv/tsv/xsv shards are not)"
            )
        if entry.get("version") != 2:
            raise bad(f"version={entry.get('version')!r}, expected 2")
        columns = [entry.get(key) for key in _COLUMN_KEYS]
        lists = [c for c in columns if isinstance(c, list)]
        if len(lists) != len(columns) or len({len(c) for c in lists}) != 1:
            raise bad(f"{', '.join(_COLUMN_KEYS)} must be lists of one length, got {columns}")
        names, encodings, sizes = lists
        if not all(isinstance(n, str) for n in names + encodings) or len(set(names)) < len(names):
            raise bad(f"column_names {names} and column_encodings {encodings} must be strings")
        if not all(s is None or (_count(s) and s > 0) for s in sizes):
            raise bad(f"column_sizes {sizes} must be positive ints or null")
        samples = entry.get("samples")
        if not _count(samples):
            raise bad(f"samples={samples!r} is not a non-negative int")
        raw, raw_bytes = _file(entry.get("raw_data"), "raw_data", bad)
        compression = entry.get("compression")
        zip_name, zip_bytes = None, None
        if compression is not None:
            if not isinstance(compression, str) or compression.split(":")[0] not in COMPRESSIONS:
                raise bad(f"compression={compression!r} is not one of MDS's {COMPRESSIONS}")
            zip_name, zip_bytes = _file(entry.get("zip_data"), "zip_data", bad)
        return cls(
            raw, raw_bytes, samples, tuple(names), tuple(encodings), tuple(sizes),
            compression, zip_name, zip_bytes,
        )  # fmt: skip


_COLUMN_KEYS: Final = ("column_names", "column_encodings", "column_sizes")


def _count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _file(info: object, key: str, bad: Any) -> tuple[str, int]:
    name = info.get("basename") if isinstance(info, Mapping) else None
    size = info.get("bytes") if isinstance(info, Mapping) else None
    if not isinstance(name, str) or not name or not _count(size):
        raise bad(f"{key}={info!r} must be {{'basename': FILE, 'bytes': SIZE}}")
    return name, size


def read_mds_index(path: str | os.PathLike[str]) -> tuple[Path, list[MDSShardInfo]]:
    """The directory of an MDS dataset and its shards, from its ``index.json``.

    ``path`` is the dataset's directory or its ``index.json``. No shard file is touched.

    Example:
        >>> import tempfile
        >>> directory = Path(tempfile.mkdtemp())
        >>> _ = (directory / "index.json").write_text('{"version": 2, "shards": []}')
        >>> read_mds_index(directory)
        Traceback (most recent call last):
        ...
        ValueError: ...index.json' lists no shards...
    """
    path = Path(path)
    index = path / INDEX_FILE if path.is_dir() else path
    try:
        text = index.read_text()
    except FileNotFoundError:
        raise FileNotFoundError(
            f"no MDS index at {str(index)!r}. Pass an MDS dataset's directory (MDSWriter "
            f"writes its {INDEX_FILE} when it finishes) or the index file itself."
        ) from None
    except UnicodeDecodeError as error:
        raise ValueError(f"{str(index)!r} is not an MDS index: not JSON ({error}).") from None
    return index.parent, parse_mds_index(text, str(index))


def parse_mds_index(text: str, where: str) -> list[MDSShardInfo]:
    """The shards of the MDS ``index.json`` whose text is ``text`` (``where`` names it).

    Raises:
        ValueError: Not JSON, not version 2, no shards, or a malformed shard entry.

    Example:
        >>> parse_mds_index('{"version": 1}', "s3://bucket/mds/index.json")
        Traceback (most recent call last):
        ...
        ValueError: 's3://bucket/mds/index.json' is not an MDS index of version 2 (version=1)...
    """
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{where!r} is not an MDS index: not JSON ({error}).") from None
    if not isinstance(raw, dict) or raw.get("version") != 2:
        version = raw.get("version") if isinstance(raw, dict) else None
        raise ValueError(
            f"{where!r} is not an MDS index of version 2 (version={version!r}). "
            "Rewrite it with mosaicml-streaming's MDSWriter."
        )
    shards = raw.get("shards")
    if not isinstance(shards, list) or not shards:
        raise ValueError(f"{where!r} lists no shards: an MDS dataset with no data.")
    return [
        MDSShardInfo.from_json(entry, f"shard #{number} of {where!r}")
        for number, entry in enumerate(shards)
    ]


def decompress(compression: str, data: bytes, path: str) -> bytes:
    """``data`` of the file ``path``, decompressed by ``compression`` (``"zstd:7"``, ...).

    The standard library decodes ``gz`` and ``bz2``; ``zstd``, ``snappy`` and ``br`` need
    their package, imported here (``ModuleNotFoundError`` names it when missing).

    Example:
        >>> decompress("gz:9", gzip.compress(b"mds"), "shard.00000.mds.gz")
        b'mds'
    """
    family = compression.split(":")[0]
    try:
        if family == "gz":
            return gzip.decompress(data)
        if family == "bz2":
            return bz2.decompress(data)
        return bytes(_optional(family, path)(data))
    except ModuleNotFoundError:
        raise
    except Exception as error:  # each codec has its own error types
        raise ValueError(
            f"MDS shard file {path!r} cannot be decompressed as {compression!r}: "
            f"{type(error).__name__}: {error}. The file is corrupt or truncated: restore it."
        ) from error


def _optional(family: str, path: str) -> Any:
    """The decompression function of ``family`` from the first of its packages installed."""
    for module_name, how in _CODECS[family]:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        if how == "stream":  # zstandard: frames without a content size need a stream
            return lambda data: module.ZstdDecompressor().decompressobj().decompress(data)
        if how == "snappy":  # cramjam: MDS's snappy is the raw (unframed) format
            return lambda data: bytes(module.snappy.decompress_raw(data))
        return getattr(module, how)
    raise ModuleNotFoundError(
        f"MDS shard file {path!r} is compressed with {family}, and no {family} decoder is "
        f"installed: pip install {_PIP[family]}."
    )
