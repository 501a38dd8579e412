"""The verdicts of ``bench_peers.py``: each target met or not, with every ratio."""

from __future__ import annotations

from _harness import Json
from peers_paths import PEERS

RESUME_TARGET = 1.0  # every path of ours <= the fastest peer
THROUGHPUT_TARGET = 0.97  # >= 0.97x torchdata's rate, and >= every other peer's
LIGHTNING_TARGET = 0.98


def verdicts(results: Json) -> list[str]:
    """One line per target: met or not, with the ratios to the peers and the limit."""
    lines = []
    resume, ours = results["resume_s"], ("plain", "sharded")
    kinds = sorted(set(results["batch"].values()))
    mark = "met" if len(kinds) == 1 else "NOT met"
    lines.append(f"one batch type from every path ({', '.join(kinds)}): {mark}")
    for k in sorted({k for row in resume.values() for k in row}, key=int):
        times = {p: resume[p][k] for p in PEERS if k in resume.get(p, {})}
        if not times:
            continue
        fastest = min(times, key=times.__getitem__)
        limit = resume.get("raw", {}).get(k)
        for path in ours:
            if k in resume.get(path, {}):
                ratio = resume[path][k] / times[fastest]
                mark = "met" if ratio <= RESUME_TARGET else "NOT met"
                limit_text = f", {resume[path][k] / limit:.1f}x the raw limit" if limit else ""
                lines.append(
                    f"resume k={int(k):,}: {path} {resume[path][k] * 1e3:.1f} ms = {ratio:.2f}x "
                    f"the fastest peer ({fastest}, {times[fastest] * 1e3:.1f} ms){limit_text}: "
                    f"{mark}"
                )
    rates = results["throughput"]
    for workers in ("0", "2"):
        base = rates.get("torchdata", {}).get(workers)
        others = {p: rates[p][workers] for p in PEERS[1:] if workers in rates.get(p, {})}
        limit = rates.get("raw", {}).get(workers)
        for path in ours:
            rate = rates.get(path, {}).get(workers)
            if rate is None or base is None:
                continue
            ok = rate >= THROUGHPUT_TARGET * base and all(rate >= r for r in others.values())
            text = "".join(f", {rate / r:.2f}x {p}" for p, r in others.items())
            text += f", {rate / limit:.2f}x the raw limit" if limit else ""
            lines.append(
                f"throughput {workers} workers: {path} {rate:,.0f} samples/s = "
                f"{rate / base:.2f}x torchdata{text}: {'met' if ok else 'NOT met'}"
            )
    lines += [line for path in ours if (line := _against(results, path, "mosaic"))]
    steps = results.get("lightning_steps_per_s", {})
    if {"resumable", "plain"} <= steps.keys():
        ratio = steps["resumable"] / steps["plain"]
        mark = "met" if ratio >= LIGHTNING_TARGET else "NOT met"
        lines.append(
            f"Lightning: ResumableDataModule {steps['resumable']:.1f} steps/s = {ratio:.3f}x a "
            f"plain DataLoader ({steps['plain']:.1f}): {mark}"
        )
    return lines


def _against(results: Json, path: str, peer: str) -> str | None:
    """One path of ours against one peer on every k and worker count both measured."""
    resume, rates = results["resume_s"], results["throughput"]
    times = {k: resume[path][k] / t for k, t in resume.get(peer, {}).items() if k in resume[path]}
    reads = {w: rates[path][w] / r for w, r in rates.get(peer, {}).items() if w in rates[path]}
    if not times or not reads:
        return None
    ok = all(ratio <= RESUME_TARGET for ratio in times.values()) and min(reads.values()) >= 1
    low, high = (_x(f(times.values())) for f in (min, max))
    ks = sorted(map(int, times))
    return (
        f"against {peer}: {path} resumes in {low}-{high} its time (k = {ks[0]:,} to "
        f"{ks[-1]:,}) and reads "
        + ", ".join(f"{_x(ratio)} its rate at {w} workers" for w, ratio in reads.items())
        + f": {'met' if ok else 'NOT met'}"
    )


def _x(ratio: float) -> str:
    """A ratio, two decimals (two significant digits below 0.1, as the table shows them)."""
    return f"{ratio:.2f}x" if ratio >= 0.1 else f"{ratio:.2g}x"
