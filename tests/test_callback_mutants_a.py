"""Promises of the checkpoint counters, the alignment and the guard that surviving mutants
broke unseen (tests/MUTATION.md, survivors of the callback run, part A).

The ``Trainer`` runs are checked against an uninterrupted run's per-sample ledger; the pure
functions (``checkpoint_counters``, ``PositionGuard``) against their documented cases,
counted by hand.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning_helpers import (
    IdsModel,
    make_trainer,
    quiet_lightning,  # noqa: F401  (an autouse fixture)
)
from torch.utils.data import TensorDataset

from lightning_resumable_data import (
    DataPositionError,
    DistributedSampler,
    ResumableDataCallback,
    ResumableDataModule,
    StatefulDataLoader,
)
from lightning_resumable_data._progress import BatchPosition
from lightning_resumable_data.lightning._alignment import start_at_lightnings_batch
from lightning_resumable_data.lightning.checkpoint_counters import (
    data_position,
    match_epoch_counters,
)
from lightning_resumable_data.lightning.guard import PositionGuard

DATASET = TensorDataset(torch.arange(64))  # 8 batches of 8 an epoch


def _datamodule(dataset: TensorDataset = DATASET, batch_size: int = 8) -> ResumableDataModule:
    return ResumableDataModule(dataset, batch_size=batch_size, seed=5)


def _reference(root: Path, epochs: int, **kwargs: Any) -> IdsModel:
    """An uninterrupted fit of ``epochs`` epochs: the ledger every resume must reproduce."""
    model = IdsModel()
    make_trainer(root / "ref", max_epochs=epochs).fit(model, datamodule=_datamodule(**kwargs))
    return model


# -- a fit stopped mid-epoch, its checkpoint written after the fit ----------------------------


def test_a_checkpoint_written_after_a_fit_stopped_mid_epoch_resumes_that_epoch(
    tmp_path: Path,
) -> None:
    """``max_epochs=2``, ``max_steps=12`` stops the last epoch after its batch 3;
    ``trainer.save_checkpoint`` after the fit counts it as done (epoch counters
    ``(2, 2, 2, 2)``: ``max_epochs`` reached); the resume trains epoch 1 from batch 4: the
    uninterrupted run's 16 batches, none twice."""
    reference = _reference(tmp_path, 2)
    first = IdsModel()
    trainer = make_trainer(tmp_path / "a", max_epochs=2, max_steps=12)
    trainer.fit(first, datamodule=_datamodule())
    trainer.save_checkpoint(tmp_path / "after.ckpt")
    saved = torch.load(tmp_path / "after.ckpt", weights_only=False)
    assert saved["loops"]["fit_loop"]["epoch_progress"]["current"] == dict.fromkeys(
        ("ready", "started", "processed", "completed"), 2
    )  # the case this test is about: the stopped epoch counted as done
    resumed = IdsModel()
    again = make_trainer(tmp_path / "b", max_epochs=2)
    again.fit(resumed, datamodule=_datamodule(), ckpt_path=tmp_path / "after.ckpt")
    assert len(reference.seen) == 16
    assert [x[:2] for x in resumed.seen[:1]] == [(1, 4)]
    assert first.seen + resumed.seen == reference.seen
    assert (again.current_epoch, again.global_step) == (2, 16)


def test_a_batch_of_one_sample_stopped_one_batch_into_the_last_epoch_resumes_there(
    tmp_path: Path,
) -> None:
    """Batch size 1, 4 samples, ``max_epochs=2``: ``max_steps=5`` stops after the last
    epoch's first batch, one sample into it (``consumed == 1`` is mid-epoch, though
    ``last.ckpt`` counts the epoch as done); the resume trains its 3 other batches, as the
    uninterrupted run."""
    dataset = TensorDataset(torch.arange(4))
    reference = _reference(tmp_path, 2, dataset=dataset, batch_size=1)
    first = IdsModel()
    last = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    make_trainer(tmp_path / "a", last, max_epochs=2, max_steps=5).fit(
        first, datamodule=_datamodule(dataset, 1)
    )
    resumed = IdsModel()
    make_trainer(tmp_path / "b", max_epochs=2).fit(
        resumed,
        datamodule=_datamodule(dataset, 1),
        ckpt_path=tmp_path / "ckpt" / "last.ckpt",
    )
    assert len(reference.seen) == 8
    assert [x[:2] for x in resumed.seen[:1]] == [(1, 1)]
    assert first.seen + resumed.seen == reference.seen


