"""``DatasetShardReader``: any map-style dataset, or a function that builds one, as a shard."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

import numpy as np
from numpy.typing import NDArray

from lightning_resumable_data.shards.protocol import MapStyle, check_index, check_range

__all__ = ["DatasetShardReader"]

T = TypeVar("T")


class DatasetShardReader(Generic[T]):
    """Adapt any map-style dataset, or a function that builds one, into a shard reader.

    Pass a dataset to wrap one that is already in memory (``load``/``close`` do nothing),
    or a zero-argument factory and its ``length`` (from an index or a manifest) to build
    the dataset only when the shard is loaded and drop it on ``close``. Use
    ``functools.partial`` rather than a lambda as the factory if the reader must be sent to
    worker processes started with ``spawn``.

    Args:
        source: A sized map-style dataset, or a factory returning one.
        length: Samples in the shard; required with a factory, checked against the built
            dataset.
        name: Shard name used in errors and fingerprints.

    Example:
        >>> import functools
        >>> reader = DatasetShardReader(functools.partial(list, "abc"), length=3, name="s0")
        >>> reader.loaded, reader.read(0), reader.loaded
        (False, 'a', True)
    """

    def __init__(
        self,
        source: MapStyle[T] | Callable[[], MapStyle[T]],
        length: int | None = None,
        name: str = "",
    ) -> None:
        self._factory: Callable[[], MapStyle[T]] | None
        self._dataset: MapStyle[T] | None
        if isinstance(source, MapStyle):
            self._factory, self._dataset = None, source
            actual = len(source)
            if length is not None and length != actual:
                raise ValueError(f"length={length} disagrees with len(dataset)={actual}.")
            length = actual
        elif callable(source):
            if length is None:
                raise ValueError(
                    "DatasetShardReader(factory) needs length=: the shard's sample count must "
                    "be known without building it (read it from an index or a manifest)."
                )
            self._factory, self._dataset = source, None
        else:
            raise TypeError(
                f"source must be a map-style dataset or a factory, got {type(source).__name__}."
            )
        if isinstance(length, bool) or not isinstance(length, int) or length < 0:
            raise ValueError(f"length={length!r} must be a non-negative int.")
        self._length = length
        self._name = name
        self.loads = 0

    @property
    def name(self) -> str:
        """The shard's name."""
        return self._name

    def __len__(self) -> int:
        return self._length

    @property
    def loaded(self) -> bool:
        """Whether the dataset is built."""
        return self._dataset is not None

    def load(self) -> None:
        """Build the dataset from the factory (nothing to do for a wrapped dataset)."""
        self._data()

    def _data(self) -> MapStyle[T]:
        dataset = self._dataset
        if dataset is None:
            assert self._factory is not None  # only a factory-built dataset is ever dropped
            dataset = self._factory()
            if len(dataset) != self._length:
                raise ValueError(
                    f"shard {self._name!r} was declared with length={self._length} but its "
                    f"factory built a dataset of {len(dataset)} samples; fix the index or the "
                    "factory."
                )
            self._dataset = dataset
            self.loads += 1
        return dataset

    def close(self) -> None:
        """Drop a factory-built dataset (a wrapped dataset stays)."""
        if self._factory is not None:
            self._dataset = None

    def check(self) -> None:
        """Raise if a wrapped dataset changed length."""
        if self._dataset is not None and len(self._dataset) != self._length:
            raise ValueError(
                f"shard {self._name!r} had {self._length} samples and now has {len(self._dataset)}."
            )

    def read(self, index: int) -> T:
        """Sample ``index`` of the shard."""
        return self._data()[check_index(self._name, index, self._length)]

    def read_many(self, indices: NDArray[np.intp]) -> list[T]:
        """Samples at ``indices`` (in range), through the dataset's ``__getitems__`` if any."""
        if type(self).read is not DatasetShardReader.read:  # a subclass reads its own way
            return [self.read(i) for i in indices.tolist()]
        data = self._data()
        batched = getattr(data, "__getitems__", None)
        if batched is not None:
            return list(batched(indices.tolist()))
        return [data[i] for i in indices.tolist()]

    def read_range(self, start: int, stop: int) -> list[T]:
        """Samples ``start`` to ``stop`` (exclusive)."""
        check_range(self._name, start, stop, self._length)
        data = self._data()
        return [data[i] for i in range(start, stop)]

    def __repr__(self) -> str:
        return f"DatasetShardReader(name={self._name!r}, length={self._length})"
