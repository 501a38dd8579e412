"""Promise sentences of the Lightning-facing docs that had no test (tests/PROMISES.md, `none`).

Rows L12, L27, L41 (lightning.md), C14 (concepts.md), La2, La10 (launch.md), Ra20, Ra26,
Ra31 (randomness.md), ML6 (migration/lightning.md), Cl13 (cli.md) and Re34 (remote.md). Each
test writes the sentence in the form its page shows and checks it against an oracle that is
not the code under test: torch's own ``DistributedSampler`` order, an uninterrupted run, the
log line captured from Lightning's logger, environment variables set to prove they are not
read, or the real ``trainer.fit`` that ``lrd`` claims to predict.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import socket
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.strategies import SingleDeviceStrategy
from lightning_helpers import (
    IdsModel,
    MyDataModule,
    every_5_steps,
    make_trainer,
    quiet_lightning,  # noqa: F401  (an autouse fixture)
)
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data import DistributedSampler as TorchDistributedSampler

from lightning_resumable_data import (
    MixturePhase,
    ResumableDataCallback,
    ResumableDataModule,
    ResumeWarning,
    StatefulDataLoader,
    StateMismatchError,
)
from lightning_resumable_data.cli import main as lrd_main

DATASET = TensorDataset(torch.arange(64))


def torch_order(n: int, seed: int, epoch: int, world: int = 1, rank: int = 0) -> list[int]:
    """Epoch ``epoch`` of rank ``rank``, as torch's own ``DistributedSampler`` orders it."""
    data = TensorDataset(torch.arange(n))
    sampler: TorchDistributedSampler[Any] = TorchDistributedSampler(
        data, num_replicas=world, rank=rank, seed=seed
    )
    sampler.set_epoch(epoch)
    return list(sampler)


def ids_of(model: IdsModel, epoch: int | None = None) -> list[int]:
    """The sample ids a recording model trained on (in one epoch, or all), flattened."""
    return [i for e, _, ids in model.seen if epoch is None or e == epoch for i in ids]


