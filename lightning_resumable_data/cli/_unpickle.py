"""A safe reader of ``torch.save`` zip files that never imports torch and never reads a tensor.

``lrd inspect`` needs a checkpoint's plain values (the data state, the step, the epoch),
not its weights. A torch zip file (``torch.save`` since 1.6, so every Lightning ``.ckpt``)
holds them in ``<archive>/data.pkl``, a pickle whose tensors are persistent ids
``('storage', storage_type, key, location, numel)`` pointing at ``<archive>/data/<key>``
records, rebuilt by ``torch._utils._rebuild_tensor_v2`` and friends.

:func:`read_torch_zip` unpickles ``data.pkl`` with a :class:`pickle.Unpickler` whose
``find_class`` returns only what an explicit allowlist names: the containers and plain
values ``torch.load(weights_only=True)`` accepts (``collections.OrderedDict``/``Counter``,
``builtins.set``/``complex``/``bytearray``, ``_codecs.encode`` for bytes), and torch's
rebuild functions, storage types, dtypes and devices, each mapped to a :class:`Placeholder`
that records its arguments and does nothing else. ``persistent_load`` returns a placeholder
too, so no tensor byte is read. What the file cannot run: a global outside the allowlist
is refused before anything calls it, with :func:`torch.load`'s own wording (the message
names the global), so a hostile ``__reduce__`` (``os.system``, ``Path.touch``...) never runs.

The reader accepts exactly what ``weights_only=True`` accepts in the files ``torch.save``
writes (protocol 2). Whatever it cannot decide, it hands to torch (:class:`NeedsTorch`):
a file that is not a zip (torch's legacy format, or not a checkpoint: torch's error then
says why), another pickle protocol, a TorchScript archive, a ``torch.*`` global outside
this list (torch's own allowlist is longer: sparse and quantized types, ...), or any
malformed pickle. Those are read by ``torch.load(weights_only=True)``, as before.
"""

from __future__ import annotations

import io
import pickle
import zipfile
from collections import Counter, OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

__all__ = ["NeedsTorch", "Placeholder", "Refused", "read_torch_zip", "refused"]

_ZIP_MAGIC: Final = b"PK\x03\x04"  # torch._is_zipfile's test
_PROTOCOL: Final = b"\x80\x02"  # torch.save's pickle protocol (DEFAULT_PROTOCOL = 2)
# torch.load never resolves these, even from an allowlist (torch._weights_only_unpickler)
_BLOCKED: Final = frozenset({"sys", "os", "posix", "nt"})
# Python 2 names, mapped before the lookup as torch._utils maps them (same tables)
_IMPORT_MAPPING: Final = {
    "__builtin__": "builtins",
    "copy_reg": "copyreg",
    "Queue": "queue",
    "repr": "reprlib",
    "_abcoll": "collections.abc",
    "UserDict": "collections",
    "UserList": "collections",
    "UserString": "collections",
    "whichdb": "dbm",
    "StringIO": "io",
    "cStringIO": "io",
}
_NAME_MAPPING: Final = {
    ("__builtin__", "xrange"): ("builtins", "range"),
    ("__builtin__", "reduce"): ("functools", "reduce"),
    ("__builtin__", "intern"): ("sys", "intern"),
    ("__builtin__", "unichr"): ("builtins", "chr"),
    ("__builtin__", "unicode"): ("builtins", "str"),
    ("__builtin__", "long"): ("builtins", "int"),
    ("itertools", "izip"): ("builtins", "zip"),
    ("itertools", "imap"): ("builtins", "map"),
    ("itertools", "ifilter"): ("builtins", "filter"),
    ("itertools", "ifilterfalse"): ("itertools", "filterfalse"),
    ("itertools", "izip_longest"): ("itertools", "zip_longest"),
    ("UserDict", "IterableUserDict"): ("collections", "UserDict"),
    ("UserList", "UserList"): ("collections", "UserList"),
    ("UserString", "UserString"): ("collections", "UserString"),
    ("__builtin__", "basestring"): ("builtins", "str"),
    ("exceptions", "StandardError"): ("builtins", "Exception"),
    ("UserDict", "UserDict"): ("collections", "UserDict"),
}


class NeedsTorch(Exception):  # noqa: N818 (a signal, not an error the user sees)
    """The file is not one this reader decides on: let ``torch.load`` read it."""


class Refused(pickle.UnpicklingError):
    """A global ``torch.load(weights_only=True)`` refuses: the file needs a full unpickle."""


@dataclass(frozen=True, eq=False, slots=True)
class Placeholder:
    """A torch object of the file, not built: the global (or ``"storage"``) and its arguments.

    Example:
        >>> Placeholder("torch._utils._rebuild_tensor_v2", ()).name
        'torch._utils._rebuild_tensor_v2'
    """

    name: str
    args: tuple[Any, ...] = ()

    def __repr__(self) -> str:
        return f"<{self.name} not loaded>"


class _Call:
    """An allowlisted torch function: calling it records a :class:`Placeholder`."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, *args: Any) -> Placeholder:
        return Placeholder(self.name, args)


def _rebuild_from_type_v2(func: Any, new_type: Any, args: tuple[Any, ...], state: Any) -> Any:
    """Torch's tensor-subclass rebuild: ``func`` (an allowlisted one) on ``args``; no subclass."""
    if not callable(func):
        raise pickle.UnpicklingError(f"_rebuild_from_type_v2 got {func!r}")
    return func(*args)


class _Size(tuple[int, ...]):
    """``torch.Size``: a tuple."""


