"""Bad input to every public constructor and ``load_state_dict``: a clear error, no damage.

Each case calls something with a wrong type, an out-of-range or non-finite value, an empty
dataset or source, or loads a corrupted, truncated, foreign (other version or kind) or
mismatched (other seed, sizes, sources, schedule) state. It must raise ``TypeError`` or
``ValueError`` (``StateMismatchError`` is one) whose message names the offending value or
parameter and says what to do. A refused ``load_state_dict`` must leave the object as it was:
the same ``state_dict()``, and the same items from a fresh iterator as an untouched twin.

Known bugs of the package are kept as ``xfail(strict=True)`` cases, so that fixing one
fails its marker and gets it removed.
"""

from __future__ import annotations

import copy
import math
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from faults.summary import SUMMARY
from faults.targets import (
    N,
    Target,
    advance,
    distributed,
    loader_position,
    loader_skip,
    mixture_sampler,
    repeat,
    sequential,
    shard,
    sharded,
    shuffle,
    skip,
    take,
)
from lightning_resumable_data import (
    DatasetShardReader,
    DistributedSampler,
    DistributedShardedDataset,
    MixtureDataset,
    MixturePhase,
    MixtureSampler,
    RepeatSampler,
    ReproducibleShuffleBatchSampler,
    ReproducibleShuffleSampler,
    ResumableDataCallback,
    ResumableDataModule,
    ResumableSequentialSampler,
    ShardBatchSampler,
    ShardedDataLoader,
    ShardedSampler,
    ShardSampler,
    SkipSampler,
    StatefulDataLoader,
    StateMismatchError,
    TokenShardReader,
)

# A message explains the rule or the fix, not only what went wrong.
HINT = re.compile(
    r"must|should|expected|needs?|cannot|pass |use |give |add |restore|rebuild|"
    r"start a fresh|wrap|lower|raise |load (it|each)|sort|shuffle first|check that",
    re.IGNORECASE,
)


def assert_clear(error: BaseException, says: tuple[str, ...]) -> None:
    message = str(error)
    for text in says:
        assert text in message, f"the message does not name {text!r}: {message}"
    assert HINT.search(message), f"the message gives no rule or fix: {message}"


def wrong(value: object) -> Any:
    """A deliberately ill-typed argument (what a user without a type checker passes)."""
    return value


def count(passed: Callable[[], None]) -> None:
    SUMMARY.bad_inputs += 1
    passed()
    SUMMARY.bad_inputs_refused += 1


# -- constructors ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Bad:
    """A call that must raise ``error`` with a message containing every ``says`` string."""

    call: Callable[[], object]
    error: type[Exception]
    says: tuple[str, ...]


def shard_readers() -> list[DatasetShardReader[int]]:
    return [DatasetShardReader(list(range(4)), name="s0"), DatasetShardReader([4, 5], name="s1")]


def datamodule_loader(**kwargs: Any) -> Callable[[], object]:
    """Build the training loader of a data module, as ``Trainer.fit`` does."""
    train = kwargs.pop("train", {"a": range(8), "b": range(4)})
    return lambda: ResumableDataModule(train, **kwargs).train_dataloader()


def with_phases(*phases: MixturePhase) -> Callable[[], object]:
    def build() -> object:
        module = ResumableDataModule(wrong({"a": range(8), "b": range(4)}), batch_size=2)
        module.phases = phases
        return module.train_dataloader()

    return build


NAN, INF = math.nan, math.inf
D = range(N)
W2 = {"a": 1.0, "b": 1.0}


def mix2() -> MixtureDataset:
    return MixtureDataset({"a": range(6), "b": range(4)})


