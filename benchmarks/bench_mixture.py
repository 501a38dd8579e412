"""Benchmark one epoch of ``MixtureSampler`` indices, with a mid-epoch weight change.

Run from the repository root::

    .venv/bin/python benchmarks/bench_mixture.py              # full run (a few minutes)
    .venv/bin/python benchmarks/bench_mixture.py --quick      # CI smoke (under a minute)
    .venv/bin/python benchmarks/bench_mixture.py --sizes 1e7 --repeat 3
    .venv/bin/python benchmarks/tables.py                     # docs table from the JSON

The results are also written as JSON (``--json``, default
``benchmarks/results/mixture.json``); ``benchmarks/tables.py`` rewrites the W-scaling table
of ``docs/benchmarks.md`` from it.

The mixture: three sources ``a``, ``b``, ``c`` of sizes in ratio 6:3:1 (``range`` objects,
so reading indices costs nothing but the sampler), ``N`` samples in all, weights
``{a: 0.5, b: 0.3, c: 0.2}`` changed to ``{a: 0.2, b: 0.3, c: 0.5}`` at global position
``N // 2`` of epoch 0 (scheduled with ``update_weights(..., epoch=0, position=N // 2)``
before iterating), ``samples_per_epoch=N``, ``drop_last=True``, ``seed=0``, rank 0 of
``--world`` (default 8). After the change ``c`` is oversampled (3.5 passes over it in the
epoch), so the multi-pass path is exercised.

**W-scaling** (the first table): for every ``N`` in ``--sizes`` (default 4e6, 1e8; ``--quick``:
4e6) and every world size ``W`` in ``--worlds`` (default 1, 8, 64, 512), the CPU seconds
(``time.process_time``) of rank 0's full epoch, mixture against the plain sampler with
``algorithm="feistel"`` over ``range(N)``, and their ratio. A mixture rank computes only its
own positions, so both fall as ``N / W``. Targets: within 3x of the plain sampler at
``W = 512``, at least 2 M indices/s at ``W = 1``.

For every ``N`` it also measures, at ``--world`` (default 8), beside the mixture, the plain
``lightning_resumable_data.DistributedSampler`` over ``range(N)`` (same rank, world, seed,
epoch and drop_last) with ``algorithm="randperm"`` (torch's order) and ``"feistel"``:

* ``epoch``: one full epoch of rank 0, consumed with ``for _ in sampler: pass`` (``iter()``
  included): indices per second and peak memory;
* ``resume``: a fresh sampler loads the state at global position ``P`` (just past the weight
  change: ``N // 2`` rounded down to the world size, plus ``1001 * world``), built with
  ``state_at(0, P)`` by another instance and round-tripped through JSON; the time from
  ``load_state_dict`` to the first index, and its peak memory. Untimed afterwards, the first
  4096 resumed indices must equal those at the same place of an uninterrupted epoch.
  ``save ms`` is the time of that ``state_at`` call.

Count checks, for the mixture only:

* at every ``N``: ``source_counts(consumed=N // 2)`` and the second half (``consumed=N``
  minus that) must equal ``index.mixture.target_counts`` of each phase's probabilities;
* at ``N <= --check-max`` (default 1e7), in a separate untimed case: all ranks' epochs are
  read, and the per-source counts realised in each half (by global position) must equal the
  same targets, every index must be in range, and each sample of a source must appear
  ``floor`` or ``ceil`` of (its draws / its size) times (no repeat before a pass is used up).
  It also checks the order of the passes: the largest overlap, in global positions,
  between the end of a source's pass and the start of its next pass must be 0 (each
  source is read strictly pass after pass).

Every measurement runs in a fresh subprocess (this script with ``--case``), pinned to one
CPU with one torch/OpenMP/MKL thread. Peak memory is the growth of ``ru_maxrss`` over a
baseline taken after the imports and the setup (datasets, sampler, schedule; for ``resume``
also the saved state). With ``--repeat k`` each case runs in k fresh subprocesses: the best
(lowest) times and the highest peak memory are reported.

The verdict lines compare the mixture with the plain sampler and check two claims of the
design: peak memory flat in ``N`` (within 16 MiB between the smallest and largest ``N``) and
resume cost flat in ``N`` (O(log N): within 2x + 50 ms). Missed performance claims are
reported, not fatal: the exit status is 0 unless a case crashed or a check failed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast

from _harness import (
    REPO_ROOT,
    Json,
    argument_parser,
    best_time,
    fmt_n,
    highest_peak,
    load_average,
    mark,
    one_torch_thread,
    package_version,
    parse_count,
    parse_counts,
    peak_kib,
    peak_mib_since,
    pin_to_one_cpu,
    print_block,
    progress,
    python_version,
    repeat_runs,
    spawn_json,
    table_header,
    table_row,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

RANK = 0
WORLDS = (1, 8, 64, 512)
TARGET_RATIO_W512 = 3.0  # mixture CPU time / feistel CPU time at W = 512
TARGET_RATE_W1 = 2e6  # mixture indices per second at W = 1
RESULTS = "benchmarks/results/mixture.json"
SEED = 0
EPOCH = 0
NAMES = ("a", "b", "c")
RATIO = (6, 3, 1)  # source sizes, relative
WEIGHTS_BEFORE = {"a": 0.5, "b": 0.3, "c": 0.2}
WEIGHTS_AFTER = {"a": 0.2, "b": 0.3, "c": 0.5}
RESUME_OFFSET = 1001  # rank samples past the change where the resume state is taken
RESUME_WINDOW = 4096  # resumed indices compared with the uninterrupted epoch
FLAT_MEMORY_SLACK_MIB = 16.0
FLAT_RESUME_FACTOR = 2.0
FLAT_RESUME_SLACK_S = 0.050

Impl = Literal["mixture", "randperm", "feistel"]
IMPLS: tuple[Impl, ...] = ("mixture", "randperm", "feistel")
SCALING_IMPLS: tuple[Impl, ...] = ("mixture", "feistel")
Mode = Literal["epoch", "resume", "counts"]
MODES: tuple[Mode, ...] = ("epoch", "resume", "counts")


@dataclass(frozen=True)
class Case:
    """One measurement: a sampler, a total size, a world size and what to measure."""

    impl: Impl
    mode: Mode
    n: int
    world: int


@dataclass(frozen=True)
class Result:
    """What one case measured (best of its repeats), or why it failed."""

    case: Case
    count: int = 0  # indices timed (epoch)
    seconds: float = float("nan")  # epoch loop, or load_state_dict -> first index
    cpu_seconds: float = float("nan")  # epoch loop, process CPU time
    peak_mib: float = float("nan")
    save_seconds: float = float("nan")  # resume: state_at on the saving sampler
    ok: bool | None = None  # the case's own check, None if it has none
    detail: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    @property
    def rate(self) -> float:
        """Indices per second."""
        return self.count / self.seconds if self.seconds > 0 else float("inf")


# --------------------------------------------------------------------------------------
# Child: one measurement in a fresh process.
# --------------------------------------------------------------------------------------


def source_sizes(n: int) -> list[int]:
    """Sizes of the three sources, in ratio 6:3:1, summing to ``n``."""
    sizes = [n * part // sum(RATIO) for part in RATIO[:-1]]
    return [*sizes, n - sum(sizes)]


def change_position(n: int) -> int:
    """Global position of the weight change: the middle of the epoch."""
    return n // 2


def resume_position(n: int, world: int) -> int:
    """Global position of the resume state: just past the change, a multiple of ``world``."""
    return (change_position(n) // world + RESUME_OFFSET) * world


def phase_targets(n: int) -> list[list[int]]:
    """The exact per-source counts each phase must draw: ``target_counts`` per half."""
    from lightning_resumable_data.index.mixture import mixture_probabilities, target_counts

    half = change_position(n)
    targets = []
    for weights, budget in ((WEIGHTS_BEFORE, half), (WEIGHTS_AFTER, n - half)):
        probabilities = mixture_probabilities([weights[name] for name in NAMES], 1.0)
        targets.append(target_counts(probabilities, budget).tolist())
    return targets


def make_sampler(impl: Impl, n: int, world: int, rank: int, *, schedule: bool) -> Any:
    """Build rank ``rank``'s sampler; the mixture gets the mid-epoch change if ``schedule``."""
    from lightning_resumable_data import DistributedSampler, MixtureDataset, MixtureSampler

    if impl != "mixture":
        return DistributedSampler(
            range(n),
            num_replicas=world,
            rank=rank,
            shuffle=True,
            seed=SEED,
            drop_last=True,
            algorithm=impl,
        )
    mixture = MixtureDataset(dict(zip(NAMES, map(range, source_sizes(n)), strict=True)))
    sampler = MixtureSampler(
        mixture,
        WEIGHTS_BEFORE,
        num_replicas=world,
        rank=rank,
        seed=SEED,
        drop_last=True,
        samples_per_epoch=n,
    )
    if schedule:
        sampler.update_weights(WEIGHTS_AFTER, epoch=EPOCH, position=change_position(n))
    return sampler


