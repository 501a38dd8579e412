"""The text of ``lrd trace --documents`` and ``lrd find --document``."""

from __future__ import annotations

from typing import Any

from lightning_resumable_data.cli.trace import format_trace

__all__ = ["format_find_document", "format_piece", "format_trace_documents"]


def format_piece(piece: dict[str, Any]) -> str:
    """One piece: document, token range, separator, and where its bytes are.

    Example:
        >>> format_piece({"document": 4, "start": 0, "stop": 9, "eos": True,
        ...     "file": "c.bin", "row": 4, "byte_offset": 64, "byte_length": 18})
        'document 4 tokens 0:9 +EOS, c.bin bytes 64+18'
        >>> format_piece({"document": 2, "start": 3, "stop": 5, "eos": False,
        ...     "file": "a.parquet", "row": 2, "byte_offset": None, "byte_length": None})
        'document 2 tokens 3:5, a.parquet row 2'
    """
    text = f"document {piece['document']} tokens {piece['start']}:{piece['stop']}"
    text += " +EOS" if piece["eos"] else ""
    if piece.get("file") is None:
        return text
    if piece.get("byte_offset") is not None:
        return f"{text}, {piece['file']} bytes {piece['byte_offset']}+{piece['byte_length']}"
    return f"{text}, {piece['file']} row {piece['row']}"


def format_trace_documents(report: dict[str, Any]) -> str:
    """``lrd trace`` text, each rank's samples followed by their document pieces."""
    lines, batch = [], -1
    batches = report["batches"]
    for line in format_trace(report).splitlines():
        lines.append(line)
        if line.startswith("batch "):
            batch += 1
        if not line.startswith("  rank "):
            continue
        rank = int(line.split()[1].rstrip(":"))
        (entry,) = (r for r in batches[batch]["ranks"] if r["rank"] == rank)
        for index, pieces in zip(entry["indices"], entry["pieces"], strict=True):
            if pieces is None:
                continue  # another mixture source
            shown = [format_piece(piece) for piece in pieces]
            lines.append(f"    {index}: {shown[0] if shown else 'no document'}")
            lines.extend(f"    {' ' * len(str(index))}  {text}" for text in shown[1:])
    if report.get("note"):
        lines.append(f"note: {report['note']}")
    return "\n".join(lines)


def format_find_document(report: dict[str, Any]) -> str:
    """The text ``lrd find --document`` prints.

    Example:
        >>> print(format_find_document({"checkpoint": "c.ckpt", "document": 4,
        ...     "documents": "c", "source": None, "sampler": "S", "steps_recorded": [0, 9],
        ...     "trained": [{"epoch": 0, "step": 1, "rank": 0, "position": 5, "sample": 7,
        ...     "start": 0, "stop": 9, "eos": True}]}))
        document 4 of c (c.ckpt, S): trained in 1 sample in steps 0 to 9
          epoch 0, step 1, rank 0 (global position 5): sample 7, tokens 0:9 +EOS
    """
    trained, steps = report["trained"], report["steps_recorded"]
    times = "1 sample" if len(trained) == 1 else f"{len(trained)} samples"
    where = f"steps {steps[0]} to {steps[1]}" if steps else "no recorded step"
    source = f" (source {report['source']})" if report.get("source") else ""
    lines = [
        f"document {report['document']} of {report['documents']}{source} "
        f"({report['checkpoint']}, {report['sampler']}): trained in {times} in {where}"
    ]
    for hit in trained:
        eos = " +EOS" if hit["eos"] else ""
        lines.append(
            f"  epoch {hit['epoch']}, step {hit['step']}, rank {hit['rank']} (global position "
            f"{hit['position']}): sample {hit['sample']}, tokens {hit['start']}:{hit['stop']}{eos}"
        )
    if report.get("note"):
        lines.append(f"note: {report['note']}")
    return "\n".join(lines)
