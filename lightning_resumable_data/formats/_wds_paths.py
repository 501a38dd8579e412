r"""Shard lists as WebDataset users write them: brace patterns, ``::`` lists, globs, folders.

:func:`brace_expand` follows the ``braceexpand`` package that WebDataset uses: ``{a,b}``
alternatives, ``{000..099}`` integer ranges (a leading zero pads every number to the same
width), ``{a..e}`` letter ranges, an optional step (``{0..10..5}``), nesting, and ``\\``
escapes. :func:`expand_shards` adds what WebDataset adds (``::`` between patterns) and what
a local reader can do besides: a glob, or a folder for the ``.tar`` files in it.

Example:
    >>> brace_expand("shard-{000..002}.tar")
    ['shard-000.tar', 'shard-001.tar', 'shard-002.tar']
    >>> brace_expand("{train,val}-{0..1}.tar")
    ['train-0.tar', 'train-1.tar', 'val-0.tar', 'val-1.tar']
"""

from __future__ import annotations

import glob
import itertools
import os
import re
import string
from collections.abc import Sequence
from typing import Final

__all__ = ["brace_expand", "expand_shards"]

_INT_RANGE: Final = re.compile(r"^(-?\d+)\.\.(-?\d+)(?:\.\.-?(\d+))?$")
_CHAR_RANGE: Final = re.compile(r"^([A-Za-z])\.\.([A-Za-z])(?:\.\.-?(\d+))?$")
_ALPHABET: Final = string.ascii_uppercase + string.ascii_lowercase
_GLOB: Final = re.compile(r"[*?[]")


def _range(first: str, last: str, step_text: str | None, chars: bool) -> list[str]:
    step = int(step_text or 1) or 1
    if chars:
        start, stop = _ALPHABET.index(first), _ALPHABET.index(last)
    else:
        start, stop = int(first), int(last)
    numbers = range(start, stop + 1, step) if start <= stop else range(start, stop - 1, -step)
    if chars:
        return [_ALPHABET[i] for i in numbers]
    padded = any(s.startswith(("0", "-0")) for s in (first, last) if s not in ("0", "-0"))
    width = max(len(first), len(last)) if padded else 0
    return [f"{i:0{width}d}" for i in numbers]


def _split(text: str, separator: str) -> list[str] | None:
    """``text`` cut at the top-level ``separator``s, or ``None`` with no top-level one."""
    parts, depth, start, position = [], 0, 0, 0
    while position < len(text):
        char = text[position]
        if char == "\\":
            position += 1
        elif char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
        elif char == separator and depth == 0:
            parts.append(text[start:position])
            start = position + 1
        position += 1
    return [*parts, text[start:]] if parts else None


def _alternatives(expression: str) -> list[str]:
    """What ``{expression}`` stands for."""
    for regex, chars in ((_INT_RANGE, False), (_CHAR_RANGE, True)):
        match = regex.match(expression)
        if match is not None:
            first, last, step = match.groups()
            return _range(first, last, step, chars)
    parts = _split(expression, ",")
    if parts is None:  # not a list: literal braces around an expanded inside
        return ["{" + inner + "}" for inner in _expand(expression)]
    return [result for part in parts for result in _expand(part)]


def _expand(pattern: str) -> list[str]:
    items: list[list[str]] = []
    depth, start, position = 0, 0, 0
    while position < len(pattern):
        char = pattern[position]
        if char == "\\":
            position += 2
            continue
        if char == "{":
            if depth == 0:
                items.append([pattern[start:position]])
                start = position
            depth += 1
        elif char == "}":
            if depth == 0:
                raise ValueError(f"unbalanced braces in the shard pattern {pattern!r}.")
            depth -= 1
            if depth == 0:
                items.append(_alternatives(pattern[start + 1 : position]))
                start = position + 1
        position += 1
    if depth:
        raise ValueError(f"unbalanced braces in the shard pattern {pattern!r}.")
    items.append([pattern[start:]])
    return ["".join(parts) for parts in itertools.product(*items)]


def brace_expand(pattern: str) -> list[str]:
    """Every string the brace pattern stands for, in order (as ``braceexpand`` expands it).

    Raises:
        ValueError: Unbalanced braces.
    """
    return [re.sub(r"\\(.)", r"\1", result) for result in _expand(pattern)]


def expand_shards(source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[str]:
    """The shard paths ``source`` names, in order.

    A string is split at ``::``, each part brace-expanded; a part that still holds ``*``,
    ``?`` or ``[`` is a glob (its matches sorted), a folder stands for its ``*.tar`` files
    (sorted). A sequence lists paths as they are.

    Raises:
        FileNotFoundError: A glob or a folder matched no ``.tar`` file.
        ValueError: Nothing was named, or a pattern has unbalanced braces.
    """
    if isinstance(source, (str, os.PathLike)):
        found: list[str] = []
        for part in os.fspath(source).split("::"):
            for path in brace_expand(part):
                if os.path.isdir(path):
                    matches = sorted(glob.glob(os.path.join(glob.escape(path), "*.tar")))
                elif _GLOB.search(path):
                    matches = sorted(glob.glob(path))
                else:
                    found.append(path)
                    continue
                if not matches:
                    kind = "folder" if os.path.isdir(path) else "glob"
                    raise FileNotFoundError(
                        f"the {kind} {path!r} matches no .tar shard (from {os.fspath(source)!r})."
                    )
                found += matches
    else:
        found = [os.fspath(path) for path in source]
    if not found:
        raise ValueError(
            f"{source!r} names no shard; pass a path, a brace pattern "
            "('shards-{000..009}.tar'), a glob, a folder or a list of paths."
        )
    return found