def _one_thread() -> None:
    pin_to_one_cpu()
    # numpy 2 imports numpy.ma on the first np.unique call (~20-40 ms); the mixture makes
    # that call in its first chunk. Import it here, so it is not billed as resume time.
    import numpy.ma  # noqa: F401

    one_torch_thread()


def _setup(case: Case) -> Any:
    _one_thread()
    return make_sampler(case.impl, case.n, case.world, RANK, schedule=True)


def run_epoch(case: Case) -> dict[str, Any]:
    """Time one full epoch of rank 0; for the mixture, check ``source_counts`` (untimed)."""
    sampler = _setup(case)
    sampler.set_epoch(EPOCH)
    baseline = peak_kib()

    start, cpu_start = time.perf_counter(), time.process_time()
    for _ in sampler:
        pass
    cpu_seconds = time.process_time() - cpu_start
    seconds = time.perf_counter() - start
    peak_mib = peak_mib_since(baseline)

    result: dict[str, Any] = {
        "count": len(sampler),
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "peak_mib": peak_mib,
        "ok": None,
        "detail": {},
    }
    if case.impl == "mixture":
        half = change_position(case.n)
        first = sampler.source_counts(consumed=half, epoch=EPOCH)
        whole = sampler.source_counts(consumed=case.n, epoch=EPOCH)
        reported = [[first[s] for s in NAMES], [whole[s] - first[s] for s in NAMES]]
        targets = phase_targets(case.n)
        result["ok"] = reported == targets
        result["detail"] = {"source_counts": reported, "targets": targets}
    return result


