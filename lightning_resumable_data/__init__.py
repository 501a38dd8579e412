"""Deterministic, distributed and exactly resumable data loading for Lightning and Fabric.

Example:
    >>> from lightning_resumable_data import DistributedSampler
    >>> sampler = DistributedSampler(range(8), num_replicas=2, rank=1, shuffle=False)
    >>> list(sampler)
    [1, 3, 5, 7]
"""

from lightning_resumable_data.samplers import DistributedSampler
from lightning_resumable_data.state import (
    STATE_VERSION,
    ResumeWarning,
    StateMismatchError,
)

__version__ = "0.1.0"

__all__ = [
    "STATE_VERSION",
    "DistributedSampler",
    "ResumeWarning",
    "StateMismatchError",
    "__version__",
]
