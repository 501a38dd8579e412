"""Benchmark one epoch of ``DistributedSampler`` indices against torch's.

Run from the repository root::

    .venv/bin/python benchmarks/bench_sampler.py              # full run (several minutes)
    .venv/bin/python benchmarks/bench_sampler.py --quick      # CI smoke (seconds)
    .venv/bin/python benchmarks/bench_sampler.py --sizes 1e6,1e7 --repeat 3

What it measures: the indices of one epoch for rank 0 of 8 (``shuffle=True``, ``seed=0``,
``set_epoch(1)``, dataset ``range(N)``), consumed with ``for _ in sampler: pass``, for

* ``torch``: ``torch.utils.data.DistributedSampler``;
* ``randperm``: ``lightning_resumable_data.DistributedSampler`` (default algorithm, yields
  torch's exact order);
* ``feistel``: the same sampler with ``algorithm="feistel"`` (O(1) memory);
* ``torch.randperm``: the kernel torch's sampler runs per epoch, ``torch.randperm(N)`` alone
  (no Python iteration): the per-index cost of torch's shuffle itself;
* ``feistel-kernel``: ``feistel_slice`` over the epoch's positions in chunks of 65,536
  (NumPy only, no Python iteration): the per-index cost of our shuffle itself. Its ratio
  columns compare it with ``torch.randperm`` (the samplers' with torch's sampler).

``--sizes`` (default 1e6, 1e7, 1e8) runs all five; ``--feistel-sizes`` (default 1e9, 1e10)
runs ``feistel`` and ``feistel-kernel`` alone (torch cannot), reading a fixed budget of the
first ``--budget`` (default 20,000,000) indices instead of the whole epoch.

Every measurement runs in a fresh subprocess (this script with ``--case``), pinned to one
CPU with one torch/OpenMP/MKL thread. Time is the wall time of the loop (including
``iter()``, where both samplers build the epoch's permutation); peak memory is the growth
of ``ru_maxrss`` over a baseline taken after the imports and after building the dataset.
With ``--repeat k`` each case runs in k fresh subprocesses: the best (lowest) time and the
highest peak memory are reported.

For N <= ``--check-max`` (default 1e7) each case also hashes the indices it yields in a
second, untimed pass: ``randperm`` must match torch's sequence exactly, and every sampler's
indices must be distinct and in ``[0, N)``.

The table ends with verdict lines for the acceptance targets: randperm at least 5x faster
than torch at 1e7; feistel peak memory flat in N (here: at most 16 MiB more at the largest
N than at the smallest); the feistel sampler at least 10 million indices/s (read at the
largest N); the feistel kernel at least 20 million indices/s at 1e7 and at 1e10, with its
ratio to ``torch.randperm`` and to torch's sampler at 1e7. The rows are also written as
JSON (``--json``, default ``benchmarks/results/sampler.json``).
Missed performance targets are reported, not fatal: the exit status is 0 unless a case
crashed or a sequence check failed.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from _harness import (
    REPO_ROOT,
    Json,
    argument_parser,
    best_time,
    fmt_n,
    highest_peak,
    mark,
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

NUM_REPLICAS = 8
RANK = 0
SEED = 0
EPOCH = 1
SPEED_TARGET = 10_000_000  # feistel sampler indices per second on one core
KERNEL_TARGET = 20_000_000  # feistel_slice indices per second on one core (NumPy only)
KERNEL_CHUNK = 65_536  # positions per feistel_slice call, as the sampler reads them
RESULTS = "benchmarks/results/sampler.json"
SPEEDUP_TARGET = 5.0  # randperm vs torch at N = 1e7
FLAT_MEMORY_SLACK_MIB = 16.0  # feistel peak at the largest N vs the smallest

Impl = Literal["torch", "randperm", "feistel", "torch.randperm", "feistel-kernel"]
IMPLS: tuple[Impl, ...] = ("torch", "randperm", "feistel", "torch.randperm", "feistel-kernel")
KERNELS: tuple[Impl, ...] = ("torch.randperm", "feistel-kernel")


@dataclass(frozen=True)
class Case:
    """One measurement: a sampler, a dataset size and how many indices to read."""

    impl: Impl
    n: int
    budget: int | None = None  # read only the first `budget` indices of the epoch
    check: bool = False  # hash and validate the yielded sequence (untimed)


@dataclass(frozen=True)
class Result:
    """What one case measured (best of its repeats), or why it failed."""

    case: Case
    count: int = 0  # indices timed
    epoch_count: int = 0  # indices rank 0 has in the full epoch
    seconds: float = float("nan")
    peak_mib: float = float("nan")
    digest: str | None = None
    valid: bool | None = None  # distinct and in [0, n)
    error: str | None = None

    @property
    def rate(self) -> float:
        """Indices per second."""
        return self.count / self.seconds if self.seconds > 0 else float("inf")


# --------------------------------------------------------------------------------------
# Child: one measurement in a fresh process.
# --------------------------------------------------------------------------------------


def run_case(case: Case) -> dict[str, object]:
    """Measure ``case`` in this process and return the result as a JSON-able dict."""
    pin_to_one_cpu()
    import numpy as np
    import torch
    import torch.utils.data

    from lightning_resumable_data import DistributedSampler

    torch.set_num_threads(1)
    dataset = range(case.n)
    baseline = peak_kib()
    if case.impl in KERNELS:
        return run_kernel(case, baseline)

    sampler: torch.utils.data.DistributedSampler[int]
    if case.impl == "torch":
        # torch only needs len(dataset); its annotation asks for a Dataset.
        sampler = torch.utils.data.DistributedSampler(
            cast("torch.utils.data.Dataset[int]", dataset),
            num_replicas=NUM_REPLICAS,
            rank=RANK,
            shuffle=True,
            seed=SEED,
        )
    else:
        sampler = DistributedSampler(
            dataset,
            num_replicas=NUM_REPLICAS,
            rank=RANK,
            shuffle=True,
            seed=SEED,
            algorithm="feistel" if case.impl == "feistel" else "randperm",
        )
    sampler.set_epoch(EPOCH)
    epoch_count = len(sampler)
    count = epoch_count if case.budget is None else min(case.budget, epoch_count)

    def indices() -> Iterable[int]:
        return sampler if count == epoch_count else itertools.islice(sampler, count)

    start = time.perf_counter()
    for _ in indices():
        pass
    seconds = time.perf_counter() - start
    peak_mib = peak_mib_since(baseline)

    digest: str | None = None
    valid: bool | None = None
    if case.check:  # after the peak was read: this pass may allocate more
        values = np.fromiter(indices(), dtype=np.int64, count=count)
        digest = hashlib.sha256(values.tobytes()).hexdigest()[:16]
        in_range = bool(values.min() >= 0) and bool(values.max() < case.n)
        valid = in_range and np.unique(values).size == count
    return {
        "count": count,
        "epoch_count": epoch_count,
        "seconds": seconds,
        "peak_mib": peak_mib,
        "digest": digest,
        "valid": valid,
    }


def run_kernel(case: Case, baseline: int) -> dict[str, object]:
    """Measure a shuffle kernel alone: ``torch.randperm(n)`` or chunked ``feistel_slice``."""
    import numpy as np
    import torch

    from lightning_resumable_data.index import feistel_slice

    count = case.n if case.budget is None else min(case.budget, case.n)

    def produce(keep: bool) -> list[Any]:
        """Compute the ``count`` indices; keep them only for the (untimed) check."""
        if case.impl == "torch.randperm":
            generator = torch.Generator().manual_seed(SEED + EPOCH)
            return [torch.randperm(case.n, generator=generator).numpy()]
        kept = []
        for begin in range(0, count, KERNEL_CHUNK):
            chunk = feistel_slice(case.n, SEED, EPOCH, begin, min(begin + KERNEL_CHUNK, count))
            if keep:
                kept.append(chunk)
        return kept

    start = time.perf_counter()
    produce(keep=False)
    seconds = time.perf_counter() - start
    peak_mib = peak_mib_since(baseline)
    valid: bool | None = None
    if case.check:  # after the peak was read
        array = np.concatenate(produce(keep=True))
        valid = bool(array.min() >= 0 and array.max() < case.n) and np.unique(array).size == count
    return {
        "count": count,
        "epoch_count": case.n,
        "seconds": seconds,
        "peak_mib": peak_mib,
        "digest": None,
        "valid": valid,
    }


# --------------------------------------------------------------------------------------
# Parent: plan, spawn, aggregate, report.
# --------------------------------------------------------------------------------------


def _spawn(case: Case) -> Json:
    args = ["--case", case.impl, "--n", str(case.n)]
    if case.budget is not None:
        args += ["--budget", str(case.budget)]
    if case.check:
        args.append("--check")
    return spawn_json(__file__, args)


def measure(case: Case, repeat: int) -> Result:
    """Run ``case`` in ``repeat`` fresh subprocesses; keep the best time, highest peak."""
    runs, error = repeat_runs(lambda: _spawn(case), repeat)
    if error is not None:
        return Result(case, error=error)
    digests = {run["digest"] for run in runs}
    first = runs[0]
    return Result(
        case,
        count=cast(int, first["count"]),
        epoch_count=cast(int, first["epoch_count"]),
        seconds=best_time(runs),
        peak_mib=highest_peak(runs),
        digest=cast("str | None", first["digest"]) if len(digests) == 1 else "unstable",
        valid=all(run["valid"] is not False for run in runs) if case.check else None,
    )


def plan(
    sizes: Sequence[int], feistel_sizes: Sequence[int], budget: int, check_max: int
) -> list[Case]:
    """The cases to run, in table order."""
    cases = [Case(impl, n, check=n <= check_max) for n in sizes for impl in IMPLS]
    cases += [
        Case(impl, n, budget=budget, check=n <= check_max)
        for n in feistel_sizes
        for impl in ("feistel", "feistel-kernel")
    ]
    return cases


def _ratio(numerator: float, denominator: float) -> str:
    if not denominator > 0 or numerator != numerator or denominator != denominator:
        return "n/a"
    return f"{numerator / denominator:.1f}x"


def _check_cell(result: Result, reference: Result | None) -> tuple[str, bool]:
    """Text of the check column and whether the check passed."""
    if not result.case.check:
        return "not checked", True
    ok = result.valid is not False
    text = "distinct, in range" if ok else "INVALID (repeats or out of range)"
    if result.case.impl == "randperm" and reference is not None and reference.error is None:
        same = result.digest is not None and result.digest == reference.digest
        ok = ok and same
        text = "identical to torch" if same else "DIFFERS FROM TORCH"
    elif result.case.impl == "feistel":
        text += " (own order)"
    return text, ok


def render(results: Sequence[Result]) -> tuple[list[str], bool]:
    """Markdown table lines, and whether every case ran and passed its checks."""
    torch_rows = {r.case.n: r for r in results if r.case.impl == "torch" and r.error is None}
    randperm_rows = {
        r.case.n: r for r in results if r.case.impl == "torch.randperm" and r.error is None
    }
    lines = table_header(
        "N",
        "sampler",
        "indices timed",
        "seconds",
        "M indices/s",
        "peak MiB",
        "time torch/ours",
        "mem torch/ours",
        "check",
    )
    all_ok = True
    for r in results:
        name = r.case.impl if r.case.impl.startswith("torch") else f"ours ({r.case.impl})"
        if r.error is not None:
            all_ok = False
            lines.append(table_row([fmt_n(r.case.n), name, f"FAILED: {r.error}"], width=9))
            continue
        if r.count == r.epoch_count:
            timed = f"{r.count:,} (full epoch)"
        else:
            timed = f"first {r.count:,} of {r.epoch_count:,} (budget)"
        rows = randperm_rows if r.case.impl == "feistel-kernel" else torch_rows
        reference = rows.get(r.case.n)
        if r.case.impl.startswith("torch") or reference is None:
            time_ratio = mem_ratio = "—"
        else:
            time_ratio = _ratio(reference.seconds, r.seconds)
            mem_ratio = _ratio(reference.peak_mib, r.peak_mib)
        check, ok = _check_cell(r, reference)
        all_ok = all_ok and ok
        lines.append(
            f"| {fmt_n(r.case.n)} | {name} | {timed} | {r.seconds:.3f} | {r.rate / 1e6:.2f} "
            f"| {r.peak_mib:.1f} | {time_ratio} | {mem_ratio} | {check} |"
        )
    return lines, all_ok


def verdicts(results: Sequence[Result]) -> list[str]:
    """The acceptance-criterion summary lines."""
    ok = [r for r in results if r.error is None]

    def find(impl: Impl, n: int) -> Result | None:
        return next((r for r in ok if r.case.impl == impl and r.case.n == n), None)

    lines = []
    torch_1e7, ours_1e7 = find("torch", 10**7), find("randperm", 10**7)
    if torch_1e7 is None or ours_1e7 is None:
        lines.append("randperm vs torch at 1e7: n/a (not measured)")
    else:
        speedup = torch_1e7.seconds / ours_1e7.seconds
        lines.append(
            f"randperm vs torch at 1e7: {speedup:.1f}x faster "
            f"(target {SPEEDUP_TARGET:g}x) — {mark(speedup >= SPEEDUP_TARGET)}"
        )

    lines += kernel_verdicts(ok)
    feistel = sorted((r for r in ok if r.case.impl == "feistel"), key=lambda r: r.case.n)
    if len(feistel) < 2:
        lines.append("feistel peak memory: n/a (needs two sizes)")
    else:
        small, large = feistel[0], feistel[-1]
        flat = large.peak_mib - small.peak_mib <= FLAT_MEMORY_SLACK_MIB
        lines.append(
            f"feistel peak memory at {fmt_n(small.case.n)} vs {fmt_n(large.case.n)}: "
            f"{small.peak_mib:.1f} MiB vs {large.peak_mib:.1f} MiB "
            f"(flat: within {FLAT_MEMORY_SLACK_MIB:g} MiB) — {mark(flat)}"
        )
    if not feistel:
        lines.append("feistel speed: n/a (not measured)")
    else:
        # Throughput at the largest N (a long read, start-up costs amortised); the range
        # over all rows shows how much the short small-N epochs pay for start-up.
        largest = feistel[-1]
        rates = [r.rate / 1e6 for r in feistel]
        lines.append(
            f"feistel speed: {largest.rate / 1e6:.1f} M indices/s "
            f"(target {SPEED_TARGET / 1e6:g}M; at N={fmt_n(largest.case.n)}, "
            f"{largest.count:,} indices; all rows {min(rates):.1f}-{max(rates):.1f}M) "
            f"— {mark(largest.rate >= SPEED_TARGET)}"
        )
    return lines


def kernel_verdicts(ok: Sequence[Result]) -> list[str]:
    """Feistel kernel speed at 1e7 and 1e10, with its ratio to torch's at 1e7."""

    def find(impl: Impl, n: int) -> Result | None:
        return next((r for r in ok if r.case.impl == impl and r.case.n == n), None)

    lines = []
    for n in (10**7, 10**10):
        kernel = find("feistel-kernel", n)
        if kernel is None:
            lines.append(f"feistel kernel at {fmt_n(n)}: n/a (not measured)")
            continue
        text = (
            f"feistel kernel at {fmt_n(n)}: {kernel.rate / 1e6:.1f} M indices/s "
            f"(target {KERNEL_TARGET / 1e6:g}M)"
        )
        for impl in ("torch.randperm", "torch"):
            torch_row = find(impl, n)
            if torch_row is not None:
                text += f"; {kernel.rate / torch_row.rate:.2f}x {impl}'s indices/s"
        lines.append(f"{text} — {mark(kernel.rate >= KERNEL_TARGET)}")
    return lines


