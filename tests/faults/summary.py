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
                f"faults: seed={self.seed} faults injected={sum(self.faults.values())} "
                f"resumes={self.resumes} samples checked={self.samples_checked} "
                f"mismatches={self.mismatches}"
            )
            out.append(
                f"  by kind: {kinds}; truncated checkpoints skipped={self.truncated_checkpoints}, "
                f"ledger lines dropped={self.dropped_ledger_lines}, known-bug detours="
                f"{self.known_bug_detours}, training runs={self.runs} ({self.run_seconds:.0f} s)"
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
