"""The measurements of ``bench_formats.py``, each run in a fresh child process.

* :func:`child_read`: one epoch of a path: wall and CPU time, the first batch, images seen;
* :func:`child_resume`: a fresh loader + its state at k batches + the first batch;
* :func:`child_index`: our WebDataset reader's header-only index, built once before timing.
"""

from __future__ import annotations

import gc
import resource
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _harness import Json
from formats_paths import build, import_all


def _cpu() -> float:
    """CPU seconds of this process and of its reaped children (DataLoader workers)."""
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _close(loader: Any) -> None:
    """Release a loader's shards and threads (ours), or its dataset's cache (wids)."""
    for thing in (loader, getattr(loader, "dataset", None)):
        close = getattr(thing, "close", None)
        if close is not None:
            close()
            return


def child_read(path: str, root: Path, workers: int) -> Json:
    """One epoch of ``path`` at ``workers``: wall and CPU time, first batch, images seen."""
    import_all(path)
    start, cpu = time.perf_counter(), _cpu()
    loader = build(path, root, workers)
    begin = time.perf_counter()
    iterator = iter(loader)
    images, captions, first, steady = 0, set(), 0.0, 0.0
    for number, batch in enumerate(iterator):
        if number == 0:
            first = time.perf_counter() - start
        elif number == 10:
            steady, steady_images = time.perf_counter(), images
        images += len(batch["caption"])
        captions.update(batch["caption"])
    end = time.perf_counter()
    del iterator, batch
    _close(loader)
    del loader
    gc.collect()  # workers joined and reaped: their CPU time is in RUSAGE_CHILDREN
    cpu = _cpu() - cpu
    return {
        "images_per_s": images / (end - begin),
        "images_per_cpu_s": images / cpu,
        "steady_images_per_s": (images - steady_images) / (end - steady) if steady else None,
        "first_batch_s": first,
        "epoch_s": end - begin,
        "cpu_s": cpu,
        "images": images,
        "distinct": len(captions),
    }


def child_resume(path: str, root: Path, repeat: int, *ks: int) -> Json:
    """Median seconds from a fresh loader to its first batch after a resume at each k."""
    import_all(path)
    replay = path == "webdataset"  # no state API: resuming it means reading k batches again
    states: dict[int, Any] = {}
    expected: dict[int, list[str]] = {}
    loader = build(path, root, 0)
    iterator = iter(loader)
    for number in range(max(ks) + 1):
        if number in ks and number and not replay:
            states[number] = loader.state_dict()
        batch = next(iterator)
        expected[number] = batch["caption"]
    del iterator
    _close(loader)
    out: Json = {}
    for k in ks:
        times, exact = [], True
        for _ in range(repeat + 1):  # the first run warms imports and caches
            start = time.perf_counter()
            loader = build(path, root, 0)
            if k in states:
                loader.load_state_dict(states[k])
            iterator = iter(loader)
            for _ in range(k if replay else 0):
                next(iterator)
            batch = next(iterator)
            times.append(time.perf_counter() - start)
            exact = exact and batch["caption"] == expected[k]
            del iterator
            _close(loader)
        out[str(k)] = {"seconds": statistics.median(times[1:]), "runs": times[1:], "exact": exact}
    return out


def child_index(root: Path) -> Json:
    """Open our WebDataset reader once: its header-only index is saved beside each shard."""
    from lightning_resumable_data.formats import open_webdataset

    start = time.perf_counter()
    for reader in open_webdataset(root / "wds"):
        reader.load()
        reader.close()
    return {"seconds": time.perf_counter() - start}


def run_child(spec: Sequence[str]) -> Json:
    """Run one measurement in this (child) process."""
    kind, *rest = spec
    if kind == "index":
        return child_index(Path(rest[0]))
    path, root, *counts = rest
    if kind == "read":
        return child_read(path, Path(root), int(counts[0]))
    return child_resume(path, Path(root), *map(int, counts))
