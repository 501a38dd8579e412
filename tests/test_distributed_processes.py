"""Real multi-process runs (gloo on CPU): properties one process cannot prove."""

import json
from pathlib import Path

import pytest
import torch.utils.data
from torchrun import torchrun as run_torchrun

SCRIPTS = Path(__file__).parent / "scripts"


def torchrun(script: str, *args: str, nproc: int = 2) -> None:
    run_torchrun(SCRIPTS / script, *args, nproc=nproc)


@pytest.mark.distributed
def test_two_processes_take_ranks_from_the_group_and_resume(tmp_path: Path) -> None:
    out = tmp_path / "ranks.json"
    torchrun("sampler_ranks.py", str(out))
    reports = json.loads(out.read_text())
    assert [r["rank"] for r in reports] == [0, 1]
    assert {r["world"] for r in reports} == {2}
    for report in reports:  # each rank read exactly torch's shard for its rank
        expected: torch.utils.data.DistributedSampler[int] = torch.utils.data.DistributedSampler(
            range(101),  # type: ignore[arg-type]
            2,
            report["rank"],
            seed=3,
        )
        expected.set_epoch(1)
        assert report["first"] + report["rest"] == list(expected)
    everything = [i for r in reports for i in r["first"] + r["rest"]]
    assert set(everything) == set(range(101))
    assert len(everything) == 102


@pytest.mark.distributed
@pytest.mark.parametrize("new_world", [1, 3])
def test_loader_state_from_two_processes_resumes_on_another_world_size(
    tmp_path: Path, new_world: int
) -> None:
    state = tmp_path / "state.json"
    torchrun("loader_ranks.py", "save", str(tmp_path / "a.json"), str(state), "5", nproc=2)
    saved = json.loads((tmp_path / "a.json").read_text())
    assert all(r["states_identical"] for r in saved)  # rank 0's copy restores everyone
    assert json.loads(state.read_text())["consumed"] == 5 * 4 * 2
    torchrun("loader_ranks.py", "resume", str(tmp_path / "b.json"), str(state), nproc=new_world)
    resumed = json.loads((tmp_path / "b.json").read_text())
    before = [i for r in saved for i in r["ids"]]
    after = [i for r in resumed for i in r["ids"]]
    assert len(before) == len(set(before)) == 40
    assert set(before) | set(after) == set(range(90))  # nothing lost
    # Nothing replayed but the < new_world wrap-around pads that even out the ranks.
    padding = len(after) - (90 - 40)
    assert padding < new_world
    assert len(set(before) & set(after)) <= padding
