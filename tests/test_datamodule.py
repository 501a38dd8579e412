from types import SimpleNamespace
from typing import Any

import pytest
from loader_helpers import IndexDataset

from lightning_resumable_data import (
    MixturePhase,
    MixtureSampler,
    ResumableDataCallback,
    ResumableDataModule,
    StateMismatchError,
)


def attach(dm: ResumableDataModule, num_replicas: int, rank: int, **trainer: Any) -> None:
    strategy = SimpleNamespace(
        distributed_sampler_kwargs={"num_replicas": num_replicas, "rank": rank}
    )
    dm.trainer = SimpleNamespace(
        strategy=strategy, max_epochs=3, accumulate_grad_batches=1, **trainer
    )  # type: ignore[assignment]


def test_rank_and_world_come_from_the_strategy() -> None:
    dm = ResumableDataModule(IndexDataset(40), batch_size=2)
    attach(dm, 4, 3)  # e.g. the data-parallel mesh of a model-parallel strategy
    loader = dm.train_dataloader()
    assert (loader.sampler.num_replicas, loader.sampler.rank) == (4, 3)  # type: ignore[attr-defined]
    assert loader.max_epochs == 3
    assert dm.world() == (4, 3)
    assert ResumableDataModule(IndexDataset(4)).world() == (1, 0)  # no trainer: one process


def test_eval_loaders_are_unshuffled_and_sharded() -> None:
    dm = ResumableDataModule(IndexDataset(8), val_dataset=IndexDataset(9), batch_size=2)
    attach(dm, 2, 1)
    val = dm.val_dataloader()
    assert [b.tolist() for b in val] == [[1, 3], [5, 7], [0]]  # padded by wrapping around
    assert dm.test_dataloader() == []


def test_phases_are_installed_at_their_exact_positions() -> None:
    sources = {"a": IndexDataset(60), "b": IndexDataset(40)}
    dm = ResumableDataModule(sources, batch_size=5, weights={"a": 1, "b": 1})
    attach(dm, 2, 0)
    dm.phases = (
        MixturePhase(start_step=3, weights={"a": 0, "b": 1}),  # batch 3 of epoch 0
        MixturePhase(start_step=12, weights={"a": 1, "b": 0}),  # 10 batches an epoch
    )
    sampler = dm.train_dataloader().sampler
    assert isinstance(sampler, MixtureSampler)
    changes = [(e["epoch"], e["position"]) for e in sampler.schedule]
    assert changes == [(0, 0), (0, 30), (1, 20)]


def test_changed_configuration_is_refused_unless_allowed() -> None:
    saved = ResumableDataModule(IndexDataset(40), seed=1)
    state = saved.state_dict()
    with pytest.raises(StateMismatchError, match=r"seed: saved 1, now 2.*allow_config_change=True"):
        ResumableDataModule(IndexDataset(40), seed=2).load_state_dict(state)
    with pytest.raises(StateMismatchError, match="dataset length: saved 40, now 41"):
        ResumableDataModule(IndexDataset(41), seed=1, data_changes=None).load_state_dict(state)
    ResumableDataModule(IndexDataset(41), seed=1).load_state_dict(state)  # grown: docs/changes
    ResumableDataModule(IndexDataset(40), seed=2, allow_config_change=True).load_state_dict(state)
    ResumableDataModule(IndexDataset(40), seed=1, batch_size=7).load_state_dict(state)  # elastic
    with pytest.raises(StateMismatchError, match="no data configuration"):
        saved.load_state_dict({})


def test_callback_checks_its_phases_on_resume() -> None:
    phase = MixturePhase(start_step=5, weights={"a": 1})
    state = ResumableDataCallback([phase]).state_dict()
    ResumableDataCallback([phase]).load_state_dict(state)
    with pytest.raises(StateMismatchError, match=r"has none\. Pass ResumableDataCallback\(phases="):
        ResumableDataCallback([]).load_state_dict(state)
    other = MixturePhase(start_step=6, weights={"a": 1})
    with pytest.raises(StateMismatchError, match=r"phases changed.*ResumableDataModule\(allow_co"):
        ResumableDataCallback([other]).load_state_dict(state)
    allowing = ResumableDataCallback([other])
    module = ResumableDataModule({"a": IndexDataset(8)}, allow_config_change=True)
    allowing.setup(SimpleNamespace(datamodule=module), None, "fit")  # type: ignore[arg-type]
    allowing.load_state_dict(state)
    assert ResumableDataCallback().state_key == "ResumableDataCallback"


def test_callback_phases_need_the_datamodule() -> None:
    callback = ResumableDataCallback([MixturePhase(start_step=5, weights={"a": 1})])
    trainer = SimpleNamespace(datamodule=None)
    with pytest.raises(ValueError, match="needs a ResumableDataModule"):
        callback.setup(trainer, None, "fit")  # type: ignore[arg-type]


def test_bad_datamodule_arguments() -> None:
    with pytest.raises(ValueError, match="batch_size=0 must be >= 1"):
        ResumableDataModule(IndexDataset(4), batch_size=0)
    with pytest.raises(ValueError, match="expected one of"):
        ResumableDataModule(IndexDataset(4), algorithm="shuffle")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no train_dataset"):
        ResumableDataModule().train_dataloader()
    dm = ResumableDataModule(IndexDataset(4))
    dm.phases = (MixturePhase(start_step=1, weights={"a": 1}),)
    with pytest.raises(ValueError, match="mixture phases need named sources"):
        dm.train_dataloader()
