"""Write flat token shards: a stream of token arrays cut into samples, then ``index.json``."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from lightning_resumable_data.shards.token_index import (
    INDEX_FILE,
    TokenShardIndex,
    read_token_index,
)

__all__ = ["write_token_shards"]


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
