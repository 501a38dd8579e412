"""The loader's documented contract, checked against torchdata's and torch's loaders.

Every torch argument reaches the loader as it reaches torchdata's; the worker seeds come
from (seed, epoch, rank); the position a checkpoint saves follows the batches the trainer
trained (``note_trained``, ``track_trained``), not the ones the loader handed out; the
boundaries of ``strict_resume``, ``max_epochs``, ``drop_last`` and the epoch limit.
"""

from __future__ import annotations

import itertools
import json
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from loader_helpers import (
    IndexDataset,
    as_ids,
    documented_order,
    documented_rank_batches,
    make_loader,
    run_epochs,
    take,
)
from torchdata.stateful_dataloader import StatefulDataLoader as TorchdataLoader

from lightning_resumable_data import (
    DistributedSampler,
    MixtureDataset,
    MixtureSampler,
    ReproducibleShuffleBatchSampler,
    ReproducibleShuffleSampler,
    ResumableDataModule,
    ResumableSequentialSampler,
    ResumeWarning,
    StatefulDataLoader,
    StateMismatchError,
)
from lightning_resumable_data._rows import collate_rows
from lightning_resumable_data.randomness import worker_seed

N, BATCH = 50, 4  # 13 batches per epoch, the last one of 2 samples

# The attributes torch's DataLoader and torchdata's loader keep of their arguments.
FORWARDED = (
    "batch_size",
    "num_workers",
    "collate_fn",
    "pin_memory",
    "drop_last",
    "timeout",
    "worker_init_fn",
    "multiprocessing_context",
    "generator",
    "prefetch_factor",
    "persistent_workers",
    "pin_memory_device",
    "in_order",
    "snapshot_every_n_steps",
)


def _keep(batch: list[Any]) -> list[Any]:
    return list(batch)


def _init_worker(worker_id: int) -> None:
    del worker_id


def _json(state: dict[str, Any]) -> Any:
    return json.loads(json.dumps(state))


def _reference(epochs: int = 2) -> list[list[int]]:
    return run_epochs(make_loader(), epochs)


