"""``find_sample`` is the inverse of ``trace_step``, for mixtures and planned steps too.

At the sampler level, over random sources, weights, an online weight change (replayed from
the record), world and batch sizes, a resume under another layout mid-epoch and
accumulation: every sample ``trace_step`` names at (epoch, step, rank, position) is found
there by ``find_sample``, and nowhere else; the same for the steps after the record
(planned), as ``trace_step`` plans them.
"""

from __future__ import annotations

from collections import defaultdict
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lightning_resumable_data import DistributedSampler, MixtureDataset, MixtureSampler
from lightning_resumable_data.lightning import _mixture_inverse
from lightning_resumable_data.lightning._step_ranges import epoch_batches
from lightning_resumable_data.lightning.find import Occurrence, find_sample, scan
from lightning_resumable_data.lightning.history import DataHistory
from lightning_resumable_data.lightning.trace import replay_changes, trace_step

Hits = dict[int, list[tuple[int, int, int, int]]]


def _record(
    sampler: DistributedSampler, data: st.DataObject, epochs: int
) -> tuple[DataHistory, tuple[int, int], int]:
    """A run's record: per epoch a layout, changed by a resume; checkpointed at random.

    Returns the record, the checkpoint's data position and its finished steps.
    """
    history, step, seen = DataHistory(), 0, 0
    accumulate, stop_at = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 40))
    for epoch in range(epochs):
        consumed, group, steps = 0, 0, 0
        world, size = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 4))
        change = data.draw(st.integers(1, 6))  # a resume under another layout after this step
        while left := epoch_batches(
            sampler.epoch_length, world=world, batch_size=size, drop_last=False,
            sampler_drop_last=sampler.drop_last, limit=None, consumed=consumed,
        ):  # fmt: skip
            history.observe(
                step, epoch, consumed, world=world, batch_size=size, accumulate=accumulate
            )
            consumed, group, seen = consumed + world * size, group + 1, seen + 1
            if group == accumulate or left == 1:  # a step ends (an epoch's last may be short)
                step, group, steps = step + 1, 0, steps + 1
                if seen >= stop_at:
                    history.steps_done = step
                    return history, (epoch, consumed) if left > 1 else (epoch + 1, 0), step
                if steps == change:
                    world, size = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 4))
    history.steps_done = step
    return history, (epochs, 0), step


def _traced(sampler: DistributedSampler, history: DataHistory, steps: range, **kw: object) -> Hits:
    hits: Hits = defaultdict(list)
    for step in steps:
        for batch in trace_step(sampler, history, step, **kw):  # type: ignore[arg-type]
            for rank in batch.ranks:
                for at, index in zip(rank.positions.tolist(), rank.indices.tolist(), strict=True):
                    hits[index].append((batch.batch.epoch, step, rank.rank, at))
    return hits


def _found(found: list[Occurrence], planned: bool) -> list[tuple[int, int, int, int]]:
    return sorted((h.epoch, h.step, h.rank, h.position) for h in found if h.planned == planned)


@pytest.mark.parametrize("invert", [True, False])
@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_find_is_the_inverse_of_trace_for_a_mixture(data: st.DataObject, invert: bool) -> None:
    """``invert``: the passes' inverse and bisection always (else: as costs choose, a scan)."""
    with patch.object(_mixture_inverse, "BISECTION_COST", 0 if invert else 1 << 62):
        _find_is_the_inverse_of_trace_for_a_mixture(data)


