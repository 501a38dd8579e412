"""Tests written for surviving mutants of the mixture's configuration checks (issue 23).

They pin what docs/mixing.md and the refusals promise: the epoch's length is refused
outside ``[1, 2**53]`` (both ends accepted), an empty mixture is refused saying so, and each
refusal names the argument and says how to fix it. Oracles: the bounds and the messages as
documented, and counts computed by hand.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from lightning_resumable_data import MixtureDataset, MixtureSampler
from lightning_resumable_data.index.mixture import mixture_probabilities, target_counts

SIZES = {"web": 600, "code": 300, "math": 100}
W0 = {"web": 0.6, "code": 0.3, "math": 0.1}


def mixture(sizes: dict[str, int] | None = None) -> MixtureDataset:
    return MixtureDataset({name: range(n) for name, n in (sizes or SIZES).items()})


def sampler(
    weights: Any = None, *, sizes: dict[str, int] | None = None, **kw: Any
) -> MixtureSampler:
    chosen = W0 if weights is None else weights
    return MixtureSampler(mixture(sizes), chosen, num_replicas=1, rank=0, seed=0, **kw)


def test_a_dataset_that_is_not_a_mixture_is_refused_naming_its_type_and_the_fix() -> None:
    """The TypeError names the type given and shows how to wrap the sources."""
    fix = "Wrap the sources: MixtureDataset({'web': web, 'code': code})."
    with pytest.raises(TypeError, match=re.escape(f"got list. {fix}")):
        MixtureSampler([1, 2, 3], [1.0], num_replicas=1, rank=0)  # type: ignore[arg-type]


@pytest.mark.parametrize("samples_per_epoch", [None, 3])
def test_a_mixture_without_samples_is_refused_saying_so(samples_per_epoch: int | None) -> None:
    """Every source empty: a ValueError naming the sources, whatever the epoch's length."""
    message = (
        "every source of the mixture is empty (sources ['a', 'b']); there is nothing to "
        "draw. Give at least one source samples."
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        sampler([1.0, 1.0], sizes={"a": 0, "b": 0}, samples_per_epoch=samples_per_epoch)


def test_a_mixture_of_one_sample_and_an_epoch_of_one_position_are_read() -> None:
    """The smallest mixture (one sample) and the shortest epoch (1) are accepted and read."""
    assert list(sampler([1.0], sizes={"a": 1})) == [0]
    one = sampler(samples_per_epoch=1)
    assert len(one) == 1
    (index,) = list(one)
    assert 0 <= index < sum(SIZES.values())


@pytest.mark.parametrize("length", [0, 2**53 + 1])
def test_an_epoch_length_outside_1_to_2_53_is_refused_with_the_fix(length: int) -> None:
    """``samples_per_epoch`` 0 or above 2**53 is refused (docs: "a larger one is refused")."""
    message = (
        f"samples_per_epoch={length:,} must be in [1, 2**53 = 9,007,199,254,740,992]: float64 "
        "weights give exact per-source counts only below 2**53. Use a smaller epoch (e.g. "
        "10**12) and more epochs."
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        sampler(samples_per_epoch=length)


def test_an_epoch_of_exactly_2_53_positions_is_accepted_with_exact_counts() -> None:
    """2**53 is inside the documented bound: the counts are the exact shares (3:1)."""
    big = sampler([3.0, 1.0], sizes={"a": 3, "b": 1}, samples_per_epoch=2**53)
    assert len(big) == 2**53
    assert big.source_counts(2**53, epoch=0) == {"a": 3 * 2**51, "b": 2**51}
    it = iter(big)
    first = [next(it) for _ in range(8)]
    assert all(0 <= i < 4 for i in first)


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        (-1, ValueError, r"^samples_per_epoch=-1 must be >= 0\.$"),
        ("8", TypeError, r"^samples_per_epoch='8' must be an int, got str\.$"),
    ],
)
def test_a_bad_epoch_length_is_refused_naming_samples_per_epoch(
    value: object, error: type[Exception], match: str
) -> None:
    """The refusal names the argument as the user wrote it."""
    with pytest.raises(error, match=match):
        sampler(samples_per_epoch=value)


