import functools
import itertools
import json
import operator
from typing import Any

import pytest
import torch
from loader_helpers import (
    AugmentedDataset,
    IndexDataset,
    as_ids,
    documented_order,
    documented_rank_batches,
    make_loader,
    run_epochs,
    take,
)

from lightning_resumable_data import DistributedSampler, StatefulDataLoader, StateMismatchError

EPOCHS = 2
N, BATCH = 50, 4  # 13 batches per epoch, the last one of 2 samples


def reference(**kwargs: Any) -> list[list[int]]:
    return run_epochs(make_loader(**kwargs), EPOCHS)


@pytest.mark.parametrize("k", [0, 1, 6, 12, 13, 14, 20, 26])
def test_resume_after_k_batches_equals_uninterrupted(k: int) -> None:
    expected = reference()
    assert len(expected) == 26
    seen, state = take(make_loader(), k)
    assert seen == expected[:k]
    resumed = make_loader()
    resumed.load_state_dict(state)
    assert run_epochs(resumed, EPOCHS) == expected[k:]


@pytest.mark.parametrize(("num_workers", "persistent"), [(2, False), (2, True)])
@pytest.mark.parametrize("k", [0, 5, 13, 17])
def test_resume_with_workers(num_workers: int, persistent: bool, k: int) -> None:
    expected = reference()
    seen, state = take(
        make_loader(num_workers=num_workers, persistent_workers=persistent), k
    )  # the workers prefetch far ahead of k
    assert seen == expected[:k]
    if k % 13:  # mid-epoch: the position counts batches trained, not batches prefetched
        assert state["consumed"] == (k % 13) * BATCH
    resumed = make_loader(num_workers=num_workers, persistent_workers=persistent)
    resumed.load_state_dict(state)
    assert run_epochs(resumed, EPOCHS) == expected[k:]


def test_resume_two_and_three_times_in_one_epoch() -> None:
    expected = reference()
    loader = make_loader()
    seen: list[list[int]] = []
    for k in (3, 2, 4):  # three interruptions within epoch 0
        chunk, state = take(loader, k)
        seen += chunk
        loader = make_loader()
        loader.load_state_dict(state)
    assert seen == expected[:9]
    assert run_epochs(loader, EPOCHS) == expected[9:]


def test_state_is_small_global_and_identical_on_every_rank() -> None:
    states = []
    for rank in range(3):
        loader = make_loader(n=60, world=3, rank=rank)
        take(loader, 2)
        states.append(loader.state_dict())
    assert states[0] == states[1] == states[2]
    assert states[0]["consumed"] == 2 * BATCH * 3
    assert states[0]["epoch"] == 0
    assert states[0]["sampler"]["consumed"] == 24
    assert len(repr(states[0])) < 1000


@pytest.mark.parametrize(
    ("world", "new_world", "batch", "new_batch"),
    [(2, 1, 4, 4), (1, 2, 4, 4), (2, 3, 4, 4), (2, 2, 4, 3), (3, 2, 2, 5), (4, 3, 3, 2)],
)
@pytest.mark.parametrize("k", [0, 1, 3])
@pytest.mark.parametrize("drop_last", [False, True])
def test_elastic_resume_reads_the_documented_order(
    world: int, new_world: int, batch: int, new_batch: int, k: int, drop_last: bool
) -> None:
    """Every batch before and after an elastic resume is the one docs/concepts.md gives."""
    n, seed = 60, 0
    order = documented_order(n, seed, epoch=0)
    state: dict[str, Any] = {}
    for rank in range(world):
        loader = make_loader(n=n, world=world, rank=rank, batch_size=batch, drop_last=drop_last)
        batches, rank_state = take(loader, k)
        assert batches == documented_rank_batches(order, 0, world, rank, batch, drop_last)[:k]
        state = state or rank_state
    consumed = k * batch * world
    for rank in range(new_world):
        loader = make_loader(
            n=n, world=new_world, rank=rank, batch_size=new_batch, drop_last=drop_last
        )
        loader.load_state_dict(state)
        expected = documented_rank_batches(order, consumed, new_world, rank, new_batch, drop_last)
        assert as_ids(loader) == expected  # the rest of epoch 0, exactly
        next_epoch = documented_order(n, seed, epoch=1)
        assert as_ids(loader) == documented_rank_batches(
            next_epoch, 0, new_world, rank, new_batch, drop_last
        )  # and epoch 1 from its start


