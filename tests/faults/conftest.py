"""Fixtures of the fault campaign, and its summary lines at the end of the pytest output."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from faults.campaign import campaign_seed
from faults.runner import ForkServer
from faults.summary import SUMMARY


@pytest.fixture(scope="session")
def fault_seed() -> int:
    if SUMMARY.seed is None:
        SUMMARY.seed = campaign_seed()
    return SUMMARY.seed


@pytest.fixture(scope="session")
def fork_server() -> Iterator[ForkServer]:
    server = ForkServer()
    yield server
    server.close()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    lines = SUMMARY.lines()
    if lines:
        terminalreporter.section("fault campaign")
        for line in lines:
            terminalreporter.write_line(line)
        if SUMMARY.seed is not None:
            terminalreporter.write_line(f"reproduce with LRD_FAULT_SEED={SUMMARY.seed}")
