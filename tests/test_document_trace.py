"""``lrd trace --documents``/``lrd find --document`` against what a real run's model was given.

A ``ResumableDataModule`` over a ``PackedDataset`` of a Megatron corpus (written with
``write_megatron``) and of Parquet files trains under a real ``Trainer``, is stopped in
epoch 1 and resumed under another batch size into epoch 2; the model notes every batch it
gets. Token ``t`` of document ``d`` is ``1000 * d + t + 1`` (EOS is 0), so the ledger says
which document pieces each sample held. For every step, the traced pieces read back
through the corpus are the rows the model got; for documents drawn at random, ``find``'s
(epoch, step, sample, token range) are the ledger's.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from lightning.pytorch.demos.boring_classes import BoringModel, RandomDataset

from lightning_resumable_data import ResumableDataModule
from lightning_resumable_data.cli import CliError, build_parser, main
from lightning_resumable_data.cli._documents import find_documents, trace_documents
from lightning_resumable_data.documents import (
    DocumentCorpus,
    PackedDataset,
    collate_packed,
    open_megatron,
    open_parquet,
    write_megatron,
)

SEQ_LEN, EOS, SEED = 16, 0, 5
Ledger = dict[int, list[list[list[int]]]]  # step -> batches -> rows of tokens


class Recorder(pl.LightningModule):
    """Trains nothing; notes each batch's rows under its step."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.ledger: Ledger = defaultdict(list)

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        self.ledger[self.trainer.global_step].append(batch["input_ids"].tolist())
        loss: torch.Tensor = self.layer(batch["input_ids"].float().view(-1, 1)).sum() * 0.0
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.0)


def _documents(count: int) -> list[list[int]]:
    rng = np.random.default_rng(3)
    return [[1000 * d + t + 1 for t in range(int(rng.integers(1, 30)))] for d in range(count)]


def _fit(tmp_path: Path, corpus: DocumentCorpus) -> tuple[Ledger, Path]:
    """Stop at step 24 (epoch 1 of ~19 steps an epoch), resume with batch 6 to 3 epochs."""
    ledger: Ledger = defaultdict(list)
    checkpoint = None
    limits: list[tuple[int, dict[str, Any]]] = [(8, {"max_steps": 24}), (6, {"max_epochs": 3})]
    for batch_size, limit in limits:
        dataset = PackedDataset(corpus, SEQ_LEN, eos_id=EOS, seed=SEED, stride=4)
        module = ResumableDataModule(
            dataset, batch_size=batch_size, sample_keys=True, collate_fn=collate_packed
        )
        model = Recorder()
        trainer = pl.Trainer(
            accelerator="cpu", devices=1, default_root_dir=tmp_path, logger=False,
            enable_checkpointing=False, enable_progress_bar=False,
            enable_model_summary=False, **limit,
        )  # fmt: skip
        trainer.fit(model, datamodule=module, ckpt_path=checkpoint)
        checkpoint = tmp_path / f"after-{batch_size}.ckpt"
        trainer.save_checkpoint(checkpoint)
        for step, batches in model.ledger.items():
            ledger[step] += batches
    assert checkpoint is not None
    return ledger, checkpoint


def _args(*extra: str) -> Any:
    return build_parser().parse_args(list(extra))


