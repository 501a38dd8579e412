"""``lrd trace --documents`` and ``lrd find --document``: packed documents and their bytes.

A checkpoint holds the sampler's state (the dataset's length, its seed and order), not the
packing: ``--documents SPEC`` names the corpus the run packed (a Megatron prefix, Parquet
files, a ``save_to_disk`` folder; ``NAME=SPEC`` for a mixture's source) and the packing
options rebuild the run's :class:`~lightning_resumable_data.documents.PackedDataset`. Its
length is checked against the checkpoint's (a mismatch is refused with both values);
the shuffle seed cannot be checked from the checkpoint, so pass the run's.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightning_resumable_data.cli._documents_args import UNSET
from lightning_resumable_data.cli._errors import CliError
from lightning_resumable_data.cli.find import parse_epochs
from lightning_resumable_data.cli.trace import _batch_json, load
from lightning_resumable_data.documents.packed import PackedDataset
from lightning_resumable_data.lightning.document_trace import (
    check_packed,
    find_document,
    traced_pieces,
)
from lightning_resumable_data.lightning.trace import trace_step

__all__ = ["find_documents", "open_spec", "trace_documents"]


@dataclass(frozen=True)
class Spec:
    """A corpus named on the command line, packed as the options say."""

    dataset: PackedDataset
    source: str | None
    shown: str
    note: str | None = None


_OPTIONS = (  # packing key, option, argparse dest, default without a saved packing
    ("seq_len", "--seq-len", "seq_len", None),
    ("mode", "--packing-mode", "packing_mode", "concat"),
    ("eos_id", "--eos-id", "eos_id", None),
    ("seed", "--packing-seed", "packing_seed", 0),
    ("shuffle_documents", "--no-shuffle-documents", "shuffle_documents", True),
)


def _packing(args: argparse.Namespace, saved: dict[str, Any] | None) -> dict[str, Any]:
    """The run's packing: the options given, else the checkpoint's; a conflict is refused."""
    out = {}
    for key, flag, dest, default in _OPTIONS:
        given = getattr(args, dest, UNSET if dest == "eos_id" else None)
        has = given is not UNSET and (given is not None or dest == "eos_id")
        if has and saved is not None and key in saved and saved[key] != given:
            shown = "none" if given is None else given  # as --eos-id spells it
            raise CliError(
                f"{flag} {shown}: the run packed with {key}={saved[key]!r} (saved in the "
                "checkpoint)",
                hint=f"leave {flag} out: the checkpoint says how the run packed.",
            )
        out[key] = given if has else (saved or {}).get(key, default)
    if out["seq_len"] is None:
        raise CliError(
            "--documents needs the run's packing, and this checkpoint does not hold it: pass "
            "--seq-len N (and --eos-id, --packing-mode, --packing-seed, "
            "--no-shuffle-documents as the run had them)",
            hint="a ResumableDataModule of this release saves it; a plain loader does not.",
        )
    return out


def _check_source(spec: str, source: str | None, saved: dict[str, Any]) -> None:
    """``NAME=`` where the run packed a mixture's sources, none where it packed one dataset."""
    names = sorted(name for name in saved if name)
    if source is None and "" not in saved:
        raise CliError(
            f"--documents {spec}: the run is a mixture; name the packed source the corpus is: "
            + ", ".join(names),
            hint=f"--documents {names[0]}={spec}" if names else "",
        )
    if source is not None and source not in saved:
        if "" in saved:
            raise CliError(
                f"--documents {spec}: the run trained one packed dataset, not a mixture",
                hint=f"pass --documents {spec.split('=', 1)[1]} (no NAME=).",
            )
        raise CliError(
            f"--documents {spec}: {source!r} is not a packed source of the run; its packed "
            "sources: " + ", ".join(names),
            hint="NAME=SPEC names the source the corpus was packed as.",
        )


