"""The promises of docs/randomness.md, docs/sharded.md and docs/mixing.md, tested as a user.

Written from the documentation only, by someone who had not seen the code (issue 26), with
real ``Trainer`` runs where the docs speak of one; each test quotes the promise it checks.
It found three broken promises of ``allow_config_change`` (marked below), fixed since.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import Dataset, TensorDataset

from lightning_resumable_data import (
    MixturePhase,
    ResumableDataCallback,
    ResumableDataModule,
    ShardedDataLoader,
    StateMismatchError,
    open_token_shards,
    seed_training_step,
    seeding,
    write_token_shards,
)

ALL = ("torch", "numpy", "random")


def _trainer(max_steps: int, callbacks: list[Any], **kwargs: Any) -> pl.Trainer:
    return pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=max_steps,
        callbacks=callbacks,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        **kwargs,
    )


@pytest.fixture(autouse=True)
def _no_global_seed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # `seed_everything` keys the training seed with PL_GLOBAL_SEED; keep it out.
    monkeypatch.delenv("PL_GLOBAL_SEED", raising=False)
    # Lightning's default checkpoint callback writes under the working directory.
    monkeypatch.chdir(tmp_path)


def _disturb_rngs(value: int) -> None:
    torch.manual_seed(value)
    np.random.seed(value)
    random.seed(value)


# --------------------------------------------------------------------------------------
# 1. randomness.md: the functions
# --------------------------------------------------------------------------------------


def _draw() -> tuple[list[float], list[float], float]:
    return torch.rand(3).tolist(), np.random.random(3).tolist(), random.random()


def test_generators_constant() -> None:
    """`generators` names any of `seeding.GENERATORS`: `("torch", "numpy", "random")`."""
    assert tuple(seeding.GENERATORS) == ALL


def test_seed_training_step_default_reseeds_only_torch() -> None:
    """Default `generators=("torch",)`: torch reseeded, NumPy's and `random` untouched."""
    _disturb_rngs(1)
    np_state = np.random.get_state()
    py_state = random.getstate()
    seed_training_step(0, seed=5, step=3)
    t1 = torch.rand(4)
    # NumPy's and Python's generators are exactly where they were.
    assert np.array_equal(np.random.get_state()[1], np_state[1])  # type: ignore[index]
    assert random.getstate() == py_state
    _disturb_rngs(2)
    seed_training_step(0, seed=5, step=3)
    assert torch.equal(torch.rand(4), t1)
    # Another step, another micro-batch: other streams.
    seed_training_step(0, seed=5, step=4)
    assert not torch.equal(torch.rand(4), t1)
    seed_training_step(0, seed=5, step=3, micro_batch=1)
    assert not torch.equal(torch.rand(4), t1)


def test_seed_training_step_all_three() -> None:
    """`generators=("torch", "numpy", "random")` reseeds NumPy's and Python's as well."""
    _disturb_rngs(1)
    seed_training_step(0, seed=5, step=3, generators=ALL)
    first = _draw()
    _disturb_rngs(2)
    seed_training_step(0, seed=5, step=3, generators=ALL)
    assert _draw() == first


@pytest.mark.parametrize("only", ["numpy", "random"])
def test_seed_training_step_exactly_the_named_generators(only: str) -> None:
    """Only the named generator is reseeded; torch's is left alone."""
    _disturb_rngs(1)
    torch_state = torch.get_rng_state()
    np_state = np.random.get_state()
    py_state = random.getstate()
    seed_training_step(0, seed=5, step=3, generators=(only,))
    assert torch.equal(torch.get_rng_state(), torch_state)
    if only == "numpy":
        assert random.getstate() == py_state
        a = np.random.random(3).tolist()
        np.random.seed(99)
        seed_training_step(0, seed=5, step=3, generators=(only,))
        assert np.random.random(3).tolist() == a
    else:
        assert np.array_equal(np.random.get_state()[1], np_state[1])  # type: ignore[index]
        a = random.random()
        random.seed(99)
        seed_training_step(0, seed=5, step=3, generators=(only,))
        assert random.random() == a


