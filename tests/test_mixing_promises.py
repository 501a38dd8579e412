"""docs/mixing.md's online-mixing rules, each checked in the form the page states it.

The sources are disjoint id ranges (``a`` = 0..99, ``b`` = 100..199, ...) and every weight
vector gives one source all the mass (the page: "give ``0`` to leave one out"), so the ids
of a batch say which weights were in force for each of its samples: the oracle is the
documented step boundary written out by hand, never the library's own record. The
multi-rank rows run one real two-process DDP fit (Lightning's standard ``ddp`` launcher,
gloo) of this file as a script, and resume its checkpoint here on one process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from argparse import Namespace
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import Logger
from lightning_helpers import (
    IdsModel,
    make_trainer,
    quiet_lightning,  # noqa: F401  (an autouse fixture)
)
from torch.utils.data import TensorDataset

from lightning_resumable_data import ResumableDataCallback, ResumableDataModule
from lightning_resumable_data.lightning.mixing import MixingStats

NAMES = "abcd"
ONLY = {n: {m: float(m == n) for m in NAMES} for n in NAMES}  # all the mass on one source
SCRIPT_TIMEOUT = 240


def source(sample_id: int) -> str:
    return NAMES[sample_id // 100]


def datamodule(**kwargs: Any) -> ResumableDataModule:
    """Four sources of 100 ids each, read from ``a`` only until a change."""
    return ResumableDataModule(
        {n: TensorDataset(torch.arange(100 * i, 100 * i + 100)) for i, n in enumerate(NAMES)},
        seed=7,
        weights=ONLY["a"],
        **kwargs,
    )


def batch_sources(seen: list[tuple[int, int, list[int]]]) -> list[str]:
    """Per training batch, the sources its samples came from (``"ab"``: both)."""
    return ["".join(sorted({source(i) for i in ids})) for _, _, ids in seen]


class SetWeightsAt(IdsModel):
    """Calls ``callback.set_weights`` from ``training_step`` at given steps (and ranks)."""

    def __init__(
        self,
        callback: ResumableDataCallback,
        calls: dict[int, tuple[int | None, dict[str, float]]],
    ) -> None:
        super().__init__()
        self.callback, self.calls = callback, calls

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        call = self.calls.get(self.global_step)
        if call is not None and call[0] in (None, self.global_rank):
            self.callback.set_weights(call[1])
        return super().training_step(batch, batch_idx)


def policy_at(steps: dict[int, dict[str, float]]) -> Any:
    """A policy returning ``steps[stats.step]`` at those sync points, else ``None``."""

    def policy(
        trainer: pl.Trainer, module: pl.LightningModule, stats: MixingStats
    ) -> dict[str, float] | None:
        return steps.get(stats.step)

    return policy


# ---------------------------------------------------------------------------------------
# One rank, in process


def test_pending_set_weights_wins_over_the_policy_at_a_sync_point(tmp_path: Path) -> None:
    """M32: at a sync point a pending ``set_weights`` wins over the policy."""
    policy = policy_at({4: ONLY["c"], 8: ONLY["c"]})  # the policy wants c at both syncs
    callback = ResumableDataCallback(policy=policy, policy_every_n_steps=4)
    model = SetWeightsAt(callback, {3: (None, ONLY["b"])})  # pending when step 4 is reached
    trainer = make_trainer(tmp_path, callback, max_steps=12)
    trainer.fit(model, datamodule=datamodule(batch_size=4, samples_per_epoch=400))
    # num_workers=0: no lookahead, so a change decided at step s starts at step s
    assert batch_sources(model.seen) == ["a"] * 4 + ["b"] * 4 + ["c"] * 4


def test_change_is_rounded_up_to_a_whole_step_under_accumulation(tmp_path: Path) -> None:
    """M38: the change's start is rounded up to a whole optimizer step under accumulation."""
    callback = ResumableDataCallback(policy=policy_at({2: ONLY["b"]}), policy_every_n_steps=2)
    model = IdsModel()
    trainer = make_trainer(tmp_path, callback, max_steps=5, accumulate_grad_batches=3)
    dm = datamodule(batch_size=4, samples_per_epoch=400, num_workers=1, prefetch_factor=2)
    trainer.fit(model, datamodule=dm)
    # decided at step 2 = after batch 5; lookahead 1 * 2 batches -> batch 8, inside step 2
    # (batches 6..8), so rounded up to step 3's first batch, batch 9 (position 36)
    assert batch_sources(model.seen) == ["a"] * 9 + ["b"] * 6
    assert [c["position"] for c in callback.mixer.changes] == [9 * 4]


