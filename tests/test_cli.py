"""The ``lrd`` command line, on real Lightning checkpoints and real config files.

The checkpoints come from tests/scripts/lightning_train.py (a real Trainer on CPU), run once
per module: one over a single dataset, one over a mixture with a phase at step 4. Commands
run in-process through ``main(argv)``; one test runs the installed ``lrd`` script.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

from lightning_resumable_data.cli import main

SCRIPT = Path(__file__).parent / "scripts" / "lightning_train.py"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def train(out: Path, *args: str) -> Path:
    """Run the training script; return its checkpoint folder (``step=N.ckpt`` files)."""
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), *args],
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return out / "ckpt"


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """96 samples, batch 4, seed 5: 24 steps an epoch, 25 steps, a checkpoint after each."""
    return train(tmp_path_factory.mktemp("single"), "--max-steps", "25")


@pytest.fixture(scope="module")
def mixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """web 64 / code 24 / math 12 at 0.6/0.3/0.1, then 0.1/0.2/0.7 from step 4; batch 4."""
    out = tmp_path_factory.mktemp("mixture")
    return train(out, "--max-steps", "10", "--mixture", "--phase-step", "4")


def lrd(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def inspect_json(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> dict[str, Any]:
    code, out, err = lrd(capsys, "inspect", *argv, "--json")
    assert code == 0, err
    report: dict[str, Any] = json.loads(out)
    return report


def load(path: Path) -> dict[str, Any]:
    checkpoint: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=False)
    return checkpoint


def one_line_error(err: str, *parts: str) -> None:
    """An error is one line on stderr, with a hint, and no traceback."""
    assert err.endswith("\n"), err
    assert err.count("\n") == 1, err
    assert "Traceback" not in err
    assert "HINT:" in err
    for part in parts:
        assert part in err, err


# -- inspect: a single dataset ----------------------------------------------------------------


def test_inspect_single_text(capsys: pytest.CaptureFixture[str], single: Path) -> None:
    code, out, err = lrd(capsys, "inspect", single / "step=10.ckpt")
    assert code == 0, err
    assert "data state   ResumableDataModule (loader resume mode: position)" in out
    assert (
        "position     epoch 0: 40 of 96 samples consumed (41.7%), 10 batches trained; "
        "global step 10"
    ) in out
    assert "saved with   world size 1 x batch size 4 = 4 samples per step" in out
    assert "DistributedSampler: dataset_length 96, seed 5, shuffle True" in out
    text = " ".join(out.split())  # paragraphs are wrapped
    assert "under world size 1 x batch size 4 (the saved layout): exact." in text
    assert "continues at sample 40 of epoch 0" in text
    assert "Per rank: 56 samples = 14 batches of 4; epoch 0 counts 24 batches" in text


def test_inspect_single_json(capsys: pytest.CaptureFixture[str], single: Path) -> None:
    report = inspect_json(capsys, single / "step=3.ckpt")
    assert report["found_at"] == "ResumableDataModule"
    assert (report["epoch"], report["consumed"], report["batches_trained"]) == (0, 12, 3)
    assert (report["global_step"], report["world_size"], report["batch_size"]) == (3, 1, 4)
    assert report["epoch_length"] == 96
    assert report["sampler"]["kind"] == "DistributedSampler"
    assert report["sampler"]["fingerprint"] == {
        "dataset_length": 96,
        "seed": 5,
        "shuffle": True,
        "algorithm": "randperm",
        "drop_last": False,
    }
    assert report["mixture"] is None
    assert report["callback"] is True
    resume = report["resume"]
    assert (resume["mode"], resume["ok"], resume["changes"]) == ("exact", True, [])
    assert (resume["remaining_samples"], resume["samples_per_rank"]) == (84, 84)
    assert (resume["batches_left"], resume["epoch_batches"]) == (21, 24)


def test_inspect_elastic(capsys: pytest.CaptureFixture[str], single: Path) -> None:
    ckpt = single / "step=10.ckpt"
    code, out, err = lrd(capsys, "inspect", ckpt, "--world-size", "3", "--batch-size", "5")
    assert code == 0, err
    text = " ".join(out.split())
    assert "under world size 3 x batch size 5: elastic (world size 1 -> 3, batch size 4 -> 5)" in (
        text
    )
    assert "The remaining 56 samples of epoch 0 are spread over 3 ranks" in text
    assert "Per rank: 19 samples = 4 batches of 5 (the last of 4)" in text
    assert "1 padding sample repeats an earlier one" in text
    resume = inspect_json(capsys, ckpt, "--world-size", "3", "--batch-size", "5")["resume"]
    assert resume["mode"] == "elastic"
    assert resume["ok"]
    assert (resume["samples_per_rank"], resume["batches_left"], resume["padding"]) == (19, 4, 1)
    # 40 samples done = 2 batches of 3 x 5 in the new layout, then 4 more of 5 per rank
    assert (resume["batches_done"], resume["epoch_batches"], resume["batches_per_epoch"]) == (
        2,
        6,
        7,
    )


def test_inspect_at_an_epoch_end(capsys: pytest.CaptureFixture[str], single: Path) -> None:
    """After the last batch of an epoch the position is the start of the next one."""
    code, out, err = lrd(capsys, "inspect", single / "step=24.ckpt", "--world-size", "5")
    assert code == 0, err
    assert "position     epoch 1: 0 of 96 samples consumed (0.0%), 0 batches trained" in out
    text = " ".join(out.split())
    assert "The remaining 96 samples of epoch 1 are spread over 5 ranks" in text
    assert (
        "Per rank: 20 samples = 5 batches of 4; epoch 1 counts 5 batches in this layout (0 done)"
        in (text)
    )
    assert "4 padding samples repeat earlier ones" in text
    code, out, err = lrd(capsys, "inspect", single / "step=25.ckpt")
    assert "position     epoch 1: 4 of 96 samples consumed (4.2%), 1 batch trained" in out


def test_inspect_predicts_a_real_elastic_resume(
    capsys: pytest.CaptureFixture[str], single: Path, tmp_path: Path
) -> None:
    """What inspect says about batch size 5 is what the Trainer then does."""
    ckpt = single / "step=10.ckpt"
    resume = inspect_json(capsys, ckpt, "--batch-size", "5")["resume"]
    assert (resume["remaining_samples"], resume["batches_left"], resume["last_batch"]) == (
        56,
        12,
        1,
    )
    train(tmp_path, "--ckpt", str(ckpt), "--batch-size", "5", "--max-steps", "22")
    lines = [json.loads(line) for line in (tmp_path / "ids_rank0.jsonl").read_text().splitlines()]
    epoch0 = [line for line in lines if line["epoch"] == 0]
    assert len(epoch0) == resume["batches_left"]
    assert [len(line["ids"]) for line in epoch0][-1] == resume["last_batch"]
    resumed = [i for line in epoch0 for i in line["ids"]]
    first_lines = (single.parent / "ids_rank0.jsonl").read_text().splitlines()
    first = [json.loads(line) for line in first_lines]
    trained = [i for line in first if line["step"] < 10 for i in line["ids"]]
    assert len(resumed) == len(set(resumed)) == resume["remaining_samples"]
    assert sorted(resumed + trained) == list(range(96))


# -- inspect: a mixture with a phase ----------------------------------------------------------


def test_inspect_mixture_before_phase(capsys: pytest.CaptureFixture[str], mixture: Path) -> None:
    code, out, err = lrd(capsys, "inspect", mixture / "step=2.ckpt")
    assert code == 0, err
    assert "position     epoch 0: 8 of 100 samples consumed (8.0%), 2 batches trained" in out
    assert "MixtureSampler: seed 5, samples_per_epoch 100, drop_last True" in out
    assert "sources      web 64, code 24, math 12" in out
    assert "mixture      initial weights in force since sample 0 of epoch 0" in out
    assert "web        0.6  60.0%" in out
    assert (
        "next         phase 1 (start_step 4) from sample 16 of epoch 0: web 10.0%, code 20.0%, "
        "math 70.0%"
    ) in out


def test_inspect_mixture_in_phase(capsys: pytest.CaptureFixture[str], mixture: Path) -> None:
    ckpt = mixture / "step=6.ckpt"
    code, out, err = lrd(capsys, "inspect", ckpt)
    assert code == 0, err
    assert "mixture      phase 1 (start_step 4) in force since sample 16 of epoch 0" in out
    assert "next         no further phase (2 in the schedule)" in out
    report = inspect_json(capsys, ckpt)
    phase = report["mixture"]["phase"]
    assert (phase["index"], phase["start_step"], phase["epoch"], phase["position"]) == (
        1,
        4,
        0,
        16,
    )
    assert phase["weights"] == {"web": 0.1, "code": 0.2, "math": 0.7}
    assert phase["shares"] == pytest.approx({"web": 0.1, "code": 0.2, "math": 0.7})
    saved = load(ckpt)["ResumableDataModule"]["train_loader"]["sampler"]["source_counts"]
    drawn = report["mixture"]["drawn"]
    assert drawn == saved
    assert sum(drawn.values()) == report["consumed"] == 24
    totals = report["mixture"]["epoch_totals"]
    assert sum(totals.values()) == 100
    assert all(totals[n] >= drawn[n] for n in drawn)
    rows = [line.split() for line in out.splitlines() if line.startswith("  ")]
    for name, value in drawn.items():
        assert [name, *next(r for r in rows if r[0] == name)[1:4]] == [
            name,
            f"{phase['weights'][name]:g}",
            f"{100 * phase['weights'][name]:.1f}%",
            str(value),
        ]
    assert report["resume"]["mode"] == "exact"
    assert report["resume"]["ok"]


def test_inspect_mixture_elastic_same_global_batch(
    capsys: pytest.CaptureFixture[str], mixture: Path
) -> None:
    ckpt = mixture / "step=2.ckpt"
    resume = inspect_json(capsys, ckpt, "--world-size", "2", "--batch-size", "2")["resume"]
    assert resume["ok"]
    assert resume["mode"] == "elastic"
    assert resume["changes"] == ["world size 1 -> 2", "batch size 4 -> 2"]
    assert (resume["remaining_samples"], resume["samples_per_rank"]) == (92, 46)


def test_inspect_mixture_elastic_keeps_the_phase_step(
    capsys: pytest.CaptureFixture[str], mixture: Path
) -> None:
    """A new global batch before the step-4 phase: an elastic resume that re-places it."""
    ckpt = mixture / "step=2.ckpt"
    code, out, err = lrd(capsys, "inspect", ckpt, "--batch-size", "2")
    assert code == 0, err
    text = " ".join(out.split())
    assert "under world size 1 x batch size 2: elastic" in text
    resume = inspect_json(capsys, ckpt, "--batch-size", "2")["resume"]
    assert resume["ok"] is True


def test_inspect_shows_online_changes_as_such(
    capsys: pytest.CaptureFixture[str], mixture: Path, tmp_path: Path
) -> None:
    """Online changes (decided during training) are labelled so, and are not counted as phases.

    The step-6 checkpoint (24 samples consumed, phase 1 since sample 16), as a run with online
    mixing saves it: a change from sample 24 and one decided but ahead, from sample 40 (each
    cut segment keeps its planned end, 100).
    """
    checkpoint = load(mixture / "step=6.ckpt")
    sampler = checkpoint["ResumableDataModule"]["train_loader"]["sampler"]
    schedule = sampler["schedule"]
    schedule[-1]["plan_end"] = 100
    online = {"epoch": 0, "temperature": 1.0, "kind": "online"}
    schedule.append(online | {"position": 24, "weights": [0.5, 0.25, 0.25], "plan_end": 100})
    schedule.append(online | {"position": 40, "weights": [0.0, 0.5, 0.5], "plan_end": None})
    path = tmp_path / "online.ckpt"
    torch.save(checkpoint, path)
    code, out, err = lrd(capsys, "inspect", path)
    assert code == 0, err
    assert "mixture      online change in force since sample 24 of epoch 0" in out
    assert "next         online change from sample 40 of epoch 0: web 0.0%" in out
    report = inspect_json(capsys, path)["mixture"]
    assert (report["phases"], report["online_changes"]) == (2, 2)
    assert report["phase"]["kind"] == "online"
    assert report["phase"]["start_step"] is None
    assert sum(report["epoch_totals"].values()) == 100  # the sampler loaded the schedule
    del schedule[-1]  # the last change in force: nothing after it
    torch.save(checkpoint, path)
    code, out, err = lrd(capsys, "inspect", path)
    assert "no further change (2 phases, 1 online change in the schedule)" in out


def test_inspect_finds_loader_state_without_datamodule(
    capsys: pytest.CaptureFixture[str], mixture: Path, tmp_path: Path
) -> None:
    """A Fabric-style checkpoint: only the loader's state, under a key of the user's."""
    loader = load(mixture / "step=6.ckpt")["ResumableDataModule"]["train_loader"]
    path = tmp_path / "fabric.ckpt"
    torch.save({"model": {"w": torch.zeros(2)}, "step": 6, "data": loader}, path)
    report = inspect_json(capsys, path, "--world-size", "4", "--batch-size", "1")
    assert report["found_at"] == "data"
    assert report["mixture"]["phase"]["label"] == "weight change 1"
    assert report["mixture"]["drawn"] == loader["sampler"]["source_counts"]
    assert report["resume"]["ok"]
    assert report["resume"]["mode"] == "elastic"
    assert any("no ResumableDataModule state" in w for w in report["warnings"])


def test_inspect_sharded_checkpoint_folder(
    capsys: pytest.CaptureFixture[str], single: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "sharded.ckpt"
    folder.mkdir()
    shutil.copy(single / "step=5.ckpt", folder / "meta.pt")
    report = inspect_json(capsys, folder)
    assert (report["consumed"], report["batches_trained"]) == (20, 5)


# -- plan -------------------------------------------------------------------------------------

MIXTURE_YAML = """\
# the mixture of tests/scripts/lightning_train.py --mixture --phase-step 4
sources: {web: 64, code: 24, math: 12}
weights: {web: 0.6, code: 0.3, math: 0.1}
temperature: 1.0
batch_size: 4
world_size: 1
max_steps: 10
seed: 5
phases:
  - start_step: 4
    weights: {web: 0.1, code: 0.2, math: 0.7}
