"""Batching packed samples, ``cu_seqlens`` included, for variable-length attention.

``torch``'s default collation stacks arrays of one shape; ``cu_seqlens`` differs from
sample to sample. :func:`collate_packed` stacks the fixed-length arrays and joins the
boundaries into those of the flattened batch, the layout of FlashAttention's
``flash_attn_varlen_func`` (``cu_seqlens`` over ``batch * seq_len`` tokens, ``max_seqlen``).

Example:
    >>> import numpy as np
    >>> samples = [
    ...     {"input_ids": np.arange(4), "cu_seqlens": np.array([0, 1, 4], np.int32)},
    ...     {"input_ids": np.arange(4), "cu_seqlens": np.array([0, 4], np.int32)},
    ... ]
    >>> batch = collate_packed(samples)
    >>> batch["input_ids"].shape, batch["cu_seqlens"].tolist(), batch["max_seqlen"]
    (torch.Size([2, 4]), [0, 1, 4, 8], 4)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray

from lightning_resumable_data.documents._rows import PackedRows

__all__ = ["collate_packed"]


def collate_packed(samples: Sequence[Mapping[str, NDArray[Any]]]) -> dict[str, Any]:
    """Stack a batch of :class:`PackedDataset` samples; join their ``cu_seqlens``.

    Returns:
        Every key of the samples stacked into ``(batch, seq_len)`` tensors, except
        ``cu_seqlens``: one ``int32`` tensor of the flattened batch's boundaries, with
        ``max_seqlen`` (an ``int``) beside it.

    Raises:
        ValueError: An empty batch.
    """
    if not samples:
        raise ValueError("collate_packed got an empty batch; the loader must pass >= 1 sample.")
    if type(samples) is PackedRows and samples.intact():  # read as one batch: no stack
        batch: dict[str, Any] = {k: torch.from_numpy(a) for k, a in samples.arrays.items()}
        if samples.cu_seqlens is not None:
            batch["cu_seqlens"] = torch.from_numpy(samples.cu_seqlens)
            batch["max_seqlen"] = samples.max_seqlen
        return batch
    batch = {}
    for key in samples[0]:
        if key == "cu_seqlens":
            continue
        batch[key] = torch.from_numpy(np.stack([sample[key] for sample in samples]))
    if "cu_seqlens" in samples[0]:
        width = len(samples[0]["input_ids"])
        pieces = [np.diff(sample["cu_seqlens"]) for sample in samples]
        sizes = np.concatenate(pieces)
        cu_seqlens = np.concatenate(([0], np.cumsum(sizes))).astype(np.int32)
        if int(cu_seqlens[-1]) != width * len(samples):
            raise ValueError(
                f"cu_seqlens end at {int(cu_seqlens[-1])}, not batch * seq_len = "
                f"{width * len(samples)}: samples of different seq_len in one batch."
            )
        batch["cu_seqlens"] = torch.from_numpy(cu_seqlens)
        batch["max_seqlen"] = int(sizes.max())
    return batch
