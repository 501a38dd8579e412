"""Keyed training randomness: the seeds, the generators they reach, and the callback's use.

The bit-identical resumes of real runs are in ``tests/matrix/test_training_randomness.py``;
here: the key (distinct streams), every generator reseeded (CUDA by mocking: this machine
has no GPU), the rank sources, the run seed, and in-process ``Trainer`` runs for what the
callback overrides and when (``seed_training=False`` leaves the generators alone).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, ClassVar

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from lightning.fabric import Fabric
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning_helpers import make_trainer

from lightning_resumable_data import (
    DistributedSampler,
    ResumableDataCallback,
    ResumableDataModule,
    StatefulDataLoader,
)
from lightning_resumable_data.index.keys import key_digest
from lightning_resumable_data.seeding import (
    GENERATORS,
    data_parallel_rank,
    run_seed,
    seed_training_step,
    seed_validation_batch,
    step_seeds,
)


def draws() -> tuple[float, float, float]:
    return float(torch.rand(())), float(np.random.random()), random.random()


# -- the key ---------------------------------------------------------------------------------


def test_every_key_field_gives_its_own_stream() -> None:
    keys = [(0, 0, 0, 0), (1, 0, 0, 0), (0, 1, 0, 0), (0, 0, 1, 0), (0, 0, 0, 1), (2**32, 0, 0, 0)]
    seeds = [step_seeds(*key) for key in keys]
    assert len({s.torch for s in seeds}) == len({s.numpy for s in seeds}) == len(keys)
    assert len({s.python for s in seeds}) == len(keys)
    validation = step_seeds(0, 0, 0, 0, validation_batch=0)
    assert validation.torch not in {s.torch for s in seeds}


def test_fixed_width_keys_do_not_collide_across_magnitudes() -> None:
    # (2**32, 5) and (0, 1 + 5 * 2**32) share SeedSequence words without fixed widths
    assert step_seeds(2**32, 5, 0) != step_seeds(0, 1 + 5 * 2**32, 0)


def test_seeding_reaches_torch_numpy_and_random() -> None:
    seed_training_step(0, seed=3, step=10, micro_batch=1, generators=GENERATORS)
    first = draws()
    draws()  # move every generator on
    seed_training_step(0, seed=3, step=10, micro_batch=1, generators=GENERATORS)
    assert draws() == first
    seed_training_step(0, seed=3, step=11, generators=GENERATORS)
    assert all(a != b for a, b in zip(draws(), first, strict=True))


@pytest.mark.parametrize(
    ("generators", "reseeded"),
    [
        (None, (True, False, False)),  # the default: torch's only
        (("torch",), (True, False, False)),
        (("numpy",), (False, True, False)),
        (["random", "torch"], (True, False, True)),
        ("random", (False, False, True)),
    ],
)
def test_only_the_chosen_generators_are_reseeded(
    generators: Any, reseeded: tuple[bool, bool, bool]
) -> None:
    """docs/randomness.md: torch's generators by default; NumPy's and random's on request.
    A generator not chosen goes on from where it was (not reseeded, not drawn from)."""
    chosen = {} if generators is None else {"generators": generators}

    def after(reseed: Any) -> tuple[float, float, float]:
        torch.manual_seed(1), np.random.seed(1), random.seed(1)
        reseed()
        return draws()

    untouched = after(lambda: None)
    first = after(lambda: seed_training_step(0, seed=3, step=10, **chosen))
    assert tuple(a != b for a, b in zip(first, untouched, strict=True)) == reseeded
    seed_training_step(0, seed=3, step=10, **chosen)
    again = draws()
    for a, b, chose in zip(again, first, reseeded, strict=True):
        assert a == b or not chose  # the chosen ones: the step's draws again
    validation = after(lambda: seed_validation_batch(0, seed=3, step=10, batch=0, **chosen))
    assert tuple(a != b for a, b in zip(validation, untouched, strict=True)) == reseeded


@pytest.mark.parametrize("generators", [(), ("torch", "jax"), 3, ["numpy", None]])
def test_unknown_generators_are_refused(generators: Any) -> None:
    with pytest.raises(ValueError, match=r"must name one or more of \('torch', 'numpy'"):
        seed_training_step(0, seed=3, step=10, generators=generators)


def test_validation_batches_have_their_own_stream() -> None:
    seed_training_step(0, seed=3, step=4, generators=GENERATORS)
    training = draws()
    seed_validation_batch(0, seed=3, step=4, batch=0, generators=GENERATORS)
    validation = draws()
    seed_validation_batch(0, seed=3, step=4, batch=0, generators=GENERATORS)
    assert draws() == validation != training


def test_cuda_generators_are_seeded_when_cuda_is_available(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No GPU here: the CUDA path is checked with a mocked torch.cuda.
    calls: list[int] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "manual_seed_all", calls.append)
    seeds = seed_training_step(1, seed=0, step=2)
    assert calls == [seeds.torch]
    assert torch.initial_seed() == seeds.torch  # the CPU generator got the same seed


def test_values_out_of_range_are_refused() -> None:
    with pytest.raises(ValueError, match="2\\*\\*64"):
        step_seeds(-1, 0, 0)
    with pytest.raises(ValueError, match="rank=-2"):
        seed_training_step(-2, seed=0, step=0)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 2**64 - 1), min_size=4, max_size=4),
    st.none() | st.integers(0, 2**64 - 1),
)
def test_seeds_are_the_documented_blake2b_words_of_the_key(
    key: list[int], validation_batch: int | None
) -> None:
    # the oracle: the module docstring's key (key_digest), not the packed fast path
    if validation_batch is None:
        words = key_digest(0x54524149, *key, words=10)  # "TRAI"
    else:
        words = key_digest(0x4556414C, *key, validation_batch, words=10)  # "EVAL"
    seeds = step_seeds(*key, validation_batch=validation_batch)
    assert seeds.torch == words[0] | words[1] << 32
    assert seeds.numpy == words[2:6]
    assert seeds.python == sum(word << 32 * i for i, word in enumerate(words[6:]))


def test_seeds_are_stable_across_versions() -> None:
    # a resumed run draws what the interrupted one drew: these values may never change
    assert step_seeds(7, 3, 1, 2).torch == 9300980320436779134
    assert step_seeds(2**64 - 1, 0, 0, validation_batch=9).torch == 9733740395527574285


@pytest.mark.parametrize("bad", [2.5, 2**64, "3", None])
def test_a_step_that_is_not_a_64_bit_int_is_refused(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"step=.*must be ints in \[0, 2\*\*64\)"):
        step_seeds(0, bad, 0)
    with pytest.raises(ValueError, match="must be ints"):
        seed_training_step(0, seed=bad, step=0)


# -- where the rank comes from --------------------------------------------------------------


class _Strategy:
    distributed_sampler_kwargs: ClassVar[dict[str, int]] = {"num_replicas": 4, "rank": 2}


class _Trainer:
    strategy = _Strategy()
    global_rank = 5  # a model-parallel peer: the data-parallel rank is the strategy's


def test_data_parallel_rank_sources() -> None:
    assert data_parallel_rank(3) == 3
    assert data_parallel_rank(np.int64(1)) == 1
    assert data_parallel_rank(_Trainer()) == 2
    assert data_parallel_rank(Fabric(accelerator="cpu", devices=1)) == 0
    with pytest.raises(TypeError, match="data-parallel rank of str"):
        data_parallel_rank("0")


def test_fabric_helper_equals_the_rank_form() -> None:
    fabric = Fabric(accelerator="cpu", devices=1)
    assert seed_training_step(fabric, seed=9, step=7) == seed_training_step(0, seed=9, step=7)


# -- the run seed ---------------------------------------------------------------------------


def test_run_seed_keys_the_seed_everything_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PL_GLOBAL_SEED", raising=False)
    assert run_seed(4) == 4
    monkeypatch.setenv("PL_GLOBAL_SEED", "42")
    assert run_seed(4) == run_seed(4, 42) != run_seed(4, 43)
    assert run_seed(4) != 4


def test_callback_arguments_are_checked() -> None:
    with pytest.raises(TypeError, match=r"seed_training='yes' must be True .*, False, or a tuple"):
        ResumableDataCallback(seed_training="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"generators=\('torch', 'jax'\) must name one or more"):
        ResumableDataCallback(seed_training=("torch", "jax"))
    with pytest.raises(ValueError, match="training_seed=-1 must be an int in"):
        ResumableDataCallback(training_seed=-1)
    for bad in (True, 1.5, "5", 2**64):
        with pytest.raises(ValueError, match=r"must be an int in \[0, 2\*\*64\)"):
            ResumableDataCallback(training_seed=bad)  # type: ignore[arg-type]


# -- in-process Trainer runs: what the callback overrides, and when -------------------------


class _Recorder(pl.LightningModule):
    """Records the generators' states at the start and end of every training step."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)
        self.states: list[tuple[str, int, Any]] = []

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        self.states.append(("start", self.global_step, _state()))
        noise = torch.randn(()) + float(np.random.random()) + random.random()
        self.states.append(("end", self.global_step, _state()))
        loss: torch.Tensor = self.layer(batch.float().view(-1, 1).repeat(1, 2)).mean() + 0 * noise
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _state() -> tuple[bytes, bytes, Any]:
    return (
        torch.get_rng_state().numpy().tobytes(),
        np.random.get_state()[1].tobytes(),  # type: ignore[index]
        random.getstate(),
    )


