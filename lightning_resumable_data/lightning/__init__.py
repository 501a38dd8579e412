"""Layer 5: PyTorch Lightning integration (the DataModule and the Callback)."""

from lightning_resumable_data.lightning.callback import ResumableDataCallback
from lightning_resumable_data.lightning.datamodule import ResumableDataModule

__all__ = ["ResumableDataCallback", "ResumableDataModule"]
