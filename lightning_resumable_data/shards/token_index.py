"""The token-shard index: ``index.json``, its contents and its validation.

``index.json`` lists the shard files of a directory in order with their sample and byte
counts (the layout is in :mod:`~lightning_resumable_data.shards.tokens`); reading it checks
that it agrees with itself, before any shard file is touched.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np

__all__ = ["INDEX_FILE", "INDEX_FORMAT", "INDEX_VERSION", "TokenShardIndex", "read_token_index"]

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


def _index_error(path: Path, problem: str) -> ValueError:
    return ValueError(
        f"{str(path)!r} is not a valid token-shard index: {problem}. Rewrite it with "
        "write_token_shards(..., overwrite=True)."
    )


def read_token_index(directory: str | os.PathLike[str]) -> TokenShardIndex:
    """Read and validate ``index.json`` on its own (no shard file is touched).

    Example:
        >>> import tempfile
        >>> from lightning_resumable_data.shards.tokens import write_token_shards
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