def test_a_job_stopped_at_the_last_batch_of_two_epochs_trains_every_epoch_once(
    tmp_path: Path,
) -> None:
    """``max_steps`` 8 then 16 (the last batches of epochs 0 and 1), ``last.ckpt`` every 8
    steps, each leg resumed from it: the second checkpoint is of an epoch Lightning, resumed
    from the previous epoch's last batch, never counted as started."""
    reference = _reference(tmp_path, 3)
    seen: list[tuple[int, int, list[int]]] = []
    for leg, steps in enumerate([8, 16, None]):
        model = IdsModel()
        last = ModelCheckpoint(dirpath=tmp_path / "last", save_last=True, every_n_train_steps=8)
        limit = {} if steps is None else {"max_steps": steps}
        make_trainer(tmp_path / f"leg{leg}", last, max_epochs=3, **limit).fit(
            model,
            datamodule=_datamodule(),
            ckpt_path=tmp_path / "last" / "last.ckpt" if leg else None,
        )
        seen += model.seen
    assert len(reference.seen) == 24
    assert seen == reference.seen


def test_a_finished_epoch_saved_after_the_fit_resumed_with_max_steps_starts_the_next(
    tmp_path: Path,
) -> None:
    """``max_epochs=1`` fitted, ``trainer.save_checkpoint`` after it (epoch counters
    ``(1, 1, 1, 1)``, epoch 0's batch count kept); resumed with ``max_steps`` set, epochs 1
    and 2 are trained from their batch 0, as the uninterrupted run."""
    reference = _reference(tmp_path, 3)
    first = IdsModel()
    trainer = make_trainer(tmp_path / "a", max_epochs=1, max_steps=100)
    trainer.fit(first, datamodule=_datamodule())
    trainer.save_checkpoint(tmp_path / "after.ckpt")
    resumed = IdsModel()
    again = make_trainer(tmp_path / "b", max_epochs=3, max_steps=100)
    again.fit(resumed, datamodule=_datamodule(), ckpt_path=tmp_path / "after.ckpt")
    assert len(first.seen) == 8
    assert first.seen + resumed.seen == reference.seen
    assert (again.current_epoch, again.global_step) == (3, 24)


# -- the loader in another resume mode, a second fit on the same trainer ----------------------


def test_a_loader_resuming_by_skipping_trains_under_the_guard(tmp_path: Path) -> None:
    """A ``StatefulDataLoader`` without a position sampler resumes by skipping: it hands out
    no positions, and the guard (``verify="raise"``) has nothing to check; two epochs of the
    dataset in order are trained."""
    model = IdsModel()
    loader = StatefulDataLoader(DATASET, batch_size=8)
    assert loader.resume_mode != "position"
    make_trainer(tmp_path, ResumableDataCallback(), max_epochs=2).fit(model, loader)
    assert [ids for _, _, ids in model.seen] == [list(range(k, k + 8)) for k in range(0, 64, 8)] * 2


