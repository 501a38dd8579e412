from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
import torch
from test_sharded_dataset import SIZES, recording_readers, write_docs

from lightning_resumable_data import (
    STATE_VERSION,
    DistributedShardedDataset,
    SampleKey,
    ShardedDataLoader,
    StateMismatchError,
    open_token_shards,
)
from lightning_resumable_data.index.sharding import shard_order
from lightning_resumable_data.shards import DatasetShardReader, DefaultDataLoaderFactory

N = sum(SIZES)  # 54 samples in 5 shards


def make(
    world: int = 1,
    rank: int = 0,
    batch: int = 4,
    seed: int = 0,
    log: list[Any] | None = None,
    **kwargs: Any,
) -> ShardedDataLoader:
    kwargs.setdefault("multiprocessing", False)
    return ShardedDataLoader(
        recording_readers([] if log is None else log),
        batch,
        seed=seed,
        dp_rank=rank,
        num_replicas=world,
        **kwargs,
    )


def ids(batches: Any) -> list[list[int]]:
    return [batch.tolist() for batch in batches]


def take(loader: ShardedDataLoader, k: int) -> tuple[list[list[int]], dict[str, Any]]:
    """``k`` batches from fresh passes (crossing epochs), then the state (JSON round trip)."""
    out: list[list[int]] = []
    while len(out) < k:
        for batch in loader:
            out.append(batch.tolist())
            if len(out) == k:
                break
    return out, json.loads(json.dumps(loader.state_dict()))


def run_epochs(loader: ShardedDataLoader, epochs: int) -> list[list[int]]:
    out: list[list[int]] = []
    while loader.epoch < epochs:
        out += ids(loader)
    return out


@pytest.fixture(scope="module")
def expected() -> list[list[int]]:
    loader = make()
    batches = run_epochs(loader, 2)
    loader.close()
    return batches


@pytest.mark.parametrize("k", [0, 1, 5, 13, 14, 20])  # 14 batches per epoch; 5 is mid-shard
def test_resume_after_k_batches_equals_uninterrupted(expected: list[list[int]], k: int) -> None:
    assert len(expected) == 28
    assert sorted(i for b in expected[:14] for i in b) == list(range(N))
    seen, state = take(make(), k)
    assert seen == expected[:k]
    resumed = make()
    resumed.load_state_dict(state)
    assert run_epochs(resumed, 2) == expected[k:]
    resumed.close()


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_position_counts_batches_that_left_not_prefetched(
    expected: list[list[int]], depth: int
) -> None:
    loader = make(num_microbatch_prefetches=depth)
    seen, state = take(loader, 3)  # the background thread has read further
    assert seen == expected[:3]
    assert state == {
        "version": STATE_VERSION,
        "kind": "ShardedDataLoader",
        "fingerprint": loader.fingerprint,
        "epoch": 0,
        "consumed": 12,
    }
    loader.close()


def test_resume_with_a_worker_process(tmp_path: Path) -> None:
    directory = write_docs(tmp_path)

    def loader() -> ShardedDataLoader:
        return ShardedDataLoader(open_token_shards(directory), 5, multiprocessing=True)

    reference = loader()
    whole = [b.tolist() for _ in range(2) for b in reference]
    reference.close()
    first = loader()
    seen, state = take(first, 9)  # mid-shard (45 of 348 samples, 16 per shard)
    first.close()
    resumed = loader()
    resumed.load_state_dict(state)
    assert seen + [b.tolist() for b in resumed] + [b.tolist() for b in resumed] == whole
    resumed.close()


def test_resume_with_a_factory_of_two_workers(expected: list[list[int]]) -> None:
    def factory(dataset: Any, sampler: Any) -> torch.utils.data.DataLoader[Any]:
        return torch.utils.data.DataLoader(dataset, 4, sampler=sampler, num_workers=2)

    seen, state = take(make(dataloader_factory=factory), 6)
    resumed = make(dataloader_factory=factory)
    resumed.load_state_dict(state)
    assert seen + run_epochs(resumed, 2) == expected


@pytest.mark.parametrize(
    ("world", "new_world", "batch", "new_batch"),
    [(2, 3, 4, 4), (3, 1, 2, 2), (1, 2, 4, 4), (2, 2, 4, 3)],
)
def test_resume_under_another_world_or_batch_size_reads_every_sample_once(
    world: int, new_world: int, batch: int, new_batch: int
) -> None:
    consumed: list[int] = []
    states = []
    for rank in range(world):
        batches, state = take(make(world, rank, batch), 3)
        consumed += [i for b in batches for i in b]
        states.append(state)
    assert all(state == states[0] for state in states)  # rank-independent
    assert states[0]["consumed"] == 3 * batch * world
    rest: list[int] = []
    for rank in range(new_world):
        loader = make(new_world, rank, new_batch)
        loader.load_state_dict(states[0])
        rest += [i for b in ids(loader) for i in b]
        assert loader.epoch == 1
    counts = Counter(consumed + rest)
    assert set(counts) == set(range(N))  # nothing skipped
    assert sum(counts.values()) - N < new_world  # only the padded tail repeats


