"""The sharded dataset and its sampler (the helpers here are shared with the loader tests)."""

from __future__ import annotations

import json
import os
import pickle
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lightning_resumable_data import (
    DistributedShardedDataset,
    SampleKey,
    ShardedSampler,
    StatefulDataLoader,
    StateMismatchError,
    open_token_shards,
    write_token_shards,
)
from lightning_resumable_data.index.sharding import shard_order, shard_starts

SIZES = [12, 9, 15, 6, 12]  # 54 samples in 5 shards of unequal size


class RecordingReader:
    """A shard whose sample ``i`` is its global index; logs loads, closes and reads.

    ``log`` is a list (this process) or a file path (shared with worker processes).
    ``gate``, if set, blocks ``load`` until it is set; ``started`` is set when a load begins.
    """

    def __init__(self, shard: int, start: int, size: int, log: list[Any] | str) -> None:
        self.shard, self.start, self.size, self.log = shard, start, size, log
        self.gate: threading.Event | None = None
        self.started = threading.Event()
        self._loaded = False

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "gate": None, "started": None, "_loaded": False}

    def _record(self, *event: Any) -> None:
        if isinstance(self.log, list):
            self.log.append(event)
        else:
            with open(self.log, "a") as file:
                file.write(json.dumps([os.getpid(), *event]) + "\n")

    @property
    def name(self) -> str:
        return f"rec{self.shard}"

    def __len__(self) -> int:
        return self.size

    def load(self) -> None:
        if self._loaded:
            return
        if self.started is not None:
            self.started.set()
        self._record("load", self.shard, threading.current_thread().name)
        if self.gate is not None:
            assert self.gate.wait(10), "test gate never opened"
        self._loaded = True

    def close(self) -> None:
        if self._loaded:
            self._loaded = False
            self._record("close", self.shard)

    def check(self) -> None:
        pass

    def read(self, index: int) -> int:
        self._record("read", self.shard, self._loaded)
        return self.start + index

    def read_range(self, start: int, stop: int) -> list[int]:
        return [self.read(i) for i in range(start, stop)]


def recording_readers(log: list[Any] | str, sizes: list[int] = SIZES) -> list[RecordingReader]:
    starts = shard_starts(sizes).tolist()
    return [RecordingReader(s, starts[s], n, log) for s, n in enumerate(sizes)]


def read_log(path: str) -> list[list[Any]]:
    with open(path) as file:
        return [json.loads(line) for line in file]


def max_resident(log: list[Any]) -> int:
    """Most shards loaded (or loading) at once, from load/close events."""
    resident: set[int] = set()
    peak = 0
    for event in log:
        if event[0] == "load":
            resident.add(event[1])
        elif event[0] == "close":
            resident.discard(event[1])
        peak = max(peak, len(resident))
    return peak


def read_epoch(dataset: DistributedShardedDataset[Any], sampler: ShardedSampler) -> list[int]:
    return [int(dataset[key]) for key in sampler]


# -- order and partition -------------------------------------------------------------------


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("drop_last", [False, True])
def test_ranks_are_disjoint_and_cover_all_but_the_documented_tail(
    world: int, drop_last: bool
) -> None:
    dataset = DistributedShardedDataset(recording_readers([]), seed=3)
    per_rank = []
    for rank in range(world):
        sampler = dataset.sampler(world, rank, drop_last=drop_last)
        sampler.set_epoch(2)
        per_rank.append(read_epoch(dataset, sampler))
    n = sum(SIZES)
    assert len({len(samples) for samples in per_rank}) == 1  # same count on every rank
    union = Counter(i for samples in per_rank for i in samples)
    if drop_last:  # disjoint; fewer than `world` samples dropped
        assert max(union.values()) == 1
        assert n - len(union) == n % world
    else:  # everything; fewer than `world` padded samples read twice
        assert set(union) == set(range(n))
        assert sum(union.values()) - n == (-n) % world
    dataset.close()


def test_all_ranks_read_the_same_shard_at_the_same_step() -> None:
    dataset = DistributedShardedDataset(recording_readers([]), seed=1, shuffle_samples=True)
    world = 3
    streams = [list(dataset.sampler(world, rank)) for rank in range(world)]
    for step in range(len(streams[0])):
        shards = {dataset.locate(stream[step])[0] for stream in streams}
        assert len(shards) <= 2  # one shard, or two at a boundary
    dataset.close()