_STORAGES: Final = [
    "Double",
    "Float",
    "Half",
    "BFloat16",
    "Long",
    "Int",
    "Short",
    "Char",
    "Byte",
    "Bool",
    "ComplexDouble",
    "ComplexFloat",
]
_QSTORAGES: Final = ["QUInt8", "QInt8", "QInt32", "QUInt4x2", "QUInt2x4"]
_DTYPES: Final = [
    "float16",
    "float32",
    "float64",
    "bfloat16",
    "complex32",
    "complex64",
    "complex128",
    "bool",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "int8",
    "int16",
    "int32",
    "int64",
    "qint8",
    "quint8",
    "qint32",
    "quint4x2",
    "quint2x4",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
]
_REBUILDS: Final = [
    "_rebuild_tensor",
    "_rebuild_tensor_v2",
    "_rebuild_tensor_v3",
    "_rebuild_parameter",
    "_rebuild_parameter_with_state",
    "_rebuild_meta_tensor_no_storage",
    "_rebuild_device_tensor_from_cpu_tensor",
    "_rebuild_device_tensor_from_numpy",
]


def _allowed() -> dict[str, Any]:
    """Every global the reader resolves, by ``module.name``: plain types, or placeholders."""
    allowed: dict[str, Any] = {
        "collections.OrderedDict": OrderedDict,
        "collections.Counter": Counter,
        "builtins.set": set,
        "builtins.complex": complex,
        "builtins.bytearray": bytearray,
        "_codecs.encode": _encode,
        "torch.Size": _Size,
        "torch._tensor._rebuild_from_type_v2": _rebuild_from_type_v2,
    }
    names = [f"torch._utils.{f}" for f in _REBUILDS] + [f"torch.{d}" for d in _DTYPES]
    names += ["torch.device", "torch.Tensor", "torch.nn.parameter.Parameter"]
    names += [f"torch.{s}Storage" for s in _STORAGES + _QSTORAGES]
    names += [f"torch.cuda.{s}Storage" for s in _STORAGES]
    names += ["torch.storage.TypedStorage", "torch.storage.UntypedStorage"]
    for name in names:
        allowed[name] = _Call(name)
    return allowed


def _encode(text: str, encoding: str = "utf-8") -> bytes:
    """``_codecs.encode`` as protocol 2 pickles ``bytes``: ``encode(str, 'latin1')``."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError(f"_codecs.encode({type(text).__name__}, {encoding!r})")
    return text.encode("latin1")


_ALLOWED: Final = _allowed()


def refused(module: str, name: str) -> Refused:
    """The error ``torch.load(weights_only=True)`` raises for a global it does not allow.

    The ``GLOBAL module.name`` in it (``builtins.`` left out, as torch does) is what
    :func:`~lightning_resumable_data.cli._reading.load_checkpoint` names to the user.

    Example:
        >>> str(refused("posix", "system")).split(" was ")[0]
        'Unsupported global: GLOBAL posix.system'
    """
    shown = name if module == "builtins" else f"{module}.{name}"
    return Refused(f"Unsupported global: GLOBAL {shown} was not an allowed global by default.")


class _SafeUnpickler(pickle.Unpickler):
    """Resolves only :data:`_ALLOWED`; every storage is a placeholder, never read."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _NAME_MAPPING:
            module, name = _NAME_MAPPING[module, name]
        else:
            module = _IMPORT_MAPPING.get(module, module)
        full = f"{module}.{name}"
        if module in _BLOCKED:
            raise refused(module, name)
        if full in _ALLOWED:
            return _ALLOWED[full]
        if module == "torch" or module.startswith("torch."):
            raise NeedsTorch(f"a torch global this reader does not know: {full}")
        raise refused(module, name)

    def persistent_load(self, pid: Any) -> Placeholder:
        if not (isinstance(pid, tuple) and pid and pid[0] in ("storage", b"storage")):
            raise NeedsTorch(f"a persistent id that is not a storage: {type(pid).__name__}")
        return Placeholder("storage", pid[1:])


def read_torch_zip(path: Path) -> Any:
    """The object ``torch.load(path, weights_only=True)`` returns, tensors as placeholders.

    Raises:
        Refused: The file names a global that ``weights_only`` refuses (an
            ``UnpicklingError``; nothing was called).
        NeedsTorch: Not a file this reader decides on (see the module's docstring).
    """
    with path.open("rb") as file:
        if file.read(4) != _ZIP_MAGIC:
            raise NeedsTorch("not a zip file (torch's legacy format, or not a checkpoint)")
        try:
            with zipfile.ZipFile(file) as archive:
                data = archive.read(_pickle_record(archive.namelist()))
        except (zipfile.BadZipFile, KeyError, ValueError, OSError) as error:
            raise NeedsTorch(f"unreadable zip: {error}") from None
    if not data.startswith(_PROTOCOL):
        raise NeedsTorch("a pickle protocol torch.save does not write")
    try:
        return _SafeUnpickler(io.BytesIO(data), encoding="utf-8").load()
    except (Refused, NeedsTorch):
        raise  # Refused: by the allowlist, before anything ran
    except Exception as error:  # a malformed pickle: torch's reading says what is wrong
        raise NeedsTorch(f"{type(error).__name__}: {error}") from None


def _pickle_record(names: list[str]) -> str:
    """``<archive>/data.pkl``: torch's records all sit in one top-level folder."""
    tops = {name.split("/", 1)[0] for name in names}
    if len(tops) != 1 or not all("/" in name for name in names):
        raise NeedsTorch("not a torch archive (its records are not in one folder)")
    top = tops.pop()
    if f"{top}/constants.pkl" in names:
        raise NeedsTorch("a TorchScript archive")
    return f"{top}/data.pkl"