def test_seed_validation_batch_named_generators_and_separate_stream() -> None:
    """`seed_validation_batch(..., generators=...)`: the validation stream, its own keys."""
    _disturb_rngs(1)
    np_state = np.random.get_state()
    seeding.seed_validation_batch(0, 5, 3, 0)
    v = torch.rand(4)
    assert np.array_equal(np.random.get_state()[1], np_state[1])  # type: ignore[index]  # default: torch only
    seeding.seed_validation_batch(0, 5, 3, 0)
    assert torch.equal(torch.rand(4), v)
    seeding.seed_validation_batch(0, 5, 3, 1)
    assert not torch.equal(torch.rand(4), v)  # batch index is in the key
    seeding.seed_validation_batch(0, 5, 3, 0, dataloader=1)
    assert not torch.equal(torch.rand(4), v)  # dataloader index is in the key
    seed_training_step(0, seed=5, step=3)
    assert not torch.equal(torch.rand(4), v)  # a separate stream from training's
    _disturb_rngs(3)
    seeding.seed_validation_batch(0, 5, 3, 0, generators=ALL)
    first = _draw()
    _disturb_rngs(4)
    seeding.seed_validation_batch(0, 5, 3, 0, generators=ALL)
    assert _draw() == first


def test_step_seeds_pure() -> None:
    """`seeding.step_seeds(seed, step, rank, micro_batch=0)`: the seeds alone, pure."""
    assert seeding.step_seeds(5, 3, 0) == seeding.step_seeds(5, 3, 0)
    assert seeding.step_seeds(5, 3, 0) != seeding.step_seeds(5, 3, 1)
    assert seeding.step_seeds(5, 3, 0) != seeding.step_seeds(5, 3, 0, 1)
    # seed_training_step "returns the seeds"
    assert seed_training_step(0, seed=5, step=3) == seeding.step_seeds(5, 3, 0)


@pytest.mark.parametrize("generators", [("torch", "jax"), ("nump",), ("cuda",), ("torch", 1)])
def test_bad_generators_refused(generators: tuple[Any, ...]) -> None:
    """Names outside `seeding.GENERATORS` are refused with an error naming them."""
    _disturb_rngs(1)
    state = torch.get_rng_state()
    with pytest.raises((ValueError, TypeError)) as info:
        seed_training_step(0, seed=5, step=3, generators=generators)
    assert str(generators[-1]) in str(info.value)
    assert torch.equal(torch.get_rng_state(), state)  # nothing reseeded
    with pytest.raises((ValueError, TypeError)) as info:
        seeding.seed_validation_batch(0, 5, 3, 0, generators=generators)
    assert str(generators[-1]) in str(info.value)
    with pytest.raises((ValueError, TypeError)) as info:
        ResumableDataCallback(seed_training=generators)
    assert str(generators[-1]) in str(info.value)


def test_fabric_seed_training_step_equals_plain_rank() -> None:
    """Fabric: `seed_training_step(fabric, seed=0, step=step)`, rank from the strategy."""
    from lightning.fabric import Fabric

    fabric = Fabric(accelerator="cpu", devices=1)
    assert seed_training_step(fabric, seed=0, step=7) == seeding.step_seeds(0, 7, 0)
    a = torch.rand(3)
    seed_training_step(0, seed=0, step=7)
    assert torch.equal(torch.rand(3), a)


# --------------------------------------------------------------------------------------
# 1. randomness.md: the callback in a real Trainer
# --------------------------------------------------------------------------------------


class Noisy(pl.LightningModule):
    """Dropout and torch noise; optionally noise from NumPy and `random` too."""

    def __init__(self, libraries: tuple[str, ...] = ("torch",)) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 16), torch.nn.Dropout(0.5), torch.nn.Linear(16, 1)
        )
        self.libraries = libraries
        self.draws: list[tuple[int, list[float], list[float], float]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        self.draws.append((self.global_step, *_draw()))
        # _draw() consumed from all three; the model's noise below:
        out = self.net(x + 0.1 * torch.randn_like(x)).squeeze(-1)
        if "numpy" in self.libraries:
            out = out * float(np.random.normal(1.0, 0.1))
        if "random" in self.libraries:
            out = out + random.gauss(0.0, 0.1)
        return torch.nn.functional.mse_loss(out, y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _data() -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(48, 4, generator=g), torch.randn(48, generator=g))


def _fit_resumed(
    tmp_path: Path, libraries: tuple[str, ...], callback_kwargs: dict[str, Any]
) -> tuple[Noisy, Noisy]:
    """An uninterrupted 6-step run, and a run stopped at step 3 and resumed to 6."""
    full = Noisy(libraries)
    _disturb_rngs(10)
    _trainer(6, [ResumableDataCallback(**callback_kwargs)]).fit(
        full, datamodule=ResumableDataModule(_data(), batch_size=8, seed=3)
    )
    first = Noisy(libraries)
    _disturb_rngs(10)
    ckpt = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=3, save_top_k=-1)
    _trainer(3, [ResumableDataCallback(**callback_kwargs), ckpt]).fit(
        first, datamodule=ResumableDataModule(_data(), batch_size=8, seed=3)
    )
    (path,) = tmp_path.glob("*step=3*.ckpt")
    resumed = Noisy(libraries)
    _disturb_rngs(777)  # a new process: the global generators are elsewhere
    _trainer(6, [ResumableDataCallback(**callback_kwargs)]).fit(
        resumed,
        datamodule=ResumableDataModule(_data(), batch_size=8, seed=3),
        ckpt_path=str(path),
    )
    return full, resumed


