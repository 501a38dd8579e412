"""A griffe extension: read this package's reST-flavoured Google docstrings as Markdown.

The package writes docstrings the way Lightning does: Google sections, Sphinx roles
(``:class:`~pkg.Name```) and ``Example:`` doctests or ``Example::`` literal blocks. griffe
parses Google sections but reads ``Example:`` as an admonition (so a doctest would be
rendered as Markdown) and knows nothing of roles or ``::``. This extension rewrites each
docstring before it is parsed; the package code stays as it is. Loaded from ``mkdocs.yml``
(``plugins.mkdocstrings.handlers.python.options.extensions``).

* ``Example:`` becomes ``Examples:`` (griffe's doctest section);
* a paragraph ending in ``::`` ends in ``:`` and its indented block becomes a fenced
  ``python`` block;
* ``:class:`~pkg.mod.Name``` becomes an optional cross-reference to ``pkg.mod.Name``
  titled ``Name`` (a link where that object is documented, plain code elsewhere).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:class|func|meth|attr|mod|data|exc|obj):`(?P<tilde>~?)(?P<target>[^`]+)`")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def literal_blocks(text: str) -> str:
    """Turn ``Example:`` into ``Examples:`` and reST ``::`` blocks into fenced code."""
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped == "Example:":
            out.append(line.replace("Example:", "Examples:"))
            i += 1
            continue
        if not stripped.endswith("::") or stripped == "::":
            out.append(line)
            i += 1
            continue
        base = _indent(line)
        head = stripped[:-2].rstrip()
        if head in ("Example", "Examples"):
            head = "Examples"
        out.append(" " * base + head + ":")
        i += 1
        block: list[str] = []
        while i < len(lines) and (not lines[i].strip() or _indent(lines[i]) > base):
            block.append(lines[i])
            i += 1
        while block and not block[-1].strip():
            block.pop()
        code = [b for b in block if b.strip()]
        if not code:
            continue
        inner = min(_indent(b) for b in code)
        fence = " " * inner
        out.append(fence + "```python")
        out.extend(b if b.strip() else "" for b in block)
        out.append(fence + "```")
        out.append("")
    return "\n".join(out)


def _resolve(obj: griffe.Object | griffe.Alias, target: str) -> str:
    """The full path of ``target`` as seen from ``obj``, or ``target`` when unknown."""
    target = target.lstrip(".")
    if target.startswith("lightning_resumable_data"):
        return target
    first, _, rest = target.partition(".")
    scope: Any = obj
    while scope is not None:
        try:
            full = scope.resolve(first)
        except (griffe.NameResolutionError, AttributeError, KeyError):
            scope = scope.parent
            continue
        return f"{full}.{rest}" if rest else str(full)
    return target


def roles(text: str, obj: griffe.Object | griffe.Alias) -> str:
    """Turn Sphinx roles into optional autorefs cross-references."""

    def replace(match: re.Match[str]) -> str:
        target = match["target"].removesuffix("()")
        title = target.rsplit(".", 1)[-1] if match["tilde"] else target
        identifier = _resolve(obj, target)
        return f'<autoref optional identifier="{identifier}"><code>{title}</code></autoref>'

    return _ROLE.sub(replace, text)


class ReSTDocstrings(griffe.Extension):
    """Rewrite every docstring of the loaded package before it is parsed."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        """Walk the package once it is loaded (docstrings, members and imports known)."""
        seen: set[int] = set()
        self._walk(pkg, seen)

    def _walk(self, obj: griffe.Object, seen: set[int]) -> None:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        if obj.docstring is not None:
            obj.docstring.value = roles(literal_blocks(obj.docstring.value), obj)
        for member in obj.members.values():
            if not member.is_alias:
                self._walk(member, seen)  # type: ignore[arg-type]
