"""LitData's ``index.json`` (what ``litdata.optimize`` writes), read and checked on its own.

The index lists the chunk files in order (``chunks``: ``filename``, ``chunk_size`` items,
``chunk_bytes``, ``dim`` tokens) and how items were written (``config``: ``data_format``, one
serializer name per pytree leaf; ``data_spec``, the serialized pytree ``TreeSpec``;
``compression`` and ``compression_level``; ``item_loader``; ``encryption``). Everything a
reader cannot honour (encryption, another item loader, an unknown serializer) is refused
here, before any chunk file is touched.

Example:
    >>> serializer_key("no_header_numpy:5"), serializer_key("image:png"), serializer_key("str")
    ('no_header_numpy', 'image', 'str')
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from lightning_resumable_data.formats._litdata_leaves import (
    SERIALIZERS,
    TreeNode,
    parse_tree_spec,
    serializer_key,
)

__all__ = [
    "INDEX_FILE",
    "LitDataIndex",
    "parse_litdata_index",
    "read_litdata_index",
    "serializer_key",
]

INDEX_FILE: Final = "index.json"
ITEM_LOADERS: Final = ("PyTreeLoader", "TokensLoader")
_LEVELS: Final = ("chunk", "batch", "sample")
_TOKEN_LEAVES: Final = ("no_header_numpy", "no_header_tensor")


@dataclass(frozen=True, slots=True)
class LitDataIndex:
    """The parts of a LitData ``index.json`` a reader needs, checked.

    Attributes:
        directory: The directory of ``index.json`` and the chunk files.
        item_loader: ``"PyTreeLoader"`` (one item per written sample) or ``"TokensLoader"``
            (fixed-length token blocks across each chunk).
        data_format: The serializer name of each pytree leaf, in leaf order.
        tree: The item's structure (from ``data_spec``), or ``None`` for a bare leaf.
        compression: ``"zstd"``, ``"zstd:N"`` or ``None``.
        compression_level: ``"chunk"`` (whole ``.zstd.bin`` files), ``"batch"`` (zstd frames
            of items inside ``.bin``) or ``"sample"`` (each item its own zstd frame).
        files: Chunk file names, in order.
        items: Items (written samples) per chunk.
        chunk_bytes: Bytes per chunk, uncompressed (LitData's ``chunk_bytes``).
        dims: Tokens per chunk (``TokensLoader``), else ``None``.
    """

    directory: str
    item_loader: str
    data_format: tuple[str, ...]
    tree: TreeNode | None
    compression: str | None
    compression_level: str
    files: tuple[str, ...]
    items: tuple[int, ...]
    chunk_bytes: tuple[int, ...]
    dims: tuple[int | None, ...]

    @property
    def whole_file_compressed(self) -> bool:
        """Whether each chunk file is one zstd frame (``compression_level="chunk"``)."""
        return self.compression is not None and self.compression_level == "chunk"


def _bad(path: str, problem: str) -> ValueError:
    return ValueError(
        f"{path!r} is not a LitData index this reader can read: {problem}. Rewrite the "
        "dataset with litdata.optimize(...)."
    )


def read_litdata_index(directory: str | os.PathLike[str]) -> LitDataIndex:
    """Read and check the ``index.json`` of a LitData directory (no chunk file is touched).

    Raises:
        FileNotFoundError: No ``index.json`` in ``directory``.
        ValueError: The index is malformed, encrypted, of another item loader, or names a
            serializer this reader does not know.

    Example:
        >>> import tempfile
        >>> directory = Path(tempfile.mkdtemp())
        >>> config = {"data_format": ["int"], "data_spec": None, "compression": None,
        ...           "item_loader": "PyTreeLoader", "encryption": None}
        >>> chunk = {"filename": "chunk-0-0.bin", "chunk_size": 2, "chunk_bytes": 36, "dim": None}
        >>> index_json = json.dumps({"chunks": [chunk], "config": config})
        >>> _ = (directory / "index.json").write_text(index_json)
        >>> index = read_litdata_index(directory)
        >>> index.files, index.items, index.data_format
        (('chunk-0-0.bin',), (2,), ('int',))
    """
    path = Path(directory) / INDEX_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise FileNotFoundError(
            f"no {INDEX_FILE} in {str(Path(directory))!r}: not a LitData dataset directory. Pass "
            "the output_dir of litdata.optimize(...), or its URL (s3://...)."
        ) from None
    return parse_litdata_index(text, str(Path(directory)), str(path))


def parse_litdata_index(text: str, directory: str, where: str) -> LitDataIndex:
    """:func:`read_litdata_index` of the index text ``text``, from ``where`` (for errors).

    ``directory`` is where the chunk files are (a folder or a URL).

    Example:
        >>> parse_litdata_index("{}", "s3://b/data", "s3://b/data/index.json")
        Traceback (most recent call last):
        ...
        ValueError: 's3://b/data/index.json' is not a LitData index this reader can read: ...
    """
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as error:
        raise _bad(where, f"not JSON ({error})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("config"), dict):
        raise _bad(where, "no 'config' object")
    config: dict[str, Any] = raw["config"]
    encryption = config.get("encryption")
    if encryption:
        raise ValueError(
            f"{where!r} says its chunks are encrypted ({encryption!r}); LitDataChunkReader "
            "does not decrypt. Read them with litdata's StreamingDataset(..., encryption=...), or "
            "write the dataset again without encryption=."
        )
    if config.get("format") == "mds":
        raise _bad(where, "it indexes MosaicML MDS shards (config.format='mds'); read the MDS "
                   "directory with the MDS reader instead")  # fmt: skip
    loader = config.get("item_loader", "PyTreeLoader")
    if loader not in ITEM_LOADERS:
        raise ValueError(
            f"{where!r} was written with item_loader={loader!r}; LitDataChunkReader reads "
            f"{' and '.join(ITEM_LOADERS)} chunks only."
        )
    data_format = config.get("data_format")
    if not isinstance(data_format, list) or not all(isinstance(n, str) for n in data_format):
        raise _bad(where, f"config.data_format={data_format!r} is not a list of serializer names")
    for number, name in enumerate(data_format):
        if serializer_key(name) not in SERIALIZERS:
            raise ValueError(
                f"{where!r}: leaf {number} of every item was written with LitData serializer "
                f"{name!r}, which LitDataChunkReader cannot decode (it knows "
                f"{', '.join(sorted(SERIALIZERS))}). Read this dataset with litdata itself."
            )
    tree = _tree(where, config.get("data_spec"), len(data_format))
    compression, level = _compression(where, config)
    if loader == "TokensLoader" and (
        len(data_format) != 1 or serializer_key(data_format[0]) not in _TOKEN_LEAVES
    ):  # fmt: skip
        raise _bad(where, f"a TokensLoader index must have one no_header_numpy/tensor leaf, "
                   f"not {data_format}")  # fmt: skip
    chunks = raw.get("chunks")
    if not isinstance(chunks, list) or not chunks:
        raise _bad(where, "its 'chunks' list is missing or empty")
    files: list[str] = []
    items: list[int] = []
    sizes: list[int] = []
    dims: list[int | None] = []
    for number, entry in enumerate(chunks):
        ok = isinstance(entry, dict) and isinstance(entry.get("filename"), str)
        count, size = (entry.get("chunk_size"), entry.get("chunk_bytes")) if ok else (None, None)
        dim = entry.get("dim") if ok else None
        if (
            not ok
            or not isinstance(count, int)
            or count < 0
            or not isinstance(size, int)
            or size < 0
            or not (dim is None or (isinstance(dim, int) and dim >= 0))
        ):
            raise _bad(where, f"chunk entry #{number} {entry!r} is malformed")
        if loader == "TokensLoader" and dim is None:
            raise _bad(where, f"TokensLoader chunk {entry['filename']!r} has no 'dim' (tokens)")
        files.append(entry["filename"])
        items.append(count)
        sizes.append(size)
        dims.append(dim)
    return LitDataIndex(
        directory, loader, tuple(data_format), tree, compression, level,
        tuple(files), tuple(items), tuple(sizes), tuple(dims),
    )  # fmt: skip


def _tree(path: str, spec: Any, leaves: int) -> TreeNode | None:
    if spec is None:
        if leaves != 1:
            raise _bad(path, f"no data_spec for {leaves} leaves")
        return None
    try:
        tree = parse_tree_spec(spec)
    except (ValueError, TypeError, KeyError, json.JSONDecodeError) as error:
        raise _bad(path, f"config.data_spec cannot be read ({error})") from None
    count = 1 if tree is None else tree.leaves
    if count != leaves:
        raise _bad(path, f"data_spec has {count} leaves but data_format names {leaves}")
    return tree


def _compression(path: str, config: dict[str, Any]) -> tuple[str | None, str]:
    compression = config.get("compression")
    level = config.get("compression_level") or "chunk"  # omitted on read: whole-file
    if compression is None:
        return None, "chunk"
    if not isinstance(compression, str) or not compression.startswith("zstd"):
        raise ValueError(
            f"{path!r} says compression={compression!r}; LitDataChunkReader reads zstd "
            "(LitData's only codec) or uncompressed chunks."
        )
    if level not in _LEVELS:
        raise _bad(path, f"compression_level={level!r} is not one of {_LEVELS}")
    return compression, str(level)