CONSTRUCTORS: dict[str, Any] = {
    # DistributedSampler
    "DS-unsized": Bad(lambda: DistributedSampler(wrong(iter(D))), TypeError, ("__len__",)),
    "DS-int-dataset": Bad(lambda: DistributedSampler(wrong(5)), TypeError, ("int",)),
    "DS-replicas-0": Bad(lambda: DistributedSampler(D, 0, 0), ValueError, ("num_replicas=0",)),
    "DS-replicas-str": Bad(
        lambda: DistributedSampler(D, wrong("2"), 0), TypeError, ("num_replicas='2'",)
    ),
    "DS-rank-out": Bad(lambda: DistributedSampler(D, 2, 2), ValueError, ("Invalid rank 2",)),
    "DS-rank-neg": Bad(lambda: DistributedSampler(D, 2, -1), ValueError, ("Invalid rank -1",)),
    "DS-rank-float": Bad(lambda: DistributedSampler(D, 2, wrong(1.0)), TypeError, ("rank=1.0",)),
    "DS-seed-neg": Bad(
        lambda: DistributedSampler(D, 1, 0, seed=-(2**63) - 1), ValueError, ("[-2**63, 2**64)",)
    ),
    "DS-seed-nan": Bad(
        lambda: DistributedSampler(D, 1, 0, seed=wrong(NAN)), TypeError, ("seed=nan",)
    ),
    "DS-seed-bool": Bad(lambda: DistributedSampler(D, 1, 0, seed=True), TypeError, ("seed=True",)),
    "DS-seed-huge": Bad(lambda: DistributedSampler(D, 1, 0, seed=2**64), ValueError, ("2**64",)),
    "DS-algorithm": Bad(
        lambda: DistributedSampler(D, 1, 0, algorithm=wrong("sorted")),
        ValueError,
        ("algorithm='sorted'", "randperm"),
    ),
    "DS-set_epoch-neg": Bad(lambda: distributed().set_epoch(-1), ValueError, ("epoch=-1",)),
    "DS-set_skip-str": Bad(lambda: distributed().set_skip(wrong("3")), TypeError, ("samples='3'",)),
    # MixtureDataset
    "MD-no-source": Bad(lambda: MixtureDataset({}), ValueError, ("source",)),
    "MD-str": Bad(lambda: MixtureDataset("ab"), TypeError, ("str",)),
    "MD-unsized": Bad(lambda: MixtureDataset(wrong({"a": iter(D)})), TypeError, ("'a'", "__len__")),
    "MD-name": Bad(lambda: MixtureDataset(wrong({1: D})), TypeError, ("1",)),
    # MixtureSampler
    "MS-not-mixture": Bad(lambda: MixtureSampler(wrong(D), W2, 1, 0), TypeError, ("range",)),
    "MS-all-empty": Bad(
        lambda: MixtureSampler(MixtureDataset({"a": []}), {"a": 1.0}, 1, 0),
        ValueError,
        ("empty",),
    ),
    "MS-empty-source": Bad(
        lambda: MixtureSampler(MixtureDataset({"a": D, "b": []}), W2, 1, 0),
        ValueError,
        ("['b']", "empty"),
    ),
    "MS-weight-nan": Bad(
        lambda: MixtureSampler(mix2(), {"a": NAN, "b": 1.0}, 1, 0), ValueError, ("nan",)
    ),
    "MS-weight-inf": Bad(
        lambda: MixtureSampler(mix2(), {"a": INF, "b": 1.0}, 1, 0), ValueError, ("inf",)
    ),
    "MS-weight-neg": Bad(
        lambda: MixtureSampler(mix2(), {"a": -1.0, "b": 1.0}, 1, 0), ValueError, ("-1.0",)
    ),
    "MS-weights-zero": Bad(
        lambda: MixtureSampler(mix2(), {"a": 0.0, "b": 0.0}, 1, 0), ValueError, ("all zero",)
    ),
    "MS-weights-missing": Bad(
        lambda: MixtureSampler(mix2(), {"a": 1.0}, 1, 0), ValueError, ("missing: ['b']",)
    ),
    "MS-weights-unknown": Bad(
        lambda: MixtureSampler(mix2(), {"a": 1.0, "b": 1.0, "z": 1.0}, 1, 0),
        ValueError,
        ("unknown: ['z']",),
    ),
    "MS-weights-length": Bad(
        lambda: MixtureSampler(mix2(), [1.0], 1, 0), ValueError, ("1 weights",)
    ),
    "MS-weight-str": Bad(
        lambda: MixtureSampler(mix2(), wrong({"a": "x", "b": 1.0}), 1, 0),
        TypeError,
        ("weight of source 'a' is 'x'", "give a number"),
    ),
    "MS-weights-none": Bad(
        lambda: MixtureSampler(mix2(), wrong(None), 1, 0), TypeError, ("weights",)
    ),
    "MS-temperature-0": Bad(
        lambda: MixtureSampler(mix2(), W2, 1, 0, temperature=0), ValueError, ("temperature=0",)
    ),
    "MS-temperature-nan": Bad(
        lambda: MixtureSampler(mix2(), W2, 1, 0, temperature=NAN), ValueError, ("temperature=nan",)
    ),
    "MS-temperature-inf": Bad(
        lambda: MixtureSampler(mix2(), W2, 1, 0, temperature=INF), ValueError, ("temperature=inf",)
    ),
    "MS-samples-per-epoch-neg": Bad(
        lambda: MixtureSampler(mix2(), W2, 1, 0, samples_per_epoch=-5),
        ValueError,
        ("samples_per_epoch=-5",),
    ),
    "MS-samples-per-epoch-float": Bad(
        lambda: MixtureSampler(mix2(), W2, 1, 0, samples_per_epoch=wrong(1.5)),
        TypeError,
        ("samples_per_epoch=1.5",),
    ),
    "MS-update-weights-nan": Bad(
        lambda: mixture_sampler().update_weights({"a": NAN, "b": 1.0, "c": 1.0}, epoch=2),
        ValueError,
        ("nan",),
    ),
    "MS-update-weights-past": Bad(
        lambda: mixture_sampler().update_weights({"a": 1.0, "b": 1.0, "c": 1.0}, epoch=0),
        ValueError,
        ("update_weights(epoch=0",),
    ),
    # MixturePhase
    "MP-no-start": Bad(lambda: MixturePhase(weights={"a": 1.0}), ValueError, ("start_step=None",)),
    "MP-two-starts": Bad(
        lambda: MixturePhase(start_step=1, start_epoch=1, weights={"a": 1.0}),
        ValueError,
        ("start_epoch=1",),
    ),
    "MP-start-neg": Bad(
        lambda: MixturePhase(start_step=-1, weights={"a": 1.0}), ValueError, ("start_step=-1",)
    ),
    "MP-start-float": Bad(
        lambda: MixturePhase(start_step=wrong(1.5), weights={"a": 1.0}),
        TypeError,
        ("start_step=1.5",),
    ),
    "MP-weights-empty": Bad(
        lambda: MixturePhase(start_step=1, weights={}), ValueError, ("weights={}",)
    ),
    "MP-weight-nan": Bad(
        lambda: MixturePhase(start_step=1, weights={"a": NAN}), ValueError, ("nan",)
    ),
    "MP-weight-inf": Bad(
        lambda: MixturePhase(start_step=1, weights={"a": INF}), ValueError, ("inf",)
    ),
    "MP-temperature-nan": Bad(
        lambda: MixturePhase(start_step=1, weights={"a": 1.0}, temperature=NAN),
        ValueError,
        ("temperature=nan",),
    ),
    "MP-weight-str": Bad(
        lambda: MixturePhase(start_step=1, weights=wrong({"a": "x"})),
        TypeError,
        ("weight of source 'a' is 'x'",),
    ),
    # ResumableSequentialSampler
    "RSS-unsized": Bad(lambda: ResumableSequentialSampler(wrong(iter(D))), TypeError, ("__len__",)),
    "RSS-empty": Bad(lambda: ResumableSequentialSampler([]), ValueError, ("empty",)),
    "RSS-start-neg": Bad(
        lambda: ResumableSequentialSampler(D, -1), ValueError, ("start_index=-1",)
    ),
    "RSS-start-past": Bad(
        lambda: ResumableSequentialSampler(D, N + 1), ValueError, (f"start_index={N + 1}",)
    ),
    "RSS-start-none": Bad(
        lambda: ResumableSequentialSampler(D, wrong(None)),
        TypeError,
        ("start_index=None",),
    ),
    # composable samplers
    "Shuffle-seed-neg": Bad(
        lambda: ReproducibleShuffleSampler(sequential(), -1), ValueError, ("seed=-1",)
    ),
    "Shuffle-seed-float": Bad(
        lambda: ReproducibleShuffleSampler(sequential(), wrong(0.5)),
        TypeError,
        ("seed=0.5",),
    ),
    "Shuffle-dataset": Bad(
        lambda: ReproducibleShuffleSampler(wrong("abc"), 0), TypeError, ("str",)
    ),
    "Shuffle-of-repeat": Bad(
        lambda: ReproducibleShuffleSampler(repeat(), 0), ValueError, ("RepeatSampler",)
    ),
    "ShuffleBatch-of-int": Bad(
        lambda: ReproducibleShuffleBatchSampler(wrong(3), 0), TypeError, ("int",)
    ),
    "Repeat-of-int": Bad(lambda: RepeatSampler(wrong(3)), TypeError, ("int",)),
    "Repeat-of-empty": Bad(lambda: next(iter(RepeatSampler([]))), ValueError, ("empty",)),
    "Shard-replicas-0": Bad(
        lambda: ShardSampler(sequential(), 0, 0), ValueError, ("num_replicas=0",)
    ),
    "Shard-rank-out": Bad(lambda: ShardSampler(sequential(), 2, 3), ValueError, ("rank=3",)),
    "ShardBatch-rank-str": Bad(
        lambda: ShardBatchSampler([[0]], 2, wrong("1")), TypeError, ("rank='1'",)
    ),
    "Skip-neg": Bad(lambda: SkipSampler(sequential(), -1), ValueError, ("skip=-1",)),
    "Skip-none": Bad(lambda: SkipSampler(sequential(), wrong(None)), TypeError, ("skip=None",)),
    "Skip-of-none": Bad(lambda: SkipSampler(wrong(None), 0), TypeError, ("NoneType",)),
    # StatefulDataLoader
    "SDL-batch-0": Bad(
        lambda: StatefulDataLoader(D, batch_size=0, sampler=distributed()),
        ValueError,
        ("batch_size=0",),
    ),
    "SDL-seed-neg": Bad(
        lambda: StatefulDataLoader(D, batch_size=2, sampler=distributed(), seed=-1),
        ValueError,
        ("seed=-1",),
    ),
    "SDL-max-epochs-neg": Bad(
        lambda: StatefulDataLoader(D, batch_size=2, sampler=distributed(), max_epochs=-1),
        ValueError,
        ("max_epochs=-1",),
    ),
    "SDL-batch-larger-than-share": Bad(
        lambda: StatefulDataLoader(D, batch_size=20, sampler=distributed(), drop_last=True),
        ValueError,
        ("batch_size=20",),
    ),
    "SDL-prefetch-factor-0": Bad(
        lambda: StatefulDataLoader(
            D, batch_size=2, sampler=distributed(), num_workers=1, prefetch_factor=0
        ),
        ValueError,
        ("prefetch_factor=0",),
    ),
    # ResumableDataModule (the mixture options are checked when the loader is built)
    "DM-batch-0": Bad(lambda: ResumableDataModule(D, batch_size=0), ValueError, ("batch_size=0",)),
    "DM-batch-float": Bad(
        lambda: ResumableDataModule(D, batch_size=wrong(2.0)),
        TypeError,
        ("batch_size=2.0",),
    ),
    "DM-workers-neg": Bad(
        lambda: ResumableDataModule(D, num_workers=-1), ValueError, ("num_workers=-1",)
    ),
    "DM-seed-neg": Bad(lambda: ResumableDataModule(D, seed=-1), ValueError, ("seed=-1",)),
    "DM-algorithm": Bad(
        lambda: ResumableDataModule(D, algorithm=wrong("x")),
        ValueError,
        ("algorithm='x'",),
    ),
    "DM-eval-batch-0": Bad(
        lambda: ResumableDataModule(D, eval_batch_size=0), ValueError, ("eval_batch_size=0",)
    ),
    "DM-no-train": Bad(
        lambda: ResumableDataModule().train_dataloader(), ValueError, ("train_dataset",)
    ),
    "DM-empty-train": Bad(datamodule_loader(train=[]), ValueError, ("empty",)),
    "DM-empty-sources": Bad(datamodule_loader(train={}), ValueError, ("source",)),
    "DM-empty-val": Bad(
        lambda: ResumableDataModule(D, val_dataset=[]).val_dataloader(), ValueError, ("empty",)
    ),
    "DM-weight-nan": Bad(datamodule_loader(weights={"a": NAN, "b": 1.0}), ValueError, ("nan",)),
    "DM-weight-inf": Bad(datamodule_loader(weights={"a": INF, "b": 1.0}), ValueError, ("inf",)),
    "DM-weights-unknown": Bad(
        datamodule_loader(weights={"a": 1.0, "z": 1.0}), ValueError, ("unknown: ['z']",)
    ),
    "DM-temperature-nan": Bad(datamodule_loader(temperature=NAN), ValueError, ("temperature=nan",)),
    "DM-samples-per-epoch-neg": Bad(
        datamodule_loader(samples_per_epoch=-1), ValueError, ("samples_per_epoch=-1",)
    ),
    "DM-batch-larger-than-mixture": Bad(
        datamodule_loader(batch_size=64, drop_last=True), ValueError, ("batch_size=64",)
    ),
    "DM-phase-unknown-source": Bad(
        with_phases(MixturePhase(start_step=1, weights={"z": 1.0})), ValueError, ("unknown: ['z']",)
    ),
    "DM-phases-without-mixture": Bad(
        lambda: _plain_module_with_phase().train_dataloader(), ValueError, ("mapping",)
    ),
    # ResumableDataCallback
    "CB-phases-unsorted": Bad(
        lambda: ResumableDataCallback(
            phases=[
                MixturePhase(start_step=5, weights={"a": 1.0}),
                MixturePhase(start_step=2, weights={"a": 1.0}),
            ]
        ),
        ValueError,
        ("[5, 2]",),
    ),
    "CB-phases-mixed": Bad(
        lambda: ResumableDataCallback(
            phases=[
                MixturePhase(start_step=5, weights={"a": 1.0}),
                MixturePhase(start_epoch=7, weights={"a": 1.0}),
            ]
        ),
        ValueError,
        ("start_step and start_epoch",),
    ),
    "CB-phases-dicts": Bad(
        lambda: ResumableDataCallback(phases=wrong([{"start_step": 1}])), TypeError, ("phases",)
    ),
    # sharded data
    "Sharded-no-shards": Bad(
        lambda: DistributedShardedDataset([]), ValueError, ("empty shard list",)
    ),
    "Sharded-not-reader": Bad(
        lambda: DistributedShardedDataset(wrong([list(D)])),
        TypeError,
        ("readers[0]", "DatasetShardReader"),
    ),
    "Sharded-resident": Bad(
        lambda: DistributedShardedDataset(shard_readers(), max_resident=1, prefetch=1),
        ValueError,
        ("max_resident=1",),
    ),
    "ShardedSampler-sizes": Bad(lambda: ShardedSampler([3, -1], 1, 0), ValueError, ("-1",)),
    "ShardedLoader-batch-0": Bad(
        lambda: ShardedDataLoader(shard_readers(), 0, dp_rank=0, num_replicas=1),
        ValueError,
        ("batch_size=0",),
    ),
    "ShardedLoader-seed-disagrees": Bad(
        lambda: ShardedDataLoader(
            DistributedShardedDataset(shard_readers(), seed=1), 2, seed=2, dp_rank=0, num_replicas=1
        ),
        ValueError,
        ("seed=2",),
    ),
    "TokenReader-seq-len": Bad(
        lambda: TokenShardReader(tempfile.gettempdir() + "/missing.npy", seq_len=0),
        ValueError,
        ("seq_len=0",),
    ),
}


