"""Document readers (Megatron ``.bin/.idx``, Parquet) read from a URL through the cache."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")

from remote_servers import FileServer

from lightning_resumable_data.documents.megatron import open_megatron, write_megatron


def test_megatron_prefix_at_a_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LRD_CACHE_DIR", str(tmp_path / "cache"))
    documents = [np.arange(n, dtype=np.int32) + n for n in (3, 5, 2)]
    write_megatron(tmp_path / "d" / "corpus", documents, dtype=np.int32)
    with FileServer(tmp_path / "d") as server:
        corpus = open_megatron(f"{server.url}/corpus")
        assert [corpus.document(i).tolist() for i in range(3)] == [d.tolist() for d in documents]
    assert len(list((tmp_path / "cache").glob("*-corpus.*"))) == 2


def test_parquet_at_a_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from lightning_resumable_data.documents.arrow import open_parquet

    monkeypatch.setenv("LRD_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "d").mkdir()
    pq.write_table(pa.table({"input_ids": [[1, 2, 3], [4]]}), tmp_path / "d" / "t.parquet")
    with FileServer(tmp_path / "d") as server:
        corpus = open_parquet(f"{server.url}/t.parquet")
        assert corpus.document(1).tolist() == [4]