def _check_run(tmp_path: Path, spec: str, corpus: DocumentCorpus, documents: int) -> None:
    ledger, last = _fit(tmp_path, corpus)
    packing = ["--documents", spec, "--seq-len", str(SEQ_LEN), "--eos-id", str(EOS)]
    packing += ["--packing-seed", str(SEED)]
    epochs = set()
    for step, batches in sorted(ledger.items()):
        report = trace_documents(last, _args("trace", str(last), "--step", str(step), *packing))
        got = []
        for batch in report["batches"]:
            epochs.add(batch["epoch"])
            (rank,) = batch["ranks"]
            rows = []
            for pieces in rank["pieces"]:
                row: list[int] = []
                for piece in pieces:
                    row += corpus.document(piece["document"])[
                        piece["start"] : piece["stop"]
                    ].tolist()
                    row += [EOS] if piece["eos"] else []
                rows.append(row)
            got.append(rows)
        assert got == batches, f"step {step}"
    assert epochs == {0, 1, 2}
    # where each document's pieces were, from the ledger: (step, first token, stop, eos)
    seen: dict[int, list[tuple[int, int, int, bool]]] = defaultdict(list)
    for step, batches in ledger.items():
        for rows in batches:
            for row in rows:
                for number, token in enumerate(row):
                    if token == EOS:
                        continue
                    doc, at = divmod(token - 1, 1000)
                    after = row[number + 1] if number + 1 < len(row) else None
                    before = row[number - 1] if number else EOS
                    if before == EOS or before != token - 1:
                        seen[doc].append((step, at, at + 1, after == EOS))
                    else:
                        last_seen = seen[doc][-1]
                        seen[doc][-1] = (step, last_seen[1], at + 1, after == EOS)
    rng = np.random.default_rng(0)
    for doc in rng.choice(documents, size=12, replace=False).tolist():
        found = find_documents(last, _args("find", str(last), "--document", str(doc), *packing))
        hits = [(h["step"], h["start"], h["stop"], h["eos"]) for h in found["trained"]]
        only_eos = [h for h in hits if h[1] == h[2]]  # a sample that holds only its EOS
        assert sorted(set(hits) - set(only_eos)) == sorted(seen[doc]), doc
        assert {h["epoch"] for h in found["trained"]} <= {0, 1, 2}


