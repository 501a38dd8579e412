"""What a shard reader is: the ``ShardReader`` and ``MapStyle`` protocols, and their checks.

A reader knows its length without loading anything, reads one sample or a range, and is
made resident by ``load()`` and released by ``close()``; :func:`check_index` and
:func:`check_range` give every reader the same ``IndexError`` for a sample out of range,
:func:`check_readers` checks a shard list and :func:`check_readers_unchanged` its storage
on resume.

Example:
    >>> check_index("s0", -1, 5), isinstance([1, 2], MapStyle)
    (4, True)
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from lightning_resumable_data.state import StateMismatchError

__all__ = [
    "MapStyle",
    "ShardReader",
    "check_index",
    "check_range",
    "check_readers",
    "check_readers_unchanged",
]

T_co = TypeVar("T_co", covariant=True)
T = TypeVar("T")


@runtime_checkable
class ShardReader(Protocol[T_co]):
    """What the sharded dataset and loader need from one shard.

    ``__len__`` must not load the shard. ``load()`` makes it resident (idempotent) and
    ``close()`` releases it (idempotent); ``read`` and ``read_range`` load it on demand.
    ``check()`` raises if the backing storage no longer matches ``len`` (checked on resume).
    """

    @property
    def name(self) -> str: ...  # noqa: D102
    def __len__(self) -> int: ...
    def read(self, index: int) -> T_co: ...  # noqa: D102
    def read_range(self, start: int, stop: int) -> Collection[T_co]: ...  # noqa: D102
    def load(self) -> None: ...  # noqa: D102
    def close(self) -> None: ...  # noqa: D102
    def check(self) -> None: ...  # noqa: D102


@runtime_checkable
class MapStyle(Protocol[T_co]):
    """A map-style dataset: ``len`` and integer indexing."""

    def __len__(self) -> int: ...
    def __getitem__(self, index: int, /) -> T_co: ...


def check_index(name: str, index: int, length: int) -> int:
    """``index`` of shard ``name`` as a non-negative index (negative counts from the end)."""
    if not -length <= index < length:
        raise IndexError(f"index {index} is out of range for shard {name!r} of {length} samples.")
    return index % length


def check_range(name: str, start: int, stop: int, length: int) -> None:
    """Raise ``IndexError`` unless ``0 <= start <= stop <= length``."""
    if not 0 <= start <= stop <= length:
        raise IndexError(
            f"range [{start}, {stop}) must satisfy 0 <= start <= stop <= {length} "
            f"(the length of shard {name!r})."
        )


def check_readers(readers: Iterable[T], owner: str) -> list[T]:
    """``readers`` as a list, after checking that it is a non-empty list of shard readers."""
    readers = list(readers)
    if not readers:
        raise ValueError(
            f"{owner} got an empty shard list; pass at least one reader "
            "(open_token_shards(directory) returns one per shard)."
        )
    checked: set[type] = set()  # a protocol check per class, not per shard (10^4 shards)
    for number, reader in enumerate(readers):
        if type(reader) in checked:
            continue
        checked.add(type(reader))
        if not isinstance(reader, ShardReader):
            raise TypeError(
                f"readers[{number}] is a {type(reader).__name__}, not a ShardReader; wrap "
                "a map-style dataset in DatasetShardReader."
            )
    return readers


def check_readers_unchanged(readers: Sequence[ShardReader[Any]], sizes: Sequence[int]) -> None:
    """Raise ``StateMismatchError`` if a shard's storage vanished or changed since ``sizes``.

    A reader with an ``opened`` flag that is ``False`` (a token shard not read yet) is
    skipped: nothing of it was looked at, and its first load checks it against its size.
    """
    for number, reader in enumerate(readers):
        if not getattr(reader, "opened", True):
            continue
        try:
            reader.check()
        except (OSError, ValueError) as error:
            raise StateMismatchError(
                f"Cannot resume over shard {number} ({reader.name!r}): {error} A shard that "
                "vanished or changed between save and resume would make the resumed run "
                "read other samples. Restore the shard, or start a fresh run."
            ) from error
        if len(reader) != sizes[number]:
            raise StateMismatchError(
                f"Cannot resume over shard {number} ({reader.name!r}): it now has "
                f"{len(reader)} samples, it had {sizes[number]}."
            )