def run_resume(case: Case) -> dict[str, Any]:
    """Time ``load_state_dict`` of a mid-epoch state to the first index; check the window."""
    import numpy as np

    position = resume_position(case.n, case.world)
    saver = _setup(case)
    save_start = time.perf_counter()
    state = saver.state_at(EPOCH, position)
    save_seconds = time.perf_counter() - save_start
    state = json.loads(json.dumps(state))  # as a checkpoint would store it
    # A fresh run: constructed with the initial weights only; the schedule comes from the
    # state.
    sampler = make_sampler(case.impl, case.n, case.world, RANK, schedule=False)
    baseline = peak_kib()

    start = time.perf_counter()
    sampler.load_state_dict(state)
    iterator: Iterator[int] = iter(sampler)
    first = next(iterator)
    seconds = time.perf_counter() - start
    peak_mib = peak_mib_since(baseline)

    # Untimed: the resumed indices must be the uninterrupted epoch's from the same place.
    resumed = [first, *itertools.islice(iterator, RESUME_WINDOW - 1)]
    reference = make_sampler(case.impl, case.n, case.world, RANK, schedule=True)
    skip = position // case.world
    expected = np.fromiter(
        itertools.islice(reference, skip, skip + len(resumed)), dtype=np.int64
    ).tolist()
    return {
        "seconds": seconds,
        "peak_mib": peak_mib,
        "save_seconds": save_seconds,
        "ok": resumed == expected and len(resumed) > 0,
        "detail": {"position": position, "compared": len(resumed)},
    }