def test_a_second_fit_on_the_same_trainer_continues_the_live_position(tmp_path: Path) -> None:
    """``max_steps=5`` stops epoch 0 after batch 4; ``fit`` again on the same trainer and
    loader with ``max_steps=16`` (no checkpoint: the live position, 40 samples in) trains
    the rest of epochs 0 and 1, as the uninterrupted run."""
    reference = IdsModel()
    make_trainer(tmp_path / "ref", ResumableDataCallback(), max_epochs=2).fit(
        reference, _plain_order_loader()
    )
    model = IdsModel()
    loader = _plain_order_loader()
    trainer = make_trainer(tmp_path / "a", ResumableDataCallback(), max_epochs=2, max_steps=5)
    trainer.fit(model, loader)
    assert len(model.seen) == 5
    trainer.fit_loop.epoch_loop.max_steps = 16
    trainer.fit(model, loader)
    assert len(reference.seen) == 16
    assert model.seen == reference.seen


def _plain_order_loader() -> StatefulDataLoader[torch.Tensor]:
    """The package's loader over a shuffled position sampler, handed straight to ``fit``."""
    sampler = DistributedSampler(DATASET, num_replicas=1, rank=0, seed=7)
    return StatefulDataLoader(DATASET, batch_size=8, sampler=sampler)


# -- checkpoint_counters, on checkpoint dicts shaped as Lightning writes them -----------------

_KEYS = ("ready", "started", "processed", "completed")


def _checkpoint(epochs: tuple[int, int, int, int], batches: int | None = None) -> dict[str, Any]:
    """The fit loop's epoch counters ``epochs`` (current and total), and ``batches`` trained
    in the epoch loop's batch progress (absent when ``None``)."""
    counters = dict(zip(_KEYS, epochs, strict=True))
    fit: dict[str, Any] = {"epoch_progress": {"current": counters, "total": dict(counters)}}
    if batches is not None:
        trained = dict.fromkeys(_KEYS, batches)
        fit["epoch_loop.batch_progress"] = {
            "current": trained,
            "total": dict(trained),
            "is_last_batch": True,
        }
    return {"loops": {"fit_loop": fit}}


def _epochs(checkpoint: dict[str, Any]) -> tuple[int, ...]:
    progress = checkpoint["loops"]["fit_loop"]["epoch_progress"]
    assert progress["current"] == progress["total"]
    return tuple(progress["current"][k] for k in _KEYS)


@pytest.mark.parametrize(
    "checkpoint",
    [
        {},
        {"loops": None},
        {"loops": {}},
        {"loops": {"fit_loop": {}}},
        {"loops": {"fit_loop": {"epoch_progress": {"current": {}, "total": {}}}}},
        {"loops": {"fit_loop": {"epoch_progress": {"current": None, "total": None}}}},
    ],
    ids=["no-loops", "loops-none", "no-fit-loop", "no-progress", "no-counters", "none-counters"],
)
@pytest.mark.parametrize("consumed", [0, 16])
def test_a_checkpoint_without_epoch_counters_is_left_alone(
    checkpoint: dict[str, Any], consumed: int
) -> None:
    """match_epoch_counters: a checkpoint without the fit loop's epoch counters (a
    weights-only one) has nothing to rewrite: ``False``, the dict unchanged."""
    before = copy.deepcopy(checkpoint)
    assert match_epoch_counters(checkpoint, epoch=1, consumed=consumed) is False
    assert checkpoint == before


def test_a_mid_epoch_checkpoint_stopped_or_not_is_set_to_started_not_processed() -> None:
    """match_epoch_counters, case 1: the data 16 samples into epoch 1; counters written in
    the epoch-end hooks ``(2, 2, 2, 1)`` or after the fit ``(2, 2, 2, 2)`` become "epoch 1
    started, not processed" ``(2, 2, 1, 1)``; those of its middle ``(2, 2, 1, 1)`` are left."""
    for stopped in [(2, 2, 2, 1), (2, 2, 2, 2)]:
        checkpoint = _checkpoint(stopped, batches=2)
        assert match_epoch_counters(checkpoint, epoch=1, consumed=16) is True
        assert _epochs(checkpoint) == (2, 2, 1, 1)
    middle = _checkpoint((2, 2, 1, 1), batches=2)
    before = copy.deepcopy(middle)
    assert match_epoch_counters(middle, epoch=1, consumed=16) is False
    assert middle == before