def test_drop_last_drops_the_tail_and_the_short_batch() -> None:
    loader = make(world=4, batch=4, drop_last=True)  # 54 // 4 = 13 per rank: 3 full batches
    assert len(loader) == 3
    batches = ids(loader)
    assert [len(b) for b in batches] == [4, 4, 4]
    assert loader.state_dict()["epoch"] == 1


def test_shards_are_prefetched_and_resident_shards_bounded() -> None:
    log: list[Any] = []
    loader = make(log=log, num_shard_prefetches=1)
    ids(loader)
    stats = loader.dataset.stats
    assert stats.peak_resident <= 2
    assert stats.prefetches >= len(SIZES) - 1  # every shard after the first loaded ahead
    loads = [event for event in log if event[0] == "load"]
    assert [e[1] for e in loads][: len(SIZES)] == shard_order(len(SIZES), 0, 0).tolist()
    assert all(e[2].startswith("shard-prefetch") for e in loads)
    assert all(e[2] for e in log if e[0] == "read")  # no read ever found its shard unloaded
    loader.close()


def test_microbatches_are_prefetched_in_the_background() -> None:
    collated: list[int] = []
    ready = threading.Event()
    depth = 3

    def collate(samples: list[int]) -> torch.Tensor:
        collated.append(len(collated))
        if len(collated) == 1 + depth:
            ready.set()
        return torch.tensor(samples)

    loader = make(num_microbatch_prefetches=depth, collate_fn=collate)
    iterator = iter(loader)
    next(iterator)
    # Without asking for more, the background thread collates the next `depth` batches.
    assert ready.wait(10), f"only {len(collated)} batches were prefetched"
    assert len(collated) <= 1 + depth + 1  # bounded: the queue, plus one waiting to enter it
    assert loader.state_dict()["consumed"] == 4
    loader.close()


def test_batches_move_to_the_device_in_the_background() -> None:
    def collate(samples: list[int]) -> dict[str, Any]:
        return {"ids": torch.tensor(samples), "meta": [len(samples)]}

    loader = make(device="cpu", collate_fn=collate)
    batch = next(iter(loader))
    assert batch["ids"].device == torch.device("cpu")
    assert batch["meta"] == [4]
    loader.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_batches_move_to_cuda_from_pinned_memory(expected: list[list[int]]) -> None:
    loader = make(device="cuda")
    assert isinstance(loader.loader, torch.utils.data.DataLoader)
    assert loader.loader.pin_memory
    batches = [b for _ in range(2) for b in loader]
    assert all(b.device.type == "cuda" for b in batches)
    assert [b.cpu().tolist() for b in batches] == expected
    loader.close()


def test_an_abandoned_iterator_starts_the_next_epoch(expected: list[list[int]]) -> None:
    loader = make()
    first = iter(loader)
    assert next(first).tolist() == expected[0]
    assert len(loader) == 14
    assert ids(loader) == expected[14:]
    assert loader.epoch == 2


def test_a_read_error_reaches_the_consumer() -> None:
    class Broken(DatasetShardReader[int]):
        def read(self, index: int) -> int:
            raise OSError("disk gone")

    readers = [Broken(list(range(4))), Broken(list(range(4)))]
    loader = ShardedDataLoader(readers, 2, multiprocessing=False, num_replicas=1, dp_rank=0)
    with pytest.raises(OSError, match="disk gone"):
        next(iter(loader))
    loader.close()


def test_vanished_shard_is_detected_on_resume(tmp_path: Path) -> None:
    directory = write_docs(tmp_path)

    def loader() -> ShardedDataLoader:
        return ShardedDataLoader(open_token_shards(directory), 3, multiprocessing=False)

    _, state = take(loader(), 4)
    resumed = loader()
    for reader in resumed.dataset.readers:
        reader.load()  # opened (as after reading): load_state_dict checks it again
    (directory / "shard_00005.bin").write_bytes(b"")  # truncated between save and resume
    with pytest.raises(StateMismatchError, match=r"shard 5 \('shard_00005.bin'\): .*now holds 0"):
        resumed.load_state_dict(state)
    resumed.close()
    fresh = loader()  # a fresh process: nothing opened, the shard's first load says it
    fresh.load_state_dict(state)
    with pytest.raises(ValueError, match=r"shard_00005.bin' holds 0 samples .* index says 16"):
        run_epochs(fresh, 1)
    fresh.close()


