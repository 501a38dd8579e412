"""Layer 5: PyTorch Lightning integration (the DataModule and the Callback).

Both names are imported on first use, so that the package's light modules (``steps``,
``plan``: what ``lrd plan`` reads) load without importing Lightning and torch.

Example:
    >>> from lightning_resumable_data.lightning import ResumableDataCallback
    >>> ResumableDataCallback.__name__
    'ResumableDataCallback'
"""

from typing import TYPE_CHECKING

from lightning_resumable_data._lazy import lazy_exports

if TYPE_CHECKING:
    from lightning_resumable_data.lightning.callback import ResumableDataCallback
    from lightning_resumable_data.lightning.datamodule import ResumableDataModule
    from lightning_resumable_data.lightning.spikes import LossSpikeMonitor

__all__ = ["LossSpikeMonitor", "ResumableDataCallback", "ResumableDataModule"]

_LAZY = {
    "LossSpikeMonitor": "spikes",
    "ResumableDataCallback": "callback",
    "ResumableDataModule": "datamodule",
}


__getattr__, __dir__ = lazy_exports(globals(), __name__, _LAZY)
