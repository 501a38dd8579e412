"""Run under ``torchrun --nproc-per-node 2``: ranks come from the process group.

Each rank reads part of an epoch, rank 0's state is broadcast (as a checkpoint would be),
and both ranks finish the epoch from it. Rank 0 writes what every rank read as JSON.
"""

from __future__ import annotations

import itertools
import json
import sys

import torch.distributed as dist

from lightning_resumable_data import DistributedSampler


def main(out_path: str) -> None:
    dist.init_process_group("gloo")
    n, steps = 101, 20
    sampler = DistributedSampler(range(n), seed=3)  # num_replicas and rank from the group
    sampler.set_epoch(1)
    first = list(itertools.islice(iter(sampler), steps))
    states: list[object] = [sampler.state_dict() if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(states, src=0)
    resumed = DistributedSampler(range(n), seed=3)
    resumed.load_state_dict(states[0])  # type: ignore[arg-type]
    resumed.set_epoch(1)
    rest = list(resumed)
    gathered: list[object] = [None] * dist.get_world_size()
    report = {"rank": sampler.rank, "world": sampler.num_replicas, "first": first, "rest": rest}
    dist.all_gather_object(gathered, report)
    if dist.get_rank() == 0:
        with open(out_path, "w") as f:
            json.dump(gathered, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