def _fit(
    tmp_path: Path,
    callback: ResumableDataCallback | None,
    ckpt: str | None = None,
    model: _Recorder | None = None,
) -> _Recorder:
    model = model or _Recorder()
    callbacks: list[pl.Callback] = [
        ModelCheckpoint(dirpath=tmp_path, filename="{step}", every_n_train_steps=1, save_top_k=-1)
    ]
    if callback is not None:
        callbacks.append(callback)
    trainer = make_trainer(tmp_path, *callbacks, max_steps=4, num_sanity_val_steps=0)
    datamodule = ResumableDataModule(range(16), batch_size=4, seed=6)
    trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt)
    return model


def test_default_reseeds_torch_at_every_training_batch_and_leaves_numpy_and_random(
    tmp_path: Path,
) -> None:
    """docs/randomness.md: by default torch's generator is reseeded at every training batch;
    NumPy's and random's go on from where the step before left them."""
    pl.seed_everything(1)
    model = _fit(tmp_path, None)  # the DataModule installs the callback: seeding on
    assert len(model.states) == 8
    left = None
    for kind, step, state in model.states:
        if kind == "start":
            seed_training_step(0, run_seed(6, 1), step)
            assert state[0] == _state()[0]
            assert left is None or state[1:] == left[1:]  # not reseeded
        left = state


