"""Each source is read in passes under any weight changes, with the ideal's order statistics.

The ideal model: a source of ``n`` samples read as fresh NumPy permutations, one per pass,
concatenated. The mixture's semantics say the ``k``-th draw of a source is element ``k`` of
such a sequence (with keyed permutations), whatever the weights do, so its statistics must be
the ideal's, calibrated on replicates of the ideal with the same label sequence:

* repeat distance: the share of draws whose sample was last drawn fewer than ``n / 10``
  draws before (ideal: about 0.5%; i.i.d. draws: about 9.5%);
* duplicates per batch: the share of 1,024-position batches holding a sample twice.

Each case is a small (1,000), a medium (10**5) and an oversampled (3.5 passes) source mixed
with a filler source, with 0, 1, 9 and 99 online weight changes made while the epoch is read
(``update_weights`` at the first position not handed out, the path the Lightning callback
uses).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pytest

from lightning_resumable_data import MixtureDataset, MixtureSampler
from lightning_resumable_data.index.mixture import mixture_probabilities, target_counts

FILLER = 10**6
BATCH = 1024
REPLICATES = 24


@dataclass(frozen=True)
class Case:
    size: int  # samples of the source under test
    weight: float  # its mean weight (changes alternate around it)
    epoch: int  # samples per epoch


CASES = {
    "small": Case(1_000, 0.3, 200_000),  # 60 passes
    "medium": Case(100_000, 0.3, 1_000_000),  # 3 passes
    "oversampled": Case(300_000, 0.7, 1_500_000),  # 3.5 passes
}


def read_epoch(case: Case, changes: int, seed: int = 0) -> tuple[np.ndarray, MixtureSampler]:
    """One epoch's indices, with ``changes`` online weight changes at random positions."""
    mixture = MixtureDataset({"source": range(case.size), "filler": range(FILLER)})
    w = case.weight
    sampler = MixtureSampler(mixture, [w, 1 - w], 1, 0, seed=seed, samples_per_epoch=case.epoch)
    rng = np.random.default_rng(changes)
    cuts = np.sort(rng.choice(np.arange(1, case.epoch), size=changes, replace=False)).tolist()
    it, parts, at = iter(sampler), [], 0
    for i, cut in enumerate([*cuts, case.epoch]):
        parts.append(np.fromiter(itertools.islice(it, cut - at), dtype=np.int64))
        at = cut
        if cut < case.epoch:  # alternate the weight around its mean: 0.6 w, 1.3 w, ...
            new = w * (0.6 if i % 2 == 0 else 1.3)
            assert sampler.update_weights([new, 1 - new], kind="online") == (0, cut)
    assert next(it, None) is None
    return np.concatenate(parts), sampler


def repeat_share(sequence: np.ndarray, size: int) -> float:
    """Share of draws whose sample was drawn fewer than ``size / 10`` draws before."""
    n = len(sequence)
    keys = np.sort(sequence * n + np.arange(n))  # by sample, then by time
    same = keys[1:] // n == keys[:-1] // n
    gaps = np.diff(keys % n)[same]
    return float((gaps < size / 10).sum() / max(1, same.sum()))


def duplicate_batches(sequence: np.ndarray, positions: np.ndarray) -> int:
    """Batches of ``BATCH`` global positions in which the source repeats a sample."""
    width = int(sequence.max()) + 1
    keys = np.sort(positions // BATCH * width + sequence)  # by batch, then by sample
    twice = keys[1:] == keys[:-1]
    return len(np.unique(keys[1:][twice] // width))


def ideal(size: int, draws: int, rng: np.random.Generator) -> np.ndarray:
    passes = -(-draws // size)
    return np.concatenate([rng.permutation(size) for _ in range(passes)])[:draws]


@pytest.mark.parametrize("changes", [0, 1, 9, 99])
@pytest.mark.parametrize("name", list(CASES))
def test_each_source_is_read_in_passes_with_the_ideal_order(name: str, changes: int) -> None:
    case = CASES[name]
    indices, sampler = read_epoch(case, changes)
    assert len(indices) == case.epoch
    mine = indices < case.size  # the source comes first in the mixture
    sequence, positions = indices[mine], np.flatnonzero(mine)

    # Every draw exactly once per pass: each pass is a permutation of the source.
    full = len(sequence) // case.size
    passes = sequence[: full * case.size].reshape(full, case.size)
    assert (np.sort(passes, axis=1) == np.arange(case.size)).all()
    tail = sequence[full * case.size :]
    assert len(np.unique(tail)) == len(tail)
    filler = indices[~mine] - case.size
    assert len(np.unique(filler)) == len(filler)  # under one pass: no repeat at all

    # Segment counts: the last segment's are exact; a cut one's are its share, within a few.
    schedule = sampler.schedule
    for entry, end in zip(
        schedule, [*(e["position"] for e in schedule[1:]), case.epoch], strict=True
    ):
        start = entry["position"]
        got = int(mine[start:end].sum())
        p = mixture_probabilities(entry["weights"], entry["temperature"])
        if end == case.epoch:
            assert got == target_counts(p, end - start)[0]
        else:
            assert abs(got - p[0] * (end - start)) <= 8

    # The ideal's statistics, calibrated on replicates with the same positions.
    rng = np.random.default_rng(1)
    repeats, duplicates = [], []
    for _ in range(REPLICATES):
        model = ideal(case.size, len(sequence), rng)
        repeats.append(repeat_share(model, case.size))
        duplicates.append(duplicate_batches(model, positions))
    ours_repeat = repeat_share(sequence, case.size)
    mean, sd = float(np.mean(repeats)), float(np.std(repeats, ddof=1))
    assert abs(ours_repeat - mean) <= 5 * sd + 1e-4, (ours_repeat, mean, sd)
    ours_dup, mean_dup = duplicate_batches(sequence, positions), float(np.mean(duplicates))
    sd_dup = max(float(np.std(duplicates, ddof=1)), np.sqrt(mean_dup), 1.0)  # Poisson floor
    assert abs(ours_dup - mean_dup) <= 5 * sd_dup, (ours_dup, mean_dup, sd_dup)


def test_the_statistics_see_the_defect_they_guard_against() -> None:
    # I.i.d. draws (what skipping draws at every change amounts to) fail both statistics.
    case, rng = CASES["small"], np.random.default_rng(2)
    draws = int(case.epoch * case.weight)
    positions = np.sort(rng.choice(case.epoch, size=draws, replace=False))
    iid = rng.integers(0, case.size, size=draws)
    model = ideal(case.size, draws, rng)
    assert repeat_share(iid, case.size) > 10 * repeat_share(model, case.size)
    assert duplicate_batches(iid, positions) > 2 * duplicate_batches(model, positions)
