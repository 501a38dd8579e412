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

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from lightning_resumable_data.shards.readers import TokenShardReader

if TYPE_CHECKING:
    from lightning_resumable_data.remote.cache import ShardCache

__all__ = [
    "INDEX_FILE",
    "INDEX_FORMAT",
    "TokenShardIndex",
    "open_token_shards",
    "read_token_index",
    "write_token_shards",
]

INDEX_FILE: Final = "index.json"
INDEX_FORMAT: Final = "lightning-resumable-data/token-shards"
INDEX_VERSION: Final = 1


@dataclass(frozen=True, slots=True)
class TokenShardIndex:
    """The contents of ``index.json``: shard files in order, with their sizes.

    Attributes:
        seq_len: Tokens per sample.
        dtype: Token dtype name (``"uint16"``, ``"uint32"``, ...).
        files: Shard file names, relative to the directory, in order.
        samples: Samples per shard.
        dropped_tokens: Tokens at the end of the stream that did not fill a whole sample.
    """

    seq_len: int
    dtype: str
    files: tuple[str, ...]
    samples: tuple[int, ...]
    dropped_tokens: int = 0

    @property
    def shard_bytes(self) -> tuple[int, ...]:
        """Expected size of each shard file in bytes."""
        sample_bytes = self.seq_len * np.dtype(self.dtype).itemsize
        return tuple(n * sample_bytes for n in self.samples)

    @property
    def total_samples(self) -> int:
        """Samples in all shards."""
        return sum(self.samples)

    def to_json(self) -> dict[str, Any]:
        """The index as written to ``index.json``."""
        return {
            "format": INDEX_FORMAT,
            "version": INDEX_VERSION,
            "seq_len": self.seq_len,
            "dtype": self.dtype,
            "dropped_tokens": self.dropped_tokens,
            "shards": [
                {"file": f, "samples": n, "bytes": b}
                for f, n, b in zip(self.files, self.samples, self.shard_bytes, strict=True)
            ],
        }


def _check_tokens(tokens: ArrayLike, dtype: np.dtype[Any], number: int) -> np.ndarray[Any, Any]:
    array = np.asarray(tokens)
    if array.ndim != 1:
        raise ValueError(f"token array #{number} has shape {array.shape}; expected 1-D tokens.")
    if array.size == 0:
        return array.astype(dtype)
    if array.dtype == np.bool_ or not np.issubdtype(array.dtype, np.integer):
        raise TypeError(f"token array #{number} has dtype {array.dtype}; expected integers.")
    info = np.iinfo(dtype)
    low, high = int(array.min()), int(array.max())
    if low < info.min or high > info.max:
        raise ValueError(
            f"token array #{number} holds values in [{low}, {high}], outside dtype={dtype} "
            f"[{info.min}, {info.max}]. Pass a wider dtype (e.g. np.uint32)."
        )
    return array.astype(dtype, copy=False)


