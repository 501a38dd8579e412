# size: every command's arguments in one parser (lrd --help lists them all), none of them heavy
"""``lrd``: look into checkpoints and plan mixtures from the command line.

* ``lrd inspect CHECKPOINT``: where the data stands in a Lightning (or Fabric) checkpoint,
  and whether a resume under another world size or batch size is exact or elastic.
* ``lrd plan CONFIG``: the phases of a mixture schedule, the samples each source gives in
  each phase, and how many passes over each source the whole run makes.
* ``lrd trace CHECKPOINT --step N``: the samples each rank trained at optimizer step N.
* ``lrd find CHECKPOINT --sample I [--source S] [--epochs A:B]``: every epoch, step and
  rank that trained sample I (or will: planned).
* ``lrd skip CHECKPOINT --steps A:B -o NEW``: a copy whose data state cuts steps A to B-1.
* ``lrd quarantine CHECKPOINT --samples I,J -o NEW``: a copy that never draws those again.

Errors in the input are one line on stderr, with exit code 2; other failures exit with 1.

Example:
    >>> main(["plan", "no-such-file.yaml"])
    2
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from lightning_resumable_data.cli._errors import EXIT_FAILURE, EXIT_USAGE, CliError

if TYPE_CHECKING:
    from lightning_resumable_data.cli._mixture_dryrun import MixtureChange

__all__ = ["CliError", "build_parser", "main"]

_PROG = "lrd"


def _at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer ``>= minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} must be >= {minimum}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``lrd`` and its subcommands."""
    from lightning_resumable_data import __version__

    parser = argparse.ArgumentParser(
        prog=_PROG,
        description="Deterministic, resumable data loading: inspect checkpoints, plan mixtures.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    inspect = commands.add_parser(
        "inspect",
        help="where the data of a checkpoint stands, and what a resume would do",
        description="Show the data position saved in a Lightning or Fabric checkpoint: epoch, "
        "samples consumed, batches trained, the layout it was saved with, the sampler and, "
        "for mixtures, the phase in force and the samples drawn per source. Then say whether "
        "a resume under --world-size/--batch-size would be exact, elastic or refused.",
    )
    inspect.add_argument("checkpoint", type=Path, metavar="CHECKPOINT", help="a .ckpt file")
    for flag, metavar, what in (
        ("--world-size", "W", "data-parallel world size"),
        ("--batch-size", "B", "per-rank batch size"),
    ):
        help_ = f"{what} of the resume (default: the saved one)"
        inspect.add_argument(flag, type=_at_least(1), metavar=metavar, help=help_)
    inspect.add_argument(
        "--dataset-length",
        type=_at_least(0),
        metavar="N",
        help="dry-run a resume over N training samples (docs/changes.md)",
    )
    for flag, metavar, what in (
        ("--sources", "NAME=SIZE,...", "a mixture's sources with their sizes"),
        ("--weights", "NAME=W,...", "a mixture's weights"),
    ):
        help_ = f"dry-run a resume under {what} (default: the saved ones; docs/changes.md)"
        inspect.add_argument(flag, metavar=metavar, help=help_)
    for flag, choices in (
        ("--grown", ("this_epoch", "next_epoch", "refuse")),
        ("--shrunk", ("skip_removed", "refuse")),
    ):
        help_ = f"DataChangePolicy({flag[2:]}=...) of the dry run (default: {choices[0]})"
        inspect.add_argument(flag, choices=choices, default=choices[0], help=help_)
    inspect.add_argument(
        "--unsafe-unpickle",
        action="store_true",
        help="fully unpickle a checkpoint that holds objects beyond tensors and plain values "
        "(this runs code the file names: only for files you trust)",
    )

    plan = commands.add_parser(
        "plan",
        help="phases, per-source samples and source epochs of a mixture schedule",
        description="Read a mixture config (YAML or JSON) and print, for each phase, its "
        "steps, the share of each source (after temperature) and the samples it draws, and "
        "for each source the passes the whole run makes over it.",
    )
    plan.add_argument("config", type=Path, metavar="CONFIG", help="a .yaml or .json file")
    plan.add_argument("--png", type=Path, metavar="PATH", help="also plot the shares to PATH")
    plan.add_argument(
        "--resume",
        type=Path,
        metavar="CHECKPOINT",
        help="dry-run resuming CHECKPOINT under this config's data and layout instead "
        "(docs/changes.md): lrd inspect's report with its dry run",
    )

    trace = commands.add_parser(
        "trace",
        help="the samples each rank trained at an optimizer step",
        description="From the data history a checkpoint holds, name the dataset indices (and "
        "a mixture's source and index within it) each rank trained at optimizer step N, "
        "batch by batch. Nothing is read or replayed.",
    )
    trace.add_argument("checkpoint", type=Path, metavar="CHECKPOINT", help="a .ckpt file")
    trace.add_argument(
        "--step", type=_at_least(0), required=True, metavar="N", help="optimizer step"
    )
    trace.add_argument(
        "--rank", type=_at_least(0), action="append", metavar="R", help="only rank R (repeatable)"
    )
    trace.add_argument("--unsafe-unpickle", action="store_true", help=argparse.SUPPRESS)

    find = commands.add_parser(
        "find",
        help="every epoch, step and rank that trained a sample",
        description="From the data history a checkpoint holds, list every (epoch, optimizer "
        "step, rank) at which sample I was trained, and the steps after the checkpoint that "
        "will train it (planned: the rest of its epoch, or to the end of --epochs).",
    )
    find.add_argument("checkpoint", type=Path, metavar="CHECKPOINT", help="a .ckpt file")
    find.add_argument("--sample", type=_at_least(0), metavar="I", help="index")
    find.add_argument("--source", metavar="S", help="a mixture's source (I: index within it)")
    find.add_argument("--epochs", metavar="A:B", help="only epochs A to B-1 (A: and :B too)")
    find.add_argument("--unsafe-unpickle", action="store_true", help=argparse.SUPPRESS)
    find.add_argument("--document", type=_at_least(0), metavar="D", help="document (--documents)")
    skip = commands.add_parser(
        "skip",
        help="a copy of a checkpoint whose data state cuts the data of some steps",
        description="Write a copy of CHECKPOINT in which the data of optimizer steps A to B-1 "
        "(counted as the run that wrote it counts them) is cut: a fit resumed from the copy "
        "trains at step A what step B would have, and never reads the data in between. "
        "Every later resume, on any layout, keeps the cut.",
    )
    skip.add_argument("checkpoint", type=Path, metavar="CHECKPOINT", help="a .ckpt file")
    skip.add_argument(
        "--steps", action="append", required=True, metavar="A:B", help="steps A..B-1 (repeatable)"
    )
    skip.add_argument("-o", "--output", type=Path, required=True, metavar="NEW", help="new .ckpt")
    skip.add_argument("--unsafe-unpickle", action="store_true", help=argparse.SUPPRESS)
    quarantine = commands.add_parser(
        "quarantine",
        help="a copy of a checkpoint that never draws some samples again",
        description="Write a copy of CHECKPOINT in which dataset samples I, J, ... are left out "
        "of every draw from its position on; every other sample is still read once per epoch. "
        "Every later resume, on any layout, keeps it.",
    )
    quarantine.add_argument("checkpoint", type=Path, metavar="CHECKPOINT", help="a .ckpt file")
    quarantine.add_argument(
        "--samples", required=True, metavar="I,J", help="dataset indices, comma-separated"
    )
    quarantine.add_argument("-o", "--output", type=Path, required=True, metavar="NEW")
    quarantine.add_argument("--unsafe-unpickle", action="store_true", help=argparse.SUPPRESS)
    for command in (trace, find, skip, quarantine):
        command.add_argument(
            "--shards",
            type=Path,
            metavar="DIR",
            help="the run's token shards (their index.json): a sharded run's order needs "
            "their sizes; trace also names each sample's shard file, row and bytes",
        )
    for command in (inspect, plan, trace, find, skip, quarantine):
        command.add_argument("--json", action="store_true", help="print JSON instead of text")
    from lightning_resumable_data.cli._documents_args import add_document_options

    add_document_options(trace)
    add_document_options(find)
    return parser


