"""Counters that the fault tests fill and ``conftest.py`` prints at the end of the session."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pytest


@dataclass
class Summary:
    seed: int | None = None
    faults: Counter[str] = field(default_factory=Counter)
    resumes: int = 0
    samples_checked: int = 0
    mismatches: int = 0
    truncated_checkpoints: int = 0
    dropped_ledger_lines: int = 0
    known_bug_detours: int = 0
    runs: int = 0
    run_seconds: float = 0.0
    bad_inputs: int = 0
    bad_inputs_refused: int = 0
    known_bugs: set[str] = field(default_factory=set)
    fuzz_examples: Counter[str] = field(default_factory=Counter)
    fuzz_refused: int = 0
    fuzz_accepted: int = 0

    def lines(self) -> list[str]:
        out = []
        if self.runs:
            kinds = ", ".join(f"{k}={n}" for k, n in sorted(self.faults.items()))
            out.append(
                f"fault campaign (reproduce with LRD_FAULT_SEED={self.seed}): "
                f"{sum(self.faults.values())} faults injected into {self.runs} training runs "
                f"({self.run_seconds:.0f} s), {self.resumes} resumes; "
                f"{self.samples_checked} samples checked against the uninterrupted run, "
                f"{self.mismatches} differed"
            )
            out.append(
                f"  faults by kind: {kinds}. A torn checkpoint file was skipped for the one "
                f"before it {self.truncated_checkpoints} times; the per-sample ledger forgot "
                f"{self.dropped_ledger_lines} lines of steps trained after the checkpoint a "
                f"run resumed from (they are trained again, as they must be); resumes moved "
                f"off a known bug: {self.known_bug_detours}"
            )
        if self.bad_inputs:
            out.append(
                f"bad inputs: tried={self.bad_inputs} refused clearly={self.bad_inputs_refused} "
                f"known-bug cases={self.bad_inputs - self.bad_inputs_refused}"
            )
        if self.fuzz_examples:
            out.append(
                f"fuzz: examples={sum(self.fuzz_examples.values())} over "
                f"{len(self.fuzz_examples)} targets, refused={self.fuzz_refused} "
                f"accepted={self.fuzz_accepted}"
            )
        if out and self.known_bugs:
            out.append(
                f"known package bugs (strict xfail, see their reasons): {len(self.known_bugs)}"
            )
        return out


SUMMARY = Summary()


def bug(reason: str) -> pytest.MarkDecorator:
    """Mark a test (or case) that a known package bug fails; fixing the bug fails the mark."""
    SUMMARY.known_bugs.add(reason)
    return pytest.mark.xfail(strict=True, reason=f"BUG: {reason}")