def shard_visits(seed: int, epoch: int) -> tuple[list[int], list[int]]:
    sampler = ShardedSampler(SIZES, 1, 0, seed=seed)
    sampler.set_epoch(epoch)
    indices = [int(i) for i in sampler]
    shards = np.searchsorted(shard_starts(SIZES), indices, side="right") - 1
    visits = [int(s) for i, s in enumerate(shards) if i == 0 or s != shards[i - 1]]
    return visits, indices


def test_shard_and_in_shard_orders_change_per_epoch_and_are_reproducible() -> None:
    visits0, order0 = shard_visits(seed=5, epoch=0)
    visits1, order1 = shard_visits(seed=5, epoch=1)
    assert sorted(visits0) == list(range(5))  # each shard visited once, in one run
    assert visits0 != visits1
    assert visits0 == shard_order(5, 5, 0).tolist()
    assert (visits0, order0) == shard_visits(seed=5, epoch=0)
    assert shard_visits(seed=6, epoch=0)[1] != order0
    # Samples of one shard come in another order the next epoch.
    in_shard0 = [i for i in order0 if i < SIZES[0]]
    in_shard1 = [i for i in order1 if i < SIZES[0]]
    assert in_shard0 != in_shard1
    assert sorted(in_shard0) == sorted(in_shard1) == list(range(SIZES[0]))


def test_sampler_yields_sample_keys_carrying_the_epoch() -> None:
    sampler = ShardedSampler(SIZES, 2, 1, seed=0)
    sampler.set_epoch(4)
    key = next(iter(sampler))
    assert isinstance(key, SampleKey)
    assert (key.epoch, key.position, key.seed) == (4, 1, 0)


# -- residency and prefetch ----------------------------------------------------------------


@pytest.mark.parametrize(("max_res", "prefetch"), [(1, 0), (2, 1), (3, 2), (3, 1)])
def test_at_most_max_resident_shards_and_each_loaded_once_per_epoch(
    max_res: int, prefetch: int
) -> None:
    log: list[Any] = []
    dataset = DistributedShardedDataset(
        recording_readers(log), max_resident=max_res, prefetch=prefetch, seed=2
    )
    sampler = dataset.sampler(1, 0)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        assert sorted(read_epoch(dataset, sampler)) == list(range(sum(SIZES)))
    dataset.close()
    assert max_resident(log) <= max_res
    assert all(loaded for event, *rest in log if event == "read" for loaded in rest[1:])
    loads = [event for event in log if event[0] == "load"]
    # One load per shard per epoch, none wasted; shards still resident when the next epoch
    # begins are not loaded again.
    assert 3 * len(SIZES) - 2 * max_res <= len(loads) <= 3 * len(SIZES)


def test_prefetch_loads_every_shard_but_the_first_ahead_of_its_first_read() -> None:
    log: list[Any] = []
    dataset = DistributedShardedDataset(recording_readers(log), max_resident=2, prefetch=1)
    sampler = dataset.sampler(1, 0)
    read_epoch(dataset, sampler)
    stats = dataset.stats
    # The last shard of epoch 0 prefetches epoch 1's first, unless it is still resident.
    order0, order1 = shard_order(len(SIZES), 0, 0), shard_order(len(SIZES), 0, 1)
    extra = int(order1[0] not in order0[-2:])
    assert stats.loads == len(SIZES) + extra
    assert stats.prefetches == len(SIZES) - 1 + extra  # all but the very first shard
    assert stats.waits <= 1 + stats.prefetches  # never a wait for a load that never started
    assert stats.peak_resident == 2
    loads = [event for event in log if event[0] == "load"]
    assert [event[1] for event in loads][: len(SIZES)] == order0.tolist()
    assert all(event[2].startswith("shard-prefetch") for event in loads)  # in the background
    dataset.close()