def test_sample_keys_make_augmentations_survive_a_change_of_workers() -> None:
    dataset = AugmentedDataset(40)

    def loader(workers: int) -> StatefulDataLoader:
        return make_loader(n=40, dataset=dataset, num_workers=workers, sample_keys=True)

    expected = run_epochs(loader(0), 2)
    seen, state = take(loader(2), 7)
    resumed = loader(0)  # another num_workers after the resume
    resumed.load_state_dict(state)
    assert seen + run_epochs(resumed, 2) == expected


def test_worker_rngs_come_from_seed_epoch_rank_and_worker() -> None:
    def draws(rank: int, global_seed: int) -> list[list[int]]:
        torch.manual_seed(global_seed)  # the parent's RNG must not matter
        loader = make_loader(n=16, world=2, rank=rank, dataset=AugmentedDataset(16), num_workers=2)
        return run_epochs(loader, 1)

    assert draws(0, 1) == draws(0, 2)
    assert [b[1::2] for b in draws(0, 1)] != [b[1::2] for b in draws(1, 1)]


def test_loader_without_explicit_epoch_advances_and_reshuffles() -> None:
    loader = make_loader()
    first, second = as_ids(loader), as_ids(loader)
    assert loader.epoch == 2
    assert first != second
    assert sorted(functools.reduce(operator.iadd, first, [])) == sorted(
        functools.reduce(operator.iadd, second, [])
    )


def test_an_abandoned_iterator_starts_the_next_epoch_when_the_new_one_reads() -> None:
    loader = make_loader()
    next(iter(loader))
    assert loader.epoch == 0
    assert loader.batches_yielded == 1
    second = iter(loader)
    assert (loader.epoch, loader.batches_yielded) == (0, 1)  # nothing read yet
    first_of_next = next(second).tolist()
    assert (loader.epoch, loader.batches_yielded) == (1, 1)
    epoch1 = make_loader()
    epoch1.set_epoch(1)
    assert first_of_next == as_ids(epoch1)[0]


def test_iterators_created_and_dropped_unread_change_nothing() -> None:
    """Lightning creates an iterator while setting up a fit and again per epoch."""
    reference = as_ids(itertools.islice(iter(make_loader()), 5))
    loader = make_loader()
    for _ in range(3):
        iter(loader)
    got = as_ids(itertools.islice(iter(loader), 2))
    iter(loader)
    iter(loader)
    state = loader.state_dict()
    assert (state["epoch"], state["consumed"]) == (0, 8)
    resumed = make_loader()
    resumed.load_state_dict(state)
    iter(resumed)
    got += as_ids(itertools.islice(iter(resumed), 3))
    assert got == reference


def test_end_epoch_moves_to_the_next_epoch_and_the_state_says_so() -> None:
    loader = make_loader()
    it = iter(loader)
    next(it)
    loader.end_epoch()
    assert loader.state_dict()["epoch"] == 1
    assert loader.state_dict()["consumed"] == 0
    assert next(it, None) is None  # the ended pass is over
    epoch1 = as_ids(loader)
    fresh = make_loader()
    fresh.set_epoch(1)
    assert epoch1 == as_ids(fresh)
    assert loader.epoch == 2


def test_epoch_limit_ends_every_epoch_at_the_same_sample_in_any_layout() -> None:
    """A trainer's limit in samples: an epoch resumed under another batch size ends there."""
    n, limit = 48, 24
    loader = make_loader(n=n, batch_size=4)
    loader.set_epoch_limit(limit)
    first = as_ids(itertools.islice(iter(loader), 3))  # 12 samples
    state = loader.state_dict()
    resumed = make_loader(n=n, batch_size=8)
    resumed.set_epoch_limit(limit)
    resumed.load_state_dict(state)
    assert resumed.layout_change == (3, 1)
    rest = as_ids(resumed)
    assert [len(b) for b in rest] == [8, 4]  # 12 more samples: a short batch at the limit
    assert resumed.epoch == 1
    epoch0 = [i for b in first + rest for i in b]
    full = [i for b in as_ids(make_loader(n=n, batch_size=4)) for i in b]
    assert epoch0 == full[:limit]