def test_megatron_run_traced_to_document_pieces_and_bin_bytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    documents = _documents(110)
    write_megatron(tmp_path / "corpus", documents, dtype=np.int32)
    corpus = open_megatron(tmp_path / "corpus")
    _check_run(tmp_path, str(tmp_path / "corpus"), corpus, len(documents))
    last = tmp_path / "after-6.ckpt"
    packing = ["--documents", str(tmp_path / "corpus"), "--seq-len", str(SEQ_LEN)]
    packing += ["--eos-id", "0", "--packing-seed", str(SEED)]
    assert main(["trace", str(last), "--step", "30", *packing]) == 0
    text = capsys.readouterr().out
    assert "corpus.bin bytes" in text, text
    assert "note:" not in text, text  # sample_keys=True: the batch's epoch is the packing's
    assert "+EOS" in text, text
    assert main(["find", str(last), "--document", "7", *packing, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["document"] == 7, report
    assert report["trained"], report
    assert main(["find", str(last), "--document", "7", *packing, "--epochs", "1:2"]) == 0
    lines = capsys.readouterr().out.splitlines()[1:]
    assert lines, lines
    assert all(line.startswith("  epoch 1,") for line in lines), lines
    # the data module saved the packing: --documents alone rebuilds it; options must agree
    alone = ["--documents", str(tmp_path / "corpus")]
    step = ["trace", str(last), "--step", "3"]
    assert trace_documents(last, _args(*step, *alone)) == trace_documents(
        last, _args(*step, *packing)
    )
    with pytest.raises(CliError, match="--packing-seed 6: the run packed with seed=5"):
        trace_documents(last, _args(*step, *alone, "--packing-seed", "6"))
    with pytest.raises(CliError, match="--eos-id none: the run packed with eos_id=0"):
        trace_documents(last, _args(*step, *alone, "--eos-id", "none"))
    with pytest.raises(CliError, match="the run trained one packed dataset, not a mixture"):
        trace_documents(last, _args(*step, "--documents", f"web={tmp_path / 'corpus'}"))
    assert main([*step, *alone, *alone]) == 2  # a repeated --documents: not the last kept
    assert "--documents given 2 times" in capsys.readouterr().err
    write_megatron(tmp_path / "other", documents[:-1], dtype=np.int32)
    with pytest.raises(CliError, match=r"holds 109 documents .* the run packed 110 "):
        trace_documents(last, _args(*step, "--documents", str(tmp_path / "other")))
    # a checkpoint without the packing (an older release): options, checked by length
    saved = torch.load(last, weights_only=False)
    assert _drop_packing(saved)
    torch.save(saved, tmp_path / "old.ckpt")
    old = ["trace", str(tmp_path / "old.ckpt"), "--step", "3"]
    assert trace_documents(tmp_path / "old.ckpt", _args(*old, *packing))["batches"]
    with pytest.raises(CliError, match=r"had 1[0-9]+ samples; this packed dataset has"):
        trace_documents(tmp_path / "old.ckpt", _args(*old, *alone, "--seq-len", "17"))
    assert main(["find", str(tmp_path / "old.ckpt"), "--document", "7", *alone]) == 2
    assert "--seq-len" in capsys.readouterr().err


def _drop_packing(tree: Any) -> bool:
    """Remove a saved ``config["packing"]`` from a checkpoint; whether one was there."""
    if not isinstance(tree, dict):
        return False
    config = tree.get("config")
    if isinstance(config, dict) and "packing" in config:
        del config["packing"]
        return True
    return any(_drop_packing(value) for value in tree.values())


def test_parquet_run_traced_to_document_pieces_and_rows(tmp_path: Path) -> None:
    documents = _documents(90)
    paths = [tmp_path / "a.parquet", tmp_path / "b.parquet"]
    pq.write_table(pa.table({"input_ids": documents[:40]}), paths[0])
    pq.write_table(pa.table({"input_ids": documents[40:]}), paths[1])
    corpus = open_parquet(paths)
    _check_run(tmp_path, ",".join(map(str, paths)), corpus, len(documents))
    last = tmp_path / "after-6.ckpt"
    packing = ["--documents", ",".join(map(str, paths)), "--seq-len", str(SEQ_LEN)]
    report = trace_documents(
        last, _args("trace", str(last), "--step", "5", *packing, "--eos-id", "0",
                    "--packing-seed", str(SEED)),
    )  # fmt: skip
    for pieces in report["batches"][0]["ranks"][0]["pieces"]:
        for piece in pieces:
            rows = pq.read_table(piece["file"]).column("input_ids").to_pylist()
            assert rows[piece["row"]] == documents[piece["document"]]


def test_cli_packing_modes_are_the_dataset_s() -> None:
    from lightning_resumable_data.cli._documents_args import PACKING_MODES as SPELLED
    from lightning_resumable_data.documents.packed import PACKING_MODES

    assert SPELLED == PACKING_MODES


def test_a_mixture_source_is_traced_and_found_by_name(tmp_path: Path) -> None:
    """Two packed sources; ``--documents web=PREFIX`` traces the web samples' pieces, and
    ``lrd find --document`` finds a web document through the mixture's inverse."""
    write_megatron(tmp_path / "web", _documents(60), dtype=np.int32)
    write_megatron(tmp_path / "code", [[7] * 20] * 30, dtype=np.int32)
    web, code = open_megatron(tmp_path / "web"), open_megatron(tmp_path / "code")
    module = ResumableDataModule(
        {
            "web": PackedDataset(web, SEQ_LEN, eos_id=EOS, seed=SEED),
            "code": PackedDataset(code, SEQ_LEN, eos_id=EOS),
        },
        batch_size=4,
        sample_keys=True,
        collate_fn=collate_packed,
    )
    model = Recorder()
    trainer = pl.Trainer(
        accelerator="cpu", devices=1, default_root_dir=tmp_path, logger=False,
        enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, max_epochs=2,
    )  # fmt: skip
    trainer.fit(model, datamodule=module)
    last = tmp_path / "last.ckpt"
    trainer.save_checkpoint(last)
    packing = ["--documents", f"web={tmp_path / 'web'}", "--seq-len", str(SEQ_LEN)]
    packing += ["--eos-id", str(EOS), "--packing-seed", str(SEED)]
    traced = 0
    for step, batches in sorted(model.ledger.items()):
        report = trace_documents(last, _args("trace", str(last), "--step", str(step), *packing))
        (rank,) = report["batches"][0]["ranks"]
        for row, source, pieces in zip(batches[0], rank["sources"], rank["pieces"], strict=True):
            if source != "web":
                assert pieces is None
                continue
            tokens: list[int] = []
            for piece in pieces:
                tokens += web.document(piece["document"])[piece["start"] : piece["stop"]].tolist()
                tokens += [EOS] if piece["eos"] else []
            assert tokens == row, step
            traced += 1
    assert traced > 20
    # find through the mixture's inverse: every step whose rows hold a token of web's
    # document 3 (tokens 3001.., 1000 * d + t + 1), each with the piece's tokens in a row
    found = find_documents(last, _args("find", str(last), "--document", "3", *packing))
    hits = [(h["step"], h["start"], h["stop"]) for h in found["trained"]]
    holding = {
        step
        for step, batches in model.ledger.items()
        for row in batches[0]
        if any(3000 < token <= 3030 for token in row)
    }
    assert {step for step, start, stop in hits if stop > start} == holding, hits
    for step, start, stop in hits:
        piece = [3001 + t for t in range(start, stop)]
        rows = model.ledger[step][0]
        assert any(row[i : i + len(piece)] == piece for row in rows for i in range(len(row)))
    bad = ["--documents", str(tmp_path / "web"), *packing[2:]]
    with pytest.raises(CliError, match=r"the run is a mixture; name the packed source .*code, web"):
        trace_documents(last, _args("trace", str(last), "--step", "0", *bad))
    bogus = ["--documents", f"bogus={tmp_path / 'web'}"]
    with pytest.raises(CliError, match="'bogus' is not a packed source of the run"):
        trace_documents(last, _args("trace", str(last), "--step", "0", *bogus))


def test_a_run_without_packed_documents_is_named_as_such(tmp_path: Path) -> None:
    trainer = pl.Trainer(
        accelerator="cpu", devices=1, default_root_dir=tmp_path, logger=False,
        enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, max_steps=1,
    )  # fmt: skip
    data = ResumableDataModule(RandomDataset(32, 8), batch_size=4)
    trainer.fit(BoringModel(), datamodule=data)
    last = tmp_path / "last.ckpt"
    trainer.save_checkpoint(last)
    with pytest.raises(CliError, match="saved no packing: the run trained no PackedDataset"):
        trace_documents(last, _args("trace", str(last), "--step", "0", "--documents", "x"))


def test_a_run_without_sample_keys_is_traced_with_a_note(tmp_path: Path) -> None:
    """Plain indices: the dataset packs the epoch set_epoch gave it; the trace says so."""
    write_megatron(tmp_path / "corpus", _documents(40), dtype=np.int32)
    dataset = PackedDataset(open_megatron(tmp_path / "corpus"), SEQ_LEN, eos_id=EOS)
    module = ResumableDataModule(dataset, batch_size=4, collate_fn=collate_packed)
    trainer = pl.Trainer(
        accelerator="cpu", devices=1, default_root_dir=tmp_path, logger=False,
        enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, max_steps=2,
    )  # fmt: skip
    trainer.fit(Recorder(), datamodule=module)
    trainer.save_checkpoint(tmp_path / "last.ckpt")
    args = ["trace", str(tmp_path / "last.ckpt"), "--step", "1"]
    report = trace_documents(
        tmp_path / "last.ckpt", _args(*args, "--documents", str(tmp_path / "corpus"))
    )
    assert "sample_keys=False" in report["note"]
