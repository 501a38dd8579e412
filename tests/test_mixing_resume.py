"""An online policy decides after a resume as it would have without the interruption.

The policy reads ``stats.metrics``: the last value logged per source of each metric. A
resumed run's ``trainer.callback_metrics`` holds only what was logged since the resume, so
the callback's checkpoint carries the mixer's memory of those values. Real Trainer runs of
``matrix/online_policy.py`` (forked from a warm server, the docs' softmax-of-loss policy)
are stopped by a checkpoint or a SIGKILL and resumed, on the same layout and from 2
processes onto 1; the resumed run must train the same batches, call the policy with the
same inputs and make the same weight changes as the uninterrupted run. Unit tests cover the
state's round trip, older checkpoints without it, and malformed states.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from faults.runner import ForkServer
from matrix.harness import Runs, ledger

from lightning_resumable_data import ResumableDataCallback, StateMismatchError
from lightning_resumable_data.lightning.mixing import OnlineMixer

SCRIPT = Path(__file__).with_name("matrix") / "online_policy.py"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    server = ForkServer(SCRIPT)
    yield Runs(server, tmp_path_factory.mktemp("policy"))
    server.close()


@pytest.fixture(scope="module")
def reference(runs: Runs) -> Path:
    """The uninterrupted run: 3 epochs of 16 steps, the policy every 2 steps."""
    return runs.run(runs.root / "reference", [])


def calls(out: Path, rank: int = 0) -> list[dict[str, Any]]:
    """The policy's calls: step, the metrics it saw, the weights it returned."""
    path = out / f"policy_rank{rank}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def result(out: Path, rank: int = 0) -> dict[str, Any]:
    return dict(json.loads((out / f"online_rank{rank}.json").read_text()))


def after(entries: list[dict[str, Any]], step: int) -> list[dict[str, Any]]:
    return [e for e in entries if e["step"] > step]


def assert_same_decisions(resumed: Path, reference: Path, stop: int) -> None:
    """The policy saw what it saw uninterrupted, and the same changes were applied."""
    later = after(calls(reference), stop)
    assert any(c["weights"] is not None for c in later)  # decisions to compare
    assert calls(resumed) == later  # its inputs (stats.metrics) and its answers
    assert result(resumed)["changes"] == after(result(reference)["changes"], stop)
    # the saved schedule is compacted to the resumed epoch: the same entries from there on
    epoch = ledger(resumed).ranks[0][0]["epoch"]
    schedules = [result(out)["schedule"] for out in (resumed, reference)]
    resumed_entries, reference_entries = ([e for e in s if e["epoch"] >= epoch] for s in schedules)
    assert resumed_entries == reference_entries


@pytest.mark.parametrize(
    "stop",
    [
        6,  # epoch 0, right after the sync point of step 6 (its decision is in the checkpoint)
        21,  # epoch 1, mid-epoch, a step before a sync point
        39,  # epoch 2, mid-epoch
    ],
)
def test_resumed_policy_decides_as_the_uninterrupted_one(
    runs: Runs, reference: Path, stop: int
) -> None:
    resumed = runs.run(
        runs.root / f"resume-{stop}", ["--ckpt", str(reference / "ckpt" / f"step={stop}.ckpt")]
    )
    full = ledger(reference)
    assert full.cut(stop).batches() + ledger(resumed).batches() == full.batches()
    assert_same_decisions(resumed, reference, stop)


def test_sigkill_then_resume_decides_as_the_uninterrupted_one(runs: Runs, reference: Path) -> None:
    killed = runs.root / "killed"
    killed.mkdir()
    outcome = runs.server.run(["--out", str(killed), "--kill", "30"], killed / "log.txt")
    assert outcome.rc == -9, outcome.tail()
    resumed = runs.run(runs.root / "after-kill", ["--ckpt", str(killed / "ckpt" / "step=30.ckpt")])
    assert (ledger(killed) + ledger(resumed)).batches() == ledger(reference).batches()
    assert calls(killed) + calls(resumed) == calls(reference)
    assert_same_decisions(resumed, reference, 30)


def test_epoch_end_checkpoint_keeps_the_epoch_aggregates(runs: Runs) -> None:
    # on_epoch=True: at an epoch's end Lightning replaces loss/<source> by the epoch's mean,
    # after the last batch end; the checkpoint written then must hold it, as the
    # uninterrupted run's callback_metrics do until the source is logged again.
    reference = runs.run(runs.root / "on-epoch", ["--on-epoch"])
    checkpoint = reference / "ckpt" / "epoch=0-end.ckpt"
    resumed = runs.run(runs.root / "on-epoch-resumed", ["--on-epoch", "--ckpt", str(checkpoint)])
    full = ledger(reference)
    assert full.cut(16).batches() + ledger(resumed).batches() == full.batches()
    assert_same_decisions(resumed, reference, 16)