class WorkerSeedProbe(torch.utils.data.Dataset[int]):
    """Returns the seed torch gave the worker that loads the sample."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        info = torch.utils.data.get_worker_info()
        assert info is not None
        return int(info.seed)


class IndexAndSeed(WorkerSeedProbe):
    """Returns (index, the loading worker's seed)."""

    def __getitem__(self, index: int) -> Any:
        return (int(index), super().__getitem__(index))


class Unsized(torch.utils.data.Sampler[int]):
    """A sampler without ``__len__`` (a stream of indices)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.n))


def _seeds(batches: Any) -> set[int]:
    return {seed for batch in batches for seed in batch}


def _torch_worker_seeds(n: int, base: int) -> set[int]:
    """The worker seeds torch's own loader draws from a generator seeded with ``base``."""
    loader = torch.utils.data.DataLoader(
        WorkerSeedProbe(n),
        batch_size=2,
        num_workers=2,
        collate_fn=_keep,
        generator=torch.Generator().manual_seed(base),
    )
    return _seeds(loader)


# -- arguments ---------------------------------------------------------------------------


def test_every_torch_argument_reaches_the_loader_as_in_torchdata() -> None:
    """docs/migration/torchdata.md: it takes every one of torchdata's arguments."""
    generator = torch.Generator().manual_seed(3)
    arguments: dict[str, Any] = {
        "batch_size": 3,
        "num_workers": 2,
        "collate_fn": _keep,
        "pin_memory": True,
        "drop_last": True,
        "timeout": 5.0,
        "worker_init_fn": _init_worker,
        "multiprocessing_context": "spawn",
        "generator": generator,
        "prefetch_factor": 1,
        "persistent_workers": True,
        "pin_memory_device": "cpu",
        "in_order": False,
        "snapshot_every_n_steps": 5,
    }
    ours = StatefulDataLoader(IndexDataset(20), **arguments)
    theirs = TorchdataLoader(IndexDataset(20), **arguments)
    assert ours.resume_mode == "torchdata"  # where snapshot_every_n_steps is torchdata's
    for name in FORWARDED:
        assert getattr(ours, name) == getattr(theirs, name), name
    assert ours.generator is generator


def test_building_a_loader_warns_nothing() -> None:
    """torchdata's loader calls a deprecated torch API when built; that warning is not passed on."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make_loader()
        StatefulDataLoader(IndexDataset(8), batch_size=2, shuffle=True)
    assert [str(warning.message) for warning in caught] == []


@pytest.mark.parametrize("num_workers", [0, 2])
def test_the_defaults_are_torchdatas(num_workers: int) -> None:
    """Left out, every torch argument has torchdata's default; ``collate_fn`` is
    ``default_collate`` except for a batch read with one gather (docs/loader.md)."""
    ours = StatefulDataLoader(IndexDataset(20), num_workers=num_workers)
    theirs = TorchdataLoader(IndexDataset(20), num_workers=num_workers)
    for name in FORWARDED:
        if name != "collate_fn":
            assert getattr(ours, name) == getattr(theirs, name), name
    assert ours.collate_fn is collate_rows
    assert theirs.collate_fn is torch.utils.data.default_collate


@pytest.mark.parametrize("mode", ["position", "skip"])
def test_snapshot_interval_is_zero_with_a_position_or_skip_sampler(mode: str) -> None:
    """docs/migration/torchdata.md: accepted and set to 0 (no snapshots are needed)."""
    dataset = IndexDataset(20)
    sampler: Any = (
        DistributedSampler(dataset, 1, 0)
        if mode == "position"
        else ReproducibleShuffleSampler(ResumableSequentialSampler(dataset), 1)
    )
    loader = StatefulDataLoader(dataset, batch_size=2, sampler=sampler, snapshot_every_n_steps=5)
    assert loader.resume_mode == mode
    assert loader.snapshot_every_n_steps == 0


def test_prefetch_factor_below_one_is_refused_with_workers() -> None:
    """A worker that loads no batch ahead would never load one: refused when built."""
    with pytest.raises(ValueError, match="prefetch_factor=0 must be >= 1 with num_workers=1"):
        StatefulDataLoader(IndexDataset(8), num_workers=1, prefetch_factor=0)
    assert (
        StatefulDataLoader(IndexDataset(8), num_workers=1, prefetch_factor=1).prefetch_factor == 1
    )


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: StatefulDataLoader(IndexDataset(8), max_epochs=-1), "max_epochs=-1 must be >= 0"),
        (
            lambda: StatefulDataLoader(IndexDataset(8), seed=-1),
            r"seed=-1 must be in \[0, 2\*\*64\)",
        ),
        (lambda: make_loader().set_epoch(-1), "epoch=-1 must be >= 0"),
        (lambda: make_loader().set_epoch_limit(-1), "samples=-1 must be >= 0"),
        (lambda: make_loader().note_trained(-1), "batches=-1 must be >= 0"),
    ],
)
def test_a_negative_count_is_refused_naming_the_argument(build: Any, match: str) -> None:
    """A negative epoch, seed, limit or batch count is refused, naming what was wrong."""
    with pytest.raises(ValueError, match=match):
        build()


def test_a_fresh_loader_has_restored_nothing() -> None:
    """``restored`` and ``layout_change`` are ``None`` until a state is loaded."""
    loader = make_loader()
    assert loader.restored is None
    assert loader.layout_change is None
    _, state = take(make_loader(), 3)
    loader.load_state_dict(state)  # the same layout
    assert loader.restored == (0, 3 * BATCH, BATCH)
    assert loader.layout_change is None


def test_load_state_dict_records_the_position_in_the_saving_layout() -> None:
    """``restored``: (epoch, consumed, the saver's batch x world size); ``layout_change``."""
    _, state = take(make_loader(n=48, world=2, rank=0, batch_size=4), 3)
    loader = make_loader(n=48, world=1, rank=0, batch_size=3)
    loader.load_state_dict(state)
    assert loader.restored == (0, 3 * 4 * 2, 4 * 2)
    assert loader.layout_change == (3, 3 * 4 * 2 // 3)


def test_a_refused_state_restores_nothing() -> None:
    """A state the sampler refuses leaves ``restored`` as it was."""
    _, state = take(make_loader(seed=1), 3)
    loader = make_loader(seed=0)
    with pytest.raises(StateMismatchError, match="seed: saved 1, now 0"):
        loader.load_state_dict(state)
    assert loader.restored is None


# -- worker seeds --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sampler_seed", "loader_seed", "rank", "expected_seed"),
    [
        (5, None, 1, 5),  # the sampler's seed, on rank 1
        (-1, None, 0, 2**64 - 1),  # a negative one wrapped as torch does
        (0, 7, 1, 7),  # an explicit seed wins
    ],
)
def test_worker_seeds_derive_from_the_seed_epoch_and_rank(
    sampler_seed: int, loader_seed: int | None, rank: int, expected_seed: int
) -> None:
    """The workers are those of torch's loader given a generator seeded from (seed, epoch, rank)."""
    dataset = WorkerSeedProbe(16)
    sampler = DistributedSampler(dataset, 2, rank, seed=sampler_seed)
    loader = StatefulDataLoader(
        dataset, batch_size=2, sampler=sampler, num_workers=2, collate_fn=_keep, seed=loader_seed
    )
    for epoch in range(2):
        torch.manual_seed(epoch + 100)  # the parent's RNG does not matter
        assert _seeds(loader) == _torch_worker_seeds(8, worker_seed(expected_seed, epoch, rank))


def test_a_sampler_without_seed_or_rank_seeds_workers_from_zero() -> None:
    """``seed`` defaults to 0 and the rank to 0 when the sampler has neither."""
    dataset = WorkerSeedProbe(8)
    sampler = ResumableSequentialSampler(dataset)
    loader = StatefulDataLoader(
        dataset, batch_size=2, sampler=sampler, num_workers=2, collate_fn=_keep
    )
    assert loader.resume_mode == "skip"
    for epoch in range(2):
        assert _seeds(loader) == _torch_worker_seeds(8, worker_seed(0, epoch, 0))


def test_a_user_generator_seeds_the_workers_as_in_torch() -> None:
    """``generator=`` overrides the derived worker seeds."""
    dataset = WorkerSeedProbe(8)
    loader = StatefulDataLoader(
        dataset,
        batch_size=2,
        sampler=DistributedSampler(dataset, 1, 0, seed=5),
        num_workers=2,
        collate_fn=_keep,
        generator=torch.Generator().manual_seed(9),
    )
    assert _seeds(loader) == _torch_worker_seeds(8, 9)


def test_torchdata_mode_shuffles_and_seeds_workers_as_torchdata() -> None:
    """docs/loader.md: without a position or skip sampler, torch's global seed decides."""
    arguments: dict[str, Any] = {
        "batch_size": 3,
        "shuffle": True,
        "num_workers": 2,
        "collate_fn": _keep,
    }
    for seed in (11, 12):  # torchdata's sampler draws its seed when it is built
        torch.manual_seed(seed)
        ours = StatefulDataLoader(IndexAndSeed(12), **arguments)
        got = [list(ours) for _ in range(2)]
        torch.manual_seed(seed)
        theirs = TorchdataLoader(IndexAndSeed(12), **arguments)
        assert ours.resume_mode == "torchdata"
        assert got == [list(theirs) for _ in range(2)]


# -- what the model trained ----------------------------------------------------------------


def _read(loader: StatefulDataLoader, whole_epochs: int, more: int) -> Iterator[Any]:
    """Exhaust ``whole_epochs`` epochs, then hand out ``more`` batches of one live pass."""
    for _ in range(whole_epochs):
        as_ids(loader)
    live = iter(loader)
    for _ in range(more):
        next(live)
    return live


@pytest.mark.parametrize(
    ("epochs", "handed", "trained"),
    [(0, 7, 4), (1, 7, 4), (1, 7, 0), (0, 3, 5)],
)
def test_note_trained_saves_the_position_after_the_trained_batches(
    epochs: int, handed: int, trained: int
) -> None:
    """docs/lightning.md: the checkpoint holds what the trainer trained, not what was fetched."""
    loader = make_loader()
    live = _read(loader, epochs, handed)
    loader.note_trained(trained)
    done = min(trained, handed)  # never more than the loader handed out
    expected = _reference()
    _, uninterrupted = take(make_loader(), 13 * epochs + done)
    assert _json(loader.state_dict()) == uninterrupted
    assert loader.trained_position() == (epochs, done * BATCH, done)
    resumed = make_loader()
    resumed.load_state_dict(_json(loader.state_dict()))
    assert run_epochs(resumed, 2) == expected[13 * epochs + done :]
    del live


@pytest.mark.parametrize("trained", [1, 10, 12])
def test_a_count_behind_an_ended_epoch_is_a_position_in_that_epoch(trained: int) -> None:
    """The loader fetched to the end of the epoch the model is still training."""
    loader = make_loader()
    _read(loader, 1, 0)  # the loader is at the start of epoch 1
    loader.note_trained(trained)
    _, uninterrupted = take(make_loader(), trained)
    assert _json(loader.state_dict()) == uninterrupted
    assert loader.trained_position() == (0, trained * BATCH, trained)
    resumed = make_loader()
    resumed.load_state_dict(_json(loader.state_dict()))
    assert run_epochs(resumed, 2) == _reference()[trained:]


@pytest.mark.parametrize(
    ("epochs", "handed", "trained"),
    [(0, 5, 5), (1, 0, 13), (1, 0, 0), (1, 4, 4)],
)
def test_noting_every_handed_batch_as_trained_changes_nothing(
    epochs: int, handed: int, trained: int
) -> None:
    """All of the ended epoch (13), or all of the current one, is where the loader stands."""
    noted, plain = make_loader(), make_loader()
    live = [_read(noted, epochs, handed), _read(plain, epochs, handed)]
    noted.note_trained(trained)
    assert _json(noted.state_dict()) == _json(plain.state_dict())
    assert noted.trained_position() == plain.trained_position()
    del live


def test_a_tracked_trainer_counter_decides_the_saved_position() -> None:
    """track_trained: the counter read at save time; ``None`` from it defers to note_trained."""
    counter: list[int | None] = [4]
    loader = make_loader()
    live = _read(loader, 0, 7)
    loader.note_trained(2)
    loader.track_trained(lambda: counter[0])
    assert _json(loader.state_dict()) == take(make_loader(), 4)[1]
    assert loader.trained_position() == (0, 4 * BATCH, 4)
    counter[0] = 6
    assert _json(loader.state_dict()) == take(make_loader(), 6)[1]
    counter[0] = None  # the trainer knows nothing now
    assert _json(loader.state_dict()) == take(make_loader(), 2)[1]
    loader.track_trained(None)
    assert loader.trained_position() == (0, 2 * BATCH, 2)
    del live


def test_take_handed_says_where_each_handed_batch_begins() -> None:
    """(epoch, global samples before it) per batch handed out, oldest first, then None."""
    loader = make_loader(n=40, world=2, rank=1)
    assert loader.take_handed() is None  # nothing handed out yet
    live = _read(loader, 1, 3)
    assert [loader.take_handed() for _ in range(4)] == [
        (1, 0),
        (1, BATCH * 2),
        (1, 2 * BATCH * 2),
        None,
    ]
    del live
    other = StatefulDataLoader(IndexDataset(8), batch_size=2)
    assert other.resume_mode == "torchdata"
    next(iter(other))
    assert other.take_handed() is None  # no position sampler


def test_a_skip_mode_state_saved_between_epochs_resumes() -> None:
    """Saved before the next pass read anything: the sampler's pending state is kept."""

    def make() -> StatefulDataLoader:
        dataset = IndexDataset(30)
        sampler = ReproducibleShuffleSampler(ResumableSequentialSampler(dataset), 7)
        return StatefulDataLoader(dataset, batch_size=4, sampler=sampler)

    expected = run_epochs(make(), 3)
    for epochs in (0, 1):
        loader = make()
        run_epochs(loader, epochs)
        resumed = make()
        resumed.load_state_dict(_json(loader.state_dict()))
        assert run_epochs(resumed, 3) == expected[8 * epochs :]


def test_a_skip_mode_position_counts_this_ranks_batches() -> None:
    """One process: the state says one replica, and the samples are batches x batch size."""
    dataset = IndexDataset(30)
    loader = StatefulDataLoader(
        dataset,
        batch_size=4,
        sampler=ReproducibleShuffleSampler(ResumableSequentialSampler(dataset), 7),
    )
    live = _read(loader, 0, 3)
    assert loader.state_dict()["num_replicas"] == 1
    assert loader.trained_position() == (0, 3 * 4, 3)
    del live


# -- epochs --------------------------------------------------------------------------------


def test_torch_style_loop_with_set_epoch_and_cut_passes() -> None:
    """``set_epoch(e)`` then a pass cut short, as in a plain torch loop: each epoch's start."""
    loader = make_loader()
    for epoch in range(3):
        loader.set_epoch(epoch)
        got = []
        for i, batch in enumerate(loader):
            got.append(batch.tolist())
            if i == 2:
                break
        order = documented_order(N, 0, epoch)
        assert got == documented_rank_batches(order, 0, 1, 0, BATCH, False)[:3]
    loader.set_epoch(6)
    loader.set_epoch(5)  # changed twice before reading
    assert as_ids(loader) == documented_rank_batches(documented_order(N, 0, 5), 0, 1, 0, 4, False)


def test_a_pass_over_an_empty_dataset_is_one_epoch() -> None:
    """An exhausted pass moves to the next epoch, even when it yields nothing."""
    loader = make_loader(n=0)
    assert list(loader) == list(torch.utils.data.DataLoader(IndexDataset(0), batch_size=4)) == []
    assert loader.epoch == 1
    assert list(loader) == []
    assert loader.epoch == 2


def test_a_restored_position_at_the_epoch_limit_starts_the_next_epoch() -> None:
    """A limit that the saved position has already reached: the next pass reads the next epoch."""
    _, state = take(make_loader(n=10, batch_size=1), 1)  # saved without a limit
    loader = make_loader(n=10, batch_size=1)
    loader.load_state_dict(state)
    loader.set_epoch_limit(1)  # the trainer's limit, set after the restore
    assert as_ids(loader) == [documented_order(10, 0, 1)[:1]]
    assert loader.epoch == 2


def test_set_epoch_limit_none_removes_the_limit() -> None:
    """``None``: every epoch ends at the sampler's end again."""
    loader = make_loader()
    loader.set_epoch_limit(8)
    loader.set_epoch_limit(None)
    assert loader.epoch_limit is None
    assert as_ids(loader) == _reference(1)


def test_an_iterator_has_torchdatas_length() -> None:
    """``len(iter(loader))`` is the epoch's batches, as torchdata's iterator says."""
    loader = make_loader()
    theirs = TorchdataLoader(IndexDataset(N), batch_size=BATCH)
    assert len(iter(loader)) == len(loader) == len(iter(theirs)) == 13


def test_a_state_after_a_drop_last_epochs_last_batch_is_the_next_epoch() -> None:
    """drop_last=True: after the last full batch the epoch is over, as after exhausting it."""

    def make() -> StatefulDataLoader:
        dataset = IndexDataset(N)  # 12 full batches, 2 samples dropped
        return StatefulDataLoader(
            dataset, batch_size=BATCH, drop_last=True, sampler=DistributedSampler(dataset, 1, 0)
        )

    cut = make()
    assert len(as_ids(itertools.islice(iter(cut), 12))) == 12
    exhausted = make()
    assert len(as_ids(exhausted)) == 12
    assert _json(cut.state_dict()) == _json(exhausted.state_dict())
    assert (cut.state_dict()["epoch"], cut.state_dict()["consumed"]) == (1, 0)


@pytest.mark.parametrize(
    ("world", "batch", "drop_last", "sizes"),
    [(4, 5, True, [5]), (4, 8, False, [5]), (2, 10, True, [10])],
)
def test_a_batch_that_fits_exactly_or_runs_short_without_drop_last_is_accepted(
    world: int, batch: int, drop_last: bool, sizes: list[int]
) -> None:
    """Only a batch larger than a rank's share with drop_last=True is refused."""
    order = documented_order(20, 0, 0)
    for rank in range(world):
        loader = make_loader(n=20, world=world, rank=rank, batch_size=batch, drop_last=drop_last)
        got = as_ids(loader)
        assert got == documented_rank_batches(order, 0, world, rank, batch, drop_last)
        assert [len(b) for b in got] == sizes


def test_an_unsized_sampler_with_drop_last_reads_as_torch() -> None:
    """A sampler without a length cannot be checked in advance: it is accepted, as by torch."""
    arguments: dict[str, Any] = {"batch_size": 4, "drop_last": True}
    ours = StatefulDataLoader(IndexDataset(10), sampler=Unsized(10), **arguments)
    theirs = torch.utils.data.DataLoader(IndexDataset(10), sampler=Unsized(10), **arguments)
    assert as_ids(ours) == as_ids(theirs) == [[0, 1, 2, 3], [4, 5, 6, 7]]


# -- samplers and modes --------------------------------------------------------------------


def test_unbatched_loader_over_our_sampler_resumes_by_position_in_any_world_size() -> None:
    """batch_size=None: still a position sampler, so elastic."""
    dataset, n = IndexDataset(20), 20

    def make(world: int, rank: int) -> StatefulDataLoader:
        sampler = DistributedSampler(dataset, world, rank, seed=0)
        return StatefulDataLoader(dataset, batch_size=None, sampler=sampler)

    assert make(2, 0).resume_mode == "position"
    saver = make(2, 0)
    assert [int(sample) for sample in itertools.islice(iter(saver), 3)] == documented_order(
        n, 0, 0
    )[0:6:2]
    state = _json(saver.state_dict())  # 3 samples per rank: 6 global
    resumed = make(1, 0)
    resumed.load_state_dict(state)
    rest = [int(sample) for sample in resumed]
    assert rest == documented_order(n, 0, 0)[6:]


def test_a_custom_batch_sampler_resumes_by_skipping_batches() -> None:
    """docs/loader.md: a custom batch_sampler with set_skip resumes through set_skip."""
    dataset = IndexDataset(30)

    def make() -> StatefulDataLoader:
        batches = torch.utils.data.BatchSampler(ResumableSequentialSampler(dataset), 4, False)
        return StatefulDataLoader(
            dataset, batch_sampler=ReproducibleShuffleBatchSampler(batches, 3)
        )

    expected = run_epochs(make(), 2)
    loader = make()
    assert loader.resume_mode == "skip"
    seen, state = take(loader, 5)
    resumed = make()
    resumed.load_state_dict(state)
    assert seen + run_epochs(resumed, 2) == expected


# -- checks of a state --------------------------------------------------------------------


def test_a_state_at_max_epochs_is_accepted() -> None:
    """max_epochs is the run's last epoch: a finished run's state (epoch == max_epochs) loads."""

    def make() -> StatefulDataLoader:
        dataset = IndexDataset(N)
        return StatefulDataLoader(
            dataset, batch_size=BATCH, sampler=DistributedSampler(dataset, 1, 0), max_epochs=2
        )

    done = make()
    run_epochs(done, 2)
    state = _json(done.state_dict())
    assert state["epoch"] == 2
    resumed = make()
    resumed.load_state_dict(state)
    assert as_ids(resumed) == documented_rank_batches(documented_order(N, 0, 2), 0, 1, 0, 4, False)


def test_strict_resume_false_keeps_the_position_of_another_datasets_state() -> None:
    """docs/concepts.md: epoch and position kept, the order after them the new one's."""
    _, state = take(make_loader(n=50), 3)
    dataset = IndexDataset(49)
    loader = StatefulDataLoader(
        dataset, batch_size=BATCH, sampler=DistributedSampler(dataset, 1, 0), strict_resume=False
    )
    with pytest.warns(ResumeWarning, match="strict_resume=False"):
        loader.load_state_dict(state)
    order = documented_order(49, 0, 0)
    assert as_ids(loader) == documented_rank_batches(order, 3 * BATCH, 1, 0, BATCH, False)


def test_strict_resume_false_still_refuses_a_malformed_state() -> None:
    """A state without its fingerprint is malformed in either mode."""
    _, state = take(make_loader(), 3)
    del state["fingerprint"]
    for strict in (True, False):
        loader = StatefulDataLoader(
            IndexDataset(N),
            batch_size=BATCH,
            sampler=DistributedSampler(IndexDataset(N), 1, 0),
            strict_resume=strict,
        )
        with pytest.raises(StateMismatchError):
            loader.load_state_dict(state)


def test_strict_resume_guards_the_dataset_in_torchdata_mode() -> None:
    """torchdata mode: the sampler checks nothing, so the loader refuses another dataset."""

    def make(n: int, strict: bool = True) -> StatefulDataLoader:
        return StatefulDataLoader(IndexDataset(n), batch_size=3, strict_resume=strict)

    saver = make(20)
    assert saver.resume_mode == "torchdata"
    seen = as_ids(itertools.islice(iter(saver), 2))
    state = saver.state_dict()
    with pytest.raises(StateMismatchError, match="dataset_length: saved 20, now 21"):
        make(21).load_state_dict(state)
    relaxed = make(21, strict=False)
    with pytest.warns(UserWarning, match="replays the sampler"):
        relaxed.load_state_dict(state)
    theirs = as_ids(torch.utils.data.DataLoader(IndexDataset(21), batch_size=3))
    assert seen + as_ids(relaxed) == theirs


@pytest.mark.parametrize("seed", [-1, 2**64])
@pytest.mark.parametrize(
    "build",
    [
        lambda seed: StatefulDataLoader(IndexDataset(8), seed=seed),
        lambda seed: ResumableDataModule(IndexDataset(8), batch_size=2, seed=seed),
        lambda seed: MixtureSampler(
            MixtureDataset({"a": IndexDataset(4), "b": IndexDataset(6)}),
            {"a": 1.0, "b": 1.0},
            num_replicas=1,
            rank=0,
            seed=seed,
        ),
    ],
    ids=["loader", "datamodule", "mixture"],
)
def test_a_key_seed_outside_64_bits_is_refused_with_one_message(build: Any, seed: int) -> None:
    """A seed that only keys 64-bit hashes is refused at either end, with the same message."""
    with pytest.raises(ValueError, match=rf"seed={seed} must be in \[0, 2\*\*64\).*seed % 2\*\*64"):
        build(seed)
