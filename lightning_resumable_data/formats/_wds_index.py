"""The per-shard index of a WebDataset tar: where every field of every sample lies.

Built by scanning the tar's headers (:mod:`._wds_tar`), never its member data, and saved
next to the shard as a sidecar, as ``wids`` saves ``<shard>.index`` (``wids_tar.TarFileReader``:
a pickle, written to a temporary name and renamed). Ours is ``<shard>.index.npz``: a NumPy
archive read with ``allow_pickle=False`` (a file next to the data never runs code), which
``wids`` does not mistake for its own, and which records the shard's size and mtime so that
a rewritten shard invalidates it. The temporary name is unique per process, so ranks and
workers indexing one shard at once never read each other's half-written file. A shard
whose directory is not writable keeps its index in memory.

Layout (``S`` samples, ``M`` members): ``meta`` (UTF-8 JSON: format, version, shard bytes
and mtime, end-of-archive offset, field names), ``keys`` (``(S,)`` str), ``starts``
(``(S + 1,)`` int64: sample ``i`` owns members ``starts[i]:starts[i + 1]``), ``fields``
(``(M,)`` int32 into the field names), ``offsets`` and ``sizes`` (``(M,)`` int64: where the
member's data starts in the file, and its byte count).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import dataclass
from typing import Any, Final, Protocol

import numpy as np
from numpy.typing import NDArray

from lightning_resumable_data.formats._wds_tar import group_members, scan_members

__all__ = [
    "INDEX_FORMAT",
    "INDEX_SUFFIX",
    "INDEX_VERSION",
    "FileStat",
    "Stamp",
    "TarIndex",
    "index_shard",
    "load_index",
    "stat_shard",
]

INDEX_FORMAT: Final = "lightning-resumable-data/webdataset-index"
INDEX_VERSION: Final = 1
INDEX_SUFFIX: Final = ".index.npz"


class FileStat(Protocol):
    """What a stamp compares: an ``os.stat_result``, or a store's object (``st_mtime_ns=0``)."""

    @property
    def st_size(self) -> int: ...
    @property
    def st_mtime_ns(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Stamp:
    """What is known of an indexed shard without its arrays: its sample count and identity.

    Attributes:
        samples: Samples in the shard.
        size: The shard's size in bytes when it was indexed.
        mtime_ns: The shard's modification time (ns) when it was indexed.
        end: Byte offset of the end-of-archive block.
    """

    samples: int
    size: int
    mtime_ns: int
    end: int

    def matches(self, stat: FileStat) -> bool:
        """Whether the file ``stat`` describes is still the one indexed (size and mtime)."""
        return stat.st_size == self.size and stat.st_mtime_ns == self.mtime_ns

    def changed(self, path: str, stat: FileStat, what: str) -> ValueError:
        """The error for the shard at ``path``, indexed as this, now of ``stat``."""
        return ValueError(
            f"WebDataset shard {path!r} changed since it was indexed"
            f"{f', found reading {what}' if what else ''}: it was {self.size} bytes "
            f"(mtime_ns {self.mtime_ns}), it is {stat.st_size} bytes (mtime_ns "
            f"{stat.st_mtime_ns}) now, so its samples may have moved. Restore the shard, or "
            "reopen it (open_webdataset) to index it again."
        )


@dataclass(frozen=True, slots=True, eq=False)
class TarIndex:
    """Where each sample's fields lie in one tar shard, and which file it describes.

    Attributes:
        stamp: The shard's sample count, size, mtime and end-of-archive offset.
        names: Field names; ``fields`` holds indices into it.
        keys: ``(S,)`` sample keys.
        starts: ``(S + 1,)`` sample ``i`` owns members ``starts[i]:starts[i + 1]``.
        fields: ``(M,)`` each member's field, an index into ``names``.
        offsets: ``(M,)`` byte offset of each member's data.
        sizes: ``(M,)`` byte count of each member's data.
    """

    stamp: Stamp
    names: tuple[str, ...]
    keys: NDArray[np.str_]
    starts: NDArray[np.int64]
    fields: NDArray[np.int32]
    offsets: NDArray[np.int64]
    sizes: NDArray[np.int64]

    def arrays(self) -> dict[str, NDArray[Any]]:
        """The sidecar's arrays, ``meta`` included."""
        meta = {
            "format": INDEX_FORMAT,
            "version": INDEX_VERSION,
            "samples": self.stamp.samples,
            "size": self.stamp.size,
            "mtime_ns": self.stamp.mtime_ns,
            "end": self.stamp.end,
            "names": list(self.names),
        }
        return {
            "meta": np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8),
            "keys": self.keys,
            "starts": self.starts,
            "fields": self.fields,
            "offsets": self.offsets,
            "sizes": self.sizes,
        }


def build_index(path: str, stat: FileStat, shown: str | None = None) -> TarIndex:
    """Scan the headers of the tar at ``path`` (whose ``stat`` is given) into an index.

    Errors name the shard ``shown`` (its URL, for a cached copy), else ``path``.
    """
    members, end = scan_members(path, shown)
    path = path if shown is None else shown
    names: dict[str, int] = {}
    keys: list[str] = []
    counts: list[int] = []
    field_ids: list[int] = []
    kept = []
    for key, fields, group in group_members(path, members):
        keys.append(key)
        counts.append(len(group))
        field_ids += [names.setdefault(field, len(names)) for field in fields]
        kept += group
    starts = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    return TarIndex(
        stamp=Stamp(len(keys), stat.st_size, stat.st_mtime_ns, end),
        names=tuple(names),
        keys=np.array(keys, dtype=np.str_) if keys else np.zeros(0, dtype="<U1"),
        starts=starts,
        fields=np.array(field_ids, dtype=np.int32),
        offsets=np.array([m.offset for m in kept], dtype=np.int64),
        sizes=np.array([m.size for m in kept], dtype=np.int64),
    )