def _plain_module_with_phase() -> ResumableDataModule:
    module = ResumableDataModule(D, batch_size=2)
    module.phases = (MixturePhase(start_step=1, weights={"a": 1.0}),)
    return module


@pytest.mark.parametrize("case", list(CONSTRUCTORS.values()), ids=list(CONSTRUCTORS))
def test_constructor_refuses_bad_input(case: Bad) -> None:
    def check() -> None:
        with pytest.raises(case.error) as info:
            case.call()
        assert_clear(info.value, case.says)

    count(check)


# -- load_state_dict ------------------------------------------------------------------------


@dataclass(frozen=True)
class BadState:
    """Load ``corrupt(state of source())`` into ``target()``: must raise, change nothing."""

    target: Callable[[], Target]
    corrupt: Callable[[dict[str, Any]], Any]
    error: type[Exception]
    says: tuple[str, ...]
    source: Callable[[], Target] | None = None


def drop(key: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def corrupt(state: dict[str, Any]) -> dict[str, Any]:
        del state[key]
        return state

    return corrupt


def put(path: str, value: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """Set ``state[a][b]...`` for ``path="a.b"`` (list indices as numbers)."""

    def corrupt(state: dict[str, Any]) -> dict[str, Any]:
        node: Any = state
        *parents, last = path.split(".")
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[int(last) if isinstance(node, list) else last] = value
        return state

    return corrupt


def drop_entry_key(entry: int, key: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def corrupt(state: dict[str, Any]) -> dict[str, Any]:
        del state["schedule"][entry][key]
        return state

    return corrupt


def same(state: dict[str, Any]) -> dict[str, Any]:
    return state


def whole(value: Any) -> Callable[[dict[str, Any]], Any]:
    return lambda _: value


def truncated(state: dict[str, Any]) -> dict[str, Any]:
    """The first half of the keys, as a torn write would leave them."""
    return dict(list(state.items())[: len(state) // 2])


def mixture_ds(**kwargs: Any) -> Callable[[], Target]:
    return lambda: MixtureSampler(
        MixtureDataset({"a": range(kwargs.pop("a", 6)), "b": range(4), "c": range(3)}),
        {"a": 1.0, "b": 1.0, "c": 0.5},
        2,
        0,
        samples_per_epoch=12,
        **kwargs,
    )


def renamed_mixture() -> Target:
    return MixtureSampler(
        MixtureDataset({"a": range(6), "b": range(4), "z": range(3)}),
        {"a": 1.0, "b": 1.0, "z": 0.5},
        2,
        0,
        seed=1,
        samples_per_epoch=12,
    )


STATES: dict[str, Any] = {
    # DistributedSampler: types, ranges, truncation, versions, kinds, fingerprints
    "DS-none": BadState(distributed, whole(None), TypeError, ("NoneType",)),
    "DS-list": BadState(distributed, whole([1, 2]), TypeError, ("list",)),
    "DS-empty": BadState(distributed, whole({}), StateMismatchError, ("version=None",)),
    "DS-truncated": BadState(distributed, truncated, StateMismatchError, ("'epoch' is missing",)),
    "DS-version-0": BadState(distributed, put("version", 0), StateMismatchError, ("version=0",)),
    "DS-version-1": BadState(
        distributed,
        put("version", 1),
        StateMismatchError,
        ("version=1", "version 0.1, which wrote it"),
    ),
    "DS-version-3": BadState(distributed, put("version", 3), StateMismatchError, ("version=3",)),
    "DS-version-str": BadState(
        distributed, put("version", "1"), StateMismatchError, ("version='1'",)
    ),
    "DS-kind-mixture": BadState(
        distributed, same, StateMismatchError, ("kind='MixtureSampler'",), source=mixture_sampler
    ),
    "DS-kind-loader": BadState(
        distributed,
        same,
        StateMismatchError,
        ("kind='StatefulDataLoader'",),
        source=loader_position,
    ),
    "DS-no-epoch": BadState(
        distributed, drop("epoch"), StateMismatchError, ("'epoch' is missing",)
    ),
    "DS-consumed-neg": BadState(distributed, put("consumed", -4), StateMismatchError, ("-4",)),
    "DS-consumed-str": BadState(distributed, put("consumed", "4"), StateMismatchError, ("'4'",)),
    "DS-consumed-float": BadState(distributed, put("consumed", 4.0), StateMismatchError, ("4.0",)),
    "DS-consumed-bool": BadState(distributed, put("consumed", True), StateMismatchError, ("True",)),
    "DS-consumed-nan": BadState(
        distributed, put("consumed", math.nan), StateMismatchError, ("nan",)
    ),
    "DS-consumed-past-end": BadState(
        distributed, put("consumed", 10**6), StateMismatchError, ("consumed=1000000",)
    ),
    "DS-no-fingerprint": BadState(
        distributed, drop("fingerprint"), StateMismatchError, ("fingerprint",)
    ),
    "DS-other-seed": BadState(
        distributed,
        same,
        StateMismatchError,
        ("seed: saved 4, now 3",),
        source=lambda: distributed(4),
    ),
    "DS-other-size": BadState(
        distributed,
        same,
        StateMismatchError,
        ("dataset_length: saved 12, now 10",),
        source=lambda: distributed(n=12),
    ),
    "DS-other-shuffle": BadState(
        distributed,
        same,
        StateMismatchError,
        ("shuffle",),
        source=lambda: distributed(shuffle=False),
    ),
    "DS-other-algorithm": BadState(
        distributed,
        same,
        StateMismatchError,
        ("algorithm: saved 'feistel'",),
        source=lambda: distributed(algorithm="feistel"),
    ),
    "DS-epoch-overflow": BadState(distributed, put("epoch", 2**64), StateMismatchError, ("epoch",)),
    # MixtureSampler
    "MS-kind-distributed": BadState(
        mixture_sampler,
        same,
        StateMismatchError,
        ("kind='DistributedSampler'",),
        source=distributed,
    ),
    "MS-other-sizes": BadState(
        mixture_ds(seed=1),
        same,
        StateMismatchError,
        ("sizes: saved [7, 4, 3]",),
        source=mixture_ds(seed=1, a=7),
    ),
    "MS-other-sources": BadState(
        mixture_ds(seed=1),
        same,
        StateMismatchError,
        ("sources: saved ['a', 'b', 'z']",),
        source=renamed_mixture,
    ),
    "MS-other-seed": BadState(
        mixture_sampler,
        same,
        StateMismatchError,
        ("seed: saved 9, now 1",),
        source=lambda: mixture_sampler(9),
    ),
    "MS-no-schedule": BadState(
        mixture_sampler, drop("schedule"), StateMismatchError, ("'schedule'",)
    ),
    "MS-empty-schedule": BadState(
        mixture_sampler, put("schedule", []), StateMismatchError, ("'schedule'",)
    ),
    "MS-schedule-weight-nan": BadState(
        mixture_sampler,
        put("schedule.1.weights", [math.nan, 1.0, 1.0]),
        StateMismatchError,
        ("nan",),
    ),
    "MS-schedule-weight-inf": BadState(
        mixture_sampler,
        put("schedule.1.weights", [math.inf, 1.0, 1.0]),
        StateMismatchError,
        ("inf",),
    ),
    "MS-schedule-weights-short": BadState(
        mixture_sampler, put("schedule.1.weights", [1.0]), StateMismatchError, ("1 weights",)
    ),
    "MS-schedule-temperature-0": BadState(
        mixture_sampler,
        put("schedule.2.temperature", 0.0),
        StateMismatchError,
        ("temperature=0.0",),
    ),
    "MS-schedule-no-position": BadState(
        mixture_sampler, drop_entry_key(1, "position"), StateMismatchError, ("position",)
    ),
    "MS-schedule-changed": BadState(
        mixture_sampler,
        same,
        StateMismatchError,
        ("schedule differs",),
        source=mixture_ds(seed=1),
    ),
    "MS-schedule-plan-end-negative": BadState(
        mixture_sampler, put("schedule.0.plan_end", -1), StateMismatchError, ("plan_end",)
    ),
    "MS-schedule-plan-end-huge": BadState(
        mixture_sampler, put("schedule.0.plan_end", 10**12), StateMismatchError, ("plan_end",)
    ),
    # ResumableSequentialSampler
    "RSS-index-past-end": BadState(
        sequential, put("index", N + 1), StateMismatchError, (f"index={N + 1}",)
    ),
    "RSS-index-neg": BadState(sequential, put("index", -1), StateMismatchError, ("-1",)),
    "RSS-other-size": BadState(
        sequential,
        same,
        StateMismatchError,
        ("dataset_length: saved 12",),
        source=lambda: sequential(12),
    ),
    "RSS-kind-distributed": BadState(
        sequential, same, StateMismatchError, ("kind='DistributedSampler'",), source=distributed
    ),
    # composable samplers
    "Shuffle-other-seed": BadState(
        shuffle, same, StateMismatchError, ("seed: saved 7, now 1",), source=lambda: shuffle(7)
    ),
    "Shuffle-no-inner": BadState(shuffle, drop("inner"), StateMismatchError, ("'inner'",)),
    "Shuffle-position-str": BadState(shuffle, put("position", "3"), StateMismatchError, ("'3'",)),
    "Shuffle-inner-kind": BadState(
        shuffle,
        put("inner.kind", "DistributedSampler"),
        StateMismatchError,
        ("kind='DistributedSampler'",),
    ),
    "Repeat-pass-neg": BadState(repeat, put("pass", -1), StateMismatchError, ("'pass'",)),
    "Repeat-no-offset": BadState(
        repeat, drop("offset"), StateMismatchError, ("'offset' is missing",)
    ),
    "Shard-other-replicas": BadState(
        shard, same, StateMismatchError, ("num_replicas: saved 3, now 2",), source=lambda: shard(3)
    ),
    "Skip-deep-inner-seed": BadState(
        skip, put("inner.inner.inner.fingerprint.seed", 99), StateMismatchError, ("seed: saved 99",)
    ),
    "Skip-inner-into-plain": BadState(
        lambda: SkipSampler(range(N), 2), same, StateMismatchError, ("'inner'",), source=skip
    ),
    "Skip-kind-shard": BadState(
        skip, same, StateMismatchError, ("kind='ShardSampler'",), source=shard
    ),
    # ShardedSampler
    "Sharded-other-shards": BadState(
        sharded,
        same,
        StateMismatchError,
        ("shards changed",),
        source=lambda: ShardedSampler([4, 3, 3], 2, 0, seed=2),
    ),
    "Sharded-other-seed": BadState(
        sharded, same, StateMismatchError, ("seed: saved 5, now 2",), source=lambda: sharded(5)
    ),
    # StatefulDataLoader
    "SDL-none": BadState(loader_position, whole(None), TypeError, ("NoneType",)),
    "SDL-truncated": BadState(loader_position, truncated, StateMismatchError, ("missing",)),
    "SDL-version-3": BadState(
        loader_position, put("version", 3), StateMismatchError, ("version=3",)
    ),
    "SDL-kind-sampler": BadState(
        loader_position,
        same,
        StateMismatchError,
        ("kind='DistributedSampler'",),
        source=distributed,
    ),
    "SDL-mode": BadState(
        loader_position,
        same,
        StateMismatchError,
        ("mode: saved 'skip', now 'position'",),
        source=loader_skip,
    ),
    "SDL-no-sampler": BadState(
        loader_position, drop("sampler"), StateMismatchError, ("'sampler'",)
    ),
    "SDL-batches-neg": BadState(
        loader_position, put("batches_yielded", -1), StateMismatchError, ("-1",)
    ),
    "SDL-sampler-seed": BadState(
        loader_position, put("sampler.fingerprint.seed", 8), StateMismatchError, ("seed: saved 8",)
    ),
    "SDL-max-epochs": BadState(
        lambda: StatefulDataLoader(D, batch_size=2, sampler=distributed(), max_epochs=1),
        put("epoch", 5),
        StateMismatchError,
        ("epoch=5", "max_epochs=1"),
    ),
    "SDL-consumed-past-end": BadState(
        loader_position, put("consumed", 10**6), StateMismatchError, ("consumed",)
    ),
    "SDL-skip-mode-replicas": BadState(
        loader_skip,
        put("num_replicas", 2),
        StateMismatchError,
        ("num_replicas=2",),
        source=lambda: _epoch_three_skip_loader(),
    ),
    "SDL-skip-mode-no-sampler": BadState(
        loader_skip, drop("sampler"), StateMismatchError, ("'sampler'",)
    ),
    # ShardedDataLoader
    "ShardedLoader-other-shards": BadState(
        lambda: _sharded_loader([4, 2]),
        same,
        StateMismatchError,
        ("shards changed",),
        source=lambda: _sharded_loader([4, 3]),
    ),
    "ShardedLoader-consumed-str": BadState(
        lambda: _sharded_loader([4, 2]), put("consumed", "2"), StateMismatchError, ("'2'",)
    ),
    # ResumableDataModule: a checkpoint without data state, or a changed configuration
    "DM-no-data-state": BadState(
        lambda: _module(), whole({}), StateMismatchError, ("no data configuration",)
    ),
    "DM-none": BadState(
        lambda: _module(), whole(None), StateMismatchError, ("no data configuration",)
    ),
    "DM-other-seed": BadState(
        lambda: _module(),
        same,
        StateMismatchError,
        ("seed: saved 9, now 1",),
        source=lambda: _module(seed=9),
    ),
    "DM-other-sizes": BadState(
        lambda: _module(),
        same,
        StateMismatchError,
        ("sources: saved {'a': 9",),
        source=lambda: _module(a=9),
    ),
    "DM-other-sources": BadState(
        lambda: _module(), same, StateMismatchError, ("'z'",), source=lambda: _module(name="z")
    ),
    "DM-other-phases": BadState(
        lambda: _module(), same, StateMismatchError, ("phases",), source=lambda: _module(phase=3)
    ),
    # ResumableDataCallback
    "CB-other-phases": BadState(
        lambda: _callback(),
        same,
        StateMismatchError,
        ("phases changed",),
        source=lambda: _callback(4),
    ),
    "CB-none": BadState(lambda: _callback(), whole(None), TypeError, ("NoneType",)),
}


def _epoch_three_skip_loader() -> Target:
    loader = loader_skip()
    loader.set_epoch(3)
    return loader


def _sharded_loader(sizes: list[int]) -> Target:
    readers = [DatasetShardReader(list(range(n)), name=f"s{i}") for i, n in enumerate(sizes)]
    return ShardedDataLoader(
        readers, 2, dp_rank=0, num_replicas=1, multiprocessing=False, num_microbatch_prefetches=0
    )


class _Module:
    """A ``ResumableDataModule`` that iterates its own training loader (for the twin check)."""

    def __init__(self, **config: Any) -> None:
        sources = {config.get("name", "a"): range(config.get("a", 8)), "b": range(4)}
        self.module = ResumableDataModule(wrong(sources), batch_size=2, seed=config.get("seed", 1))
        if "phase" in config:
            self.module.phases = (
                MixturePhase(start_step=config["phase"], weights={"a": 1.0, "b": 1.0}),
            )

    def __iter__(self) -> Any:
        return iter(self.module.train_dataloader())

    def state_dict(self) -> dict[str, Any]:
        return self.module.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.module.load_state_dict(state_dict)


def _module(**config: Any) -> Target:
    return _Module(**config)


class _Callback:
    def __init__(self, start: int = 2) -> None:
        phase = MixturePhase(start_step=start, weights={"a": 1.0})
        self.callback = ResumableDataCallback(phases=[phase])

    def __iter__(self) -> Any:
        return iter(())

    def state_dict(self) -> dict[str, Any]:
        return self.callback.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.callback.load_state_dict(state_dict)


def _callback(start: int = 2) -> Target:
    return _Callback(start)


@pytest.mark.parametrize("case", list(STATES.values()), ids=list(STATES))
def test_load_state_dict_refuses_and_changes_nothing(case: BadState) -> None:
    def check() -> None:
        source = (case.source or case.target)()
        advance(source, 5, epoch=1)
        bad = case.corrupt(copy.deepcopy(source.state_dict()))
        target, twin = case.target(), case.target()
        advance(target, 3)
        advance(twin, 3)
        before = copy.deepcopy(target.state_dict())
        with pytest.raises(case.error) as info:
            target.load_state_dict(bad)
        assert_clear(info.value, case.says)
        assert target.state_dict() == before, "the refused load changed the state"
        assert take(target) == take(twin), "the refused load changed what it yields"

    count(check)


def test_numpy_values_are_accepted_where_ints_and_floats_are() -> None:
    # Not bad input: NumPy scalars, as read from a config or computed, must work.
    sampler = DistributedSampler(D, np.int64(2), np.int64(0), seed=np.int64(3))
    assert len(list(sampler)) == 5
    MixtureSampler(mix2(), {"a": np.float64(1.0), "b": np.float32(2.0)}, 1, 0, temperature=2.0)


def test_numpy_float32_temperature_is_accepted() -> None:
    MixtureSampler(mix2(), W2, 1, 0, temperature=np.float32(2.0))