def test_next_shard_starts_loading_while_the_current_one_is_still_read() -> None:
    """Timing-free: the reads of shard A go on while B's load is blocked in the background."""
    log: list[Any] = []
    readers = recording_readers(log)
    dataset = DistributedShardedDataset(readers, max_resident=2, prefetch=1, seed=4)
    order = shard_order(len(SIZES), 4, 0)
    first, second = int(order[0]), int(order[1])
    gate = readers[second].gate = threading.Event()
    keys = list(dataset.sampler(1, 0))
    dataset[keys[0]]  # first read of shard `first`: schedules `second` in the background
    assert readers[second].started.wait(10), "the next shard's load never started"
    # Its load is now blocked, yet the rest of shard `first` reads without waiting for it.
    rest = [int(dataset[key]) for key in keys[1 : SIZES[first]]]
    assert len(rest) == SIZES[first] - 1
    assert not readers[second]._loaded
    gate.set()
    assert dataset.locate(int(dataset[keys[SIZES[first]]]))[0] == second
    dataset.close()


def test_without_prefetch_loads_happen_on_demand_in_the_caller() -> None:
    log: list[Any] = []
    dataset = DistributedShardedDataset(recording_readers(log), max_resident=1, prefetch=0)
    read_epoch(dataset, dataset.sampler(1, 0))
    assert dataset.stats.prefetches == 0
    assert {event[2] for event in log if event[0] == "load"} == {"MainThread"}
    dataset.close()


def in_process_loads(sizes: list[int], seed: int, epochs: int, keys: bool) -> list[int]:
    """Shards in the order their loads start, reading ``epochs`` epochs in this process."""
    log: list[Any] = []
    dataset = DistributedShardedDataset(recording_readers(log, sizes), seed=seed)
    sampler = dataset.sampler(1, 0)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for key in sampler:
            dataset[key if keys else int(key)]  # a plain int hides the epoch
    dataset.close()
    return [event[1] for event in log if event[0] == "load"]


def test_prefetch_follows_the_epoch_inside_persistent_workers(tmp_path: Path) -> None:
    log = str(tmp_path / "events.jsonl")
    sizes = [8, 8, 8, 8]
    dataset = DistributedShardedDataset(recording_readers(log, sizes), seed=9)
    loader = StatefulDataLoader(
        dataset, batch_size=4, sampler=dataset.sampler(1, 0), num_workers=1, persistent_workers=True
    )
    epochs = [sorted(int(i) for batch in loader for i in batch) for _ in range(3)]
    assert epochs == [list(range(32))] * 3
    events = [e for e in read_log(log) if e[0] != os.getpid()]  # the worker's events
    assert len({e[0] for e in events}) == 1  # one persistent worker for all three epochs
    assert all(e[3] for e in events if e[1] == "read")  # every read found its shard loaded
    # The loads start in the order a dataset that knows the epoch starts them (the load
    # order is a function of the read order); one that did not know it would differ. The
    # reference reads a 4th epoch: the worker may already prefetch its first shard.
    worker_loads = [e[2] for e in events if e[1] == "load"]
    assert len(worker_loads) >= 11
    assert worker_loads == in_process_loads(sizes, 9, 4, keys=True)[: len(worker_loads)]
    # ... and the reference has the power to tell: without keys the load order differs.
    assert in_process_loads(sizes, 9, 4, keys=True) != in_process_loads(sizes, 9, 4, keys=False)


# -- resume --------------------------------------------------------------------------------


def token_dataset(directory: Path, seed: int = 0, **kwargs: Any) -> DistributedShardedDataset[Any]:
    return DistributedShardedDataset(open_token_shards(directory), seed=seed, **kwargs)


def write_docs(directory: Path, tokens_per_shard: int = 64) -> Path:
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 1000, size=int(rng.integers(10, 60))) for _ in range(40)]
    write_token_shards(directory, docs, seq_len=4, tokens_per_shard=tokens_per_shard)
    return directory


@pytest.fixture
def token_dir(tmp_path: Path) -> Path:
    return write_docs(tmp_path / "tokens")  # 348 samples, 16 per shard


def make_loader(
    directory: Path, world: int = 1, rank: int = 0, batch: int = 3, workers: int = 0
) -> StatefulDataLoader:
    dataset = token_dataset(directory)
    return StatefulDataLoader(
        dataset,
        batch_size=batch,
        sampler=dataset.sampler(world, rank),
        num_workers=workers,
        persistent_workers=workers > 0,
    )