@pytest.mark.parametrize("generators", [GENERATORS, ("random", "torch", "numpy")])
def test_on_request_every_generator_is_reseeded_at_every_training_batch(
    tmp_path: Path, generators: tuple[str, ...]
) -> None:
    pl.seed_everything(1)
    model = _fit(tmp_path, ResumableDataCallback(seed_training=generators))
    starts = [(step, state) for kind, step, state in model.states if kind == "start"]
    assert len(starts) == 4
    for step, state in starts:
        seed_training_step(0, run_seed(6, 1), step, generators=GENERATORS)
        assert state == _state()


def test_opt_out_leaves_the_generators_alone(tmp_path: Path) -> None:
    pl.seed_everything(1)
    model = _Recorder()
    expected = _state()  # nothing draws between here and the first training step
    _fit(tmp_path, ResumableDataCallback(seed_training=False), model=model)
    assert len(model.states) == 8
    for kind, _, state in model.states:
        if kind == "start":
            assert state == expected  # what the previous step left: nothing reseeded
        expected = state


def test_an_opted_out_resume_of_a_seeded_run_leaves_the_generators_alone(tmp_path: Path) -> None:
    """seed_training=False never touches the generators, even resuming a seeded checkpoint."""
    pl.seed_everything(1)
    _fit(tmp_path / "a", None)  # seeded: the checkpoint holds a training seed
    model = _Recorder()
    expected = _state()
    _fit(
        tmp_path / "b",
        ResumableDataCallback(seed_training=False),
        ckpt=str(tmp_path / "a" / "step=2.ckpt"),
        model=model,
    )
    assert len(model.states) == 4  # steps 2 and 3
    for kind, _, state in model.states:
        if kind == "start":
            assert state == expected  # what the previous step left: nothing reseeded
        expected = state