def write_token_shards(
    directory: str | os.PathLike[str],
    token_arrays: Iterable[ArrayLike],
    seq_len: int,
    *,
    dtype: DTypeLike = np.uint16,
    tokens_per_shard: int = 1 << 24,
    prefix: str = "shard",
    overwrite: bool = False,
) -> TokenShardIndex:
    """Cut a stream of token arrays into fixed-length samples and write them as shards.

    The arrays are concatenated in order (add your own end-of-document tokens) and cut into
    samples of ``seq_len`` tokens; the last ``< seq_len`` tokens of the stream are dropped
    (counted in ``dropped_tokens``). Shards hold ``tokens_per_shard // seq_len`` samples,
    the last one fewer. The stream is written as it is read, one shard open at a time, and
    ``index.json`` is written last (atomically), so a crash leaves no valid index.

    Args:
        directory: Where to write (created if needed).
        token_arrays: 1-D integer arrays, e.g. one per tokenised document.
        seq_len: Tokens per sample.
        dtype: Token dtype on disk; every token must fit.
        tokens_per_shard: Target shard size in tokens (rounded down to whole samples).
        prefix: Shard file name prefix: ``{prefix}_{i:05d}.bin``.
        overwrite: Replace an existing index (and the shard files it lists).

    Returns:
        The index that was written.

    Raises:
        FileExistsError: ``directory`` already holds an index and ``overwrite`` is false.
        ValueError: A bad ``seq_len``/``tokens_per_shard``, tokens that do not fit
            ``dtype``, or a stream without one whole sample.

    Example:
        >>> import tempfile
        >>> index = write_token_shards(tempfile.mkdtemp(), [np.arange(10)], seq_len=3)
        >>> index.files, index.samples, index.dropped_tokens
        (('shard_00000.bin',), (3,), 1)
    """
    np_dtype = np.dtype(dtype)
    if not np.issubdtype(np_dtype, np.integer):
        raise TypeError(f"dtype={np_dtype} must be an integer token dtype.")
    for name, value in (("seq_len", seq_len), ("tokens_per_shard", tokens_per_shard)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} must be a positive int.")
    samples_per_shard = tokens_per_shard // seq_len
    if samples_per_shard == 0:
        raise ValueError(
            f"tokens_per_shard={tokens_per_shard} is smaller than seq_len={seq_len}: a shard "
            "must hold at least one sample. Raise tokens_per_shard."
        )
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    if (root / INDEX_FILE).exists():
        if not overwrite:
            raise FileExistsError(
                f"{str(root / INDEX_FILE)!r} exists; pass overwrite=True to replace those "
                "shards, or write into an empty directory."
            )
        for old in read_token_index(root).files:
            (root / old).unlink(missing_ok=True)
        (root / INDEX_FILE).unlink()

    files: list[str] = []
    samples: list[int] = []
    current: IO[bytes] | None = None
    pending = np.empty(0, dtype=np_dtype)
    try:
        for number, tokens in enumerate(token_arrays):
            array = _check_tokens(tokens, np_dtype, number)
            pending = np.concatenate([pending, array]) if pending.size else array
            while pending.size >= seq_len:
                if current is None:
                    files.append(f"{prefix}_{len(files):05d}.bin")
                    samples.append(0)
                    current = (root / files[-1]).open("wb")
                take = min(samples_per_shard - samples[-1], pending.size // seq_len)
                current.write(np.ascontiguousarray(pending[: take * seq_len]).tobytes())
                pending = pending[take * seq_len :]
                samples[-1] += take
                if samples[-1] == samples_per_shard:
                    current.close()
                    current = None
    finally:
        if current is not None:
            current.close()
    if not files:
        raise ValueError(
            f"the token stream holds {pending.size} tokens, less than one sample of "
            f"seq_len={seq_len}; nothing was written."
        )
    index = TokenShardIndex(seq_len, np_dtype.name, tuple(files), tuple(samples), pending.size)
    temporary = root / (INDEX_FILE + ".tmp")
    temporary.write_text(json.dumps(index.to_json(), indent=1))
    temporary.replace(root / INDEX_FILE)
    return index


def _index_error(path: Path, problem: str) -> ValueError:
    return ValueError(
        f"{str(path)!r} is not a valid token-shard index: {problem}. Rewrite it with "
        "write_token_shards(..., overwrite=True)."
    )


def read_token_index(directory: str | os.PathLike[str]) -> TokenShardIndex:
    """Read and validate ``index.json`` on its own (no shard file is touched).

    Example:
        >>> import tempfile
        >>> directory = tempfile.mkdtemp()
        >>> _ = write_token_shards(directory, [np.arange(8)], seq_len=4)
        >>> read_token_index(directory).samples
        (2,)
    """
    path = Path(directory) / INDEX_FILE
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(
            f"no {INDEX_FILE} in {str(Path(directory))!r}. Write shards with "
            "write_token_shards, or pass seq_len= and dtype= to open_token_shards to size "
            "index-less files from their byte counts."
        ) from None
    except json.JSONDecodeError as error:
        raise _index_error(path, f"not JSON ({error})") from None
    if not isinstance(raw, dict) or raw.get("format") != INDEX_FORMAT:
        raise _index_error(path, f"'format' is not {INDEX_FORMAT!r}")
    if raw.get("version") != INDEX_VERSION:
        raise _index_error(path, f"version={raw.get('version')!r}, expected {INDEX_VERSION}")
    seq_len, dtype, shards = raw.get("seq_len"), raw.get("dtype"), raw.get("shards")
    if not isinstance(seq_len, int) or seq_len < 1 or not isinstance(dtype, str):
        raise _index_error(path, f"seq_len={seq_len!r}, dtype={dtype!r}")
    if not isinstance(shards, list) or not shards:
        raise _index_error(path, "its shard list is empty (an empty shard list has no data)")
    itemsize = np.dtype(dtype).itemsize
    files, samples = [], []
    for number, entry in enumerate(shards):
        ok = isinstance(entry, dict) and isinstance(entry.get("file"), str)
        count, size = (entry.get("samples"), entry.get("bytes")) if ok else (None, None)
        if not ok or not isinstance(count, int) or count < 0:
            raise _index_error(path, f"shard entry #{number} {entry!r} is malformed")
        if size != count * seq_len * itemsize:
            raise _index_error(
                path,
                f"shard {entry['file']!r} lists bytes={size}, but samples * seq_len * itemsize "
                f"= {count} * {seq_len} * {itemsize} = {count * seq_len * itemsize}",
            )
        files.append(entry["file"])
        samples.append(count)
    return TokenShardIndex(
        seq_len, np.dtype(dtype).name, tuple(files), tuple(samples), raw.get("dropped_tokens", 0)
    )


def open_token_shards(
    directory: str | os.PathLike[str],
    *,
    seq_len: int | None = None,
    dtype: DTypeLike | None = None,
    pattern: str = "*.bin",
    preload: bool = True,
    cache: ShardCache | None = None,
) -> list[TokenShardReader]:
    """Return one :class:`TokenShardReader` per shard of ``directory``, loading none.

    ``directory`` may be a URL (``s3://bucket/shards``, ``https://...``, ``gs://``, ...,
    with the ``[remote]`` extra): the shards are then downloaded into ``cache`` (a
    :class:`~lightning_resumable_data.remote.ShardCache`) as they are needed; see
    :func:`~lightning_resumable_data.remote.open_remote_token_shards`.

    With an ``index.json``, the index gives the order and the sizes, and every file is
    checked against it (``seq_len``/``dtype``, if given, must agree with it). Without one,
    ``seq_len`` and ``dtype`` are required and the files matching ``pattern``, sorted by
    name, are sized from their byte counts.

    Raises:
        FileNotFoundError: No index (and no ``seq_len``), or a listed shard is missing.
        ValueError: A shard's size disagrees with the index or is not a whole number of
            samples, the index is malformed or disagrees with ``seq_len``/``dtype``, or
            there are no shards.

    Example:
        >>> import tempfile
        >>> directory = Path(tempfile.mkdtemp())
        >>> _ = write_token_shards(directory, [np.arange(8)], seq_len=2, tokens_per_shard=4)
        >>> [len(r) for r in open_token_shards(directory)]
        [2, 2]
        >>> (directory / "shard_00001.bin").write_bytes(b"xx")  # truncated to one token
        2
        >>> open_token_shards(directory)
        Traceback (most recent call last):
        ...
        ValueError: token shard ... has 2 bytes, but index.json says 8 ...
    """
    if isinstance(directory, str) and "://" in directory:  # object storage (remote/)
        from lightning_resumable_data.remote.tokens import open_remote_token_shards

        return list(
            open_remote_token_shards(
                directory, seq_len=seq_len, dtype=dtype, pattern=pattern, preload=preload,
                cache=cache,
            )
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
    for file, count, size in zip(index.files, index.samples, index.shard_bytes, strict=True):
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
        readers.append(
            TokenShardReader(path, index.seq_len, index.dtype, num_samples=count, preload=preload)
        )
    return readers