def _meta(archive: Any) -> dict[str, Any] | None:
    """The ``meta`` of an open sidecar, if it is one of this format and version."""
    meta = json.loads(archive["meta"].tobytes())
    ok = isinstance(meta, dict) and (meta.get("format"), meta.get("version")) == (
        INDEX_FORMAT,
        INDEX_VERSION,
    )
    return meta if ok else None


def read_stamp(sidecar: str, stat: FileStat) -> Stamp | None:
    """The stamp saved at ``sidecar`` (only its ``meta`` is read) if it describes ``stat``."""
    try:
        with np.load(sidecar, allow_pickle=False) as archive:
            meta = _meta(archive)
            if meta is None:
                return None
            values = [meta[name] for name in ("samples", "size", "mtime_ns", "end")]
    except (OSError, ValueError, KeyError, TypeError, EOFError):  # missing, partial, foreign
        return None
    if not all(type(value) is int and value >= 0 for value in values):
        return None
    stamp = Stamp(*values)
    return stamp if stamp.matches(stat) else None  # else stale: the shard changed since


def read_sidecar(sidecar: str, stamp: Stamp) -> TarIndex | None:
    """The index saved at ``sidecar`` if it is valid and has ``stamp``."""
    try:
        with np.load(sidecar, allow_pickle=False) as archive:
            meta = _meta(archive)
            keys, starts = archive["keys"], archive["starts"]
            fields, offsets, sizes = archive["fields"], archive["offsets"], archive["sizes"]
            saved = None if meta is None else Stamp(**{k: meta[k] for k in Stamp.__slots__})
    except (OSError, ValueError, KeyError, TypeError, EOFError):
        return None
    members = offsets.shape[0]
    consistent = (
        meta is not None
        and saved == stamp
        and keys.dtype.kind == "U"
        and starts.dtype == np.int64
        and starts.shape == (stamp.samples + 1,) == (keys.shape[0] + 1,)
        and starts[0] == 0
        and starts[-1] == members
        and bool(np.all(np.diff(starts) > 0))
        and fields.shape == sizes.shape == (members,)
        and (members == 0 or int((offsets + sizes).max()) <= stamp.end)
        and bool(np.all(fields < len(meta.get("names", ()))))
    )
    if not consistent:
        return None
    assert meta is not None  # consistent
    return TarIndex(
        stamp=stamp,
        names=tuple(meta["names"]),
        keys=keys,
        starts=starts,
        fields=fields.astype(np.int32, copy=False),
        offsets=offsets.astype(np.int64, copy=False),
        sizes=sizes.astype(np.int64, copy=False),
    )


def write_sidecar(sidecar: str, index: TarIndex) -> bool:
    """Save ``index`` at ``sidecar`` atomically; ``False`` if the directory is not writable."""
    directory, name = os.path.split(sidecar)
    temporary = None
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
        with os.fdopen(handle, "wb") as file:
            arrays: dict[str, Any] = index.arrays()
            np.savez(file, **arrays)
        os.replace(temporary, sidecar)
    except OSError:  # read-only directory or file system, quota, permissions
        if temporary is not None:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
        return False
    return True


def stat_shard(path: str, stamp: Stamp | None = None) -> os.stat_result:
    """``os.stat(path)``; a missing shard's error says if it was indexed (as ``stamp``)."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        if stamp is None:
            problem = "does not exist. Check the path or the pattern."
        else:
            problem = f"vanished after it was indexed ({stamp.samples} samples). Restore it."
        raise FileNotFoundError(f"WebDataset shard {path!r} {problem}") from None


def index_shard(path: str, *, save: bool = True) -> tuple[Stamp, TarIndex | None, str | None]:
    """The stamp of the shard at ``path``, from its valid sidecar or from a scan (then saved).

    Returns the stamp, the index if a scan built it (``None`` if the sidecar was valid: only
    its stamp was read), and the sidecar (``None`` when the index is in memory only).

    Raises:
        FileNotFoundError: No file at ``path``.
        ValueError: The tar is corrupt or compressed (see :func:`._wds_tar.scan_members`).
    """
    stat = stat_shard(path)
    sidecar = path + INDEX_SUFFIX
    stamp = read_stamp(sidecar, stat)
    if stamp is not None:
        return stamp, None, sidecar
    index = build_index(path, stat)
    written = save and write_sidecar(sidecar, index)
    return index.stamp, index, sidecar if written else None


def load_index(path: str, stamp: Stamp, sidecar: str | None) -> TarIndex:
    """The index of ``stamp``: from ``sidecar``, or scanned again if that is gone or damaged.

    Raises:
        ValueError: The shard changed since ``stamp`` (or is now corrupt).
    """
    index = None if sidecar is None else read_sidecar(sidecar, stamp)
    if index is None:
        stat = stat_shard(path)
        if not stamp.matches(stat):
            raise stamp.changed(path, stat, "")
        index = build_index(path, stat)
        if index.stamp != stamp:
            raise stamp.changed(path, stat, "")
        if sidecar is not None:
            write_sidecar(sidecar, index)
    return index
