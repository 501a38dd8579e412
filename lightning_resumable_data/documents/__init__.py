"""Variable-length documents: readers for the formats users have, and packing into samples.

Open a corpus (:func:`open_megatron`, :func:`open_hf_dataset`, :func:`open_parquet`,
:meth:`DocumentCorpus.from_arrays`, :func:`open_token_shard_documents`), wrap it in a
:class:`PackedDataset`, and hand that to any sampler or to ``ResumableDataModule``.

Example:
    >>> corpus = DocumentCorpus.from_arrays(list(range(1, 11)), [0, 3, 10])
    >>> packed = PackedDataset(corpus, seq_len=4, eos_id=0)
    >>> len(packed), packed[0]["input_ids"].shape
    (3, (4,))
"""

from lightning_resumable_data.documents.arrow import open_hf_dataset, open_parquet
from lightning_resumable_data.documents.collate import collate_packed
from lightning_resumable_data.documents.corpus import (
    CorpusPart,
    DocumentCorpus,
    check_document_lengths,
)
from lightning_resumable_data.documents.megatron import open_megatron, write_megatron
from lightning_resumable_data.documents.packed import PackedDataset
from lightning_resumable_data.documents.shards import open_token_shard_documents
from lightning_resumable_data.documents.weights import real_tokens_per_sample, token_weights

__all__ = [
    "CorpusPart",
    "DocumentCorpus",
    "PackedDataset",
    "check_document_lengths",
    "collate_packed",
    "open_hf_dataset",
    "open_megatron",
    "open_parquet",
    "open_token_shard_documents",
    "real_tokens_per_sample",
    "token_weights",
    "write_megatron",
]
