"""The plan of a fault lineage: which fault kills the next run, and where.

A *lineage* is one training run stretched over many processes: run ``i`` resumes from the
newest checkpoint that run ``i - 1`` completed and is killed by fault ``i``; the last run
finishes. Faults are drawn from a seeded ``random.Random``; every fault family comes once
before any repeats, and a fault that would need more steps than the lineage has left is
replaced by a cheaper one, so a lineage of ``n`` faults always fits in its ``max_steps``.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass

INJECTED = "injected fault"  # what train.py's worker_raise fault raises (train.INJECTED)
FAMILIES = (
    "step",
    "checkpoint",
    "validation",
    "epoch_boundary",
    "phase_boundary",
    "prefetch",
    "worker_raise",
    "worker_kill",
)
WORKER_FETCHES = (13, 28)  # a worker fault fires at the n-th sample its first worker loads
WORKER_PROGRESS = 16  # steps a worker fault may take to fire, at most


def avoid_known_bugs() -> bool:
    """Steer around known package bugs: off (no known bug is open); kept for the next one.

    ``LRD_FAULT_AVOID_EPOCH_ENDS=1`` brings back the detour this was written for: a run
    resumed from a checkpoint written on the last batch of an epoch is not resumed from a
    later epoch end (the epoch-replay bug, fixed by ``DistributedSampler.lock_epoch``).
    """
    return os.environ.get("LRD_FAULT_AVOID_EPOCH_ENDS", "") not in ("", "0")


def soak() -> bool:
    return os.environ.get("LRD_SOAK", "") not in ("", "0")


CI_SEED = 20_261_123  # the campaign `make test` replays: the same kills and inputs each run


def campaign_seed() -> int:
    """``LRD_FAULT_SEED`` (``random``: a fresh seed), else a fresh one in soak mode, else
    :data:`CI_SEED`; the summary prints it. ``make test`` is reproducible; exploring new
    seeds is the soak's job (``make soak``)."""
    value = os.environ.get("LRD_FAULT_SEED", "random" if soak() else "")
    if value == "random":
        return random.SystemRandom().randrange(2**32)
    return int(value) if value else CI_SEED


def lineage_faults() -> int:
    """Faults in the main lineage: 21 in CI, ``LRD_SOAK_FAULTS`` (default 200) in soak mode."""
    return int(os.environ.get("LRD_SOAK_FAULTS", "200")) if soak() else 21


@dataclass(frozen=True)
class Lineage:
    """The training configuration every run of a lineage shares (2 ranks, a mixture)."""

    max_steps: int
    phases: tuple[int, ...]
    val_every: int = 5
    steps_per_epoch: int = 12  # 96 samples per epoch / (batch 4 * 2 ranks)

    @classmethod
    def for_faults(cls, faults: int) -> Lineage:
        max_steps = 5 * faults + 24
        starts = {7, 24, *range(7, max_steps, 11)}  # 24: a phase on an epoch boundary
        return cls(max_steps, tuple(sorted(s for s in starts if s < max_steps - 1)))

    def argv(self) -> list[str]:
        return [
            "--data",
            "mixture",
            "--max-steps",
            str(self.max_steps),
            "--phases",
            ",".join(map(str, self.phases)),
            "--val-every",
            str(self.val_every),
        ]


@dataclass(frozen=True)
class Planned:
    """One fault: the family it counts under, the ``--fault`` spec, how the run must end."""

    family: str
    spec: str
    workers: int
    expect_step: int | None  # the checkpoint the next run must resume from, if determined
    error: tuple[str, ...] = ()  # the run must fail (not be killed), its log match these

    @property
    def argv(self) -> list[str]:
        return ["--fault", self.spec, "--workers", str(self.workers)]


