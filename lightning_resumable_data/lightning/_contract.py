"""What the callback reads and sets on a ``ResumableDataModule``, without importing it.

The DataModule installs the callback, so the callback cannot import the DataModule.
:class:`PhasedDataModule` names what the callback needs of it; ``ResumableDataModule``
registers itself as one, so ``isinstance`` holds for it and its subclasses and for nothing
else: a user's DataModule with attributes of the same names is not mistaken for one.

Example:
    >>> import lightning.pytorch as pl
    >>> isinstance(pl.LightningDataModule(), PhasedDataModule)
    False
"""

from __future__ import annotations

from abc import ABC

from lightning_resumable_data.samplers.schedule import MixturePhase

__all__ = ["PhasedDataModule", "checkpoint_key"]


class PhasedDataModule(ABC):
    """A ``ResumableDataModule``, as the callback sees it (registered, never subclassed).

    Attributes:
        phases: The mixture phases; the callback sets its own at ``setup``.
        seed: Seed of the data order (the training seed's default).
        allow_config_change: Whether a resume may change the data configuration.
    """

    phases: tuple[MixturePhase, ...]
    seed: int
    allow_config_change: bool


def checkpoint_key(datamodule: object) -> str:
    """The key of a DataModule's state in a Lightning checkpoint (its class's qualname).

    Example:
        >>> class MyData: ...
        >>> checkpoint_key(MyData())
        'MyData'
    """
    return type(datamodule).__qualname__