def _run_documents(args: argparse.Namespace) -> int:
    """``trace``/``find`` of a packed run's documents (``--documents``, ``--document``)."""
    from lightning_resumable_data.cli import _documents as documents
    from lightning_resumable_data.cli import _documents_text as text

    if args.command == "find" and (args.document is None or args.sample is not None):
        raise CliError("lrd find --documents SPEC takes --document D (not --sample)")
    if not args.documents:
        raise CliError("--document D needs --documents SPEC: the corpus the run packed")
    if args.command == "find":
        found = documents.find_documents(args.checkpoint, args)
        print(json.dumps(found, indent=2) if args.json else text.format_find_document(found))
        return 0
    traced = documents.trace_documents(args.checkpoint, args)
    print(json.dumps(traced, indent=2) if args.json else text.format_trace_documents(traced))
    return 0


def _run(args: argparse.Namespace) -> int:
    if args.command == "quarantine":
        from lightning_resumable_data.cli.skip import format_quarantine, parse_samples, quarantine

        samples = parse_samples(args.samples)
        done = quarantine(
            args.checkpoint, samples, args.output, unsafe_unpickle=args.unsafe_unpickle
        )
        print(json.dumps(done, indent=2) if args.json else format_quarantine(done))
        return 0
    if args.command == "skip":
        from lightning_resumable_data.cli.skip import format_skip, parse_steps, skip

        steps = [parse_steps(text) for text in args.steps]
        done = skip(
            args.checkpoint,
            steps,
            args.output,
            unsafe_unpickle=args.unsafe_unpickle,
            shards=args.shards,
        )
        print(json.dumps(done, indent=2) if args.json else format_skip(done))
        return 0
    if args.command in ("find", "trace") and (args.documents or getattr(args, "document", None)):
        return _run_documents(args)
    if args.command == "find":
        from lightning_resumable_data.cli.find import find, format_find, parse_epochs

        if args.sample is None:
            raise CliError("lrd find needs --sample I (or --document D with --documents SPEC)")

        found = find(
            args.checkpoint,
            args.sample,
            source=args.source,
            epochs=None if args.epochs is None else parse_epochs(args.epochs),
            unsafe_unpickle=args.unsafe_unpickle,
            shards=args.shards,
        )
        print(json.dumps(found, indent=2) if args.json else format_find(found))
        return 0
    if args.command == "trace":
        from lightning_resumable_data.cli.trace import format_trace, trace

        traced = trace(
            args.checkpoint,
            args.step,
            args.rank,
            unsafe_unpickle=args.unsafe_unpickle,
            shards=args.shards,
        )
        print(json.dumps(traced, indent=2) if args.json else format_trace(traced))
        return 0
    if args.command == "inspect":
        from lightning_resumable_data.cli._change_report import format_changes
        from lightning_resumable_data.cli.checkpoint import format_inspect, inspect
        from lightning_resumable_data.samplers.data_changes import DataChangePolicy

        report = inspect(
            args.checkpoint,
            args.world_size,
            args.batch_size,
            unsafe_unpickle=args.unsafe_unpickle,
            dataset_length=args.dataset_length,
            policy=DataChangePolicy(grown=args.grown, shrunk=args.shrunk),
            mixture=_mixture_dry_run(args.sources, args.weights),
        )
        print(json.dumps(report, indent=2) if args.json else format_inspect(report))
        if not args.json and "data_changes" in report:
            print(format_changes(report["data_changes"]))
        return 0
    from lightning_resumable_data.cli.plan import format_plan, load_config, make_plan

    if args.resume is not None:
        from lightning_resumable_data.cli._plan_resume import plan_resume

        print(plan_resume(load_config(args.config), args.resume, args.json))
        return 0
    plan = make_plan(load_config(args.config), str(args.config))
    print(json.dumps(plan.to_json(), indent=2) if args.json else format_plan(plan), flush=True)
    if args.png is not None:  # the table first: the plot needs an optional dependency
        from lightning_resumable_data.cli._plot import plot_plan

        plot_plan(plan, args.png)
        if not args.json:
            print(f"\nwrote {args.png}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``lrd`` with ``argv`` (default: the process's arguments); return the exit code.

    Usage errors exit with 2 (argparse's code), as do unreadable or malformed inputs; other
    failures with 1. Set ``LRD_TRACEBACK=1`` to see the traceback of an unexpected error.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help, --version, or a usage error (already printed)
        return int(exit_.code) if isinstance(exit_.code, int) else EXIT_USAGE
    try:
        return _run(args)
    except CliError as error:
        print(f"{_PROG} {args.command}: error: {error}", file=sys.stderr)
        return error.code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `lrd inspect x.ckpt --json | head`: the reader left
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so that the exit flush does not fail again
        return EXIT_FAILURE
    except Exception as error:  # a bug, not the user's: one line, the traceback on request
        if os.environ.get("LRD_TRACEBACK"):
            traceback.print_exc()
        message = " ".join(str(error).split())
        print(
            f"{_PROG} {args.command}: error: unexpected {type(error).__name__}: {message} "
            "HINT: set LRD_TRACEBACK=1 for the traceback, and report it as a bug.",
            file=sys.stderr,
        )
        return EXIT_FAILURE


def _mixture_dry_run(sources: str | None, weights: str | None) -> MixtureChange | None:
    """``--sources`` and ``--weights`` parsed, or ``None`` without either."""
    if sources is None and weights is None:
        return None
    from lightning_resumable_data.cli._mixture_dryrun import parse_pairs

    return (
        None if sources is None else parse_pairs(sources, int, "--sources"),
        None if weights is None else parse_pairs(weights, float, "--weights"),
        None,
    )