def _params_equal(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def test_trainer_resume_default_torch_bit_identical(tmp_path: Path) -> None:
    """Default: a model drawing only from torch resumes to bit-identical parameters."""
    full, resumed = _fit_resumed(tmp_path, ("torch",), {})
    assert _params_equal(full, resumed)
    full_torch = {s: t for s, t, _, _ in full.draws}
    assert all(full_torch[s] == t for s, t, _, _ in resumed.draws)
    # Default: NumPy's and `random`'s streams are not reseeded, so they differ.
    full_np = {s: n for s, _, n, _ in full.draws}
    assert any(full_np[s] != n for s, _, n, _ in resumed.draws)


def test_trainer_resume_opt_in_all_three_bit_identical(tmp_path: Path) -> None:
    """`seed_training=("torch", "numpy", "random")`: all three draws, bit-identical."""
    full, resumed = _fit_resumed(tmp_path, ALL, {"seed_training": ALL})
    assert _params_equal(full, resumed)
    draws = {d[0]: d[1:] for d in full.draws}
    assert all(draws[d[0]] == d[1:] for d in resumed.draws)


def test_trainer_seed_training_false_touches_nothing(tmp_path: Path) -> None:
    """`seed_training=False` never touches the global generators; a resume differs."""
    full, resumed = _fit_resumed(tmp_path, ("torch",), {"seed_training": False})
    assert not _params_equal(full, resumed)
    # The draws in training_step follow the seeds set before fit.
    runs = []
    for value in (1, 2):
        model = Noisy()
        _disturb_rngs(value)
        _trainer(2, [ResumableDataCallback(seed_training=False)]).fit(
            model, datamodule=ResumableDataModule(_data(), batch_size=8, seed=3)
        )
        runs.append(model.draws)
    for (_, t1, n1, r1), (_, t2, n2, r2) in zip(*runs, strict=True):
        assert t1 != t2
        assert n1 != n2
        assert r1 != r2


def test_trainer_reseeds_from_step_seeds_at_each_batch() -> None:
    """At each training batch the callback seeds from (training seed, step, rank, micro)."""
    for gens in (("torch",), ALL):
        model = Noisy()
        _disturb_rngs(5)
        _trainer(3, [ResumableDataCallback(training_seed=11, seed_training=gens)]).fit(
            model, datamodule=ResumableDataModule(_data(), batch_size=8, seed=3)
        )
        for step, t, n, r in model.draws:
            _disturb_rngs(6)
            seed_training_step(0, seed=11, step=step, generators=gens)
            et, en, er = _draw()
            assert t == et
            assert (n == en and r == er) == (gens == ALL)


def test_trainer_default_training_seed_is_run_seed_of_datamodule_seed() -> None:
    """The training seed is by default the DataModule's `seed` (`seeding.run_seed`)."""
    model = Noisy()
    _trainer(2, [ResumableDataCallback()]).fit(
        model, datamodule=ResumableDataModule(_data(), batch_size=8, seed=3)
    )
    for step, t, _, _ in model.draws:
        seed_training_step(0, seed=seeding.run_seed(3), step=step)
        assert torch.rand(3).tolist() == t


class Hooked(Noisy):
    """Draws in its own `on_train_batch_start`, in validation, under accumulation."""

    def __init__(self) -> None:
        super().__init__()
        self.hook_draws: list[tuple[int, list[float]]] = []
        self.val_draws: list[tuple[int, int, list[float]]] = []

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self.hook_draws.append((self.global_step, torch.rand(3).tolist()))

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.val_draws.append((self.global_step, batch_idx, torch.rand(3).tolist()))


def test_module_hook_after_reseed_and_validation_stream() -> None:
    """Reseeded before the LightningModule's `on_train_batch_start`; validation batches
    of the fit from (training seed, global step, rank, dataloader, batch index)."""
    model = Hooked()
    dm = ResumableDataModule(_data(), batch_size=8, seed=3, val_dataset=_data())
    _trainer(4, [ResumableDataCallback(training_seed=11)], val_check_interval=2).fit(
        model, datamodule=dm
    )
    assert model.hook_draws
    assert model.val_draws
    for step, t in model.hook_draws:
        seed_training_step(0, seed=11, step=step)
        assert torch.rand(3).tolist() == t
    for step, batch_idx, t in model.val_draws:
        seeding.seed_validation_batch(0, 11, step, batch_idx, dataloader=0)
        assert torch.rand(3).tolist() == t, (step, batch_idx)


def test_accumulate_grad_batches_micro_batch_key() -> None:
    """The micro-batch is the batch's index within its optimizer step."""
    model = Noisy()
    _trainer(2, [ResumableDataCallback(training_seed=11)], accumulate_grad_batches=2).fit(
        model, datamodule=ResumableDataModule(_data(), batch_size=8, seed=3)
    )
    assert [d[0] for d in model.draws] == [0, 0, 1, 1]
    for i, (step, t, _, _) in enumerate(model.draws):
        seed_training_step(0, seed=11, step=step, micro_batch=i % 2)
        assert torch.rand(3).tolist() == t


def test_datamodule_installs_seeding_callback_by_default() -> None:
    """`ResumableDataModule` installs a `ResumableDataCallback` when the trainer has none,
    and seeding is on by default (training seed: the DataModule's `seed`)."""
    model = Noisy()
    _trainer(2, []).fit(model, datamodule=ResumableDataModule(_data(), batch_size=8, seed=3))
    for step, t, _, _ in model.draws:
        seed_training_step(0, seed=seeding.run_seed(3), step=step)
        assert torch.rand(3).tolist() == t


def test_training_does_not_depend_on_validation() -> None:
    """Training "never depends on whether or when validation ran"."""
    params = []
    for interval in (None, 2, 3):
        model = Hooked()
        kwargs: dict[str, Any] = {}
        if interval is not None:
            kwargs = {"val_check_interval": interval, "limit_val_batches": 2}
        dm = ResumableDataModule(
            _data(), batch_size=8, seed=3, val_dataset=_data() if interval else None
        )
        _trainer(6, [ResumableDataCallback()], **kwargs).fit(model, datamodule=dm)
        assert bool(model.val_draws) == (interval is not None)
        params.append(model)
    assert _params_equal(params[0], params[1])
    assert _params_equal(params[0], params[2])


def test_resume_keeps_checkpoint_training_seed(tmp_path: Path) -> None:
    """A resumed run continues with the checkpoint's seed, even when its own differs
    (`seed_everything` with another seed before the resume)."""
    pl.seed_everything(5)
    full = Noisy()
    _trainer(6, [ResumableDataCallback()]).fit(
        full, datamodule=ResumableDataModule(_data(), batch_size=8, seed=3)
    )
    pl.seed_everything(5)
    first = Noisy()
    ckpt = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=3, save_top_k=-1)
    _trainer(3, [ResumableDataCallback(), ckpt]).fit(
        first, datamodule=ResumableDataModule(_data(), batch_size=8, seed=3)
    )
    (path,) = tmp_path.glob("*step=3*.ckpt")
    pl.seed_everything(6)
    resumed = Noisy()
    _trainer(6, [ResumableDataCallback()]).fit(
        resumed,
        datamodule=ResumableDataModule(_data(), batch_size=8, seed=3),
        ckpt_path=str(path),
    )
    assert _params_equal(full, resumed)


