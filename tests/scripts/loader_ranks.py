"""Run under ``torchrun``: a loader's state saved by 2 ranks, resumed on another world size.

``save OUT STATE K``: every rank reads K batches; all ranks' states are gathered (they must
be identical) and rank 0 writes its state to STATE. ``resume OUT STATE``: every rank loads
STATE and reads the rest of the epoch. Rank 0 writes what every rank read to OUT.
"""

from __future__ import annotations

import itertools
import json
import sys
from typing import Any

import torch
import torch.distributed as dist

from lightning_resumable_data import DistributedSampler, StatefulDataLoader

N, BATCH = 90, 4


class Ids(torch.utils.data.Dataset[int]):
    def __len__(self) -> int:
        return N

    def __getitem__(self, index: int) -> int:
        return int(index)


def main(mode: str, out_path: str, state_path: str, k: int = 0) -> None:
    dist.init_process_group("gloo")
    loader = StatefulDataLoader(
        Ids(), batch_size=BATCH, sampler=DistributedSampler(Ids(), seed=7), num_workers=1
    )
    report: dict[str, Any] = {"rank": dist.get_rank()}
    if mode == "save":
        batches = list(itertools.islice(iter(loader), k))
        states: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(states, loader.state_dict())
        report["states_identical"] = all(s == states[0] for s in states)
        if dist.get_rank() == 0:
            with open(state_path, "w") as f:
                json.dump(states[0], f)
    else:
        with open(state_path) as f:
            loader.load_state_dict(json.load(f))
        batches = list(loader)
    report["ids"] = [i for b in batches for i in b.tolist()]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, report)
    if dist.get_rank() == 0:
        with open(out_path, "w") as f:
            json.dump(gathered, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], *(int(a) for a in sys.argv[4:]))
