"""Benchmark ``StatefulDataLoader`` against torch's ``DataLoader`` and torchdata's.

Run from the repository root::

    .venv/bin/python benchmarks/bench_loader.py              # full run (about 4 minutes)
    .venv/bin/python benchmarks/bench_loader.py --quick      # CI smoke (under 30 s)
    .venv/bin/python benchmarks/bench_loader.py --parts throughput --repeats 9

It measures two things, in one run:

(a) Throughput (``--parts throughput``). A cheap map-style dataset of ``--n`` (default
    200,000) samples, each a precomputed row of 8 int64 (``__getitem__`` returns a view
    ``rows[index]``; the default collate stacks them), ``batch_size=64``, one world of
    one rank, ``shuffle=True``, ``seed=0``, ``num_workers`` 0 and 2
    (``persistent_workers=False``), for three loaders:

    * ``torch``: ``torch.utils.data.DataLoader`` with ``torch.utils.data.DistributedSampler``;
    * ``torchdata``: ``torchdata.stateful_dataloader.StatefulDataLoader`` (defaults, so
      with workers it snapshots its state every step) with the same torch sampler;
    * ``ours``: ``lightning_resumable_data.StatefulDataLoader`` with
      ``lightning_resumable_data.DistributedSampler``.

    Measured on a small shared machine, a loader's speed drifts by tens of percent within
    a second, so the three loaders are measured side by side: a round (a fresh subprocess)
    builds the three, each over its own copy of the dataset (with one shared copy, the
    loader that reads a sample first warms the CPU caches for the others: about 9%
    between three identical torch loaders), warms them up (the full epoch 0 without
    workers, its first 200 batches with workers), then reads epoch 1 of all three in
    turns: one batch each in turn without workers (one CPU, one torch thread), 100 with
    workers (unpinned). Two clocks:

    * wall-clock: a loader's rate is its batches after the first divided by the time
      spent inside its turns (steady state; the first batch, i.e. ``iter``, worker
      start-up and the sampler's per-epoch set-up, is shown apart);
    * CPU time: this thread's CPU time inside the loader's turns plus the CPU time of
      its workers over the epoch (``RUSAGE_CHILDREN`` when they are reaped, at the end of
      its epoch), per batch. Unlike wall-clock time it does not count the time this
      process waits while other processes on the machine run.

    The overhead of a loader in a round is its time over torch's for the same batches,
    minus 1, on either clock. With ``--repeats k`` (default 5) there are k rounds per
    ``num_workers``, interleaved, and the order of the loaders rotates and alternates
    between rounds; the table shows the medians over the rounds and the range of the
    overhead. The first round also checks, on a small dataset, that the three loaders
    yield identical batches in epochs 0 and 1 (``DistributedSampler`` yields torch's
    order).

(b) Resume latency (``--parts resume``). An index-only dataset of ``--resume-n`` (default
    2 * 10**7) samples (``__getitem__`` returns the index), ``batch_size=1``,
    ``num_workers=0``, positions ``--positions`` (default 1e3, 1e5, 1e7 samples into epoch
    0). For each position and loader, a fresh subprocess builds the state at that
    position, then ``--resume-repeats`` times (default 3) constructs a fresh loader and
    sampler and times ``load_state_dict(state)`` plus ``next(iter(loader))``: the median wall
    time is reported, with the median CPU time of this (single-threaded) process in
    parentheses. Loaders:

    * ``ours (randperm)``: the default ``DistributedSampler``. The resume skips in O(1), but
      the first batch computes the epoch's permutation (O(N), the same at every position);
    * ``ours (feistel)``: ``DistributedSampler(algorithm="feistel")``, O(1) throughout;
    * ``torchdata``: torchdata's loader with torch's ``DistributedSampler``, which resumes by
      replaying the sampler up to the position (O(position)), after building torch's
      index list of the epoch (O(N), three times: torch's ``DistributedSampler.__iter__``
      builds the whole list, and torchdata calls it in its iterator's constructor, in its
      batch sampler iterator's constructor and in that one's ``load_state_dict``).

    How the state at position p is built: iterating 10**7 batches one sample at a time
    takes minutes (about 20 us a batch for either loader), so both states are written
    through the loaders' own APIs. A fresh loader's ``state_dict()`` is what a loader at
    position 0 writes; the position counters in it are set to p: for ours ``consumed``,
    ``batches_yielded`` and ``sampler["consumed"]``; for torchdata ``_num_yielded``,
    ``_sampler_iter_yielded`` and ``_sampler_iter_state["samples_yielded"]``. That is what a
    loader writes after p batches: at every position up to ``--verify-max`` (default 1e5)
    the built state is checked to be equal to the state of a loader that really iterated
    p batches, and the resumed first batch to be that loader's next batch. At every
    position the resumed first batch is also checked against the order itself
    (``torch.randperm(N)[p]`` for randperm and torchdata, ``feistel_slice`` for feistel).

The output ends with verdict lines for the acceptance targets, on both clocks: throughput
overhead of ours at most 3% against torch's ``DataLoader`` per ``num_workers``; resume
latency flat in position (here: at the largest position at most 1.5x the smallest plus
2 ms); and the ratio of torchdata's resume latency to ours at the largest position. The
load average at the start and at the end is printed: when it is well above the number of
CPUs, trust the CPU-time figures over the wall-clock ones. Missed performance
targets are reported, not fatal: the exit status is 0 unless a case crashed or a
correctness check failed. Results go to ``--json`` (default
``benchmarks/results/loader.json``; not written with ``--quick``). The peers benchmark
(``bench_peers.py``) is the one whose table the docs show.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

from _harness import (
    CHILD_TIMEOUT_S,
    REPO_ROOT,
    Json,
    argument_parser,
    fmt_n,
    load_average,
    mark,
    package_version,
    parse_count,
    parse_counts,
    pin_to_one_cpu,
    print_block,
    progress,
    python_version,
    spawn_json,
    table_header,
    table_row,
)

if TYPE_CHECKING:
    import torch
    import torch.utils.data

RESULTS = "benchmarks/results/loader.json"
BATCH_SIZE = 64
ROW_WIDTH = 8
SEED = 0
OVERHEAD_TARGET_PCT = 3.0  # ours vs torch's DataLoader, steady-state throughput
TURN_WORKERS = 100  # batches per turn with workers (one at a time without)
WARMUP_WORKERS = 200  # warm-up batches with workers (the full epoch 0 without)
FLAT_RATIO = 1.5  # resume latency at the largest position vs the smallest ...
FLAT_SLACK_MS = 2.0  # ... plus this much, for timings of a few ms

Loader = Literal["torch", "torchdata", "ours"]
LOADERS: tuple[Loader, ...] = ("torch", "torchdata", "ours")
Clock = Literal["seconds", "cpu_s"]  # wall time in the turns, CPU time of the loader
Resumer = Literal["randperm", "feistel", "torchdata"]
RESUMERS: tuple[Resumer, ...] = ("randperm", "feistel", "torchdata")
RESUMER_NAMES: dict[Resumer, str] = {
    "randperm": "ours (randperm)",
    "feistel": "ours (feistel)",
    "torchdata": "torchdata",
}


@dataclass(frozen=True)
class ThroughputCase:
    """One round of part (a): the three loaders, back to back, at one ``num_workers``."""

    n: int
    num_workers: int
    order: tuple[Loader, ...]
    turn: int  # batches a loader reads before the next loader's turn
    warmup_batches: int  # of epoch 0; 0: the full epoch
    check_n: int = 0  # > 0: also check that the loaders agree on a dataset of this size


@dataclass(frozen=True)
class ResumeCase:
    """One cell of part (b): one loader resumed at one position."""

    impl: Resumer
    n: int
    position: int
    repeats: int
    verify: bool  # also build the state by really iterating `position` batches


# --------------------------------------------------------------------------------------
# Child: datasets and measurements, in a fresh process.
# --------------------------------------------------------------------------------------


class RowDataset:
    """A cheap map-style dataset: sample ``i`` is a view of a precomputed row."""

    def __init__(self, n: int) -> None:
        import torch

        self.rows = torch.arange(n * ROW_WIDTH, dtype=torch.int64).reshape(n, ROW_WIDTH)

    def __len__(self) -> int:
        return int(self.rows.shape[0])

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.rows[index]


class IndexDataset:
    """An index-only dataset of any length: sample ``i`` is the int ``i``; no memory."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return int(index)


