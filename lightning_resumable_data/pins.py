"""Pins: what identifies the bytes a dataset reads, saved in a state and compared on resume.

A file in object storage has an identity where the store gives one: its ETag and, in a
versioned bucket, its version (see :class:`~lightning_resumable_data.remote.RemoteObject`).
A dataset that reads such files says so with a ``pins`` mapping (file name to identity):
:class:`~lightning_resumable_data.shards.DistributedShardedDataset` for its shards,
:class:`~lightning_resumable_data.documents.PackedDataset` for a Megatron ``.bin`` read by
ranges, :class:`~lightning_resumable_data.MixtureDataset` for its sources'. The sampler's
state records them under ``"pins"`` (and so every loader's checkpoint). A resume compares
every saved pin with the identity the file has now (listed when the dataset was opened) and
refuses a file whose bytes changed: the saved position would otherwise read other samples
without a word. A file without an identity on either side (a local file, a server that
sends no ETag) is not compared; its size still is, through the dataset's length.

Example:
    >>> pins = shard_pins(["a.bin", "b.bin"], ["etag=1", None])
    >>> pins
    {'a.bin': 'etag=1'}
    >>> check_pins({"pins": pins}, "ShardedSampler", {"a.bin": "etag=1"})  # unchanged
    >>> try:
    ...     check_pins({"pins": pins}, "ShardedSampler", {"a.bin": "etag=2"})
    ... except StateMismatchError as error:
    ...     print(str(error)[44:112])
    1 file changed since it was saved: 'a.bin' was etag=1, is now etag=2
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from lightning_resumable_data.state import StateMismatchError

__all__ = ["check_pins", "dataset_pins", "shard_pins"]


def shard_pins(names: Iterable[str], identities: Iterable[str | None]) -> dict[str, str]:
    """``{name: identity}`` of the files that have an identity."""
    return {
        name: identity
        for name, identity in zip(names, identities, strict=True)
        if identity is not None
    }


def dataset_pins(dataset: object) -> dict[str, str]:
    """The ``pins`` a dataset declares (``{}`` for one that reads no pinned file)."""
    pins = getattr(dataset, "pins", None)
    return dict(pins) if isinstance(pins, Mapping) else {}


def check_pins(state: object, kind: str, pins: Mapping[str, str]) -> None:
    """Raise ``StateMismatchError`` if a file pinned in ``state`` has other bytes now.

    Args:
        state: A state dict; its ``"pins"`` (absent in states of datasets without pinned
            files, or of versions before pins) maps file names to identities.
        kind: The loading class, for the message.
        pins: The files' identities now.
    """
    saved = state.get("pins") if isinstance(state, Mapping) else None
    if not isinstance(saved, Mapping):
        return
    changed = [
        (name, was, pins[name])
        for name, was in sorted(saved.items())
        if name in pins and pins[name] != was
    ]
    if not changed:
        return
    listed = "; ".join(f"{name!r} was {was}, is now {now}" for name, was, now in changed[:5])
    more = f" (and {len(changed) - 5} more)" if len(changed) > 5 else ""
    raise StateMismatchError(
        f"Cannot load this state into {kind}: {len(changed)} file"
        f"{'s' if len(changed) > 1 else ''} changed since it was saved: {listed}{more}. "
        "Resuming would read other bytes at the saved position. Restore the saved objects (a "
        "versioned bucket keeps them), or resume over the new bytes on purpose: "
        "ShardedDataLoader(strict_resume=False), StatefulDataLoader(strict_resume=False) or "
        "ResumableDataModule(allow_config_change=True)."
    )