"""


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


def test_plan_table(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = write(tmp_path / "mix.yaml", MIXTURE_YAML)
    code, out, err = lrd(capsys, "plan", config)
    assert code == 0, err
    assert "step         batch 4 x 1 ranks = 4 samples (40 in all)" in out
    assert "epoch        100 samples = 25 steps; the run covers 0.40 epochs" in out
    rows = [line.split() for line in out.splitlines()]
    assert ["0", "initial", "0-3", "16", "1", "web", "0.6", "60.0%", "9"] in rows
    assert ["code", "0.3", "30.0%", "5"] in rows
    assert ["1", "start_step", "4", "4-9", "24", "1", "web", "0.1", "10.0%", "2"] in rows
    assert ["math", "0.7", "70.0%", "18"] in rows  # where phase 1 stops depends on the seed
    assert ["math", "12", "20", "1.67"] in rows  # 2 + 18 drawn from 12 samples


def test_plan_matches_the_real_run(
    capsys: pytest.CaptureFixture[str], mixture: Path, tmp_path: Path
) -> None:
    """The plan's counts up to step 6 are what the real run had drawn at its step 6."""
    config = write(tmp_path / "mix.yaml", MIXTURE_YAML.replace("max_steps: 10", "max_steps: 6"))
    code, out, err = lrd(capsys, "plan", config, "--json")
    assert code == 0, err
    plan = json.loads(out)
    drawn = {name: source["drawn"] for name, source in plan["sources"].items()}
    saved = load(mixture / "step=6.ckpt")["ResumableDataModule"]["train_loader"]["sampler"]
    assert drawn == saved["source_counts"]
    assert [p["steps"] for p in plan["phases"]] == [[0, 4], [4, 6]]


