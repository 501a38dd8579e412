"""The stateful data loader: a small, global, rank-independent position and an O(1) resume.

Built as a subclass of torchdata's ``StatefulDataLoader`` (so it is accepted wherever that
one is, and its per-worker state path stays available as a fallback) that replaces the
state for the samplers of this package by one global position.
"""

from __future__ import annotations

import collections
import itertools
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Sized
from typing import Any, Final, Literal, NamedTuple

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
from lightning_resumable_data._progress import BatchPosition, CountingIterator, Progress
from lightning_resumable_data._torchdata_state import read_torchdata_state
from lightning_resumable_data.randomness import worker_seed
from lightning_resumable_data.samplers.distributed import check_non_negative_int
from lightning_resumable_data.state import (
    ResumeWarning,
    StateMismatchError,
    check_state,
    make_state,
)

__all__ = ["PositionSampler", "SkippableSampler", "StatefulDataLoader"]

ResumeMode = Literal["position", "skip", "torchdata"]
_POSITION_KEYS = ("epoch", "batches_yielded", "batch_size", "num_replicas", "torchdata")


class RestoredPosition(NamedTuple):
    """The position a ``load_state_dict`` restored: epoch, consumed, and the saved step.

    ``step_samples`` is the global samples per batch of the layout that saved it (batch
    size x world size), so a trainer can check the position against its own saved batch
    count, whatever the layout now.
    """

    epoch: int
    consumed: int
    step_samples: int


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
    accepted (see ``_load_torchdata_state``).

    Args:
        dataset: The dataset.
        batch_size: Samples per batch on this rank.
        shuffle: Not allowed with a sampler; a plain ``shuffle=True`` makes torch's
            ``RandomSampler`` (torchdata path).
        sampler: Usually :class:`~lightning_resumable_data.DistributedSampler`.
        batch_sampler: A batch sampler; mutually exclusive with ``batch_size``, ``sampler``.
        num_workers: Worker processes.
        collate_fn: Batch collation.
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
                collate_fn=collate_fn,
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
        self.resume_mode: ResumeMode = self._choose_mode()
        if self.resume_mode != "torchdata":
            self.snapshot_every_n_steps = 0  # workers need not send torchdata snapshots
        if self.resume_mode == "position" and type(self.batch_sampler) is _TorchdataBatchSampler:
            # torchdata's BatchSampler keeps a resumable per-index Python loop we never use
            # (the position is the sampler's); ours asks the sampler for whole batches.
            fast = PositionBatchSampler(
                self.batch_sampler.sampler,
                self.batch_sampler.batch_size,
                self.batch_sampler.drop_last,
            )
            object.__setattr__(self, "batch_sampler", fast)  # DataLoader forbids a plain set
        self.max_epochs = (
            None if max_epochs is None else check_non_negative_int("max_epochs", max_epochs)
        )
        if seed is None:  # the sampler's (torch wraps a negative one modulo 2**64)
            self.seed = int(getattr(self.position_sampler, "seed", 0)) % 2**64
        else:
            self.seed = check_non_negative_int("seed", seed)
        self._user_generator = generator is not None
        self.strict_resume = strict_resume
        self._progress = Progress()
        self._trained: int | None = None  # batches of the epoch the model trained on
        self._trained_source: Callable[[], int | None] | None = None  # a trainer's counter
        # where the batches handed out and not yet trained begin (position mode)
        self._handed: collections.deque[BatchPosition] = collections.deque(maxlen=64)
        # the position the last load_state_dict restored, with the saved layout's step
        self.restored: RestoredPosition | None = None
        self._live: weakref.ref[CountingIterator] | None = None
        self._epoch_limit: int | None = None  # global samples an epoch ends at (a trainer's)
        # (batches saved, the same position in batches of this layout) after a restore
        # under another batch or world size; a trainer restates its own batch count.
        self.layout_change: tuple[int, int] | None = None
        self._serials = itertools.count()
        self._warned_replay = False
        self._check_batches_fit()
        self._step_samples = self._batch_samples * self._num_replicas  # fixed from here on

    # -- what kind of resume is possible -------------------------------------------------

    def _find_sampler(self) -> object:
        """The sampler that orders the samples: the batch sampler's, or the batch sampler."""
        if isinstance(self.dataset, IterableDataset):
            return None
        if isinstance(self.batch_sampler, BatchSampler):
            return self.batch_sampler.sampler
        return self.batch_sampler if self.batch_sampler is not None else self.sampler

    def _choose_mode(self) -> ResumeMode:
        if isinstance(self.position_sampler, PositionSampler) and self._unit() == "samples":
            return "position"
        if isinstance(self.position_sampler, SkippableSampler):
            return "skip"
        return "torchdata"

    def _unit(self) -> Literal["samples", "batches"]:
        """What ``set_skip`` counts: samples, unless a custom batch sampler skips batches."""
        custom_batches = self.batch_sampler is not None and not isinstance(
            self.batch_sampler, BatchSampler
        )
        return "batches" if custom_batches else "samples"

    @property
    def _batch_samples(self) -> int:
        if isinstance(self.batch_sampler, BatchSampler):
            return int(self.batch_sampler.batch_size)
        return 1

    @property
    def _num_replicas(self) -> int:
        return int(getattr(self.position_sampler, "num_replicas", 1))

    def _check_batches_fit(self) -> None:
        if not (isinstance(self.batch_sampler, BatchSampler) and self.batch_sampler.drop_last):
            return
        share = (
            len(self.batch_sampler.sampler)
            if isinstance(self.batch_sampler.sampler, Sized)
            else None
        )
        if share is not None and self._batch_samples > share:
            raise ValueError(
                f"batch_size={self._batch_samples} is larger than this rank's share of the "
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
        self._handed.clear()
        self._progress.end_epoch()

    def set_epoch_limit(self, samples: int | None) -> None:
        """End every epoch after ``samples`` global samples (``None``: the sampler's end).

        The trainer's epoch limit in samples (batches per epoch x batch size x world size),
        so that an epoch resumed under another batch or world size ends at the same sample
        as the uninterrupted run. Position mode with the loader's own batching only; other
        loaders ignore it.
        """
        self._epoch_limit = None if samples is None else check_non_negative_int("samples", samples)

    def _live_iterator(self) -> CountingIterator | None:
        live = self._live() if self._live is not None else None
        return live if live is not None and not live.finished else None

    def _detach_live(self) -> None:
        live = self._live_iterator()
        if live is not None:
            live.detach()
        self._live = None

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
        progress, sampler = self._progress, self.position_sampler
        iterator.progress = progress
        progress.reader = iterator.serial
        self._live = weakref.ref(iterator)
        self._handed.clear()  # batches of an abandoned reading will not be trained
        if self.resume_mode == "torchdata":
            # torchdata's behaviour exactly: the user's set_epoch, torch's global RNG (or the
            # user's generator) for the shuffle and the worker seeds.
            return super().__iter__()
        if hasattr(sampler, "lock_epoch"):
            sampler.lock_epoch(progress.epoch)  # a trainer's set_epoch cannot move it now
        elif hasattr(sampler, "set_epoch"):
            sampler.set_epoch(progress.epoch)
        if self.resume_mode == "position":
            assert isinstance(sampler, PositionSampler)
            if progress.resume_at is not None:  # the loader, not the sampler, owns a restore
                sampler.load_state_dict(sampler.state_at(progress.epoch, progress.resume_at))
                progress.resume_at = None
            progress.base_consumed, progress.base_batches = (
                sampler.consumed,
                progress.batches_yielded,
            )
            if isinstance(self.batch_sampler, PositionBatchSampler):
                self.batch_sampler.limit = self._rank_samples_before_limit(
                    sampler, progress.base_consumed
                )
            iterator.handed, iterator.step_samples = self._handed, self.samples_per_step
        elif self.resume_mode == "skip" and hasattr(sampler, "state_dict"):
            # The sampler's state where this iteration begins: a resume loads it and skips
            # the batches yielded since (the sampler's live state runs ahead by the prefetch).
            progress.origin = sampler.state_dict()
        if not self._user_generator:
            rank = int(getattr(sampler, "rank", 0))
            self.generator = torch.Generator().manual_seed(
                worker_seed(self.seed, progress.epoch, rank)
            )
        return super().__iter__()

    def _epoch_done(self, progress: Progress) -> bool:
        """Whether the position is at the end of its epoch (position mode only)."""
        consumed = self._consumed(progress, progress.batches_yielded)
        return consumed > 0 and self.ends_epoch(consumed)

    def _rank_samples_before_limit(self, sampler: PositionSampler, consumed: int) -> int | None:
        """Samples of this rank in ``[consumed, epoch limit)``; ``None`` without a limit."""
        limit = self._epoch_limit
        if limit is None or limit >= consumed + sampler.samples_left(consumed) * self._num_replicas:
            return None
        rank = int(getattr(sampler, "rank", 0))
        return max(0, -(-(limit - consumed - rank) // self._num_replicas))

    def __len__(self) -> int:
        """Batches in a whole epoch in the current layout (batch size and world size).

        An epoch resumed mid-way, or under another layout, ends earlier: its iterator stops
        when the epoch's samples are used up.
        """
        return super().__len__()

    @property
    def epoch_limit(self) -> int | None:
        """Global samples every epoch ends at (:meth:`set_epoch_limit`); ``None``: no limit."""
        return self._epoch_limit

    def ends_epoch(self, consumed: int) -> bool:
        """Whether an epoch of this loader has nothing left after ``consumed`` global samples.

        Its samples are used up, or the epoch limit (:meth:`set_epoch_limit`) is reached;
        position mode only (otherwise ``False``).
        """
        sampler = self.position_sampler
        if self.resume_mode != "position" or not isinstance(sampler, PositionSampler):
            return False
        return self._batches_left(sampler, consumed) == 0

    def _batches_left(self, sampler: PositionSampler, consumed: int) -> int:
        if self._epoch_limit is not None and consumed >= self._epoch_limit:
            return 0
        left = sampler.samples_left(consumed)
        return left // self._batch_samples if self.drop_last else -(-left // self._batch_samples)

    def _consumed(self, progress: Progress, batches: int) -> int:
        """Global samples consumed after ``batches`` batches of ``progress``'s epoch."""
        if progress.resume_at is not None:  # restored, not iterated yet
            return progress.resume_at
        return progress.base_consumed + (batches - progress.base_batches) * self.samples_per_step

    @property
    def samples_per_step(self) -> int:
        """Global samples consumed by one batch on every rank (batch size x world size)."""
        return self._step_samples

    # -- state -----------------------------------------------------------------------------

    @property
    def fingerprint(self) -> dict[str, Any]:
        """What the loader's position depends on, besides its sampler's own fingerprint."""
        length = len(self.dataset) if isinstance(self.dataset, Sized) else None
        return {"mode": self.resume_mode, "dataset_length": length}

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
        return self._handed.popleft() if self._handed else None

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

    def state_dict(self) -> dict[str, Any]:
        """The position after the last batch trained (or yielded), identical on every rank."""
        progress, batches = self._trained_view()
        position: dict[str, Any] = {
            "epoch": progress.epoch,
            "batches_yielded": batches,
            "batch_size": self._batch_samples,
            "num_replicas": self._num_replicas,
        }
        sampler = self.position_sampler
        if self.resume_mode == "position":
            assert isinstance(sampler, PositionSampler)
            # A short last batch counts less than a full one: cap at the epoch's end, known
            # from where this reading began (not from the sampler's live state, which a
            # trainer's own set_epoch may have moved).
            end = progress.base_consumed + sampler.samples_left(progress.base_consumed) * (
                self._num_replicas
            )
            consumed = min(self._consumed(progress, batches), end)
            if self._epoch_limit is not None:
                consumed = min(consumed, max(self._epoch_limit, progress.base_consumed))
            if self._batches_left(sampler, consumed) == 0:  # the epoch is over: say so
                position.update(epoch=progress.epoch + 1, batches_yielded=0)
                consumed = 0
            position["consumed"] = consumed
            position["sampler"] = sampler.state_at(position["epoch"], consumed)
        elif self.resume_mode == "skip":
            origin = progress.origin
            if origin is None and progress is self._progress and hasattr(sampler, "state_dict"):
                origin = sampler.state_dict()  # not iterating: the pending position
            if origin is not None:
                position["sampler"] = origin
        else:  # torchdata's own layout at the top level: code that reads it keeps working
            return {**super().state_dict(), **make_state(self.KIND, self.fingerprint, **position)}
        return make_state(self.KIND, self.fingerprint, **position)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a position; the next ``iter()`` continues right after it.

        As with torchdata, the state applies at the next ``iter()``: an iterator that is
        live when it is loaded ends (its next ``next()`` raises ``StopIteration``). An empty
        dict does nothing (torchdata's rule). A state saved by torchdata's own
        ``StatefulDataLoader`` is accepted too (see :meth:`_load_torchdata_state`).

        Raises:
            StateMismatchError: The state is of another version, kind, mode or dataset, is
                malformed, its epoch is beyond ``max_epochs``, or the sampler refuses its
                part (another seed, dataset size, ...).
        """
        if isinstance(state_dict, dict) and not state_dict:
            return
        if read_torchdata_state(state_dict) is not None:
            self._load_torchdata_state(state_dict)
            return
        required: dict[str, type | tuple[type, ...]] = {
            "epoch": int,
            "batches_yielded": int,
            "batch_size": int,
            "num_replicas": int,
        }
        if self.resume_mode == "position":
            required |= {"consumed": int, "sampler": dict}
        fingerprint = self.fingerprint
        if not self.strict_resume and isinstance(state_dict, dict):
            saved = state_dict.get("fingerprint")
            if isinstance(saved, dict) and saved.get("mode") == fingerprint["mode"]:
                fingerprint = saved  # accept another dataset; the mode must still match
        check_state(state_dict, self.KIND, fingerprint, required)
        epoch = state_dict["epoch"]
        if self.max_epochs is not None and epoch > self.max_epochs:
            raise StateMismatchError(
                f"Cannot load this state into {self.KIND}: epoch={epoch} is beyond "
                f"max_epochs={self.max_epochs}. It belongs to a longer run; raise max_epochs "
                "to continue it."
            )
        self._detach_live()
        self._progress = self._restore(state_dict)
        self._trained, self._trained_source = None, None

    def _load_torchdata_state(self, state: dict[str, Any]) -> None:
        """Continue a job whose checkpoint torchdata's ``StatefulDataLoader`` wrote.

        In torchdata mode the state is handed to torchdata unchanged. With a position or
        skip sampler, its batch count becomes this loader's position in the epoch the
        sampler is set to (torchdata states hold no epoch: call ``sampler.set_epoch`` or
        :meth:`set_epoch` first, as the torchdata job did); the world size and batch size
        must be the ones the state was saved with.
        """
        position = read_torchdata_state(state)
        assert position is not None
        self._detach_live()
        self._trained, self._trained_source = None, None
        self.restored = None
        if self.resume_mode == "torchdata":
            self._progress = Progress(epoch=self._progress.epoch)
            super().load_state_dict(state)
            return
        sampler = self.position_sampler
        epoch = int(getattr(sampler, "epoch", self._progress.epoch))
        ours: dict[str, Any] = {
            "epoch": epoch + 1 if position.finished else epoch,
            "batches_yielded": 0 if position.finished else position.batches,
            "batch_size": self._batch_samples,
            "num_replicas": self._num_replicas,
        }
        if self.resume_mode == "position":
            assert isinstance(sampler, PositionSampler)
            consumed = ours["batches_yielded"] * self.samples_per_step
            consumed = min(consumed, sampler.samples_left(0) * self._num_replicas)
            if consumed and self._batches_left(sampler, consumed) == 0:  # the epoch is over
                ours.update(epoch=ours["epoch"] + 1, batches_yielded=0)
                consumed = 0
            ours["consumed"] = consumed
            ours["sampler"] = sampler.state_at(ours["epoch"], consumed)
        elif isinstance(sampler, SkippableSampler) and hasattr(sampler, "state_dict"):
            sampler.set_epoch(ours["epoch"])
            ours["sampler"] = sampler.state_dict()
        self._progress = self._restore(ours)

    def _restore(self, state: dict[str, Any]) -> Progress:
        sampler = self.position_sampler
        self.restored = None
        progress = Progress(epoch=state["epoch"], batches_yielded=state["batches_yielded"])
        if self.resume_mode == "position":
            assert isinstance(sampler, PositionSampler)
            if (
                state["sampler"].get("consumed") != state["consumed"]
                or state["sampler"].get("epoch") != state["epoch"]
            ):
                raise StateMismatchError(
                    f"Cannot load this state into {self.KIND}: its position (epoch "
                    f"{state['epoch']}, consumed {state['consumed']}) and its sampler's "
                    f"(epoch {state['sampler'].get('epoch')!r}, consumed "
                    f"{state['sampler'].get('consumed')!r}) disagree. The state is corrupted."
                )
            try:
                sampler.load_state_dict(state["sampler"])  # validates its fingerprint first
            except StateMismatchError as error:
                if self.strict_resume:
                    raise
                warnings.warn(
                    f"Resuming under a changed configuration (strict_resume=False): {error} "
                    "Only the epoch and position are restored.",
                    ResumeWarning,
                    stacklevel=3,
                )
            if hasattr(sampler, "lock_epoch"):  # the loader owns the restored epoch: a
                sampler.lock_epoch(state["epoch"])  # trainer's set_epoch cannot discard it
            progress.resume_at = progress.base_consumed = state["consumed"]
            self.restored = RestoredPosition(
                state["epoch"], state["consumed"], state["batch_size"] * state["num_replicas"]
            )
            self.layout_change = None
            if (state["batch_size"], state["num_replicas"]) != (
                self._batch_samples,
                self._num_replicas,
            ):  # the position is global; the batches done are restated in this layout
                progress.batches_yielded = state["consumed"] // self.samples_per_step
                self.layout_change = (state["batches_yielded"], progress.batches_yielded)
            progress.base_batches = progress.batches_yielded
        elif self.resume_mode == "skip":
            assert isinstance(sampler, SkippableSampler)
            if state["num_replicas"] != self._num_replicas:
                raise StateMismatchError(
                    f"Cannot load this state into {self.KIND}: it was saved with num_replicas="
                    f"{state['num_replicas']}, now {self._num_replicas}, and "
                    f"{type(sampler).__name__} cannot change world size mid-epoch. Use "
                    "lightning_resumable_data.DistributedSampler for elastic resume."
                )
            if hasattr(sampler, "load_state_dict"):
                if not isinstance(state.get("sampler"), dict):
                    raise StateMismatchError(
                        f"Cannot load this state into {self.KIND}: it has no 'sampler' state "
                        f"for the stateful {type(sampler).__name__}; it is truncated."
                    )
                sampler.load_state_dict(state["sampler"])
            progress.origin = state.get("sampler")
            sampler.set_epoch(state["epoch"])
            unit = state["batch_size"] if self._unit() == "samples" else 1
            sampler.set_skip(progress.batches_yielded * unit)
        else:
            self._warn_replay()
            ours = ("version", "kind", "fingerprint", *_POSITION_KEYS)
            inner = state.get("torchdata")  # the layout of earlier versions: nested
            if not isinstance(inner, dict):
                inner = {key: value for key, value in state.items() if key not in ours}
            if read_torchdata_state(inner) is None:
                raise StateMismatchError(
                    f"Cannot load this state into {self.KIND}: it resumes through torchdata "
                    "(its sampler has no position) but holds no torchdata iterator state "
                    "('_num_yielded' or '_snapshot'). It is truncated, or was saved by a loader "
                    "with a position sampler: use the same sampler as the run that saved it."
                )
            super().load_state_dict(inner)
        return progress

    def _sampler_name(self) -> str:
        sampler = self.position_sampler
        return "this iterable dataset" if sampler is None else type(sampler).__name__

    def _warn_replay(self) -> None:
        if not self._warned_replay:
            self._warned_replay = True
            warnings.warn(
                f"{self.KIND} resumes {self._sampler_name()} "
                "through torchdata's per-rank state: it replays the sampler up to the saved "
                "position (O(position)) and cannot change world size or num_workers. Use "
                "lightning_resumable_data.DistributedSampler for an O(1), elastic resume.",
                UserWarning,
                stacklevel=3,
            )
