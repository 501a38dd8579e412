"""Training randomness across a resume: final parameters bit-identical to the uninterrupted run.

Real ``Trainer`` runs (``train_dropout.py``: dropout, noise from torch, NumPy and ``random``
under ``seed_training=("torch", "numpy", "random")``; a torch-only model under the default,
keyed augmentations, ``val_check_interval=0.5`` with a validation step that draws from the
global generators) forked from one warm process. Every resumed run's parameters are compared
with ``torch.equal`` against the uninterrupted run's: from checkpoints mid-epoch, just before
and just after a mid-epoch validation, at an epoch's last batch and at an epoch end, after a
real SIGKILL, with ``num_workers`` 0 -> 2, with gradient accumulation, under two-process DDP
(both ranks). An elastic resume (another batch size) is deterministic: two resumed runs are
identical to each other. ``seed_training=False`` leaves the generators alone, and the resume
then diverges (the control that shows the comparison has teeth).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from faults.runner import ForkServer, newest_complete_checkpoint

SCRIPT = Path(__file__).with_name("train_dropout.py")
STEPS_PER_EPOCH = 16  # 64 samples, batch size 4; validation after batches 8 and 16

pytestmark = pytest.mark.distributed


class Runs:
    """Runs of ``train_dropout.py`` through one fork server; references cached by arguments."""

    def __init__(self, server: ForkServer, root: Path) -> None:
        self.server, self.root = server, root
        self.cache: dict[tuple[str, ...], Path] = {}

    def run(self, name: str, args: list[str], *, killed: bool = False) -> Path:
        out = self.root / name
        out.mkdir(parents=True, exist_ok=True)
        result = self.server.run(["--out", str(out), *args], out / "log.txt", timeout=180)
        assert not result.timed_out, result.tail()
        assert result.rc == (-9 if killed else 0), result.tail()
        return out

    def reference(self, *args: str) -> Path:
        if args not in self.cache:
            self.cache[args] = self.run(f"ref-{len(self.cache)}", list(args))
        return self.cache[args]


def params(out: Path, rank: int = 0) -> dict[str, torch.Tensor]:
    loaded: dict[str, torch.Tensor] = torch.load(out / f"params_rank{rank}.pt")
    return loaded


def identical(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    server = ForkServer(SCRIPT)
    yield Runs(server, tmp_path_factory.mktemp("randomness"))
    server.close()


CHECKPOINTS = {
    "mid-epoch": "step=5.ckpt",
    "before mid-epoch validation": "step=8.ckpt",  # written before validation ran
    "after mid-epoch validation": "step=9.ckpt",
    "epoch's last batch": f"step={STEPS_PER_EPOCH}.ckpt",
    "epoch end": "epoch=0-end.ckpt",
    "second epoch": f"step={STEPS_PER_EPOCH + 5}.ckpt",
}


@pytest.mark.parametrize("stop", list(CHECKPOINTS))
def test_resume_gives_bit_identical_parameters(runs: Runs, stop: str) -> None:
    reference = runs.reference()
    checkpoint = reference / "ckpt" / CHECKPOINTS[stop]
    resumed = runs.run(f"resume-{stop}".replace(" ", "_"), ["--ckpt", str(checkpoint)])
    assert identical(params(resumed), params(reference))


def test_sigkill_then_resume_gives_bit_identical_parameters(runs: Runs) -> None:
    killed = runs.run("killed", ["--kill-at", "11"], killed=True)
    resume = newest_complete_checkpoint(killed / "ckpt")
    assert resume.path is not None
    assert resume.step == 11
    resumed = runs.run("after-kill", ["--ckpt", str(resume.path)])
    assert identical(params(resumed), params(runs.reference()))


def test_resume_with_more_workers_gives_bit_identical_parameters(runs: Runs) -> None:
    checkpoint = runs.reference() / "ckpt" / "step=5.ckpt"
    resumed = runs.run("workers-0to2", ["--workers", "2", "--ckpt", str(checkpoint)])
    assert identical(params(resumed), params(runs.reference()))


def test_resume_under_gradient_accumulation(runs: Runs) -> None:
    reference = runs.reference("--accumulate", "3")
    checkpoint = reference / "ckpt" / "step=3.ckpt"  # after 9 batches: mid-epoch, post-val
    resumed = runs.run("accumulate", ["--accumulate", "3", "--ckpt", str(checkpoint)])
    assert identical(params(resumed), params(reference))


def test_two_process_ddp_resume_gives_bit_identical_parameters_on_both_ranks(
    runs: Runs,
) -> None:
    reference = runs.reference("--devices", "2")
    assert identical(params(reference, 0), params(reference, 1))  # DDP keeps them in sync
    checkpoint = reference / "ckpt" / "step=3.ckpt"  # 8 batches an epoch: mid-epoch
    resumed = runs.run("ddp", ["--devices", "2", "--ckpt", str(checkpoint)])
    for rank in (0, 1):
        assert identical(params(resumed, rank), params(reference, rank))


def test_elastic_resume_is_deterministic(runs: Runs) -> None:
    checkpoint = runs.reference() / "ckpt" / "step=5.ckpt"
    args = ["--batch-size", "8", "--ckpt", str(checkpoint)]
    first, second = runs.run("elastic-1", args), runs.run("elastic-2", args)
    assert identical(params(first), params(second))
    assert not identical(params(first), params(runs.reference()))  # another layout


def test_the_default_seeding_resumes_a_torch_only_model_bit_identically(runs: Runs) -> None:
    """docs/randomness.md: the default (``seed_training=True``, no argument) reseeds torch's
    generators: a model with dropout and torch noise resumes to identical parameters, also
    just after a mid-epoch validation that drew from them."""
    reference = runs.reference("--torch-only")
    checkpoint = reference / "ckpt" / CHECKPOINTS["after mid-epoch validation"]
    resumed = runs.run("torch-only", ["--torch-only", "--ckpt", str(checkpoint)])
    assert identical(params(resumed), params(reference))
    assert not identical(params(reference), params(runs.reference()))  # another model


def test_without_seeding_the_resume_diverges(runs: Runs) -> None:
    """The control: ``seed_training=False`` leaves the generators alone, so a resume differs."""
    reference = runs.reference("--no-seed")
    again = runs.run("no-seed-again", ["--no-seed"])
    assert identical(params(again), params(reference))  # seed_everything: repeatable
    checkpoint = reference / "ckpt" / "step=5.ckpt"
    resumed = runs.run("no-seed-resume", ["--no-seed", "--ckpt", str(checkpoint)])
    assert not identical(params(resumed), params(reference))