def test_state_from_another_configuration_is_refused() -> None:
    _, state = take(make(seed=1), 2)
    with pytest.raises(StateMismatchError, match="seed: saved 1, now 0"):
        make(seed=0).load_state_dict(state)
    readers = recording_readers([], [*SIZES[:4], 13])
    other = ShardedDataLoader(readers, 4, seed=1, multiprocessing=False, num_replicas=1)
    with pytest.raises(StateMismatchError, match="the shards changed since it was saved"):
        other.load_state_dict(state)
    state["kind"] = "StatefulDataLoader"
    with pytest.raises(StateMismatchError, match="written by kind='StatefulDataLoader'"):
        make(seed=1).load_state_dict(state)


def test_load_while_an_iterator_is_live_is_refused(expected: list[list[int]]) -> None:
    loader = make()
    iterator = iter(loader)
    next(iterator)
    with pytest.raises(RuntimeError, match="while an iterator is live"):
        loader.load_state_dict(loader.state_dict())
    assert next(iterator).tolist() == expected[1]
    loader.close()


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(
        ValueError, match=r"Invalid rank 2, rank should be in the interval \[0, 1\]"
    ):
        make(world=2, rank=2)
    with pytest.raises(ValueError, match="empty shard list"):
        ShardedDataLoader([], 2, num_replicas=1, dp_rank=0)
    with pytest.raises(ValueError, match="batch_size=0 must be a positive int"):
        make(batch=0)
    with pytest.raises(ValueError, match="num_microbatch_prefetches=-1 must be >= 0"):
        make(num_microbatch_prefetches=-1)
    dataset = DistributedShardedDataset(recording_readers([]), seed=3)
    with pytest.raises(ValueError, match="seed=4 disagrees with the dataset, which has seed=3"):
        ShardedDataLoader(dataset, 2, seed=4, num_replicas=1, dp_rank=0)
    sampler = DistributedShardedDataset(recording_readers([]), seed=5).sampler(1, 0)
    with pytest.raises(ValueError, match="shard_sampler does not match the shards"):
        ShardedDataLoader(dataset, 2, shard_sampler=sampler)
    with pytest.raises(ValueError, match="dp_rank=1 disagrees with the shard_sampler"):
        ShardedDataLoader(dataset, 2, shard_sampler=dataset.sampler(2, 0), dp_rank=1)

    def factory(data: Any, sampler: Any) -> torch.utils.data.DataLoader[Any]:
        return torch.utils.data.DataLoader(data, 8, sampler=sampler)

    with pytest.raises(ValueError, match="DataLoader with batch_size=8 over ShardedSampler"):
        ShardedDataLoader(dataset, 2, dataloader_factory=factory, num_replicas=1, dp_rank=0)
    dataset.close()


def test_default_factory_reads_in_a_worker_process_when_asked() -> None:
    factory = DefaultDataLoaderFactory(batch_size=2, multiprocessing=True)
    loader = factory(cast(Any, list(range(4))), None)
    assert loader.num_workers == 1
    assert loader.persistent_workers
    assert [b.tolist() for b in loader] == [[0, 1], [2, 3]]
    assert np.array_equal(
        [
            b.tolist()
            for b in DefaultDataLoaderFactory(2, multiprocessing=False)(cast(Any, range(4)), None)
        ],
        [[0, 1], [2, 3]],
    )


def test_batches_travel_as_keyed_batches_with_no_key_object_per_sample(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The sampler hands each batch over as one KeyedBatch; the sharded dataset reads its
    # epoch and indices directly, so no SampleKey is built (one per sample cost ~45 us each
    # in a fresh process: Python objects that also made the first epochs collect garbage).
    built: list[int] = []
    original = SampleKey.__new__

    def counting(cls: type[SampleKey], *args: Any, **kwargs: Any) -> SampleKey:
        built.append(1)
        return original(cls, *args, **kwargs)

    reference = ids(make(batch=4))
    monkeypatch.setattr(SampleKey, "__new__", counting)
    assert ids(make(batch=4)) == reference
    assert built == []
    batch_sampler = make(batch=4).loader.batch_sampler  # type: ignore[attr-defined]
    assert type(batch_sampler).__name__ == "PositionBatchSampler"


def test_closing_a_prefetcher_whose_read_stalls_returns_within_its_bound() -> None:
    """Nothing waits forever: ``close`` waits for the batch being read at most ``timeout``
    seconds, warns, and the thread exits once the stalled read returns."""
    import threading
    import time

    from lightning_resumable_data.shards._prefetch import Prefetcher

    release = threading.Event()

    def stalled() -> Iterator[int]:
        yield 1
        release.wait(30)
        yield 2

    prefetcher = Prefetcher(stalled(), depth=1, transfer=lambda batch: batch)
    assert next(prefetcher) == 1
    time.sleep(0.1)  # the thread is now inside the stalled read
    start = time.monotonic()
    with pytest.warns(RuntimeWarning, match="still reading a batch 0.2 s after close"):
        prefetcher.close(timeout=0.2)
    assert time.monotonic() - start < 5
    release.set()
    assert prefetcher._thread is not None
    prefetcher._thread.join(5)
    assert not prefetcher._thread.is_alive()
