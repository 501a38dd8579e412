"""Benchmark document packing: index build and reads against Megatron-core and LitData.

Run from the repository root::

    .venv/bin/python benchmarks/bench_documents.py                # 1e5, 1e6, 1e7 documents
    .venv/bin/python benchmarks/bench_documents.py --quick        # 1e4, 1e5 (CI smoke)
    .venv/bin/python benchmarks/tables.py                          # docs/documents.md table

Set-up: document lengths drawn once (log-normal, median 256, mean ~420 tokens, clipped
to [1, 16384]), written as a Megatron ``.idx`` with a sparse ``.bin`` of the right size
(the build reads lengths only; no token is read). Both sides pack ``seq_len = 2048``
training tokens per sample (ours ``seq_len=2049``; Megatron ``sequence_length=2048`` with
its extra label token), seed 0, one epoch, one CPU, one thread, a fresh process per case.

* **build**: ours is ``open_megatron`` + ``PackedDataset`` + the epoch-0 index
  (``checkpoints(0)``); Megatron's is ``IndexedDataset`` + ``GPTDataset`` (document,
  sample and shuffle indices; it also writes them to its cache folder, as it always does).
  Time is wall seconds, best of ``--repeat``; memory is the peak RSS during the build
  minus the RSS before it (the peak is reset after the imports through
  ``/proc/self/clear_refs``; file pages of the ``.idx`` that a side touches count: both
  read the lengths); *index* is the bytes the epoch's index keeps.
* **read**: a real 1e5-document corpus (uint16 tokens), 4096 random samples one at a time
  (``dataset[i]``), and the same in batches of 32 (``__getitems__`` of the loader's
  ``KeyedBatch``, then ``collate_packed``: the batch our ``StatefulDataLoader`` yields, with
  ``position_ids``), latency per sample; throughput in training tokens per second,
  beside LitData's ``StreamingDataset`` + ``TokensLoader(block_size=2049)`` over the same
  token stream (``optimize``-d beforehand; shuffled), when ``litdata`` is installed. Both
  wall and CPU time (``time.process_time``: every thread of the process) are recorded; the
  best of ``--repeat`` by CPU time is kept, and the verdict compares tokens per CPU
  second (wall time on a shared machine measures its neighbours too). LitData's samples
  are views of its memory map (no token is read); a second LitData row stacks them into
  batches of 32 with ``default_collate``, as its loader does at 0 workers (tokens read).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from _harness import (
    argument_parser,
    best_time,
    fmt_n,
    highest_peak,
    load_average,
    mark,
    one_torch_thread,
    package_version,
    parse_counts,
    peak_kib,
    peak_mib_since,
    pin_to_one_cpu,
    print_block,
    progress,
    python_version,
    repeat_runs,
    spawn_json,
)
from documents_table import DOCUMENTS as RESULTS
from documents_table import document_table

SEQ_LEN = 2048
READS = 4096
BATCH = 32


def document_lengths(count: int) -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(0)
    lengths = np.exp(rng.normal(np.log(256), 1.0, count)).astype(np.int64)
    return np.clip(lengths, 1, 16384).astype(np.int32)


def write_index(prefix: str, lengths: np.ndarray[Any, Any], tokens: bool) -> None:
    """A Megatron ``.idx`` for ``lengths`` (uint16), and a ``.bin``: sparse, or real tokens."""
    sizes = lengths.astype(np.int64)
    with open(prefix + ".idx", "wb") as out:
        out.write(struct.pack("<9sQBQQ", b"MMIDIDX\x00\x00", 1, 8, sizes.size, sizes.size + 1))
        out.write(sizes.astype(np.int32).tobytes())
        out.write(((np.cumsum(sizes) - sizes) * 2).tobytes())
        out.write(np.arange(sizes.size + 1, dtype=np.int64).tobytes())
    total = int(sizes.sum())
    with open(prefix + ".bin", "wb") as out:
        if tokens:
            rng = np.random.default_rng(1)
            for begin in range(0, total, 1 << 24):
                out.write(rng.integers(1, 50000, min(1 << 24, total - begin), np.uint16).tobytes())
        else:
            out.truncate(total * 2)


# ----------------------------------------------------------------------------- children


def _megatron(prefix: str, cache: str) -> Any:
    """Build Megatron-core's ``GPTDataset`` (one epoch) over ``prefix``."""
    import logging
    import types
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    from megatron.core.datasets.utils import Split

    tokenizer = types.SimpleNamespace(eod=0, pad=-1, vocab_size=None, unique_identifiers={})
    config = GPTDatasetConfig(
        random_seed=0,
        sequence_length=SEQ_LEN,
        tokenizer=tokenizer,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        create_attention_mask=False,
        path_to_cache=cache,
        split="1,0,0",
    )
    low = IndexedDataset(prefix)
    everything = np.arange(len(low), dtype=np.int32)
    return GPTDataset(low, prefix, everything, None, Split.train, config)


