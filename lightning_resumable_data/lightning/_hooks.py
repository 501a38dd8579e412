"""Dataloader hooks Lightning sees as absent while there is no dataset to load.

Lightning decides whether a ``LightningDataModule`` has validation or test data by whether
its class overrides ``val_dataloader``/``test_dataloader`` (``is_overridden``), and warns
"You passed in a `val_dataloader` but have no `validation_step`" when it does and the model
has no validation step. ``ResumableDataModule`` defines both hooks for every instance, so
without a validation dataset every such fit would warn. :func:`show_hook` shadows the
hook on the instance with :class:`EmptyHook` while its dataset is ``None`` (and no subclass
``setup()`` may still assign it): calling it still returns ``[]``, and Lightning's check
sees the base class's hook, as for a DataModule that never defined it.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl

__all__ = ["EmptyHook", "show_hook"]


class EmptyHook:
    """A stand-in hook: returns ``[]``, and unwraps to ``LightningDataModule``'s own hook.

    Example:
        >>> from lightning.pytorch.utilities.model_helpers import is_overridden
        >>> module = pl.LightningDataModule()
        >>> module.val_dataloader = EmptyHook("val_dataloader")
        >>> module.val_dataloader(), is_overridden("val_dataloader", module)
        ([], False)
    """

    def __init__(self, name: str) -> None:
        self.name = name

    @property
    def __wrapped__(self) -> Any:  # what lightning_utilities' is_overridden compares
        return getattr(pl.LightningDataModule, self.name)

    def __call__(self) -> list[Any]:
        return []

    def __repr__(self) -> str:
        return f"EmptyHook({self.name!r})"


def show_hook(module: pl.LightningDataModule, name: str, shown: bool, owner: type) -> None:
    """Show ``module``'s hook ``name`` to Lightning, or shadow it with :class:`EmptyHook`.

    Only ``owner``'s own hook is ever shadowed (one a subclass overrides is the user's), and
    never in a subclass with its own ``setup()``: that may assign the dataset after Lightning
    has looked for the hook (the LightningCLI pattern).
    """
    module.__dict__.pop(name, None)
    kind = type(module)
    if (
        not shown
        and getattr(kind, name) is getattr(owner, name)
        and kind.setup is pl.LightningDataModule.setup
    ):
        module.__dict__[name] = EmptyHook(name)
