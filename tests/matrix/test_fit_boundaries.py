"""What happens around a fit: evaluating a checkpoint between fits, and stopped fits resumed.

Each cell is a real ``Trainer`` run in the settings users set, with the callback passed and
with none (the DataModule installs it: the documented default), compared batch by batch
(step, batch index, sample ids) with the uninterrupted three-epoch run, and counted:

* ``fit -> test/validate(ckpt_path) -> fit``: on the same trainer the data goes on from the
  live position; a new trainer starts at the beginning, or at the checkpoint it is given;
  evaluating a checkpoint moves nothing;
* a fit stopped in the middle of an epoch by ``max_steps``, ``should_stop``, ``max_time`` or
  SIGTERM (a preemption: Lightning raises at the batch's end and ``on_exception`` saves),
  whose epoch-end hooks ran, then ``trainer.fit(..., ckpt_path="last")`` with the same
  ``max_epochs`` (the SLURM resubmission pattern): every epoch is trained, none lost;
* the same job stopped three times, with ``last.ckpt`` written at epoch ends (the default)
  or every 16 steps (then at each epoch's last batch): stops in every epoch, each resumed
  from ``last.ckpt``; the batches after the checkpoint a stop left are trained again, as
  in any resume, and nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from faults.runner import ForkServer

from matrix.harness import SCRIPT, Runs, ledger

pytestmark = pytest.mark.distributed

CALLBACK_CONFIGS = ("none", "after")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    server = ForkServer(SCRIPT)
    yield Runs(server, tmp_path_factory.mktemp("boundaries"))
    server.close()


def _lines(run: Any) -> list[tuple[Any, Any, Any, Any]]:
    return [(x["step"], x["epoch"], x["batch"], x["ids"]) for x in ledger(run).ranks[0]]


@pytest.mark.parametrize("callback", CALLBACK_CONFIGS)
@pytest.mark.parametrize("then", ["same", "new", "new-ckpt"])
@pytest.mark.parametrize("evaluate", ["test", "validate"])
def test_evaluating_a_checkpoint_between_fits_moves_nothing(
    runs: Runs, evaluate: str, then: str, callback: str
) -> None:
    """Fit to step 22, evaluate the step-10 checkpoint, then fit to step 48."""
    name = f"eval-{evaluate}-{then}-{callback}"
    args = ["--max-epochs", "-1", "--max-steps", "22", "--callback", callback]
    args += ["--evaluate", evaluate, "--evaluate-step", "10", "--then", then]
    out = runs.run(runs.root / name, [*args, "--refit-max-steps", "48"])
    reference = _lines(runs.reference("default", 4, callback=callback))
    assert len(reference) == 48
    lines = _lines(out)
    first, rest = lines[:22], lines[22:]
    assert [x[3] for x in first] == [x[3] for x in reference[:22]]
    if then == "same":  # the live position goes on, and Lightning's counters with it
        assert rest == reference[22:]
    elif then == "new":  # a new trainer without ckpt_path starts at the beginning
        assert rest == reference
    else:  # a new trainer from the evaluated checkpoint resumes it exactly
        assert rest == reference[10:]


STOPS = {
    "max_steps": ["--max-steps", "22"],
    "should_stop": ["--stop", "should_stop", "--stop-step", "22"],
    "sigterm": ["--stop", "sigterm", "--stop-step", "22"],
    "max_time": ["--max-time", "1.5", "--step-sleep", "0.05"],
}


@pytest.mark.parametrize("callback", CALLBACK_CONFIGS)
@pytest.mark.parametrize("stop", list(STOPS))
def test_a_fit_stopped_mid_epoch_resumed_from_last_trains_every_epoch(
    runs: Runs, stop: str, callback: str
) -> None:
    """``max_epochs=3``, stopped in epoch 1, resubmitted with ``ckpt_path="last"``."""
    out = runs.root / f"stop-{stop}-{callback}"
    common = ["--max-epochs", "3", "--last", "--callback", callback]
    runs.run(out, [*common, *STOPS[stop]], rc=None if stop == "sigterm" else 0)
    stopped = _lines(out)
    assert 0 < len(stopped) < 48  # max_time: wherever the clock stops it (22 steps otherwise)
    assert (out / "last" / "last.ckpt").exists()
    runs.run(out, [*common, "--ckpt", "last"])
    reference = _lines(runs.reference("default", 4, callback=callback))
    lines = _lines(out)
    assert len(lines) == len(reference) == 48  # 3 epochs x 16 batches, none lost or repeated
    assert lines == reference


@pytest.mark.parametrize(
    ("stop", "last_every", "stops"),
    [
        ("max_steps", 0, (10, 22, 40)),
        ("max_steps", 16, (10, 22, 40)),
        ("should_stop", 0, (10, 22, 40)),
        ("should_stop", 16, (10, 22, 40)),
        # at the last batch of epochs 0 and 1: the second stop's checkpoint is that of an
        # epoch Lightning, resumed from the previous epoch's last batch, never counted as
        # started (checkpoint_counters.match_epoch_counters' second case)
        ("max_steps", 16, (16, 32)),
    ],
    ids=lambda value: "-".join(map(str, value)) if isinstance(value, tuple) else str(value),
)
def test_a_job_stopped_three_times_trains_every_epoch_once(
    runs: Runs, stop: str, last_every: int, stops: tuple[int, ...]
) -> None:
    """Stopped at ``stops`` (e.g. steps 10, 22 and 40: epochs 0, 1, 2), each leg resumed with
    ``ckpt_path="last"``."""
    out = runs.root / f"stops-{stop}-{last_every}-{'-'.join(map(str, stops))}"
    common = ["--max-epochs", "3", "--last", "--last-every", str(last_every), "--callback", "none"]
    for leg, at in enumerate([*stops, None]):
        args = [*common]
        if at is not None:
            args += ["--max-steps", str(at)] if stop == "max_steps" else []
            args += ["--stop", "should_stop", "--stop-step", str(at)] if stop != "max_steps" else []
        if leg:  # resubmitted: what was trained after last.ckpt is trained again
            step = torch.load(out / "last" / "last.ckpt", weights_only=False)["global_step"]
            _forget_after(out, step)
            args += ["--ckpt", "last"]
        runs.run(out, args)
    reference = _lines(runs.reference("default", 4, callback="none"))
    assert _lines(out) == reference
    assert len(reference) == 48


def _forget_after(out: Path, step: int) -> None:
    """Drop the ledger lines of the optimizer steps from ``step`` on."""
    for path in out.glob("ids_rank*.jsonl"):
        lines = path.read_text().splitlines()
        path.write_text("".join(x + "\n" for x in lines if json.loads(x)["step"] < step))


@pytest.mark.parametrize(
    "first",
    [["--max-epochs", "1"], ["--max-steps", "16"], ["--stop", "should_stop", "--stop-step", "16"]],
)
def test_a_finished_epoch_resumed_with_max_steps_starts_the_next(
    runs: Runs, first: list[str]
) -> None:
    """The first fit ends with epoch 0 (``last.ckpt`` by its end hooks or at the fit's end);
    the resumed one sets ``max_steps`` (Lightning then always restarts, and on its own
    trained one more batch of epoch 0, or none of epoch 1)."""
    out = runs.root / ("finished-" + "-".join(first).replace("--", ""))
    common = ["--last", "--callback", "none"]
    runs.run(out, [*common, "--max-epochs", "3", *first])  # the last --max-epochs counts
    assert len(_lines(out)) == 16
    runs.run(out, [*common, "--max-epochs", "3", "--max-steps", "48", "--ckpt", "last"])
    assert _lines(out) == _lines(runs.reference("default", 4, callback="none"))
