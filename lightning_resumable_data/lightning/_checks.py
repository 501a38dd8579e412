"""Argument checks of the data module: each error names the value, the rule and the fix.

The checks run where a newcomer's mistake would otherwise surface late or vaguely: a sampler
or a loader passed where a dataset goes (``'DistributedSampler' object is not
subscriptable`` in a worker), weights as a list (``cannot convert dictionary update
sequence element``), weights on a single dataset (silently ignored), a misspelled keyword.
"""

from __future__ import annotations

from collections.abc import Mapping, Sized

from torch.utils.data import DataLoader, Dataset, IterableDataset, Sampler

from lightning_resumable_data.samplers.data_changes import DataChangePolicy, source_change
from lightning_resumable_data.samplers.distributed import check_non_negative_int

__all__ = [
    "check_batch_sizes",
    "check_dataset",
    "check_weights_for",
    "describe_sources",
]


def check_dataset(argument: str, value: object) -> None:
    """Refuse a sampler or a loader where a dataset goes.

    Args:
        argument: The argument's name, for the message (``"train_dataset"``).
        value: What was passed: a dataset, a mapping of sources, or ``None``.

    Raises:
        TypeError: ``value`` (or one of its sources) is a ``Sampler`` or a ``DataLoader``,
            or a list of datasets.

    Example:
        >>> check_dataset("train_dataset", range(4))
        >>> check_dataset("train_dataset", {"web": range(4)})
    """
    if isinstance(value, Mapping):
        for name, source in value.items():
            check_dataset(f"{argument}[{name!r}]", source)
        return
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], Dataset):
        raise TypeError(
            f"{argument} is a {type(value).__name__} of {len(value)} datasets, but "
            "ResumableDataModule reads one dataset, or a mapping of named sources that it "
            "mixes. Pass {'name': dataset, ...} for a mixture, or "
            "torch.utils.data.ConcatDataset([...]) to read them end to end."
        )
    if isinstance(value, IterableDataset):
        raise TypeError(
            f"{argument} is an IterableDataset ({type(value).__name__}), but "
            "ResumableDataModule orders samples by index: it needs a map-style dataset "
            "(__getitem__ and __len__) to shuffle, split over ranks and resume in O(1). Pass a "
            "map-style dataset (for token or document corpora: open_token_shards, "
            "open_megatron, open_parquet), or return your own DataLoader over the iterable "
            "dataset from LightningModule.train_dataloader (it then resumes only as far as the "
            "dataset itself does)."
        )
    if (
        isinstance(value, Sized)
        and not isinstance(value, (Sampler, DataLoader))
        and len(value) == 0  # not `not value`: a tensor has no truth value
    ):
        raise ValueError(
            f"{argument} is empty (len 0): there is nothing to load. Pass a dataset with "
            "samples, or leave the argument out."
        )
    if isinstance(value, (Sampler, DataLoader)):
        kind = "sampler" if isinstance(value, Sampler) else "loader"
        inner = getattr(value, "dataset", None) or getattr(value, "data_source", None)
        fix = (
            f"Pass its dataset ({type(inner).__name__})"
            if inner is not None
            else "Pass the dataset"
        )
        raise TypeError(
            f"{argument} is a {type(value).__name__}, but ResumableDataModule wants the dataset "
            f"itself: it builds the {kind} (and the rest) from the trainer's strategy. {fix} "
            f"instead, e.g. ResumableDataModule({kind}.dataset, batch_size=...)."
        )


def check_batch_sizes(batch_size: int, eval_batch_size: int | None) -> int:
    """Check the batch sizes; return the evaluation one (``batch_size`` when ``None``).

    Example:
        >>> check_batch_sizes(8, None), check_batch_sizes(8, 32)
        (8, 32)
    """
    if check_non_negative_int("batch_size", batch_size) == 0:
        raise ValueError("batch_size=0 must be >= 1.")
    if (
        eval_batch_size is not None
        and check_non_negative_int("eval_batch_size", eval_batch_size) == 0
    ):
        raise ValueError("eval_batch_size=0 must be >= 1 (or None for batch_size).")
    return batch_size if eval_batch_size is None else eval_batch_size


def check_weights_for(train_dataset: object, weights: object) -> dict[str, float] | None:
    """Return ``weights`` as a dict, or raise if they cannot apply to ``train_dataset``.

    Args:
        train_dataset: The training dataset (``None`` when a subclass sets it in ``setup``).
        weights: The ``weights`` argument.

    Raises:
        TypeError: ``weights`` is not a mapping of source names to numbers.
        ValueError: ``weights`` are given for a single (unnamed) dataset.

    Example:
        >>> check_weights_for({"web": range(8), "code": range(2)}, {"web": 0.8, "code": 0.2})
        {'web': 0.8, 'code': 0.2}
    """
    if weights is None:
        return None
    if not isinstance(weights, Mapping):
        names = list(train_dataset) if isinstance(train_dataset, Mapping) else ["web", "code"]
        example = ", ".join(f"{n!r}: ..." for n in names)
        raise TypeError(
            f"weights={weights!r} must be a mapping of source names to weights, got a "
            f"{type(weights).__name__}; name each source: weights={{{example}}}."
        )
    if train_dataset is not None and not isinstance(train_dataset, Mapping):
        raise ValueError(
            f"weights={dict(weights)!r} apply to a mixture of named sources, but train_dataset "
            f"is a single {type(train_dataset).__name__}; pass the sources as a mapping, e.g. "
            f"ResumableDataModule({{{', '.join(f'{n!r}: ...' for n in weights)}}}, "
            "weights=...), or drop weights."
        )
    return dict(weights)


def describe_sources(saved: object, now: object) -> str:
    """The sources part of a mismatch message, in the user's words.

    A single dataset is recorded as one unnamed source (``{"": n}``): say "dataset length".

    Example:
        >>> describe_sources({"": 100}, {"": 101})
        'dataset length: saved 100, now 101'
        >>> describe_sources({"web": 4}, {"web": 4, "code": 2})
        "sources: saved {'web': 4}, now {'web': 4, 'code': 2}"
    """
    if isinstance(saved, Mapping) and isinstance(now, Mapping) and list(saved) == list(now) == [""]:
        return f"dataset length: saved {saved['']}, now {now['']}"
    return f"sources: saved {saved!r}, now {now!r}" + _sources_hint(saved, now)


def _sources_hint(saved: object, now: object) -> str:
    """What a mixture's changed sources would need to resume exactly (docs/changes.md).

    Example:
        >>> _sources_hint({"web": 4}, {"web": 5})
        "; sources ['web'] changed size ([4] -> [5])"
    """
    if not (isinstance(saved, Mapping) and isinstance(now, Mapping)) or "" in saved:
        return ""
    kind, why = source_change(saved, now)
    return f"; {why}" if kind == "refused" else ""


def check_data_changes(policy: object) -> DataChangePolicy | None:
    """``ResumableDataModule(data_changes=...)``, checked: a policy or ``None``."""
    if policy is not None and not isinstance(policy, DataChangePolicy):
        raise TypeError(
            f"data_changes={policy!r} must be a DataChangePolicy(...) or None, e.g. "
            "data_changes=DataChangePolicy(grown='next_epoch')."
        )
    return policy