def run_counts(case: Case) -> dict[str, Any]:
    """Read every rank's epoch; check realised per-source counts and repeats (mixture)."""
    import numpy as np

    from lightning_resumable_data import MixtureSampler

    _one_thread()
    n, world = case.n, case.world
    sizes = np.asarray(source_sizes(n), dtype=np.int64)
    starts = np.concatenate(([0], np.cumsum(sizes)))
    half = change_position(n)
    realised = np.zeros((2, len(NAMES)), dtype=np.int64)
    copies = [np.zeros(int(size), dtype=np.int64) for size in sizes]
    in_range = True
    read = 0
    start = time.perf_counter()
    for rank in range(world):
        sampler = cast(MixtureSampler, make_sampler("mixture", n, world, rank, schedule=True))
        indices = np.fromiter(sampler, dtype=np.int64, count=len(sampler))
        read += len(indices)
        in_range = in_range and bool(indices.min() >= 0) and bool(indices.max() < n)
        positions = rank + world * np.arange(len(indices), dtype=np.int64)
        source = np.searchsorted(starts, indices, side="right") - 1
        for phase, mask in enumerate((positions < half, positions >= half)):
            realised[phase] += np.bincount(source[mask], minlength=len(NAMES))
        for j in range(len(NAMES)):
            local = indices[source == j] - starts[j]
            copies[j] += np.bincount(local, minlength=int(sizes[j]))
    seconds = time.perf_counter() - start

    targets = phase_targets(n)
    drawn = realised.sum(axis=0)
    window = pass_overlap(cast(MixtureSampler, make_sampler("mixture", n, 1, 0, schedule=True)))
    copy_ranges = [[int(c.min()), int(c.max())] for c in copies]
    balanced = all(
        lo == drawn[j] // sizes[j] and hi == -(-drawn[j] // sizes[j])
        for j, (lo, hi) in enumerate(copy_ranges)
    )
    return {
        "seconds": seconds,
        "count": read,
        "ok": in_range
        and balanced
        and realised.tolist() == targets
        and read == n
        and not any(window),
        "detail": {
            "realised": realised.tolist(),
            "copies": copy_ranges,
            "in_range": in_range,
            "read": read,
            "pass_overlap": window,
        },
    }


