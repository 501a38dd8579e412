"""torchdata's StatefulDataLoader suite run against ours: the one place for exclusions.

The test files are torchdata v0.11.0's ``test/stateful_dataloader/`` (BSD-3-Clause, see
``LICENSE`` here), vendored with only the import of ``StatefulDataLoader`` changed to ours;
each file's header names its source commit. A test is listed in ``EXCLUDED`` only if it
reads torchdata's private state layout or iterator internals, or meets a deliberate
difference (docs/migration/torchdata.md); it is marked ``xfail(strict=True)``, so an entry
that starts passing fails the run and the list cannot go stale.

``test_dataloader.py`` is torch's own DataLoader suite run through the loader (several
minutes, with subprocess and spawn tests): it is collected only with ``LRD_TORCHDATA_FULL=1``
(``make torchdata-suite`` sets it).
"""

from __future__ import annotations

import importlib.util
import os

import pytest

_LAZY = "deliberate: iter() is lazy, the pass starts its workers (and raises) at the first next()"

# test node id (file::Class::test) -> why it cannot pass against our loader.
EXCLUDED: dict[str, str] = {
    "test_state_dict.py::TestNumWorkersMismatch_shard3::test_num_workers_mismatch": _LAZY
    + "; torchdata's AssertionError for another num_workers comes there, not in iter()",
    "test_state_dict.py::TestInitialState_shard0::test_init_error": _LAZY
    + "; the worker_init_fn's ValueError comes there, not in iter()",
}
_WORKERS = (
    "reads iter(loader)._workers, torch's iterator internals: ours is a CountingIterator that "
    "wraps torchdata's, created at the first next()"
)
_INFO = _WORKERS + "; also fails with torchdata's own class here (the spawned child exits 1)"
for _cls in ("TestDataLoader", "TestDataLoaderPersistentWorkers"):
    EXCLUDED[f"test_dataloader.py::{_cls}::test_iterable_style_dataset"] = _WORKERS
    EXCLUDED[f"test_dataloader.py::{_cls}::test_partial_workers"] = _WORKERS
    EXCLUDED[f"test_dataloader.py::{_cls}::test_get_worker_info"] = _INFO

# Modules whose third-party dependencies are optional.
NEEDS = {"test_hugging_face.py": "datasets"}

# Modules collected only when this environment variable is set.
OPT_IN = {"test_dataloader.py": "LRD_TORCHDATA_FULL"}


def pytest_ignore_collect(collection_path, config):  # type: ignore[no-untyped-def]
    """Skip a module whose optional dependency is missing, or that is opt-in and not asked for."""
    needed = NEEDS.get(collection_path.name)
    if needed and importlib.util.find_spec(needed) is None:
        return True
    variable = OPT_IN.get(collection_path.name)
    return bool(variable and not os.environ.get(variable))


# torchdata's tests resume torchdata's own samplers on purpose: our notice that such a resume
# replays the sampler (a UserWarning for users) is expected here, not news
EXPECTED_WARNING = "ignore:StatefulDataLoader resumes .* through torchdata's per-rank state"


def pytest_collection_modifyitems(config, items):  # type: ignore[no-untyped-def]
    """Mark the listed tests xfail(strict=True), with their reasons."""
    for item in items:
        if "torchdata_suite/" not in item.nodeid:
            continue
        item.add_marker(pytest.mark.filterwarnings(EXPECTED_WARNING))
        name = item.nodeid.split("torchdata_suite/", 1)[-1].split("[", 1)[0]
        reason = EXCLUDED.get(name)
        if reason is not None:
            item.add_marker(pytest.mark.xfail(reason=reason, strict=True))
