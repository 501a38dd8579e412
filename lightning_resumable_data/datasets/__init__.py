"""Layer 3: datasets that combine or stream other datasets."""

from lightning_resumable_data.datasets.mixture import MixtureDataset

__all__ = ["MixtureDataset"]
