"""Text helpers shared by the commands: numbers, phase starts and aligned tables."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["count", "percent", "phase_start", "table"]


def count(value: int) -> str:
    """An integer with thousands separators.

    Example:
        >>> count(1234567)
        '1,234,567'
    """
    return f"{value:,}"


def percent(value: float) -> str:
    """A probability as a percentage with one decimal.

    Example:
        >>> percent(0.1234)
        '12.3%'
    """
    return f"{100 * value:.1f}%"


def phase_start(phase: Mapping[str, Any]) -> str:
    """Where a phase (as a checkpoint saves it) starts.

    Example:
        >>> phase_start({"start_step": 4, "start_epoch": None})
        'start_step 4'
    """
    if phase.get("start_step") is not None:
        return f"start_step {phase['start_step']}"
    return f"start_epoch {phase['start_epoch']}"


def table(
    header: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[int] = ()
) -> list[str]:
    r"""Lines of a table whose columns are padded to their widest cell.

    Args:
        header: The column titles.
        rows: The cells, one sequence per row.
        right: Indices of the columns to right-align (numbers).

    Example:
        >>> print("\n".join(table(["name", "n"], [["web", "10"], ["code", "2"]], right=[1])))
        name   n
        web   10
        code   2
    """
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return [line(header), *(line(r) for r in rows)]