def test_not_touched_outside_fit_and_own_generators() -> None:
    """Not touched: `trainer.validate` outside a fit, `torch.Generator` objects you
    create yourself."""
    draws = []
    for value in (1, 2):
        model = Hooked()
        dm = ResumableDataModule(_data(), batch_size=8, seed=3, val_dataset=_data())
        trainer = _trainer(2, [ResumableDataCallback(training_seed=11)])
        _disturb_rngs(value)
        trainer.validate(model, datamodule=dm, verbose=False)
        draws.append([d[2] for d in model.val_draws])
    assert draws[0]
    assert draws[0] != draws[1]

    class OwnGenerator(Noisy):
        def __init__(self) -> None:
            super().__init__()
            self.gen = torch.Generator().manual_seed(123)
            self.own: list[torch.Tensor] = []

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.own.append(torch.rand(2, generator=self.gen))
            return super().training_step(batch, batch_idx)

    own = OwnGenerator()
    _trainer(4, [ResumableDataCallback()]).fit(
        own, datamodule=ResumableDataModule(_data(), batch_size=8, seed=3)
    )
    expected = torch.rand(8, generator=torch.Generator().manual_seed(123))
    assert torch.equal(torch.cat(own.own), expected)


class Manual(Noisy):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.keys: list[tuple[int, int, list[float]]] = []

    def training_step(self, batch: Any, batch_idx: int) -> None:  # type: ignore[override]
        self.keys.append((self.global_step, batch_idx, torch.rand(3).tolist()))
        opt = self.optimizers()
        assert not isinstance(opt, list)
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x).squeeze(-1), y)
        opt.zero_grad()
        self.manual_backward(loss)
        if batch_idx % 2 == 1:
            opt.step()


