"""docs/concepts.md, "What a resume checks", one sentence at a time.

"Everything G depends on is in the fingerprint: dataset length, seed, shuffle, algorithm,
drop_last; for a mixture also the sources, their sizes, the epoch budget and the schedule of
weights; for shards the shard count and a digest of their sizes and names. A state saved
under other values is refused with a StateMismatchError that names each difference."
"StatefulDataLoader(strict_resume=False) accept[s] such a change on purpose: the epoch and
position are kept and the order after them follows the new configuration."
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from lightning_resumable_data import (
    DistributedSampler,
    MixtureDataset,
    MixtureSampler,
    ResumeWarning,
    StatefulDataLoader,
    StateMismatchError,
)
from lightning_resumable_data.shards import ShardedSampler

SAVED: dict[str, Any] = {"seed": 1, "shuffle": True, "drop_last": False, "algorithm": "feistel"}


def saved_state(**changes: Any) -> dict[str, Any]:
    sampler = DistributedSampler(range(10), 2, 0, **(SAVED | changes))
    iterator = iter(sampler)
    next(iterator)
    return sampler.state_dict()


@pytest.mark.parametrize(
    ("name", "now"),
    [("seed", 0), ("shuffle", False), ("drop_last", True), ("algorithm", "randperm")],
)
def test_a_sampler_state_under_another_value_is_refused_naming_it(name: str, now: Any) -> None:
    state = saved_state()
    sampler = DistributedSampler(range(10), 2, 0, **(SAVED | {name: now}))
    with pytest.raises(StateMismatchError, match=rf"{name}: saved {SAVED[name]!r}, now {now!r}"):
        sampler.load_state_dict(state)


def test_another_dataset_length_is_refused() -> None:
    state = saved_state()
    with pytest.raises(StateMismatchError, match=r"dataset_length: saved 10, now 11"):
        DistributedSampler(range(11), 2, 0, **SAVED).load_state_dict(state)


def test_two_differences_are_both_named() -> None:
    state = saved_state()
    sampler = DistributedSampler(range(10), 2, 0, **(SAVED | {"seed": 2, "drop_last": True}))
    with pytest.raises(StateMismatchError) as raised:
        sampler.load_state_dict(state)
    assert "seed: saved 1, now 2" in str(raised.value)
    assert "drop_last: saved False, now True" in str(raised.value)


def mixture_state(**kwargs: Any) -> dict[str, Any]:
    sources = MixtureDataset({"web": list(range(60)), "code": list(range(40))})
    sampler = MixtureSampler(sources, {"web": 0.5, "code": 0.5}, 1, 0, seed=3, **kwargs)
    iterator = iter(sampler)
    next(iterator)
    return sampler.state_dict()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"samples_per_epoch": 90}, "samples_per_epoch|budget|epoch_length"),
        ({"sources": {"web": list(range(60)), "code": list(range(41))}}, "code|sizes"),
        ({"sources": {"web": list(range(60)), "math": list(range(40))}}, "math|sources"),
        ({"weights": {"web": 0.7, "code": 0.3}}, "weights|schedule"),
    ],
)
def test_a_mixture_state_under_another_budget_sources_or_weights_is_refused(
    change: dict[str, Any], named: str
) -> None:
    state = mixture_state(samples_per_epoch=80)
    default = {"web": list(range(60)), "code": list(range(40))}
    sources = MixtureDataset(change.get("sources", default))
    weights = change.get("weights", dict.fromkeys(sources.names, 0.5))
    budget = change.get("samples_per_epoch", 80)
    sampler = MixtureSampler(sources, weights, 1, 0, seed=3, samples_per_epoch=budget)
    with pytest.raises(StateMismatchError, match=named):
        sampler.load_state_dict(state)


@pytest.mark.parametrize("flag", ["shuffle_shards", "shuffle_samples", "drop_last"])
def test_a_shard_state_under_other_shuffle_flags_is_refused(flag: str) -> None:
    sampler = ShardedSampler([4, 6], 2, 0, seed=5)
    iterator = iter(sampler)
    next(iterator)
    state = sampler.state_dict()
    other = ShardedSampler([4, 6], 2, 0, seed=5, **{flag: not getattr(sampler, flag)})
    with pytest.raises(StateMismatchError, match=flag):
        other.load_state_dict(state)


def test_stateful_loader_strict_resume_false_keeps_the_position_and_takes_the_new_order() -> None:
    data = torch.arange(40)
    saved_sampler = DistributedSampler(data, 1, 0, seed=1)
    loader = StatefulDataLoader(data, batch_size=4, sampler=saved_sampler)
    iterator = iter(loader)
    for _ in range(3):
        next(iterator)
    state = loader.state_dict()

    with pytest.raises(StateMismatchError, match="seed"):  # the default: refused
        StatefulDataLoader(data, batch_size=4, sampler=DistributedSampler(data, 1, 0, seed=2))\
            .load_state_dict(state)  # fmt: skip

    new_sampler = DistributedSampler(data, 1, 0, seed=2)
    lenient = StatefulDataLoader(data, batch_size=4, sampler=new_sampler, strict_resume=False)
    with pytest.warns(ResumeWarning, match="seed"):
        lenient.load_state_dict(state)
    rest = torch.cat(list(lenient)).tolist()
    new_sampler.set_epoch(0)
    new_order = list(DistributedSampler(data, 1, 0, seed=2))
    assert rest == new_order[12:]  # the position (12 samples) kept, the new seed's order after


def test_a_data_module_without_weights_is_named_so_when_weights_are_added() -> None:
    """The refusal says "no weights", not the size-proportional numbers it stands for, and
    names the DataModule's way to accept the change."""
    from lightning_resumable_data import DataChangePolicy, ResumableDataModule

    sources: dict[str, Any] = {"web": range(120), "code": range(60)}
    saved = ResumableDataModule(sources, batch_size=4, seed=1)
    next(iter(saved.train_dataloader()))
    refuse = DataChangePolicy(sources="refuse")  # (the default starts them at the resume)
    resumed = ResumableDataModule(
        sources, weights={"web": 0.5, "code": 0.5}, batch_size=4, seed=1, data_changes=refuse
    )
    resumed.load_state_dict(saved.state_dict())
    with pytest.raises(StateMismatchError) as refused:
        resumed.train_dataloader()
    message = str(refused.value)
    assert "initial: saved no weights (proportional to the source sizes [120, 60]), now" in message
    assert "[120.0, 60.0]" not in message
    assert "allow_config_change=True" in message


def test_a_loader_rebuilt_with_shuffle_says_which_sampler_the_state_needs() -> None:
    from lightning_resumable_data import StatefulDataLoader

    data = list(range(100))
    sampler = DistributedSampler(data, num_replicas=1, rank=0, seed=0)
    saved = StatefulDataLoader(data, batch_size=4, sampler=sampler)
    next(iter(saved))
    rebuilt = StatefulDataLoader(data, batch_size=4, shuffle=True)
    with pytest.raises(StateMismatchError) as refused:
        rebuilt.load_state_dict(saved.state_dict())
    message = str(refused.value)
    assert "mode: saved 'position', now 'torchdata'" in message
    assert "sampler=DistributedSampler(...)" in message
    assert "allow_config_change" not in message  # not a DataModule's
