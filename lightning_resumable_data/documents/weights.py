"""Mixture weights in tokens: what LM users mean by "30% code".

:class:`~lightning_resumable_data.MixtureSampler` weights count *samples*. A ``"concat"``
:class:`PackedDataset` sample is always ``seq_len`` tokens, so over sources packed with
the same ``seq_len`` sample weights already are token weights. Sources with different
``seq_len``, or ``"pad"`` sources (whose samples hold fewer real tokens than ``seq_len``),
need the conversion :func:`token_weights` does: divide each source's token share by its
real tokens per sample.

Example:
    >>> from lightning_resumable_data.documents import DocumentCorpus, PackedDataset
    >>> web = PackedDataset(DocumentCorpus.from_arrays(range(64), [0, 64]), seq_len=8)
    >>> code = PackedDataset(DocumentCorpus.from_arrays(range(64), [0, 64]), seq_len=4)
    >>> token_weights({"web": web, "code": code}, {"web": 0.5, "code": 0.5})
    {'web': 0.3333333333333333, 'code': 0.6666666666666666}
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from lightning_resumable_data.documents.packed import PackedDataset

__all__ = ["real_tokens_per_sample", "token_weights"]


def real_tokens_per_sample(dataset: PackedDataset) -> float:
    """Mean tokens per sample that are not padding (``seq_len`` for ``"concat"``).

    Example:
        >>> from lightning_resumable_data.documents import DocumentCorpus
        >>> corpus = DocumentCorpus.from_arrays(range(6), [0, 2, 6])
        >>> real_tokens_per_sample(PackedDataset(corpus, seq_len=8, mode="pad"))
        3.0
    """
    if dataset.mode == "concat":
        return float(dataset.seq_len)
    real = np.minimum(np.asarray(dataset.corpus.lengths, np.int64) + dataset.sep, dataset.seq_len)
    return float(real.mean())


def token_weights(
    datasets: Mapping[str, PackedDataset], tokens: Mapping[str, float]
) -> dict[str, float]:
    """Sample weights (normalised) that give each source the share ``tokens[name]`` of tokens.

    Raises:
        ValueError: The names differ, or a share is negative or all are zero.
    """
    if set(datasets) != set(tokens):
        raise ValueError(
            f"token shares name {sorted(tokens)} but the datasets are {sorted(datasets)}; "
            "give one share per source."
        )
    if any(share < 0 for share in tokens.values()) or not sum(tokens.values()) > 0:
        raise ValueError(f"token shares {dict(tokens)} must be >= 0 with a positive sum.")
    raw = {name: tokens[name] / real_tokens_per_sample(d) for name, d in datasets.items()}
    total = sum(raw.values())
    return {name: value / total for name, value in raw.items()}