@pytest.mark.parametrize(
    ("weights", "sizes", "error", "match"),
    [
        ({"web": 1.0, "code": 1.0, "x": 1.0}, None, ValueError, "Give 0 to leave a source out."),
        (
            5,
            None,
            TypeError,
            "(e.g. {'web': 0.7, 'code': 0.3}) or one number per source, in order.",
        ),
        (
            [1.0, 1.0],
            {"a": 2, "b": 0},
            ValueError,
            "sources ['b'] are empty but have weight > 0; give them weight 0 or add samples "
            "to them.",
        ),
    ],
)
def test_refused_weights_say_how_to_fix_them(
    weights: Any, sizes: dict[str, int] | None, error: type[Exception], match: str
) -> None:
    """Each refusal of the weights ends with its fix."""
    with pytest.raises(error, match=f"{re.escape(match)}$"):
        sampler(weights, sizes=sizes)


def test_a_tiny_temperature_approaches_the_argmax_without_overflow() -> None:
    """Documented: ``temperature -> 0`` approaches the argmax, computed in log space."""
    with np.errstate(all="ignore"):
        probabilities = mixture_probabilities([10.0, 1.0], 1e-308)
    assert probabilities.tolist() == [1.0, 0.0]


@pytest.mark.parametrize("world", [3, 7])
def test_padded_ranks_interleave_to_the_one_rank_order_across_changes(world: int) -> None:
    """drop_last=False over several segments: the last rank's padding wraps to the epoch's
    start (positions out of order in one lookup), and the ranks still interleave to ``G``."""
    w1 = {"web": 0.2, "code": 0.3, "math": 0.5}

    def make(num_replicas: int, rank: int) -> list[int]:
        s = MixtureSampler(mixture(), W0, num_replicas, rank, seed=3, drop_last=False)
        s.update_weights(w1, epoch=0, position=400, kind="online")
        s.update_weights(W0, epoch=0, position=700)
        return list(s)

    order = make(1, 0)
    ranks = [make(world, r) for r in range(world)]
    per_rank = len(ranks[0])
    assert per_rank * world > 1000  # a ragged epoch: the last row is padded
    interleaved = [ranks[r][i] for i in range(per_rank) for r in range(world)]
    assert interleaved == [order[i % 1000] for i in range(per_rank * world)]


def test_the_state_fingerprint_has_the_documented_keys() -> None:
    """MixtureSampler's docstring lists the fingerprint's keys; a state written by one
    release must name them the same way for another to load it."""
    s = sampler(samples_per_epoch=900, drop_last=False)
    fingerprint = s.state_dict()["fingerprint"]
    assert {k: fingerprint[k] for k in ("samples_per_epoch", "drop_last")} == {
        "samples_per_epoch": 900,
        "drop_last": False,
    }
    assert set(fingerprint) >= {
        "sources",
        "sizes",
        "seed",
        "samples_per_epoch",
        "drop_last",
        "initial",
        "order",
    }


def test_a_change_too_late_names_the_call_and_the_fix() -> None:
    """The refusal of a handed-out position names the call as made and offers position=None."""
    s = sampler()
    it = iter(s)
    for _ in range(5):
        next(it)
    with pytest.raises(
        ValueError, match=r"^update_weights\(epoch=0, position=3\) is too late"
    ) as e:
        s.update_weights(W0, epoch=0, position=3)
    assert str(e.value).endswith("pass position >= 5, or position=None for the earliest.")


def test_a_tiny_temperature_builds_a_sampler_of_the_argmax_source() -> None:
    """The sampler too: it used to loop forever in target_counts on NaN probabilities."""
    sampler = MixtureSampler(
        MixtureDataset({"a": range(3), "b": range(1)}),
        {"a": 10, "b": 1},
        num_replicas=1,
        rank=0,
        temperature=1e-308,
    )
    order = list(sampler)
    assert len(order) == 4
    assert set(order[:3]) == {0, 1, 2}  # only "a" (index 3 is "b"), one whole pass first
    assert order[3] in {0, 1, 2}


def test_target_counts_refuses_probabilities_that_are_not_finite() -> None:
    with pytest.raises(ValueError, match="must be finite"):
        target_counts(np.array([np.nan, np.nan]), 10)