def test_batch_sampler_over_our_sampler_resumes_by_position() -> None:
    def make() -> StatefulDataLoader:
        sampler = DistributedSampler(IndexDataset(30), 1, 0, seed=4)
        batches = torch.utils.data.BatchSampler(sampler, 4, drop_last=False)
        return StatefulDataLoader(IndexDataset(30), batch_sampler=batches)

    expected = run_epochs(make(), 2)
    seen, state = take(make(), 5)
    assert make().resume_mode == "position"
    assert state["consumed"] == 20
    resumed = make()
    resumed.load_state_dict(state)
    assert seen + run_epochs(resumed, 2) == expected


def test_plain_torch_sampler_falls_back_to_torchdata_with_a_warning() -> None:
    def make() -> StatefulDataLoader:
        generator = torch.Generator().manual_seed(0)
        sampler = torch.utils.data.RandomSampler(IndexDataset(20), generator=generator)
        return StatefulDataLoader(IndexDataset(20), batch_size=3, sampler=sampler)

    expected = as_ids(make())
    loader = make()
    assert loader.resume_mode == "torchdata"
    seen = as_ids(itertools.islice(iter(loader), 2))
    state = loader.state_dict()
    resumed = make()
    with pytest.warns(
        UserWarning, match=r"replays the sampler up to the saved position \(O\(position\)\)"
    ):
        resumed.load_state_dict(state)
    assert seen + as_ids(resumed) == expected


def _saved_state(**kwargs: Any) -> dict[str, Any]:
    _, state = take(make_loader(**kwargs), 3)
    return state


@pytest.mark.parametrize(
    ("saved", "match"),
    [
        ({"n": 49}, "dataset_length: saved 49, now 50"),
        ({"seed": 1}, "seed: saved 1, now 0"),
        ({"algorithm": "feistel"}, "algorithm: saved 'feistel', now 'randperm'"),
    ],
)
def test_state_from_another_configuration_is_refused(saved: dict[str, Any], match: str) -> None:
    loader = make_loader()
    before = loader.state_dict()
    with pytest.raises(StateMismatchError, match=match):
        loader.load_state_dict(_saved_state(**saved))
    assert loader.state_dict() == before
    assert run_epochs(loader, 1) == reference()[:13]


def test_state_of_another_kind_is_refused() -> None:
    sampler = make_loader().sampler
    assert isinstance(sampler, DistributedSampler)
    state = sampler.state_dict()
    with pytest.raises(StateMismatchError, match="written by kind='DistributedSampler'"):
        make_loader().load_state_dict(state)


def test_epoch_beyond_max_epochs_is_refused() -> None:
    state = _saved_state()
    state["epoch"] = 5
    state["sampler"]["epoch"] = 5
    loader = StatefulDataLoader(
        IndexDataset(50),
        batch_size=4,
        max_epochs=3,
        sampler=DistributedSampler(IndexDataset(50), 1, 0),
    )
    with pytest.raises(StateMismatchError, match="epoch=5 is beyond max_epochs=3"):
        loader.load_state_dict(state)
    assert loader.epoch == 0


def test_batch_larger_than_rank_share_with_drop_last_is_refused() -> None:
    with pytest.raises(
        ValueError,
        match=r"batch_size=8 is larger than this rank's share of the epoch \(5 samples\)",
    ):
        make_loader(n=20, world=4, batch_size=8, drop_last=True)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_load_while_an_iterator_is_live_applies_at_the_next_iter(num_workers: int) -> None:
    expected = reference()
    _, state = take(make_loader(), 5)
    loader = make_loader(num_workers=num_workers)
    iterator = iter(loader)
    next(iterator)
    loader.load_state_dict(state)  # torchdata's rule: the next iter() starts from it
    with pytest.raises(StopIteration):
        next(iterator)
    assert run_epochs(loader, EPOCHS) == expected[5:]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_skip_samplers_resume_through_set_skip(num_workers: int) -> None:
    from lightning_resumable_data import (
        RepeatSampler,
        ReproducibleShuffleSampler,
        ResumableSequentialSampler,
    )

    def make() -> StatefulDataLoader:
        dataset = IndexDataset(30)
        chain = RepeatSampler(ReproducibleShuffleSampler(ResumableSequentialSampler(dataset), 7))
        return StatefulDataLoader(dataset, batch_size=4, sampler=chain, num_workers=num_workers)

    expected = as_ids(itertools.islice(iter(make()), 20))
    loader = make()
    assert loader.resume_mode == "skip"
    seen, state = take(loader, 9)  # crosses a repeat pass (30 samples = 7.5 batches)
    resumed = make()
    resumed.load_state_dict(state)
    assert seen + as_ids(itertools.islice(iter(resumed), 11)) == expected