def write_json(path: str, results: Sequence[Result], verdict_lines: Sequence[str]) -> None:
    """Write every row (and the verdicts) to ``path``, relative to the repository root."""
    rows = [
        {
            "impl": r.case.impl,
            "n": r.case.n,
            "budget": r.case.budget,
            "count": r.count,
            "seconds": r.seconds,
            "indices_per_s": r.rate if r.error is None else None,
            "peak_mib": r.peak_mib,
            "valid": r.valid,
            "error": r.error,
        }
        for r in results
    ]
    target = REPO_ROOT / path
    target.parent.mkdir(parents=True, exist_ok=True)
    payload = {"python": python_version(), "rows": rows, "verdicts": list(verdict_lines)}
    target.write_text(json.dumps(payload, indent=1, allow_nan=True) + "\n")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line interface (parent and ``--case`` child modes)."""
    parser = argument_parser(__doc__)
    parser.add_argument(
        "--sizes",
        type=parse_counts,
        default=[10**6, 10**7, 10**8],
        help="dataset sizes for torch vs randperm vs feistel (default 1e6,1e7,1e8)",
    )
    parser.add_argument(
        "--feistel-sizes",
        type=parse_counts,
        default=[10**9, 10**10],
        help="feistel-only sizes, read up to --budget indices (default 1e9,1e10)",
    )
    parser.add_argument(
        "--budget",
        type=parse_count,
        default=None,
        help="indices read at --feistel-sizes (default 2e7; 2e6 with --quick)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="CI smoke: --sizes 1e6,1e7 --feistel-sizes 1e10 --budget 2e6",
    )
    parser.add_argument("--repeat", type=parse_count, default=1, help="best of k (default 1)")
    parser.add_argument(
        "--check-max",
        type=parse_count,
        default=10**7,
        help="verify sequences for N up to this (default 1e7)",
    )
    parser.add_argument("--json", default=RESULTS, help=f"JSON results path (default {RESULTS})")
    child = parser.add_argument_group("child mode (one measurement, used internally)")
    child.add_argument("--case", choices=IMPLS, help="measure one sampler, print JSON")
    child.add_argument("--n", type=parse_count, help="dataset size of --case")
    child.add_argument("--check", action="store_true", help="hash and validate (--case)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark (or, with ``--case``, one measurement) and return the exit code."""
    args = parse_args(argv)
    if args.case is not None:
        if args.n is None:
            raise SystemExit("--case needs --n")
        case = Case(cast(Impl, args.case), args.n, budget=args.budget, check=args.check)
        print(json.dumps(run_case(case)))
        return 0

    budget = args.budget or (2_000_000 if args.quick else 20_000_000)
    if args.quick:
        args.sizes, args.feistel_sizes = [10**6, 10**7], [10**10]
    cases = plan(args.sizes, args.feistel_sizes, budget, args.check_max)
    print(
        f"# DistributedSampler: one epoch, rank {RANK} of {NUM_REPLICAS}, shuffle=True, "
        f"seed={SEED}, set_epoch({EPOCH}); one thread, one CPU, fresh process per case; "
        f"best of {args.repeat}; python {python_version()}",
        flush=True,
    )
    results = []
    for case in cases:
        result = measure(case, args.repeat)
        status = result.error or f"{result.seconds:.3f} s, {result.peak_mib:.1f} MiB"
        progress(f"  {case.impl:>8} N={fmt_n(case.n):<6} {status}")
        results.append(result)

    table, all_ok = render(results)
    print_block(table)
    verdict_lines = verdicts(results)
    print_block(verdict_lines)
    write_json(args.json, results, verdict_lines)
    if not all_ok:
        print("\nFAILED: a case crashed or a sequence check failed (see table).")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
