"""Which data each optimizer step trained: a run-length record of the batches, kept in the state.

At the start of every training batch the callback notes the optimizer step it belongs to
(``trainer.global_step``) and where its data begins: the epoch and the global samples of
the epoch consumed before it, with the layout (world size, per-rank batch size,
``accumulate_grad_batches``). Batches that continue the pattern of the one before (same
epoch and layout, the next global position, ``accumulate`` batches a step) only extend a
run; a new epoch, a resume under another layout or a short step at an epoch's end starts
one. So the record holds a few runs per epoch and resume, never one entry per step, and it
is exact by construction: it is what the loader reported, not what arithmetic expects.

:meth:`DataHistory.step_batches` answers, for any step the record covers, where each of its
batches begins; :mod:`~lightning_resumable_data.lightning.trace` turns that into the sample
indices each rank trained.

Example:
    >>> history = DataHistory()
    >>> for batch in range(5):  # 2 ranks x 4 samples, accumulating 2: steps 0, 0, 1, 1, 2
    ...     history.observe(batch // 2, 0, batch * 8, world=2, batch_size=4, accumulate=2)
    >>> history.runs
    [[0, 0, 0, 2, 4, 2, 5, 0]]
    >>> history.step_batches(2)
    [StepBatch(epoch=0, consumed=32, world=2, batch_size=4, limit=None)]
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["DataHistory", "StepBatch"]

_FIELDS: Final = (
    "step", "epoch", "consumed", "world", "batch_size", "accumulate", "batches", "limit"
)  # fmt: skip
_STEP, _EPOCH, _CONSUMED, _WORLD, _BATCH, _ACC, _COUNT, _LIMIT = range(8)


@dataclass(frozen=True, slots=True)
class StepBatch:
    """One batch of an optimizer step: where its data begins, and the layout that read it.

    Attributes:
        epoch: The data epoch.
        consumed: Global samples of the epoch consumed before the batch (its first position).
        world: Data-parallel ranks.
        batch_size: Samples per batch on each rank.
        limit: Global samples the trainer ended the epoch at (``limit_train_batches``), or
            ``None``.
    """

    epoch: int
    consumed: int
    world: int
    batch_size: int
    limit: int | None = None


class DataHistory:
    """The batches a run trained, as runs of batches that follow one pattern.

    A run is ``[step, epoch, consumed, world, batch_size, accumulate, batches, limit]``: its
    batch ``m`` begins at ``consumed + m * world * batch_size`` of ``epoch`` and belongs to
    optimizer step ``step + m // accumulate``; ``limit`` is the epoch's end in global samples
    set by ``limit_train_batches`` (0: none).
    """

    def __init__(
        self, runs: Sequence[Sequence[int]] = (), changes: Sequence[Sequence[float]] = ()
    ) -> None:
        self.runs: list[list[int]] = []
        self.changes: list[list[float]] = []  # online weight changes: epoch, position, t, w...
        self.steps_done: int | None = None  # optimizer steps finished when it was saved
        self.skips: dict[int, list[tuple[int, int]]] = {}  # epoch -> base ranges cut
        self.skipped_steps: list[list[int]] = []  # the step ranges cut, as requested
        self.quarantine: list[tuple[int, int, tuple[int, ...]]] = []  # epoch, position, indices
        self.load(runs, changes)

    def load(
        self, runs: Sequence[Sequence[int]] = (), changes: Sequence[Sequence[float]] = ()
    ) -> None:
        """Replace the record in place (the online mixer holds this object)."""
        self.steps_done = None
        self.runs = [[int(v) for v in run] for run in runs]
        self.changes = [[float(v) for v in change] for change in changes]
        self.skips, self.skipped_steps, self.quarantine = {}, [], []

    def note_skips(self, epoch: int, ranges: Sequence[tuple[int, int]]) -> None:
        """Note ``epoch``'s cut ranges (base positions: the sampler's ``skips``)."""
        self.skips[int(epoch)] = [(int(a), int(b)) for a, b in ranges]

    def note_change(
        self, epoch: int, position: int, weights: Sequence[float], temperature: float
    ) -> None:
        """Note an online weight change: the saved schedule keeps only the current epoch's.

        Declared changes (phases) stay in the sampler's schedule; online ones of earlier
        epochs are compacted away there, so the record keeps them to rebuild a past epoch.
        """
        self.changes.append([epoch, position, float(temperature), *map(float, weights)])

    def observe(
        self,
        step: int,
        epoch: int,
        consumed: int,
        *,
        world: int,
        batch_size: int,
        accumulate: int,
        limit: int | None = None,
    ) -> None:
        """Note a batch about to be trained: O(1), no allocation when it extends a run."""
        limit = limit or 0
        if self.runs:
            last = self.runs[-1]
            count = last[_COUNT]
            if (
                epoch == last[_EPOCH]
                and limit == last[_LIMIT]
                and world == last[_WORLD]
                and batch_size == last[_BATCH]
                and accumulate == last[_ACC]
                and consumed == last[_CONSUMED] + count * world * batch_size
                and step == last[_STEP] + count // accumulate
            ):
                last[_COUNT] = count + 1
                return
            if step < last[_STEP] + (count - 1) // last[_ACC]:
                self._forget_from(step)  # a fit restarted earlier (e.g. from an older state)
        self.runs.append([step, epoch, consumed, world, batch_size, accumulate, 1, limit])

    def _forget_from(self, step: int) -> None:
        """Drop what the record holds of ``step`` and later (they are trained again)."""
        kept: list[list[int]] = []
        for run in self.runs:
            if run[_STEP] >= step:
                break
            keep = (step - run[_STEP]) * run[_ACC]  # the batches of the steps before
            kept.append([*run[:_COUNT], min(run[_COUNT], keep), run[_LIMIT]])
        self.runs = kept

    @property
    def first_step(self) -> int | None:
        """The first step the record covers (a resume of an older checkpoint starts it late)."""
        return self.runs[0][_STEP] if self.runs else None

    @property
    def last_step(self) -> int | None:
        """The last step the record covers, or ``None`` if it is empty."""
        if not self.runs:
            return None
        last = self.runs[-1]
        return last[_STEP] + (last[_COUNT] - 1) // last[_ACC]

    @property
    def finished_steps(self) -> tuple[int, int] | None:
        """The first and last step recorded and finished when saved; ``None``: no such step.

        A step begun but not finished (``steps_done``: a checkpoint written between the
        batches of an accumulated step) is left out.
        """
        first, last = self.first_step, self.last_step
        if first is None or last is None:
            return None
        if self.steps_done is not None:
            last = min(last, self.steps_done - 1)
        return (first, last) if last >= first else None

    def step_batches(self, step: int) -> list[StepBatch]:
        """The batches of optimizer ``step``, in training order (``[]`` if not recorded)."""
        keys = [run[_STEP] for run in self.runs]
        found: list[StepBatch] = []
        for run in self.runs[: bisect.bisect_right(keys, step)]:
            first = (step - run[_STEP]) * run[_ACC]
            for m in range(first, min(first + run[_ACC], run[_COUNT])):
                consumed = run[_CONSUMED] + m * run[_WORLD] * run[_BATCH]
                limit = run[_LIMIT] or None
                found.append(StepBatch(run[_EPOCH], consumed, run[_WORLD], run[_BATCH], limit))
        return found

    @property
    def epochs(self) -> list[int]:
        """The data epochs the record has batches of, in order."""
        return sorted({run[_EPOCH] for run in self.runs})

    def batches_at(self, epoch: int, position: int) -> list[tuple[int, StepBatch]]:
        """The recorded batches of ``epoch`` whose positions hold ``position``, with steps.

        Example:
            >>> DataHistory([[3, 0, 8, 2, 2, 1, 4, 0]]).batches_at(0, 13)
            [(4, StepBatch(epoch=0, consumed=12, world=2, batch_size=2, limit=None))]
        """
        found = []
        for run in self.runs:
            width = run[_WORLD] * run[_BATCH]
            m = (position - run[_CONSUMED]) // width
            if run[_EPOCH] == epoch and 0 <= m < run[_COUNT]:
                batch = StepBatch(
                    epoch, run[_CONSUMED] + m * width, run[_WORLD], run[_BATCH], run[_LIMIT] or None
                )
                found.append((run[_STEP] + m // run[_ACC], batch))
        return found

    def state_dict(self, steps_done: int | None = None) -> dict[str, Any]:
        """The record, as plain lists (saved in the callback's checkpoint entry).

        ``steps_done``: the trainer's ``global_step`` when it is saved. A checkpoint written
        between the batches of an accumulated step has that step's first batches recorded
        but not the step finished; a trace refuses it.
        """
        return {
            "fields": list(_FIELDS),
            "runs": [list(run) for run in self.runs],
            "changes": [list(change) for change in self.changes],
            "steps_done": steps_done,
            "skips": [[e, a, b] for e in sorted(self.skips) for a, b in self.skips[e]],
            "skipped_steps": [list(steps) for steps in self.skipped_steps],
            "quarantine": [[e, p, list(indices)] for e, p, indices in self.quarantine],
        }

    @classmethod
    def from_state(cls, state: object) -> DataHistory:
        """The record saved by :meth:`state_dict` (see :meth:`load_state`)."""
        history = cls()
        history.load_state(state)
        return history

    def load_state(self, state: object) -> None:
        """Load a record saved by :meth:`state_dict`; ``None`` (an older checkpoint): empty.

        Raises:
            ValueError: A state that is not one this class wrote.
        """
        if state is None:
            self.load()
            return
        if (
            not isinstance(state, Mapping)
            or list(state.get("fields", ())) != list(_FIELDS)
            or not isinstance(state.get("runs"), list)
            or not all(
                isinstance(r, (list, tuple)) and len(r) == len(_FIELDS) for r in state["runs"]
            )
        ):
            raise ValueError(
                f"the data history of this checkpoint is malformed: expected {{'fields': "
                f"{list(_FIELDS)}, 'runs': [[...], ...]}}, got {state!r:.200}."
            )
        self.load(state["runs"], state.get("changes") or ())
        done = state.get("steps_done")
        self.steps_done = int(done) if isinstance(done, int) else None
        for epoch, start, stop in state.get("skips") or ():
            self.skips.setdefault(int(epoch), []).append((int(start), int(stop)))
        self.skipped_steps = [[int(a), int(b)] for a, b in state.get("skipped_steps") or ()]
        self.quarantine = [
            (int(e), int(p), tuple(int(i) for i in indices))
            for e, p, indices in state.get("quarantine") or ()
        ]

    @property
    def quarantined(self) -> set[int]:
        """Every dataset index the run has quarantined."""
        return {i for _, _, indices in self.quarantine for i in indices}
