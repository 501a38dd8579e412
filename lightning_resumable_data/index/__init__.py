"""Layer 1: pure index math on integers and NumPy arrays.

Nothing here holds state or touches a dataset: permutations of an epoch
(:mod:`~lightning_resumable_data.index.permutation`), fixed-width key derivation
(:mod:`~lightning_resumable_data.index.keys`) and the stride partition of the
global order over data-parallel ranks (:mod:`~lightning_resumable_data.index.partition`).
"""

from lightning_resumable_data.index.keys import KEY_LIMIT, key_rng, key_sequence, key_words
from lightning_resumable_data.index.partition import (
    RankSpan,
    check_rank,
    epoch_total_size,
    rank_span,
    samples_per_rank,
    span_positions,
)
from lightning_resumable_data.index.permutation import (
    EXACT_THRESHOLD,
    FEISTEL_ROUNDS,
    PERMUTATION_ALGORITHMS,
    PermutationAlgorithm,
    check_algorithm,
    feistel_keys,
    feistel_permute,
    feistel_slice,
    randperm,
)

__all__ = [
    "EXACT_THRESHOLD",
    "FEISTEL_ROUNDS",
    "KEY_LIMIT",
    "PERMUTATION_ALGORITHMS",
    "PermutationAlgorithm",
    "RankSpan",
    "check_algorithm",
    "check_rank",
    "epoch_total_size",
    "feistel_keys",
    "feistel_permute",
    "feistel_slice",
    "key_rng",
    "key_sequence",
    "key_words",
    "randperm",
    "rank_span",
    "samples_per_rank",
    "span_positions",
]
