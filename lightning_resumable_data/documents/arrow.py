"""Hugging Face ``datasets`` on disk and Parquet files with a token-list column.

A token-list column (``list<int>``, e.g. ``input_ids`` after ``dataset.map(tokenize)``) is,
in Arrow, a flat values buffer and an offsets buffer per record batch: exactly a
:class:`~lightning_resumable_data.documents.CorpusPart`. :func:`open_hf_dataset` memory-maps
the Arrow files that ``Dataset.save_to_disk`` writes and hands those buffers over without a
copy; :func:`open_parquet` decodes the column (Parquet is compressed, so it is read into
memory, the column alone; from a URL, only the footer and that column's chunks are fetched,
by byte ranges through the cache). Needs ``pyarrow`` (``pip install lightning-resumable-data[hf]``);
``datasets`` itself is not imported.

Example:
    >>> import tempfile, os, pyarrow as pa, pyarrow.parquet as pq
    >>> path = os.path.join(tempfile.mkdtemp(), "docs.parquet")
    >>> pq.write_table(pa.table({"input_ids": [[1, 2], [3]]}), path)
    >>> corpus = open_parquet(path)
    >>> len(corpus), corpus.document(0).tolist()
    (2, [1, 2])
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from lightning_resumable_data.documents.corpus import CorpusPart, DocumentCorpus
from lightning_resumable_data.documents.files import CorpusFile

if TYPE_CHECKING:
    from lightning_resumable_data.remote.cache import ShardCache

__all__ = ["open_hf_dataset", "open_parquet"]


def _pyarrow() -> Any:
    try:
        import pyarrow
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError(
            "reading Arrow or Parquet needs pyarrow: pip install 'lightning-resumable-data[hf]'."
        ) from None
    return pyarrow


def _parts(table: Any, column: str, source: str) -> tuple[list[CorpusPart], list[Any]]:
    pa = _pyarrow()
    if column not in table.column_names:
        raise ValueError(
            f"{source!r} has no column {column!r}; its columns are {table.column_names}. "
            "Pass column= with the name of the token-id list column (e.g. 'input_ids')."
        )
    kind = table.schema.field(column).type
    is_list = pa.types.is_list(kind) or pa.types.is_large_list(kind)
    if not is_list or not pa.types.is_integer(kind.value_type):
        raise TypeError(
            f"column {column!r} of {source!r} has type {kind}; expected a list of integer "
            "token ids (list<int32> or list<int64>). Tokenise the text column first, e.g. "
            "dataset.map(lambda b: tokenizer(b['text']), batched=True)."
        )
    parts, lengths = [], []
    for chunk in table.column(column).chunks:
        if chunk.null_count or chunk.values.null_count:
            raise ValueError(
                f"column {column!r} of {source!r} holds null documents or tokens; drop them "
                "(dataset.filter(lambda r: r[column] is not None)) and save again."
            )
        offsets = chunk.offsets.to_numpy(zero_copy_only=True).astype(np.int64, copy=False)
        values = chunk.values.to_numpy(zero_copy_only=True)
        parts.append(CorpusPart(values, offsets[:-1]))
        lengths.append(np.diff(offsets))
    return parts, lengths


def _corpus(
    tables: list[Any],
    names: list[str],
    column: str,
    source: str,
    reopen: tuple[Any, tuple[Any, ...]] | None = None,
) -> DocumentCorpus:
    """The corpus of ``tables`` (one per file of ``names``), concatenated."""
    table = _pyarrow().concat_tables(tables) if len(tables) > 1 else tables[0]
    parts, lengths = _parts(table, column, source)
    flat = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
    files = [CorpusFile(name, t.num_rows) for name, t in zip(names, tables, strict=True)]
    return DocumentCorpus(parts, flat, name=source, reopen=reopen, files=files)


def open_hf_dataset(path: str | os.PathLike[str], column: str = "input_ids") -> DocumentCorpus:
    """Open a dataset saved with ``datasets.Dataset.save_to_disk`` (memory-mapped, no copy).

    Args:
        path: The directory ``save_to_disk`` wrote (with ``state.json`` and ``.arrow`` files).
        column: The token-id list column.

    Raises:
        FileNotFoundError: ``path`` has no ``state.json`` (a ``DatasetDict`` directory:
            pass one split's sub-directory).
        ValueError: The column is missing or holds nulls; an empty document.
        TypeError: The column is not a list of integers.

    Example:
        >>> import tempfile
        >>> from datasets import Dataset
        >>> path = tempfile.mkdtemp()
        >>> Dataset.from_dict({"input_ids": [[5, 6, 7]]}).save_to_disk(path)  # doctest: +ELLIPSIS
        ...
        >>> open_hf_dataset(path).document(0).tolist()
        [5, 6, 7]
    """
    pa = _pyarrow()
    root = Path(path)
    state_file = root / "state.json"
    if not state_file.exists():
        splits = sorted(p.name for p in root.glob("*/state.json"))
        hint = f" It holds splits {splits}: pass one of them." if splits else ""
        raise FileNotFoundError(
            f"{str(root)!r} has no state.json, so it is not a Dataset.save_to_disk directory.{hint}"
        )
    files = [
        root / entry["filename"] for entry in json.loads(state_file.read_text())["_data_files"]
    ]
    tables = []
    for file in files:
        source = pa.memory_map(str(file), "r")
        try:
            tables.append(pa.ipc.open_stream(source).read_all())
        except pa.ArrowInvalid:
            tables.append(pa.ipc.open_file(source).read_all())
    names = [str(file) for file in files]
    return _corpus(tables, names, column, str(root), (open_hf_dataset, (str(root), column)))


def open_parquet(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    column: str = "input_ids",
    *,
    cache: ShardCache | None = None,
    chunk_bytes: int = 16 << 20,
) -> DocumentCorpus:
    """Read the token column of one or more Parquet files (e.g. ``Dataset.to_parquet``).

    Only ``column`` is decoded, into memory (Parquet pages are compressed). A file at a URL
    is read by byte ranges in cached chunks of ``chunk_bytes``
    (:mod:`~lightning_resumable_data.remote.chunks`): the footer, the metadata and the
    column's chunks, never the other columns; ``cache`` is ``remote.default_cache()`` if
    ``None``.

    Raises:
        ValueError: The column is missing or holds nulls; an empty document.
        TypeError: The column is not a list of integers.

    Example:
        >>> import tempfile, os, pyarrow as pa, pyarrow.parquet as pq
        >>> path = os.path.join(tempfile.mkdtemp(), "t.parquet")
        >>> pq.write_table(pa.table({"text": ["a"]}), path)
        >>> open_parquet(path)
        Traceback (most recent call last):
        ...
        ValueError: ... has no column 'input_ids'; its columns are ['text']. ...
    """
    _pyarrow()
    import pyarrow.parquet as pq

    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    tables, shown = [], []
    for item in items:
        reader: Any = item
        if isinstance(item, str) and "://" in item:  # object storage, by ranges (remote/)
            from lightning_resumable_data.remote import redact
            from lightning_resumable_data.remote.chunks import ChunkedRemoteFile

            reader, item = ChunkedRemoteFile(item, cache, chunk_bytes=chunk_bytes), redact(item)
        shown.append(os.fspath(item))
        names = pq.read_schema(reader).names
        if column not in names:
            raise ValueError(
                f"{shown[-1]!r} has no column {column!r}; its columns are {names}. "
                "Pass column= with the name of the token-id list column (e.g. 'input_ids')."
            )
        tables.append(pq.read_table(reader, columns=[column]))
    source = shown[0] if len(items) == 1 else f"{len(items)} Parquet files"
    return _corpus(tables, shown, column, source)
