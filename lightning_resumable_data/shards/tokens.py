"""Write and open flat token shards with a small ``index.json`` next to them.

The layout is the common one of LM pretraining: each shard is a raw ``.bin`` file of
tokens (one dtype, native byte order, no header) holding a whole number of fixed-length
samples; ``index.json`` lists the shard files in order with their sample and byte counts::

    {"format": "lightning-resumable-data/token-shards", "version": 1,
     "seq_len": 2048, "dtype": "uint16",
     "shards": [{"file": "shard_00000.bin", "samples": 8192, "bytes": 33554432}, ...]}

Opening a directory reads the index and ``stat``s each file: no shard is loaded. A missing
file, a file whose size disagrees with the index, or an index that disagrees with itself is
an error naming the file and the fix.

Example:
    >>> import tempfile
    >>> directory = tempfile.mkdtemp()
    >>> index = write_token_shards(directory, [np.arange(20), np.arange(12)], seq_len=4,
    ...                            tokens_per_shard=12)
    >>> index.samples, index.dropped_tokens
    ((3, 3, 2), 0)
    >>> readers = open_token_shards(directory)
    >>> [len(r) for r in readers], readers[2].read(1).tolist()
    ([3, 3, 2], [8, 9, 10, 11])
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from lightning_resumable_data.shards._urls import is_url, url_token_shards
from lightning_resumable_data.shards.token_index import (
    INDEX_FILE,
    INDEX_FORMAT,
    INDEX_VERSION,
    TokenShardIndex,
    read_token_index,
)
from lightning_resumable_data.shards.token_reader import TokenShardReader
from lightning_resumable_data.shards.token_writer import write_token_shards

__all__ = [
    "INDEX_FILE",
    "INDEX_FORMAT",
    "INDEX_VERSION",
    "TokenShardIndex",
    "open_token_shards",
    "read_token_index",
    "write_token_shards",
]


def open_token_shards(
    directory: str | os.PathLike[str],
    *,
    seq_len: int | None = None,
    dtype: DTypeLike | None = None,
    pattern: str = "*.bin",
    preload: bool = True,
    cache: Any = None,
    verify: bool = False,
) -> list[TokenShardReader]:
    """Return one :class:`TokenShardReader` per shard of ``directory``, loading none.

    ``directory`` may be a URL (``s3://bucket/shards``, ``https://...``, ``gs://``, ...,
    with the ``[remote]`` extra): the shards are then downloaded into ``cache`` (a
    :class:`~lightning_resumable_data.remote.ShardCache`) as they are needed; see
    :func:`~lightning_resumable_data.remote.open_remote_token_shards`.

    With an ``index.json``, the index gives the order and the sizes (``seq_len``/``dtype``,
    if given, must agree with it), and no shard file is touched: each is checked against
    the index when it is first loaded, so opening (and resuming over) 10^4 shards costs
    milliseconds. ``verify=True`` checks every file now instead (a ``stat`` each), for an
    error before training starts. Without an index, ``seq_len`` and ``dtype`` are required
    and the files matching ``pattern``, sorted by name, are sized from their byte counts.

    Raises:
        FileNotFoundError: No index (and no ``seq_len``), or (``verify=True``, or without
            an index) a listed shard is missing.
        ValueError: (``verify=True``, or without an index) a shard's size disagrees with the
            index or is not a whole number of samples; the index is malformed or disagrees
            with ``seq_len``/``dtype``; or there are no shards.

    Example:
        >>> import tempfile
        >>> directory = Path(tempfile.mkdtemp())
        >>> _ = write_token_shards(directory, [np.arange(8)], seq_len=2, tokens_per_shard=4)
        >>> [len(r) for r in open_token_shards(directory)]
        [2, 2]
        >>> (directory / "shard_00001.bin").write_bytes(b"xx")  # truncated to one token
        2
        >>> readers = open_token_shards(directory)  # touches no file
        >>> readers[1].load()
        Traceback (most recent call last):
        ...
        ValueError: token shard ... has 2 bytes of tokens, not a multiple of seq_len * itemsize ...
        >>> open_token_shards(directory, verify=True)
        Traceback (most recent call last):
        ...
        ValueError: token shard ... has 2 bytes, but index.json says 8 ...
    """
    if is_url(directory):  # object storage: the storage layer's readers (_urls.py)
        return url_token_shards().open(
            directory, seq_len=seq_len, dtype=dtype, pattern=pattern, preload=preload,
            cache=cache,
        )  # fmt: skip
    root = Path(directory)
    if not (root / INDEX_FILE).exists() and seq_len is not None:
        if dtype is None:
            raise ValueError("open_token_shards without an index needs dtype= as well.")
        paths = sorted(root.glob(pattern))
        if not paths:
            raise ValueError(
                f"no files match {pattern!r} in {str(root)!r}: an empty shard list has no data."
            )
        return [TokenShardReader(p, seq_len, dtype, preload=preload) for p in paths]
    index = read_token_index(root)
    given = {
        "seq_len": seq_len,
        "dtype": None if dtype is None else np.dtype(dtype).name,
    }
    for name, listed in (("seq_len", index.seq_len), ("dtype", index.dtype)):
        if given[name] is not None and given[name] != listed:
            raise ValueError(
                f"{name}={given[name]!r} disagrees with {INDEX_FILE}, which says {listed!r}; "
                "drop the argument or open the right directory."
            )
    readers = []
    folder = os.fspath(root)
    for file, count, size in zip(index.files, index.samples, index.shard_bytes, strict=True):
        if not verify:  # no file touched, no Path built: 10^4 shards open in milliseconds
            location = os.path.join(folder, file)
            reader = TokenShardReader(location, index.seq_len, index.dtype, num_samples=count,
                                      preload=preload)  # fmt: skip
            readers.append(reader)
            continue
        path = root / file
        if not path.exists():
            raise FileNotFoundError(
                f"token shard {str(path)!r} is listed in {INDEX_FILE} but does not exist. "
                "Restore it, or rewrite the directory with write_token_shards."
            )
        actual = path.stat().st_size
        if actual != size:
            raise ValueError(
                f"token shard {str(path)!r} has {actual} bytes, but {INDEX_FILE} says {size} "
                f"({count} samples of seq_len={index.seq_len} {index.dtype}): the file is "
                "truncated or was rewritten. Restore it or rewrite the index."
            )
        reader = TokenShardReader(
            path, index.seq_len, index.dtype, num_samples=count, preload=preload
        )
        reader.open()
        readers.append(reader)
    return readers