def test_plan_json_across_epochs(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = write(
        tmp_path / "long.json",
        json.dumps(
            {
                "sources": {"a": 1000, "b": 200},
                "weights": {"a": 1, "b": 1},
                "temperature": 2.0,
                "batch_size": 8,
                "world_size": 4,
                "max_steps": 100,
                "samples_per_epoch": 320,
                "phases": [
                    {"start_epoch": 5, "weights": {"a": 1, "b": 0}},
                    {"start_epoch": 9, "weights": {"a": 3, "b": 1}, "temperature": 0.5},
                ],
            }
        ),
    )
    code, out, err = lrd(capsys, "plan", config, "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert (plan["samples_per_step"], plan["batches_per_epoch"], plan["epochs"]) == (32, 10, 10)
    assert [p["steps"] for p in plan["phases"]] == [[0, 50], [50, 90], [90, 100]]
    initial, only_a, sharp = plan["phases"]
    assert initial["drawn"] == {"a": 800, "b": 800}  # equal weights: 5 epochs of 160 each
    assert only_a["drawn"] == {"a": 1280, "b": 0}
    assert sharp["shares"] == pytest.approx({"a": 0.9, "b": 0.1})  # 3**2 : 1**2
    assert sharp["drawn"] == {"a": 288, "b": 32}
    assert plan["sources"]["b"] == {"size": 200, "drawn": 832, "epochs": 4.16}
    assert sum(s["drawn"] for s in plan["sources"].values()) == 100 * 32


def test_plan_png(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    config = write(tmp_path / "mix.yml", MIXTURE_YAML)
    png = tmp_path / "plan.png"
    code, out, err = lrd(capsys, "plan", config, "--png", png)
    assert code == 0, err
    assert f"wrote {png}" in out
    assert png.read_bytes()[:8] == PNG_MAGIC
    assert png.stat().st_size > 10_000


def test_plan_png_without_matplotlib(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.patches"):
        monkeypatch.setitem(sys.modules, name, None)  # import raises ImportError
    config = write(tmp_path / "mix.yaml", MIXTURE_YAML)
    png = tmp_path / "plan.png"
    code, out, err = lrd(capsys, "plan", config, "--png", png)
    assert code == 1
    assert "web        0.6  60.0%" in out  # the table comes first, the plot needs an extra
    one_line_error(err, "lrd plan: error: --png needs matplotlib", "[cli]")
    assert not png.exists()


def test_plan_png_unwritable(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    config = write(tmp_path / "mix.yaml", MIXTURE_YAML)
    code, _, err = lrd(capsys, "plan", config, "--png", tmp_path / "no" / "such" / "dir.png")
    assert code == 1
    one_line_error(err, "cannot write")


# -- bad input --------------------------------------------------------------------------------


def test_inspect_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = lrd(capsys, "inspect", tmp_path / "nope.ckpt")
    assert (code, out) == (2, "")
    one_line_error(err, "lrd inspect: error: no such file:", "nope.ckpt")


def test_inspect_folder_without_checkpoint(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = lrd(capsys, "inspect", tmp_path)
    assert code == 2
    one_line_error(err, "is a directory, not a checkpoint file", "meta.pt")


def test_inspect_not_a_checkpoint(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write(tmp_path / "notes.ckpt", "just some text\n")
    code, _, err = lrd(capsys, "inspect", path)
    assert code == 2
    one_line_error(err, "is not a checkpoint torch.load can read")
    path = tmp_path / "list.pt"
    torch.save([1, 2, 3], path)
    code, _, err = lrd(capsys, "inspect", path)
    assert code == 2
    one_line_error(err, "is not a checkpoint: it holds a list, not a dict")


def test_inspect_without_data_state(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "plain.ckpt"
    torch.save({"state_dict": {"w": torch.ones(1)}, "epoch": 0, "global_step": 3}, path)
    code, out, err = lrd(capsys, "inspect", path)
    assert (code, out) == (2, "")
    one_line_error(
        err,
        f"no lightning-resumable-data state in {path}: was it written with "
        "ResumableDataModule? HINT:",
    )


def test_inspect_module_state_without_loader(
    capsys: pytest.CaptureFixture[str], single: Path, tmp_path: Path
) -> None:
    checkpoint = load(single / "step=1.ckpt")
    del checkpoint["ResumableDataModule"]["train_loader"]
    del checkpoint["loops"]
    path = tmp_path / "early.ckpt"
    torch.save(checkpoint, path)
    code, _, err = lrd(capsys, "inspect", path)
    assert code == 2
    one_line_error(err, "holds the ResumableDataModule configuration but no training-loader")


def test_inspect_malformed_state(
    capsys: pytest.CaptureFixture[str], single: Path, tmp_path: Path
) -> None:
    checkpoint = load(single / "step=1.ckpt")
    del checkpoint["ResumableDataModule"]["train_loader"]["consumed"]
    path = tmp_path / "broken.ckpt"
    torch.save(checkpoint, path)
    code, _, err = lrd(capsys, "inspect", path)
    assert code == 2
    one_line_error(err, "is malformed (KeyError: 'consumed')")


def test_inspect_needs_a_missing_module(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checkpoints can pickle user objects; without their module: exit 1 and say so."""
    (tmp_path / "lrd_user_module.py").write_text("class Hparams:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import lrd_user_module  # type: ignore[import-not-found]

    path = tmp_path / "custom.ckpt"
    torch.save({"hyper_parameters": lrd_user_module.Hparams()}, path)
    monkeypatch.delitem(sys.modules, "lrd_user_module")
    (tmp_path / "lrd_user_module.py").unlink()
    code, _, err = lrd(capsys, "inspect", path, "--unsafe-unpickle")
    assert code == 1
    one_line_error(err, "cannot unpickle", "No module named 'lrd_user_module'")


class _RunsCode:
    """What a hostile checkpoint holds: unpickling it calls ``Path.touch`` on a file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.marker,))


def test_inspect_never_runs_code_from_the_file_by_default(
    capsys: pytest.CaptureFixture[str], single: Path, tmp_path: Path
) -> None:
    checkpoint = load(single / "step=1.ckpt")
    marker = tmp_path / "ran"
    checkpoint["hyper_parameters"] = {"config": _RunsCode(marker)}
    path = tmp_path / "downloaded.ckpt"
    torch.save(checkpoint, path)
    code, out, err = lrd(capsys, "inspect", path)
    assert (code, out) == (2, "")
    one_line_error(err, "downloaded.ckpt holds ", "only a full unpickle", "--unsafe-unpickle")
    assert not marker.exists()
    code, out, _ = lrd(capsys, "inspect", path, "--unsafe-unpickle")  # the user trusts it
    assert code == 0
    assert "consumed" in out
    assert marker.exists()


def test_inspect_reads_saved_hyperparameters_without_a_full_unpickle(
    capsys: pytest.CaptureFixture[str], single: Path, tmp_path: Path
) -> None:
    checkpoint = load(single / "step=1.ckpt")
    # as Lightning writes save_hyperparameters(): dict(hparams)
    checkpoint["hyper_parameters"] = {"lr": 0.1, "layers": [2, 3], "name": "run", "tied": None}
    path = tmp_path / "hparams.ckpt"
    torch.save(checkpoint, path)
    assert inspect_json(capsys, path)["consumed"] == 4


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["inspect", "x.ckpt", "--world-size", "0"], "argument --world-size: 0 must be >= 1"),
        (["inspect", "x.ckpt", "--batch-size", "two"], "'two' is not an integer"),
        ([], "the following arguments are required: COMMAND"),
        (["plan"], "the following arguments are required: CONFIG"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
    ],
)
def test_usage_errors(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    code, out, err = lrd(capsys, *argv)
    assert (code, out) == (2, "")
    assert message in err
    assert "usage: lrd" in err


BAD_CONFIGS = [
    ("missing.yaml", None, "does not exist"),
    ("bad.yaml", "sources: {web: 1\nbatch_size: [", "is not valid YAML"),
    ("bad.json", '{"sources": {"web": 1},}', "is not valid JSON: Expecting property name"),
    ("list.yaml", "- 1\n- 2\n", "the config must be a mapping of keys, got list"),
    (
        "unknown.yaml",
        "sources: {a: 1}\nbatch_size: 1\nmax_steps: 1\nlr: 3\n",
        "got an unknown argument lr=; remove it.",
    ),
    ("required.yaml", "sources: {a: 1}\nbatch_size: 1\n", "missing required keys ['max_steps']"),
    (
        "batch.yaml",
        "sources: {a: 10}\nbatch_size: abc\nmax_steps: 1\n",
        "batch_size='abc' must be an int, got str",
    ),
    (
        "zero.yaml",
        "sources: {a: 10}\nbatch_size: 0\nmax_steps: 1\n",
        "batch_size=0 must be >= 1",
    ),
    (
        "size.yaml",
        "sources: {a: -3}\nbatch_size: 1\nmax_steps: 1\n",
        "sources['a']=-3 must be >= 0",
    ),
    (
        "temperature.yaml",
        "sources: {a: 10}\nbatch_size: 1\nmax_steps: 1\ntemperature: -1\n",
        "temperature=-1 must be > 0",
    ),
    (
        "weights.yaml",
        "sources: {a: 10, b: 5}\nweights: {a: 1, c: 2}\nbatch_size: 1\nmax_steps: 1\n",
        "weights must name every source of the mixture ['a', 'b'] and no other; unknown: ['c']",
    ),
    (
        "negative.yaml",
        "sources: {a: 10, b: 5}\nweights: {a: 1, b: -2}\nbatch_size: 1\nmax_steps: 1\n",
        "weights {'a': 1.0, 'b': -2.0} must be >= 0",
    ),
    (
        "phase_source.yaml",
        "sources: {a: 10}\nbatch_size: 1\nmax_steps: 1\n"
        "phases: [{start_step: 2, weights: {a: 1, wiki: 1}}]\n",
        "weights must name every source of the mixture ['a'] and no other; unknown: ['wiki']",
    ),
    (
        "phase_start.yaml",
        "sources: {a: 10}\nbatch_size: 1\nmax_steps: 1\n"
        "phases: [{start_step: 2, start_epoch: 1, weights: {a: 1}}]\n",
        "phases[0]: MixturePhase(start_step=2, start_epoch=1) needs exactly one of start_step",
    ),
    (
        "phase_order.yaml",
        "sources: {a: 10}\nbatch_size: 1\nmax_steps: 1\n"
        "phases: [{start_step: 5, weights: {a: 1}}, {start_step: 3, weights: {a: 2}}]\n",
        "phases must start in strictly increasing order, got starts [5, 3]",
    ),
    (
        "phase_key.yaml",
        "sources: {a: 10}\nbatch_size: 1\nmax_steps: 1\n"
        "phases: [{start_step: 5, weight: {a: 1}}]\n",
        "phases[0]: MixturePhase() got an unknown argument weight=; did you mean weights=?",
    ),
    (
        "all_zero.yaml",
        "sources: {a: 10, b: 1}\nweights: {a: 0, b: 0}\nbatch_size: 1\nmax_steps: 1\n",
        "are all zero",
    ),
]


@pytest.mark.parametrize(("name", "text", "message"), BAD_CONFIGS, ids=[c[0] for c in BAD_CONFIGS])
def test_plan_bad_config(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, text: str | None, message: str
) -> None:
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    code, out, err = lrd(capsys, "plan", path)
    assert (code, out) == (2, "")
    one_line_error(err, "lrd plan: error:", message)


# -- the installed script ---------------------------------------------------------------------


def test_lrd_script(single: Path) -> None:
    script = Path(sys.executable).with_name("lrd")
    if not script.exists():
        pytest.skip("the lrd script is not installed: pip install -e .")
    result = subprocess.run(
        [str(script), "inspect", str(single / "step=10.ckpt"), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["epoch"], report["consumed"], report["resume"]["mode"]) == (0, 40, "exact")


@pytest.mark.parametrize("flag", ["--version", "--help"])
def test_version_and_help_do_not_import_torch(flag: str) -> None:
    """``lrd --version`` and ``--help`` answer without importing torch (well under a second)."""
    code = (
        "import sys\n"
        "from lightning_resumable_data.cli import main\n"
        f"main([{flag!r}])\n"
        "print(sorted(m for m in ('torch', 'lightning', 'numpy') if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stdout