def test_without_a_resumable_datamodule_the_training_seed_is_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Your own loader and the callback: the training seed defaults to 0 (no DataModule seed)."""
    monkeypatch.delenv("PL_GLOBAL_SEED", raising=False)  # no seed_everything seed to key in
    model = _Recorder()
    trainer = make_trainer(
        tmp_path, ResumableDataCallback(), max_steps=2, enable_checkpointing=False
    )
    data = list(range(16))
    trainer.fit(model, StatefulDataLoader(data, batch_size=4, sampler=DistributedSampler(data)))
    starts = [(step, state) for kind, step, state in model.states if kind == "start"]
    assert len(starts) == 2
    for step, state in starts:
        seed_training_step(0, 0, step)
        assert state[0] == _state()[0]


def test_seed_everything_sweeps_still_vary_and_a_resume_keeps_the_saved_seed(
    tmp_path: Path,
) -> None:
    pl.seed_everything(1)
    first = _fit(tmp_path / "a", None)
    pl.seed_everything(2)
    other = _fit(tmp_path / "b", None)
    assert first.states[0] != other.states[0]  # another seed_everything seed: other masks
    # resumed under seed_everything(2): the checkpoint's training seed continues the run
    resumed = _fit(tmp_path / "c", None, ckpt=str(tmp_path / "a" / "step=2.ckpt"))
    assert [(*state[:2], state[2][0]) for state in resumed.states] == [
        (*state[:2], state[2][0]) for state in first.states[4:]
    ]  # torch's generator: the default


def test_fabric_loop_resumes_to_bit_identical_parameters(tmp_path: Path) -> None:
    from lightning_resumable_data.fabric import fabric_dataloader

    fabric = Fabric(accelerator="cpu", devices=1)
    data = torch.utils.data.TensorDataset(torch.randn(48, 6))

    def train(stop: int | None, resume: bool) -> dict[str, torch.Tensor]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Dropout(0.5))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer = fabric.setup(model, optimizer)
        loader = fabric_dataloader(fabric, data, batch_size=8, seed=1)
        state: dict[str, Any] = {"model": model, "optimizer": optimizer, "data": loader, "step": 0}
        if resume:
            fabric.load(tmp_path / "ckpt", state)
        torch.manual_seed(123)  # another process state: must not matter after a resume
        while loader.epoch < 2:
            for (x,) in loader:
                seed_training_step(fabric, seed=5, step=state["step"])
                loss = model(x).pow(2).mean() + torch.randn(()) * 0.01
                optimizer.zero_grad()
                fabric.backward(loss)
                optimizer.step()
                state["step"] += 1
                if state["step"] == stop:
                    fabric.save(tmp_path / "ckpt", state)
        return {k: v.detach().clone() for k, v in model.state_dict().items()}

    uninterrupted = train(stop=4, resume=False)
    resumed = train(stop=None, resume=True)
    assert all(torch.equal(uninterrupted[k], resumed[k]) for k in uninterrupted)


class _ManualRecorder(_Recorder):
    """Manual optimization: steps the optimizer every second batch."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        self.states.append(("start", self.global_step, _state()))
        optimizer = self.optimizers()
        assert isinstance(optimizer, pl.core.optimizer.LightningOptimizer)
        loss: torch.Tensor = self.layer(batch.float().view(-1, 1).repeat(1, 2)).mean()
        self.manual_backward(loss)
        if batch_idx % 2 == 1:
            optimizer.step()
            optimizer.zero_grad()
        return loss


@pytest.mark.parametrize("manual", [False, True], ids=["accumulate", "manual"])
def test_each_batch_draws_from_its_documented_key(tmp_path: Path, manual: bool) -> None:
    """Every training batch is seeded from (training seed, global step, rank, micro-batch).

    The micro-batch is the batch's index within its optimizer step under
    ``accumulate_grad_batches``; under manual optimization, its index in the epoch
    (docs/randomness.md). The expected states come from ``step_seeds`` of that key.
    """
    model = _ManualRecorder() if manual else _Recorder()
    trainer = make_trainer(
        tmp_path,
        ResumableDataCallback(training_seed=11, seed_training=GENERATORS),
        max_epochs=1,
        accumulate_grad_batches=1 if manual else 2,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(model, datamodule=ResumableDataModule(range(24), batch_size=4, seed=6))
    starts = [state for kind, _, state in model.states if kind == "start"]
    steps = [step for kind, step, _ in model.states if kind == "start"]
    assert steps == [0, 0, 1, 1, 2, 2]  # two batches per optimizer step, either way
    for batch, state in enumerate(starts):
        micro = batch if manual else batch % 2
        seed_training_step(0, 11, steps[batch], micro, generators=GENERATORS)
        assert state == _state(), f"batch {batch}"
    assert len({state[0] for state in starts}) == len(starts)  # every batch its own draw