class _Messages(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextmanager
def lightning_log() -> Iterator[list[str]]:
    """The INFO messages Lightning's logger prints (it does not propagate to the root)."""
    logger = logging.getLogger("lightning.pytorch")
    handler, level = _Messages(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler.messages
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


class DataParallelRank0(SingleDeviceStrategy):
    """One CPU process standing in for rank 0 of ``world`` data-parallel ranks."""

    def __init__(self, world: int) -> None:
        super().__init__(device=torch.device("cpu"))
        self.world = world

    @property
    def distributed_sampler_kwargs(self) -> dict[str, int]:
        return {"num_replicas": self.world, "rank": 0}


# -- docs/lightning.md ----------------------------------------------------------------------


def test_without_the_callback_limited_epochs_still_end_at_the_next_iter(tmp_path: Path) -> None:
    """lightning.md: without the callback, `limit_train_batches` epochs still end at the next
    `iter()`."""
    # PROMISES.md L12
    model = IdsModel()
    trainer = make_trainer(tmp_path, max_epochs=3, limit_train_batches=3)
    trainer.fit(model, datamodule=MyDataModule())
    callbacks = trainer.callbacks  # type: ignore[attr-defined]
    assert not any(isinstance(c, ResumableDataCallback) for c in callbacks)
    for epoch in range(3):  # each epoch: the first 3 batches of its own order, not the rest
        assert ids_of(model, epoch) == torch_order(64, 42, epoch)[: 3 * 8]


def test_an_int_limit_cuts_a_resumed_epoch_where_the_new_layout_cuts_it(tmp_path: Path) -> None:
    """lightning.md: an int `limit_train_batches` counts batches of the current layout: after a
    change of batch size the epoch is cut where a run in the new layout cuts it."""
    # PROMISES.md L27
    data = TensorDataset(torch.arange(128))

    first = IdsModel()
    every_4 = ModelCheckpoint(
        dirpath=tmp_path / "ckpt", filename="{step}", every_n_train_steps=4, save_top_k=-1
    )
    make_trainer(tmp_path / "a", every_4, limit_train_batches=6, max_steps=4).fit(
        first, datamodule=ResumableDataModule(data, batch_size=8, seed=2)
    )
    resumed = IdsModel()  # batch size 8 -> 16: the new layout's 6 batches are 96 samples
    make_trainer(tmp_path / "b", limit_train_batches=6, max_epochs=2).fit(
        resumed,
        datamodule=ResumableDataModule(data, batch_size=16, seed=2),
        ckpt_path=tmp_path / "ckpt" / "step=4.ckpt",
    )
    new_layout = IdsModel()  # a run in the new layout from the start
    make_trainer(tmp_path / "c", limit_train_batches=6, max_epochs=2).fit(
        new_layout, datamodule=ResumableDataModule(data, batch_size=16, seed=2)
    )
    # The documented order, by hand: epoch e reads the first 6 x 16 samples of torch's order.
    assert ids_of(new_layout, 0) == torch_order(128, 2, 0)[:96]
    assert ids_of(new_layout, 1) == torch_order(128, 2, 1)[:96]
    assert ids_of(first) == torch_order(128, 2, 0)[:32]
    assert ids_of(first) + ids_of(resumed) == ids_of(new_layout)  # cut at sample 96, not 48
    assert [len(ids) for e, _, ids in resumed.seen if e == 0] == [16] * 4


def test_a_checkpoint_without_data_position_is_refused(tmp_path: Path) -> None:
    """lightning.md: a resume from a checkpoint that holds no data position is refused."""
    # PROMISES.md L41 (the refusal)
    with pytest.raises(StateMismatchError, match="no data position"):
        make_trainer(tmp_path / "refused", max_epochs=3).fit(
            IdsModel(),
            datamodule=ResumableDataModule(DATASET, batch_size=8, seed=4),
            ckpt_path=_plain_checkpoint(tmp_path, "epoch=0"),
        )


def _plain_checkpoint(root: Path, name: str) -> Path:
    """A checkpoint of a plain Lightning run (a shuffled ``DataLoader``, 8 batches an epoch):
    at the end of epoch 0, after its step 5 (mid-epoch) or after its step 8 (last batch)."""
    if name == "epoch=0":
        saver = ModelCheckpoint(dirpath=root / "ckpt", filename="{epoch}", every_n_epochs=1)
    else:
        saver = ModelCheckpoint(
            dirpath=root / "ckpt", filename="{step}", every_n_train_steps=1, save_top_k=-1
        )
    make_trainer(root / "plain", saver, max_epochs=1).fit(
        IdsModel(), train_dataloaders=DataLoader(DATASET, batch_size=8, shuffle=True)
    )
    return root / "ckpt" / f"{name}.ckpt"


@pytest.mark.parametrize(
    ("saved", "epoch", "batch"), [("epoch=0", 1, 0), ("step=5", 0, 5), ("step=8", 1, 0)]
)
def test_allow_config_change_starts_the_data_afresh_at_lightnings_epoch(
    tmp_path: Path, saved: str, epoch: int, batch: int
) -> None:
    """lightning.md: ... unless `ResumableDataModule(allow_config_change=True)` starts the
    data afresh; the loader then follows Lightning's epoch."""
    # PROMISES.md L41: Lightning goes on at `batch` of `epoch`; the data is that epoch's
    # order (torch's, seed 4) from that batch, and each later epoch's from its start
    model = IdsModel()
    make_trainer(tmp_path / "allowed", max_epochs=3).fit(
        model,
        datamodule=ResumableDataModule(DATASET, batch_size=8, seed=4, allow_config_change=True),
        ckpt_path=_plain_checkpoint(tmp_path, saved),
    )
    assert model.seen[0][:2] == (epoch, batch)  # where Lightning goes on
    assert sorted({e for e, _, _ in model.seen}) == list(range(epoch, 3))
    assert ids_of(model, epoch) == torch_order(64, 4, epoch)[batch * 8 :]
    for later in range(epoch + 1, 3):
        assert ids_of(model, later) == torch_order(64, 4, later)


# -- docs/concepts.md, docs/launch.md: elastic resume -----------------------------------------


@pytest.mark.parametrize(
    ("saved", "resumed"), [(2, 3), (16, 12)], ids=["concepts-2-to-3", "launch-16-to-12"]
)
def test_an_elastic_resume_logs_the_change_of_num_replicas(
    tmp_path: Path, saved: int, resumed: int
) -> None:
    """concepts.md: `ResumableDataModule` logs `Elastic resume: num_replicas 2 -> 3`;
    launch.md: another num_nodes/devices: the DataModule logs `num_replicas 16 -> 12`."""
    # PROMISES.md C14, La10
    n, batch, seed = 384, 4, 9
    make_trainer(
        tmp_path / "a", every_5_steps(tmp_path), strategy=DataParallelRank0(saved), max_steps=5
    ).fit(
        IdsModel(),
        datamodule=ResumableDataModule(TensorDataset(torch.arange(n)), batch_size=batch, seed=seed),
    )
    model = IdsModel()
    with lightning_log() as messages:
        make_trainer(tmp_path / "b", strategy=DataParallelRank0(resumed), max_epochs=1).fit(
            model,
            datamodule=ResumableDataModule(
                TensorDataset(torch.arange(n)), batch_size=batch, seed=seed
            ),
            ckpt_path=tmp_path / "ckpt" / "step=5.ckpt",
        )
    assert any(f"Elastic resume: num_replicas {saved} -> {resumed}" in m for m in messages), (
        messages
    )
    # ... and rank 0 reads its stride of the rest of the epoch (padded by wrapping around G).
    order, consumed = torch_order(n, seed, 0), 5 * batch * saved
    per_rank = -(-(n - consumed) // resumed)
    assert ids_of(model) == [order[(consumed + k * resumed) % n] for k in range(per_rank)]


RANK_ENVIRONMENT = {  # what launchers set: torchrun, Lightning, SLURM, Open MPI, MPICH, LSF
    "RANK": "2",
    "WORLD_SIZE": "4",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "2",
    "NODE_RANK": "1",
    "GROUP_RANK": "1",
    "SLURM_PROCID": "2",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "1",
    "SLURM_NTASKS": "4",
    "SLURM_NNODES": "2",
    "OMPI_COMM_WORLD_RANK": "2",
    "OMPI_COMM_WORLD_SIZE": "4",
    "PMI_RANK": "2",
    "PMI_SIZE": "4",
    "JSM_NAMESPACE_RANK": "2",
}


def test_the_datamodule_reads_no_environment_variable_hostname_or_node_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """launch.md: it reads no environment variable (`RANK`, `SLURM_PROCID`, ...), hostname
    or node count: rank and world size come from `distributed_sampler_kwargs`."""
    # PROMISES.md La2
    trainer = make_trainer(tmp_path, max_epochs=1)  # one process: rank 0 of 1
    for name, value in RANK_ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(socket, "gethostname", lambda: "node-1")
    model = IdsModel()
    trainer.fit(model, datamodule=ResumableDataModule(DATASET, batch_size=8, seed=6))
    assert ids_of(model) == torch_order(64, 6, 0)  # the whole epoch, not rank 2 of 4's part

    # A strategy that says rank 1 of 2 (a data-parallel mesh), on 4 nodes of 2 devices.
    datamodule = ResumableDataModule(DATASET, batch_size=8, seed=6)
    strategy = SimpleNamespace(distributed_sampler_kwargs={"num_replicas": 2, "rank": 1})
    datamodule.trainer = SimpleNamespace(  # type: ignore[assignment]
        strategy=strategy,
        num_nodes=4,
        num_devices=2,
        world_size=8,
        global_rank=3,
        node_rank=1,
        max_epochs=1,
        accumulate_grad_batches=1,
    )
    read: set[str] = set()

    class Recording(dict[str, str]):
        def __getitem__(self, key: str) -> str:
            read.add(key)
            return super().__getitem__(key)

        def get(self, key: str, default: Any = None) -> Any:
            read.add(key)
            return super().get(key, default)

        def __contains__(self, key: object) -> bool:
            read.add(str(key))
            return super().__contains__(key)

    monkeypatch.setattr(os, "environ", Recording(os.environ))
    loader = datamodule.train_dataloader()
    ids = [int(i) for batch in loader for i in batch[0]]
    assert not read & set(RANK_ENVIRONMENT), read
    assert ids == torch_order(64, 6, 0, world=2, rank=1)


# -- docs/randomness.md ---------------------------------------------------------------------


class DrawsAtBatchStart(IdsModel):
    """Draws from torch's global generator in the module's own `on_train_batch_start`."""

    def __init__(self) -> None:
        super().__init__()
        self.hook_draws: list[float] = []

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self.hook_draws.append(float(torch.rand(())))


class UserSeeds(pl.Callback):
    """A user's callback that seeds torch in its own `on_train_batch_start`."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        torch.manual_seed(self.seed + batch_idx)


def test_training_batches_are_reseeded_after_earlier_callbacks_before_the_module_hook(
    tmp_path: Path,
) -> None:
    """randomness.md: at the start of every training batch (the callback's
    `on_train_batch_start`: after the callbacks listed before it, before the LightningModule's
    `on_train_batch_start`) it seeds the global generators."""
    # PROMISES.md Ra20

    def hook_draws(user_seed: int, user_first: bool) -> list[float]:
        user, ours = UserSeeds(user_seed), ResumableDataCallback()
        model = DrawsAtBatchStart()
        callbacks = (user, ours) if user_first else (ours, user)
        make_trainer(tmp_path, *callbacks, max_steps=4).fit(
            model, datamodule=ResumableDataModule(DATASET, batch_size=8)
        )
        return model.hook_draws

    listed_before = hook_draws(100, user_first=True)
    assert hook_draws(200, user_first=True) == listed_before  # reseeded after the user's seeding
    assert len(set(listed_before)) == 4  # a seed per batch
    # Listed after it, the user's callback has the last word: the module draws from its seed.
    by_hand = [
        float(torch.rand((), generator=torch.Generator().manual_seed(100 + i))) for i in range(4)
    ]
    assert hook_draws(100, user_first=False) == by_hand


class DrawsEverywhere(IdsModel):
    """Draws from torch's global generator in every step, and from a generator of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.generator = torch.Generator().manual_seed(11)
        self.own: list[float] = []
        self.draws: dict[str, list[float]] = {}
        self.state_after_last_batch: torch.Tensor | None = None

    def _draw(self, stage: str) -> None:
        self.draws.setdefault(stage, []).append(float(torch.rand(())))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.own.append(float(torch.rand((), generator=self.generator)))
        self._draw("train")
        return super().training_step(batch, batch_idx)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.state_after_last_batch = torch.get_rng_state()

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._draw("validate" if self.trainer.state.fn == "validate" else "fit-validation")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._draw("test")

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Any:
        self._draw("predict")
        return batch


def test_the_callback_leaves_randomness_before_and_after_fit_and_your_generators_alone(
    tmp_path: Path,
) -> None:
    """randomness.md: it does not touch model construction and anything before `fit`,
    `torch.Generator` objects you create yourself, code after `fit` returns."""
    # PROMISES.md Ra26 (before fit, your generators, after fit)
    torch.manual_seed(3)
    np.random.seed(3)
    random.seed(3)
    model = DrawsEverywhere()
    datamodule = ResumableDataModule(DATASET, batch_size=8)
    trainer = make_trainer(tmp_path, ResumableDataCallback(), max_steps=5)
    before = (float(torch.rand(())), float(np.random.rand()), random.random())
    torch.manual_seed(3)
    np.random.seed(3)
    random.seed(3)
    DrawsEverywhere()
    assert before == (float(torch.rand(())), float(np.random.rand()), random.random())

    trainer.fit(model, datamodule=datamodule)
    fresh = torch.Generator().manual_seed(11)
    assert model.own == [float(torch.rand((), generator=fresh)) for _ in range(5)]
    assert model.state_after_last_batch is not None
    assert torch.equal(torch.get_rng_state(), model.state_after_last_batch)  # not reseeded


def test_validate_test_and_predict_outside_fit_keep_your_seeding(tmp_path: Path) -> None:
    """randomness.md: it does not touch `trainer.validate`, `test` and `predict` outside a
    fit (while every validation batch of the fit is seeded)."""
    # PROMISES.md Ra26 (validate, test, predict)
    val = TensorDataset(torch.arange(16))

    def draws(user_seed: int) -> dict[str, list[float]]:
        model = DrawsEverywhere()
        trainer = make_trainer(tmp_path, ResumableDataCallback(), max_steps=2)
        datamodule = ResumableDataModule(DATASET, val_dataset=val, test_dataset=val, batch_size=8)
        torch.manual_seed(user_seed)
        trainer.fit(model, datamodule=datamodule)  # its sanity check validates 2 batches
        torch.manual_seed(user_seed)
        trainer.validate(model, datamodule=datamodule, verbose=False)
        torch.manual_seed(user_seed)
        trainer.test(model, datamodule=datamodule, verbose=False)
        torch.manual_seed(user_seed)
        trainer.predict(model, dataloaders=DataLoader(val, batch_size=8))
        return model.draws

    one, two = draws(1), draws(2)
    assert one["fit-validation"] == two["fit-validation"]  # inside fit: seeded by the callback
    for stage in ("validate", "test", "predict"):
        assert len(one[stage]) == 2
        assert one[stage] != two[stage], stage  # outside fit: the user's seed decides
    assert draws(1) == one


class WorkerDraw(torch.utils.data.Dataset[torch.Tensor]):
    """Sample ``i`` is ``[i, a draw from the worker's global torch generator]``."""

    def __len__(self) -> int:
        return 32

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor([int(index), int(torch.randint(10**9, ()))])


class WorkerDrawModel(IdsModel):
    """Records each batch's rows (sample id, worker draw)."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.seen.append((self.current_epoch, batch_idx, batch.tolist()))
        loss: torch.Tensor = self.layer(batch[:, :1].float()).mean()
        return loss


def test_data_loader_workers_are_seeded_by_the_loader_not_the_callback(tmp_path: Path) -> None:
    """randomness.md: it does not touch data-loader workers (seeded by the loader from
    (seed, epoch, rank))."""
    # PROMISES.md Ra26 (workers)
    model = WorkerDrawModel()
    torch.manual_seed(5)
    make_trainer(tmp_path, ResumableDataCallback(training_seed=77), max_epochs=1).fit(
        model, datamodule=ResumableDataModule(WorkerDraw(), batch_size=8, num_workers=1, seed=2)
    )
    # The same loader read in a plain loop, outside any fit and without the callback.
    plain = ResumableDataModule(WorkerDraw(), batch_size=8, num_workers=1, seed=2)
    strategy = SimpleNamespace(distributed_sampler_kwargs={"num_replicas": 1, "rank": 0})
    plain.trainer = SimpleNamespace(  # type: ignore[assignment]
        strategy=strategy, max_epochs=1, accumulate_grad_batches=1
    )
    torch.manual_seed(6)
    expected = [batch.tolist() for batch in plain.train_dataloader()]
    assert [rows for _, _, rows in model.seen] == expected
    assert [row[0] for rows in expected for row in rows] == torch_order(32, 2, 0)


def test_a_resume_under_another_seed_says_it_keeps_the_checkpoints_seed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """randomness.md: a resumed run continues with the checkpoint's seed (and says so if its
    own would differ, e.g. `seed_everything: true` draws a new one per launch)."""
    # PROMISES.md Ra31
    monkeypatch.delenv("PL_GLOBAL_SEED", raising=False)  # restored after the test

    class Draws(IdsModel):
        def __init__(self) -> None:
            super().__init__()
            self.draws: list[float] = []

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.draws.append(float(torch.rand(())))
            return super().training_step(batch, batch_idx)

    def fit(root: Path, global_seed: int, *callbacks: pl.Callback, **kwargs: Any) -> Draws:
        pl.seed_everything(global_seed, verbose=False)
        model = Draws()
        make_trainer(root, *callbacks, max_steps=8).fit(
            model, datamodule=ResumableDataModule(DATASET, batch_size=8), **kwargs
        )
        return model

    uninterrupted = fit(tmp_path / "u", 1)
    pl.seed_everything(1, verbose=False)
    make_trainer(tmp_path / "a", every_5_steps(tmp_path), max_steps=5).fit(
        Draws(), datamodule=ResumableDataModule(DATASET, batch_size=8)
    )
    checkpoint = tmp_path / "ckpt" / "step=5.ckpt"

    def said(messages: list[str], caught: list[warnings.WarningMessage]) -> list[str]:
        everything = messages + [str(w.message) for w in caught]
        return [m for m in everything if "seed" in m and "checkpoint" in m]

    for launch_seed in (1, 2):  # the same launch seed, then a new one
        with lightning_log() as messages, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            resumed = fit(tmp_path / f"b{launch_seed}", launch_seed, ckpt_path=checkpoint)
        assert resumed.draws == uninterrupted.draws[5:]  # the checkpoint's seed continues
        assert len(said(messages, caught)) == (0 if launch_seed == 1 else 1), messages


# -- docs/migration/lightning.md ------------------------------------------------------------


def test_from_datasets_turns_a_mapping_of_training_datasets_into_named_sources(
    tmp_path: Path,
) -> None:
    """migration/lightning.md: `ResumableDataModule.from_datasets(train_dataset=...,
    batch_size=...)`: a mapping of training datasets is a mixture of named sources."""
    # PROMISES.md ML6
    sources = {"a": TensorDataset(torch.arange(32)), "b": TensorDataset(torch.arange(100, 116))}

    def run(*callbacks: pl.Callback, **kwargs: Any) -> IdsModel:
        model = IdsModel()
        datamodule = ResumableDataModule.from_datasets(train_dataset=sources, batch_size=4)
        make_trainer(tmp_path, *callbacks, **kwargs).fit(model, datamodule=datamodule)
        return model

    epoch = run(max_epochs=1)
    assert all(len(ids) == 4 for _, _, ids in epoch.seen)  # one loader, mixed batches
    assert sorted(ids_of(epoch)) == [*range(32), *range(100, 116)]  # each sample once
    phased = run(
        ResumableDataCallback(phases=[MixturePhase(start_step=3, weights={"a": 0, "b": 1})]),
        max_steps=6,
    )
    assert len(phased.seen) == 6
    assert any(i < 32 for _, _, ids in epoch.seen[3:6] for i in ids)  # unphased: "a" too
    assert all(i >= 100 for _, _, ids in phased.seen[3:] for i in ids)  # "b" alone, by name


# -- docs/cli.md ----------------------------------------------------------------------------


def test_lrd_says_whether_allow_config_change_would_resume_a_refused_schedule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """cli.md: a checkpoint a real fit would refuse (a schedule that differs from the saved
    one) is reported as `REFUSED.`, the error the resume would raise, and a HINT: whether
    `ResumableDataModule(allow_config_change=True)` would resume."""
    # PROMISES.md Cl13
    sources = {"a": TensorDataset(torch.arange(40)), "b": TensorDataset(torch.arange(100, 124))}
    changed = [MixturePhase(start_step=6, weights={"a": 1, "b": 1})]

    def fit(
        root: Path,
        phases: list[MixturePhase],
        *callbacks: pl.Callback,
        ckpt_path: Path | None = None,
        allow: bool = False,
        max_steps: int = 9,
    ) -> None:
        datamodule = ResumableDataModule(sources, batch_size=4, seed=1, allow_config_change=allow)
        trainer = make_trainer(
            root, ResumableDataCallback(phases=phases), *callbacks, max_steps=max_steps
        )
        trainer.fit(IdsModel(), datamodule=datamodule, ckpt_path=ckpt_path)

    first = [MixturePhase(start_step=4, weights={"a": 0, "b": 1})]
    fit(tmp_path / "a", first, every_5_steps(tmp_path / "a"), max_steps=5)
    # Resumed from step 5 with other phases, on purpose: its checkpoints' schedule then keeps
    # the first phase up to step 5 and differs from what its own phases place.
    at_7 = ModelCheckpoint(dirpath=tmp_path / "b", filename="{step}", every_n_train_steps=7)
    fit(tmp_path / "b", changed, at_7, ckpt_path=tmp_path / "a" / "ckpt" / "step=5.ckpt",
        allow=True, max_steps=7)  # fmt: skip
    checkpoint = tmp_path / "b" / "step=7.ckpt"

    assert lrd_main(["inspect", str(checkpoint)]) == 0
    text = " ".join(capsys.readouterr().out.split())  # paragraphs are wrapped
    assert lrd_main(["inspect", str(checkpoint), "--json"]) == 0
    resume = json.loads(capsys.readouterr().out)["resume"]
    assert resume["ok"] is False
    assert "under world size 1 x batch size 4 (the saved layout): REFUSED." in text
    assert f"REFUSED. {resume['error']} HINT: " in text
    assert "ResumableDataModule(allow_config_change=True) resumes" in text
    assert "ResumableDataModule(allow_config_change=True) resumes" in resume["hint"]
    # The oracle: the real fits lrd speaks for.
    with pytest.raises(StateMismatchError) as refused:
        fit(tmp_path / "c", changed, ckpt_path=checkpoint)
    assert str(refused.value) == resume["error"]
    fit(tmp_path / "d", changed, ckpt_path=checkpoint, allow=True)  # resumes


# -- docs/remote.md -------------------------------------------------------------------------


def test_a_lenient_stateful_loader_resumes_a_sharded_sampler_over_replaced_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """remote.md: an object replaced between a checkpoint and its resume is refused;
    `StatefulDataLoader(strict_resume=False)` (around a `ShardedSampler`) resumes over the new
    bytes with a `ResumeWarning`."""
    # PROMISES.md Re34
    s3fs = pytest.importorskip("s3fs")
    pytest.importorskip("moto.server")
    from remote_servers import moto_s3

    from lightning_resumable_data.remote import ShardCache
    from lightning_resumable_data.shards import (
        DistributedShardedDataset,
        open_token_shards,
        write_token_shards,
    )

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")  # dummy credentials, found by the backend
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    write_token_shards(tmp_path / "local", [np.arange(8 * 48) % 60_000], seq_len=8,
                       tokens_per_shard=8 * 16)  # fmt: skip
    with moto_s3() as endpoint:
        options = {"client_kwargs": {"endpoint_url": endpoint}, "skip_instance_cache": True}
        fs = s3fs.S3FileSystem(**options)
        fs.mkdir("data")
        fs.put(str(tmp_path / "local") + "/", "data/shards", recursive=True)

        def loader(shards: str | Path, cache: str, **kwargs: Any) -> StatefulDataLoader:
            caching = ShardCache(tmp_path / cache, storage_options=options)
            dataset = DistributedShardedDataset(open_token_shards(shards, cache=caching), seed=3)
            return StatefulDataLoader(dataset, batch_size=4, sampler=dataset.sampler(1, 0),
                                      **kwargs)  # fmt: skip

        old = [batch.tolist() for batch in loader(tmp_path / "local", "cache-old")]
        shard = f"shard_{old[-1][0][0] // (8 * 16):05d}.bin"  # tokens: 8 per sample, in order
        saved = loader("s3://data/shards", "cache-saved")
        batches = iter(saved)
        for _ in range(5):
            next(batches)
        state = json.loads(json.dumps(saved.state_dict()))
        del batches, saved

        replaced = bytes(b ^ 1 for b in (tmp_path / "local" / shard).read_bytes())
        fs.pipe(f"data/shards/{shard}", replaced)  # same size, other tokens
        with pytest.raises(StateMismatchError, match=shard):
            loader("s3://data/shards", "cache-strict").load_state_dict(state)
        lenient = loader("s3://data/shards", "cache-lenient", strict_resume=False)
        with pytest.warns(ResumeWarning, match=shard):
            lenient.load_state_dict(state)
        resumed = [batch.tolist() for batch in lenient]

    # The oracle: an uninterrupted run over the new bytes, read from a local copy.
    shutil.copytree(tmp_path / "local", tmp_path / "new")
    (tmp_path / "new" / shard).write_bytes(replaced)
    uninterrupted = [batch.tolist() for batch in loader(tmp_path / "new", "cache-new")]
    assert resumed == uninterrupted[5:]
    assert resumed != old[5:]  # the new bytes are read


def test_an_allowed_new_phase_at_the_checkpoints_step_governs_from_that_step(
    tmp_path: Path,
) -> None:
    """mixing.md: with `allow_config_change=True` the saved schedule is kept up to the resume
    point and the new one applies from there on, a phase starting at the checkpoint's own
    step included (it was dropped: the saved weights went on)."""
    sources = {"a": TensorDataset(torch.arange(40)), "b": TensorDataset(torch.arange(100, 124))}

    def fit(root: Path, phases: list[MixturePhase], **kwargs: Any) -> IdsModel:
        model = IdsModel()
        trainer = make_trainer(root, ResumableDataCallback(phases=phases), every_5_steps(root),
                               max_steps=kwargs.pop("max_steps"))  # fmt: skip
        ckpt_path = kwargs.pop("ckpt_path", None)
        datamodule = ResumableDataModule(sources, batch_size=4, seed=1, **kwargs)
        trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt_path)
        return model

    first = fit(tmp_path / "a", [], max_steps=5)
    assert any(i < 100 for _, _, ids in first.seen for i in ids)  # both sources before
    only_b = [MixturePhase(start_step=5, weights={"a": 0, "b": 1})]
    resumed = fit(tmp_path / "b", only_b, max_steps=9, allow_config_change=True,
                  ckpt_path=tmp_path / "a" / "ckpt" / "step=5.ckpt")  # fmt: skip
    assert len(resumed.seen) == 4
    assert all(i >= 100 for _, _, ids in resumed.seen for i in ids)  # steps 5..8: "b" only