def batches(loader: StatefulDataLoader, k: int | None = None) -> list[list[list[int]]]:
    out = []
    for batch in loader:
        out.append(batch.tolist())
        if k is not None and len(out) == k:
            break
    return out


@pytest.mark.parametrize(("workers", "k"), [(0, 1), (0, 7), (0, 13), (2, 7)])
def test_exact_resume_mid_shard_through_the_stateful_loader(
    token_dir: Path, workers: int, k: int
) -> None:
    loader = make_loader(token_dir, workers=workers)
    expected = batches(loader)
    expected += batches(loader)  # epoch 1
    first = make_loader(token_dir, workers=workers)
    seen = batches(first, k)
    state = json.loads(json.dumps(first.state_dict()))
    assert state["sampler"]["kind"] == "ShardedSampler"
    resumed = make_loader(token_dir, workers=workers)
    resumed.load_state_dict(state)
    assert seen + batches(resumed) + batches(resumed) == expected


@pytest.mark.parametrize(("world", "new_world"), [(2, 3), (3, 1), (1, 2)])
def test_resume_under_another_world_size_reads_every_sample_once(
    token_dir: Path, world: int, new_world: int
) -> None:
    n = len(token_dataset(token_dir))
    seen: list[tuple[int, ...]] = []
    state: dict[str, Any] = {}
    for rank in range(world):
        loader = make_loader(token_dir, world, rank)
        seen += [tuple(s) for b in batches(loader, 5) for s in b]
        state = state or json.loads(json.dumps(loader.state_dict()))
    for rank in range(new_world):
        loader = make_loader(token_dir, new_world, rank)
        loader.load_state_dict(state)
        seen += [tuple(s) for b in batches(loader) for s in b]
    samples = np.concatenate([r.read_range(0, len(r)) for r in open_token_shards(token_dir)])
    everything = Counter(tuple(s) for s in samples.tolist())
    got = Counter(seen)
    assert set(got) == set(everything)  # nothing skipped
    assert sum(got.values()) - n < new_world  # only the padded tail repeats


def test_vanished_shard_between_save_and_resume_is_detected(token_dir: Path) -> None:
    """docs/sharded.md: by default a resume touches no shard file; a shard that vanished is
    reported by its first load, before any of its samples is read, after exactly the
    uninterrupted run's batches. With verify=True, load_state_dict reports it."""
    loader = make_loader(token_dir)
    uninterrupted = batches(loader)
    state = make_loader(token_dir).state_at(0, 4)  # after 4 batches
    resumed = make_loader(token_dir)  # opened before the shard vanished
    verified = StatefulDataLoader(
        dataset := DistributedShardedDataset(open_token_shards(token_dir, verify=True)),
        batch_size=3,
        sampler=dataset.sampler(1, 0),
    )
    (token_dir / "shard_00002.bin").unlink()
    with pytest.raises(StateMismatchError, match=r"shard 2 \('shard_00002.bin'\).*does not exist"):
        verified.load_state_dict(state)
    resumed.load_state_dict(state)  # no file touched: nothing to compare yet
    got: list[list[list[int]]] = []

    def read_all() -> None:
        got.extend(batch.tolist() for batch in resumed)

    with pytest.raises(FileNotFoundError, match=r"shard_00002.bin' does not exist"):
        read_all()
    assert got == uninterrupted[4 : 4 + len(got)]  # exact up to the missing shard
    with pytest.raises(FileNotFoundError, match=r"listed in index\.json but does not exist"):
        open_token_shards(token_dir, verify=True)  # opened after: caught at open


def test_resume_over_a_changed_shard_set_is_refused(token_dir: Path, tmp_path: Path) -> None:
    loader = make_loader(token_dir)
    batches(loader, 2)
    state = loader.state_dict()
    fewer = tmp_path / "fewer"
    write_token_shards(fewer, [np.arange(4 * 16 * 3)], seq_len=4, tokens_per_shard=64)
    with pytest.raises(StateMismatchError, match=r"dataset_length: saved 348, now 48"):
        make_loader(fewer).load_state_dict(state)
    resized = write_docs(tmp_path / "resized", tokens_per_shard=32)  # same samples, 8 / shard
    with pytest.raises(StateMismatchError, match=r"saved 22 shards, 348 samples.*now 44 shards"):
        make_loader(resized).load_state_dict(state)
    seeded = DistributedShardedDataset(open_token_shards(token_dir), seed=1)
    stateful = StatefulDataLoader(seeded, batch_size=3, sampler=seeded.sampler(1, 0))
    with pytest.raises(StateMismatchError, match="seed: saved 0, now 1"):
        stateful.load_state_dict(state)