def _find_is_the_inverse_of_trace_for_a_mixture(data: st.DataObject) -> None:
    sizes = data.draw(st.lists(st.integers(1, 20), min_size=2, max_size=3))
    mix = MixtureDataset({f"s{i}": range(n) for i, n in enumerate(sizes)})
    weights = data.draw(st.lists(st.floats(0.1, 4.0), min_size=len(sizes), max_size=len(sizes)))
    budget = data.draw(st.integers(8, 60))
    drop_last = data.draw(st.booleans())
    seed = data.draw(st.integers(0, 2**16))

    def sampler() -> MixtureSampler:
        return MixtureSampler(
            mix, weights, 1, 0, seed=seed, drop_last=drop_last, samples_per_epoch=budget
        )

    history, position, done = _record(sampler(), data, epochs=3)
    change = data.draw(st.lists(st.floats(0.0, 4.0), min_size=len(sizes), max_size=len(sizes)))
    change[0] += 0.5  # not all zero
    where = (data.draw(st.integers(0, 2)), data.draw(st.integers(0, budget - 1)))
    history.note_change(*where, change, 1.0)  # an online change, replayed from the record
    rebuilt = sampler()
    replay_changes(rebuilt, history)
    recorded = _traced(rebuilt, history, range(done))
    for index in range(len(mix)):
        found = find_sample(rebuilt, history, index)
        assert _found(found, planned=False) == sorted(recorded.get(index, [])), index
    name, local = mix.names[-1], sizes[-1] - 1  # by source and index within it, too
    assert find_sample(rebuilt, history, local, source=name) == find_sample(
        rebuilt, history, len(mix) - 1
    )
    planned = _traced(rebuilt, history, range(done, done + 8), position=position)
    steps_planned = {hit[1] for hits in planned.values() for hit in hits}
    last = max((hit[0] for hits in planned.values() for hit in hits), default=0) + 1
    for index in range(len(mix)):
        found = find_sample(rebuilt, history, index, epochs=(0, last), position=position)
        ahead = [hit for hit in _found(found, planned=True) if hit[1] in steps_planned]
        assert ahead == sorted(planned.get(index, [])), index


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_find_plans_as_trace_plans_for_a_single_dataset(data: st.DataObject) -> None:
    size, shuffle = data.draw(st.integers(3, 40)), data.draw(st.booleans())
    sampler = DistributedSampler(
        range(size), 1, 0, shuffle=shuffle, seed=data.draw(st.integers(0, 99))
    )
    history, position, done = _record(sampler, data, epochs=2)
    planned = _traced(sampler, history, range(done, done + 10), position=position)
    recorded = _traced(sampler, history, range(done))
    last = max((hit[0] for hits in planned.values() for hit in hits), default=0) + 1
    steps = {hit[1] for hits in planned.values() for hit in hits}
    for index in range(size):
        found = find_sample(sampler, history, index, epochs=(0, last), position=position)
        assert _found(found, planned=False) == sorted(recorded.get(index, [])), index
        ahead = [hit for hit in _found(found, planned=True) if hit[1] in steps]
        assert ahead == sorted(planned.get(index, [])), index


def test_find_by_source_refusals() -> None:
    mix = MixtureDataset({"a": range(5), "b": range(3)})
    sampler = MixtureSampler(mix, [1.0, 1.0], 1, 0)
    history = DataHistory([[0, 0, 0, 1, 2, 1, 4, 0]])
    with pytest.raises(ValueError, match=r"no source 'c'; its sources are \['a', 'b'\]"):
        find_sample(sampler, history, 0, source="c")
    with pytest.raises(ValueError, match="sample 3 is out of range for source 'b' of 3"):
        find_sample(sampler, history, 3, source="b")
    with pytest.raises(
        ValueError, match=r"range for a mixture \(a global index over its sources\) of 8"
    ):
        find_sample(sampler, history, 8)
    with pytest.raises(ValueError, match="epochs 2:1 is empty"):
        find_sample(sampler, history, 0, epochs=(2, 1))
    single = DistributedSampler(range(5), 1, 0)
    with pytest.raises(ValueError, match="names a source of a mixture, but this run read a single"):
        find_sample(single, history, 0, source="a")
    hits = find_sample(sampler, history, 1, source="b")
    assert hits == find_sample(sampler, history, 6)
    assert find_sample(sampler, history, 6, epochs=(1, None)) == []


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(1, 300), min_size=2, max_size=3),
    st.integers(5, 2000),
    st.integers(0, 2**20),
    st.data(),
)
def test_the_mixture_inverse_is_the_scan(
    sizes: list[int], budget: int, seed: int, data: st.DataObject
) -> None:
    """Passes inverted (Feistel and tiny exact shuffles) and draws bisected: the scan's places."""
    mix = MixtureDataset({f"s{i}": range(n) for i, n in enumerate(sizes)})
    weights = data.draw(st.lists(st.floats(0.1, 4.0), min_size=len(sizes), max_size=len(sizes)))
    sampler = MixtureSampler(mix, weights, 1, 0, seed=seed, samples_per_epoch=budget)
    change = data.draw(st.lists(st.floats(0.0, 4.0), min_size=len(sizes), max_size=len(sizes)))
    change[-1] += 0.5
    kind = data.draw(st.sampled_from(["online", "declared"]))
    sampler.update_weights(change, epoch=0, position=data.draw(st.integers(0, budget)), kind=kind)
    with patch.object(_mixture_inverse, "BISECTION_COST", 0):
        for target in data.draw(st.lists(st.integers(0, len(mix) - 1), min_size=1, max_size=4)):
            for epoch in (0, 1):
                found = _mixture_inverse.mixture_positions(sampler, epoch, target)
                assert found == scan(sampler, epoch, target), (target, epoch)


def test_a_sample_drawn_often_is_left_to_the_scan() -> None:
    mix = MixtureDataset({"a": range(3), "b": range(10**6)})
    sampler = MixtureSampler(mix, [1.0, 1.0], 1, 0, samples_per_epoch=10**5)
    assert _mixture_inverse.mixture_positions(sampler, 0, 1) is None  # 16,667 draws: scan
    for target in range(3, 10**6, 99_991):  # drawn at most once: inverted
        assert _mixture_inverse.mixture_positions(sampler, 0, target) == scan(sampler, 0, target)