@pytest.mark.parametrize("epochs", [(1, 1, 0, 0), (4, 4, 4, 4)])
def test_counters_of_another_epoch_than_the_data_are_not_rewritten(
    epochs: tuple[int, int, int, int],
) -> None:
    """match_epoch_counters rewrites only counters of the data's epoch that just ended; those
    of another epoch (a data position from another checkpoint) are left for the resume's
    mismatch check to refuse."""
    checkpoint = _checkpoint(epochs, batches=2)
    before = copy.deepcopy(checkpoint)
    assert match_epoch_counters(checkpoint, epoch=2, consumed=16) is False
    assert checkpoint == before


def test_an_epoch_never_counted_as_started_is_counted() -> None:
    """match_epoch_counters, case 2: the data at the start of epoch 2, Lightning's counters
    ``(1, 1, 1, 1)`` after a batch of epoch 1: epoch 2 becomes started ``(2, 2, 1, 1)``."""
    checkpoint = _checkpoint((1, 1, 1, 1), batches=8)
    assert match_epoch_counters(checkpoint, epoch=2, consumed=0) is True
    assert _epochs(checkpoint) == (2, 2, 1, 1)


@pytest.mark.parametrize("epochs", [(2, 2, 2, 1), (2, 2, 2, 2)])
def test_a_finished_epoch_with_its_batch_count_is_set_between_two_epochs(
    epochs: tuple[int, int, int, int],
) -> None:
    """match_epoch_counters, case 3: the data at the start of epoch 2, counters of epoch 1's
    end hooks or after them, its 8 batches counted: ``(2, 2, 2, 2)``, no batch trained."""
    checkpoint = _checkpoint(epochs, batches=8)
    assert match_epoch_counters(checkpoint, epoch=2, consumed=0) is True
    assert _epochs(checkpoint) == (2, 2, 2, 2)
    batches = checkpoint["loops"]["fit_loop"]["epoch_loop.batch_progress"]
    assert batches["current"] == dict.fromkeys(_KEYS, 0)
    assert batches["is_last_batch"] is False


@pytest.mark.parametrize(
    ("epoch", "epochs", "batches"),
    [
        (2, (3, 3, 3, 3), 8),  # counters of a later epoch than the data's start
        (2, (1, 1, 1, 1), None),  # no batch progress saved
        (2, (1, 1, 1, 1), 0),  # no batch trained
        (0, (0, 0, 0, 0), 3),  # the first epoch: no epoch before it
    ],
)
def test_an_epoch_start_outside_the_documented_cases_is_left_alone(
    epoch: int, epochs: tuple[int, int, int, int], batches: int | None
) -> None:
    """match_epoch_counters at the start of an epoch (``consumed == 0``) rewrites only the
    two documented cases, both after batches of epoch ``epoch - 1``; otherwise ``False``."""
    checkpoint = _checkpoint(epochs, batches)
    before = copy.deepcopy(checkpoint)
    assert match_epoch_counters(checkpoint, epoch=epoch, consumed=0) is False
    assert checkpoint == before


def _loader_state(epoch: int, consumed: int) -> dict[str, Any]:
    return {"kind": "StatefulDataLoader", "epoch": epoch, "consumed": consumed}


@pytest.mark.parametrize(
    "checkpoint",
    [{}, {"loops": None}, {"loops": {}}, {"loops": {"fit_loop": {}}}, {"loops": {"fit_loop": 1}}],
)
def test_a_checkpoint_without_loader_states_has_no_data_position(
    checkpoint: dict[str, Any],
) -> None:
    """data_position: no DataModule state and no fit-loop loader states: ``None``."""
    assert data_position(checkpoint, None) is None
    assert data_position(checkpoint, "MyDataModule") is None


