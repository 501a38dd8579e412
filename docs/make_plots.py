"""Draw the benchmark plots of ``docs/benchmarks.md`` into ``docs/img/``.

Every plot is drawn from a JSON file a script wrote, never from numbers typed here:
``peers.png`` from ``benchmarks/results/peers.json`` (``benchmarks/bench_peers.py``),
``sampler.png`` from ``benchmarks/results/sampler.json`` (``benchmarks/bench_sampler.py``),
``online_mixing.png`` from ``runs/online_mixing/online_mixing.json``
(``examples/online_mixing.py``, run without ``--smoke``). After a run::

    .venv/bin/python docs/make_plots.py

Plots are small PNGs (``dpi=100``), well under 200 KB each.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after choosing the backend

IMG = Path(__file__).resolve().parent / "img"
PEERS = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "peers.json"
ONLINE = Path(__file__).resolve().parent.parent / "runs" / "online_mixing" / "online_mixing.json"
COLOURS = {"torch": "#9e9e9e", "torchdata": "#f4a261", "randperm": "#5e35b1", "feistel": "#26a69a"}

SAMPLER_JSON = PEERS.parent / "sampler.json"


def _sampler_results() -> dict[str, dict[str, tuple[float, float]]]:
    """``{N: {kind: (M indices/s, peak MiB)}}`` of the whole samplers, from ``sampler.json``."""
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for row in json.loads(SAMPLER_JSON.read_text())["rows"]:
        if row.get("error") or row["impl"] not in ("torch", "randperm", "feistel"):
            continue
        n = row["n"]
        name = f"1e{len(str(n)) - 1}" if n == 10 ** (len(str(n)) - 1) else f"{n:,}"
        out.setdefault(name, {})[row["impl"]] = (row["indices_per_s"] / 1e6, row["peak_mib"])
    return out


def sampler_plot() -> None:
    """Speed and peak memory of one epoch of indices, per dataset size."""
    SAMPLER = _sampler_results()  # noqa: N806 (the table it is drawn from)
    fig, (speed, memory) = plt.subplots(1, 2, figsize=(9, 3.2))
    kinds = ("torch", "randperm", "feistel")
    width = 0.27
    for k, kind in enumerate(kinds):
        sizes = [n for n in SAMPLER if kind in SAMPLER[n]]
        xs = [list(SAMPLER).index(n) + (k - 1) * width for n in sizes]
        label = "torch DistributedSampler" if kind == "torch" else f"ours ({kind})"
        speed.bar(xs, [SAMPLER[n][kind][0] for n in sizes], width, color=COLOURS[kind], label=label)
        memory.bar(xs, [SAMPLER[n][kind][1] for n in sizes], width, color=COLOURS[kind])
    for i, n in enumerate(SAMPLER):  # say why a group has no torch bar
        if "torch" not in SAMPLER[n]:
            for ax in (speed, memory):
                ax.text(
                    i - width,
                    0.04,
                    f"torch: not run\n(randperm({n})\nneeds {8 * float(n) / 1e9:.0f} GB)",
                    transform=ax.get_xaxis_transform(),
                    ha="center",
                    va="bottom",
                    rotation=90,
                    fontsize=7,
                    color="#616161",
                )
    for ax, title in ((speed, "million indices / s (higher is better)"), (memory, "peak MiB")):
        ax.set_xticks(range(len(SAMPLER)), [f"N = {n}" for n in SAMPLER])
        ax.set_title(title, fontsize=10)
        ax.spines[["top", "right"]].set_visible(False)
    memory.set_yscale("log")
    speed.set_ylim(0, speed.get_ylim()[1] * 1.35)  # room above the bars for the legend
    speed.legend(fontsize=8, frameon=False, loc="upper left", ncol=2)
    fig.tight_layout()
    fig.savefig(IMG / "sampler.png", dpi=100)
    plt.close(fig)


def peers_plot() -> None:
    """Resume latency by k and read throughput, every path against its peers and the limit."""
    results = json.loads(PEERS.read_text())
    resume, rates = results["resume_s"], results["throughput"]
    colours = {"plain": "#5e35b1", "sharded": "#26a69a", "torchdata": "#f4a261"}
    colours.update(litdata="#9e9e9e", grain="#e57373", mosaic="#64b5f6", raw="#212121")
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
    ks = sorted({int(k) for row in resume.values() for k in row})
    width = 0.8 / len(resume)
    for n, (path, row) in enumerate(resume.items()):
        xs = [i + (n - (len(resume) - 1) / 2) * width for i, k in enumerate(ks) if str(k) in row]
        values = [row[str(k)] * 1e3 for k in ks if str(k) in row]
        left.bar(xs, values, width, color=colours.get(path), label=path)
    left.set_xticks(range(len(ks)), [f"k={k:,}" for k in ks], fontsize=8)
    left.set_yscale("log")
    left.set_ylabel("ms to first batch (log)")
    left.set_title("resume: state load + first batch", fontsize=10)
    left.legend(fontsize=8, frameon=False)
    for n, (path, row) in enumerate(rates.items()):
        xs = [i + (n - (len(rates) - 1) / 2) * width for i, w in enumerate(("0", "2")) if w in row]
        right.bar(xs, [row[w] for w in ("0", "2") if w in row], width, color=colours.get(path))
    right.set_xticks(range(2), ["0 workers", "2 workers"], fontsize=8)
    right.set_yscale("log")  # the raw limit is an order of magnitude above the loaders
    right.set_ylabel("samples/s (log; higher is better)")
    right.set_title("read throughput", fontsize=10)
    for ax in (left, right):
        ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    fig.savefig(IMG / "peers.png", dpi=100)
    plt.close(fig)


def online_mixing_plot() -> None:
    """Weights a loss-driven policy set, against the shares of each source read (JSON)."""
    result = json.loads(ONLINE.read_text())
    steps, names = result["steps"], result["sources"]
    window = 10  # steps per realised share
    fig, ax = plt.subplots(figsize=(7, 3.4))
    for k, name in enumerate(names):
        colour = f"C{k}"
        xs = [line["step"] for line in steps]
        ax.step(
            xs,
            [line["weights"][name] for line in steps],
            where="post",
            color=colour,
            label=f"{name}: weight",
        )
        read = [line["read"].get(name, 0) for line in steps]
        total = [sum(line["read"].values()) for line in steps]
        starts = range(0, len(steps) - window + 1, window)
        shares = [sum(read[i : i + window]) / sum(total[i : i + window]) for i in starts]
        ax.plot(
            [xs[i] + window / 2 for i in starts],
            shares,
            "o",
            color=colour,
            ms=3.5,
            alpha=0.8,
            label=f"{name}: share read ({window} steps)",
        )
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("probability / share")
    ax.set_ylim(0, 1)
    ax.set_title("Online mixing: softmax of the per-source loss, every 10 steps")
    # below the axes: inside, it covered the highest weight's line
    ax.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.2), frameon=False)
    fig.tight_layout()
    fig.savefig(IMG / "online_mixing.png", dpi=100)
    plt.close(fig)


def main() -> None:
    """Draw every plot."""
    IMG.mkdir(exist_ok=True)
    if PEERS.exists():
        peers_plot()
    if ONLINE.exists():
        online_mixing_plot()
    if SAMPLER_JSON.exists():
        sampler_plot()
    for path in sorted(IMG.glob("*.png")):
        print(f"{path.relative_to(IMG.parent.parent)}: {path.stat().st_size // 1024} KB")


if __name__ == "__main__":
    main()
