"""Online mixing: mixture weights decided during training, the same on every rank, replayed.

A *policy* ``(trainer, module, stats) -> weights | None`` runs every ``n`` optimizer steps on
every rank (so it may call collectives); :meth:`OnlineMixer.set_weights` queues a request
from any hook. At a sync point, rank 0's decision is broadcast through
``trainer.strategy.broadcast`` (what other ranks decided is ignored), checked on every rank
(so a bad value raises the same error everywhere and nothing is applied), and placed at the
first optimizer step none of whose samples any rank has handed to its loader yet: the
trained position plus the loader's lookahead (``num_workers * prefetch_factor`` batches),
the largest over the ranks (one ``reduce``), rounded up to a step boundary. The change is an
``"online"`` entry of the sampler's schedule, saved with the loader state, so a resume (on
any world size or batch size) replays it from the state and never asks the policy again.
What the policy reads of the logged values (the last one per source, ``stats.metrics``) is
saved too, so a resumed run's policy sees what the uninterrupted run's would have.

Example:
    >>> def policy(trainer, module, stats):
    ...     return softmax_weights(stats.metrics.get("loss", {}), temperature=2.0) or None
    >>> softmax_weights({"web": 1.0, "code": 1.0}, temperature=1.0)
    {'web': 0.5, 'code': 0.5}
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Mapping
from typing import Any

import lightning.pytorch as pl
import torch

from lightning_resumable_data.lightning._policy import (
    MixingStats,
    Policy,
    log_source_values,
    plain_decision,
    softmax_weights,
)
from lightning_resumable_data.lightning.history import DataHistory
from lightning_resumable_data.loader import StatefulDataLoader
from lightning_resumable_data.samplers.mixture import MixtureSampler

__all__ = ["MixingStats", "OnlineMixer", "Policy", "log_source_values", "softmax_weights"]


def _checked_memory(state: object) -> dict[str, dict[str, float]]:
    """A saved memory as ``{name: {source: float}}``, or a ``TypeError`` naming the bad part."""

    def refuse(problem: str) -> TypeError:
        return TypeError(
            f"Cannot resume: the checkpoint's ResumableDataCallback state has {problem}. "
            "source_metrics is {metric name: {source: float}}, the last value per source of "
            "each metric the mixing policy reads (stats.metrics); this one was edited or "
            "written by other code. Restore it, or delete the 'source_metrics' key to resume "
            "without it (the policy then sees only values logged after the resume)."
        )

    def shown(value: object) -> str:
        return f"{reprlib.repr(value)} ({type(value).__name__})"

    if not isinstance(state, Mapping):
        raise refuse(f"source_metrics = {shown(state)}, not a dict")
    memory: dict[str, dict[str, float]] = {}
    for name, values in state.items():
        if not isinstance(name, str):
            raise refuse(f"the key {shown(name)} in source_metrics, not a metric name (str)")
        if not isinstance(values, Mapping):
            raise refuse(f"source_metrics[{name!r}] = {shown(values)}, not a dict")
        kept: dict[str, float] = {}
        for source, value in values.items():
            if not isinstance(source, str):
                raise refuse(
                    f"the key {shown(source)} in source_metrics[{name!r}], not a source name (str)"
                )
            if isinstance(value, bool) or not isinstance(value, float | int):
                raise refuse(f"source_metrics[{name!r}][{source!r}] = {shown(value)}, not a float")
            kept[source] = float(value)
        memory[name] = kept
    return memory


class OnlineMixer:
    """The sync points of online mixing; :class:`ResumableDataCallback` owns one.

    Args:
        policy: Called every ``every_n_steps`` optimizer steps on every rank with
            :class:`MixingStats`; returns weights (a mapping naming every source, or one
            number per source) or ``None`` to keep them. Rank 0's return value decides.
        every_n_steps: Period of the sync points, in optimizer steps (default 1 with a
            policy). Without a policy and with several ranks, :meth:`set_weights` needs it.

    Example:
        >>> OnlineMixer(None, every_n_steps=None).every_n_steps is None
        True
    """

    def __init__(
        self, policy: Policy | None, every_n_steps: int | None, history: DataHistory | None = None
    ) -> None:
        if policy is not None and not callable(policy):
            raise TypeError(
                f"policy={policy!r} must be a callable (trainer, module, stats) -> weights or None."
            )
        if every_n_steps is not None and (
            isinstance(every_n_steps, bool)
            or not isinstance(every_n_steps, int)
            or every_n_steps < 1
        ):
            raise ValueError(f"policy_every_n_steps={every_n_steps!r} must be an int >= 1.")
        self.policy, self.history = policy, history  # the history notes each change
        self.every_n_steps = every_n_steps or (1 if policy is not None else None)
        self.loader: StatefulDataLoader | None = None  # the training loader while fitting
        self.changes: list[dict[str, Any]] = []  # the changes this process applied
        self._pending: dict[str, Any] | None = None
        self._last_step: int | None = None
        # {name: {source: last value}}: tensors as Lightning holds them, or restored floats
        self._memory: dict[str, dict[str, Any]] = {}

    def attach(self, loader: StatefulDataLoader) -> None:
        """Follow ``loader``; note a weight change its resume made (a ``DataChangePolicy``).

        The history keeps it as an online change, so ``lrd trace`` rebuilds later epochs.
        """
        self.loader = loader
        report = getattr(getattr(loader, "position_sampler", None), "last_reweight", None)
        if report is None or self.history is None:
            return
        epoch, position = report["epoch"], report["position"]
        weights, temperature = report["weights"], report["temperature"]
        change = [float(epoch), float(position), float(temperature), *map(float, weights)]
        if change not in self.history.changes:  # Lightning loads a state twice
            self.history.note_change(epoch, position, weights, temperature)

    def sampler(self) -> MixtureSampler:
        """The mixture sampler of the training loader, or a ``RuntimeError`` saying why not."""
        sampler = getattr(self.loader, "position_sampler", None)
        if not isinstance(sampler, MixtureSampler):
            raise RuntimeError(
                "Online mixing (set_weights or a policy) changes a mixture while it trains: call "
                "it during trainer.fit with a ResumableDataModule of named sources "
                "({'web': ..., 'code': ...}). Before fit, pass weights= to the DataModule or "
                "a MixturePhase to the callback."
            )
        return sampler

    def set_weights(self, weights: object, temperature: float | None = None) -> None:
        """Queue ``weights`` for the next sync point (checked now; rank 0's request wins)."""
        sampler = self.sampler()
        payload = plain_decision(weights, sampler.mixture.names)
        if payload is None or "error" in payload:
            raise TypeError(
                f"set_weights({weights!r}) needs a mapping naming every source "
                f"{list(sampler.mixture.names)} or one number per source."
            )
        sampler._entry(0, 0, payload["weights"], 1.0 if temperature is None else temperature)
        world = int(getattr(sampler, "num_replicas", 1))
        if world > 1 and self.every_n_steps is None:
            raise RuntimeError(
                f"set_weights with {world} ranks is broadcast from rank 0 at sync points; pass "
                "ResumableDataCallback(policy_every_n_steps=N) to have them (every N steps)."
            )
        self._pending = payload | {"temperature": temperature}

    def remember(self, trainer: pl.Trainer) -> None:
        """Keep the last value of every ``"<name>/<source>"`` key of ``trainer.callback_metrics``.

        A resumed fit's ``callback_metrics`` hold only what was logged since the resume; this
        memory (:meth:`state_dict`, in :class:`ResumableDataCallback`'s checkpoint) keeps
        what the uninterrupted run's hold. Called at every training batch end and when a
        checkpoint is written; values stay tensors until read (no device sync). Does nothing
        without a training mixture.

        Example::

            mixer.remember(trainer)  # trainer.callback_metrics: {"loss/web": tensor(2.5), ...}
            mixer.state_dict()  # {"loss": {"web": 2.5}}
        """
        sampler = getattr(self.loader, "position_sampler", None)
        if not isinstance(sampler, MixtureSampler):
            return
        names = sampler.mixture.names
        for key, value in trainer.callback_metrics.items():
            head, _, tail = key.rpartition("/")
            if head and tail in names:  # the tensor Lightning keeps (detached), not copied
                self._memory.setdefault(head, {})[tail] = value

    def state_dict(self) -> dict[str, dict[str, float]]:
        """The remembered values, ``{name: {source: value}}``, as Python floats (exact).

        Example:
            >>> mixer = OnlineMixer(None, every_n_steps=None)
            >>> mixer.load_state_dict({"loss": {"web": 2.5, "code": 1}})
            >>> mixer.state_dict()
            {'loss': {'web': 2.5, 'code': 1.0}}
        """
        return {
            name: {source: float(value) for source, value in values.items()}
            for name, values in self._memory.items()
        }

    def load_state_dict(self, state: object) -> None:
        """Replace the memory with a :meth:`state_dict` (``None``: an empty one).

        Raises:
            TypeError: ``state`` is not ``{name: {source: float}}`` (nothing is changed).
        """
        self._memory = {} if state is None else _checked_memory(state)

    def stats(self, trainer: pl.Trainer) -> MixingStats:
        """The trained position, its weights and counts, and the per-source metrics."""
        sampler, (epoch, position, _) = self.sampler(), self._trained()
        self.remember(trainer)
        names = set(sampler.mixture.names)
        metrics: dict[str, dict[str, float]] = {}
        for name, values in self._memory.items():
            kept = {source: float(v) for source, v in values.items() if source in names}
            if kept:  # a source a config change removed is not reported
                metrics[name] = kept
        return MixingStats(
            step=int(trainer.global_step),
            epoch=epoch,
            position=position,
            weights=sampler.weights_at(epoch, position),
            drawn=sampler.source_counts(position, epoch),
            metrics=metrics,
        )

    def _trained(self) -> tuple[int, int, int]:
        """(epoch, global samples, batches) the model trained on in the loader's epoch."""
        loader = self.loader
        assert loader is not None  # sampler() checked it
        return loader.trained_position()

    def step_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        """At a training batch's end on every rank: run a sync point if one is due."""
        if self.loader is None:
            return
        self.remember(trainer)  # what the policy reads and a checkpoint saves
        step = int(trainer.global_step)
        if step == self._last_step:
            return  # no optimizer step since the last call (accumulating)
        self._last_step = step
        world = int(trainer.world_size)
        sync = self.every_n_steps is not None and step % self.every_n_steps == 0
        if not sync and not (world == 1 and self._pending is not None):
            return
        decision, self._pending = self._pending, None
        if self.policy is not None and sync:
            sampler = self.sampler()
            proposed = self.policy(trainer, module, self.stats(trainer))
            if decision is None:  # set_weights wins over the policy at the same sync point
                decision = plain_decision(proposed, sampler.mixture.names)
        if world > 1:
            decision = trainer.strategy.broadcast(decision, src=0)  # rank 0 decides
        if decision is not None:
            self._apply(trainer, decision)

    def _apply(self, trainer: pl.Trainer, decision: dict[str, Any]) -> None:
        if "error" in decision:
            raise TypeError(decision["error"])
        sampler, weights, temperature = (
            self.sampler(),
            decision["weights"],
            decision.get("temperature"),
        )
        if temperature is None:
            temperature = sampler.schedule[-1]["temperature"]
        entry = sampler._entry(0, 0, weights, temperature)  # the same error on every rank
        epoch, position, delay = self._place(trainer)
        sampler.update_weights(weights, temperature, epoch=epoch, position=position, kind="online")
        if self.history is not None:
            self.history.note_change(epoch, position, entry["weights"], entry["temperature"])
        probs = sampler.weights_at(epoch, position)
        step = int(trainer.global_step)
        self.changes.append(
            {"step": step, "epoch": epoch, "position": position, "delay": delay, "weights": probs}
        )
        if trainer.global_rank == 0:
            for logger in trainer.loggers:
                logger.log_metrics({f"data/weight/{k}": v for k, v in probs.items()}, step=step)

    def _place(self, trainer: pl.Trainer) -> tuple[int, int, int]:
        """(epoch, position, delay in batches) of the first step no rank has handed out."""
        loader, sampler = self.loader, self.sampler()
        assert loader is not None
        epoch, consumed, batches = self._trained()
        handed = sampler.consumed if sampler.epoch == epoch else consumed
        if trainer.world_size > 1:
            mine = torch.tensor(handed, dtype=torch.int64, device=trainer.strategy.root_device)
            handed = int(trainer.strategy.reduce(mine, reduce_op="max"))
        step = loader.samples_per_step
        ahead = max(0, -(-(handed - consumed) // step))  # batches handed out, not trained
        accumulate = max(1, int(trainer.accumulate_grad_batches))
        target = -(-(batches + ahead) // accumulate) * accumulate  # a step's first batch
        total = trainer.num_training_batches
        if math.isfinite(total) and target >= int(total):
            return epoch + 1, 0, target - batches
        return epoch, consumed + (target - batches) * step, target - batches