@pytest.mark.distributed
def test_two_processes_resumed_on_one_decide_as_uninterrupted(runs: Runs) -> None:
    # Rank 0's values decide, and what a rank logs depends on the samples it holds; so the
    # logged values here are a function of the step alone (--synthetic), the same on 2
    # processes of batch 4 and on 1 of batch 8 (the same 8 samples a step).
    two = runs.run(runs.root / "ddp", ["--devices", "2", "--synthetic"])
    stop = 10  # epoch 1 of 8 steps, mid-epoch, right after a sync point
    checkpoint = two / "ckpt" / f"step={stop}.ckpt"
    one = runs.run(
        runs.root / "ddp-on-one",
        ["--devices", "1", "--batch-size", "8", "--synthetic", "--ckpt", str(checkpoint)],
    )
    full = ledger(two)
    assert full.cut(stop).stream() + ledger(one).stream() == full.stream()
    assert len(full.ranks) == 2
    assert_same_decisions(one, two, stop)


# -- the state --------------------------------------------------------------------------------


def test_memory_round_trips_through_the_checkpoint_exactly() -> None:
    mixer = OnlineMixer(None, every_n_steps=None)
    value = torch.tensor(0.1, dtype=torch.float32)  # as Lightning holds a logged value
    mixer.load_state_dict({"loss": {"web": 0.1 + 0.2, "code": float(value)}, "acc": {}})
    callback = ResumableDataCallback()
    callback.mixer = mixer
    state = callback.state_dict()
    assert state["source_metrics"] == {"loss": {"web": 0.1 + 0.2, "code": float(value)}, "acc": {}}
    assert all(type(v) is float for v in state["source_metrics"]["loss"].values())
    restored = ResumableDataCallback()
    restored.load_state_dict(pickle.loads(pickle.dumps(state)))
    assert restored.mixer.state_dict() == state["source_metrics"]
    assert [v.hex() for v in restored.mixer.state_dict()["loss"].values()] == [
        (0.1 + 0.2).hex(),
        float(value).hex(),
    ]


def test_a_checkpoint_without_the_memory_loads_as_an_empty_one() -> None:
    callback = ResumableDataCallback()
    callback.mixer.load_state_dict({"loss": {"web": 1.0}})
    callback.load_state_dict({"version": 1, "phases": [], "training_seed": 5})
    assert callback.mixer.state_dict() == {}


def test_a_callback_state_of_another_version_is_refused_and_nothing_changes() -> None:
    """The callback's state carries its version; one this package cannot read is refused."""
    callback = ResumableDataCallback()
    state = callback.state_dict()
    assert state["version"] == 1
    callback.mixer.load_state_dict({"loss": {"web": 2.0}})
    with pytest.raises(StateMismatchError, match="has version 2, and this version of"):
        callback.load_state_dict({**state, "version": 2})
    assert callback.mixer.state_dict() == {"loss": {"web": 2.0}}
    callback.load_state_dict({key: value for key, value in state.items() if key != "version"})


@pytest.mark.parametrize(
    ("saved", "named"),
    [
        ([1.0], "source_metrics = [1.0] (list), not a dict"),
        ({"loss": [1.0]}, "source_metrics['loss'] = [1.0] (list), not a dict"),
        ({1: {"web": 1.0}}, "the key 1 (int) in source_metrics, not a metric name (str)"),
        ({"loss": {0: 1.0}}, "the key 0 (int) in source_metrics['loss'], not a source name"),
        ({"loss": {"web": "1.0"}}, "source_metrics['loss']['web'] = '1.0' (str), not a float"),
        ({"loss": {"web": True}}, "source_metrics['loss']['web'] = True (bool), not a float"),
        ({"loss": {"web": torch.tensor(1.0)}}, "['loss']['web'] = tensor(1.) (Tensor), not a"),
    ],
)
def test_a_malformed_memory_is_refused_and_nothing_changes(saved: object, named: str) -> None:
    callback = ResumableDataCallback()
    callback.mixer.load_state_dict({"loss": {"web": 2.0}})
    with pytest.raises(TypeError) as error:
        callback.load_state_dict(
            {"version": 1, "phases": [], "training_seed": None, "source_metrics": saved}
        )
    message = str(error.value)
    assert named in message
    assert "{metric name: {source: float}}" in message
    assert "delete" in message  # how to fix it
    assert callback.mixer.state_dict() == {"loss": {"web": 2.0}}


def test_a_fit_from_scratch_forgets_and_a_continued_fit_remembers() -> None:
    # as Lightning's callback_metrics: empty for a fit from scratch; a fit continued on the
    # same trainer (global_step > 0) is one uninterrupted run, so the values stay
    callback = ResumableDataCallback()
    callback.mixer.load_state_dict({"loss": {"web": 2.0}})
    continued = SimpleNamespace(datamodule=None, global_step=12)
    callback.setup(continued, None, "fit")  # type: ignore[arg-type]
    assert callback.mixer.state_dict() == {"loss": {"web": 2.0}}
    callback.setup(SimpleNamespace(datamodule=None, global_step=0), None, "fit")  # type: ignore[arg-type]
    assert callback.mixer.state_dict() == {}
