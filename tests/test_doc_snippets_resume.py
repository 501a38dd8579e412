"""The docs' Lightning snippets that end in ``ckpt_path="last"`` really resume, exactly.

Sybil runs every snippet once, in an empty folder, where ``"last"`` finds nothing. Here
each snippet that promises a resume runs as written, three times, each in its own process:
uninterrupted in one folder; killed with SIGKILL at the start of step ``kill`` in another;
then the same command again in that folder, where ``ckpt_path="last"`` resumes from the
last checkpoint the snippet's own ``ModelCheckpoint`` wrote. The resumed steps must be the
uninterrupted run's batches, step for step.

Nothing is added to a snippet. Around it, the runner fixes torch's seed (the snippets'
datasets draw random tensors when built) and appends a recorder callback to every
``Trainer`` it builds; the recorder writes ``(global_step, sha256 of the batch)`` at each
batch's start and kills the process at ``kill``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent

RUNNER = """
import hashlib, json, os, sys
import lightning.pytorch as pl
import torch

kill = int(sys.argv[1])
ledger = open("ledger.jsonl", "a")


def tensors(batch):
    if isinstance(batch, torch.Tensor):
        yield batch
    elif isinstance(batch, (list, tuple)):
        for item in batch:
            yield from tensors(item)
    elif isinstance(batch, dict):
        for key in sorted(batch):
            yield from tensors(batch[key])


class Ledger(pl.Callback):
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        digest = hashlib.sha256()
        for tensor in tensors(batch):
            digest.update(tensor.detach().cpu().numpy().tobytes())
        ledger.write(json.dumps([trainer.global_step, digest.hexdigest()]) + "\\n")
        ledger.flush()
        if trainer.global_step == kill:
            os.kill(os.getpid(), 9)


build = pl.Trainer.__init__


def recorded(self, *args, **kwargs):
    kwargs["callbacks"] = [*(kwargs.get("callbacks") or []), Ledger()]
    build(self, *args, **kwargs)


pl.Trainer.__init__ = recorded
torch.manual_seed(0)
exec(compile(open("snippet.py").read(), sys.argv[2], "exec"), {"__name__": "__main__"})
"""


@dataclass(frozen=True)
class Snippet:
    """A python block of a page, the step it is killed at and the step it resumes from."""

    page: str
    section: str  # the heading the block follows ("" for the page's first block)
    steps: int  # an uninterrupted run trains steps 0 .. steps - 1
    kill: int
    resumes_at: int  # the last checkpoint before ``kill``

    def code(self) -> str:
        text = (ROOT / self.page).read_text()
        if self.section:
            assert self.section in text, f"{self.page} has no section {self.section!r}"
            text = text.split(self.section, 1)[1]
        match = re.search(r"```python\n(.*?)```", text, re.S)
        assert match is not None, f"{self.page} {self.section!r} has no python block"
        return match.group(1)


SNIPPETS = {
    # a two-source mixture, max_steps=40, a phase at step 20, last.ckpt every 10 steps
    "README": Snippet("README.md", "## With Lightning", 40, kill=25, resumes_at=20),
    # 640 samples / 32 = 20 steps an epoch, 2 epochs, every 5 steps
    "index": Snippet("docs/index.md", "", 40, kill=27, resumes_at=25),
    # 1,000 samples / 32 = 32 steps an epoch (the last one of 8), 3 epochs, every 10 steps:
    # killed in the second epoch
    "getting-started": Snippet(
        "docs/getting-started.md", "## Lightning: three lines", 96, kill=45, resumes_at=40
    ),
    # max_steps=20, phases at steps 10 and 16, every 5 steps: resumes where a phase starts
    "mixing": Snippet("docs/mixing.md", "## A mixture in Lightning", 20, kill=13, resumes_at=10),
}


def run(snippet: Snippet, folder: Path, kill: int) -> int:
    folder.mkdir(exist_ok=True)
    (folder / "snippet.py").write_text(snippet.code())
    (folder / "runner.py").write_text(RUNNER)
    result = subprocess.run(
        [sys.executable, "runner.py", str(kill), snippet.page],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert result.returncode in (0, -9), result.stderr[-3000:]
    return result.returncode


def ledger(folder: Path) -> list[tuple[int, str]]:
    lines = (folder / "ledger.jsonl").read_text().splitlines()
    return [(int(step), str(digest)) for step, digest in map(json.loads, lines)]


@pytest.mark.parametrize("name", list(SNIPPETS))
def test_doc_snippet_resumes_exactly(name: str, tmp_path: Path) -> None:
    snippet = SNIPPETS[name]
    uninterrupted, stopped = tmp_path / "uninterrupted", tmp_path / "stopped"
    with ThreadPoolExecutor(2) as pool:  # the two first runs are independent
        whole = pool.submit(run, snippet, uninterrupted, -1)
        killed = pool.submit(run, snippet, stopped, snippet.kill)
        assert whole.result() == 0
        assert killed.result() == -9  # SIGKILL at the start of step `kill`
    reference = ledger(uninterrupted)
    assert [step for step, _ in reference] == list(range(snippet.steps))
    assert len(set(reference)) == snippet.steps  # every step trains another batch
    first = ledger(stopped)
    assert first == reference[: snippet.kill + 1]
    assert (stopped / "ckpt" / "last.ckpt").exists()

    assert run(snippet, stopped, -1) == 0  # the same command: ckpt_path="last" resumes
    resumed = ledger(stopped)[len(first) :]
    assert resumed[0][0] == snippet.resumes_at  # from the last checkpoint, not from 0
    assert resumed == reference[snippet.resumes_at :]  # the uninterrupted run's batches


def test_sharded_snippet_resumes_after_the_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/sharded.md's loop, as written, then ``resumed`` read on: batches 6, 7, ... of it."""
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__main__"}
    exec(compile(Snippet("docs/sharded.md", "", 0, 0, 0).code(), "sharded.md", "exec"), namespace)
    from lightning_resumable_data import ShardedDataLoader, open_token_shards

    assert namespace["step"] == 5  # the snippet broke out of its loop after batch 5
    whole = ShardedDataLoader(open_token_shards("data/"), batch_size=8)
    uninterrupted = [batch.clone() for batch in whole]
    after = [batch.clone() for batch in namespace["resumed"]]  # type: ignore[attr-defined]
    assert len(uninterrupted) > 6
    assert len(after) == len(uninterrupted) - 6
    for expected, got in zip(uninterrupted[6:], after, strict=True):
        assert torch.equal(expected, got.cpu())