def test_manual_optimization_keys() -> None:
    """Manual optimization keys a batch by the global step and its index in the epoch."""
    model = Manual()
    _trainer(2, [ResumableDataCallback(training_seed=11)]).fit(
        model, datamodule=ResumableDataModule(_data(), batch_size=8, seed=3)
    )
    assert [k[:2] for k in model.keys] == [(0, 0), (0, 1), (1, 2), (1, 3)]
    for step, batch_idx, t in model.keys:
        seed_training_step(0, seed=11, step=step, micro_batch=batch_idx)
        assert torch.rand(3).tolist() == t


# --------------------------------------------------------------------------------------
# 2. sharded.md
# --------------------------------------------------------------------------------------

SEQ = 4


def _shards(directory: Path) -> list[Path]:
    # 120 tokens, 30 samples: shard 0 = 0..39, shard 1 = 40..49 and 100..129,
    # shard 2 = 130..169.
    tokens = (np.arange(n) + base for n, base in ((50, 0), (70, 100)))
    write_token_shards(directory, tokens, seq_len=SEQ, tokens_per_shard=40)
    files = sorted(directory.glob("shard_*.bin"))
    assert len(files) == 3
    return files


def _loader(directory: Path, **kwargs: Any) -> ShardedDataLoader:
    return ShardedDataLoader(
        open_token_shards(directory, **kwargs),
        batch_size=2,
        seed=0,
        multiprocessing=False,
        num_microbatch_prefetches=0,
    )


def test_open_token_shards_touches_no_shard_file(tmp_path: Path) -> None:
    """`open_token_shards(directory)` returns readers without touching any shard file."""
    files = _shards(tmp_path)
    for f in files:
        f.unlink()
    readers = open_token_shards(tmp_path)
    assert len(readers) == 3
    assert sum(len(r) for r in readers) == 30  # `__len__` never loads


@pytest.mark.parametrize("verify", [False, True])
def test_missing_shard(tmp_path: Path, verify: bool) -> None:
    """Missing shard: `FileNotFoundError` naming the file, at first load / at open."""
    files = _shards(tmp_path)
    files[1].unlink()
    if verify:
        with pytest.raises(FileNotFoundError, match=files[1].name):
            open_token_shards(tmp_path, verify=True)
        return
    readers = open_token_shards(tmp_path)
    readers[0].load()
    with pytest.raises(FileNotFoundError, match=files[1].name):
        readers[1].load()
    with pytest.raises(FileNotFoundError, match=files[1].name):
        list(_loader(tmp_path))


@pytest.mark.parametrize("delta", [-8, 8])
@pytest.mark.parametrize("verify", [False, True])
def test_truncated_shard(tmp_path: Path, verify: bool, delta: int) -> None:
    """Size disagrees with the index (truncated, rewritten): `ValueError` with both
    sizes, at its first load (at `open_token_shards` with `verify=True`)."""
    files = _shards(tmp_path)
    size = files[2].stat().st_size
    data = files[2].read_bytes()
    files[2].write_bytes(data[: size - 8] if delta < 0 else data + data[:8])
    # Both sizes: the file's and the index's (in bytes, or the index's in samples).
    new = size + delta
    both = rf"(?s)(?=.*\b{new}\b)(?=.*(\b{size}\b|\b10 samples|says 10\b))"
    if verify:
        with pytest.raises(ValueError, match=both):
            open_token_shards(tmp_path, verify=True)
        return
    readers = open_token_shards(tmp_path)
    readers[0].load()
    with pytest.raises(ValueError, match=both):
        readers[2].load()


def _saved_state(directory: Path) -> dict[str, Any]:
    loader = _loader(directory)
    for i, _ in enumerate(loader):
        if i == 2:
            break
    return loader.state_dict()


