"""A newcomer's mistakes with ResumableDataModule: each error names the value, rule and fix."""

from __future__ import annotations

from typing import Any, cast

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from lightning_resumable_data import (
    DistributedSampler,
    ResumableDataModule,
    StatefulDataLoader,
    StateMismatchError,
)


def test_weights_as_a_list_name_the_sources() -> None:
    sources = {"web": range(8), "code": range(2)}
    with pytest.raises(
        TypeError,
        match=r"weights=\[0\.8, 0\.2\] must be a mapping of source names to weights, got a "
        r"list; name each source: weights=\{'web': \.\.\., 'code': \.\.\.\}",
    ):
        ResumableDataModule(sources, weights=[0.8, 0.2])  # type: ignore[arg-type]


def test_weights_on_a_single_dataset_are_refused() -> None:
    with pytest.raises(
        ValueError,
        match=r"weights=\{'web': 1\.0\} apply to a mixture of named sources, but train_dataset "
        r"is a single range; pass the sources as a mapping",
    ):
        ResumableDataModule(range(8), weights={"web": 1.0})


def test_weights_on_a_single_dataset_set_in_setup_are_refused() -> None:
    module = ResumableDataModule(weights={"web": 1.0})
    module.train_dataset = range(8)
    with pytest.raises(ValueError, match="apply to a mixture of named sources"):
        module.train_dataloader()


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (DistributedSampler(range(8), 1, 0), "sampler"),
        (DataLoader(cast(Any, range(8))), "loader"),
    ],
)
def test_a_sampler_or_loader_instead_of_the_dataset(value: Any, kind: str) -> None:
    name = type(value).__name__
    with pytest.raises(
        TypeError,
        match=rf"train_dataset is a {name}, but ResumableDataModule wants the dataset itself: "
        rf"it builds the {kind} .* Pass its dataset \(range\) instead, e\.g\. "
        rf"ResumableDataModule\({kind}\.dataset",
    ):
        ResumableDataModule(value)
    with pytest.raises(TypeError, match=rf"train_dataset\['web'\] is a {name}"):
        ResumableDataModule({"web": value})
    with pytest.raises(TypeError, match=rf"val_dataset is a {name}"):
        ResumableDataModule(range(8), val_dataset=value)


def test_a_changed_dataset_length_says_length() -> None:
    """Without a DataChangePolicy (the default has one: docs/changes.md)."""
    state = ResumableDataModule(range(100), seed=1).state_dict()
    with pytest.raises(
        StateMismatchError,
        match=r"dataset length: saved 100, now 101\).*data_changes=DataChangePolicy\(\).*"
        r"allow_config_change=True\) to accept the change without that exactness",
    ):
        ResumableDataModule(range(101), seed=1, data_changes=None).load_state_dict(state)


def test_a_misspelled_keyword_names_the_likely_one() -> None:
    with pytest.raises(
        TypeError,
        match=r"ResumableDataModule\(\) got an unknown argument batchsize=; did you mean "
        r"batch_size=\? It takes: train_dataset, val_dataset, .*, data_changes\.",
    ):
        ResumableDataModule(range(8), batchsize=4)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"unknown argument colour=; remove it\. It takes"):
        ResumableDataModule(range(8), colour="red")  # type: ignore[call-arg]


def test_subclasses_with_their_own_arguments_still_work() -> None:
    class Custom(ResumableDataModule):
        def __init__(self, size: int, **kwargs: Any) -> None:
            super().__init__(range(size), **kwargs)

    assert Custom(size=8, batch_size=2).batch_size == 2


def test_a_list_of_datasets_points_to_a_mixture_or_concat() -> None:
    datasets = [TensorDataset(torch.arange(4)), TensorDataset(torch.arange(3))]
    with pytest.raises(
        TypeError,
        match=r"train_dataset is a list of 2 datasets, .* Pass \{'name': dataset, \.\.\.\} for a "
        r"mixture, or torch\.utils\.data\.ConcatDataset\(\[\.\.\.\]\)",
    ):
        ResumableDataModule(datasets)


def test_from_datasets_builds_a_resumable_module() -> None:
    # Lightning's own from_datasets would attach plain DataLoader hooks (no position).
    dm = ResumableDataModule.from_datasets(
        train_dataset=range(8), val_dataset=range(4), batch_size=2, num_workers=0, seed=5
    )
    assert isinstance(dm, ResumableDataModule)
    assert (dm.train_dataset, dm.val_dataset, dm.batch_size, dm.seed) == (range(8), range(4), 2, 5)
    assert isinstance(dm.train_dataloader(), StatefulDataLoader)
    with pytest.raises(ValueError, match="ResumableDataModule has no predict loader"):
        ResumableDataModule.from_datasets(range(8), predict_dataset=range(2))