def test_skip_sampler_refuses_a_change_of_world_size() -> None:
    from lightning_resumable_data import ResumableSequentialSampler, ShardSampler

    def make(world: int) -> StatefulDataLoader:
        dataset = IndexDataset(30)
        sampler = ShardSampler(ResumableSequentialSampler(dataset), world, 0)
        return StatefulDataLoader(dataset, batch_size=2, sampler=sampler)

    _, state = take(make(2), 2)
    with pytest.raises(StateMismatchError, match="num_replicas"):
        make(3).load_state_dict(state)


def test_skip_mode_state_is_stable_across_a_reload_before_iterating() -> None:
    from lightning_resumable_data import ResumableSequentialSampler

    def make() -> StatefulDataLoader:
        dataset = IndexDataset(30)
        return StatefulDataLoader(
            dataset, batch_size=4, sampler=ResumableSequentialSampler(dataset, 2)
        )

    expected = run_epochs(make(), 2)
    seen, state = take(make(), 3)
    once = make()
    once.load_state_dict(state)
    twice = make()
    twice.load_state_dict(once.state_dict())  # saved again before the resumed run read anything
    assert seen + run_epochs(twice, 2) == expected


class CountingRange(torch.utils.data.Dataset[int]):
    """``range(n)`` that counts the samples it loads."""

    def __init__(self, n: int) -> None:
        self.n, self.loads = n, 0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        self.loads += 1
        return index


def test_resume_work_does_not_grow_with_the_position(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/concepts.md: computing where the suffix starts costs nothing; no index is
    replayed and no sample is loaded to skip it (with "feistel", only the indices read are
    computed). Counted, not timed: the same work at positions 10**8 times apart."""
    import lightning_resumable_data.index.permutation as permutation

    computed: list[int] = []
    network = permutation._network_permute

    def counting(positions: Any, n: int, key: Any) -> Any:
        computed.append(len(positions))
        return network(positions, n, key)

    monkeypatch.setattr(permutation, "_network_permute", counting)
    work = {}
    for consumed in (32 * 10**2, 32 * 10**11):  # whole steps of 8 ranks x 4
        dataset = CountingRange(10**13)
        sampler = DistributedSampler(dataset, 8, 3, seed=1, algorithm="feistel")
        loader = StatefulDataLoader(dataset, batch_size=4, sampler=sampler)
        state = json.loads(json.dumps(loader.state_dict()))
        state["consumed"] = state["sampler"]["consumed"] = consumed  # stopped there
        computed.clear()
        resumed = StatefulDataLoader(
            dataset,
            batch_size=4,
            sampler=DistributedSampler(dataset, 8, 3, seed=1, algorithm="feistel"),
        )
        resumed.load_state_dict(state)
        first = next(iter(resumed)).tolist()
        work[consumed] = (sum(computed), dataset.loads)
        order = permutation.feistel_slice(10**13, 1, 0, consumed + 3, consumed + 3 + 8 * 4)
        assert first == order[::8].tolist()  # the documented positions, from the resume on
    assert work[32 * 10**2] == work[32 * 10**11]  # indices computed and samples loaded
    assert work[32 * 10**2][1] == 4  # only the batch it returns


@pytest.mark.parametrize("mode", ["position", "skip", "torchdata"])
def test_a_dropped_loader_is_freed_at_once_in_every_resume_mode(mode: str) -> None:
    """No reference cycle through the resume strategy: a loader (and the workers of its
    live iterator) goes when its last reference does, not when the garbage collector runs
    (a cycle kept torchdata's worker processes alive until interpreter exit)."""
    import gc
    import weakref

    from lightning_resumable_data import ReproducibleShuffleSampler

    samplers: dict[str, Any] = {
        "position": lambda: DistributedSampler(range(8), num_replicas=1, rank=0),
        "skip": lambda: ReproducibleShuffleSampler(range(8), seed=0),
        "torchdata": lambda: torch.utils.data.SequentialSampler(range(8)),
    }
    gc.disable()
    try:
        sampler = samplers[mode]()
        loader = StatefulDataLoader(range(8), batch_size=2, sampler=sampler)
        assert loader.resume_mode == mode
        next(iter(loader))
        loader.load_state_dict(loader.state_dict())
        ref = weakref.ref(loader)
        del loader
        assert ref() is None
    finally:
        gc.enable()