def test_the_data_position_is_read_from_the_datamodules_state_first() -> None:
    """data_position: "Read from the DataModule's state (``datamodule_key``), else from the
    fit loop's loader states"."""
    state = {"train_loader": {"epoch": 3, "consumed": 24}}
    assert data_position({"MyDataModule": state}, "MyDataModule") == (3, 24)
    loops = {"fit_loop": {"state_dict": {"combined_loader": [_loader_state(1, 8)]}}}
    assert data_position({"MyDataModule": state, "loops": loops}, "MyDataModule") == (3, 24)
    assert data_position({"MyDataModule": {"train_loader": {}}, "loops": loops}, "X") == (1, 8)
    assert data_position({"MyDataModule": {"train_loader": {}}}, "MyDataModule") is None


def test_only_this_packages_loader_states_are_a_data_position() -> None:
    """data_position: among the fit loop's loader states only a ``StatefulDataLoader``'s is a
    position; another stateful loader's (even with a ``consumed`` entry) is not."""
    other = {"kind": "OtherLoader", "epoch": 5, "consumed": 7}
    loaders = [_loader_state(1, 8), other, {"consumed": 3}]
    checkpoint = {"loops": {"fit_loop": {"state_dict": {"combined_loader": loaders}}}}
    assert data_position(checkpoint, None) == (1, 8)


# -- PositionGuard ----------------------------------------------------------------------------


def test_a_guard_raises_by_default() -> None:
    """PositionGuard's default mode is ``"raise"``: a mismatch raises DataPositionError."""
    guard = PositionGuard()
    assert guard.mode == "raise"
    with pytest.raises(DataPositionError, match="begins at sample 8 of epoch 0"):
        guard.check(BatchPosition(0, 0), epoch=0, batch=1, step=1, step_samples=8)


def test_without_an_anchor_batch_b_begins_at_b_batches() -> None:
    """guard.py: batch ``b`` of an epoch begins at ``b * B * W`` (no resume anchored)."""
    guard = PositionGuard("raise")
    for epoch, batch in [(0, 0), (0, 1), (0, 3), (2, 1)]:
        assert guard.matches(BatchPosition(epoch, batch * 8), epoch, batch, 8)
        guard.check(
            BatchPosition(epoch, batch * 8), epoch=epoch, batch=batch, step=0, step_samples=8
        )
    assert not guard.matches(BatchPosition(0, 0), 0, 1, 8)
    assert not guard.matches(BatchPosition(0, 9), 0, 1, 8)
    with pytest.raises(DataPositionError):
        guard.check(BatchPosition(0, 9), epoch=0, batch=1, step=1, step_samples=8)


def test_after_a_resume_under_another_layout_the_anchor_decides() -> None:
    """guard.py: in an epoch resumed under another layout, batch ``b`` begins at the resume
    position plus ``(b - b0) * B * W`` (sample 20 at batch 2, batch size 8: batch 3 at 28),
    not at ``b * B * W`` (24); other epochs at ``b * B * W``."""
    guard = PositionGuard("raise")
    guard.anchor(epoch=1, batch=2, consumed=20)
    assert guard.matches(BatchPosition(1, 28), 1, 3, 8)
    guard.check(BatchPosition(1, 28), epoch=1, batch=3, step=3, step_samples=8)
    assert not guard.matches(BatchPosition(1, 24), 1, 3, 8)
    with pytest.raises(DataPositionError, match="begins at sample 28 of epoch 1"):
        guard.check(BatchPosition(1, 24), epoch=1, batch=3, step=3, step_samples=8)
    assert guard.matches(BatchPosition(2, 24), 2, 3, 8)


# -- _alignment: a fresh start at Lightning's batch, the epoch limit -------------------------


