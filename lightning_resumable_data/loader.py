# size: a DataLoader subclass: torch's 20 arguments and their docs are a third of it
"""The stateful data loader: a small, global, rank-independent position and an O(1) resume.

Built as a subclass of torchdata's ``StatefulDataLoader`` (so it is accepted wherever that
one is, and its per-worker state path stays available as a fallback) that replaces the
state for the samplers of this package by one global position. The loader iterates and
counts; how it saves and restores is its resume strategy's (:mod:`lightning_resumable_data.resume`).
"""

from __future__ import annotations

import itertools
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Sized
from typing import Any, Final

import torch
from torch.utils.data import BatchSampler, Dataset, IterableDataset, Sampler
from torchdata.stateful_dataloader import StatefulDataLoader as _TorchdataLoader
from torchdata.stateful_dataloader.sampler import BatchSampler as _TorchdataBatchSampler
from typing_extensions import TypeVar

from lightning_resumable_data._batching import (
    PositionBatchSampler,
    PositionSampler,
    SkippableSampler,
)
from lightning_resumable_data._direct import direct, direct_batches
from lightning_resumable_data._progress import BatchPosition, CountingIterator, Progress
from lightning_resumable_data._rows import collate_rows
from lightning_resumable_data.randomness import worker_seed
from lightning_resumable_data.resume import (
    Layout,
    PositionResume,
    RestoredPosition,
    ResumeMode,
    ResumeStrategy,
    choose_strategy,
    read_torchdata_state,
)
from lightning_resumable_data.samplers._arguments import check_key_seed
from lightning_resumable_data.samplers.distributed import check_non_negative_int
from lightning_resumable_data.state import StateMismatchError, check_state

__all__ = ["PositionSampler", "RestoredPosition", "SkippableSampler", "StatefulDataLoader"]

T_co = TypeVar("T_co", covariant=True, default=Any)  # bare StatefulDataLoader: of Any


