"""A dataset made of named sources laid end to end."""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Sized
from typing import Any

import numpy as np
import torch.utils.data

from lightning_resumable_data.randomness import SampleKey

__all__ = ["MixtureDataset"]


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
