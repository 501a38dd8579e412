"""Launch a script under ``torchrun`` (``torch.distributed.run``) on free local ports."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def torchrun(script: Path, *args: str, nproc: int = 2, timeout: float = 240) -> None:
    """Run ``script`` on ``nproc`` local processes; fail the test with its output if it fails."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(nproc),
        "--master-port",
        "0",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        "localhost:0",
        str(script),
        *args,
    ]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