@pytest.mark.parametrize("change", ["vanish", "truncate"])
def test_shard_changed_between_save_and_resume_verify(tmp_path: Path, change: str) -> None:
    """With `verify=True`, `load_state_dict` raises `StateMismatchError` naming the shard."""
    files = _shards(tmp_path)
    state = _saved_state(tmp_path)
    resumed = _loader(tmp_path, verify=True)  # every shard opened and checked now
    if change == "vanish":
        files[1].unlink()
    else:
        files[1].write_bytes(files[1].read_bytes()[:-8])
    with pytest.raises(StateMismatchError, match=files[1].name):
        resumed.load_state_dict(state)


@pytest.mark.parametrize("change", ["vanish", "truncate"])
def test_shard_changed_not_opened_fails_first_load(tmp_path: Path, change: str) -> None:
    """A shard not opened yet fails its first load, before any of its samples is read."""
    files = _shards(tmp_path)
    state = _saved_state(tmp_path)
    if change == "vanish":
        files[2].unlink()
    else:
        files[2].write_bytes(files[2].read_bytes()[:-8])
    resumed = _loader(tmp_path)
    resumed.load_state_dict(state)
    error = FileNotFoundError if change == "vanish" else ValueError
    read: list[torch.Tensor] = []
    batches = iter(resumed)
    with pytest.raises(error, match=files[2].name):  # noqa: PT012
        while True:
            read.append(next(batches))
    assert not any(bool(((b.long() >= 130) & (b.long() < 170)).any()) for b in read)


def test_resume_unchanged_shards_continues(tmp_path: Path) -> None:
    """Control: resuming over unchanged shards reads the rest of the epoch exactly."""
    _shards(tmp_path)
    full = [b.clone() for b in _loader(tmp_path)]
    state = _saved_state(tmp_path)
    resumed = _loader(tmp_path, verify=True)
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert len(rest) == len(full) - 3
    assert all(torch.equal(a, b) for a, b in zip(rest, full[3:], strict=True))


# --------------------------------------------------------------------------------------
# 3. mixing.md: resuming with other phases under allow_config_change=True
# --------------------------------------------------------------------------------------


class Ids(Dataset[torch.Tensor]):
    def __init__(self, base: int, n: int) -> None:
        self.base, self.n = base, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor([float(self.base + int(index))])


class Recorder(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.seen: dict[int, list[int]] = {}

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        self.seen[self.global_step] = [int(v) for v in batch.view(-1).tolist()]
        loss: torch.Tensor = self.layer(batch * 1e-3).pow(2).mean()
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


N = 4  # the checkpoint's step
ONLY_B = {"a": 0.0, "b": 1.0}


def _mixture(**kwargs: Any) -> ResumableDataModule:
    return ResumableDataModule(
        {"a": Ids(0, 100), "b": Ids(1000, 100)},
        batch_size=8,
        seed=7,
        weights={"a": 0.5, "b": 0.5},
        samples_per_epoch=160,
        **kwargs,
    )


def _checkpoint_without_phases(tmp_path: Path) -> tuple[Path, Recorder]:
    model = Recorder()
    ckpt = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=N, save_top_k=-1)
    _trainer(N, [ResumableDataCallback(), ckpt]).fit(model, datamodule=_mixture())
    (path,) = tmp_path.glob(f"*step={N}*.ckpt")
    return path, model


def _resume_with(path: Path, phases: list[MixturePhase], **kwargs: Any) -> Recorder:
    model = Recorder()
    _trainer(N + 4, [ResumableDataCallback(phases=phases)]).fit(
        model, datamodule=_mixture(**kwargs), ckpt_path=str(path)
    )
    return model


def _from_b(ids: list[int]) -> bool:
    return all(i >= 1000 for i in ids)


def test_uninterrupted_phase_control() -> None:
    """Control: an uninterrupted run with the phase at step N reads only `b` from N on."""
    model = Recorder()
    phases = [MixturePhase(start_step=N, weights=ONLY_B)]
    _trainer(N + 4, [ResumableDataCallback(phases=phases)]).fit(model, datamodule=_mixture())
    assert sorted(model.seen) == list(range(N + 4))
    assert not _from_b([i for s in range(N) for i in model.seen[s]])
    assert all(_from_b(model.seen[s]) for s in range(N, N + 4))


def test_resume_with_new_phases_refused_by_default(tmp_path: Path) -> None:
    """Resuming with other phases raises a `StateMismatchError` naming the difference."""
    path, _ = _checkpoint_without_phases(tmp_path)
    with pytest.raises(StateMismatchError, match="phases"):
        _resume_with(path, [MixturePhase(start_step=N, weights=ONLY_B)])