def open_spec(args: argparse.Namespace, saved: dict[str, Any] | None = None) -> Spec:
    """The packed dataset that ``--documents``, the options and ``saved`` describe.

    ``saved`` maps source names (``""`` for a single dataset) to the packing the data
    module saved; its corpus size (documents, stream tokens) must be the corpus's.

    Raises:
        CliError: No ``--seq-len`` (and none saved), an option that contradicts the saved
            packing, a corpus that does not open or is not the run's size.
    """
    from lightning_resumable_data.documents import open_hf_dataset, open_megatron, open_parquet

    text, source = str(args.documents), None
    if "=" in text and not Path(text).exists():
        source, text = text.split("=", 1)
    if saved:
        _check_source(args.documents, source, saved)
    mine = (saved or {}).get(source or "")
    packing = _packing(args, mine if isinstance(mine, dict) else None)
    paths = [Path(p) for p in text.split(",")]
    try:
        if all(p.suffix == ".parquet" for p in paths):
            corpus = open_parquet(paths, args.column)
        elif paths[0].is_dir():
            corpus = open_hf_dataset(paths[0], args.column)
        else:
            corpus = open_megatron(paths[0])
        dataset = PackedDataset(
            corpus,
            packing["seq_len"],
            mode=packing["mode"],
            eos_id=packing["eos_id"],
            seed=packing["seed"],
            shuffle_documents=packing["shuffle_documents"],
        )
    except (OSError, ValueError, TypeError, ImportError) as error:
        raise CliError(f"--documents {args.documents}: {error}") from None
    if isinstance(mine, dict):
        size = {k: mine.get(k) for k in ("documents", "stream_tokens")}
        now = {k: dataset.packing[k] for k in size}
        if size != now:
            raise CliError(
                f"--documents {args.documents} holds {now['documents']} documents "
                f"({now['stream_tokens']} tokens with separators); the run packed "
                f"{size['documents']} ({size['stream_tokens']}): not the run's corpus",
                hint="name the files the run was trained on.",
            )
    note = None
    keyed = mine.get("sample_keys", True) if isinstance(mine, dict) else True
    if not keyed and dataset.mode == "concat" and dataset.shuffle_documents:
        note = (
            "the run's data module had sample_keys=False: its PackedDataset packed the epoch "
            "its set_epoch was given (epoch 0 if nothing called it), while these pieces are "
            "those of each batch's data epoch"
        )
    return Spec(dataset, source, text, note)


def _one_corpus(args: argparse.Namespace) -> None:
    """``--documents`` (appended by argparse) as its one value; given twice is refused."""
    if isinstance(args.documents, list):
        if len(args.documents) > 1:
            raise CliError(
                f"--documents given {len(args.documents)} times ({', '.join(args.documents)}): "
                "lrd follows one corpus at a time",
                hint="run the command once per corpus; NAME=SPEC names a mixture's source.",
            )
        args.documents = args.documents[0]


def _checked(path: Path, args: argparse.Namespace) -> tuple[Any, Spec, int]:
    _one_corpus(args)
    run = load(path, args.unsafe_unpickle, getattr(args, "shards", None))
    saved = ((run.module or {}).get("config") or {}).get("packing")
    if run.module is not None and not saved and getattr(args, "seq_len", None) is None:
        raise CliError(
            f"{path}: its ResumableDataModule saved no packing: the run trained no "
            "PackedDataset (or was saved by a release before 0.4)",
            hint="--documents follows runs over packed documents; for an older checkpoint "
            "pass --seq-len N and the run's other packing options.",
        )
    spec = open_spec(args, saved if isinstance(saved, dict) else None)
    try:
        offset = check_packed(run.sampler, spec.dataset, spec.source)
    except ValueError as error:
        raise CliError(
            f"{path}: {error}",
            hint="pass the corpus and packing options the run used (lrd inspect shows "
            "the dataset's length).",
        ) from None
    return run, spec, offset


def _pieces_json(pieces: Any) -> list[dict[str, Any]] | None:
    return None if pieces is None else [piece._asdict() for piece in pieces]


def trace_documents(path: Path, args: argparse.Namespace) -> dict[str, Any]:
    """``lrd trace --documents``: the trace, with each sample's pieces and their files."""
    run, spec, _ = _checked(path, args)
    try:
        batches = trace_step(
            run.sampler, run.history, args.step, args.rank,
            position=run.position, drop_last=run.drop_last,
        )  # fmt: skip
    except ValueError as error:
        raise CliError(f"{path}: {error}", hint="lrd inspect shows what the file holds.") from None
    shown = []
    for batch in batches:
        entry = _batch_json(batch, run.dataset)
        for rank, samples in zip(entry["ranks"], batch.ranks, strict=True):
            found = traced_pieces(spec.dataset, batch.batch.epoch, samples, spec.source)
            rank["pieces"] = [_pieces_json(pieces) for pieces in found]
        shown.append(entry)
    return {
        "checkpoint": str(path),
        "step": args.step,
        "sampler": run.kind,
        "planned": any(batch.planned for batch in batches),
        "documents": spec.shown,
        "source": spec.source,
        "note": spec.note,
        "batches": shown,
    }


def find_documents(path: Path, args: argparse.Namespace) -> dict[str, Any]:
    """``lrd find --document``: every recorded (epoch, step, rank) that trained document D."""
    run, spec, _ = _checked(path, args)
    epochs = None
    if args.epochs is not None:
        first, stop = parse_epochs(args.epochs)
        epochs = (first, 2**63 - 1 if stop is None else stop)
    try:
        found = find_document(
            run.sampler, run.history, spec.dataset, args.document,
            source=spec.source, epochs=epochs,
        )  # fmt: skip
    except (ValueError, IndexError) as error:
        raise CliError(f"{path}: {error}", hint="lrd trace names a step's samples.") from None
    finished = run.history.finished_steps
    return {
        "checkpoint": str(path),
        "document": args.document,
        "documents": spec.shown,
        "source": spec.source,
        "note": spec.note,
        "sampler": run.kind,
        "steps_recorded": None if finished is None else list(finished),
        "trained": [vars(hit) for hit in found],
    }
