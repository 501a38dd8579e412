"""The long statistical battery of the ``"feistel"`` shuffle, run on demand (not by pytest).

Run from the repository root::

    .venv/bin/python tests/statistics/battery.py            # full battery (a few minutes)
    .venv/bin/python tests/statistics/battery.py --quick    # smoke run (seconds)
    .venv/bin/python tests/statistics/battery.py --render   # docs page from the saved JSON

It writes ``tests/statistics/report.json`` (every statistic) and renders the Markdown page
``docs/statistics.md`` from that JSON alone. Every table holds three sources under the same
test: ``feistel`` (the public :func:`feistel_slice`: the exact keyed shuffle up to
``EXACT_THRESHOLD``, the network above), ``network`` (the Feistel network forced below the
threshold, to show the margin) and ``numpy`` (``Generator.permutation``, the control). A
test passes at ``|z| < 4.5`` (one-sided for chi-square); see ``laws.py``.

Importing this module runs nothing (pytest imports it for doctests).

Example:
    >>> verdict(1.0), verdict(5.0)
    ('pass', 'FAIL')
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
for _path in (str(HERE), str(ROOT)):  # laws.py, and the package when run uninstalled
    if _path not in sys.path:
        sys.path.insert(0, _path)

import laws  # noqa: E402  (this folder is not a package: see laws.py)

REPORT = HERE / "report.json"
DOCS = ROOT / "docs" / "statistics.md"
Z_BOUND = 4.5
Perms = NDArray[np.int64]
Row = dict[str, Any]


def verdict(z: float, one_sided: bool = False) -> str:
    """``pass`` if ``z`` is within the bound (only the upper tail counts if one-sided)."""
    return "pass" if (z if one_sided else abs(z)) < Z_BOUND else "FAIL"


# --------------------------------------------------------------------------------------
# Sources: (n, m, epoch, seed offset) -> m permutations of [0, n), one per row.
# --------------------------------------------------------------------------------------


def _feistel(n: int, m: int, epoch: int = 0, offset: int = 0) -> Perms:
    from lightning_resumable_data.index import feistel_slice

    return np.stack([feistel_slice(n, offset + s, epoch, 0, n) for s in range(m)])


def _network(n: int, m: int, epoch: int = 0, offset: int = 0) -> Perms:
    from lightning_resumable_data.index.permutation import _network_permute

    return np.stack(
        [_network_permute(np.arange(n), n, (offset + s, epoch, 0xBA77)) for s in range(m)]
    )


def _numpy(n: int, m: int, epoch: int = 0, offset: int = 0) -> Perms:
    rng = np.random.default_rng([n, m, epoch, offset, 0xC0])
    return rng.permuted(np.tile(np.arange(n), (m, 1)), axis=1)


SOURCES: dict[str, Callable[..., Perms]] = {
    "feistel": _feistel,
    "network": _network,
    "numpy": _numpy,
}


def _row(section: str, n: int, source: str, test: str, score: Any, one_sided: bool) -> Row:
    return {
        "section": section,
        "n": n,
        "source": source,
        "test": test,
        "statistic": round(float(score.statistic), 4),
        "df": int(score.df),
        "z": round(float(score.z), 2),
        "verdict": verdict(score.z, one_sided),
    }


# --------------------------------------------------------------------------------------
# Sections.
# --------------------------------------------------------------------------------------


def full_law_section(scale: float) -> Iterator[Row]:
    """Chi-square of all ``n!`` permutations, ``n <= 7``."""
    for n in range(3, 8):
        for source, m in (("feistel", 10**5), ("network", 2 * 10**4), ("numpy", 10**5)):
            perms = SOURCES[source](n, max(int(m * scale), 2 * math.factorial(n)))
            yield _row("full law", n, source, f"all {n}! permutations", laws.full_law(perms), True)


PER_N_TESTS = (
    ("position of each element", "position_law", True),
    ("neighbours differing by 1", "adjacency", False),
    ("fixed points: mean", "fixed_points_mean", False),
    ("fixed points: variance", "fixed_points_variance", False),
    ("cycles: mean", "cycles", False),
    ("parity", "parity", False),
)


def laws_section(scale: float) -> Iterator[Row]:
    """Position, neighbours, fixed points, cycles and parity at ``8 <= n <= 1000``."""
    from lightning_resumable_data.index import EXACT_THRESHOLD

    plan = [(8, 20_000), (10, 20_000), (16, 20_000), (25, 20_000), (50, 10_000)]
    plan += [(100, 10_000), (256, 4_000), (1000, 2_000), (EXACT_THRESHOLD + 1, 200)]
    for n, m in plan:
        for source in SOURCES:
            if n > EXACT_THRESHOLD and source == "network":
                continue  # the public path is the network here
            perms = SOURCES[source](n, max(int(m * scale), 50))
            for title, name, one_sided in PER_N_TESTS:
                if name == "position_law" and n > 1000:
                    continue  # n**2 cells
                score = getattr(laws, name)(perms)
                yield _row("laws", n, source, title, score, one_sided)


def _slice_scores(values: NDArray[np.int64], n: int, start: int) -> Iterator[tuple[str, Any]]:
    """Serial tests on consecutive outputs ``values = perm[start : start + L]``."""
    x = values.astype(np.float64) / n  # in [0, 1)
    bins = 1000
    yield "uniform values (1000 bins)", _binned(np.floor(x * bins), bins)
    pairs = np.floor(x[: x.size // 2 * 2] * 64).reshape(-1, 2)  # non-overlapping pairs
    yield "serial pairs (64 x 64)", _binned(pairs[:, 0] * 64 + pairs[:, 1], 64 * 64)
    difference = values[1::2] - values[0:-1:2][: values[1::2].size]  # in (-n, n): fits
    wrapped = difference.astype(np.uint64)
    wrapped[difference < 0] += np.uint64(n)  # (v[2i+1] - v[2i]) mod n, for n up to 2**63
    gaps = wrapped.astype(np.float64) / n
    yield "gaps mod n (1000 bins)", _binned(np.floor(gaps * bins), bins)
    yield "low bits (v mod 256)", _binned((values % 256).astype(np.float64), 256)
    near = np.abs(np.diff(values)) <= max(1, n // 10**6)  # |v[i+1] - v[i]| tiny
    expected = near.size * (2 * max(1, n // 10**6)) / n
    yield (
        "near neighbours (Poisson)",
        laws.Score(
            float(near.sum()), 0, (float(near.sum()) - expected) / math.sqrt(max(expected, 1e-9))
        ),
    )
    positions = np.arange(values.size, dtype=np.float64)  # start drops out of r (and of floats)
    r = float(np.corrcoef(positions, x)[0, 1])
    yield "position-value correlation", laws.Score(r, 0, r * math.sqrt(values.size))


def _binned(cells: NDArray[np.float64], k: int) -> Any:
    counts = np.bincount(cells.astype(np.int64), minlength=k).astype(np.float64)
    expected = cells.size / k
    chi2 = float(((counts - expected) ** 2).sum() / expected)
    return laws.Score(chi2, k - 1, laws.wilson_hilferty(chi2, k - 1))


def serial_section(scale: float) -> Iterator[Row]:
    """Serial tests on slices of 2**20 consecutive outputs at ``n`` from 10**6 to 10**12."""
    from lightning_resumable_data.index import feistel_slice

    length = max(int(2**20 * scale), 2**14)
    for n in (10**6, 10**9, 10**12, 2**63):
        for seed in range(3):
            rng = np.random.default_rng([seed, 0x5E])
            size = min(length, n)  # n = 10**6: the whole permutation
            start = int(rng.integers(0, n - size + 1))
            values = feistel_slice(n, seed, 0, start, start + size)
            for test, score in _slice_scores(values, n, start):
                one_sided = score.df > 0
                yield _row("serial", n, f"feistel seed {seed}", test, score, one_sided)
        if n == 10**6:  # the control: a whole NumPy permutation
            control = np.random.default_rng([n, 0x5F]).permutation(n).astype(np.int64)
            for test, score in _slice_scores(control, n, 0):
                yield _row("serial", n, "numpy", test, score, score.df > 0)


def _relative(first: Perms, second: Perms) -> Perms:
    """Row-wise ``R`` with ``R[first[i]] = second[i]``: uniform iff the pair is independent."""
    relative = np.empty_like(first)
    np.put_along_axis(relative, first, second, axis=1)
    return relative


def independence_section(scale: float) -> Iterator[Row]:
    """Epoch-to-epoch and seed-to-seed: the relative permutation must look uniform."""
    from lightning_resumable_data.index import EXACT_THRESHOLD

    for n, m in ((100, 10_000), (1000, 2_000), (EXACT_THRESHOLD + 1, 100)):
        m = max(int(m * scale), 50)
        for source in SOURCES:
            if n > EXACT_THRESHOLD and source == "network":
                continue
            draw = SOURCES[source]
            pairs = {
                "epoch e vs e + 1": (draw(n, m, 0, 0), draw(n, m, 1, 0)),
                "seed s vs s + 1": (draw(n, m, 0, 0), draw(n, m, 0, 1)),
            }
            for kind, (first, second) in pairs.items():
                relative = _relative(first, second)
                for title, name, one_sided in PER_N_TESTS[1:]:
                    score = getattr(laws, name)(relative)
                    yield _row("independence", n, source, f"{kind}: {title}", score, one_sided)


def access_section(scale: float) -> Iterator[Row]:
    """Random access equals sequential generation (and slices are bijective where checked)."""
    from lightning_resumable_data.index import (
        EXACT_THRESHOLD,
        feistel_keys,
        feistel_permute,
        feistel_slice,
    )

    rng = np.random.default_rng(0xACC)
    for n in (10, EXACT_THRESHOLD, EXACT_THRESHOLD + 1, 10**6, 10**12, 2**63):
        length = min(n, max(int(200_000 * scale), 1000))
        start = int(rng.integers(0, n - length + 1))
        sequential = feistel_slice(n, 5, 2, start, start + length)
        keys = feistel_keys(5, 2)
        shuffled = rng.permutation(length)
        scattered = feistel_permute(np.arange(start, start + length)[shuffled], n, keys)
        singles = [
            int(feistel_permute(np.array([start + i]), n, keys)[0]) for i in range(min(50, length))
        ]
        chunks = np.concatenate(
            [
                feistel_slice(n, 5, 2, a, min(a + 777, start + length))
                for a in range(start, start + length, 777)
            ]
        )
        equal = (
            np.array_equal(scattered, sequential[shuffled])
            and singles == sequential[: len(singles)].tolist()
            and np.array_equal(chunks, sequential)
        )
        distinct = bool(np.unique(sequential).size == length and sequential.min() >= 0)
        ok = (
            equal and distinct and (length < n or np.array_equal(np.sort(sequential), np.arange(n)))
        )
        score = laws.Score(float(length), 0, 0.0 if ok else float("inf"))
        yield _row(
            "random access", n, "feistel", "scattered = singles = chunks = slice", score, False
        )


SECTIONS: dict[str, Callable[[float], Iterator[Row]]] = {
    "full law": full_law_section,
    "laws": laws_section,
    "serial": serial_section,
    "independence": independence_section,
    "random access": access_section,
}

# --------------------------------------------------------------------------------------
# Report.
# --------------------------------------------------------------------------------------

INTRO = """# Statistics of the shuffle

