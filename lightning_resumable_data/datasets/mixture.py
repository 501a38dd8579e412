"""A dataset made of named sources laid end to end."""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Sized
from typing import Any

import numpy as np
import torch.utils.data

from lightning_resumable_data.pins import dataset_pins
from lightning_resumable_data.randomness import KeyedBatch, SampleKey

__all__ = ["MixtureDataset", "RemovedSource", "check_mixture"]


class RemovedSource(torch.utils.data.Dataset[Any]):
    """The place of a source removed from a mixture since a checkpoint: never drawn.

    It keeps the source's size, so the other sources keep their global indices and the
    mixture's order up to the resume stays what it was; the source weighs 0 from the resume
    on (see ``docs/changes.md``). Reading it raises.
    """

    def __init__(self, name: str, size: int) -> None:
        self.name, self.size = name, size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> Any:
        raise RuntimeError(
            f"source {self.name!r} was removed from the mixture at a resume and weighs 0: "
            "nothing may draw from it. This is a bug of lightning-resumable-data; please "
            "report it."
        )


class MixtureDataset(torch.utils.data.Dataset[Any]):
    """Named sources laid end to end: global index ``offsets[name] + i`` is ``source[i]``.

    Args:
        datasets: A mapping of names to map-style datasets, or a sequence (named ``"0"``,
            ``"1"``, ...). Empty sources are allowed (a sampler must then give them weight 0).
        return_source: Return ``(sample, source_name)`` instead of the sample.

    Example:
        >>> mix = MixtureDataset({"web": ["a", "b"], "code": ["x"]})
        >>> mix[2], mix.source_of(2), mix.locate(1), dict(mix.offsets)
        ('x', 'code', ('web', 1), {'web': 0, 'code': 2})
        >>> mix.__getitems__([2, 0, 1])  # a batch: one read per source
        ['x', 'a', 'b']
    """

    def __init__(
        self,
        datasets: Mapping[str, Sized] | Sequence[Sized],
        *,
        return_source: bool = False,
    ) -> None:
        if isinstance(datasets, Mapping):
            items = list(datasets.items())
        elif isinstance(datasets, Sequence) and not isinstance(datasets, (str, bytes)):
            items = [(str(i), d) for i, d in enumerate(datasets)]
        else:
            raise TypeError(
                f"datasets must be a mapping of names to datasets or a sequence of datasets, "
                f"got {type(datasets).__name__}."
            )
        if not items:
            raise ValueError("MixtureDataset needs at least one source; got none.")
        for name, dataset in items:
            if not isinstance(name, str):
                raise TypeError(f"source names must be str, got {name!r}.")
            if not isinstance(dataset, Sized):
                raise TypeError(
                    f"source {name!r} is a {type(dataset).__name__} without __len__; mixtures "
                    "need map-style datasets."
                )
        self.names: tuple[str, ...] = tuple(name for name, _ in items)
        self.sources: tuple[Sized, ...] = tuple(d for _, d in items)
        self.sizes: tuple[int, ...] = tuple(len(d) for d in self.sources)
        starts = np.concatenate(([0], np.cumsum(self.sizes, dtype=np.int64)))
        self._starts = starts
        self.offsets: Mapping[str, int] = dict(zip(self.names, starts[:-1].tolist(), strict=True))
        self.return_source = return_source

    def __len__(self) -> int:
        return int(self._starts[-1])

    @property
    def removed(self) -> tuple[str, ...]:
        """Names of the sources removed since a checkpoint (:class:`RemovedSource`)."""
        return tuple(
            n for n, d in zip(self.names, self.sources, strict=True) if isinstance(d, RemovedSource)
        )

    @property
    def pins(self) -> dict[str, str]:
        """The sources' pinned files (:mod:`~lightning_resumable_data.pins`), as ``source/file``."""
        return {
            f"{name}/{file}": identity
            for name, source in zip(self.names, self.sources, strict=True)
            for file, identity in dataset_pins(source).items()
        }

    def locate(self, index: int) -> tuple[str, int]:
        """Return ``(source name, index within the source)`` of a global index."""
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} is out of range for a mixture of {len(self)}.")
        source = int(np.searchsorted(self._starts, index, side="right")) - 1
        return self.names[source], int(index - self._starts[source])

    def source_of(self, index: int) -> str:
        """Return the name of the source a global index belongs to."""
        return self.locate(index)[0]

    def __getitem__(self, index: int) -> Any:
        name, local = self.locate(int(index))
        if isinstance(index, SampleKey):  # keep keyed randomness for the source
            local = SampleKey(local, seed=index.seed, epoch=index.epoch, position=index.position)
        sample = self.sources[self.names.index(name)][local]  # type: ignore[index]
        return (sample, name) if self.return_source else sample

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        """The samples at ``indices``, read with one call per source in the batch.

        A source with its own ``__getitems__`` (sharded or packed data) receives its indices
        as one list; the others are read one by one. Torch's fetcher calls this for a batch.
        A :class:`~lightning_resumable_data.randomness.KeyedBatch` or a batch of
        :class:`SampleKey` is read key by key, so every source receives keys, as through
        ``__getitem__``.

        Raises:
            IndexError: An index is out of range.
        """
        if isinstance(indices, KeyedBatch) or (len(indices) and isinstance(indices[0], SampleKey)):
            return [self[key] for key in indices]
        flat = np.asarray(indices, dtype=np.int64).reshape(-1)
        if flat.size and not (flat.min() >= 0 and flat.max() < len(self)):
            bad = int(flat[(flat < 0) | (flat >= len(self))][0])
            raise IndexError(f"index {bad} is out of range for a mixture of {len(self)}.")
        owners = np.searchsorted(self._starts, flat, side="right") - 1
        local = flat - self._starts[owners]
        samples: list[Any] = [None] * flat.size
        for source in np.unique(owners).tolist():
            where = np.flatnonzero(owners == source).tolist()
            data, name = self.sources[source], self.names[source]
            wanted = local[where].tolist()
            batched = getattr(data, "__getitems__", None)
            read = batched(wanted) if batched is not None else [data[i] for i in wanted]
            for slot, sample in zip(where, read, strict=True):
                samples[slot] = (sample, name) if self.return_source else sample
        return samples


def check_mixture(dataset: object) -> MixtureDataset:
    """Return ``dataset`` if it is a :class:`MixtureDataset`, else raise how to make one."""
    if not isinstance(dataset, MixtureDataset):
        raise TypeError(
            f"MixtureSampler samples a MixtureDataset, got {type(dataset).__name__}. Wrap "
            "the sources: MixtureDataset({'web': web, 'code': code})."
        )
    return dataset
