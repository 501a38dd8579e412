"""Every benchmark script runs, in its ``--quick`` form, so that none can rot (issue 26).

Each runs from a copy of ``benchmarks/`` (and the test helpers a script imports) under a
temporary folder: what it writes (``benchmarks/results/*.json``) lands there, and the
repository's results, and the docs tables generated from them, stay as committed. The
numbers are not checked here (the machine is shared); that the script completes, reports,
and that the JSON it writes parses, is.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
QUICK = {  # script: its arguments, each at its smallest (one repeat): CI runs every code path
    "bench_documents.py": ["--counts", "1e4", "--repeat", "1"],
    "bench_formats.py": ["--quick"],  # no peers here: stand-in MDS/tar writers, our rows only
    "bench_formats_remote.py": ["--quick"],  # the same, from a local S3 behind a slow proxy
    "bench_guard.py": ["--calls", "20000", "--repeat", "2"],  # no --quick: seconds as it is
    "bench_lightning_overhead.py": ["--quick"],
    "bench_loader.py": ["--quick"],
    "bench_mixture.py": ["--quick", "--repeat", "1"],
    "bench_mixture_peers.py": ["--quick"],  # without Grain here: this library's rows
    "bench_mixture_ranks.py": ["--quick"],
    "bench_peers.py": ["--quick", "--repeat", "1"],  # peers not installed here: skipped, noted
    "bench_provenance.py": ["--quick"],
    "bench_remote.py": ["--quick", "--repeat", "1"],  # this library's rows (peers: own venv)
    "bench_sampler.py": ["--sizes", "1e6", "--feistel-sizes", "1e10", "--budget", "2e6"],
    "bench_seeding.py": ["--quick", "--repeat", "1"],
    "bench_shard_resume.py": ["--quick"],
    "bench_shards.py": ["--quick"],
}
NOT_RUN = {  # and why
    "bench_remote_ranges.py": "no quick form: minutes of S3 and HTTP range reads",
}


def test_every_benchmark_script_is_listed() -> None:
    scripts = {path.name for path in (REPO / "benchmarks").glob("bench_*.py")}
    assert scripts == set(QUICK) | set(NOT_RUN)


@pytest.mark.parametrize("script", sorted(QUICK))
def test_benchmark_runs_quick(script: str, tmp_path: Path) -> None:
    shutil.copytree(REPO / "benchmarks", tmp_path / "benchmarks")
    (tmp_path / "tests").mkdir()
    shutil.copy(REPO / "tests" / "remote_servers.py", tmp_path / "tests")
    before = {p.name: p.read_bytes() for p in (REPO / "benchmarks" / "results").glob("*")}
    run = subprocess.run(
        [sys.executable, str(tmp_path / "benchmarks" / script), *QUICK[script]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert run.stdout.strip(), run.stderr[-2000:]  # it reported something
    for written in (tmp_path / "benchmarks" / "results").glob("*.json"):
        json.loads(written.read_text())
    after = {p.name: p.read_bytes() for p in (REPO / "benchmarks" / "results").glob("*")}
    assert after == before  # the committed results are untouched
