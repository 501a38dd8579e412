"""``lrd inspect`` imports neither torch nor Lightning, answers fast, and says what it said.

The file is read by ``cli._unpickle`` (tests/test_checkpoint_reader.py) and the dry runs
are the torch-free shadows of ``cli._shadow``; the real data module and loader are asked
only where a shadow refuses. These tests hold the whole report equal with and without the
shadows, over generated runs (single datasets and mixtures with phases, cut steps and
quarantined samples, saved states tampered with) and resume layouts; and run ``lrd
inspect`` on real Lightning checkpoints in fresh interpreters, checking what they imported
and how long they took.

Timing: each command runs in a fresh interpreter three times; the fastest wall time,
interpreter start-up included, must be under 1 s (it is about 0.2 s on 2 busy CPUs, against
3 s when torch and Lightning were imported). The import check is the strict one.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from lightning.pytorch.demos.boring_classes import BoringModel, RandomDataset
from lightning_helpers import make_trainer
from lightning_helpers import quiet_lightning as quiet_lightning  # an autouse fixture

from lightning_resumable_data import MixturePhase, ResumableDataCallback, ResumableDataModule
from lightning_resumable_data.cli import _resume_report, _shadow_run, checkpoint, main
from lightning_resumable_data.cli._dryrun import quiet
from lightning_resumable_data.cli._errors import CliError
from lightning_resumable_data.cli._reading import find_data_state
from lightning_resumable_data.lightning.plan import PlanConfig
from lightning_resumable_data.loader import StatefulDataLoader
from lightning_resumable_data.samplers.distributed import DistributedSampler
from lightning_resumable_data.samplers.mixture import MixtureSampler

# -- real checkpoints, in fresh interpreters ----------------------------------------------------


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A single dataset and a mixture with a phase at step 4, fit by a real Trainer."""
    root = tmp_path_factory.mktemp("runs")
    single = ResumableDataModule(RandomDataset(32, 96), batch_size=4, seed=5)
    trainer = make_trainer(root / "single", max_steps=10)
    trainer.fit(BoringModel(), datamodule=single)
    trainer.save_checkpoint(root / "single.ckpt")
    sources = {"web": RandomDataset(32, 64), "code": RandomDataset(32, 24)}
    mixture = ResumableDataModule(sources, batch_size=4, seed=5, weights={"web": 3, "code": 1})
    phase = MixturePhase(start_step=4, weights={"web": 1, "code": 3})
    trainer = make_trainer(root / "mix", ResumableDataCallback(phases=[phase]), max_steps=6)
    trainer.fit(BoringModel(), datamodule=mixture)
    trainer.save_checkpoint(root / "mixture.ckpt")
    return {"single": root / "single.ckpt", "mixture": root / "mixture.ckpt"}


_PROBE = """\
import json, sys
from lightning_resumable_data.cli import main
code = main(sys.argv[1:])
heavy = sorted(m for m in ("torch", "lightning", "pytorch_lightning", "torchdata")
               if m in sys.modules)
print(json.dumps({"code": code, "heavy": heavy}), file=sys.stderr)
"""


def _probe(*argv: str) -> tuple[dict[str, Any], str, float]:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, timeout=120
    )
    seconds = time.perf_counter() - start
    probe: dict[str, Any] = json.loads(done.stderr.strip().splitlines()[-1])
    return probe, done.stdout, seconds


