r"""LitData's leaf serializers (decode side) and its serialized pytree ``TreeSpec``.

An item of a ``PyTreeLoader`` chunk is its flattened leaves, each written by the serializer
named in ``data_format`` (layouts from ``litdata/streaming/serializers.py``, 0.2.x);
``data_spec`` (``torch.utils._pytree``'s JSON, protocol 1) rebuilds the structure.

Example:
    >>> import json, struct
    >>> decode_leaf("int", struct.pack("<q", -3)), decode_leaf("str", "é".encode())
    (-3, 'é')
    >>> leaf = {"type": None, "context": None, "children_spec": []}
    >>> node = {"type": "builtins.dict", "context": '["a"]', "children_spec": [leaf]}
    >>> unflatten(parse_tree_spec(json.dumps([1, node])), [1])
    {'a': 1}
"""

from __future__ import annotations

import json
import pickle
import struct
from collections import OrderedDict, defaultdict, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import torch

from lightning_resumable_data.formats._litdata_json import nested_loads

__all__ = [
    "SERIALIZERS",
    "TreeNode",
    "decode_item",
    "decode_leaf",
    "parse_tree_spec",
    "serializer_key",
    "unflatten",
]

# litdata.constants._NUMPY_DTYPES_MAPPING (object, bytes, str and void are not buffers: refused)
NUMPY_DTYPES: Final = dict(enumerate(np.dtype(t) for t in (
    np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, np.float32, np.float64, np.complex64, np.complex128, np.bool_,
)))  # fmt: skip
# litdata.constants._TORCH_DTYPES_MAPPING
TORCH_DTYPES: Final = dict(enumerate((
    torch.float32, torch.float32, torch.float64, torch.float64, torch.complex64,
    torch.complex64, torch.complex128, torch.complex128, torch.float16, torch.float16,
    torch.bfloat16, torch.uint8, torch.int8, torch.int16, torch.int16, torch.int32,
    torch.int32, torch.int64, torch.int64, torch.bool, torch.uint16,
)))  # fmt: skip
# Leaves kept as their stored bytes: encoded media (decode them yourself, no vision stack here).
RAW_BYTES: Final = frozenset(
    {"pil", "jpeg", "image", "video", "audio", "nifti", "mesh", "pdf", "tiff", "tifffile",
     "file", "graph", "bytes"}
)  # fmt: skip
SERIALIZERS: Final = RAW_BYTES | {
    "int", "float", "bool", "str", "text", "numpy", "no_header_numpy", "tensor",
    "no_header_tensor", "pickle", "json", "jpeg_array",
}  # fmt: skip
_KNOWN_NAMES: Final = frozenset(SERIALIZERS | {"tifffile"})
_FACTORIES: Final[dict[str, Callable[[], Any]]] = {
    f.__name__: f for f in (list, dict, set, tuple, int, float, str, bytes, bool)
}


def serializer_key(name: str) -> str:
    """The serializer of a ``data_format`` name, by LitData's own rule (``_data_format_to_key``).

    ``"head:sub"`` is read by ``sub`` when that names a serializer (``graph:pickle`` is read
    with ``pickle``), else by ``head`` (``no_header_numpy:5``, ``image:png``).
    """
    if ":" in name:
        head, sub = name.split(":", 1)
        return sub if sub in _KNOWN_NAMES else head
    return name


def _dtype_index(name: str) -> int:
    return int(name.split(":", 1)[1])


def _numpy(payload: bytes) -> np.ndarray[Any, Any]:
    dtype_index, ndim = struct.unpack_from("<II", payload, 0)
    shape = struct.unpack_from(f"<{ndim}I", payload, 8)
    dtype = NUMPY_DTYPES[dtype_index]
    body = payload[8 + 4 * ndim :]
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(body) != expected:
        raise ValueError(f"{len(body)} bytes of data for a {dtype} array of shape {shape}")
    array: np.ndarray[Any, Any] = np.frombuffer(body, dtype=dtype).reshape(shape).copy()
    return array


