"""Trace and find latency at 10^10 samples and a 10^12-sample mixture; the record's size.

What ``lrd trace`` and ``lrd find`` cost, from the API they call (no file is read):

* ``trace_step`` of a recorded step of a 10^10-sample Feistel dataset, 8 ranks x 32, and of
  a 10^12-sample two-source mixture (Feistel passes), 8 ranks x 32, with 10^4 online weight
  changes in its epoch (the record and the schedule hold them all);
* ``find_sample`` over three recorded epochs of the 10^10 dataset (one inversion per epoch),
  and over the mixture's epoch (its source's passes inverted, each draw bisected);
* over a packed corpus (a Megatron ``.bin``/``.idx`` of 10^6 documents of 1 to 99 tokens,
  ``seq_len`` 2049): building an epoch's packing index, ``sample_pieces`` of a step's 8 x 32
  samples (document pieces and ``.bin`` bytes), ``document_samples`` of one document, and
  ``find_document`` over three recorded epochs;
* the size of what a checkpoint holds for them: the data history with 10^4 weight changes
  and 10^3 cut step ranges, and a sampler state with 10^3 cuts and a 10^3-sample quarantine,
  pickled as ``torch.save`` pickles them.

Targets (issue 27): trace under 10 ms a step, find under 100 ms an epoch. Run::

    .venv/bin/python benchmarks/bench_provenance.py            # writes results/provenance.json
    .venv/bin/python benchmarks/tables.py                      # the table of docs/provenance.md
"""

from __future__ import annotations

import argparse
import json
import pickle
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from _harness import REPO_ROOT, table_header, table_row

from lightning_resumable_data import DistributedSampler, MixtureDataset, MixtureSampler
from lightning_resumable_data.documents import PackedDataset, open_megatron, write_megatron
from lightning_resumable_data.documents.provenance import document_samples, sample_pieces
from lightning_resumable_data.lightning.document_trace import find_document
from lightning_resumable_data.lightning.find import find_sample
from lightning_resumable_data.lightning.history import DataHistory
from lightning_resumable_data.lightning.trace import trace_step

PROVENANCE = REPO_ROOT / "benchmarks" / "results" / "provenance.json"
PROVENANCE_PAGE = REPO_ROOT / "docs" / "provenance.md"
WORLD, BATCH = 8, 32


def _timed(call: Callable[[], object], repeats: int) -> float:
    """Median seconds of ``repeats`` calls (after one warm-up call)."""
    call()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def single(repeats: int) -> dict[str, Any]:
    """Trace and find over a 10^10-sample Feistel dataset: 3 epochs recorded."""
    n = 10**10
    sampler = DistributedSampler(range(n), WORLD, 0, seed=11, algorithm="feistel")
    history = DataHistory(
        [[e * 10**6, e, 7 * 10**9, WORLD, BATCH, 1, 10**6, 0] for e in range(3)]
    )  # a million steps of each epoch, from deep inside it
    steps = iter(range(10**6, 2 * 10**6, 9973))
    trace_s = _timed(lambda: trace_step(sampler, history, next(steps)), repeats)
    (batch,) = trace_step(sampler, history, 1_500_000)
    sample = int(batch.ranks[5].indices[7])
    find_s = _timed(lambda: find_sample(sampler, history, sample), repeats)
    return {"samples": n, "epochs_recorded": 3, "trace_s": trace_s, "find_s": find_s}


def mixture(repeats: int, changes: int) -> dict[str, Any]:
    """Trace over a 10^12-sample mixture with ``changes`` online weight changes."""
    sizes = {"web": 6 * 10**11, "code": 4 * 10**11}
    dataset = MixtureDataset({name: range(size) for name, size in sizes.items()})
    sampler = MixtureSampler(dataset, [0.7, 0.3], WORLD, 0, seed=11)
    history = DataHistory([[0, 0, 0, WORLD, BATCH, 1, 10**6, 0]])
    step_samples = WORLD * BATCH
    rng = np.random.default_rng(0)
    for k in range(changes):  # every 100 steps, as a policy would
        weight = float(rng.uniform(0.2, 0.8))
        position = (k + 1) * 100 * step_samples
        sampler.update_weights([weight, 1 - weight], epoch=0, position=position, kind="online")
        history.note_change(0, position, [weight, 1 - weight], 1.0)
    steps = iter(range(10, 10**6, 997))
    trace_s = _timed(lambda: trace_step(sampler, history, next(steps)), repeats)
    (batch,) = trace_step(sampler, history, 500_000)  # a sample trained mid-epoch: find it
    sample = int(batch.ranks[5].indices[7])
    find_s = _timed(lambda: find_sample(sampler, history, sample), repeats)
    return {
        "samples": sum(sizes.values()),
        "changes": changes,
        "trace_s": trace_s,
        "find_s": find_s,
    }