class StatefulDataLoader(_TorchdataLoader[T_co]):
    """A ``DataLoader`` whose position can be saved on any rank and restored in O(1).

    It counts batches as they leave the loader (not as workers fetch them). An iterator
    fixes its position, calls ``sampler.set_epoch`` and starts its workers at its first
    ``next()``, so creating one changes nothing. The loader moves to the next epoch when an
    iterator is exhausted, when :meth:`end_epoch` is called (a trainer that cuts epochs
    short), or when a new pass starts reading while an earlier one has read part of the
    epoch (torch's rule: a new pass is a new epoch). ``len()`` is always a whole epoch in
    the current layout. Its state is the same on every rank, so the copy rank 0 writes into
    a checkpoint restores every rank.

    How it resumes depends on the sampler (of ``sampler=`` or of a ``BatchSampler``):

    * a :class:`PositionSampler` (this package's ``DistributedSampler``): the state holds
      the global samples consumed in the epoch (``batches * batch_size * world_size``);
      the resume is O(1) and exact, and also exact under another world size or batch size
      (the rest of the epoch is strided over the new ranks);
    * a :class:`SkippableSampler` (``set_skip``/``set_epoch``, e.g. the composable samplers or a
      ``batch_sampler=`` that skips batches): the state holds the batches yielded, and the
      resume calls ``set_skip``; the world size must not change;
    * anything else: torchdata's per-rank state, which resumes by replaying the sampler
      (O(position)) and does not survive a change of world size; a one-time warning says
      so. Iterable datasets that implement ``state_dict`` always use this path.

    Worker RNGs: with a position or skip sampler, unless ``generator=`` is given, each
    epoch's workers are seeded from (seed, epoch, rank, worker id), never from the parent's
    RNG state. In torchdata mode the loader is torchdata's: ``torch.manual_seed`` (or
    ``generator=``) drives the shuffle and the workers, and the user's ``set_epoch`` stands.
    Augmentations that must be identical after a resume with another ``num_workers`` or
    world size should use
    ``DistributedSampler(sample_keys=True)`` (see :mod:`lightning_resumable_data.randomness`).

    State keys: ``version``, ``kind``, ``fingerprint`` (``mode``, ``dataset_length``),
    ``epoch``, ``batches_yielded``, ``batch_size``, ``consumed`` (position mode),
    ``num_replicas``, ``sampler`` (the sampler's state at this position); in torchdata mode,
    torchdata's own keys (``_snapshot``, ``_num_yielded``, ...) at the top level instead, so
    torchdata's loader can load the state too. A state saved by torchdata's loader is
    accepted (see :meth:`load_state_dict`).

    Args:
        dataset: The dataset.
        batch_size: Samples per batch on this rank.
        shuffle: Not allowed with a sampler; a plain ``shuffle=True`` makes torch's
            ``RandomSampler`` (torchdata path).
        sampler: Usually :class:`~lightning_resumable_data.DistributedSampler`.
        batch_sampler: A batch sampler; mutually exclusive with ``batch_size``, ``sampler``.
        num_workers: Worker processes.
        collate_fn: Batch collation; by default torch's ``default_collate``, except that a
            batch this package's datasets read with one gather is its tensor, as is.
        pin_memory: Pin batches in page-locked memory.
        drop_last: Drop the last incomplete batch of an epoch.
        timeout: Seconds to wait for a batch from the workers.
        worker_init_fn: Called in each worker after it is seeded.
        multiprocessing_context: Worker start method.
        generator: Overrides the derived worker seeds (torchdata path: also the shuffle).
        prefetch_factor: Batches each worker loads ahead.
        persistent_workers: Keep workers alive between epochs.
        pin_memory_device: Device of the pinned memory.
        in_order: Yield batches in sampler order.
        snapshot_every_n_steps: torchdata's worker-snapshot interval: passed to torchdata in
            torchdata mode; meaningless with a position or skip sampler (no snapshots are
            needed), where it is accepted and set to 0.
        seed: Seed of the worker RNGs; defaults to the sampler's ``seed``, else 0.
        max_epochs: Refuse a state whose epoch is beyond this (the run's last epoch).
        strict_resume: Refuse a state saved with another seed, dataset or sampler
            configuration. With ``False`` such a state only restores the epoch and position
            (with a warning), and the order after it follows the new configuration.

    Example:
        >>> from lightning_resumable_data import DistributedSampler
        >>> sampler = DistributedSampler(range(12), num_replicas=2, rank=0, seed=0)
        >>> loader = StatefulDataLoader(range(12), batch_size=2, sampler=sampler)
        >>> it = iter(loader)
        >>> first = next(it)
        >>> state = loader.state_dict()
        >>> state["epoch"], state["consumed"]
        (0, 4)
        >>> resumed = StatefulDataLoader(range(12), batch_size=2, sampler=DistributedSampler(
        ...     range(12), num_replicas=2, rank=0, seed=0))
        >>> resumed.load_state_dict(state)
        >>> [b.tolist() for b in resumed] == [b.tolist() for b in it]
        True
    """

    KIND: Final = "StatefulDataLoader"

    def __init__(
        self,
        dataset: Dataset[Any] | Iterable[Any],
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Sampler[Any] | Iterable[Any] | None = None,
        batch_sampler: Sampler[list[Any]] | Iterable[list[Any]] | None = None,
        num_workers: int = 0,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], None] | None = None,
        multiprocessing_context: Any = None,
        generator: torch.Generator | None = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
        snapshot_every_n_steps: int | None = 1,
        seed: int | None = None,
        max_epochs: int | None = None,
        strict_resume: bool = True,
    ) -> None:
        if num_workers > 0 and prefetch_factor is not None and prefetch_factor < 1:
            raise ValueError(
                f"prefetch_factor={prefetch_factor} must be >= 1 with num_workers={num_workers} "
                "(batches each worker loads ahead); leave it None for the default 2."
            )
        with warnings.catch_warnings():  # torchdata calls a deprecated torch API on init
            warnings.filterwarnings("ignore", message=".*set_vital.*is deprecated")
            super().__init__(
                dataset,  # type: ignore[arg-type]
                batch_size=batch_size,
                shuffle=shuffle,
                sampler=sampler,
                batch_sampler=batch_sampler,
                num_workers=num_workers,
                collate_fn=collate_rows
                if collate_fn is None and batch_size is not None
                else collate_fn,
                pin_memory=pin_memory,
                drop_last=drop_last,
                timeout=timeout,
                worker_init_fn=worker_init_fn,
                multiprocessing_context=multiprocessing_context,
                generator=generator,
                prefetch_factor=prefetch_factor,
                persistent_workers=persistent_workers,
                pin_memory_device=pin_memory_device,
                in_order=in_order,
                snapshot_every_n_steps=snapshot_every_n_steps,
            )
        self.position_sampler = self._find_sampler()
        self._strategy = self._choose_strategy(strict_resume)
        if self.resume_mode != "torchdata":
            self.snapshot_every_n_steps = 0  # workers need not send torchdata snapshots
        self.max_epochs = (
            None if max_epochs is None else check_non_negative_int("max_epochs", max_epochs)
        )
        if seed is None:  # the sampler's (torch wraps a negative one modulo 2**64)
            self.seed = int(getattr(self.position_sampler, "seed", 0)) % 2**64
        else:
            self.seed = check_key_seed(seed)
        self._user_generator = generator is not None
        self.strict_resume = strict_resume
        self._progress = Progress()
        self._trained: int | None = None  # batches of the epoch the model trained on
        self._trained_source: Callable[[], int | None] | None = None  # a trainer's counter
        # the position the last load_state_dict restored, with the saved layout's step
        self.restored: RestoredPosition | None = None
        self._live: weakref.ref[CountingIterator] | None = None
        # (batches saved, the same position in batches of this layout) after a restore
        # under another batch or world size; a trainer restates its own batch count.
        self.layout_change: tuple[int, int] | None = None
        self._serials = itertools.count()
        self._check_batches_fit()

    # -- the sampler and the resume strategy -----------------------------------------------

    def _find_sampler(self) -> object:
        """The sampler that orders the samples: the batch sampler's, or the batch sampler."""
        if isinstance(self.dataset, IterableDataset):
            return None
        if isinstance(self.batch_sampler, BatchSampler):
            return self.batch_sampler.sampler
        return self.batch_sampler if self.batch_sampler is not None else self.sampler

    def _choose_strategy(self, strict: bool) -> ResumeStrategy:
        custom_batches = self.batch_sampler is not None and not isinstance(
            self.batch_sampler, BatchSampler
        )  # then set_skip counts batches, not samples
        batched = isinstance(self.batch_sampler, BatchSampler)
        layout = Layout(
            self.KIND,
            int(self.batch_sampler.batch_size) if batched else 1,  # type: ignore[union-attr]
            int(getattr(self.position_sampler, "num_replicas", 1)),
            bool(self.drop_last),
        )
        if (
            isinstance(self.position_sampler, PositionSampler)
            and not custom_batches
            and type(self.batch_sampler) is _TorchdataBatchSampler
        ):  # torchdata's BatchSampler keeps a resumable per-index Python loop we never use
            # (the position is the sampler's); ours asks the sampler for whole batches.
            fast = PositionBatchSampler(
                self.batch_sampler.sampler,
                self.batch_sampler.batch_size,
                self.batch_sampler.drop_last,
            )
            object.__setattr__(self, "batch_sampler", fast)  # DataLoader forbids a plain set
        # The fallback's state is torchdata's own. The strategy reaches this loader weakly:
        # a cycle would keep a loader (and its workers) alive until the garbage collector runs.
        me = _Weak(self)
        return choose_strategy(
            self.position_sampler,
            layout,
            strict,
            batch_sampler=self.batch_sampler,
            skips_batches=custom_batches,
            native_state=lambda: _TorchdataLoader.state_dict(me()),
            native_load=lambda state: _TorchdataLoader.load_state_dict(me(), state),
        )

    @property
    def resume_mode(self) -> ResumeMode:
        """How this loader resumes: ``"position"``, ``"skip"`` or ``"torchdata"``."""
        return self._strategy.mode

    def _check_batches_fit(self) -> None:
        if not (isinstance(self.batch_sampler, BatchSampler) and self.batch_sampler.drop_last):
            return
        sampler, size = self.batch_sampler.sampler, self._strategy.layout.batch_size
        share = len(sampler) if isinstance(sampler, Sized) else None
        if share is not None and size > share:
            raise ValueError(
                f"batch_size={size} is larger than this rank's share of the "
                f"epoch ({share} samples) and drop_last=True, so every epoch would be empty. "
                "Use a smaller batch_size, drop_last=False, or fewer ranks."
            )

    # -- iteration -------------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        """The epoch the next (or live) iterator reads."""
        return self._progress.epoch

    @property
    def batches_yielded(self) -> int:
        """Batches of the current epoch that have left the loader."""
        return self._progress.batches_yielded

    def set_epoch(self, epoch: int) -> None:
        """Read ``epoch`` next; its beginning unless a restored position is for ``epoch``."""
        epoch = check_non_negative_int("epoch", epoch)
        if epoch != self._progress.epoch:
            self._detach_live()
            self._progress = Progress(epoch=epoch)

    def end_epoch(self) -> None:
        """End the current epoch where it stands: the next pass reads the next epoch.

        For a trainer that ends epochs before the data runs out (Lightning's
        ``limit_train_batches``): :class:`~lightning_resumable_data.ResumableDataCallback`
        calls it when Lightning ends the epoch, so a checkpoint written at that batch
        already points at the next epoch.
        """
        self._detach_live()
        self._clear_handed()
        self._progress.end_epoch()

    def set_epoch_limit(self, samples: int | None) -> None:
        """End every epoch after ``samples`` global samples (``None``: the sampler's end).

        The trainer's epoch limit in samples (batches per epoch x batch size x world size),
        so that an epoch resumed under another batch or world size ends at the same sample
        as the uninterrupted run. Position mode with the loader's own batching only; other
        loaders ignore it.
        """
        limit = None if samples is None else check_non_negative_int("samples", samples)
        self._strategy.epoch_limit = limit

    def _live_iterator(self) -> CountingIterator | None:
        live = self._live() if self._live is not None else None
        return live if live is not None and not live.finished else None

    def _detach_live(self) -> None:
        live = self._live_iterator()
        if live is not None:
            live.detach()
        self._live = None

    def _clear_handed(self) -> None:
        if self._strategy.handed is not None:
            self._strategy.handed.clear()

    def __iter__(self) -> CountingIterator:  # type: ignore[override]
        """A new pass over the data; it fixes its position at its first ``next()``.

        An iterator created and dropped without reading changes nothing. A pass started while
        an earlier one has yielded batches of an unfinished epoch reads the next epoch.
        """
        length = super().__len__() if self._has_length() else None
        return CountingIterator(self._progress, self._begin, length, next(self._serials))

    def _has_length(self) -> bool:
        try:
            super().__len__()
        except TypeError:
            return False
        return True

    def _begin(self, iterator: CountingIterator) -> Iterator[Any]:
        """Fix the position of ``iterator`` (its first ``next()``) and start reading."""
        reader = self._progress.reader
        if reader is not None and reader != iterator.serial:
            self.end_epoch()  # torch's rule: a new pass after a partial one is a new epoch
        elif self._epoch_done(self._progress):
            self._progress.end_epoch()
        progress = self._progress
        iterator.progress = progress
        progress.reader = iterator.serial
        self._live = weakref.ref(iterator)
        self._clear_handed()  # batches of an abandoned reading will not be trained
        self._strategy.begin(progress, iterator)
        if self._strategy.seeds_workers and not self._user_generator:
            rank = int(getattr(self.position_sampler, "rank", 0))
            seed = worker_seed(self.seed, progress.epoch, rank)
            self.generator = torch.Generator().manual_seed(seed)
        if direct(self):  # 0 workers: read in this process without torch's iterator
            return direct_batches(self)
        return super().__iter__()

    def _epoch_done(self, progress: Progress) -> bool:
        """Whether the position is at the end of its epoch (position mode only)."""
        consumed = self._strategy.consumed(progress, progress.batches_yielded)
        return consumed > 0 and self.ends_epoch(consumed)

    def __len__(self) -> int:
        """Batches in a whole epoch in the current layout (batch size and world size).

        An epoch resumed mid-way, or under another layout, ends earlier: its iterator stops
        when the epoch's samples are used up.
        """
        return super().__len__()

    @property
    def epoch_limit(self) -> int | None:
        """Global samples every epoch ends at (:meth:`set_epoch_limit`); ``None``: no limit."""
        return self._strategy.epoch_limit

    def ends_epoch(self, consumed: int) -> bool:
        """Whether an epoch of this loader has nothing left after ``consumed`` global samples.

        Its samples are used up, or the epoch limit (:meth:`set_epoch_limit`) is reached;
        position mode only (otherwise ``False``).
        """
        return self._strategy.ends_epoch(consumed)

    @property
    def samples_per_step(self) -> int:
        """Global samples consumed by one batch on every rank (batch size x world size)."""
        return self._strategy.layout.step_samples

    # -- what the model trained ------------------------------------------------------------

    def note_trained(self, batches: int) -> None:
        """Tell the loader how many batches of the current epoch the model has trained on.

        A trainer that fetches batches ahead of training (Lightning does for loaders without
        a length) calls this from its step events, with its batch index in the epoch;
        :meth:`state_dict` then describes the position after the trained batches, not after
        the fetched ones. The epoch is the loader's own: a trainer's epoch counter can lag
        it (Lightning's does after a resume from an epoch's last batch).
        """
        self._trained = check_non_negative_int("batches", batches)

    def track_trained(self, source: Callable[[], int | None] | None) -> None:
        """Read the batches trained in the current epoch from ``source`` at every save.

        The trainer's own counter (Lightning's ``batch_progress.current.processed``, through
        :class:`~lightning_resumable_data.ResumableDataCallback`), read when
        :meth:`state_dict` is called: the saved position is the trainer's progress at that
        moment, whichever hook saves and in whatever order. ``source`` returns ``None`` while
        it knows nothing (then :meth:`note_trained`'s count, or the batches yielded, apply);
        ``None`` stops tracking. Loading a state stops it too: the counter of the trainer
        that saved may not describe the restored position.
        """
        self._trained_source = source

    def take_handed(self) -> BatchPosition | None:
        """Where the oldest batch handed out and not yet taken begins (position mode).

        A trainer calls it once per batch it trains (its fetcher may run ahead of training),
        to check that the batch it trains is the one its counters imply. ``None``: no batch
        was handed out since the reading began, or the loader has no position sampler.
        """
        handed = self._strategy.handed
        return handed.popleft() if handed else None

    def trained_position(self) -> tuple[int, int, int]:
        """(epoch, global samples, batches) the model has trained on in the loader's epoch.

        Example:
            >>> from lightning_resumable_data import DistributedSampler
            >>> loader = StatefulDataLoader(range(8), batch_size=2,
            ...     sampler=DistributedSampler(range(8), num_replicas=2, rank=0))
            >>> _ = next(iter(loader))
            >>> loader.trained_position()
            (0, 4, 1)
        """
        progress, batches = self._trained_view()
        return progress.epoch, self._strategy.consumed(progress, batches), batches

    def state_at(self, epoch: int, batches: int) -> dict[str, Any]:
        """The state this loader has after ``batches`` batches of ``epoch`` in its layout.

        Loading it starts the loader there, as if it had read those batches (the callback
        does so where Lightning resumes from a checkpoint without a data position).

        Example:
            >>> from lightning_resumable_data import DistributedSampler
            >>> loader = StatefulDataLoader(range(8), batch_size=2, sampler=DistributedSampler(
            ...     range(8), num_replicas=2, rank=0, shuffle=False))
            >>> loader.load_state_dict(loader.state_at(epoch=1, batches=1))
            >>> loader.epoch, next(iter(loader)).tolist()
            (1, [4, 6])
        """
        if self.resume_mode == "torchdata":
            raise ValueError(
                f"state_at needs a position or skip sampler; this {self.KIND} resumes through "
                "torchdata's per-rank state, which only its own reading produces."
            )
        progress = Progress(epoch=check_non_negative_int("epoch", epoch))
        batches = check_non_negative_int("batches", batches)
        return self._strategy.save(progress, batches, self.fingerprint)

    def _trained_view(self) -> tuple[Progress, int]:
        """The progress and batch count the state describes: trained, else yielded."""
        progress, trained = self._progress, self._trained
        if self._trained_source is not None:
            counted = self._trained_source()
            if counted is not None:
                trained = counted
        if trained is None:
            return progress, progress.batches_yielded
        previous = progress.previous
        if progress.batches_yielded == 0 and previous is not None and trained > 0:
            # The loader has ended the epoch the model is still training (it was fetched
            # ahead to the end), or a new epoch has not read its first batch yet.
            if trained < previous.batches_yielded:
                return previous, trained
            return progress, 0
        return progress, min(trained, progress.batches_yielded)

    # -- state -----------------------------------------------------------------------------

    @property
    def fingerprint(self) -> dict[str, Any]:
        """What the loader's position depends on, besides its sampler's own fingerprint."""
        length = len(self.dataset) if isinstance(self.dataset, Sized) else None
        return {"mode": self.resume_mode, "dataset_length": length}

    def state_dict(self) -> dict[str, Any]:
        """The position after the last batch trained (or yielded), identical on every rank."""
        progress, batches = self._trained_view()
        current = progress is self._progress
        return self._strategy.save(progress, batches, self.fingerprint, current)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a position; the next ``iter()`` continues right after it.

        As with torchdata, the state applies at the next ``iter()``: an iterator that is
        live when it is loaded ends (its next ``next()`` raises ``StopIteration``). An empty
        dict does nothing (torchdata's rule). A state saved by torchdata's own
        ``StatefulDataLoader`` is accepted too: with a position or skip sampler, its batch
        count becomes this loader's position in the epoch the sampler is set to (torchdata
        states hold no epoch: call ``sampler.set_epoch`` or :meth:`set_epoch` first, as the
        torchdata job did); the world size and batch size must be the ones it was saved with.

        Raises:
            StateMismatchError: The state is of another version, kind, mode or dataset, is
                malformed, its epoch is beyond ``max_epochs``, or the sampler refuses its
                part (another seed, dataset size, ...).
        """
        if isinstance(state_dict, dict) and not state_dict:
            return
        torchdata_position = read_torchdata_state(state_dict)
        if torchdata_position is not None:
            self._detach_live()
            self._trained, self._trained_source = None, None
            self.restored = None
            restored = self._strategy.restore_torchdata(
                state_dict, torchdata_position, self._progress.epoch
            )
        else:
            self._check(state_dict)
            self._detach_live()
            self.restored = None
            restored = self._strategy.restore(state_dict)
            self._trained, self._trained_source = None, None
        self._progress = restored.progress
        self.restored = restored.position
        if isinstance(self._strategy, PositionResume):
            self.layout_change = restored.layout_change

    def _check(self, state: dict[str, Any]) -> None:
        """Check a state's version, kind, fingerprint, keys and epoch before restoring it."""
        required: dict[str, type | tuple[type, ...]] = {
            "epoch": int,
            "batches_yielded": int,
            "batch_size": int,
            "num_replicas": int,
            **self._strategy.required,
        }
        fingerprint = self.fingerprint
        saved = state.get("fingerprint") if isinstance(state, dict) else None
        if isinstance(saved, dict) and saved.get("mode") == fingerprint["mode"]:
            if not self.strict_resume:
                fingerprint = saved  # accept another dataset; the mode must still match
            elif getattr(self.sampler, "data_changes", None) is not None:  # it decides
                fingerprint = {**fingerprint, "dataset_length": saved.get("dataset_length")}
        check_state(state, self.KIND, fingerprint, required)
        epoch = state["epoch"]
        if self.max_epochs is not None and epoch > self.max_epochs:
            raise StateMismatchError(
                f"Cannot load this state into {self.KIND}: epoch={epoch} is beyond "
                f"max_epochs={self.max_epochs}. It belongs to a longer run; raise max_epochs "
                "to continue it."
            )


class _Weak:
    """A weak reference to a loader that raises, rather than returns ``None``, once it is gone."""

    def __init__(self, loader: StatefulDataLoader[Any]) -> None:
        self._ref = weakref.ref(loader)

    def __call__(self) -> StatefulDataLoader[Any]:
        loader = self._ref()
        if loader is None:
            raise ReferenceError("the StatefulDataLoader of this resume strategy is gone")
        return loader
