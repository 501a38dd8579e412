"""Layer 2: samplers that hold configuration and position and call the index math.

Every sampler speaks one contract: ``set_epoch``, ``set_skip``, ``state_dict`` and
``load_state_dict`` (see :mod:`lightning_resumable_data.state`).
"""

from lightning_resumable_data.samplers.distributed import DistributedSampler

__all__ = ["DistributedSampler"]