# -- bad input -----------------------------------------------------------------------------


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="empty shard list"):
        DistributedShardedDataset([])
    with pytest.raises(TypeError, match=r"readers\[0\] is a list, not a ShardReader"):
        DistributedShardedDataset([[1, 2]])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"max_resident=1 cannot hold .* use max_resident >= 2"):
        DistributedShardedDataset(recording_readers([]), max_resident=1, prefetch=1)
    dataset = DistributedShardedDataset(recording_readers([]))
    with pytest.raises(IndexError, match="index 54 is out of range for a sharded dataset of 54"):
        dataset[54]
    with pytest.raises(
        ValueError, match=r"Invalid rank 2, rank should be in the interval \[0, 1\]"
    ):
        dataset.sampler(2, 2)
    with pytest.warns(UserWarning, match="read through a sampler with seed=7"):
        dataset[SampleKey(0, seed=7, epoch=0, position=0)]
    dataset.close()


def test_a_failed_load_is_raised_and_retried() -> None:
    class Flaky(RecordingReader):
        failures = 1

        def load(self) -> None:
            if Flaky.failures:
                Flaky.failures -= 1
                raise OSError("storage hiccup")
            super().load()

    readers = recording_readers([])
    readers[0] = Flaky(0, 0, SIZES[0], [])
    dataset = DistributedShardedDataset(readers, prefetch=0, max_resident=1)
    with pytest.raises(OSError, match="storage hiccup"):
        dataset[0]
    assert dataset[0] == 0
    dataset.close()


def test_dataset_pickles_without_threads(token_dir: Path) -> None:
    dataset = token_dataset(token_dir)
    first = dataset[0]
    assert dataset.resident_shards  # loaded, with a prefetch thread running
    clone = pickle.loads(pickle.dumps(dataset))
    assert clone.resident_shards == ()
    assert clone.stats.loads == 0
    np.testing.assert_array_equal(clone[0], first)
    dataset.close()
    clone.close()


def test_opening_and_resuming_over_many_shards_touches_only_the_shards_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/sharded.md: open_token_shards touches no shard file, and a resume (a fresh
    loader, load_state_dict, the first batches) looks only at the shards it reads: its cost
    does not grow with the shard count. verify=True looks at every file at open."""
    from lightning_resumable_data.shards import TokenShardReader
    from lightning_resumable_data.shards.tokens import INDEX_FILE, TokenShardIndex

    files = tuple(f"shard_{i:05d}.bin" for i in range(2000))
    for name in files:
        with (tmp_path / name).open("wb") as file:
            file.truncate(16 * 4 * 2)  # 16 samples of 4 uint16 tokens
    index = TokenShardIndex(4, "uint16", files, (16,) * len(files))
    (tmp_path / INDEX_FILE).write_text(json.dumps(index.to_json()))
    looked: list[str] = []
    inspect = TokenShardReader._inspect

    def counted(reader: TokenShardReader) -> tuple[int, int]:
        looked.append(reader.name)
        return inspect(reader)

    monkeypatch.setattr(TokenShardReader, "_inspect", counted)

    def loader(**options: Any) -> StatefulDataLoader:
        dataset = DistributedShardedDataset(open_token_shards(tmp_path, **options), seed=3)
        return StatefulDataLoader(dataset, batch_size=8, sampler=dataset.sampler(1, 0))

    state = loader().state_at(0, 1001)  # mid-epoch: 8,008 of 32,000 samples
    assert looked == []
    resumed = loader()
    resumed.load_state_dict(state)
    first = [batch.tolist() for batch, _ in zip(resumed, range(4), strict=False)]
    assert len(first) == 4
    assert 1 <= len(looked) <= 4  # the shards of 4 batches (and one prefetched)
    assert isinstance(resumed.dataset, DistributedShardedDataset)
    resumed.dataset.close()
    looked.clear()
    loader(verify=True)
    assert len(looked) == len(files)
