import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lightning_resumable_data.index import (
    EXACT_THRESHOLD,
    check_algorithm,
    feistel_keys,
    feistel_permute,
    feistel_slice,
    randperm,
)
from lightning_resumable_data.index.keys import key_bytes, key_digest, key_words
from lightning_resumable_data.index.permutation import _network_permute


@given(n=st.integers(0, 3000), seed=st.integers(0, 2**63 - 1))
def test_randperm_is_bit_identical_to_torch(n: int, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    expected = torch.randperm(n, generator=generator).numpy()
    np.testing.assert_array_equal(randperm(n, seed), expected)


@given(
    n=st.one_of(st.integers(1, 5000), st.integers(EXACT_THRESHOLD - 2, EXACT_THRESHOLD + 3000)),
    seed=st.integers(0, 2**64 - 1),
    epoch=st.integers(0, 10**6),
)
@settings(max_examples=60, deadline=None)
def test_feistel_is_a_permutation(n: int, seed: int, epoch: int) -> None:
    perm = feistel_slice(n, seed, epoch, 0, n)
    np.testing.assert_array_equal(np.sort(perm), np.arange(n))


@given(
    n=st.one_of(st.integers(1, 10**12), st.integers(2**63 - 10**6, 2**63)),
    data=st.data(),
    seed=st.integers(0, 2**32),
)
def test_feistel_slices_agree_with_pointwise_lookup(n: int, data: st.DataObject, seed: int) -> None:
    start = data.draw(st.integers(0, n))
    stop = data.draw(st.integers(start, min(n, start + 500)))
    values = feistel_slice(n, seed, 3, start, stop)
    assert values.shape == (stop - start,)
    assert ((values >= 0) & (values < n)).all()
    assert len(np.unique(values)) == len(values)
    # Random access: a single position computed alone gives the same value.
    if stop > start:
        mid = data.draw(st.integers(start, stop - 1))
        single = feistel_permute(np.array([mid]), n, feistel_keys(seed, 3))
        assert single[0] == values[mid - start]


def test_feistel_streams_differ_by_seed_and_epoch_without_aliasing() -> None:
    n = 1000
    base = feistel_slice(n, 0, 1, 0, n)
    assert not np.array_equal(base, feistel_slice(n, 0, 2, 0, n))
    assert not np.array_equal(base, feistel_slice(n, 1, 1, 0, n))
    # seed + epoch aliasing (seed=1, epoch=0) == (seed=0, epoch=1) must not happen.
    assert not np.array_equal(feistel_slice(n, 1, 0, 0, n), base)


def test_feistel_shuffles_well() -> None:
    # Displacement of a good shuffle is spread over the whole range, and position/value
    # correlation is near zero.
    n = 100_000
    perm = feistel_slice(n, 7, 0, 0, n).astype(np.float64)
    correlation = np.corrcoef(np.arange(n), perm)[0, 1]
    assert abs(correlation) < 0.02
    fixed_points = int((perm == np.arange(n)).sum())
    assert fixed_points < 10  # a random permutation has about one


def test_feistel_huge_domain_is_cheap() -> None:
    values = feistel_slice(10**10, seed=0, epoch=0, start=10**10 - 1000, stop=10**10)
    assert values.shape == (1000,)
    assert values.max() < 10**10
    assert len(np.unique(values)) == 1000


def test_bad_arguments_are_explained() -> None:
    with pytest.raises(ValueError, match="'randperm', 'feistel'"):
        check_algorithm("fisher-yates")
    with pytest.raises(ValueError, match=r"seed=-1 must be in \[0, 2\*\*64 - 1\]"):
        randperm(10, -1)
    with pytest.raises(TypeError, match=r"seed=1\.5 must be an int"):
        feistel_keys(1.5, 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must satisfy 0 <= start <= stop <= n=10"):
        feistel_slice(10, 0, 0, 5, 11)
    with pytest.raises(ValueError, match="n=0 must be > 0"):
        feistel_permute(np.array([], dtype=np.int64), 0, feistel_keys(0, 0))


def test_feistel_keys_are_fixed_width_so_distinct_pairs_never_collide() -> None:
    # SeedSequence([2**32, 5]) and SeedSequence([0, 1 + 5 * 2**32]) are the same stream.
    assert not np.array_equal(feistel_keys(2**32, 5), feistel_keys(0, 1 + 5 * 2**32))
    n = 1000
    assert not np.array_equal(
        feistel_slice(n, 2**32, 5, 0, n), feistel_slice(n, 0, 1 + 5 * 2**32, 0, n)
    )


def test_sample_and_shuffle_keys_are_fixed_width_too() -> None:
    from lightning_resumable_data.randomness import sample_rng, worker_seed
    from lightning_resumable_data.samplers import ReproducibleShuffleSampler
    from lightning_resumable_data.samplers.sequential import ResumableSequentialSampler

    wide, narrow = (2**32, 5), (0, 1 + 5 * 2**32)
    assert sample_rng(*wide, 0).random() != sample_rng(*narrow, 0).random()
    assert worker_seed(*wide, 0) != worker_seed(*narrow, 0)

    def shuffled(seed: int, epoch: int) -> list[int]:
        sampler = ReproducibleShuffleSampler(ResumableSequentialSampler(range(50)), seed=seed)
        sampler.set_epoch(epoch)
        return list(sampler)

    assert shuffled(*wide) != shuffled(*narrow)
    with pytest.raises(ValueError, match=r"seed=18446744073709551616 must be < 2\*\*64"):
        ReproducibleShuffleSampler(ResumableSequentialSampler(range(5)), seed=2**64)


def test_feistel_outputs_fit_int64_up_to_two_to_the_63() -> None:
    values = feistel_slice(2**63, seed=1, epoch=2, start=2**63 - 1000, stop=2**63)
    assert values.dtype == np.int64
    assert (values >= 0).all()
    assert len(np.unique(values)) == 1000
    with pytest.raises(ValueError, match=r"n=9223372036854775809 must be <= 2\*\*63"):
        feistel_permute(np.array([0]), 2**63 + 1, feistel_keys(0, 0))


def test_feistel_accepts_any_key_length_and_shape() -> None:
    # Callers (the mixture index) derive their own keys; any non-empty key works.
    for n in (10, EXACT_THRESHOLD + 7):
        for key in (np.array([1], np.uint64), np.arange(6, dtype=np.uint64)):
            perm = feistel_permute(np.arange(n).reshape(-1, 1), n, key)
            assert perm.shape == (n, 1)
            np.testing.assert_array_equal(np.sort(perm.ravel()), np.arange(n))
    with pytest.raises(ValueError, match="keys is empty"):
        feistel_permute(np.arange(3), 3, np.array([], np.uint64))


@given(n=st.integers(2, 3000), seed=st.integers(0, 2**64 - 1))
@settings(max_examples=50, deadline=None)
def test_the_network_is_a_permutation_at_every_n(n: int, seed: int) -> None:
    np.testing.assert_array_equal(np.sort(_network_permute(np.arange(n), n, (seed,))), np.arange(n))


def test_large_inputs_are_processed_in_chunks_identically() -> None:
    n, keys = 10**10, feistel_keys(3, 4)
    positions = np.arange(10**9, 10**9 + 70_000)
    whole = feistel_permute(positions, n, keys)
    parts = [feistel_permute(positions[i : i + 999], n, keys) for i in range(0, 70_000, 999)]
    np.testing.assert_array_equal(whole, np.concatenate(parts))


def test_randperm_aliases_seeds_modulo_two_to_the_32_like_torch() -> None:
    # torch's CPU generator seeds its Mersenne Twister with the low 32 bits of the seed.
    generator = torch.Generator().manual_seed(7 + 2**40)
    assert torch.randperm(50, generator=generator).tolist() == randperm(50, 7).tolist()
    np.testing.assert_array_equal(randperm(50, 7 + 2**32), randperm(50, 7))


@settings(max_examples=200, deadline=None)
@given(
    stream=st.integers(0, 2**32 - 1),
    values=st.lists(st.integers(0, 2**64 - 1), max_size=6),
)
def test_key_bytes_are_the_key_words_and_the_digest_is_keyed_on_them(
    stream: int, values: list[int]
) -> None:
    assert key_bytes(stream, *values) == key_words(stream, *values).tobytes()
    digest = key_digest(stream, *values, words=4)
    assert len(digest) == 4
    assert all(0 <= word < 2**32 for word in digest)
    assert digest == key_digest(stream, *values, words=4)
    assert digest != key_digest(stream, *values, 0, words=4)  # one more value: another key


def test_key_bytes_refuse_what_key_words_refuse() -> None:
    with pytest.raises(ValueError, match=r"key value -1 must be in \[0, 2\*\*64\)"):
        key_bytes(1, -1)
    with pytest.raises(ValueError, match=r"stream=4294967296 must be a 32-bit tag"):
        key_bytes(2**32)