def _flat_numpy(payload: bytes, dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    array: np.ndarray[Any, Any] = np.frombuffer(payload, dtype=dtype).copy()
    return array


def _flat_tensor(payload: bytes, dtype: torch.dtype) -> torch.Tensor:
    if not payload:
        return torch.empty((0,), dtype=dtype)
    return torch.frombuffer(bytearray(payload), dtype=dtype)


def _tensor(payload: bytes) -> torch.Tensor:
    dtype_index, rank = struct.unpack_from(">II", payload, 0)
    shape = struct.unpack_from(f">{rank}I", payload, 8)
    dtype = TORCH_DTYPES[dtype_index]
    body = payload[8 + 4 * rank :]
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(body) != expected:
        raise ValueError(f"{len(body)} bytes of data for a {dtype} tensor of shape {shape}")
    return _flat_tensor(body, dtype).reshape(shape)


def _jpeg_array(payload: bytes) -> list[bytes]:
    (count,) = struct.unpack_from("<I", payload, 0)
    sizes = np.frombuffer(payload, dtype="<u4", count=count, offset=4)
    ends = (4 + 4 * count + np.cumsum(sizes, dtype=np.int64)).tolist()
    if ends and ends[-1] != len(payload):
        raise ValueError(f"{count} images of {int(sizes.sum())} bytes in {len(payload)} bytes")
    starts = [4 + 4 * count, *ends[:-1]]
    return [payload[a:b] for a, b in zip(starts, ends, strict=True)]


_DECODERS: Final[dict[str, Callable[[bytes], Any]]] = {
    "int": lambda p: struct.unpack("<q", p)[0],
    "float": lambda p: struct.unpack("<d", p)[0],
    "bool": lambda p: p[0] != 0,
    "str": lambda p: p.decode("utf-8"),
    "text": lambda p: p.decode("utf-8"),
    "numpy": _numpy,
    "tensor": _tensor,
    "pickle": pickle.loads,  # the corpus is trusted, as LitData trusts it
    "json": nested_loads,
    "jpeg_array": _jpeg_array,
}


def decoder(name: str) -> Callable[[bytes], Any]:
    """The decoder of the leaf written as ``name`` (a ``data_format`` entry)."""
    key = serializer_key(name)
    if key == "no_header_numpy":
        dtype = NUMPY_DTYPES[_dtype_index(name)]
        return lambda p: _flat_numpy(p, dtype)
    if key == "no_header_tensor":
        kind = TORCH_DTYPES[_dtype_index(name)]
        return lambda p: _flat_tensor(p, kind)
    if key in RAW_BYTES:
        return bytes
    return _DECODERS[key]


def decode_leaf(name: str, payload: bytes) -> Any:
    """Leaf ``payload`` written by serializer ``name``, decoded."""
    return decoder(name)(payload)


def decode_item(
    raw: bytes,
    names: tuple[str, ...],
    decoders: list[Callable[[bytes], Any]],
    tree: TreeNode | None,
) -> Any:
    """An item from its stored bytes: ``sizes: u32[leaves]``, then each leaf's bytes.

    Raises:
        ValueError: The sizes disagree with the item's length, or a leaf does not decode
            (the message names the leaf and its serializer).
    """
    count = len(decoders)
    sizes = struct.unpack_from(f"<{count}I", raw, 0)
    if sum(sizes) + 4 * count != len(raw):
        raise ValueError(
            f"its leaf sizes {list(sizes)} add up to {sum(sizes) + 4 * count} bytes with their "
            f"header, the item holds {len(raw)}"
        )
    leaves, cursor = [], 4 * count
    for number, (size, decode) in enumerate(zip(sizes, decoders, strict=True)):
        try:
            leaves.append(decode(raw[cursor : cursor + size]))
        except Exception as error:
            raise ValueError(f"leaf {number} ({names[number]!r}, {size} bytes): {error}") from error
        cursor += size
    return unflatten(tree, leaves)


# -- the item's structure ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TreeNode:
    """A container of the item's pytree: its type, context and children (``None``: a leaf)."""

    kind: str
    context: Any
    children: tuple[TreeNode | None, ...]
    leaves: int


def parse_tree_spec(spec: str) -> TreeNode | None:
    """The structure of ``data_spec`` (``treespec_dumps``' JSON); ``None`` for a bare leaf."""
    protocol, schema = json.loads(spec)
    if protocol != 1:
        raise ValueError(f"TreeSpec serialization protocol {protocol} (known: 1)")
    return _node(schema)


def _node(schema: dict[str, Any]) -> TreeNode | None:
    kind, raw_context = schema["type"], schema["context"]
    if kind is None:
        return None
    children = tuple(_node(child) for child in schema["children_spec"])
    leaves = sum(1 if child is None else child.leaves for child in children)
    if kind in ("builtins.dict", "collections.OrderedDict", "builtins.list", "builtins.tuple"):
        context = json.loads(raw_context)
    elif kind == "collections.deque":
        context = json.loads(raw_context)  # maxlen
    elif kind == "collections.defaultdict" and raw_context["default_factory_module"] == "builtins":
        factory = _FACTORIES.get(raw_context["default_factory_name"])
        if factory is None:
            raise ValueError(f"defaultdict factory {raw_context['default_factory_name']!r}")
        context = (factory, raw_context["dict_context"])
    else:
        raise ValueError(
            f"pytree node type {kind!r} (a namedtuple, a defaultdict of a non-builtin factory "
            "or a custom node) cannot be rebuilt without its class"
        )
    keys = context[1] if kind == "collections.defaultdict" else context
    if kind.endswith("dict") and len(keys) != len(children):
        raise ValueError(f"{kind} node with keys {keys!r} and {len(children)} children")
    return TreeNode(kind, context, children, leaves)


def unflatten(tree: TreeNode | None, leaves: list[Any]) -> Any:
    """The item built from its ``leaves`` in the structure ``tree``."""
    if tree is None:
        return leaves[0]
    return _build(tree, iter(leaves))


def _build(node: TreeNode, leaves: Iterator[Any]) -> Any:
    values = [next(leaves) if child is None else _build(child, leaves) for child in node.children]
    kind = node.kind
    if kind == "builtins.dict":
        return dict(zip(node.context, values, strict=True))
    if kind == "builtins.tuple":
        return tuple(values)
    if kind == "builtins.list":
        return values
    if kind == "collections.OrderedDict":
        return OrderedDict(zip(node.context, values, strict=True))
    if kind == "collections.deque":
        return deque(values, maxlen=node.context)
    factory, keys = node.context
    return defaultdict(factory, zip(keys, values, strict=True))
