"""Which documents a step trained, and when a document was trained: packed datasets.

:func:`~.trace.trace_step` names the dataset indices of a step; for a
:class:`~lightning_resumable_data.documents.PackedDataset` (alone, or a mixture's source)
:func:`traced_pieces` turns them into document pieces and the files their bytes are in
(:func:`~lightning_resumable_data.documents.provenance.sample_pieces`, in the batch's
epoch: the packing of ``"concat"`` changes every epoch). :func:`find_document` is the
inverse over the record: the samples that hold document ``D`` in each recorded epoch
(:func:`~lightning_resumable_data.documents.provenance.document_samples`), then where each
was trained (:func:`~.find.find_sample`). Nothing is read or replayed.
"""

from __future__ import annotations

from dataclasses import dataclass

from lightning_resumable_data.documents.packed import PackedDataset
from lightning_resumable_data.documents.provenance import Piece, document_samples, sample_pieces
from lightning_resumable_data.lightning.find import find_sample
from lightning_resumable_data.lightning.history import DataHistory
from lightning_resumable_data.lightning.trace import RankSamples
from lightning_resumable_data.samplers.distributed import DistributedSampler
from lightning_resumable_data.samplers.mixture import MixtureSampler

__all__ = ["DocumentOccurrence", "check_packed", "find_document", "traced_pieces"]


@dataclass(frozen=True)
class DocumentOccurrence:
    """Where a piece of a document was trained.

    Attributes:
        epoch: The data epoch.
        step: The optimizer step.
        rank: The data-parallel rank.
        position: The sample's position in the epoch's global order.
        sample: The packed sample (the dataset's index; a mixture source's own index).
        start: First token of the document in the sample.
        stop: One past the last (``start == stop``: only its separator).
        eos: The sample holds the separator after the piece.
    """

    epoch: int
    step: int
    rank: int
    position: int
    sample: int
    start: int
    stop: int
    eos: bool


def check_packed(sampler: DistributedSampler, dataset: PackedDataset, source: str | None) -> int:
    """The offset of ``dataset``'s indices in the sampler's (0, or a mixture source's start).

    Raises:
        ValueError: ``dataset`` is not the length the run's dataset (or source) had, a
            mixture without ``source``, or a source the mixture does not have.
    """
    if isinstance(sampler, MixtureSampler):
        names, sizes = sampler.mixture.names, sampler.mixture.sizes
        if source not in names:
            raise ValueError(
                f"the run trained a mixture of {', '.join(names)}: name the source that is "
                f"this packed dataset (got {source!r})."
            )
        number = names.index(source)
        offset, length, what = int(sum(sizes[:number])), sizes[number], f"source {source!r}"
    else:
        offset, length, what = 0, sampler.epoch_length, "dataset"
    if len(dataset) != length:
        raise ValueError(
            f"the run's {what} had {length} samples; this packed dataset has {len(dataset)} "
            f"({dataset!r}): another corpus or packing (seq_len, eos_id, mode)."
        )
    return offset


def traced_pieces(
    dataset: PackedDataset, epoch: int, samples: RankSamples, source: str | None = None
) -> list[list[Piece] | None]:
    """The pieces of each of a rank's traced samples (``None``: another mixture source)."""
    if samples.sources is None or samples.local is None:
        return list(sample_pieces(dataset, samples.indices.tolist(), epoch))
    mine = [k for k, name in enumerate(samples.sources) if name == source]
    found = sample_pieces(dataset, samples.local[mine].tolist(), epoch)
    out: list[list[Piece] | None] = [None] * len(samples.sources)
    for k, pieces in zip(mine, found, strict=True):
        out[k] = pieces
    return out


def find_document(
    sampler: DistributedSampler,
    history: DataHistory,
    dataset: PackedDataset,
    document: int,
    *,
    source: str | None = None,
    epochs: tuple[int, int] | None = None,
) -> list[DocumentOccurrence]:
    """Every recorded (epoch, step, rank) at which a piece of ``document`` was trained.

    Args:
        sampler: The run's sampler (as for :func:`~.find.find_sample`).
        history: The run's record.
        dataset: The packed dataset, as the run built it (same corpus and packing).
        document: The document id in the corpus.
        source: For a mixture, the source that is ``dataset``.
        epochs: Only epochs ``A <= epoch < B``.

    Raises:
        ValueError: What :func:`check_packed` or :func:`~.find.find_sample` refuses.
        IndexError: ``document`` outside the corpus.
    """
    offset = check_packed(sampler, dataset, source)
    found = []
    for epoch in history.epochs:
        if epochs is not None and not epochs[0] <= epoch < epochs[1]:
            continue
        for piece in document_samples(dataset, document, epoch):
            where = (piece.sample, piece.start, piece.stop, piece.eos)
            at = (epoch, epoch + 1)  # the packing of this epoch holds the piece there
            for hit in find_sample(sampler, history, offset + piece.sample, epochs=at):
                found.append(DocumentOccurrence(epoch, hit.step, hit.rank, hit.position, *where))
    found.sort(key=lambda hit: (hit.step, hit.rank, hit.position))
    return found