def plan_family(rng: random.Random, family: str, s: int, lineage: Lineage) -> Planned | None:
    """A fault of ``family`` for a run resuming at step ``s``; ``None`` if it cannot fire."""
    end, every, epoch = lineage.max_steps, lineage.val_every, lineage.steps_per_epoch
    workers = 2 if rng.random() < 0.3 else 0
    if family == "step":
        k = s + rng.randint(1, 3)
        return Planned(family, f"step:{k}:{rng.randint(0, 1)}", workers, k) if k < end else None
    if family == "checkpoint":  # step=k.ckpt is left truncated: resume from step=(k-1)
        k = s + rng.randint(2, 4)
        fraction = rng.choice((0.0, 0.05, 0.5, 0.95))
        return Planned(family, f"checkpoint:{k}:{fraction}", workers, k - 1) if k < end else None
    if family == "validation":
        k = (s // every + 1) * every
        return Planned(family, f"validation:{k}", workers, k) if k < end else None
    if family == "epoch_boundary":
        current = s // epoch  # the epoch a run resumed at step s trains next
        k = (current + 1) * epoch
        if k >= end:
            return None
        if rng.random() < 0.5:
            return Planned(family, f"epoch_end:{current}", workers, k)
        return Planned(family, f"epoch_start:{current + 1}", workers, k)
    if family == "phase_boundary":
        future = [p for p in lineage.phases if p > s]
        if not future or future[0] >= end:
            return None
        k = future[0] - 1 if future[0] - 1 > s and rng.random() < 0.3 else future[0]
        return Planned(family, f"phase:{k}", workers, k)
    if family == "prefetch":
        if rng.random() < 0.5:  # right after the next epoch's iterator is created
            k = (s // epoch + 1) * epoch
            return Planned(family, f"prefetch_iter:{k}", 2, k) if k < end else None
        if s + WORKER_PROGRESS >= end:
            return None
        n, rank = rng.randint(*WORKER_FETCHES), rng.randint(0, 1)
        return Planned(family, f"prefetch_worker:{n}:{rank}", 2, None)
    if family in ("worker_raise", "worker_kill"):
        if s + WORKER_PROGRESS >= end:
            return None
        n, rank = rng.randint(*WORKER_FETCHES), rng.randint(0, 1)
        error = (
            ("DataLoader worker", INJECTED)
            if family == "worker_raise"
            # torch's message; or, when the worker dies while the trainer receives a batch
            # from it (file-descriptor sharing), the connection error that torch lets through
            else (r"DataLoader worker .*(killed by signal|exited unexpectedly)|ConnectionReset",)
        )
        return Planned(family, f"{family}:{n}:{rank}", 2, None, error)
    raise ValueError(f"unknown fault family {family!r}")


def progress(planned: Planned, s: int) -> int:
    """Steps the lineage is expected to advance by this fault.

    A worker fault fires at the ``n``-th sample its rank's first worker loads: that worker
    loads every other batch of 4 samples, so about ``n / 2`` steps are read by then.
    """
    if planned.expect_step is not None:
        return planned.expect_step - s
    return int(planned.spec.split(":")[1]) // 2


class Planner:
    """Draws the faults of one lineage."""

    def __init__(self, seed: int, lineage: Lineage, faults: int) -> None:
        self.rng = random.Random(seed)
        self.lineage = lineage
        self.left = faults
        self._first = list(FAMILIES)
        self.rng.shuffle(self._first)

    def avoided(self, s: int) -> Callable[[int], bool]:
        """Resume steps to stay off for a run that resumes at step ``s`` (a known bug)."""
        epoch = self.lineage.steps_per_epoch
        if avoid_known_bugs() and s > 0 and s % epoch == 0:
            return lambda step: step > s and step % epoch == 0
        return lambda step: False

    def next(self, s: int) -> Planned:
        """The fault for a run that resumes at step ``s``."""
        rng, lineage, avoided = self.rng, self.lineage, self.avoided(s)
        budget = max(3, 2 * (lineage.max_steps - 4 - s) // max(self.left, 1))
        self.left -= 1
        # Families not drawn yet first (each comes once), then any.
        candidates = [*self._first, rng.choice(FAMILIES), *rng.sample(FAMILIES, len(FAMILIES))]
        for family in candidates:
            planned = plan_family(rng, family, s, lineage)
            if planned is None or progress(planned, s) > budget:
                continue
            if planned.expect_step is None or not avoided(planned.expect_step):
                if family in self._first:
                    self._first.remove(family)
                return planned
        if s + 1 >= lineage.max_steps:
            raise RuntimeError(f"the lineage ran out of steps at step {s}")
        return Planned("step", f"step:{s + 1}:0", 0, s + 1)
