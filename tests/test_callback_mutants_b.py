"""Promises of the callback's helpers that surviving mutants broke unseen (sample B).

Unit tests check a helper against its docstring's contract with an oracle written out here
(Lightning's step rule walked batch by batch, a documented value); the ``Trainer`` runs
check the callback against the seeding API's documented keys or hand-computed counts. The
mutants are listed in ``survivors.md`` of this review.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, ClassVar

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning_helpers import (
    IdsModel,
    make_trainer,
    quiet_lightning,  # noqa: F401  (an autouse fixture)
)
from torch.utils.data import DataLoader, TensorDataset

from lightning_resumable_data import (
    DistributedSampler,
    MixturePhase,
    ResumableDataCallback,
    ResumableDataModule,
    StatefulDataLoader,
)
from lightning_resumable_data.lightning._callback_state import (
    callback_state,
    check_saved_state,
)
from lightning_resumable_data.lightning._training_seed import (
    check_seed_options,
    fit_seed,
    restored_seed,
)
from lightning_resumable_data.lightning.mixing import MixingStats
from lightning_resumable_data.lightning.steps import limited_batches, step_position, step_start
from lightning_resumable_data.seeding import seed_training_step, seed_validation_batch
from lightning_resumable_data.state import StateMismatchError

# ---------------------------------------------------------------------------------------
# steps.py: Lightning's step counting, against a batch-by-batch walk


def _walk(
    step: int,
    batches: int,
    step_samples: int = 8,
    accumulate: int = 1,
    from_step: int = 0,
    epoch: int = 0,
    batch: int = 0,
    consumed: int = 0,
) -> tuple[int, int, int]:
    """(epoch, batch, global position) where ``step`` begins, one batch at a time.

    Lightning steps after batch ``b`` when ``(b + 1) % accumulate == 0`` or ``b`` is the
    epoch's last, so the next step begins at the next batch whose index is a multiple of
    ``accumulate``, or at batch 0 of the next epoch (where the position restarts at 0).
    """
    e, b, s, pos = epoch, batch, from_step, consumed
    if b >= batches:  # the known point is past the epoch's end
        e, b, pos = e + 1, 0, 0
    while s < step:
        b, pos = b + 1, pos + step_samples
        if b == batches:
            e, b, pos = e + 1, 0, 0
        if b % accumulate == 0:
            s += 1
    return e, b, pos


def test_limited_batches_applies_limit_train_batches_as_lightning_does() -> None:
    """An int limit caps the batches, a float scales them (the docstring's examples)."""
    assert limited_batches(16, 0.5) == 8
    assert limited_batches(16, 5) == 5
    assert limited_batches(16, 1.0) == 16
    assert limited_batches(4, 10) == 4
    assert limited_batches(10, 0.25) == 2


def test_step_start_follows_lightnings_step_rule_from_any_known_point() -> None:
    """``step_start`` is where the walk of Lightning's rule puts the step, for every point.

    Known points include a batch not on a step boundary (a resume under another layout) and
    one past the epoch's end; one batch per epoch and steps equal to ``from_step`` too.
    """
    for batches, accumulate in itertools.product(range(1, 7), range(1, 5)):
        for batch, epoch, from_step in itertools.product(range(batches + 1), (0, 2), (0, 3)):
            for step in range(from_step, from_step + 14):
                e, b, _ = _walk(step, batches, 8, accumulate, from_step, epoch, batch)
                got = step_start(
                    step,
                    batches=batches,
                    accumulate=accumulate,
                    from_step=from_step,
                    epoch=epoch,
                    batch=batch,
                )
                assert got == (e, b), (step, batches, accumulate, from_step, epoch, batch)


def test_step_position_is_the_walked_global_position() -> None:
    """``step_position``: the first sample of the step, from ``consumed`` in the known epoch,
    from 0 in a later one (``consumed`` need not be a multiple of ``step_samples``)."""
    for batches, accumulate in itertools.product(range(1, 6), range(1, 4)):
        for batch, epoch, from_step, extra in itertools.product(
            range(batches + 1), (0, 1), (0, 2), (0, 3)
        ):
            consumed = batch * 8 + extra
            for step in range(from_step, from_step + 12):
                e, _, pos = _walk(step, batches, 8, accumulate, from_step, epoch, batch, consumed)
                got = step_position(
                    step,
                    batches=batches,
                    step_samples=8,
                    accumulate=accumulate,
                    from_step=from_step,
                    epoch=epoch,
                    batch=batch,
                    consumed=consumed,
                )
                assert got == (e, pos), (step, batches, accumulate, from_step, epoch, batch)


def test_step_start_and_position_defaults_count_from_the_start_of_training() -> None:
    """The defaults: no accumulation, the known point is step 0 at epoch 0, batch 0
    (the module's and the functions' docstring examples call them so)."""
    assert step_start(7, batches=16, accumulate=3) == (1, 3)
    assert step_position(7, batches=16, accumulate=3, step_samples=8) == (1, 24)
    assert step_position(
        3, batches=16, step_samples=8, from_step=2, epoch=0, batch=5, consumed=44
    ) == (0, 52)
    for batches, step in itertools.product(range(1, 6), range(12)):
        e, b, pos = _walk(step, batches)
        assert step_start(step, batches=batches) == (e, b)
        assert step_position(step, batches=batches, step_samples=8) == (e, pos)
        e, b, _ = _walk(step, batches, accumulate=3)
        assert step_start(step, batches=batches, accumulate=3) == (e, b)


def test_step_start_refuses_what_its_docstring_refuses() -> None:
    """ValueError for ``batches`` or ``accumulate`` < 1 and a step before the known point."""
    with pytest.raises(ValueError, match=r"batches=0 and accumulate=1 must be >= 1"):
        step_start(0, batches=0)
    with pytest.raises(ValueError, match=r"batches=4 and accumulate=0 must be >= 1"):
        step_start(0, batches=4, accumulate=0)
    with pytest.raises(ValueError, match=r"step=1 begins before the known point \(step 2\)"):
        step_start(1, batches=4, from_step=2, batch=1)


# ---------------------------------------------------------------------------------------
# _training_seed.py


def test_seed_options_pick_the_documented_generators_and_seed_range() -> None:
    """``False`` reseeds nothing, ``True`` torch's; a seed is an int in ``[0, 2**64)``, 0 too."""
    assert check_seed_options(False, None) == ()
    assert check_seed_options(True, None) == ("torch",)
    assert check_seed_options(True, 0) == ("torch",)
    assert check_seed_options(False, 2**64 - 1) == ()
    assert ResumableDataCallback(training_seed=0).training_seed == 0


class _RankTwoStrategy:
    """Rank 2 of 4 (what ``data_parallel_rank`` reads); ``broadcast`` hands out rank 0's."""

    distributed_sampler_kwargs: ClassVar[dict[str, int]] = {"num_replicas": 4, "rank": 2}
    values: ClassVar[dict[int, int]] = {0: 1234, 1: 555, 2: 999, 3: 777}  # each rank's

    def broadcast(self, obj: Any, src: int = 0) -> Any:  # Lightning's signature
        return self.values[src]


class _TrainerOnRankTwo:
    strategy = _RankTwoStrategy()


def test_fit_seed_is_the_data_parallel_rank_and_rank_zeros_seed() -> None:
    """``fit_seed``: (data-parallel rank, training seed), the seed rank 0's on every rank;
    a stand-in trainer without a strategy is rank 0 and keeps its seed."""
    assert fit_seed(_TrainerOnRankTwo(), 999, None) == (2, 1234)  # type: ignore[arg-type]
    assert fit_seed(object(), 999, None) == (0, 999)  # type: ignore[arg-type]


def test_restored_seed_continues_the_checkpoints_seed_unless_told_otherwise() -> None:
    """The checkpoint's seed replaces a derived one; an explicit seed, no seeding (``None``)
    and a checkpoint without an int seed (an opted-out run's ``None``, a bool) keep theirs."""
    assert restored_seed(5, None, 5) == 5
    assert restored_seed(5, None, 9) == 9  # derived: the checkpoint's continues the run
    assert restored_seed(5, 5, 9) == 5  # explicit
    assert restored_seed(None, None, 9) is None  # seed_training=False
    assert restored_seed(5, None, None) == 5  # written by a run with seed_training=False
    assert restored_seed(5, None, True) == 5
    assert restored_seed(5, None, "9") == 5


class _ValidationRecorder(IdsModel):
    """Records torch's generator state at the start of every validation batch."""

    def __init__(self) -> None:
        super().__init__()
        self.validated: list[tuple[int, int, int, torch.Tensor]] = []

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        state = torch.get_rng_state()
        self.validated.append((self.global_step, dataloader_idx, batch_idx, state))
        torch.rand(3)  # validation draws: the next batch must not depend on it


def test_each_validation_batch_draws_from_its_documented_key(tmp_path: Path) -> None:
    """Every validation batch of ``fit`` is seeded as ``seed_validation_batch(rank, seed,
    step, batch, dataloader)`` says (docs/randomness.md: a stream of its own), for two
    validation loaders after two epochs."""
    train = TensorDataset(torch.arange(16))
    sampler = DistributedSampler(train, num_replicas=1, rank=0, seed=1)
    model = _ValidationRecorder()
    trainer = make_trainer(
        tmp_path,
        ResumableDataCallback(training_seed=11),
        max_epochs=2,
        num_sanity_val_steps=0,
        enable_checkpointing=False,
    )
    val = [DataLoader(TensorDataset(torch.arange(8)), batch_size=4) for _ in range(2)]
    trainer.fit(model, StatefulDataLoader(train, batch_size=4, sampler=sampler), val)
    keys = [key[:3] for key in model.validated]
    assert keys == [(s, d, b) for s in (4, 8) for d in (0, 1) for b in (0, 1)]
    for step, dataloader, batch, state in model.validated:
        seed_validation_batch(0, 11, step, batch, dataloader)
        assert torch.equal(state, torch.get_rng_state()), (step, dataloader, batch)


class _TrainRecorder(IdsModel):
    """Records torch's generator state at the start of every training batch."""

    def __init__(self) -> None:
        super().__init__()
        self.states: list[tuple[int, torch.Tensor]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.states.append((self.global_step, torch.get_rng_state()))
        torch.rand(3)
        return super().training_step(batch, batch_idx)


def test_a_seeded_resume_of_an_opted_out_checkpoint_seeds_from_its_own_seed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint of a ``seed_training=False`` run holds no training seed: a resume with
    seeding on reseeds every batch from its own, the DataModule's ``seed`` (no
    ``seed_everything`` seed to key in)."""
    monkeypatch.delenv("PL_GLOBAL_SEED", raising=False)

    def fit(callback: ResumableDataCallback, ckpt: Path | None) -> _TrainRecorder:
        model = _TrainRecorder()
        every = ModelCheckpoint(
            dirpath=tmp_path / "ckpt", filename="{step}", every_n_train_steps=1, save_top_k=-1
        )
        trainer = make_trainer(tmp_path, callback, every, max_steps=4)
        datamodule = ResumableDataModule(range(16), batch_size=4, seed=6)
        trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt)
        return model

    fit(ResumableDataCallback(seed_training=False), None)
    resumed = fit(ResumableDataCallback(), tmp_path / "ckpt" / "step=2.ckpt")
    assert [step for step, _ in resumed.states] == [2, 3]
    for step, state in resumed.states:
        seed_training_step(0, 6, step)
        assert torch.equal(state, torch.get_rng_state()), step


# ---------------------------------------------------------------------------------------
# _callback_state.py


def test_callback_state_is_the_documented_entry() -> None:
    """The checkpoint entry's keys and version (the docstring's example)."""
    assert callback_state([], 7, {}) == {
        "version": 1,
        "phases": [],
        "training_seed": 7,
        "source_metrics": {},
        "data_history": None,
    }
    history: dict[str, list[str]] = {"fields": [], "runs": []}
    assert callback_state([], 7, {}, history)["data_history"] is history


def test_saved_state_without_a_version_is_read_as_version_1_and_another_is_refused() -> None:
    """An entry without ``version`` is version 1's; version 2's is refused (a newer package)."""
    phase = MixturePhase(start_step=3, weights={"a": 1.0})
    check_saved_state({"phases": []}, [], False)  # no error
    saved = callback_state([phase], None, {})
    del saved["version"]
    check_saved_state(saved, [phase], False)  # no error
    with pytest.raises(StateMismatchError, match="version 2"):
        check_saved_state({"version": 2, "phases": []}, [], False)


# ---------------------------------------------------------------------------------------
# callback.py


def test_train_loader_of_a_trainer_that_has_not_fitted_is_none(tmp_path: Path) -> None:
    """``train_loader``: ``None`` when the trainer uses no loader of this package (yet)."""
    assert ResumableDataCallback.train_loader(make_trainer(tmp_path)) is None


ONLY_A = {"a": 1.0, "b": 0.0}


def _mixture() -> ResumableDataModule:
    """Two sources of 100 ids (a: 0..99, b: 100..199), all the mass on ``a``."""
    sources = {"a": TensorDataset(torch.arange(100)), "b": TensorDataset(torch.arange(100, 200))}
    return ResumableDataModule(sources, weights=ONLY_A, batch_size=4, samples_per_epoch=200)


class _LogRecorder(IdsModel):
    """Records what is handed to ``log_dict`` (the path of the data metrics), by step;
    calls ``callback.set_weights({"a": 1, "b": 4}, temperature=0.5)`` at step 2 if given."""

    def __init__(self, callback: ResumableDataCallback | None = None) -> None:
        super().__init__()
        self.callback = callback
        self.logged: list[tuple[int, dict[str, float]]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.callback is not None and self.global_step == 2:
            self.callback.set_weights({"a": 1.0, "b": 4.0}, temperature=0.5)
        return super().training_step(batch, batch_idx)

    def log_dict(self, dictionary: Any, *args: Any, **kwargs: Any) -> None:
        self.logged.append((self.global_step, {k: float(v) for k, v in dictionary.items()}))
        super().log_dict(dictionary, *args, **kwargs)


def _fit_logged(tmp_path: Path, callback: ResumableDataCallback) -> _LogRecorder:
    model = _LogRecorder(callback if callback.log_every_n_steps else None)
    trainer = make_trainer(tmp_path, callback, max_steps=9, log_every_n_steps=1)
    trainer.fit(model, datamodule=_mixture())
    return model


def test_data_metrics_follow_the_callbacks_period_and_set_weights_temperature(
    tmp_path: Path,
) -> None:
    """``log_every_n_steps=3`` (the trainer's is 1): the data metrics after batches 3, 6, 9;
    ``set_weights({"a": 1, "b": 4}, temperature=0.5)`` at step 2 puts
    ``p ~ w ** (1 / 0.5)`` = (1/17, 16/17) in force (docs/mixing.md) from the next step."""
    callback = ResumableDataCallback(log_every_n_steps=3)
    logged = _fit_logged(tmp_path, callback).logged
    assert [step for step, _ in logged] == [3, 6, 9]
    assert logged[0][1]["data/drawn/a"] == 12.0  # 3 batches of 4, all from a
    for _, metrics in logged:
        weights = (metrics["data/weight/a"], metrics["data/weight/b"])
        assert weights == pytest.approx((1 / 17, 16 / 17))


def test_log_every_n_steps_0_logs_no_data_metrics(tmp_path: Path) -> None:
    """``log_every_n_steps=0`` disables the data metrics, whatever the trainer's period."""
    assert _fit_logged(tmp_path, ResumableDataCallback(log_every_n_steps=0)).logged == []


def test_the_policy_runs_every_policy_every_n_steps_steps(tmp_path: Path) -> None:
    """``policy_every_n_steps=3``: the policy is asked at steps 3, 6 and 9 of 9, no other."""
    asked: list[int] = []

    def policy(trainer: pl.Trainer, module: pl.LightningModule, stats: MixingStats) -> None:
        asked.append(stats.step)

    callback = ResumableDataCallback(policy=policy, policy_every_n_steps=3)
    trainer = make_trainer(tmp_path, callback, max_steps=9)
    trainer.fit(IdsModel(), datamodule=_mixture())
    assert asked == [3, 6, 9]