def documents(repeats: int, count: int) -> dict[str, Any]:
    """Pieces and document finds over a packed Megatron corpus of ``count`` documents."""
    with tempfile.TemporaryDirectory() as folder:
        lengths = np.random.default_rng(0).integers(1, 100, size=count)
        write_megatron(f"{folder}/corpus", (np.ones(int(k), np.uint16) for k in lengths))
        dataset = PackedDataset(open_megatron(f"{folder}/corpus"), seq_len=2049, eos_id=0, seed=1)
        started = time.perf_counter()
        dataset.checkpoints(3)  # the epoch's packing index, built once per epoch
        index_s = time.perf_counter() - started
        step = np.random.default_rng(1).integers(0, len(dataset), WORLD * BATCH).tolist()
        pieces_s = _timed(lambda: sample_pieces(dataset, step, 3), repeats)
        document = count // 2
        document_s = _timed(lambda: document_samples(dataset, document, 3), repeats)
        steps = len(dataset) // (WORLD * BATCH)
        history = DataHistory([[e * steps, e, 0, WORLD, BATCH, 1, steps, 0] for e in range(3)])
        sampler = DistributedSampler(range(len(dataset)), WORLD, 0, seed=2, algorithm="feistel")
        find_s = _timed(lambda: find_document(sampler, history, dataset, document), repeats)
        return {
            "documents": count,
            "samples": len(dataset),
            "index_s": index_s,
            "pieces_s": pieces_s,
            "document_s": document_s,
            "find_s": find_s,
        }


def sizes(changes: int, cuts: int) -> dict[str, Any]:
    """Bytes of the record and of a sampler state with many changes, cuts and quarantines."""
    history = DataHistory([[0, 0, 0, WORLD, BATCH, 1, 10**6, 0]])
    for k in range(changes):
        history.note_change(0, k * 1000, [0.6, 0.4], 1.0)
    for k in range(cuts):
        history.skipped_steps.append([k * 100, k * 100 + 3])
        history.note_skips(k % 3, [(k * 300, k * 300 + 96)])
    record = len(pickle.dumps(history.state_dict(10**6), protocol=2))
    sampler = DistributedSampler(range(10**9), WORLD, 0, seed=1, algorithm="feistel")
    for k in range(cuts):
        sampler.skip_positions(0, k * 1000 + 500, k * 1000 + 596)
    sampler.quarantine(range(0, 10**9, 10**6))
    state = len(pickle.dumps(sampler.state_dict(), protocol=2))
    return {"changes": changes, "cuts": cuts, "record_bytes": record, "sampler_bytes": state}


def provenance_table(results: dict[str, Any]) -> list[str]:
    """The Markdown of ``results`` (here and in ``benchmarks/tables.py``)."""
    single_, mix, size = results["single"], results["mixture"], results["sizes"]
    return [
        f"`{results['command']}`: median of {results['repeats']} calls after a warm-up, "
        f"{results['machine']}, load average {results['load_average']} at the end.",
        "",
        *table_header("what", "scale", "time", "target"),
        table_row(["`trace_step` (a recorded step, 8 ranks x 32)",
                   f"{single_['samples']:.0e} samples, Feistel",
                   f"{single_['trace_s'] * 1e3:.2f} ms", "< 10 ms"]),
        table_row(["`find_sample` (3 recorded epochs)", f"{single_['samples']:.0e} samples",
                   f"{single_['find_s'] * 1e3:.2f} ms ({single_['find_s'] * 1e3 / 3:.2f} an epoch)",
                   "< 100 ms an epoch"]),
        table_row([f"`trace_step` with {mix['changes']:,} weight changes in the epoch",
                   f"{mix['samples']:.0e}-sample mixture", f"{mix['trace_s'] * 1e3:.2f} ms",
                   "< 10 ms"]),
        table_row([f"`find_sample` with {mix['changes']:,} weight changes in the epoch",
                   f"{mix['samples']:.0e}-sample mixture", f"{mix['find_s'] * 1e3:.2f} ms",
                   "< 100 ms an epoch"]),
        *_document_rows(results.get("documents")),
        "",
        *table_header("state", "holds", "bytes"),
        table_row(["data history (callback)",
                   f"{size['changes']:,} weight changes, {size['cuts']:,} cut step ranges",
                   f"{size['record_bytes']:,}"]),
        table_row(["sampler state", f"{size['cuts']:,} cuts, 1,000 quarantined samples",
                   f"{size['sampler_bytes']:,}"]),
    ]  # fmt: skip


def _document_rows(docs: dict[str, Any] | None) -> list[str]:
    if docs is None:
        return []
    scale = f"{docs['documents']:,} documents, {docs['samples']:,} samples"
    ms = {k: f"{docs[k] * 1e3:.2f} ms" for k in ("index_s", "pieces_s", "document_s", "find_s")}
    return [
        table_row(["packing index of an epoch (once per epoch)", scale, ms["index_s"], "—"]),
        table_row(["`sample_pieces` (8 ranks x 32 samples)", scale, ms["pieces_s"], "< 10 ms"]),
        table_row(["`document_samples` (one document)", scale, ms["document_s"], "—"]),
        table_row(["`find_document` (3 recorded epochs)", scale, ms["find_s"],
                   "< 100 ms an epoch"]),
    ]  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    """Measure, print the table and write ``results/provenance.json``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few repeats, small counts")
    parser.add_argument("--out", default=str(PROVENANCE), help="where the JSON goes")
    args = parser.parse_args(argv)
    repeats, changes, cuts = (3, 100, 10) if args.quick else (25, 10**4, 10**3)
    count = 10**4 if args.quick else 10**6
    results = {
        "command": "benchmarks/bench_provenance.py" + (" --quick" if args.quick else ""),
        "repeats": repeats,
        "machine": f"{platform.machine()}, Python {platform.python_version()}",
        "single": single(repeats),
        "mixture": mixture(repeats, changes),
        "sizes": sizes(changes, cuts),
        "documents": documents(repeats, count),
    }
    results["load_average"] = f"{__import__('os').getloadavg()[0]:.2f}"
    print("\n".join(provenance_table(results)))
    with open(args.out, "w") as out:
        json.dump(results, out, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
