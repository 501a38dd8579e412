"""Plumbing shared by the benchmark scripts in this folder.

The scripts run every measurement in a fresh subprocess (the script itself in a child
mode), pinned to one CPU with one thread, and read its result back as one JSON line. This
module holds what they share: spawning a child and parsing its result, the peak-memory
meter, best-of-k aggregation, command-line counts, and the pieces of the report (Markdown
tables, verdict marks, load average, versions, progress lines).

It imports nothing heavy (no torch, no numpy, not the package): a parent process stays
light, and a child imports what it measures itself.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import resource
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, cast

REPO_ROOT = Path(__file__).resolve().parent.parent
CHILD_TIMEOUT_S = 1800

Json = dict[str, Any]
"""A child's result: the JSON object it prints last; ``{"error": ...}`` if it failed."""


# --------------------------------------------------------------------------------------
# Child side: the conditions of a measurement.
# --------------------------------------------------------------------------------------


def pin_to_one_cpu() -> None:
    """Pin this process to one CPU (the lowest it may use), where the OS supports it."""
    if hasattr(os, "sched_getaffinity") and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def one_torch_thread() -> None:
    """Make torch run its operators on one thread (imports torch)."""
    import torch

    torch.set_num_threads(1)


def peak_kib() -> int:
    """This process's peak resident set size so far, in KiB (Linux's ``ru_maxrss`` unit)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def peak_mib_since(baseline_kib: int) -> float:
    """Growth of the peak resident set size over ``baseline_kib`` (a ``peak_kib()``), MiB."""
    return (peak_kib() - baseline_kib) / 1024


# --------------------------------------------------------------------------------------
# Parent side: spawning children and aggregating their results.
# --------------------------------------------------------------------------------------


def child_env() -> dict[str, str]:
    """This process's environment for a child, with one OpenMP/MKL/OpenBLAS thread.

    The repository root comes first on ``PYTHONPATH``: the package imports uninstalled.
    """
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = "1"
    paths = [str(REPO_ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def spawn_json(script: str, args: Sequence[str], timeout_s: float = CHILD_TIMEOUT_S) -> Json:
    """Run ``python script *args`` in a fresh process and return its JSON result.

    The result is the last line of the child's stdout, parsed; if the child failed,
    ``{"error": "exit CODE: last line of stderr"}``. Raises ``subprocess.TimeoutExpired``
    if the child runs longer than ``timeout_s``.
    """
    command = [sys.executable, str(Path(script).resolve()), *args]
    done = subprocess.run(
        command,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or [f"killed by signal {-done.returncode}"]
        return {"error": f"exit {done.returncode}: {tail[0]}"}
    return cast(Json, json.loads(done.stdout.strip().splitlines()[-1]))


def repeat_runs(run_once: Callable[[], Json], repeat: int) -> tuple[list[Json], str | None]:
    """Call ``run_once`` ``repeat`` times; return the results and the first error, if any."""
    runs = [run_once() for _ in range(repeat)]
    errors = (str(run["error"]) for run in runs if "error" in run)
    return runs, next(errors, None)


def best_time(runs: Iterable[Json], key: str = "seconds") -> float:
    """The lowest ``key`` over ``runs`` (best of k); NaN where a run has no ``key``."""
    return min(float(run.get(key, float("nan"))) for run in runs)


def highest_peak(runs: Iterable[Json], key: str = "peak_mib") -> float:
    """The highest ``key`` over ``runs``; NaN where a run has no ``key``."""
    return max(float(run.get(key, float("nan"))) for run in runs)


# --------------------------------------------------------------------------------------
# Command line.
# --------------------------------------------------------------------------------------


def argument_parser(doc: str | None) -> argparse.ArgumentParser:
    """An argument parser described by the first line of ``doc`` (the script's docstring)."""
    return argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)


def parse_count(text: str) -> int:
    """Parse ``"1e7"``, ``"10000000"`` or ``"10_000_000"`` as an exact positive int."""
    try:
        value = int(text)
    except ValueError:
        number = float(text)
        if not number.is_integer():
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        value = int(number)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
    return value


def parse_counts(text: str) -> list[int]:
    """Parse a comma-separated list of counts; empty means none."""
    return [parse_count(part) for part in text.split(",") if part.strip()]


# --------------------------------------------------------------------------------------
# Report.
# --------------------------------------------------------------------------------------


def fmt_n(n: int) -> str:
    """``10**7`` -> ``1e7``; other counts with thousands separators."""
    exponent = len(str(n)) - 1
    return f"1e{exponent}" if n == 10**exponent else f"{n:,}"


def mark(passed: bool) -> str:
    """A verdict line's mark: ``PASS`` or ``MISS`` (a missed target is not a failure)."""
    return "PASS" if passed else "MISS"


def table_header(*columns: str) -> list[str]:
    """The first two lines of a Markdown table with these column titles."""
    return [table_row(columns), "|" + "---|" * len(columns)]


def table_row(cells: Sequence[str], width: int | None = None) -> str:
    """A Markdown table row; with ``width``, empty cells pad it to that many columns."""
    padding = 0 if width is None else width - len(cells)
    return "| " + " | ".join(cells) + " |" + " |" * padding


def print_block(lines: Iterable[str], *, flush: bool = False) -> None:
    """Print an empty line, then ``lines``."""
    print()
    print("\n".join(lines), flush=flush)


def progress(text: str) -> None:
    """A progress line on stderr (stdout holds the report), shown at once."""
    print(text, file=sys.stderr, flush=True)


def python_version() -> str:
    """This interpreter's version, e.g. ``3.11.7``."""
    return sys.version.split()[0]


def package_version(package: str) -> str:
    """The installed version of ``package``, or ``?``."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def load_average() -> str:
    """The load averages: other processes on the machine skew every timing."""
    if not hasattr(os, "getloadavg"):
        return "load average n/a"
    return "load average " + " ".join(f"{value:.2f}" for value in os.getloadavg())
