"""The sampler of a sharded dataset: shard-local global order, stride over ranks, O(1) resume."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from lightning_resumable_data.index.sharding import (
    PositionLookup,
    check_shard_sizes,
    sharded_order,
    shards_digest,
)
from lightning_resumable_data.pins import dataset_pins
from lightning_resumable_data.samplers.distributed import DistributedSampler
from lightning_resumable_data.state import StateMismatchError, make_state

__all__ = ["ShardedSampler", "ShardedSource"]


@runtime_checkable
class ShardedSource(Protocol):
    """What a sampler needs from a sharded dataset: sizes, names, and a storage check."""

    @property
    def shard_sizes(self) -> tuple[int, ...]: ...  # noqa: D102
    @property
    def shard_names(self) -> tuple[str, ...]: ...  # noqa: D102
    def check_shards(self) -> None: ...  # noqa: D102


class ShardedSampler(DistributedSampler):
    """Stride a sharded dataset's epoch order over data-parallel ranks, shard by shard.

    The epoch's global order ``G`` visits the shards in an order shuffled from
    ``(seed, epoch)`` and each shard's samples in an order shuffled from
    ``(seed, epoch, shard)`` (see :mod:`lightning_resumable_data.index.sharding`); it yields
    global sample indices (file order: shard 0's samples first). Rank ``r`` of ``W`` reads
    ``G[r], G[r+W], ...``, so all ranks move through the same shard at the same time, and
    the position is one global count: everything :class:`DistributedSampler` does (O(1)
    resume, resume under another world size or batch size, the ``drop_last`` tail) holds
    unchanged. With :class:`~lightning_resumable_data.StatefulDataLoader` it resumes by
    position.

    By default it yields :class:`~lightning_resumable_data.SampleKey` indices: they carry the
    epoch into DataLoader workers, where
    :class:`~lightning_resumable_data.shards.DistributedShardedDataset` needs it to know which
    shards come next.

    State keys: those of :class:`DistributedSampler`; ``fingerprint`` holds ``num_shards``,
    ``dataset_length``, ``shards_digest`` (a hash of the sizes and names), ``seed``,
    ``shuffle_shards``, ``shuffle_samples`` and ``drop_last``; ``pins`` (where the shards
    have an ETag or version) holds what identifies each shard's bytes, compared on resume.

    Args:
        dataset_or_sizes: A sharded dataset (``shard_sizes``, ``shard_names``,
            ``check_shards``), or the samples per shard.
        num_replicas: Data-parallel world size; ``None`` reads the process group.
        rank: Data-parallel rank; ``None`` reads the process group.
        seed: Seed of the orders, in ``[0, 2**63)``; the same on every rank.
        shuffle_shards: Visit the shards in a per-epoch shuffled order.
        shuffle_samples: Visit each shard's samples in a per-epoch shuffled order.
        drop_last: Drop the ragged tail (``< num_replicas`` samples) instead of padding it.
        sample_keys: Yield ``SampleKey`` indices (keep it on with a sharded dataset).

    Example:
        >>> sampler = ShardedSampler([4, 4], num_replicas=2, rank=0, seed=0,
        ...                          shuffle_samples=False)
        >>> indices = list(sampler)
        >>> len(indices), len({i // 4 for i in indices[:2]})  # 2 steps, 1 shard
        (4, 1)
    """

    KIND: Final = "ShardedSampler"  # type: ignore[misc]

    def __init__(
        self,
        dataset_or_sizes: ShardedSource | Sequence[int],
        num_replicas: int | None = None,
        rank: int | None = None,
        seed: int = 0,
        shuffle_shards: bool = True,
        shuffle_samples: bool = True,
        drop_last: bool = False,
        *,
        sample_keys: bool = True,
    ) -> None:
        self.source: ShardedSource | None
        names: tuple[str, ...] | None
        if isinstance(dataset_or_sizes, ShardedSource):
            self.source = dataset_or_sizes
            sizes = check_shard_sizes(dataset_or_sizes.shard_sizes)
            names = tuple(dataset_or_sizes.shard_names)
        else:
            self.source, names = None, None
            sizes = check_shard_sizes(dataset_or_sizes)
        self.shard_sizes: tuple[int, ...] = tuple(int(n) for n in sizes)
        self.shard_names = names
        self.shuffle_shards = bool(shuffle_shards)
        self.shuffle_samples = bool(shuffle_samples)
        super().__init__(
            range(sum(self.shard_sizes)),
            num_replicas,
            rank,
            shuffle=self.shuffle_shards or self.shuffle_samples,
            seed=seed,
            drop_last=drop_last,
            algorithm="feistel",
            sample_keys=sample_keys,
        )
        self._digest = shards_digest(self.shard_sizes, names)
        self.pins = dataset_pins(self.source)  # each shard's ETag and version (pins.py)

    @property
    def fingerprint(self) -> dict[str, Any]:
        """Everything the epoch's order depends on (apart from the epoch)."""
        return {
            "num_shards": len(self.shard_sizes),
            "dataset_length": self.dataset_length,
            "shards_digest": self._digest,
            "seed": self.seed,
            "shuffle_shards": self.shuffle_shards,
            "shuffle_samples": self.shuffle_samples,
            "drop_last": self.drop_last,
        }

    def _order(self, epoch: int) -> PositionLookup:
        return sharded_order(
            self.shard_sizes,
            self.seed,
            epoch,
            shuffle_shards=self.shuffle_shards,
            shuffle_samples=self.shuffle_samples,
        )

    def _positions(self, epoch: int, indices: NDArray[np.int64]) -> NDArray[np.int64]:
        """Where dataset ``indices`` sit in ``epoch``'s order (its inverse, vectorised)."""
        length = self.epoch_length
        inverse = np.empty(length, dtype=np.int64)
        inverse[np.asarray(self._order(epoch)(np.arange(length, dtype=np.int64)))] = np.arange(
            length, dtype=np.int64
        )
        found: NDArray[np.int64] = inverse[np.asarray(indices, dtype=np.int64)]
        return found

    def seek(self, epoch: int, consumed: int) -> None:
        """Start the next iteration at global position ``consumed`` of ``epoch``.

        Example:
            >>> sampler = ShardedSampler([3, 3], num_replicas=2, rank=1)
            >>> sampler.seek(epoch=1, consumed=2)
            >>> len(list(sampler))
            2
        """
        state = make_state(
            self.KIND,
            self.fingerprint,
            epoch=epoch,
            consumed=consumed,
            num_replicas=self.num_replicas,
        )
        skips = [[e, *r] for e in sorted(self.skips) if e >= epoch for r in self.skips[e]]
        if skips:  # a seek keeps the skips to come
            state["skips"] = skips
        super().load_state_dict(state)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a position, refusing it if the shard list changed since it was saved.

        Raises:
            StateMismatchError: The shards changed (a shard vanished, was added, resized or
                renamed, its file no longer matches, or its ETag or version is not the one
                pinned in the state), or anything :meth:`DistributedSampler.load_state_dict`
                refuses.
        """
        check_shards_unchanged(state_dict, self.KIND, self.fingerprint)
        if self.source is not None:
            self.source.check_shards()
        super().load_state_dict(state_dict)


def check_shards_unchanged(state: object, kind: str, fingerprint: Mapping[str, Any]) -> None:
    """Raise a shard-specific ``StateMismatchError`` if ``state`` was saved over other shards.

    Example:
        >>> now = {"num_shards": 2, "dataset_length": 8, "shards_digest": "ab"}
        >>> check_shards_unchanged({"kind": "K", "fingerprint": now}, "K", now)
    """
    if not isinstance(state, Mapping) or state.get("kind") != kind:
        return  # check_state explains what is wrong with it
    saved = state.get("fingerprint")
    if not isinstance(saved, Mapping):
        return
    keys = ("num_shards", "dataset_length", "shards_digest")
    if all(saved.get(key) == fingerprint[key] for key in keys):
        return
    raise StateMismatchError(
        f"Cannot load this state into {kind}: the shards changed since it was saved (saved "
        f"{saved.get('num_shards')} shards, {saved.get('dataset_length')} samples, digest "
        f"{saved.get('shards_digest')!r}; now {fingerprint['num_shards']} shards, "
        f"{fingerprint['dataset_length']} samples, digest {fingerprint['shards_digest']!r}). "
        "A shard vanished, was added, resized or renamed; resuming would replay or skip "
        "samples. Restore the shard set that was used when the state was saved, or start a "
        "fresh run."
    )
