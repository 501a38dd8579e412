"""``ResumableDataCallback(skip_steps=...)``: the data of those steps is never read, exactly.

Real ``Trainer`` runs of a ``ResumableDataModule`` as the docs show it, against the same run
without the skip: the skip run trains the baseline's batches minus those of the skipped
steps, in order, over several epochs; the skipped samples are never read (the dataset counts
its reads); a resume, on another batch size, from before or after the skip gives the same
batches; ``lrd trace`` names the skip run's steps.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cut_helpers import fit_counted, samples_of

from lightning_resumable_data import ResumableDataCallback
from lightning_resumable_data.cli import main
from lightning_resumable_data.cli.trace import trace


def test_skipped_steps_are_cut_from_the_baseline_and_never_read(tmp_path: Path) -> None:
    baseline, _ = fit_counted(tmp_path, [])
    assert sorted(baseline.ledger) == list(range(30))  # 10 steps an epoch, 3 epochs
    # steps 8..12 straddle the end of epoch 0; every range is counted as the run without
    # these cuts counts steps (18, 19 are the baseline's), and the model's count goes on
    skipping = ResumableDataCallback(skip_steps=[(8, 13), range(18, 20)])
    model, dataset = fit_counted(tmp_path, [skipping])
    cut = {8, 9, 10, 11, 12, 18, 19}
    expected = samples_of({s: b for s, b in baseline.ledger.items() if s not in cut})
    assert samples_of(model.ledger) == expected
    assert sorted(model.ledger) == list(range(23))
    # nothing but what was trained was read: the skipped samples' reads never happened
    assert sorted(dataset.reads) == sorted(expected)


@pytest.mark.parametrize("resume_batch", [4, 2])
def test_a_resume_keeps_the_skip_on_another_batch_size(tmp_path: Path, resume_batch: int) -> None:
    skipping = [(8, 13)]
    whole, _ = fit_counted(tmp_path / "whole", [ResumableDataCallback(skip_steps=skipping)])
    # stopped before the skip: the resumed fit cuts it (the same code, the same argument)
    before = tmp_path / "before.ckpt"
    first, _ = fit_counted(
        tmp_path / "a", [ResumableDataCallback(skip_steps=skipping)], max_steps=5, save=before
    )
    # ... and stopped after it, at step 9 of the skip run: the checkpoint carries the cut
    after = tmp_path / "after.ckpt"
    second, _ = fit_counted(
        tmp_path / "b", [ResumableDataCallback(skip_steps=skipping)], max_steps=9, save=after
    )
    for ckpt, head in ((before, first), (after, second)):
        rest, _ = fit_counted(
            tmp_path / "r",
            [ResumableDataCallback(skip_steps=skipping)],
            batch_size=resume_batch,
            ckpt=ckpt,
        )
        assert samples_of(head.ledger) + samples_of(rest.ledger) == samples_of(whole.ledger)
    # a checkpoint after the cut resumed without skip_steps keeps it as well
    rest, _ = fit_counted(
        tmp_path / "r2", [ResumableDataCallback()], batch_size=resume_batch, ckpt=after
    )
    assert samples_of(second.ledger) + samples_of(rest.ledger) == samples_of(whole.ledger)


def test_a_skip_of_steps_already_trained_is_refused(tmp_path: Path) -> None:
    ckpt = tmp_path / "five.ckpt"
    fit_counted(tmp_path, [], max_steps=5, save=ckpt)
    with pytest.raises(ValueError, match=r"Cannot skip steps \[2, 4\): the fit starts at step 5"):
        fit_counted(tmp_path, [ResumableDataCallback(skip_steps=[(2, 4)])], ckpt=ckpt)
    with pytest.raises(ValueError, match="is not a step range"):
        ResumableDataCallback(skip_steps=[(4, 2)])


def test_trace_names_what_the_skip_run_trained(tmp_path: Path) -> None:
    last = tmp_path / "last.ckpt"
    model, _ = fit_counted(
        tmp_path, [ResumableDataCallback(skip_steps=[(3, 6), (14, 16)])], save=last
    )
    for step, batches in model.ledger.items():
        (traced,) = trace(last, step)["batches"]
        assert traced["ranks"][0]["indices"] == batches[0], step
    # positions are those of the epoch's whole order: step 3 read what step 6 would have
    (traced,) = trace(last, 3)["batches"]
    assert (traced["consumed"], traced["start"], traced["ranks"][0]["positions"][0]) == (12, 24, 24)


@pytest.mark.parametrize("resume_batch", [4, 2])
def test_lrd_skip_writes_a_checkpoint_that_resumes_past_the_steps(
    tmp_path: Path, resume_batch: int, capsys: pytest.CaptureFixture[str]
) -> None:
    whole, _ = fit_counted(
        tmp_path / "whole", [ResumableDataCallback(skip_steps=[(8, 13), (18, 20)])]
    )
    five = tmp_path / "five.ckpt"
    head, _ = fit_counted(tmp_path / "a", [], max_steps=5, save=five)
    edited = tmp_path / "skipped.ckpt"
    argv = ["skip", str(five), "--steps", "8:13", "--steps", "18:20", "-o", str(edited)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "(step 5; 1 rank x batch 4, accumulating 1)" in out, out
    assert "steps 8 to 12, 18 to 19 cut: epoch 0, positions 32 to 39 (8 samples); epoch 1, " in out
    assert main(["inspect", str(edited)]) == 0  # the cut epoch is shorter, the later ones not
    shown = " ".join(capsys.readouterr().out.split())
    assert "Per rank: 12 samples = 3 batches of 4; epoch 0 counts 8 batches" in shown, shown
    assert "later epochs 5." in shown  # epoch 1 is cut twice: 20 samples left
    assert "left out" not in shown
    rest, dataset = fit_counted(tmp_path / "r", [], batch_size=resume_batch, ckpt=edited)
    assert samples_of(head.ledger) + samples_of(rest.ledger) == samples_of(whole.ledger)
    assert sorted(dataset.reads) == sorted(samples_of(rest.ledger))  # nothing cut was read
    # the same request again (or passed to the callback as well) cuts nothing more
    again = tmp_path / "again.ckpt"
    assert main(["skip", str(edited), "--steps", "8:13", "-o", str(again)]) == 0
    assert "nothing new to cut" in capsys.readouterr().out
    rest, _ = fit_counted(
        tmp_path / "r2",
        [ResumableDataCallback(skip_steps=[(8, 13), (18, 20)])],
        batch_size=resume_batch,
        ckpt=again,
    )
    assert samples_of(head.ledger) + samples_of(rest.ledger) == samples_of(whole.ledger)


def test_lrd_skip_refuses_what_it_cannot_cut(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    five = tmp_path / "five.ckpt"
    fit_counted(tmp_path, [], max_steps=5, save=five)
    out = str(tmp_path / "x.ckpt")
    assert main(["skip", str(five), "--steps", "2:4", "-o", out]) == 2
    assert "step 2 is trained already" in capsys.readouterr().err
    assert main(["skip", str(five), "--steps", "9-12", "-o", out]) == 2
    assert "is not a step range" in capsys.readouterr().err
    assert main(["skip", str(five), "--steps", "9:12", "-o", str(five)]) == 2
    assert "-o must name a new file" in capsys.readouterr().err


def test_lrd_inspect_shows_the_cut(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    last = tmp_path / "last.ckpt"
    fit_counted(tmp_path, [ResumableDataCallback(skip_steps=[(8, 13)])], max_steps=12, save=last)
    assert main(["inspect", str(last)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (
        "the data of steps 8 to 12 is cut (8 samples of epoch 0, 12 samples of epoch 1)" in out
    ), out


def test_overlapping_cuts_are_one_and_an_emptied_epoch_is_refused(tmp_path: Path) -> None:
    baseline, _ = fit_counted(tmp_path, [])
    model, _ = fit_counted(
        tmp_path, [ResumableDataCallback(skip_steps=[(4, 9), (7, 12), (12, 13)])]
    )
    cut = set(range(4, 13))
    assert samples_of(model.ledger) == samples_of(
        {s: b for s, b in baseline.ledger.items() if s not in cut}
    )
    with pytest.raises(ValueError, match="leaves epoch 1 no batch"):
        fit_counted(tmp_path, [ResumableDataCallback(skip_steps=[(10, 20)])])  # all of epoch 1
    five = tmp_path / "five.ckpt"
    fit_counted(tmp_path, [], max_steps=5, save=five)
    with pytest.raises(ValueError, match=r"leaves epoch 0 no batch \(from where the fit starts"):
        fit_counted(tmp_path, [ResumableDataCallback(skip_steps=[(5, 12)])], ckpt=five)  # its rest


@pytest.mark.parametrize("limit", [6, 0.6])
def test_under_limit_train_batches_a_cut_epoch_trains_the_limit_from_what_remains(
    tmp_path: Path, limit: float
) -> None:
    whole, _ = fit_counted(tmp_path, [], max_epochs=2)  # the epochs' whole orders (10 steps each)
    orders = [samples_of({s: whole.ledger[s] for s in range(10 * e, 10 * e + 10)}) for e in (0, 1)]
    model, _ = fit_counted(
        tmp_path,
        [ResumableDataCallback(skip_steps=[(3, 5)])],
        max_epochs=2,
        limit_train_batches=limit,
    )
    # an int or a fraction alike: the limit's 6 batches of the whole epoch, from what remains
    assert samples_of(model.ledger) == orders[0][:12] + orders[0][20:32] + orders[1][:24]


def test_a_cut_after_a_resume_between_two_batches_of_the_new_layout(tmp_path: Path) -> None:
    """Resumed at sample 20 with batch 8, step 6 reads 28..35: that is what a cut removes."""
    five = tmp_path / "five.ckpt"
    fit_counted(tmp_path, [], max_steps=5, save=five)  # batch 4: sample 20 of epoch 0
    plain, _ = fit_counted(tmp_path, [], batch_size=8, ckpt=five)
    cut, reads = fit_counted(
        tmp_path, [ResumableDataCallback(skip_steps=[(6, 7)])], batch_size=8, ckpt=five
    )
    assert samples_of(cut.ledger) == samples_of({s: b for s, b in plain.ledger.items() if s != 6})
    assert not set(plain.ledger[6][0]) & set(reads.reads[: len(plain.ledger[5][0]) + 4])


def test_a_second_cut_in_the_same_epoch_reports_positions_of_the_whole_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    five = tmp_path / "five.ckpt"
    fit_counted(tmp_path, [], max_steps=5, save=five)
    first, second = tmp_path / "one.ckpt", tmp_path / "two.ckpt"
    assert main(["skip", str(five), "--steps", "6:7", "-o", str(first)]) == 0
    capsys.readouterr()
    assert main(["skip", str(first), "--steps", "7:8", "-o", str(second)]) == 0
    # step 7 of the run that made `first` reads what step 8 of the run without it did
    assert "steps 7 cut: epoch 0, positions 32 to 35 (4 samples)" in capsys.readouterr().out
    assert main(["skip", str(first), "--steps", "6:8", "-o", str(second)]) == 2
    assert "overlaps the cut of steps (6, 7) this run made before" in capsys.readouterr().err
    assert main(["skip", str(five), "--steps", "6:7", "-o", str(tmp_path / "no" / "x.ckpt")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_a_cut_past_the_last_epoch_is_accepted(tmp_path: Path) -> None:
    baseline, _ = fit_counted(tmp_path, [], max_epochs=2)
    model, _ = fit_counted(tmp_path, [ResumableDataCallback(skip_steps=[(15, 100)])], max_epochs=2)
    assert samples_of(model.ledger) == samples_of(
        {s: b for s, b in baseline.ledger.items() if s < 15}
    )