def _quiet_torchdata() -> None:
    # torchdata's constructor calls a deprecated torch API (torch.set_vital).
    warnings.filterwarnings("ignore", message=".*set_vital.*is deprecated")


def _as_dataset(dataset: object) -> torch.utils.data.Dataset[Any]:
    # The loaders only need __len__ and __getitem__; their annotations ask for a Dataset.
    return cast("torch.utils.data.Dataset[Any]", dataset)


def build_loader(
    impl: Loader, dataset: object, batch_size: int, num_workers: int, algorithm: str = "randperm"
) -> tuple[Any, Any]:
    """A loader over ``dataset`` for rank 0 of 1 (shuffle, seed 0) and its sampler."""
    import torch.utils.data
    from torchdata.stateful_dataloader import StatefulDataLoader as TorchdataLoader

    from lightning_resumable_data import DistributedSampler, StatefulDataLoader

    data = _as_dataset(dataset)
    sampler: torch.utils.data.DistributedSampler[int]
    if impl == "ours":
        sampler = DistributedSampler(
            cast("Any", dataset), 1, 0, seed=SEED, algorithm=cast("Any", algorithm)
        )
        loader: Any = StatefulDataLoader(
            data, batch_size=batch_size, sampler=sampler, num_workers=num_workers
        )
        return loader, sampler
    sampler = torch.utils.data.DistributedSampler(data, 1, 0, seed=SEED)
    kind = torch.utils.data.DataLoader if impl == "torch" else TorchdataLoader
    loader = kind(data, batch_size=batch_size, sampler=sampler, num_workers=num_workers)
    return loader, sampler