*Generated by `tests/statistics/battery.py` from `tests/statistics/report.json`; do not edit
by hand. Re-run the battery to refresh it.*

`algorithm="feistel"` must be indistinguishable from a uniform random permutation at every
`n`. It is two things: up to `EXACT_THRESHOLD` (2**16) an exact shuffle (NumPy's
`Generator.permutation`, keyed on `(n, key)`, materialised once and cached: at most 0.6 ms
and 256 KiB); above it an 8-round Feistel network over `Z_a x Z_b` with `a` even (so odd
permutations are reachable), with cycle walking, O(1) memory and random access.

Each table compares, under the same test, `feistel` (the public path), `network` (the
network forced below the threshold, to show its margin) and `numpy` (the control). `z` is
about standard normal under the uniform law (chi-square values through Wilson-Hilferty, one
upper tail); a test passes at |z| < {bound}. `network` rows at tiny `n` are expected to fail
some tests: that is why the exact shuffle owns small `n`.
"""


def render(report: dict[str, Any]) -> str:
    """The Markdown page of a report (only from the JSON)."""
    meta = report["meta"]
    rows: list[Row] = report["rows"]
    lines = [INTRO.replace("{bound}", str(report["z_bound"]))]
    lines.append(
        f"Run: {meta['date']}, {meta['seconds']:.0f} s, scale {meta['scale']}, "
        f"python {meta['python']}, numpy {meta['numpy']}, `{meta['command']}`.\n"
    )
    lines.append("## Summary\n")
    lines.append("| source | tests | pass | fail |")
    lines.append("| --- | --- | --- | --- |")
    for source in sorted({_family(r["source"]) for r in rows}):
        mine = [r for r in rows if _family(r["source"]) == source]
        failed = sum(r["verdict"] != "pass" for r in mine)
        lines.append(f"| {source} | {len(mine)} | {len(mine) - failed} | {failed} |")
    failed_public = [
        r for r in rows if _family(r["source"]) == "feistel" and r["verdict"] != "pass"
    ]
    lines.append("")
    lines.append(
        "Public `feistel` path: "
        + ("**all tests pass**." if not failed_public else f"**{len(failed_public)} FAIL**.")
    )
    for section in SECTIONS:
        mine = [r for r in rows if r["section"] == section]
        if not mine:
            continue
        lines += ["", f"## {section.capitalize()}", "", (SECTIONS[section].__doc__ or "").strip()]
        lines += ["", "| n | source | test | statistic | df | z | verdict |"]
        lines.append("| --- | --- | --- | --- | --- | --- | --- |")
        for r in mine:
            power = r["n"] >= 2**10 and r["n"] & (r["n"] - 1) == 0
            n = f"2**{int(math.log2(r['n']))}" if power else f"{r['n']:,}"
            lines.append(
                f"| {n} | {r['source']} | {r['test']} | {r['statistic']:g} | {r['df'] or ''} "
                f"| {r['z']:g} | {r['verdict']} |"
            )
    return "\n".join(lines) + "\n"


def _family(source: str) -> str:
    return source.split(" ")[0]


def run(scale: float, sections: list[str], command: str) -> dict[str, Any]:
    """Run the sections and return the report."""
    started = time.time()
    rows: list[Row] = []
    for name in sections:
        begin = time.time()
        rows += list(SECTIONS[name](scale))
        print(f"  {name}: {time.time() - begin:.1f} s", file=sys.stderr, flush=True)
    return {
        "meta": {
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "seconds": time.time() - started,
            "scale": scale,
            "python": platform.python_version(),
            "numpy": np.__version__,
            "command": command,
        },
        "z_bound": Z_BOUND,
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the battery (or render the page) and return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="scale 0.05: a smoke run")
    parser.add_argument("--scale", type=float, default=1.0, help="sample sizes x this")
    parser.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated")
    parser.add_argument("--report", type=Path, default=REPORT, help="JSON report path")
    parser.add_argument("--docs", type=Path, default=DOCS, help="Markdown page path")
    parser.add_argument("--render", action="store_true", help="only render --docs from --report")
    args = parser.parse_args(argv)
    if not args.render:
        scale = 0.05 if args.quick else args.scale
        command = "python tests/statistics/battery.py" + (" --quick" if args.quick else "")
        report = run(scale, args.sections.split(","), command)
        args.report.write_text(json.dumps(report, indent=1) + "\n")
    report = json.loads(args.report.read_text())
    args.docs.write_text(render(report))
    public = [r for r in report["rows"] if _family(r["source"]) == "feistel"]
    failed = [r for r in public if r["verdict"] != "pass"]
    for r in failed:
        print(f"FAIL: {r}", file=sys.stderr)
    print(f"{len(public) - len(failed)}/{len(public)} public-path tests pass; wrote {args.docs}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
