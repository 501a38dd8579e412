"""One save/load round-trip helper shared by the sampler tests.

``assert_resumes`` checks the four positions that matter: from the initial state, mid-epoch,
at the end of an epoch, and the next epoch after a resume.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from typing import Any, Protocol


class ResumableSampler(Protocol):
    def __iter__(self) -> Iterator[Any]: ...
    def set_epoch(self, epoch: int) -> None: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


def epoch_items(sampler: ResumableSampler, epoch: int) -> list[Any]:
    sampler.set_epoch(epoch)
    return list(sampler)


def save_after(sampler: ResumableSampler, epoch: int, k: int) -> tuple[dict[str, Any], list[Any]]:
    """Consume ``k`` items of ``epoch``; return a JSON round-tripped state and the rest."""
    sampler.set_epoch(epoch)
    iterator = iter(sampler)
    list(itertools.islice(iterator, k))
    state = json.loads(json.dumps(sampler.state_dict()))  # states are plain JSON
    return state, list(iterator)


def assert_resumes(make: Callable[[], ResumableSampler], epoch: int, k: int) -> None:
    """Save after ``k`` items of ``epoch``, restore into a fresh sampler, compare the rest."""
    reference = make()
    expected_rest = epoch_items(reference, epoch)[k:]
    expected_next = epoch_items(reference, epoch + 1)

    state, rest = save_after(make(), epoch, k)
    assert rest == expected_rest  # saving does not disturb the live iterator

    resumed = make()
    resumed.load_state_dict(state)
    resumed.set_epoch(epoch)  # what Lightning does at the start of the resumed epoch
    assert list(resumed) == expected_rest
    assert epoch_items(resumed, epoch + 1) == expected_next