def test_change_past_the_epoch_end_starts_with_the_next_epoch(tmp_path: Path) -> None:
    """M40: a change that would start past the epoch's end starts with the next epoch."""
    callback = ResumableDataCallback(policy=policy_at({8: ONLY["b"]}), policy_every_n_steps=8)
    model = IdsModel()
    trainer = make_trainer(tmp_path, callback, max_epochs=2)
    dm = datamodule(batch_size=4, samples_per_epoch=40, num_workers=2, prefetch_factor=2)
    trainer.fit(model, datamodule=dm)
    # 10 steps an epoch; decided at step 8 + lookahead 2 * 2 batches = step 12 > 10
    epochs = [epoch for epoch, _, _ in model.seen]
    assert (
        list(zip(epochs, batch_sources(model.seen), strict=True))
        == [(0, "a")] * 10 + [(1, "b")] * 10
    )
    assert [(c["epoch"], c["position"]) for c in callback.mixer.changes] == [(1, 0)]


class Recorder(Logger):
    """A logger that keeps every ``log_metrics`` call: (step, metrics)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[int | None, dict[str, float]]] = []

    @property
    def name(self) -> str:
        return "recorder"

    @property
    def version(self) -> int:
        return 0

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.calls.append((step, dict(metrics)))

    def log_hyperparams(self, params: dict[str, Any] | Namespace, *args: Any, **kw: Any) -> None:
        pass


def test_loggers_get_the_weights_at_each_change(tmp_path: Path) -> None:
    """M42: the trainer's loggers get ``data/weight/<source>`` at each change."""
    first = {"a": 3.0, "b": 1.0, "c": 0.0, "d": 0.0}
    second = {"a": 0.0, "b": 1.0, "c": 1.0, "d": 2.0}
    policy = policy_at({4: first, 8: second})
    callback = ResumableDataCallback(policy=policy, policy_every_n_steps=4)
    loggers = [Recorder(), Recorder()]
    trainer = pl.Trainer(
        accelerator="cpu",
        max_steps=12,
        callbacks=[callback],
        logger=loggers,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(IdsModel(), datamodule=datamodule(batch_size=4, samples_per_epoch=400))
    # the probabilities of each change, by hand (temperature 1: w / sum(w))
    expected = [
        (4, {"a": 0.75, "b": 0.25, "c": 0.0, "d": 0.0}),
        (8, {"a": 0.0, "b": 0.25, "c": 0.25, "d": 0.5}),
    ]
    for logger in loggers:
        logged = [
            (step, {n: m[f"data/weight/{n}"] for n in NAMES})
            for step, m in logger.calls
            if any(k.startswith("data/weight/") for k in m)
        ]
        for step, weights in expected:
            assert any(s == step and w == pytest.approx(weights) for s, w in logged), logged


# ---------------------------------------------------------------------------------------
# Two processes (Lightning's ddp launcher on CPU, gloo): this file run as a script

MAIN_CALLS: dict[int, tuple[int | None, dict[str, float]]] = {
    1: (1, ONLY["d"]),  # only on rank 1: dropped (M34)
    5: (0, ONLY["b"]),  # on rank 0: applied at the sync point of step 8 (M32, M37)
}
MAIN_POLICY = {8: ONLY["c"]}  # what the policy says at step 8: loses to rank 0's b
MAIN_BATCH, MAIN_EPOCH, MAIN_STEPS = 4, 160, 16
SAVED_STEP = 10


def ddp_main(mode: str, out: Path) -> None:
    """One two-process fit; each rank dumps what it trained and what it applied."""
    rank = int(os.environ.get("LOCAL_RANK", "0"))
    workers = 2 if rank == 1 else 0  # rank 1's loader looks 2 * 2 batches ahead, rank 0's 0
    dm = datamodule(
        batch_size=MAIN_BATCH,
        samples_per_epoch=MAIN_EPOCH,
        num_workers=workers,
        prefetch_factor=2 if workers else None,
    )
    errors: list[str] = []
    if mode == "no-sync":  # M31: set_weights on every rank, no policy_every_n_steps
        callback = ResumableDataCallback()
        calls: dict[int, tuple[int | None, dict[str, float]]] = {1: (None, ONLY["b"])}
        max_steps = 3
    else:
        callback = ResumableDataCallback(policy=policy_at(MAIN_POLICY), policy_every_n_steps=4)
        calls, max_steps = MAIN_CALLS, MAIN_STEPS

    class Model(SetWeightsAt):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            try:
                return super().training_step(batch, batch_idx)
            except RuntimeError as error:
                errors.append(f"{type(error).__name__}: {error}")
                return IdsModel.training_step(self, batch, batch_idx)

    model = Model(callback, calls)

    class Dump(pl.Callback):
        def on_train_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
            result = {"seen": model.seen, "changes": callback.mixer.changes, "errors": errors}
            path = out / f"{mode}_rank{trainer.global_rank}.json"
            path.write_text(json.dumps(result))

    checkpoints = ModelCheckpoint(
        dirpath=out / mode, filename="{step}", every_n_train_steps=SAVED_STEP
    )
    trainer = make_trainer(
        out / mode,
        callback,
        checkpoints,
        Dump(),
        devices=2,
        strategy="ddp",
        max_steps=max_steps,
    )
    trainer.fit(model, datamodule=dm)


@pytest.fixture(scope="module")
def ddp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both two-process runs, started at once; their output folder."""
    out = tmp_path_factory.mktemp("ddp")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    procs = {
        mode: subprocess.Popen(
            [sys.executable, __file__, mode, str(out)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        for mode in ("main", "no-sync")
    }
    deadline = time.monotonic() + SCRIPT_TIMEOUT
    for mode, proc in procs.items():
        try:
            log, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            log, _ = proc.communicate()
        assert proc.returncode == 0, f"{mode}:\n{log[-4000:]}"
    return out


def rank_result(out: Path, mode: str, rank: int) -> dict[str, Any]:
    return dict(json.loads((out / f"{mode}_rank{rank}.json").read_text()))


@pytest.mark.distributed
def test_set_weights_with_several_ranks_needs_policy_every_n_steps(ddp: Path) -> None:
    """M31: with several ranks ``set_weights`` needs ``policy_every_n_steps`` (a RuntimeError)."""
    for rank in (0, 1):
        errors = rank_result(ddp, "no-sync", rank)["errors"]
        assert len(errors) == 1, errors
        assert errors[0].startswith("RuntimeError: ")
        assert "policy_every_n_steps" in errors[0]


@pytest.mark.distributed
def test_set_weights_only_on_rank_one_is_dropped(ddp: Path) -> None:
    """M34: a ``set_weights`` made only on a rank other than 0 is dropped."""
    for rank in (0, 1):
        result = rank_result(ddp, "main", rank)
        assert result["errors"] == []  # no error on the rank that called it
        assert "d" not in "".join(batch_sources(result["seen"]))  # never applied, on no rank
        assert all(c["weights"]["d"] == 0 for c in result["changes"])


@pytest.mark.distributed
def test_change_waits_for_the_largest_lookahead_over_the_ranks(ddp: Path) -> None:
    """M37 (and M32 on two ranks): the start is step s plus the largest lookahead of the ranks."""
    # rank 0's set_weights at step 5 is decided at the sync point of step 8 (it wins over the
    # policy's c); rank 1 looks 2 workers * prefetch 2 = 4 batches ahead, rank 0 none: both
    # ranks switch at step 8 + 4 = 12, global position 12 * 4 * 2 = 96
    for rank in (0, 1):
        result = rank_result(ddp, "main", rank)
        assert batch_sources(result["seen"]) == ["a"] * 12 + ["b"] * 4, rank
        assert [c["position"] for c in result["changes"]] == [12 * MAIN_BATCH * 2]


@pytest.mark.distributed
def test_elastic_resume_places_new_changes_on_the_new_layouts_steps(
    ddp: Path, tmp_path: Path
) -> None:
    """M47: after an elastic resume, later sync points place changes on the new step boundaries."""
    checkpoint = ddp / "main" / f"step={SAVED_STEP}.ckpt"
    # 2 ranks x 4 -> 1 rank x 6; the saved point is 10 * 8 = 80; b starts at 96 (recorded)
    callback = ResumableDataCallback(policy=policy_at({16: ONLY["c"]}), policy_every_n_steps=4)
    model = IdsModel()
    trainer = make_trainer(tmp_path, callback, max_steps=20)
    dm = datamodule(batch_size=6, samples_per_epoch=MAIN_EPOCH)
    trainer.fit(model, datamodule=dm, ckpt_path=checkpoint)
    # the new layout's steps start at 80 + 6k; decided at step 16 (6 steps after the
    # resume), with no lookahead, c starts at 80 + 6 * 6 = 116, a boundary of the new steps
    expected = ["a" if p < 96 else "b" if p < 116 else "c" for p in range(80, 80 + 6 * 10)]
    assert [source(i) for _, _, ids in model.seen for i in ids] == expected
    assert [c["position"] for c in callback.mixer.changes] == [116]


if __name__ == "__main__":
    ddp_main(sys.argv[1], Path(sys.argv[2]))
