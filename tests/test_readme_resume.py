"""README's Lightning snippet, as written, really resumes: killed, run again, exact.

The snippet ends with ``trainer.fit(..., ckpt_path="last")  # resumes exactly, any world
size``. Run once it never resumes, so here it runs as written three times, each in its own
process, with only a recorder around ``BoringModel.training_step`` (the batch each step
trains on, hashed) and a fixed torch seed before it (``RandomDataset`` draws its tensors
when built): uninterrupted in one folder; killed with SIGKILL after step 25 in
another (its last checkpoint is step 20); then again in that folder, where
``ckpt_path="last"`` resumes. The resumed steps must be the uninterrupted run's.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"

RUNNER = """
import hashlib, json, os, sys
import torch
from lightning.pytorch.demos.boring_classes import BoringModel

kill = int(sys.argv[1])
ledger = open("ledger.jsonl", "a")
train_step = BoringModel.training_step


def training_step(self, batch, batch_idx):
    digest = hashlib.sha256(batch.detach().numpy().tobytes()).hexdigest()
    ledger.write(json.dumps([self.trainer.global_step, digest]) + "\\n")
    ledger.flush()
    if self.trainer.global_step == kill:
        os.kill(os.getpid(), 9)
    return train_step(self, batch, batch_idx)


BoringModel.training_step = training_step
torch.manual_seed(0)  # RandomDataset draws its tensors at import: the same in every run
exec(compile(open(sys.argv[2]).read(), "README.md", "exec"), {"__name__": "__main__"})
"""


def lightning_snippet() -> str:
    text = README.read_text()
    section = text.split("## With Lightning", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None, "README's Lightning section has no python block"
    return match.group(1)


def run(folder: Path, kill: int) -> int:
    folder.mkdir(exist_ok=True)
    (folder / "snippet.py").write_text(lightning_snippet())
    (folder / "runner.py").write_text(RUNNER)
    result = subprocess.run(
        [sys.executable, "runner.py", str(kill), "snippet.py"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    return result.returncode


def ledger(folder: Path) -> list[tuple[int, str]]:
    lines = (folder / "ledger.jsonl").read_text().splitlines()
    return [(int(step), str(digest)) for step, digest in map(json.loads, lines)]


def test_readme_lightning_snippet_resumes_exactly(tmp_path: Path) -> None:
    assert run(tmp_path / "a", kill=-1) == 0
    reference = ledger(tmp_path / "a")
    assert [step for step, _ in reference] == list(range(40))

    assert run(tmp_path / "b", kill=25) == -9  # SIGKILL inside step 25
    assert (tmp_path / "b" / "ckpt" / "last.ckpt").exists()
    first = ledger(tmp_path / "b")
    assert first == reference[:26]  # steps 0..25 (25 was being trained when killed)

    assert run(tmp_path / "b", kill=-1) == 0  # the same command: ckpt_path="last" resumes
    resumed = ledger(tmp_path / "b")[len(first) :]
    assert resumed[0][0] == 20  # from the last checkpoint (every 10 steps), not from 0
    assert resumed == reference[20:]  # the uninterrupted run's batches, nothing else
