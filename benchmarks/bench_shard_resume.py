"""Benchmark a sharded resume against the shard count: open, restore, first batch.

Run from the repository root::

    .venv/bin/python benchmarks/bench_shard_resume.py           # 10^2, 10^3, 10^4 shards
    .venv/bin/python benchmarks/bench_shard_resume.py --quick   # 10^2, 10^3 (CI smoke)

For each shard count, shards of 256 samples of 1,024 ``uint16`` tokens (sparse files: the
content does not matter here) with an ``index.json``; each measurement is a fresh process
(one CPU, one thread) that times, best of ``--repeat``:

* **open**: ``open_token_shards`` + ``DistributedShardedDataset`` + its sampler + a
  ``StatefulDataLoader`` (batch 32), what every start pays;
* **resume**: ``load_state_dict`` of a state in the middle of the epoch + the first batch,
  what a resume adds to a fresh start.

Both by default (no shard file touched until it is read) and with
``open_token_shards(..., verify=True)`` (every file checked at open, and every opened shard
checked again at ``load_state_dict``): the ratio is the cost of checking eagerly. Target:
resume <= 10 ms at 10^4 shards. Results go to ``--json`` (default
``benchmarks/results/shard_resume.json``).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from _harness import (
    REPO_ROOT,
    Json,
    argument_parser,
    best_time,
    load_average,
    mark,
    one_torch_thread,
    pin_to_one_cpu,
    print_block,
    python_version,
    repeat_runs,
    spawn_json,
    table_header,
    table_row,
)

RESULTS = "benchmarks/results/shard_resume.json"
PER_SHARD, SEQ_LEN, BATCH = 256, 1024, 32
TARGET_MS = 10.0


def write_shards(root: Path, shards: int) -> None:
    """``shards`` sparse token files of ``PER_SHARD`` samples and their index."""
    from lightning_resumable_data.shards.tokens import INDEX_FILE, TokenShardIndex

    files = tuple(f"shard_{i:05d}.bin" for i in range(shards))
    for name in files:
        with (root / name).open("wb") as file:
            file.truncate(PER_SHARD * SEQ_LEN * 2)
    index = TokenShardIndex(SEQ_LEN, "uint16", files, (PER_SHARD,) * shards)
    (root / INDEX_FILE).write_text(json.dumps(index.to_json()))


def child(root: str, verify: bool) -> Json:
    """Seconds to open, and to restore + read the first batch, in this fresh process."""
    import numpy.random  # noqa: F401  (imported by any run before its first batch)

    from lightning_resumable_data import StatefulDataLoader
    from lightning_resumable_data.shards import DistributedShardedDataset, open_token_shards

    def build() -> StatefulDataLoader:
        readers = open_token_shards(root, verify=verify, preload=False)
        dataset = DistributedShardedDataset(readers, seed=0)
        return StatefulDataLoader(dataset, batch_size=BATCH, sampler=dataset.sampler(1, 0))

    batches = len(build()) // 2
    state = build().state_at(0, batches)  # the middle of the epoch
    started = time.perf_counter()
    loader = build()
    opened = time.perf_counter()
    loader.load_state_dict(state)
    next(iter(loader))
    done = time.perf_counter()
    return {"seconds": done - opened, "open_seconds": opened - started}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--child":
        pin_to_one_cpu()
        one_torch_thread()
        print(json.dumps(child(argv[1], argv[2] == "verify")))
        return 0
    parser = argument_parser(__doc__)
    parser.add_argument("--quick", action="store_true", help="10^2 and 10^3 shards, one run")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", default=RESULTS)
    args = parser.parse_args(argv)
    counts = [100, 1_000] if args.quick else [100, 1_000, 10_000]
    repeat = 1 if args.quick else args.repeat
    print(f"# Sharded resume by shard count; best of {repeat}; {load_average()}", flush=True)
    rows: list[Json] = []
    table = table_header("shards", "mode", "open ms", "resume ms", "resume: verify / lazy")
    for count in counts:
        with tempfile.TemporaryDirectory() as folder:
            write_shards(Path(folder), count)
            row: Json = {"shards": count}
            for mode in ("lazy", "verify"):
                run = partial(spawn_json, __file__, ["--child", folder, mode])
                runs, error = repeat_runs(run, repeat)
                if error:
                    print(f"\nFAILED: {count} shards, {mode}: {error}")
                    return 1
                row[mode] = {
                    "resume_ms": best_time(runs) * 1e3,
                    "open_ms": best_time(runs, "open_seconds") * 1e3,
                }
            rows.append(row)
        ratio = row["verify"]["resume_ms"] / row["lazy"]["resume_ms"]
        for mode in ("lazy", "verify"):
            shown = f"{ratio:.1f}x" if mode == "verify" else ""
            cells = [f"{count:,}", mode, f"{row[mode]['open_ms']:.1f}"]
            table.append(table_row([*cells, f"{row[mode]['resume_ms']:.1f}", shown]))
    largest = rows[-1]
    verdict = (
        f"{mark(largest['lazy']['resume_ms'] <= TARGET_MS)}: a resume over "
        f"{largest['shards']:,} shards costs {largest['lazy']['resume_ms']:.1f} ms "
        f"(target <= {TARGET_MS:g} ms at 10^4 shards); opening them "
        f"{largest['lazy']['open_ms']:.0f} ms"
    )
    print_block(table)
    print_block([verdict])
    record = {
        "command": "benchmarks/bench_shard_resume.py" + (" --quick" if args.quick else ""),
        "python": python_version(),
        "load_average": load_average(),
        "conditions": f"shards of {PER_SHARD} samples of {SEQ_LEN} uint16 tokens (sparse "
        f"files), batch {BATCH}, a state at the epoch's middle, fresh process per run, one "
        f"CPU, best of {repeat}",
        "rows": rows,
        "verdict": verdict,
    }
    path = REPO_ROOT / args.json
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