def test_new_phase_at_checkpoint_step_governs_from_that_step(tmp_path: Path) -> None:
    """`allow_config_change=True`: a new phase starting at the checkpoint's own step
    governs from that step."""
    path, first = _checkpoint_without_phases(tmp_path)
    model = _resume_with(
        path, [MixturePhase(start_step=N, weights=ONLY_B)], allow_config_change=True
    )
    assert sorted(model.seen) == list(range(N, N + 4))  # no step replayed or skipped
    for step in range(N, N + 4):
        assert _from_b(model.seen[step]), (step, model.seen[step])
    # Nothing read before the resume is read again inside the same pass of `b`.
    before_b = {i for s in range(N) for i in first.seen[s] if i >= 1000}
    after = [i for s in range(N, N + 4) for i in model.seen[s]]
    assert not before_b & set(after)


def test_new_phase_later_than_checkpoint_step(tmp_path: Path) -> None:
    """A new phase starting after the checkpoint's step: the old weights until it."""
    path, _ = _checkpoint_without_phases(tmp_path)
    model = _resume_with(
        path, [MixturePhase(start_step=N + 2, weights=ONLY_B)], allow_config_change=True
    )
    assert sorted(model.seen) == list(range(N, N + 4))
    old = model.seen[N] + model.seen[N + 1]
    assert not _from_b(old)  # 16 samples at 0.5/0.5: some from `a`
    assert _from_b(model.seen[N + 2])
    assert _from_b(model.seen[N + 3])


# Was broken (found by this file, fixed in issue 26). docs/mixing.md:
# with `allow_config_change=True` "the saved schedule
# is kept up to the resume point, the new one applies from there on". The new schedule
# here says b-only from step N-2, so the steps from the resume point N on should read
# only `b`. Observed: the phase is dropped silently (no warning, no error) and the
# resumed run keeps the old 0.5/0.5 weights at every later step (4 of 8 samples from `a`
# in each of steps N..N+3): the new schedule never applies.
def test_new_phase_before_checkpoint_step_applies_from_resume(tmp_path: Path) -> None:
    """A new phase that starts before the checkpoint's step: the saved schedule is kept
    up to the resume point, the new one applies from there on."""
    path, _ = _checkpoint_without_phases(tmp_path)
    model = _resume_with(
        path, [MixturePhase(start_step=N - 2, weights=ONLY_B)], allow_config_change=True
    )
    assert sorted(model.seen) == list(range(N, N + 4))
    assert all(_from_b(model.seen[s]) for s in range(N, N + 4))


ONLY_A = {"a": 1.0, "b": 0.0}


def test_saved_later_phase_replaced_by_new_phase_at_resume_step(tmp_path: Path) -> None:
    """Saved phases [b-only at N+2], resumed with [a-only at N]: the new schedule applies
    from the resume point (a-only from N, the saved phase at N+2 gone)."""
    model = Recorder()
    ckpt = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=N, save_top_k=-1)
    saved = [MixturePhase(start_step=N + 2, weights=ONLY_B)]
    _trainer(N, [ResumableDataCallback(phases=saved), ckpt]).fit(model, datamodule=_mixture())
    (path,) = tmp_path.glob(f"*step={N}*.ckpt")
    resumed = _resume_with(
        path, [MixturePhase(start_step=N, weights=ONLY_A)], allow_config_change=True
    )
    assert sorted(resumed.seen) == list(range(N, N + 4))
    assert all(i < 1000 for s in range(N, N + 4) for i in resumed.seen[s])


def test_state_over_another_shard_set_refused(tmp_path: Path) -> None:
    """State saved over another shard set: `StateMismatchError`."""
    _shards(tmp_path / "one")
    state = _saved_state(tmp_path / "one")
    other = tmp_path / "two"
    write_token_shards(other, [np.arange(200)], seq_len=SEQ, tokens_per_shard=40)
    loader = _loader(other)
    with pytest.raises(StateMismatchError):
        loader.load_state_dict(state)


