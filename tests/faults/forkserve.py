"""A fork server for short training runs: import torch and Lightning once, fork per run.

``serve(main)`` reads one JSON request a line from stdin (``{"argv": [...], "log": path,
"timeout": s}``), runs ``main(argv)`` in a forked child that starts a session of its own
(so a run can SIGKILL its whole process group, and ``ddp_fork`` can fork its ranks), and
answers ``{"rc": ..., "wall": ..., "timed_out": ...}``. That saves the ~4 s of imports per
process that dominate a short run. :class:`faults.runner.ForkServer` is the client.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

Main = Callable[[Sequence[str]], None]


def run_forked(main: Main, argv: Sequence[str], log: str, timeout: float) -> dict[str, Any]:
    """Run ``main(argv)`` in a forked child in a new session; wait at most ``timeout`` s."""
    sys.stdout.flush()
    sys.stderr.flush()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: a session (and process group) of its own
        code = 1
        try:
            os.setsid()
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            main(argv)
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    timed_out = False
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() - started > timeout:
            timed_out = True
            os.killpg(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
            break
        time.sleep(0.02)
    wall = time.monotonic() - started
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)  # loader workers or ranks that outlived the launcher
    return {"rc": os.waitstatus_to_exitcode(status), "wall": wall, "timed_out": timed_out}


def serve(main: Main) -> None:
    """Answer one run request per stdin line until stdin closes."""
    while line := sys.stdin.readline():
        request = json.loads(line)
        result = run_forked(main, request["argv"], request["log"], float(request["timeout"]))
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()
