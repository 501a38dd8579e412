"""Promise sentences of the docs that had no test in their own form (tests/PROMISES.md, `none`).

Each test quotes or paraphrases one sentence, uses the public API the sentence shows, and
checks it against an oracle that is not the code under test (torch's own sampler, a run
under another layout, or the documented rule computed here).
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from loader_helpers import IndexDataset

from lightning_resumable_data import (
    DistributedSampler,
    MixtureDataset,
    MixtureSampler,
    ResumableDataModule,
    ResumableSequentialSampler,
    SampleKey,
    StatefulDataLoader,
    StateMismatchError,
)
from lightning_resumable_data.cli import main as lrd_main
from lightning_resumable_data.documents import (
    DocumentCorpus,
    PackedDataset,
    open_token_shard_documents,
)
from lightning_resumable_data.seeding import seed_training_step, step_seeds
from lightning_resumable_data.shards import DistributedShardedDataset, write_token_shards

# -- docs/loader.md -------------------------------------------------------------------------


class WorkerDraw(IndexDataset):
    """Returns (index, a draw from the worker's global torch RNG)."""

    def __getitem__(self, index: int) -> Any:
        return torch.tensor([int(index), int(torch.randint(10**9, ()))])


def _worker_draws(sampler_seed: int, loader_seed: int | None) -> list[list[int]]:
    dataset = WorkerDraw(12)
    sampler = DistributedSampler(dataset, 2, 1, seed=sampler_seed)
    loader = StatefulDataLoader(
        dataset, batch_size=2, sampler=sampler, num_workers=2, seed=loader_seed
    )
    return [row for batch in loader for row in batch.tolist()]


def test_loader_seed_for_worker_rngs_defaults_to_the_samplers() -> None:
    """docs/loader.md: `seed` (worker RNGs; defaults to the sampler's)."""
    # PROMISES.md Lo3
    torch.manual_seed(1)  # the parent's RNG does not matter
    default = _worker_draws(sampler_seed=5, loader_seed=None)
    torch.manual_seed(2)
    explicit = _worker_draws(sampler_seed=5, loader_seed=5)
    other = _worker_draws(sampler_seed=5, loader_seed=6)
    assert [row[0] for row in default] == [row[0] for row in other]  # the same order
    assert default == explicit  # the same worker draws as seed=<the sampler's>
    assert default != other  # ... and the seed does decide them


class KeyEcho(IndexDataset):
    """Returns (index, position) of the SampleKey it receives."""

    def __getitem__(self, index: int) -> Any:
        assert isinstance(index, SampleKey)
        return torch.tensor([int(index), index.position])


def test_a_sample_at_a_position_past_the_dataset_is_a_wrapped_pad() -> None:
    """docs/loader.md: a sample at global position p >= len(dataset) is a pad (index.position)."""
    # PROMISES.md Lo27
    n, world = 10, 4
    dataset = KeyEcho(n)
    rows: list[list[int]] = []
    for rank in range(world):
        sampler = DistributedSampler(dataset, world, rank, shuffle=False, sample_keys=True)
        loader = StatefulDataLoader(dataset, batch_size=2, sampler=sampler)
        rows += [row for batch in loader for row in batch.tolist()]
    # torch's evaluation sampler over the same arguments: the padded global order.
    torch_order: list[int] = []
    for rank in range(world):
        reference: torch.utils.data.DistributedSampler[int]
        reference = torch.utils.data.DistributedSampler(dataset, world, rank, shuffle=False)
        torch_order += list(reference)
    assert sorted(index for index, _ in rows) == sorted(torch_order)
    real = [index for index, position in rows if position < n]
    pads = [(index, position) for index, position in rows if position >= n]
    assert sorted(real) == list(range(n))  # weighting the pads out counts each sample once
    assert len(pads) == world - n % world  # 2 duplicates: the wrapped-around start of G
    assert all(index == position - n for index, position in pads)  # G = range(n) unshuffled


# -- docs/samplers.md, docs/mixing.md ---------------------------------------------------------


def test_mixture_sampler_takes_seeds_in_zero_to_two_to_the_64() -> None:
    """docs/samplers.md: `MixtureSampler` ... takes seeds in [0, 2**64)."""
    # PROMISES.md Sa8
    mixture = MixtureDataset({"a": IndexDataset(6), "b": IndexDataset(4)})
    top = MixtureSampler(mixture, {"a": 1, "b": 1}, 1, 0, seed=2**64 - 1)
    zero = MixtureSampler(mixture, {"a": 1, "b": 1}, 1, 0, seed=0)
    drawn = [int(i) for i in top]
    assert len(drawn) == len(list(zero)) == 10
    assert set(drawn) <= set(range(10))
    assert drawn != [int(i) for i in zero]  # the seed's 64 bits key the order
    for bad in (-1, 2**64):
        with pytest.raises(ValueError, match="seed"):
            MixtureSampler(mixture, {"a": 1, "b": 1}, 1, 0, seed=bad)


def _epoch_of(datamodule: ResumableDataModule) -> list[int]:
    from types import SimpleNamespace

    strategy = SimpleNamespace(distributed_sampler_kwargs={"num_replicas": 1, "rank": 0})
    datamodule.trainer = SimpleNamespace(  # type: ignore[assignment]
        strategy=strategy, max_epochs=1, accumulate_grad_batches=1
    )
    return [int(i) for batch in datamodule.train_dataloader() for i in batch]


def test_mixture_weights_default_to_the_source_sizes() -> None:
    """docs/mixing.md: `weights` default: proportional to sizes."""
    # PROMISES.md M4
    sizes = {"web": 60, "code": 30, "math": 10}
    sources = {name: IndexDataset(n) for name, n in sizes.items()}
    default = _epoch_of(ResumableDataModule(sources, batch_size=5, seed=7))
    sized = _epoch_of(ResumableDataModule(sources, batch_size=5, seed=7, weights=sizes))
    scaled = {name: n / 1000 for name, n in sizes.items()}  # proportional, not equal
    assert (
        default
        == sized
        == _epoch_of(ResumableDataModule(sources, batch_size=5, seed=7, weights=scaled))
    )
    even = {name: 1 for name in sizes}
    assert default != _epoch_of(ResumableDataModule(sources, batch_size=5, seed=7, weights=even))


def test_a_mixture_without_drop_last_pads_its_last_row_by_wrapping_around() -> None:
    """docs/mixing.md: with drop_last=False a mixture pads the last row by wrapping around G."""
    # PROMISES.md M72
    mixture = MixtureDataset({"a": IndexDataset(7), "b": IndexDataset(4)})
    weights = {"a": 2.0, "b": 1.0}

    def ranks(world: int, drop_last: bool) -> list[list[int]]:
        return [
            [
                int(i)
                for i in MixtureSampler(mixture, weights, world, r, seed=3, drop_last=drop_last)
            ]
            for r in range(world)
        ]

    (g,) = ranks(1, drop_last=False)  # the global order G: one rank reads all of it
    assert len(g) == 11
    world = 3  # 11 = 3 * 3 + 2: the last row has 2 samples, 1 pad
    padded = g + g[: world - len(g) % world]
    assert ranks(world, drop_last=False) == [padded[r::world] for r in range(world)]
    trimmed = g[: len(g) - len(g) % world]
    assert ranks(world, drop_last=True) == [trimmed[r::world] for r in range(world)]


# -- docs/randomness.md -----------------------------------------------------------------------


def _keys(sampler: DistributedSampler) -> list[SampleKey]:
    keys = list(sampler)
    assert all(isinstance(key, SampleKey) for key in keys)
    return keys  # type: ignore[return-value]


class TorchAugmented(IndexDataset):
    """Draws its augmentation with torch, from a generator seeded from the key."""

    def __getitem__(self, index: int) -> Any:
        assert isinstance(index, SampleKey)
        generator = torch.Generator().manual_seed(index.torch_seed())
        noise = torch.randint(10**9, (2,), generator=generator)
        return torch.tensor([int(index), index.position, *noise.tolist()])


def _torch_draws(world: int, num_workers: int, resume_after: int | None = None) -> dict[int, Any]:
    dataset = TorchAugmented(12)
    out: dict[int, Any] = {}
    for rank in range(world):
        sampler = DistributedSampler(dataset, world, rank, seed=3, sample_keys=True)
        loader = StatefulDataLoader(dataset, batch_size=2, sampler=sampler, num_workers=num_workers)
        batches = iter(loader)
        if resume_after is not None:  # resume a fresh loader from a mid-epoch state
            for _ in range(resume_after):
                row = next(batches)
                out |= {int(p): (int(i), *d) for i, p, *d in row.tolist()}
            state = loader.state_dict()
            sampler = DistributedSampler(dataset, world, rank, seed=3, sample_keys=True)
            loader = StatefulDataLoader(dataset, batch_size=2, sampler=sampler)
            loader.load_state_dict(state)
            batches = iter(loader)
        for row in batches:
            out |= {int(p): (int(i), *d) for i, p, *d in row.tolist()}
    return out


def test_a_torch_generator_seeded_from_the_key_draws_the_same_anywhere() -> None:
    """docs/randomness.md: `torch.Generator().manual_seed(index.torch_seed())` keys torch draws."""
    # PROMISES.md Ra4
    one = _torch_draws(world=1, num_workers=0)
    assert sorted(one) == list(range(12))
    assert _torch_draws(world=3, num_workers=2) == one
    assert _torch_draws(world=2, num_workers=0, resume_after=2) == one
    assert len({draw[1:] for draw in one.values()}) == 12  # each position its own draw


def test_a_sample_gets_a_fresh_draw_every_epoch() -> None:
    """docs/randomness.md: a sample gets a fresh draw every epoch (the epoch is in the key)."""
    # PROMISES.md Ra6
    sampler = DistributedSampler(range(8), 1, 0, seed=3, sample_keys=True)
    by_epoch = []
    for epoch in range(3):
        sampler.set_epoch(epoch)
        by_epoch.append({int(key): float(key.rng().random()) for key in _keys(sampler)})
    for index in range(8):
        draws = [epoch[index] for epoch in by_epoch]
        assert len(set(draws)) == 3, (index, draws)
    sampler.set_epoch(1)  # ... and the same epoch again draws the same
    assert {int(key): float(key.rng().random()) for key in _keys(sampler)} == by_epoch[1]


def test_a_padded_duplicate_gets_its_own_draw() -> None:
    """docs/randomness.md: a padded duplicate at the end of an epoch gets its own draw."""
    # PROMISES.md Ra7
    n, world = 10, 4  # 2 pads
    keys = [
        key
        for rank in range(world)
        for key in _keys(DistributedSampler(range(n), world, rank, seed=1, sample_keys=True))
    ]
    pads = [key for key in keys if key.position >= n]
    assert len(pads) == 2
    for pad in pads:
        (original,) = [key for key in keys if int(key) == int(pad) and key.position < n]
        assert pad.rng().random() != original.rng().random()
        assert pad.torch_seed() != original.torch_seed()


def test_each_generator_gets_its_own_words_of_the_key() -> None:
    """docs/randomness.md: each generator gets its own words: torch 64, NumPy 128, random 128."""
    # PROMISES.md Ra17
    seeds = [step_seeds(7, step, rank=0) for step in range(200)]
    torch_seeds = [s.torch for s in seeds]
    python_seeds = [s.python for s in seeds]
    assert all(0 <= s < 2**64 for s in torch_seeds)
    assert max(torch_seeds) >= 2**63  # all 64 bits used (2**-200 to fail by chance)
    assert all(len(s.numpy) == 4 and all(0 <= w < 2**32 for w in s.numpy) for s in seeds)
    assert max(max(s.numpy) for s in seeds) >= 2**31  # 4 full 32-bit words: 128 bits
    assert all(0 <= s < 2**128 for s in python_seeds)
    assert max(python_seeds) >= 2**127
    for s in seeds:  # separate words: no generator's seed is made of another's
        torch_words = {s.torch & 0xFFFFFFFF, s.torch >> 32}
        python_words = {s.python >> (32 * k) & 0xFFFFFFFF for k in range(4)}
        assert not torch_words & set(s.numpy)
        assert not torch_words & python_words
        assert not set(s.numpy) & python_words
    # ... and those are the seeds the generators get.
    returned = seed_training_step(0, seed=7, step=3)
    assert returned == seeds[3]
    assert torch.initial_seed() == seeds[3].torch
    expected_numpy = np.random.RandomState(np.array(seeds[3].numpy, dtype=np.uint32)).random()
    expected_python = random.Random(seeds[3].python).random()
    seed_training_step(0, seed=7, step=3, generators=("torch", "numpy", "random"))
    assert (np.random.random(), random.random()) == (expected_numpy, expected_python)


# -- docs/sharded.md --------------------------------------------------------------------------


class LoadLog:
    """A shard of consecutive ints that records its loads (the order prefetch follows)."""

    def __init__(self, shard: int, start: int, size: int, log: list[int]) -> None:
        self.shard, self.start, self.size, self.log = shard, start, size, log
        self.lock = threading.Lock()

    @property
    def name(self) -> str:
        return f"log{self.shard}"

    def __len__(self) -> int:
        return self.size

    def load(self) -> None:
        with self.lock:
            self.log.append(self.shard)

    def close(self) -> None:
        pass

    def check(self) -> None:
        pass

    def read(self, index: int) -> int:
        return self.start + index

    def read_range(self, start: int, stop: int) -> list[int]:
        return [self.start + i for i in range(start, stop)]


SHARD_SIZES = [4, 4, 4, 4, 4, 4]


def _shard_dataset(log: list[int]) -> DistributedShardedDataset[int]:
    starts = np.cumsum([0, *SHARD_SIZES]).tolist()
    readers = [LoadLog(s, starts[s], n, log) for s, n in enumerate(SHARD_SIZES)]
    return DistributedShardedDataset(readers, max_resident=2, prefetch=1, seed=11)


def _shard_visits(epoch: int) -> list[int]:
    """The epoch's shard order, as the sampler's keys visit it (samples i is shard i // 4)."""
    dataset = _shard_dataset([])
    sampler = dataset.sampler(1, 0)
    sampler.set_epoch(epoch)
    visits: list[int] = []
    for key in sampler:
        shard = int(key) // 4
        if not visits or visits[-1] != shard:
            visits.append(shard)
    dataset.close()
    return visits


def test_plain_int_indices_plan_prefetch_with_set_epoch() -> None:
    """docs/sharded.md: plain `int` indices use `dataset.set_epoch(e)`."""
    # PROMISES.md Sh20
    orders = {epoch: _shard_visits(epoch) for epoch in range(4)}
    assert all(sorted(order) == list(range(6)) for order in orders.values())
    # An epoch whose shard after the first differs from epoch 0's (the power to tell).
    epoch = next(
        e for e in (1, 2, 3) if orders[e][1] != orders[0][orders[0].index(orders[e][0]) + 1]
    )
    log: list[int] = []
    dataset = _shard_dataset(log)
    dataset.set_epoch(epoch)
    first = orders[epoch][0]
    assert dataset[first * 4] == first * 4  # a plain int: the epoch comes from set_epoch
    deadline = time.monotonic() + 10
    while len(log) < 2 and time.monotonic() < deadline:  # the prefetch runs in the background
        time.sleep(0.01)
    dataset.close()
    assert log[:2] == [first, orders[epoch][1]]  # epoch `epoch`'s next shard was prefetched


# -- docs/documents.md ------------------------------------------------------------------------


def test_a_document_split_across_two_shard_files_comes_back_as_two(tmp_path: Path) -> None:
    """docs/documents.md: a document split across two shard files comes back as two."""
    # PROMISES.md D7
    eos = 0
    documents = [np.arange(1, 6), np.arange(6, 16), np.arange(16, 21)]  # 5, 10, 5 tokens
    stream = np.concatenate([np.append(d, eos) for d in documents])  # 23 tokens
    index = write_token_shards(
        tmp_path, [np.append(d, eos) for d in documents], seq_len=4, tokens_per_shard=12
    )
    assert len(index.files) == 2  # 12 + 8 tokens kept, 3 dropped
    corpus = open_token_shard_documents(tmp_path, eos_id=eos)
    got = [corpus.document(i).tolist() for i in range(len(corpus))]
    # The documented rule: split the kept stream at every EOS and at the shard boundary.
    kept = stream[:20].tolist()
    expected: list[list[int]] = []
    for shard in (kept[:12], kept[12:]):
        piece: list[int] = []
        for token in shard:
            if token == eos:
                expected.append(piece)
                piece = []
            else:
                piece.append(token)
        if piece:
            expected.append(piece)
    assert got == expected
    assert got[1:3] == [list(range(6, 12)), list(range(12, 16))]  # document 1, in two


def test_concat_packing_leaves_a_different_tail_each_epoch() -> None:
    """documents.md: an epoch's last tail_tokens are in no sample; a different tail each epoch."""
    # PROMISES.md D23
    rng = np.random.default_rng(0)
    lengths = rng.integers(3, 12, size=40)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    tokens = np.arange(1, offsets[-1] + 1)  # every token unique; 0 is the EOS
    corpus = DocumentCorpus.from_arrays(tokens, offsets)
    packed = PackedDataset(corpus, seq_len=16, eos_id=0, seed=5)
    assert 0 < packed.tail_tokens < 16
    tails = []
    for epoch in range(5):
        packed.set_epoch(epoch)
        seen = Counter(int(t) for i in range(len(packed)) for t in packed[i]["input_ids"].tolist())
        missing = sorted(set(tokens.tolist()) - set(seen))
        assert all(seen[t] == 1 for t in seen if t != 0)  # every other token once
        eos_missing = len(lengths) - seen[0]
        assert len(missing) + eos_missing == packed.tail_tokens
        tails.append(tuple(missing))
    assert len(set(tails)) == len(tails)


# -- docs/cli.md ------------------------------------------------------------------------------


def _lrd_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code = lrd_main([*argv, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    report: dict[str, Any] = json.loads(out)
    return report


def test_inspect_says_not_ok_with_the_packages_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """docs/cli.md: `resume.ok` is false when the package would refuse; its message: `error`."""
    # PROMISES.md Cl15
    data = range(8)
    loader = StatefulDataLoader(data, batch_size=2, sampler=DistributedSampler(data, 2, 0))
    next(iter(loader))
    good = loader.state_dict()
    bad = {**good, "sampler": {**good["sampler"], "consumed": 2}}  # corrupted: 4 vs 2
    # The package refuses it: the message a real resume raises.
    real = StatefulDataLoader(data, batch_size=2, sampler=DistributedSampler(data, 2, 0))
    with pytest.raises(StateMismatchError) as refused:
        real.load_state_dict(bad)
    for name, state in (("good", good), ("bad", bad)):
        torch.save({"step": 1, "data": state}, tmp_path / f"{name}.ckpt")
    report = _lrd_json(capsys, "inspect", str(tmp_path / "bad.ckpt"))
    assert (report["resume"]["ok"], report["resume"]["error"]) == (False, str(refused.value))
    fine = _lrd_json(capsys, "inspect", str(tmp_path / "good.ckpt"))
    assert (fine["resume"]["ok"], fine["resume"]["error"]) == (True, None)


def test_inspect_of_a_skip_mode_state_agrees_with_the_package(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """docs/cli.md: `resume.ok` says what the package does, for a skip-mode sampler too.

    A `ResumableSequentialSampler` state resumes on another batch size (the skip counts
    samples) and is refused on another world size.
    """
    # PROMISES.md Cl15
    data = list(range(12))
    loader = StatefulDataLoader(data, batch_size=2, sampler=ResumableSequentialSampler(data))
    batches = iter(loader)
    next(batches), next(batches)
    state = loader.state_dict()
    resumed = StatefulDataLoader(data, batch_size=3, sampler=ResumableSequentialSampler(data))
    resumed.load_state_dict(state)
    assert [batch.tolist() for batch in resumed] == [[4, 5, 6], [7, 8, 9], [10, 11]]
    torch.save({"step": 2, "data": state}, tmp_path / "skip.ckpt")
    other_batch = _lrd_json(capsys, "inspect", str(tmp_path / "skip.ckpt"), "--batch-size", "3")
    assert (other_batch["resume"]["ok"], other_batch["resume"]["error"]) == (True, None)
    other_world = _lrd_json(capsys, "inspect", str(tmp_path / "skip.ckpt"), "--world-size", "2")
    assert other_world["resume"]["ok"] is False
    assert "needs the saved world size;" in other_world["resume"]["error"]


def _plan(capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str) -> dict[str, Any]:
    config = tmp_path / "plan.yaml"
    config.write_text(text)
    return _lrd_json(capsys, "plan", str(config))


PLAN = """\
sources: {a: 1000, b: 1000}
weights: {a: 3, b: 1}
temperature: 2.0
batch_size: 10
max_steps: 20
phases:
  - start_step: 10
    weights: {a: 3, b: 1}
"""


def test_a_phase_temperature_defaults_to_one_not_the_previous(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """docs/cli.md: a phase's temperature defaults to 1.0; it does not inherit the previous one."""
    # PROMISES.md Cl19
    plan = _plan(capsys, tmp_path, PLAN)
    initial, phase = plan["phases"]
    root = 3**0.5  # p ~ w ** (1 / temperature): temperature 2 flattens 3:1 to sqrt(3):1
    assert initial["shares"] == pytest.approx({"a": root / (root + 1), "b": 1 / (root + 1)})
    assert phase["shares"] == pytest.approx({"a": 0.75, "b": 0.25})  # temperature 1.0
    explicit = _plan(capsys, tmp_path, PLAN + "    temperature: 1.0\n")
    assert explicit["phases"][1]["shares"] == phase["shares"]


def test_plan_notes_an_epoch_that_does_not_fill_its_last_batch(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """docs/cli.md: a `note:` line says when an epoch does not fill its last batch."""
    # PROMISES.md Cl22
    config = tmp_path / "plan.yaml"
    base = "sources: {a: 30, b: 20}\nbatch_size: 4\nworld_size: 2\nmax_steps: 20\n"
    config.write_text(base + "samples_per_epoch: 44\n")  # 44 = 5 steps of 8 + 4
    assert lrd_main(["plan", str(config)]) == 0
    ragged = capsys.readouterr().out
    config.write_text(base + "samples_per_epoch: 48\n")  # 6 whole steps of 8
    assert lrd_main(["plan", str(config)]) == 0
    whole = capsys.readouterr().out
    assert [line for line in ragged.splitlines() if line.startswith("note:")]
    assert not [line for line in whole.splitlines() if line.startswith("note:")]


def test_lrd_traceback_shows_the_traceback_of_an_unexpected_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/cli.md: no traceback, unless `LRD_TRACEBACK=1` (for an unexpected error)."""
    # PROMISES.md Cl29
    import lightning_resumable_data.cli as cli

    def bug(*args: Any, **kwargs: Any) -> int:
        raise RuntimeError("a bug in lrd")

    monkeypatch.setattr(cli, "_run", bug)
    monkeypatch.delenv("LRD_TRACEBACK", raising=False)
    assert lrd_main(["plan", str(tmp_path / "x.yaml")]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "unexpected RuntimeError: a bug in lrd" in err
    monkeypatch.setenv("LRD_TRACEBACK", "1")
    assert lrd_main(["plan", str(tmp_path / "x.yaml")]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err
    assert "RuntimeError: a bug in lrd" in err