def _import_megatron() -> None:
    import warnings

    warnings.filterwarnings("ignore")
    import megatron.core.datasets.gpt_dataset  # noqa: F401


def _ours(prefix: str) -> Any:
    from lightning_resumable_data.documents import PackedDataset, open_megatron

    packed = PackedDataset(open_megatron(prefix), SEQ_LEN + 1, eos_id=0)
    packed.checkpoints(0)
    return packed


def _status_kib(field: str) -> int:
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _reset_peak() -> bool:
    """Reset this process's peak RSS (Linux >= 4.0), so the build's own peak is measured.

    Without it, the peak of the imports (torch) would hide a build that stays below it.
    """
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def child_build(side: str, prefix: str) -> dict[str, Any]:
    cache = tempfile.mkdtemp()
    if side == "megatron":
        _import_megatron()
    else:
        import lightning_resumable_data.documents  # noqa: F401
    reset = _reset_peak()
    baseline = _status_kib("VmRSS") if reset else peak_kib()
    start = time.perf_counter()
    dataset = _megatron(prefix, cache) if side == "megatron" else _ours(prefix)
    seconds = time.perf_counter() - start
    peak = (_status_kib("VmHWM") - baseline) / 1024 if reset else peak_mib_since(baseline)
    if side == "megatron":
        arrays = (dataset.document_index, dataset.sample_index, dataset.shuffle_index)
        nbytes = sum(int(a.nbytes) for a in arrays)
    else:
        nbytes = dataset.index_nbytes
    shutil.rmtree(cache, ignore_errors=True)
    return {"seconds": seconds, "peak_mib": peak, "index_bytes": nbytes, "samples": len(dataset)}


