"""Exports imported on first use (PEP 562): light modules load without torch and Lightning.

``lrd --version``, ``lrd plan`` and any import of a light module (the index math, the
mixture's plan) would otherwise pay seconds for torch and Lightning, which the package's
``__init__`` modules would import for their exported names.

Example:
    >>> import types
    >>> module = types.ModuleType("demo")
    >>> getattr_, dir_ = lazy_exports(vars(module), "json", {"dumps": ""})
    >>> getattr_("dumps")([1])
    '[1]'
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    namespace: MutableMapping[str, Any], package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module's ``__getattr__`` and ``__dir__`` for exports imported on first use.

    Args:
        namespace: The module's ``globals()``: an imported name is cached there, so later
            look-ups skip ``__getattr__``.
        package: The module's ``__name__``.
        exports: Each exported name -> the submodule that defines it (``""``: ``package``).
    """

    def get(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        where = f"{package}.{exports[name]}" if exports[name] else package
        value = getattr(importlib.import_module(where), name)
        namespace[name] = value
        return value

    def names() -> list[str]:
        return sorted({*namespace, *exports})

    return get, names