def pass_overlap(sampler: Any) -> list[int]:
    """Per source, the largest overlap (global positions) between consecutive passes."""
    import numpy as np

    chunk = 1 << 20

    n, sizes = sampler.epoch_length, np.asarray(sampler.mixture.sizes, dtype=np.int64)
    passes = int((n // sizes.min()) + 2)
    first = np.full((len(sizes), passes), n, dtype=np.int64)
    last = np.full((len(sizes), passes), -1, dtype=np.int64)
    for begin in range(0, n, chunk):
        positions = np.arange(begin, min(n, begin + chunk), dtype=np.int64)
        labels, draws = sampler._locate(EPOCH, positions)
        cells = labels.astype(np.int64) * passes + draws // sizes[labels]
        np.minimum.at(first.reshape(-1), cells, positions)
        np.maximum.at(last.reshape(-1), cells, positions)
    overlap = np.maximum(last[:, :-1] - first[:, 1:] + 1, 0)
    overlap[(last[:, :-1] < 0) | (first[:, 1:] >= n)] = 0
    return [int(v) for v in overlap.max(axis=1)]


def run_case(case: Case) -> dict[str, Any]:
    """Measure ``case`` in this process and return the result as a JSON-able dict."""
    if case.mode == "epoch":
        return run_epoch(case)
    if case.mode == "resume":
        return run_resume(case)
    return run_counts(case)


# --------------------------------------------------------------------------------------
# Parent: plan, spawn, aggregate, report.
# --------------------------------------------------------------------------------------


def _spawn(case: Case) -> Json:
    args = ["--case", case.impl, "--mode", case.mode]
    args += ["--n", str(case.n), "--world", str(case.world)]
    return spawn_json(__file__, args)


def measure(case: Case, repeat: int) -> Result:
    """Run ``case`` in ``repeat`` fresh subprocesses; keep the best times, highest peak."""
    runs, error = repeat_runs(lambda: _spawn(case), 1 if case.mode == "counts" else repeat)
    if error is not None:
        return Result(case, error=error)
    oks = [run.get("ok") for run in runs]
    return Result(
        case,
        count=int(runs[0].get("count", 0)),
        seconds=best_time(runs),
        cpu_seconds=best_time(runs, "cpu_seconds"),
        peak_mib=highest_peak(runs),
        save_seconds=best_time(runs, "save_seconds"),
        ok=None if oks[0] is None else all(oks),
        detail=cast("dict[str, Any]", runs[0].get("detail", {})),
    )


def plan(sizes: Sequence[int], world: int, check_max: int, worlds: Sequence[int]) -> list[Case]:
    """The cases to run: the W-scaling grid, then the main table, then the count checks."""
    cases = [Case(impl, "epoch", n, w) for n in sizes for w in worlds for impl in SCALING_IMPLS]
    for n in sizes:
        cases += [Case(impl, "epoch", n, world) for impl in IMPLS]
        cases += [Case(impl, "resume", n, world) for impl in IMPLS]
        if n <= check_max:
            cases.append(Case("mixture", "counts", n, world))
    unique = dict.fromkeys(cases)  # the grid already holds (mixture, feistel) at --world
    return list(unique)


def _name(impl: Impl) -> str:
    return "MixtureSampler" if impl == "mixture" else f"DistributedSampler ({impl})"


def _find(
    results: Sequence[Result], impl: Impl, mode: Mode, n: int, world: int | None = None
) -> Result | None:
    return next(
        (
            r
            for r in results
            if r.error is None
            and (r.case.impl, r.case.mode, r.case.n) == (impl, mode, n)
            and world in (None, r.case.world)
        ),
        None,
    )


def render_scaling(
    results: Sequence[Result], sizes: Sequence[int], worlds: Sequence[int]
) -> tuple[list[str], list[str], list[Json]]:
    """The W-scaling table, its verdicts, and its rows as JSON."""
    lines = table_header(
        "N",
        "W",
        "rank-0 indices",
        "mixture CPU s",
        "feistel CPU s",
        "mixture / feistel",
        "mixture M indices/s",
    )
    rows: list[Json] = []
    verdict = []
    for n in sizes:
        for w in worlds:
            mix = _find(results, "mixture", "epoch", n, w)
            plain = _find(results, "feistel", "epoch", n, w)
            if mix is None or plain is None:
                lines.append(table_row([fmt_n(n), str(w), "FAILED"], width=7))
                continue
            ratio = mix.cpu_seconds / plain.cpu_seconds
            rate = mix.count / mix.cpu_seconds
            lines.append(
                table_row(
                    [
                        fmt_n(n),
                        str(w),
                        f"{mix.count:,}",
                        f"{mix.cpu_seconds:.3f}",
                        f"{plain.cpu_seconds:.3f}",
                        f"{ratio:.1f}x",
                        f"{rate / 1e6:.2f}",
                    ]
                )
            )
            rows.append(
                {
                    "n": n,
                    "world": w,
                    "count": mix.count,
                    "mixture_cpu_s": mix.cpu_seconds,
                    "feistel_cpu_s": plain.cpu_seconds,
                    "ratio": ratio,
                    "mixture_rate": rate,
                }
            )
            if w == 512:
                verdict.append(
                    f"N={fmt_n(n)}, W=512: mixture {ratio:.1f}x the feistel sampler's CPU time "
                    f"(target <= {TARGET_RATIO_W512:g}x) — {mark(ratio <= TARGET_RATIO_W512)}"
                )
            if w == 1:
                verdict.append(
                    f"N={fmt_n(n)}, W=1: mixture {rate / 1e6:.2f} M indices/s (target >= "
                    f"{TARGET_RATE_W1 / 1e6:g} M) — {mark(rate >= TARGET_RATE_W1)}"
                )
    return lines, verdict, rows


def _check_text(ok: bool | None, passed: str, failed: str) -> str:
    return "—" if ok is None else passed if ok else failed


def render(results: Sequence[Result], sizes: Sequence[int]) -> tuple[list[str], bool]:
    """The main Markdown table (epoch and resume per sampler), and whether all passed."""
    lines = table_header(
        "N",
        "sampler",
        "rank-0 indices",
        "epoch s",
        "M indices/s",
        "epoch peak MiB",
        "mixture time / this",
        "resume → 1st index ms",
        "resume peak MiB",
        "save ms",
        "checks",
    )
    all_ok = not any(r.error for r in results)
    world = next((r.case.world for r in results if r.case.mode == "resume"), None)
    for n in sizes:
        mixture = _find(results, "mixture", "epoch", n, world)
        for impl in IMPLS:
            epoch = _find(results, impl, "epoch", n, world)
            resume = _find(results, impl, "resume", n)
            failed = [
                r
                for r in results
                if r.error and r.case.n == n and r.case.impl == impl and r.case.mode != "counts"
            ]
            if failed or epoch is None or resume is None:
                errors = "; ".join(f"{r.case.mode}: {r.error}" for r in failed) or "not run"
                lines.append(table_row([fmt_n(n), _name(impl), f"FAILED: {errors}"], width=11))
                continue
            checks = []
            if epoch.ok is not None:
                all_ok = all_ok and epoch.ok
                checks.append(
                    _check_text(epoch.ok, "source_counts = targets", "SOURCE_COUNTS ≠ TARGETS")
                )
            all_ok = all_ok and bool(resume.ok)
            checks.append(_check_text(resume.ok, "resume exact", "RESUME DIFFERS"))
            ratio = "—"
            if impl != "mixture" and mixture is not None:
                ratio = f"{mixture.seconds / epoch.seconds:.1f}x"
            e_cells = [f"{epoch.count:,}", f"{epoch.seconds:.3f}", f"{epoch.rate / 1e6:.2f}"]
            e_cells += [f"{epoch.peak_mib:.1f}", ratio]
            r_cells = [
                f"{resume.seconds * 1e3:.1f}",
                f"{resume.peak_mib:.1f}",
                f"{resume.save_seconds * 1e3:.2f}",
            ]
            cells = [fmt_n(n), _name(impl), *e_cells, *r_cells, ", ".join(checks) or "—"]
            lines.append(table_row(cells))
    return lines, all_ok


def render_counts(results: Sequence[Result], sizes: Sequence[int]) -> tuple[list[str], bool]:
    """The per-source count table of the mixture, and whether the counts matched."""
    lines = table_header(
        "N",
        "source",
        "size",
        "weight before → after",
        "target 1st / 2nd half",
        "source_counts()",
        "realised, all ranks",
        "copies per sample",
    )
    all_ok = True
    for n in sizes:
        epoch = _find(results, "mixture", "epoch", n, counts_world(results))
        counts = _find(results, "mixture", "counts", n)
        if epoch is None:  # the targets come from the child: the parent imports no package
            lines.append(table_row([fmt_n(n), "FAILED: mixture epoch case"], width=8))
            continue
        targets = epoch.detail["targets"]
        reported = epoch.detail.get("source_counts")
        realised = counts.detail.get("realised") if counts is not None else None
        copies = counts.detail.get("copies") if counts is not None else None
        if counts is not None:
            all_ok = all_ok and bool(counts.ok)
        for j, (name, size) in enumerate(zip(NAMES, source_sizes(n), strict=True)):
            want = (targets[0][j], targets[1][j])
            cells = [
                fmt_n(n),
                name,
                f"{size:,}",
                f"{WEIGHTS_BEFORE[name]:g} → {WEIGHTS_AFTER[name]:g}",
                f"{want[0]:,} / {want[1]:,}",
            ]
            for got in (reported, realised):
                if got is None:
                    cells.append("not run")
                    continue
                pair = (got[0][j], got[1][j])
                mark = "" if pair == want else " ✗"
                cells.append(f"{pair[0]:,} / {pair[1]:,}{mark}")
            cells.append("not run" if copies is None else f"{copies[j][0]}-{copies[j][1]}")
            lines.append(table_row(cells))
    checked = [r for r in results if r.case.mode == "counts" and r.error is None]
    for r in checked:
        d = r.detail
        lines.append("")
        lines.append(
            f"N={fmt_n(r.case.n)}: read all {r.case.world} ranks ({d['read']:,} indices, "
            f"{r.seconds:.1f} s, untimed check): in range: {d['in_range']}; realised counts "
            f"= targets and copies per sample = floor/ceil(draws / size): "
            f"{'yes' if r.ok else 'NO'}; largest overlap of consecutive passes, per source: "
            f"{d['pass_overlap']} positions"
        )
    return lines, all_ok


def counts_world(results: Sequence[Result]) -> int | None:
    """The world size of the main table (that of the resume cases)."""
    return next((r.case.world for r in results if r.case.mode == "resume"), None)


def verdicts(results: Sequence[Result], sizes: Sequence[int]) -> list[str]:
    """Summary lines: the mixture beside the plain sampler, and the flatness claims."""
    lines = []
    world = counts_world(results)
    for n in sizes:
        mix = _find(results, "mixture", "epoch", n, world)
        mix_resume = _find(results, "mixture", "resume", n)
        if mix is None:
            lines.append(f"N={fmt_n(n)}: mixture n/a (failed)")
            continue
        parts = []
        for impl in IMPLS[1:]:
            plain = _find(results, impl, "epoch", n, world)
            plain_resume = _find(results, impl, "resume", n)
            if plain is None or plain_resume is None or mix_resume is None:
                parts.append(f"{impl} n/a")
                continue
            parts.append(
                f"vs {impl}: {plain.seconds / mix.seconds:.2f}x the speed, "
                f"{mix.peak_mib:.1f} vs {plain.peak_mib:.1f} MiB peak, resume "
                f"{mix_resume.seconds * 1e3:.0f} vs {plain_resume.seconds * 1e3:.0f} ms"
            )
        lines.append(f"N={fmt_n(n)}: mixture {mix.rate / 1e6:.2f} M indices/s; " + "; ".join(parts))

    epochs = sorted(
        (
            r
            for r in results
            if r.error is None
            and r.case.impl == "mixture"
            and r.case.mode == "epoch"
            and r.case.world == world
        ),
        key=lambda r: r.case.n,
    )
    resumes = sorted(
        (
            r
            for r in results
            if r.error is None and r.case.impl == "mixture" and r.case.mode == "resume"
        ),
        key=lambda r: r.case.n,
    )
    if len(epochs) < 2:
        lines.append("mixture peak memory flat in N: n/a (needs two sizes)")
    else:
        small, large = epochs[0], epochs[-1]
        flat = large.peak_mib - small.peak_mib <= FLAT_MEMORY_SLACK_MIB
        lines.append(
            f"mixture peak memory flat in N: {small.peak_mib:.1f} MiB at {fmt_n(small.case.n)} "
            f"vs {large.peak_mib:.1f} MiB at {fmt_n(large.case.n)} "
            f"(within {FLAT_MEMORY_SLACK_MIB:g} MiB) — {mark(flat)}"
        )
    if len(resumes) < 2:
        lines.append("mixture resume cost flat in N: n/a (needs two sizes)")
    else:
        small, large = resumes[0], resumes[-1]
        limit = small.seconds * FLAT_RESUME_FACTOR + FLAT_RESUME_SLACK_S
        lines.append(
            f"mixture resume cost flat in N: {small.seconds * 1e3:.0f} ms at "
            f"{fmt_n(small.case.n)} vs {large.seconds * 1e3:.0f} ms at {fmt_n(large.case.n)} "
            f"(within {FLAT_RESUME_FACTOR:g}x + {FLAT_RESUME_SLACK_S * 1e3:g} ms) "
            f"— {mark(large.seconds <= limit)}"
        )
    return lines


def write_json(
    args: argparse.Namespace,
    rows: list[Json],
    verdict: list[str],
    results: Sequence[Result],
    tables: dict[str, list[str]],
) -> None:
    """Write the W-scaling rows (and how they were measured) to ``args.json``."""
    counts = [r for r in results if r.case.mode == "counts" and r.error is None]
    document = {
        "command": "benchmarks/bench_mixture.py" + (" --quick" if args.quick else ""),
        "python": python_version(),
        "numpy": package_version("numpy"),
        "load_average": load_average(),
        "conditions": "rank 0, one thread pinned to one CPU, fresh process per case, "
        f"best of {args.repeat}; CPU seconds (time.process_time) of one full epoch",
        "scaling": rows,
        "verdicts": verdict,
        "pass_overlap": {str(r.case.n): r.detail["pass_overlap"] for r in counts},
        "world": args.world,
        "tables": tables,  # the main and per-source count tables, as printed (Markdown)
    }
    path = REPO_ROOT / args.json
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n")
    progress(f"wrote {path.relative_to(REPO_ROOT)}")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line interface (parent and ``--case`` child modes)."""
    parser = argument_parser(__doc__)
    parser.add_argument(
        "--sizes",
        type=parse_counts,
        default=[4 * 10**6, 10**8],
        help="total samples of the three sources (default 4e6,1e8)",
    )
    parser.add_argument(
        "--worlds",
        type=parse_counts,
        default=list(WORLDS),
        help="world sizes of the W-scaling table (default 1,8,64,512)",
    )
    parser.add_argument("--quick", action="store_true", help="CI smoke: --sizes 4e6")
    parser.add_argument("--json", default=RESULTS, help=f"results file (default {RESULTS})")
    parser.add_argument("--repeat", type=parse_count, default=1, help="best of k (default 1)")
    parser.add_argument(
        "--world", type=parse_count, default=8, help="data-parallel world size (default 8)"
    )
    parser.add_argument(
        "--check-max",
        type=parse_count,
        default=10**7,
        help="read all ranks to check realised counts for N up to this (default 1e7)",
    )
    child = parser.add_argument_group("child mode (one measurement, used internally)")
    child.add_argument("--case", choices=IMPLS, help="measure one sampler, print JSON")
    child.add_argument("--mode", choices=MODES, default="epoch", help="what --case measures")
    child.add_argument("--n", type=parse_count, help="total size of --case")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark (or, with ``--case``, one measurement) and return the exit code."""
    args = parse_args(argv)
    minimum = 2 * (RESUME_OFFSET + RESUME_WINDOW) * args.world
    if args.case is None and any(n < minimum for n in args.sizes):
        raise SystemExit(f"sizes must be >= {minimum:,} for --world {args.world}")
    if args.case is not None:
        if args.n is None:
            raise SystemExit("--case needs --n")
        case = Case(cast(Impl, args.case), cast(Mode, args.mode), args.n, args.world)
        print(json.dumps(run_case(case)))
        return 0

    if args.quick:
        args.sizes = [4 * 10**6]
    cases = plan(args.sizes, args.world, args.check_max, args.worlds)
    print(
        f"# MixtureSampler vs DistributedSampler: rank {RANK} of {args.world}, seed={SEED}, "
        f"epoch {EPOCH}, drop_last=True; sources {'/'.join(NAMES)} sized "
        f"{':'.join(map(str, RATIO))}, weights {WEIGHTS_BEFORE} -> {WEIGHTS_AFTER} at N // 2; "
        f"one thread, one CPU, fresh process per case; best of {args.repeat}; "
        f"python {python_version()}",
        flush=True,
    )
    results = []
    for case in cases:
        result = measure(case, args.repeat)
        status = result.error or f"{result.seconds:.3f} s, {result.peak_mib:.1f} MiB"
        progress(f"  {case.impl:>8} {case.mode:<6} N={fmt_n(case.n):<6} W={case.world:<4} {status}")
        results.append(result)

    scaling, scaling_verdicts, rows = render_scaling(results, args.sizes, args.worlds)
    print_block(scaling)
    print_block(scaling_verdicts)
    table, table_ok = render(results, args.sizes)
    counts, counts_ok = render_counts(results, args.sizes)
    print_block(table)
    print_block(counts)
    print_block(verdicts(results, args.sizes))
    all_ok = table_ok and counts_ok
    write_json(args, rows, scaling_verdicts, results, {"main": table, "counts": counts})
    if not all_ok:
        print("\nFAILED: a case crashed or a check failed (see tables).")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
