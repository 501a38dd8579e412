"""Quarantine: samples left out of every later draw; every other sample still once per epoch.

Sampler level against a list model (any quarantine point, elastic resumes), then real
``Trainer`` runs of a ``ResumableDataModule`` as the docs show it: the callback's
``quarantine=`` and ``lrd quarantine``'s copy give the same batches, resumed on another
batch size, and the quarantined samples are never read again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pytest
from cut_helpers import N, fit_counted, samples_of
from hypothesis import given, settings
from hypothesis import strategies as st

from lightning_resumable_data import (
    DistributedSampler,
    MixtureDataset,
    MixtureSampler,
    ResumableDataCallback,
    ShardedSampler,
)
from lightning_resumable_data.cli import main
from lightning_resumable_data.cli.trace import trace


def _global(make: Any, world: int) -> list[int]:
    per_rank = [list(make(rank)) for rank in range(world)]
    return [r[i] for i in range(max(map(len, per_rank), default=0)) for r in per_rank if i < len(r)]


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(4, 60),
    world=st.integers(1, 3),
    new_world=st.integers(1, 3),
    algorithm=st.sampled_from(["randperm", "feistel"]),
    shuffle=st.booleans(),
    data=st.data(),
)
def test_quarantined_samples_are_never_drawn_again_and_the_rest_once(
    n: int,
    world: int,
    new_world: int,
    algorithm: Literal["randperm", "feistel"],
    shuffle: bool,
    data: st.DataObject,
) -> None:
    quarantined = set(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=n // 2)))

    def fresh(rank: int, replicas: int) -> DistributedSampler:
        return DistributedSampler(
            range(n), replicas, rank, seed=9, shuffle=shuffle, algorithm=algorithm, drop_last=True
        )

    orders = []
    for epoch in range(2):
        sampler = fresh(0, 1)
        sampler.set_epoch(epoch)
        orders.append(list(sampler))
    steps = data.draw(st.integers(0, n // world))  # batches of 1 per rank read in epoch 0
    head = _global(lambda r: iter(orders[0][r::world][:steps]), world)  # read before
    saver = fresh(0, world)
    it = iter(saver)
    for _ in range(steps):
        next(it)
    saver.quarantine(sorted(quarantined))
    state = saver.state_dict()

    def resumed(rank: int) -> DistributedSampler:
        sampler = fresh(rank, new_world)
        sampler.load_state_dict(state)
        return sampler

    rest = _global(resumed, new_world)
    expected_rest = [i for i in orders[0][len(head) :] if i not in quarantined]
    assert rest == expected_rest[: len(rest)]
    assert len(expected_rest) - len(rest) < new_world  # drop_last: the ragged tail only

    next_state = saver.state_at(1, 0)  # the next epoch's start, as a loader saves it

    def next_epoch(rank: int) -> DistributedSampler:
        sampler = fresh(rank, new_world)
        sampler.load_state_dict(next_state)
        return sampler

    later = _global(next_epoch, new_world)
    whole = [i for i in orders[1] if i not in quarantined]
    assert later == whole[: len(later)]
    assert len(whole) - len(later) < new_world


def test_a_sharded_sampler_quarantines_by_its_own_order() -> None:
    full = list(ShardedSampler([5, 5], num_replicas=1, rank=0, seed=2))
    sampler = ShardedSampler([5, 5], num_replicas=1, rank=0, seed=2)
    sampler.quarantine([full[3], full[7]])
    assert list(sampler) == [i for i in full if i not in {full[3], full[7]}]


def test_a_mixture_refuses_cuts_with_the_reason() -> None:
    sampler = MixtureSampler(MixtureDataset({"a": range(4), "b": range(4)}), [1.0, 1.0], 1, 0)
    with pytest.raises(ValueError, match=r"not yet for a MixtureSampler \(its weight changes"):
        sampler.quarantine([1])
    with pytest.raises(ValueError, match="not yet for a MixtureSampler"):
        sampler.skip_positions(0, 1, 2)


def test_bad_quarantines_are_refused() -> None:
    sampler = DistributedSampler(range(10), num_replicas=1, rank=0)
    with pytest.raises(ValueError, match=r"dataset indices in \[0, 10\), got \[10\]"):
        sampler.quarantine([10])
    with pytest.raises(ValueError, match="is not a list of dataset indices"):
        ResumableDataCallback(quarantine=[-1])


BAD = [3, 17, 29]


def test_the_callback_quarantines_from_the_first_step(tmp_path: Path) -> None:
    baseline, _ = fit_counted(tmp_path, [])
    model, dataset = fit_counted(tmp_path, [ResumableDataCallback(quarantine=BAD)])
    assert samples_of(model.ledger) == [i for i in samples_of(baseline.ledger) if i not in BAD]
    assert not set(dataset.reads) & set(BAD)
    per_epoch = [sorted(samples_of(model.ledger)[e * 37 : (e + 1) * 37]) for e in range(3)]
    assert all(epoch == [i for i in range(N) if i not in BAD] for epoch in per_epoch)


@pytest.mark.parametrize("resume_batch", [4, 2])
def test_lrd_quarantine_and_the_callback_agree_after_a_resume(
    tmp_path: Path, resume_batch: int, capsys: pytest.CaptureFixture[str]
) -> None:
    baseline, _ = fit_counted(tmp_path / "base", [])
    five = tmp_path / "five.ckpt"
    head, _ = fit_counted(tmp_path / "a", [], max_steps=5, save=five)
    by_callback, reads = fit_counted(
        tmp_path / "b", [ResumableDataCallback(quarantine=BAD)], batch_size=resume_batch, ckpt=five
    )
    edited = tmp_path / "q.ckpt"
    assert main(["quarantine", str(five), "--samples", "3,17,29", "-o", str(edited)]) == 0
    assert "with samples 3, 17, 29 left out of every later draw" in capsys.readouterr().out
    by_copy, _ = fit_counted(tmp_path / "c", [], batch_size=resume_batch, ckpt=edited)
    assert samples_of(by_copy.ledger) == samples_of(by_callback.ledger)
    before = samples_of(head.ledger)
    assert before == samples_of(baseline.ledger)[:20]
    expected = [i for i in samples_of(baseline.ledger)[20:] if i not in BAD]
    assert samples_of(by_callback.ledger) == expected
    assert not set(reads.reads) & set(BAD)  # never read again
    last = tmp_path / "last.ckpt"  # a further resume keeps it, and trace follows it
    more, _ = fit_counted(
        tmp_path / "d", [], batch_size=resume_batch, ckpt=edited, max_steps=12, save=last
    )
    rest, _ = fit_counted(tmp_path / "e", [], batch_size=resume_batch, ckpt=last)
    assert samples_of(more.ledger) + samples_of(rest.ledger) == expected
    for step, batches in more.ledger.items():
        traced = [b["ranks"][0]["indices"] for b in trace(last, step)["batches"]]
        assert traced == batches, step
    assert main(["inspect", str(last)]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "3 samples quarantined (never drawn again): 3, 17, 29" in shown, shown