@pytest.mark.parametrize("run", ["single", "mixture"])
@pytest.mark.parametrize("layout", [[], ["--world-size", "3"], ["--batch-size", "2", "--json"]])
def test_lrd_inspect_imports_neither_torch_nor_lightning(
    runs: dict[str, Path], run: str, layout: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Exact and elastic resumes (the mixture's phase placed anew): no torch, same output."""
    argv = ["inspect", str(runs[run]), *layout]
    probe, out, _ = _probe(*argv)
    assert probe["code"] == 0
    assert probe["heavy"] == [], f"lrd inspect imported {probe['heavy']}"
    with _real_dry_runs():  # the same command in this process, the real way
        assert main(argv) == 0
    assert out == capsys.readouterr().out


def test_lrd_inspect_answers_in_under_a_second(runs: dict[str, Path]) -> None:
    """Best of three fresh interpreters, start-up included (see the module's docstring)."""
    for run in ("single", "mixture"):
        best = min(_probe("inspect", str(runs[run]))[2] for _ in range(3))
        assert best < 1.0, f"lrd inspect {run} took {best:.2f} s at best"


def test_a_refused_resume_is_the_real_data_modules_answer(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Where the shadows refuse (here: the saved seed differs from the sampler's), the real
    data module is asked, torch and all, and its error is the report's."""
    import torch

    saved = torch.load(runs["single"], weights_only=True)
    saved["ResumableDataModule"]["config"]["seed"] = 6
    path = tmp_path / "tampered.ckpt"
    torch.save(saved, path)
    probe, out, _ = _probe("inspect", str(path))
    assert probe["code"] == 0
    assert "torch" in probe["heavy"]
    assert "REFUSED" in out
    assert "seed: saved 5, now 6" in " ".join(out.split())  # the sampler refuses
    with _real_dry_runs():
        assert main(["inspect", str(path)]) == 0
    assert out == capsys.readouterr().out


# -- the shadows against the real objects --------------------------------------------------------


@contextlib.contextmanager
def _real_dry_runs() -> Iterator[None]:
    """No shadows: every dry run is the real data module's, loader's or sampler's."""
    with contextlib.ExitStack() as stack:
        for module, name in (
            (_resume_report, "shadow_resume_datamodule"),
            (_resume_report, "shadow_resume_loader"),
            (checkpoint, "shadow_counts"),
        ):
            stack.enter_context(mock.patch.object(module, name, return_value=None))
        yield


def _phases(names: list[str], by_step: bool) -> st.SearchStrategy[list[MixturePhase]]:
    weights = st.lists(st.integers(0, 5), min_size=len(names), max_size=len(names)).filter(any)
    start = st.integers(0, 30) if by_step else st.integers(0, 3)
    phase = st.tuples(start, weights, st.sampled_from([0.5, 1.0, 3.0])).map(
        lambda t: MixturePhase(
            **{"start_step" if by_step else "start_epoch": t[0]},
            weights=dict(zip(names, t[1], strict=True)),
            temperature=t[2],
        )
    )
    starts = (lambda p: p.start_step) if by_step else (lambda p: p.start_epoch)
    return st.lists(phase, max_size=3, unique_by=starts).map(lambda ps: sorted(ps, key=starts))


@st.composite
def _configs(draw: st.DrawFn) -> PlanConfig:
    layout: dict[str, Any] = {
        "batch_size": draw(st.integers(1, 6)),
        "world_size": draw(st.integers(1, 4)),
        "accumulate_grad_batches": draw(st.integers(1, 3)),
        "seed": draw(st.sampled_from([0, 5, 1234, 2**64 - 1])),
    }
    if draw(st.booleans()):
        names = ["web", "code", "math"][: draw(st.integers(1, 3))]
        sizes = draw(st.lists(st.integers(1, 40), min_size=len(names), max_size=len(names)))
        weights = draw(st.lists(st.integers(0, 4), min_size=len(names), max_size=len(names)))
        return PlanConfig(
            sources=dict(zip(names, sizes, strict=True)),
            weights=dict(zip(names, map(float, weights), strict=True)) if any(weights) else None,
            temperature=draw(st.sampled_from([0.5, 1.0, 2.0])),
            samples_per_epoch=draw(st.one_of(st.none(), st.integers(1, 120))),
            phases=tuple(draw(_phases(names, draw(st.booleans())))),
            **layout,
        )
    return PlanConfig(
        sources={"": draw(st.integers(1, 80))},
        shuffle=draw(st.booleans()),
        algorithm=draw(st.sampled_from(["randperm", "feistel"])),
        drop_last=draw(st.booleans()),
        **layout,
    )


class _Reader:
    """Reads a loader batch by batch, across epochs (a fresh iterator at each epoch's end)."""

    def __init__(self, loader: StatefulDataLoader[Any]) -> None:
        self.loader = loader
        self.iterator: Iterator[Any] = iter(loader)
        self.ended = False  # no further epoch (an empty one, or seed + epoch >= 2**64)

    def read(self, batches: int) -> None:
        for _ in range(batches if not self.ended else 0):
            try:
                next(self.iterator)
            except StopIteration:
                self.iterator = iter(self.loader)
                try:
                    self.ended = next(self.iterator, None) is None
                except ValueError:  # seed + epoch past 2**64 - 1: that run ends here
                    self.ended = True
                if self.ended:
                    return


def _grown(sources: dict[str, int]) -> dict[str, int]:
    return {name: size + 1 for name, size in sources.items()}


_TAMPER: dict[str, Callable[[dict[str, Any]], None]] = {
    "seed": lambda m: m["config"].update(seed=m["config"]["seed"] ^ 1),
    "sizes": lambda m: m["config"].update(sources=_grown(m["config"]["sources"])),
    "phases": lambda m: m["config"].update(phases=m["config"]["phases"][:-1]),
    "consumed": lambda m: m["train_loader"].update(consumed=m["train_loader"]["consumed"] + 1),
    "sampler-consumed": lambda m: m["train_loader"]["sampler"].update(consumed=10**6),
    "batches": lambda m: m["train_loader"].update(batches_yielded=-1),
    "version": lambda m: m["train_loader"]["sampler"].update(version=0),
    "fingerprint": lambda m: m["train_loader"]["sampler"]["fingerprint"].update(seed=1),
    "schedule": lambda m: m["train_loader"]["sampler"].pop("schedule", None),
    "skips": lambda m: m["train_loader"]["sampler"].update(skips=[[0, 0, 10**6]]),
}


@st.composite
def _checkpoints(draw: st.DrawFn) -> tuple[dict[str, Any], int | None, int | None]:
    config = draw(_configs())
    try:
        module = config.datamodule()
        loader = module.train_dataloader()
    except (ValueError, TypeError):
        assume(False)
        raise
    sampler = loader.position_sampler
    cut = draw(st.sampled_from(["none", "skip", "quarantine"]))
    if cut != "none" and not isinstance(sampler, MixtureSampler):
        assert isinstance(sampler, DistributedSampler)
        size = sampler.epoch_size(0)
        if cut == "skip" and size > 1:
            start = draw(st.integers(0, size - 2))
            sampler.skip_positions(0, start, draw(st.integers(start + 1, size)))
        elif cut == "quarantine":
            sampler.quarantine(draw(st.lists(st.integers(0, size - 1), min_size=1, max_size=3)))
        event(f"cut: {cut}")
    trained, reader = draw(st.integers(0, 40)), _Reader(loader)
    reader.read(trained)
    if isinstance(sampler, MixtureSampler) and draw(st.booleans()):  # a callback's set_weights
        width = len(sampler.mixture.names)
        weights = draw(st.lists(st.integers(0, 4), min_size=width, max_size=width).filter(any))
        sampler.update_weights([float(w) for w in weights], kind="online")
        more = draw(st.integers(0, 20))
        reader.read(more)
        trained += more
        event("an online change")
    state = module.state_dict()
    state["global_step"] = trained // config.accumulate_grad_batches
    tamper = draw(st.sampled_from([*[None] * len(_TAMPER), *_TAMPER]))  # half are tampered
    if tamper is not None:
        _TAMPER[tamper](state)
        event(f"tampered: {tamper}")
    if draw(st.booleans()):
        saved: dict[str, Any] = {"ResumableDataModule": state, "global_step": 0, "epoch": 0}
    else:  # a Fabric checkpoint: the loader's state alone
        saved = {"data": state["train_loader"]}
    world = draw(st.one_of(st.none(), st.integers(1, 5)))
    return saved, world, draw(st.one_of(st.none(), st.integers(1, 8)))


def _inspect(saved: dict[str, Any], world: int | None, batch: int | None) -> object:
    """The report (or the error) of ``lrd inspect`` on ``saved``."""
    with quiet():
        try:
            found = find_data_state(saved, "x.ckpt")
            return checkpoint._report(Path("x.ckpt"), saved, found, world, batch)
        except (CliError, KeyError, TypeError, ValueError, IndexError) as error:
            return f"{type(error).__name__}: {error}"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_checkpoints())
def test_the_report_is_the_same_with_the_shadows_as_with_the_real_objects(
    case: tuple[dict[str, Any], int | None, int | None],
) -> None:
    saved, world, batch = case
    answered = []

    def recording(shadow: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            result = shadow(*args)
            answered.append(result is not None)
            return result

        return call

    with (
        mock.patch.object(
            _resume_report,
            "shadow_resume_datamodule",
            recording(_shadow_run.shadow_resume_datamodule),
        ),
        mock.patch.object(
            _resume_report, "shadow_resume_loader", recording(_shadow_run.shadow_resume_loader)
        ),
    ):
        with_shadows = _inspect(saved, world, batch)
    with _real_dry_runs():
        real = _inspect(saved, world, batch)
    assert with_shadows == real
    event(f"shadow answered: {answered}")