# Was broken (found by this file, fixed in issue 26). docs/mixing.md:
# with `allow_config_change=True` "the saved schedule is
# kept up to the resume point, the new one applies from there on". Saved schedule:
# b-only from step 2; new schedule: a-only from step 2 (the passed phase's weights
# edited). From the resume point N the new schedule says a-only. Observed: every sample
# of steps N..N+3 comes from `b`: the saved schedule keeps governing past the resume
# point and the edited phase is ignored, silently.
def test_edited_passed_phase_applies_from_resume_point(tmp_path: Path) -> None:
    """Saved [b-only at 2], resumed at N with [a-only at 2]: a-only from N on."""
    model = Recorder()
    ckpt = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=N, save_top_k=-1)
    saved = [MixturePhase(start_step=2, weights=ONLY_B)]
    _trainer(N, [ResumableDataCallback(phases=saved), ckpt]).fit(model, datamodule=_mixture())
    assert all(_from_b(model.seen[s]) for s in (2, 3))
    (path,) = tmp_path.glob(f"*step={N}*.ckpt")
    resumed = _resume_with(
        path, [MixturePhase(start_step=2, weights=ONLY_A)], allow_config_change=True
    )
    assert sorted(resumed.seen) == list(range(N, N + 4))
    assert all(i < 1000 for s in range(N, N + 4) for i in resumed.seen[s])


# Was broken (found by this file, fixed in issue 26). docs/mixing.md:
# "Resuming with other phases ...
# `ResumableDataModule(allow_config_change=True)` accepts it (the saved schedule is kept
# up to the resume point, the new one applies from there on". Saved schedule: b-only
# from N+1 (not reached at the checkpoint, step N); new schedule: a-only from N+2.
# Observed: the resumed fit trains no step at all: its first batch raises
# `ValueError: position=48 must be in [0, 40].` (an internal bound, no hint).
def test_saved_later_phase_replaced_by_another_later_phase(tmp_path: Path) -> None:
    """Saved [b-only at N+1], resumed at N with [a-only at N+2]: accepted; the old
    weights until N+2, a-only from there on."""
    model = Recorder()
    ckpt = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=N, save_top_k=-1)
    saved = [MixturePhase(start_step=N + 1, weights=ONLY_B)]
    _trainer(N, [ResumableDataCallback(phases=saved), ckpt]).fit(model, datamodule=_mixture())
    (path,) = tmp_path.glob(f"*step={N}*.ckpt")
    resumed = _resume_with(
        path, [MixturePhase(start_step=N + 2, weights=ONLY_A)], allow_config_change=True
    )
    assert sorted(resumed.seen) == list(range(N, N + 4))
    assert not _from_b(resumed.seen[N] + resumed.seen[N + 1])
    assert all(i < 1000 for s in (N + 2, N + 3) for i in resumed.seen[s])


@pytest.mark.parametrize("start", [N, N + 2])
def test_new_phase_with_workers(tmp_path: Path, start: int) -> None:
    """The same with `num_workers=2` on resume: workers prefetching across the new
    phase's boundary already read its samples."""
    path, _ = _checkpoint_without_phases(tmp_path)
    model = _resume_with(
        path,
        [MixturePhase(start_step=start, weights=ONLY_B)],
        allow_config_change=True,
        num_workers=2,
    )
    assert sorted(model.seen) == list(range(N, N + 4))
    for step in range(N, N + 4):
        assert _from_b(model.seen[step]) == (step >= start), (step, model.seen[step])


def test_missing_shard_through_worker_process(tmp_path: Path) -> None:
    """`multiprocessing=True` (a worker reads): still `FileNotFoundError` naming it."""
    files = _shards(tmp_path)
    files[1].unlink()
    loader = ShardedDataLoader(
        open_token_shards(tmp_path), batch_size=2, seed=0, multiprocessing=True
    )
    with pytest.raises(FileNotFoundError, match=files[1].name):
        list(loader)


@pytest.mark.parametrize("change", ["vanish", "truncate"])
def test_shard_changed_after_this_process_opened_it(tmp_path: Path, change: str) -> None:
    """`StateMismatchError` naming the shard, from `load_state_dict`, for a shard this
    process has opened (loaded) without `verify=True`."""
    files = _shards(tmp_path)
    readers = open_token_shards(tmp_path)
    first = ShardedDataLoader(
        readers, batch_size=2, seed=0, multiprocessing=False, num_microbatch_prefetches=0
    )
    for i, _ in enumerate(first):
        if i == 6:
            break
    state = first.state_dict()
    if change == "vanish":
        files[0].unlink()
    else:
        files[0].write_bytes(files[0].read_bytes()[:-8])
    resumed = ShardedDataLoader(
        readers, batch_size=2, seed=0, multiprocessing=False, num_microbatch_prefetches=0
    )
    with pytest.raises(StateMismatchError, match=files[0].name):
        resumed.load_state_dict(state)