def _start_epoch(impl: Loader, loader: Any, sampler: Any, epoch: int) -> None:
    """Select ``epoch``: torch and torchdata through the sampler, ours through the loader.

    Ours would also move on by itself after a full epoch (a no-op then); after an
    abandoned warm-up it needs the call, as Lightning makes it.
    """
    if impl == "ours":
        loader.set_epoch(epoch)
        if loader.epoch != epoch:
            raise RuntimeError(f"ours is at epoch {loader.epoch}, expected {epoch}")
    else:
        sampler.set_epoch(epoch)


def _next_batches(iterator: Iterator[Any], count: int) -> int:
    """Read up to ``count`` batches; return how many there were."""
    taken = 0
    try:
        for _ in range(count):
            next(iterator)
            taken += 1
    except StopIteration:
        pass
    return taken


def _children_cpu_s() -> float:
    """CPU seconds of this process's children that have ended and been reaped."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_interleaved(
    loaders: dict[Loader, tuple[Any, Any]], epoch: int, turn: int
) -> dict[str, dict[str, float]]:
    """Read ``epoch`` of every loader, ``turn`` batches at a time in turn; time each loader.

    A loader's wall time is the sum of its turns after its first batch; its CPU time is
    this thread's CPU time in those turns plus the CPU time of its workers over the epoch
    (they are reaped when its epoch ends, during its last turn). The first batch
    (``iter``, worker start-up, the sampler's per-epoch set-up) is timed on its own.
    """
    clock, cpu_clock = time.perf_counter, time.thread_time
    iterators: dict[Loader, Iterator[Any]] = {}
    first_s: dict[Loader, float] = {}
    for impl, (loader, sampler) in loaders.items():
        _start_epoch(impl, loader, sampler, epoch)
        start = clock()
        iterators[impl] = iter(loader)  # also reaps the workers of an abandoned warm-up
        next(iterators[impl])
        first_s[impl] = clock() - start
    seconds = dict.fromkeys(loaders, 0.0)
    cpu_s = dict.fromkeys(loaders, 0.0)
    batches = dict.fromkeys(loaders, 1)
    live = list(loaders)
    while live:
        for impl in list(live):
            children = _children_cpu_s()
            start, cpu_start = clock(), cpu_clock()
            taken = _next_batches(iterators[impl], turn)
            seconds[impl] += clock() - start
            cpu_s[impl] += cpu_clock() - cpu_start + _children_cpu_s() - children
            batches[impl] += taken
            if taken < turn:
                live.remove(impl)
    del iterators
    return {
        impl: {
            "batches": batches[impl],
            "seconds": seconds[impl],
            "cpu_s": cpu_s[impl],
            "steady_rate": (batches[impl] - 1) / seconds[impl],
            "cpu_ms": 1000 * cpu_s[impl] / (batches[impl] - 1),
            "first_ms": 1000 * first_s[impl],
        }
        for impl in loaders
    }


def check_same_batches(n: int, num_workers: int) -> bool:
    """Whether the three loaders yield identical batches in epochs 0 and 1."""
    import torch

    dataset = RowDataset(n)
    seen: dict[Loader, list[torch.Tensor]] = {}
    for impl in LOADERS:
        loader, sampler = build_loader(impl, dataset, BATCH_SIZE, num_workers)
        batches: list[torch.Tensor] = []
        for epoch in (0, 1):
            _start_epoch(impl, loader, sampler, epoch)
            batches += list(loader)
        seen[impl] = batches
        del loader
    reference = seen["torch"]
    expected_batches = 2 * -(-n // BATCH_SIZE)
    return len(reference) == expected_batches and all(
        len(batches) == len(reference)
        and all(torch.equal(a, b) for a, b in zip(batches, reference, strict=True))
        for batches in seen.values()
    )


def run_throughput(case: ThroughputCase) -> dict[str, object]:
    """Measure one round of part (a) in this process."""
    import torch

    _quiet_torchdata()
    if case.num_workers == 0:
        pin_to_one_cpu()
    torch.set_num_threads(1)
    # One copy of the dataset per loader: the loaders read the same indices in the same
    # order, and with a shared copy the one that comes first in a cycle warms the CPU
    # caches for the others (about 9% between three identical torch loaders here).
    loaders = {
        impl: build_loader(impl, RowDataset(case.n), BATCH_SIZE, case.num_workers)
        for impl in case.order
    }
    for impl, (loader, sampler) in loaders.items():  # warm-up: (part of) epoch 0
        _start_epoch(impl, loader, sampler, 0)
        iterator = iter(loader)
        _next_batches(iterator, case.warmup_batches or len(loader))
        del iterator
    gc.collect()
    rates = time_interleaved(loaders, 1, case.turn)
    expected = -(-case.n // BATCH_SIZE)
    if any(rate["batches"] != expected for rate in rates.values()):
        raise RuntimeError(f"an epoch did not have {expected} batches: {rates}")
    del loaders
    gc.collect()
    check = check_same_batches(case.check_n, case.num_workers) if case.check_n else None
    return {"rates": rates, "check": check}


def _state_at(impl: Resumer, loader: Any, position: int) -> dict[str, Any]:
    """The state ``loader`` writes after ``position`` batches of one sample, built in O(1).

    Starts from what the fresh ``loader`` writes (position 0) and sets its counters.
    """
    state = cast("dict[str, Any]", loader.state_dict())
    if impl == "torchdata":
        counters = ("_num_yielded", "_sampler_iter_yielded")
        if not all(key in state for key in counters) or not isinstance(
            state.get("_sampler_iter_state"), dict
        ):
            raise RuntimeError(f"unexpected torchdata state layout: {sorted(state)}")
        for key in counters:
            state[key] = position
        state["_sampler_iter_state"]["samples_yielded"] = position
    else:
        state["consumed"] = state["batches_yielded"] = position
        state["sampler"]["consumed"] = position
    return state


def _expected_index(impl: Resumer, n: int, position: int) -> int:
    """The dataset index at ``position`` of epoch 0's order, computed from its definition."""
    import torch

    from lightning_resumable_data.index.permutation import feistel_slice

    if impl == "feistel":
        return int(feistel_slice(n, SEED, 0, position, position + 1)[0])
    generator = torch.Generator().manual_seed(SEED)  # torch's DistributedSampler, epoch 0
    return int(torch.randperm(n, generator=generator)[position])


def _resume_loader(impl: Resumer, n: int) -> Any:
    loader_kind: Loader = "torchdata" if impl == "torchdata" else "ours"
    algorithm = "feistel" if impl == "feistel" else "randperm"
    return build_loader(loader_kind, IndexDataset(n), 1, 0, algorithm)[0]


def run_resume(case: ResumeCase) -> dict[str, object]:
    """Measure one cell of part (b) in this process."""
    import torch

    _quiet_torchdata()
    pin_to_one_cpu()
    torch.set_num_threads(1)
    checks: list[str] = []  # failures
    state_text = json.dumps(_state_at(case.impl, _resume_loader(case.impl, case.n), case.position))
    gc.collect()
    expected = _expected_index(case.impl, case.n, case.position)

    if case.verify:  # the state of a loader that really read `position` batches
        loader = _resume_loader(case.impl, case.n)
        iterator = iter(loader)
        for _ in itertools.islice(iterator, case.position):
            pass
        real_text = json.dumps(loader.state_dict())
        real_next = int(next(iterator)[0])
        if json.loads(real_text) != json.loads(state_text):
            checks.append(f"built state != real state ({real_text} vs {state_text})")
        if real_next != expected:
            checks.append(f"really iterated next index {real_next} != expected {expected}")
        del loader, iterator
        gc.collect()

    times: list[float] = []
    cpu_times: list[float] = []
    first_index = -1
    for _ in range(case.repeats):
        loader = _resume_loader(case.impl, case.n)
        state = json.loads(state_text)
        gc.collect()
        start, cpu_start = time.perf_counter(), time.thread_time()
        loader.load_state_dict(state)
        batch = next(iter(loader))
        times.append(time.perf_counter() - start)
        cpu_times.append(time.thread_time() - cpu_start)
        first_index = int(batch[0])
        if first_index != expected:
            checks.append(f"resumed first index {first_index} != expected {expected}")
        del loader, batch
        gc.collect()
    return {
        "seconds": times,
        "cpu_seconds": cpu_times,
        "first_index": first_index,
        "failures": checks,
    }


# --------------------------------------------------------------------------------------
# Parent: plan, spawn, aggregate, report.
# --------------------------------------------------------------------------------------


def _spawn(kind: str, case: ThroughputCase | ResumeCase) -> Json:
    try:
        return spawn_json(__file__, ["--child", kind, json.dumps(asdict(case))])
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {CHILD_TIMEOUT_S} s"}


def round_order(round_index: int) -> tuple[Loader, ...]:
    """The loaders' order in a round: rotated by the round, reversed every other round."""
    shift = round_index % len(LOADERS)
    order = LOADERS[shift:] + LOADERS[:shift]
    return order[::-1] if round_index % 2 else order


@dataclass
class ThroughputResult:
    """Part (a) for one ``num_workers``: each loader's per-round measurements."""

    num_workers: int
    rounds: dict[Loader, list[dict[str, float]]]
    check: bool | None = None
    error: str | None = None

    def median(self, impl: Loader, key: str) -> float:
        """The median of ``key`` over the rounds."""
        return statistics.median(run[key] for run in self.rounds[impl])

    def overheads(self, impl: Loader, key: Clock) -> list[float]:
        """Per round: ``impl``'s time over torch's for the same batches, minus 1, in %."""
        pairs = zip(self.rounds["torch"], self.rounds[impl], strict=True)
        return [100 * (o[key] / t[key] - 1) for t, o in pairs]

    def overhead(self, impl: Loader, key: Clock) -> float:
        """The median over the rounds of the per-round overhead against torch, in %."""
        return statistics.median(self.overheads(impl, key))


def measure_throughput(
    n: int, repeats: int, workers: Sequence[int], check_n: int
) -> list[ThroughputResult]:
    """Run ``repeats`` interleaved rounds for every ``num_workers``."""
    results = {nw: ThroughputResult(nw, {impl: [] for impl in LOADERS}) for nw in workers}
    for index in range(repeats):
        for nw in workers:
            result = results[nw]
            if result.error is not None:
                continue
            case = ThroughputCase(
                n,
                nw,
                round_order(index),
                turn=TURN_WORKERS if nw else 1,
                warmup_batches=WARMUP_WORKERS if nw else 0,
                check_n=check_n if index == 0 else 0,
            )
            run = _spawn("throughput", case)
            if "error" in run:
                result.error = str(run["error"])
                progress(f"  round {index} nw={nw}: {result.error}")
                continue
            for impl in LOADERS:
                result.rounds[impl].append(run["rates"][impl])
            if run["check"] is not None:
                result.check = bool(run["check"])
            rates = ", ".join(
                f"{impl} {run['rates'][impl]['steady_rate']:.0f}" for impl in case.order
            )
            progress(f"  round {index} nw={nw}: {rates} batches/s")
    return [results[nw] for nw in workers]


@dataclass
class ResumeResult:
    """Part (b) for one loader at one position."""

    case: ResumeCase
    seconds: list[float]
    cpu_seconds: list[float]
    first_index: int = -1
    failures: tuple[str, ...] = ()
    error: str | None = None

    @property
    def ms(self) -> float:
        """Median resume latency in milliseconds."""
        return 1000 * statistics.median(self.seconds) if self.seconds else float("nan")

    @property
    def cpu_ms(self) -> float:
        """Median CPU time of the resume in milliseconds."""
        return 1000 * statistics.median(self.cpu_seconds) if self.cpu_seconds else float("nan")

    def cell(self) -> str:
        """``wall ms (CPU ms)``."""
        return f"{self.ms:,.1f} ({self.cpu_ms:,.1f})"


def measure_resume(
    n: int, positions: Sequence[int], repeats: int, verify_max: int
) -> list[ResumeResult]:
    """Every loader at every position, each in a fresh subprocess."""
    results = []
    for position in positions:
        for impl in RESUMERS:
            case = ResumeCase(impl, n, position, repeats, verify=position <= verify_max)
            run = _spawn("resume", case)
            if "error" in run:
                result = ResumeResult(case, [], [], error=str(run["error"]))
                status = result.error
            else:
                result = ResumeResult(
                    case,
                    [float(s) for s in run["seconds"]],
                    [float(s) for s in run["cpu_seconds"]],
                    int(run["first_index"]),
                    tuple(str(f) for f in run["failures"]),
                )
                status = f"{result.cell()} ms" + (" CHECK FAILED" if result.failures else "")
            progress(f"  {impl:>9} p={fmt_n(position):<6} {status}")
            results.append(result)
    return results


def _pct(value: float) -> str:
    return f"{value:+.1f}%"


def _spread(values: Sequence[float]) -> str:
    return f"{_pct(min(values))} … {_pct(max(values))}"


def render_throughput(results: Sequence[ThroughputResult], n: int, repeats: int) -> list[str]:
    """Markdown table of part (a)."""
    lines = [
        f"## (a) Throughput: N={n:,}, batch_size={BATCH_SIZE}, epoch 1 after a warm-up, "
        f"loaders interleaved, median of {repeats} rounds",
        "",
        *table_header(
            "num_workers",
            "loader",
            "batches/s (steady)",
            "overhead vs torch (range)",
            "CPU ms/batch",
            "CPU overhead vs torch (range)",
            "first batch ms",
        ),
    ]
    for result in results:
        if result.error is not None:
            failed = [str(result.num_workers), "all", f"FAILED: {result.error}"]
            lines.append(table_row(failed, width=7))
            continue
        for impl in LOADERS:
            rate = result.median(impl, "steady_rate")
            cpu_ms = result.median(impl, "cpu_ms")
            first_ms = result.median(impl, "first_ms")
            if impl == "torch":
                wall = cpu = "—"
            else:
                wall = f"{_pct(result.overhead(impl, 'seconds'))} "
                wall += f"({_spread(result.overheads(impl, 'seconds'))})"
                cpu = f"{_pct(result.overhead(impl, 'cpu_s'))} "
                cpu += f"({_spread(result.overheads(impl, 'cpu_s'))})"
            lines.append(
                f"| {result.num_workers} | {impl} | {rate:,.0f} | {wall} | {cpu_ms:.3f} | {cpu} "
                f"| {first_ms:,.1f} |"
            )
    return lines


def render_resume(
    results: Sequence[ResumeResult], n: int, repeats: int, verify_max: int
) -> list[str]:
    """Markdown table of part (b)."""
    lines = [
        f"## (b) Resume latency: N={fmt_n(n)}, batch_size=1, "
        f"num_workers=0, load_state_dict + first batch, median of {repeats}; "
        "wall ms (CPU ms)",
        "",
        *table_header(
            "position",
            "ours (randperm) ms",
            "ours (feistel) ms",
            "torchdata ms",
            "torchdata / ours (randperm)",
            "torchdata / ours (feistel)",
            "state at position",
        ),
    ]
    for position in sorted({r.case.position for r in results}):
        row = {r.case.impl: r for r in results if r.case.position == position}
        cells = []
        for impl in RESUMERS:
            result = row.get(impl)
            if result is None or result.error is not None:
                cells.append("FAILED" if result is None else f"FAILED: {result.error}")
            else:
                cells.append(result.cell())
        ratios = []
        theirs = row.get("torchdata")
        ours_impls: tuple[Resumer, ...] = ("randperm", "feistel")
        for impl in ours_impls:
            ours = row.get(impl)
            if theirs is None or ours is None or theirs.error or ours.error:
                ratios.append("n/a")
            else:
                ratios.append(f"{theirs.ms / ours.ms:,.1f}x")
        state = (
            "built, checked = really iterated"
            if position <= verify_max
            else "built from counters (first batch checked)"
        )
        lines.append(f"| {fmt_n(position)} | {' | '.join(cells + ratios)} | {state} |")
    return lines


def correctness_failures(
    throughput: Sequence[ThroughputResult], resume: Sequence[ResumeResult]
) -> list[str]:
    """Every crashed case and failed correctness check, as lines."""
    failures = []
    for t in throughput:
        if t.error is not None:
            failures.append(f"throughput num_workers={t.num_workers}: {t.error}")
        elif t.check is False:
            failures.append(f"throughput num_workers={t.num_workers}: the loaders' batches differ")
    for r in resume:
        where = f"resume {r.case.impl} at {fmt_n(r.case.position)}"
        if r.error is not None:
            failures.append(f"{where}: {r.error}")
        failures += [f"{where}: {f}" for f in dict.fromkeys(r.failures)]
    by_position: dict[int, dict[Resumer, int]] = {}
    for r in resume:
        if r.error is None:
            by_position.setdefault(r.case.position, {})[r.case.impl] = r.first_index
    for position, firsts in by_position.items():
        if {"randperm", "torchdata"} <= firsts.keys() and firsts["randperm"] != firsts["torchdata"]:
            failures.append(
                f"resume at {fmt_n(position)}: ours (randperm) and torchdata resume at "
                f"different samples ({firsts['randperm']} vs {firsts['torchdata']})"
            )
    return failures


def verdicts(throughput: Sequence[ThroughputResult], resume: Sequence[ResumeResult]) -> list[str]:
    """The acceptance-criterion summary lines."""
    lines = []
    for t in throughput:
        if t.error is not None or not t.rounds["ours"]:
            lines.append(f"throughput overhead at num_workers={t.num_workers}: n/a (failed)")
            continue
        parts = []
        for key, label in (("seconds", "wall-clock"), ("cpu_s", "CPU time")):
            clock = cast(Clock, key)
            ours_pct = t.overhead("ours", clock)
            theirs_pct = t.overhead("torchdata", clock)
            parts.append(
                f"ours {_pct(ours_pct)} {label} (torchdata {_pct(theirs_pct)}) "
                f"— {mark(ours_pct <= OVERHEAD_TARGET_PCT)}"
            )
        lines.append(
            f"throughput overhead at num_workers={t.num_workers} vs torch's DataLoader "
            f"(target <= {OVERHEAD_TARGET_PCT:g}%): " + "; ".join(parts)
        )

    ok = [r for r in resume if r.error is None and r.seconds]
    positions = sorted({r.case.position for r in ok})
    if not resume:
        return lines
    if len(positions) < 2:
        lines.append("resume latency flat in position: n/a (needs two positions)")
        return lines
    low, high = positions[0], positions[-1]

    def find(impl: Resumer, position: int) -> ResumeResult | None:
        return next((r for r in ok if r.case.impl == impl and r.case.position == position), None)

    ours_impls: tuple[Resumer, ...] = ("randperm", "feistel")
    for impl in ours_impls:
        first, last = find(impl, low), find(impl, high)
        if first is None or last is None:
            lines.append(f"resume latency flat in position, {RESUMER_NAMES[impl]}: n/a")
            continue
        flat = last.ms <= FLAT_RATIO * first.ms + FLAT_SLACK_MS
        flat_cpu = last.cpu_ms <= FLAT_RATIO * first.cpu_ms + FLAT_SLACK_MS
        lines.append(
            f"resume latency flat in position: {RESUMER_NAMES[impl]} {first.ms:,.1f} ms at "
            f"{fmt_n(low)} vs {last.ms:,.1f} ms at {fmt_n(high)} (flat: <= {FLAT_RATIO:g}x "
            f"+ {FLAT_SLACK_MS:g} ms) — {mark(flat)}; CPU {first.cpu_ms:,.1f} vs "
            f"{last.cpu_ms:,.1f} ms — {mark(flat_cpu)}"
        )
    theirs = find("torchdata", high)
    ratios = []
    for impl in ours_impls:
        ours = find(impl, high)
        if theirs is not None and ours is not None:
            ratios.append(
                f"{theirs.ms / ours.ms:,.1f}x ours ({impl}; CPU "
                f"{theirs.cpu_ms / ours.cpu_ms:,.1f}x)"
            )
    if theirs is None or not ratios:
        lines.append(f"resume latency vs torchdata at {fmt_n(high)}: n/a")
    else:
        lines.append(
            f"resume latency vs torchdata at {fmt_n(high)}: torchdata {theirs.ms:,.1f} ms "
            f"(CPU {theirs.cpu_ms:,.1f} ms) = " + ", ".join(ratios)
        )
    return lines


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line interface (parent and ``--child`` modes)."""
    parser = argument_parser(__doc__)
    parser.add_argument(
        "--parts",
        choices=("all", "throughput", "resume"),
        default="all",
        help="which part to run (default all)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="CI smoke: --n 2e4 --repeats 1 --resume-n 2e5 --positions 1e3,1e5 --verify-max 1e3",
    )
    parser.add_argument(
        "--repeats", type=parse_count, default=None, help="throughput rounds (default 5)"
    )
    parser.add_argument(
        "--n", type=parse_count, default=None, help="throughput dataset size (default 2e5)"
    )
    parser.add_argument(
        "--workers",
        type=lambda text: [int(part) for part in text.split(",")],
        default=[0, 2],
        help="num_workers values for throughput (default 0,2)",
    )
    parser.add_argument(
        "--resume-n", type=parse_count, default=None, help="resume dataset size (default 2e7)"
    )
    parser.add_argument(
        "--positions",
        type=parse_counts,
        default=None,
        help="resume positions in samples (default 1e3,1e5,1e7)",
    )
    parser.add_argument(
        "--resume-repeats", type=parse_count, default=3, help="resume: median of k (default 3)"
    )
    parser.add_argument(
        "--verify-max",
        type=parse_count,
        default=None,
        help="check built states against really iterated ones up to this position "
        "(default 1e5; slow above 1e6)",
    )
    parser.add_argument(
        "--json",
        default=RESULTS,
        help=f"JSON results path (default {RESULTS}; not written with --quick)",
    )
    child = parser.add_argument_group("child mode (one measurement, used internally)")
    child.add_argument(
        "--child", nargs=2, metavar=("KIND", "SPEC"), help="run one case, print JSON"
    )
    return parser.parse_args(argv)


def run_child(kind: str, spec: str) -> dict[str, object]:
    """Run one case described by the JSON ``spec``."""
    fields = json.loads(spec)
    if kind == "throughput":
        fields["order"] = tuple(fields["order"])
        return run_throughput(ThroughputCase(**fields))
    if kind == "resume":
        return run_resume(ResumeCase(**fields))
    raise SystemExit(f"unknown child kind {kind!r}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark (or, with ``--child``, one case) and return the exit code."""
    args = parse_args(argv)
    if args.child is not None:
        print(json.dumps(run_child(*args.child)))
        return 0

    quick = args.quick
    n = args.n or (20_000 if quick else 200_000)
    repeats = args.repeats or (1 if quick else 5)
    resume_n = args.resume_n or (200_000 if quick else 2 * 10**7)
    positions = args.positions or ([10**3, 10**5] if quick else [10**3, 10**5, 10**7])
    verify_max = args.verify_max or (10**3 if quick else 10**5)
    if max(positions) >= resume_n:
        raise SystemExit(f"positions must be < --resume-n ({resume_n:,})")
    check_n = min(n, 5_000)

    print(
        f"# StatefulDataLoader vs torch DataLoader vs torchdata StatefulDataLoader; "
        f"python {python_version()}, torch {package_version('torch')}, "
        f"torchdata {package_version('torchdata')}, {os.cpu_count()} CPUs, {load_average()}",
        flush=True,
    )
    throughput: list[ThroughputResult] = []
    resume: list[ResumeResult] = []
    if args.parts in ("all", "throughput"):
        throughput = measure_throughput(n, repeats, args.workers, check_n)
        print_block(render_throughput(throughput, n, repeats), flush=True)
    if args.parts in ("all", "resume"):
        resume = measure_resume(resume_n, positions, args.resume_repeats, verify_max)
        print_block(render_resume(resume, resume_n, args.resume_repeats, verify_max))
    print()
    print(f"# at the end: {load_average()}")
    verdict_lines = verdicts(throughput, resume)
    print("\n".join(verdict_lines))
    failures = correctness_failures(throughput, resume)
    if not quick:
        payload = {
            "command": "benchmarks/bench_loader.py",
            "python": python_version(),
            "torch": package_version("torch"),
            "torchdata": package_version("torchdata"),
            "load_average": load_average(),
            "throughput": [asdict(result) for result in throughput],
            "resume": [asdict(result) for result in resume],
            "verdicts": verdict_lines,
            "failures": failures,
        }
        target = REPO_ROOT / args.json
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(payload, indent=1, allow_nan=True, default=str) + "\n")
    if failures:
        print("\nFAILED: a case crashed or a correctness check failed:")
        print("\n".join(f"  {line}" for line in failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
