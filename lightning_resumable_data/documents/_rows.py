"""A batch of packed samples as batch arrays, and its samples as views of them.

:class:`~lightning_resumable_data.documents.PackedDataset` reads a batch in one vectorised
pass; :func:`packed_rows` splits the flat result into the per-sample dicts torch's fetcher
expects (every array a view, no copy per token), and keeps the batch arrays, so that
:func:`~lightning_resumable_data.documents.collate_packed` returns them without stacking.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["PackedRows", "packed_rows"]

Sample = dict[str, NDArray[Any]]


class PackedRows(list[Sample]):
    """The samples of a batch (dicts of views), with the batch's arrays beside them.

    ``arrays`` holds each fixed-length key as one ``(batch, seq_len)`` array;
    ``cu_seqlens`` (or None) the boundaries of the flattened batch, ``max_seqlen`` its
    longest piece.
    """

    __slots__ = ("_views", "arrays", "cu_seqlens", "max_seqlen")

    def __init__(
        self,
        samples: list[Sample],
        arrays: dict[str, NDArray[Any]],
        cu_seqlens: NDArray[np.int32] | None,
        max_seqlen: int,
    ) -> None:
        super().__init__(samples)
        self.arrays, self.cu_seqlens, self.max_seqlen = arrays, cu_seqlens, max_seqlen
        self._views = [tuple(sample.values()) for sample in samples]

    def intact(self) -> bool:
        """Whether the samples are still the views it was built with (none replaced)."""
        return len(self) == len(self._views) and all(
            len(sample) == len(views)
            and all(a is b for a, b in zip(sample.values(), views, strict=False))
            for sample, views in zip(self, self._views, strict=False)
        )


def packed_rows(
    tokens: NDArray[np.int64],
    ranges: NDArray[np.int64],
    counts: NDArray[np.int64],
    real: NDArray[np.int64],
    seq_len: int,
    boundaries: str,
) -> PackedRows:
    """Split flat batch arrays into per-sample dicts (views) and keep the batch arrays.

    ``tokens``: the batch's tokens, row after row; ``ranges``/``counts``: the sample and
    the length of each piece (a document's part, or padding), in order; ``real``: each
    sample's tokens before padding.

    Example:
        >>> rows = packed_rows(np.arange(6), np.array([0, 0, 1]), np.array([1, 2, 3]),
        ...                    np.array([3, 3]), 3, "both")
        >>> rows[0]["cu_seqlens"].tolist(), rows[1]["position_ids"].tolist()
        ([0, 1, 3], [0, 1, 2])
        >>> rows.cu_seqlens.tolist(), rows.max_seqlen
        ([0, 1, 3, 6], 3)
    """
    rows = real.size
    ids = tokens.reshape(rows, seq_len)
    mask = np.arange(seq_len) < real[:, None]
    heads = np.cumsum(counts) - counts  # piece starts in the flat batch
    arrays: dict[str, NDArray[Any]] = {"input_ids": ids, "loss_mask": mask}
    if boundaries != "cu_seqlens":
        starts = np.repeat(heads, counts)
        arrays["position_ids"] = (np.arange(rows * seq_len) - starts).reshape(rows, seq_len)
    cu_seqlens = None
    per_row: list[NDArray[np.int32]] = []
    if boundaries != "position_ids":
        # each row's piece starts (relative to the row) then seq_len, one flat int32 array
        pieces = np.bincount(ranges, minlength=rows)
        ends = np.cumsum(pieces + 1)
        flat = np.empty(int(ends[-1]), dtype=np.int32)
        slot = np.arange(ranges.size) + ranges  # a piece's place: its index plus its row
        flat[slot] = heads - ranges * seq_len
        flat[ends - 1] = seq_len
        bounds = [0, *ends.tolist()]
        per_row = [flat[bounds[r] : bounds[r + 1]] for r in range(rows)]
        cu_seqlens = np.append(heads, rows * seq_len).astype(np.int32)
    samples: list[Sample] = []
    for row in range(rows):  # building the returned dicts; the arrays are views
        sample = {key: array[row] for key, array in arrays.items()}
        if per_row:
            sample["cu_seqlens"] = per_row[row]
        samples.append(sample)
    return PackedRows(samples, arrays, cu_seqlens, int(counts.max()) if counts.size else 0)
