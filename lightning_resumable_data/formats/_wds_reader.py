""":class:`WebDatasetShardReader`: one WebDataset ``.tar`` shard, by sample (see :mod:`.wds`).

The reader lists the members once from the tar's headers into a sidecar index
(:mod:`._wds_index`), then reads any sample with one positioned read; a shard at a URL is
read by the subclass in ``_remote_wds``.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from lightning_resumable_data.formats._wds_decode import (
    DEFAULT_DECODERS,
    Decoders,
    decode_fields,
)
from lightning_resumable_data.formats._wds_index import (
    FileStat,
    Stamp,
    TarIndex,
    index_shard,
    load_index,
    stat_shard,
)
from lightning_resumable_data.shards.protocol import check_index, check_range

__all__ = ["WebDatasetShardReader"]

Sample = dict[str, Any]


class WebDatasetShardReader:
    """One WebDataset ``.tar`` shard as a shard reader: samples by index, fields as bytes.

    Opening reads the shard's index from its sidecar ``<shard>.index.npz``, or builds it by
    scanning the tar headers (member data is skipped) and saves it there; an index whose
    recorded size or mtime differs from the shard's is stale and rebuilt. If the shard's
    folder is not writable the index stays in memory (``index_file`` is then ``None``).
    ``len`` comes from the index; :meth:`load` opens the file (and with ``preload`` reads
    it into memory in one sequential read, what the dataset's background prefetch pays for).

    Args:
        path: The ``.tar`` shard (uncompressed: random access needs it).
        decode: ``False`` (bytes), ``True`` (:data:`DEFAULT_DECODERS`), or a mapping from
            extension to a picklable ``bytes -> value`` function.
        preload: ``load()`` reads the whole shard into memory; else each sample is one
            positioned read from the file.
        save_index: Write the sidecar index (``False``: keep it in memory only).

    Raises:
        FileNotFoundError: The shard does not exist.
        ValueError: The tar is compressed or corrupt (a bad header checksum, a member cut
            short, no end-of-archive block, a field twice in a sample), naming the sample.

    Example:
        >>> import io, tarfile, tempfile
        >>> path = tempfile.mkdtemp() + "/shard.tar"
        >>> with tarfile.open(path, "w") as tar:
        ...     for name in ["a.txt", "a.jpg", "b.txt", "b.jpg"]:
        ...         info = tarfile.TarInfo(name)
        ...         info.size = 2
        ...         tar.addfile(info, io.BytesIO(name[:2].encode()))
        >>> reader = WebDatasetShardReader(path)
        >>> len(reader), reader.read(1)["txt"], sorted(reader.read(1))
        (2, b'b.', ['__key__', '__url__', 'jpg', 'txt'])
        >>> reader.index_file == path + ".index.npz"
        True
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        decode: bool | Decoders = False,
        preload: bool = True,
        save_index: bool = True,
    ) -> None:
        self._location = os.fspath(path)
        if decode is True:
            decode = DEFAULT_DECODERS
        elif decode is not False and not isinstance(decode, Mapping):
            raise TypeError(
                f"decode={decode!r} must be True, False or a mapping from field extension to "
                "a function of the field's bytes (e.g. {**DEFAULT_DECODERS, 'jpg': my_decoder})."
            )
        self._decoders: Decoders | None = dict(decode) if decode else None
        self.preload = bool(preload)
        self._stamp, built, self.index_file = self._index_shard(save_index)
        # arrays resident only while loaded (10^4 shards: GBs), unless no sidecar holds them
        self._pinned = built if self.index_file is None else None
        self._index: TarIndex | None = self._pinned
        self._data: bytes | None = None
        self._fd: int | None = None
        self._lock = threading.Lock()
        self.loads = 0  # how many times load() really loaded (for tests and stats)

    def _index_shard(self, save: bool) -> tuple[Stamp, TarIndex | None, str | None]:
        """The shard's stamp, its index if scanned now, and its sidecar (``index_shard``)."""
        return index_shard(self._location, save=save)

    def _read_index(self) -> TarIndex:
        """The index of the stamp, from the sidecar or scanned again (``load_index``)."""
        return load_index(self._location, self._stamp, self.index_file)

    def _local(self, location: str) -> contextlib.AbstractContextManager[str]:
        """A local file with the bytes of ``location`` while the block runs: itself."""
        return contextlib.nullcontext(location)

    def _matches(self, stat: FileStat) -> bool:
        """Whether the file of ``stat`` is the one indexed (its size and mtime)."""
        return self._stamp.matches(stat)

    @property
    def path(self) -> str:
        """The shard file, as given."""
        return self._location

    @property
    def name(self) -> str:
        """The file name (without the folder)."""
        return os.path.basename(self._location)

    @property
    def index(self) -> TarIndex:
        """Where every field of every sample lies (read from the sidecar until ``close()``)."""
        index = self._index
        if index is None:
            index = self._index = self._read_index()
        return index

    def key(self, index: int) -> str:
        """The ``__key__`` of sample ``index``, from the index (no sample is read)."""
        return str(self.index.keys[check_index(self.name, index, len(self))])

    def __len__(self) -> int:
        return self._stamp.samples

    @property
    def loaded(self) -> bool:
        """Whether the file is open (and with ``preload``, in memory)."""
        return self._data is not None or self._fd is not None

    def load(self) -> None:
        """Open the shard (with ``preload``, read it into memory), checking it is unchanged.

        Raises:
            ValueError: Its size or mtime is not the index's (it was rewritten or cut).
        """
        self._open("")

    def _open(self, what: str) -> None:
        with self._lock:
            if self.loaded:
                return
            with self._local(self._location) as local, open(local, "rb") as file:
                stat, stamp = os.fstat(file.fileno()), self._stamp
                if not self._matches(stat):
                    raise stamp.changed(self._location, stat, what)
                self.index  # noqa: B018 (resident with the data)
                if not self.preload:
                    self._fd = os.dup(file.fileno())
                elif len(data := file.read(stamp.end)) == stamp.end:
                    self._data = data
                else:  # cut short since the stat
                    raise stamp.changed(self._location, os.fstat(file.fileno()), what)
            self.loads += 1

    def close(self) -> None:
        """Release the memory or the open file. Idempotent."""
        with self._lock:
            fd, self._fd, self._data, self._index = self._fd, None, None, self._pinned
        if fd is not None:
            os.close(fd)

    def check(self) -> None:
        """Raise ``FileNotFoundError``/``ValueError`` if the shard vanished or changed."""
        stat = stat_shard(self._location, self._stamp)
        if not self._stamp.matches(stat):
            raise self._stamp.changed(self._location, stat, "")

    def _span(self, start: int, stop: int, what: str) -> tuple[bytes | memoryview, int]:
        """The bytes of samples ``start:stop`` (in range, non-empty) and their file offset."""
        index = self.index
        first, last = int(index.starts[start]), int(index.starts[stop]) - 1
        low = int(index.offsets[first])
        high = int(index.offsets[last] + index.sizes[last])
        if not self.loaded:
            self._open(what)
        data = self._data
        if data is not None:
            return memoryview(data)[low:high], low
        fd = self._fd
        if fd is None:  # closed by another thread meanwhile: read on a fresh descriptor
            self._open(what)
            return self._span(start, stop, what)
        chunk = os.pread(fd, high - low, low)
        if len(chunk) != high - low:
            raise ValueError(
                f"WebDataset shard {self._location!r} is cut short: {what} needs "
                f"bytes [{low}, {high}) but the file now ends at {os.fstat(fd).st_size}. It "
                "changed since it was indexed; restore it or reopen it."
            )
        return chunk, low

    def _what(self, start: int, stop: int) -> str:
        what = f"sample {start}" if stop - start == 1 else f"samples {start} to {stop - 1}"
        return f"{what} (key {str(self.index.keys[start])!r}{'...' * (stop - start > 1)})"

    def _build(self, start: int, stop: int) -> list[Sample]:
        """Samples ``start:stop`` (in range) from one read of their bytes."""
        if start == stop:
            return []
        data, low = self._span(start, stop, self._what(start, stop))
        index = self.index
        keys = index.keys[start:stop].tolist()
        bounds = index.starts[start : stop + 1].tolist()
        first, end = bounds[0], bounds[-1]
        offsets = (index.offsets[first:end] - low).tolist()
        sizes = index.sizes[first:end].tolist()
        fields = [index.names[f] for f in index.fields[first:end].tolist()]
        samples = []
        for number, (begin, finish) in enumerate(itertools.pairwise(bounds)):
            sample: Sample = {"__key__": keys[number], "__url__": self.path}
            for member in range(begin - first, finish - first):
                at = offsets[member]
                sample[fields[member]] = bytes(data[at : at + sizes[member]])
            if self._decoders is not None:
                where = f"shard {self._location!r}, sample {start + number}"
                decode_fields(sample, self._decoders, where)
            samples.append(sample)
        return samples

    def read(self, index: int) -> Sample:
        """Sample ``index``: ``{"__key__", "__url__", field: bytes or decoded value, ...}``."""
        index = check_index(self.name, index, len(self))
        return self._build(index, index + 1)[0]

    def read_range(self, start: int, stop: int) -> list[Sample]:
        """Samples ``start`` to ``stop`` (exclusive), from one read of their bytes."""
        check_range(self.name, start, stop, len(self))
        return self._build(start, stop)

    def read_many(self, indices: NDArray[np.intp]) -> list[Sample]:
        """Samples at ``indices`` (in range), in that order: one read per run of neighbours."""
        wanted = np.asarray(indices, dtype=np.int64)
        if wanted.size and (wanted.min() < 0 or wanted.max() >= len(self)):
            check_index(self.name, int(wanted[(wanted < 0) | (wanted >= len(self))][0]), len(self))
        cuts = (np.flatnonzero(np.diff(wanted) != 1) + 1).tolist()
        out: list[Sample] = []
        for begin, end in zip([0, *cuts], [*cuts, wanted.size], strict=True):
            if end > begin:
                out += self._build(int(wanted[begin]), int(wanted[end - 1]) + 1)
        return out

    def __getstate__(self) -> dict[str, Any]:
        """Pickle the index, not the open file or the loaded bytes (workers load their own)."""
        return {**self.__dict__, "_data": None, "_fd": None, "_lock": None, "_index": self._pinned}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _lock=threading.Lock())

    def __repr__(self) -> str:
        return f"WebDatasetShardReader({self._location!r}, samples={len(self)})"