def child_read(side: str, prefix: str, litdata_dir: str) -> dict[str, Any]:
    cache = tempfile.mkdtemp()
    if side in ("litdata", "litdata_batch"):
        from litdata import StreamingDataset, TokensLoader
        from torch.utils.data import default_collate

        stream = StreamingDataset(
            litdata_dir, item_loader=TokensLoader(block_size=SEQ_LEN + 1), shuffle=True
        )
        iterator = iter(stream)
        next(iterator)  # open the first chunk outside the timing
        start, cpu = time.perf_counter(), time.process_time()
        if side == "litdata":
            for _ in range(READS):
                next(iterator)
        else:  # what a loader at 0 workers yields: batches stacked by default_collate
            for _ in range(READS // BATCH):
                default_collate([next(iterator) for _ in range(BATCH)])
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    else:
        dataset = _megatron(prefix, cache) if side == "megatron" else _ours(prefix)
        picks = np.random.default_rng(2).integers(0, len(dataset), READS).tolist()
        if side != "megatron":
            from lightning_resumable_data import SampleKey

            picks = [SampleKey(i, seed=0, epoch=0, position=i) for i in picks]
        dataset[picks[0]]
        start, cpu = time.perf_counter(), time.process_time()
        if side == "ours_batch":  # what our loader's fetcher calls, then its collate_fn
            from lightning_resumable_data.documents import collate_packed
            from lightning_resumable_data.randomness import KeyedBatch

            plain = [int(i) for i in picks]
            batches = [
                KeyedBatch(plain[b : b + BATCH], seed=0, epoch=0, start=b, step=1)
                for b in range(0, READS, BATCH)
            ]
            start, cpu = time.perf_counter(), time.process_time()
            for batch in batches:
                collate_packed(dataset.__getitems__(batch))
        else:
            for index in picks:  # one sample at a time
                dataset[index]
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    shutil.rmtree(cache, ignore_errors=True)
    return {"seconds": seconds, "latency_us": seconds / READS * 1e6,
            "tokens_per_s": READS * SEQ_LEN / seconds, "cpu_seconds": cpu,
            "cpu_us": cpu / READS * 1e6, "tokens_per_cpu_s": READS * SEQ_LEN / cpu}  # fmt: skip


def child(argv: list[str]) -> None:
    pin_to_one_cpu()
    one_torch_thread()
    kind, side, prefix, extra = argv
    result = child_build(side, prefix) if kind == "build" else child_read(side, prefix, extra)
    print(json.dumps(result))


# ----------------------------------------------------------------------------- parent


def _litdata(prefix: str, out: str) -> str | None:
    """Optimise the corpus's token stream for LitData; ``None`` (skipped) if not installed."""
    try:
        from litdata import TokensLoader, optimize
    except ImportError:
        return None
    tokens = np.memmap(prefix + ".bin", dtype=np.uint16, mode="r")
    pieces = max(1, tokens.size // (1 << 22))
    optimize(
        fn=_litdata_piece,
        inputs=[(prefix + ".bin", i, pieces) for i in range(pieces)],
        output_dir=out,
        chunk_size=(SEQ_LEN + 1) * 512,
        item_loader=TokensLoader(),
        num_workers=1,
        verbose=False,
    )
    return out


def _litdata_piece(item: tuple[str, int, int]) -> Any:
    import torch

    path, number, pieces = item
    tokens = np.memmap(path, dtype=np.uint16, mode="r")
    bounds = np.linspace(0, tokens.size, pieces + 1).astype(np.int64)
    yield torch.from_numpy(np.array(tokens[bounds[number] : bounds[number + 1]], np.int32))


def main() -> None:
    parser = argument_parser(__doc__)
    parser.add_argument("--counts", default="1e5,1e6,1e7", help="documents per build case")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="1e4,1e5, one repeat")
    args = parser.parse_args()
    counts = parse_counts("1e4,1e5" if args.quick else args.counts)
    repeat = 1 if args.quick else args.repeat
    script = str(Path(__file__).resolve())
    work = Path(tempfile.mkdtemp(prefix="bench_documents_"))
    builds = []
    try:
        for count in counts:
            prefix = str(work / f"build_{count}")
            write_index(prefix, document_lengths(count), tokens=False)
            row: dict[str, Any] = {"documents": count}
            for side in ("ours", "megatron"):
                progress(f"build {side} {fmt_n(count)}")
                runs, error = repeat_runs(
                    partial(spawn_json, script, ["build", side, prefix, ""]), repeat
                )
                if error:
                    raise SystemExit(f"build {side} {count}: {error}")
                row[side] = {"seconds": best_time(runs), "peak_mib": highest_peak(runs),
                             "index_bytes": runs[0]["index_bytes"],
                             "samples": runs[0]["samples"]}  # fmt: skip
            builds.append(row)
            os.unlink(prefix + ".bin")
        prefix = str(work / "read")
        write_index(prefix, document_lengths(10**5), tokens=True)
        lit = _litdata(prefix, str(work / "litdata"))
        reads: dict[str, Any] = {}
        for side in ("ours", "ours_batch", "megatron", "litdata", "litdata_batch"):
            if side.startswith("litdata") and lit is None:
                reads[side] = None
                continue
            progress(f"read {side}")
            runs, error = repeat_runs(
                partial(spawn_json, script, ["read", side, prefix, lit or ""]), repeat
            )
            if error:
                raise SystemExit(f"read {side}: {error}")
            best = min(runs, key=lambda r: r["cpu_seconds"])  # the CPU time is the target's
            reads[side] = {key: best[key] for key in ("latency_us", "tokens_per_s", "cpu_us",
                                                      "tokens_per_cpu_s")}  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results = report(builds, reads, args.quick, repeat)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    print_block(document_table(results))


def report(
    builds: list[dict[str, Any]], reads: dict[str, Any], quick: bool, repeat: int
) -> dict[str, Any]:
    verdicts = []
    for row in builds:
        ours, theirs = row["ours"], row["megatron"]
        speed = theirs["seconds"] / ours["seconds"]
        memory = theirs["peak_mib"] / max(ours["peak_mib"], 1e-3)
        verdicts.append(
            f"{mark(speed >= 10)} build at {fmt_n(row['documents'])} documents: "
            f"{speed:.1f}x faster than Megatron's (target 10x)"
        )
        verdicts.append(
            f"{mark(memory >= 10)} build peak memory at {fmt_n(row['documents'])}: "
            f"1/{memory:.1f} of Megatron's (target 1/10)"
        )
    if reads.get("litdata") and reads.get("ours"):
        for side, how in (("ours", "one sample a call"), ("ours_batch", f"batches of {BATCH}")):
            ratio = reads[side]["tokens_per_cpu_s"] / reads["litdata"]["tokens_per_cpu_s"]
            wall = reads[side]["tokens_per_s"] / reads["litdata"]["tokens_per_s"]
            verdicts.append(
                f"{mark(ratio >= 1)} read throughput, {how}: {ratio:.2f}x LitData's tokens "
                f"per CPU second (target 1x; {wall:.2f}x in wall time)"
            )
        if reads.get("litdata_batch"):  # beside the target: LitData's samples stacked too
            ratio = (
                reads["ours_batch"]["tokens_per_cpu_s"] / reads["litdata_batch"]["tokens_per_cpu_s"]
            )
            verdicts.append(
                f"(for comparison) batches of {BATCH}: {ratio:.2f}x LitData's per CPU second "
                "when its samples are stacked into batches too (default_collate)"
            )
    else:
        verdicts.append("LitData comparison skipped: litdata is not installed")
    command = "benchmarks/bench_documents.py" + (" --quick" if quick else "")
    return {
        "command": command,
        "conditions": f"one CPU, one thread, fresh process per case, best of {repeat}",
        "python": python_version(),
        "numpy": np.__version__,
        "megatron_core": package_version("megatron-core"),
        "litdata": package_version("litdata"),
        "load_average": load_average(),
        "seq_len": SEQ_LEN,
        "batch": BATCH,
        "builds": builds,
        "reads": reads,
        "verdicts": verdicts,
    }


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("build", "read"):
        child(sys.argv[1:])
    else:
        main()