def test_a_fresh_start_at_lightnings_batch_moves_only_an_unrestored_position_loader(
    tmp_path: Path,
) -> None:
    """start_at_lightnings_batch: after one fitted epoch Lightning goes on at epoch 1, batch
    0; an unrestored position loader is set there, and it returns ``False`` ("nothing is
    left to do"); a restored loader and one resuming by skipping are left as they are."""
    trainer = make_trainer(tmp_path, max_epochs=1)
    trainer.fit(IdsModel(), datamodule=_datamodule())
    fresh = _plain_order_loader()
    assert start_at_lightnings_batch(trainer, fresh) is False
    assert fresh.state_dict() == _plain_order_loader().state_at(1, 0)
    restored = _plain_order_loader()
    restored.load_state_dict(restored.state_at(0, 3))
    assert restored.restored is not None
    assert start_at_lightnings_batch(trainer, restored) is False
    assert restored.state_dict() == _plain_order_loader().state_at(0, 3)
    skipping = StatefulDataLoader(DATASET, batch_size=8)
    before = skipping.state_dict()
    assert start_at_lightnings_batch(trainer, skipping) is False
    assert skipping.state_dict() == before


def test_a_resume_past_the_new_layouts_last_full_batch_starts_the_next_epoch(
    tmp_path: Path,
) -> None:
    """``drop_last=True``: 8 of batch 7 trained (56 of 64 samples); resumed with batch size
    33 (one full batch an epoch, all Lightning trains: no ``limit_train_batches`` cut), the
    8 samples left make no batch: epochs 1 and 2 follow, as the uninterrupted run's."""

    def datamodule(batch_size: int) -> ResumableDataModule:
        return ResumableDataModule(DATASET, batch_size=batch_size, seed=5, drop_last=True)

    saver = ModelCheckpoint(dirpath=tmp_path / "ckpt", filename="{step}", every_n_train_steps=8)
    make_trainer(tmp_path / "a", saver, max_epochs=3, max_steps=8).fit(
        IdsModel(), datamodule=datamodule(7)
    )
    reference = IdsModel()
    make_trainer(tmp_path / "ref", max_epochs=3).fit(reference, datamodule=datamodule(33))
    resumed = IdsModel()
    make_trainer(tmp_path / "b", max_epochs=3).fit(
        resumed, datamodule=datamodule(33), ckpt_path=tmp_path / "ckpt" / "step=8.ckpt"
    )
    assert [x[:2] for x in reference.seen] == [(0, 0), (1, 0), (2, 0)]
    assert resumed.seen == reference.seen[1:]


def test_a_fresh_loader_in_a_fit_continuing_lightnings_counters_is_refused(
    tmp_path: Path,
) -> None:
    """A second ``fit`` on a trainer 5 batches into epoch 0, given a new loader at its start
    (no checkpoint, nothing restored): the data position disagrees with Lightning's counters
    and ``verify="raise"`` refuses it (DataPositionError) before a batch is trained."""
    model = IdsModel()
    trainer = make_trainer(tmp_path, ResumableDataCallback(), max_epochs=2, max_steps=5)
    trainer.fit(model, _plain_order_loader())
    trainer.fit_loop.epoch_loop.max_steps = 16
    with pytest.raises(DataPositionError, match="does not match the trainer's progress"):
        trainer.fit(model, _plain_order_loader())
    assert len(model.seen) == 5


def test_a_first_datamodule_fit_after_training_with_a_plain_loader_is_refused(
    tmp_path: Path,
) -> None:
    """A trainer that trained an epoch with a plain ``DataLoader`` and no checkpoint has no
    data position to go on from: the data module's fit is refused before a batch is trained,
    rather than read from epoch 0 or from Lightning's epoch (``__init____mutmut_20``)."""
    model = IdsModel()
    trainer = make_trainer(tmp_path, max_epochs=1)
    trainer.fit(model, torch.utils.data.DataLoader(DATASET, batch_size=8))
    trained = len(model.seen)
    trainer.fit_loop.max_epochs = 2
    with pytest.raises(DataPositionError, match="trained before with another loader"):
        trainer.fit(model, datamodule=ResumableDataModule(DATASET, batch_size=8, seed=7))
    assert len(model.seen) == trained  # nothing trained on a guessed position
