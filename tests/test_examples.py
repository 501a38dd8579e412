"""Every example runs in smoke mode, exits 0, prints what its docstring promises, and no noise.

Every ``examples/*.py`` script runs with ``--smoke`` (except ``cli.py``, run through
LightningCLI, ``demo.py``, which is ``make demo``, and the shared ``_*.py`` helpers). The
examples filter Lightning's known banners and warnings (examples/_common.py); the test runs
them without ``PYTHONWARNINGS`` so that a new banner shows up here.

The examples start in parallel when the module's first test asks for its result (each is
a fresh Python process that imports Lightning; run one after another they would take
most of a minute on a small machine).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
Result = list[subprocess.CompletedProcess[str]]
SMOKE = sorted(
    p.stem
    for p in EXAMPLES.glob("*.py")
    if not p.name.startswith("_") and p.stem not in ("cli", "demo")
)
NOISE = (
    "GPU available",
    "TPU available",
    "Tip:",
    "LeafSpec",
    "dirpath has changed",
    "Warning",
    "validation_step",  # the library itself no longer makes Lightning warn about it
)


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "LRD_EXAMPLES_VERBOSE")
    }
    env["OMP_NUM_THREADS"] = "1"
    return subprocess.run(
        [sys.executable, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=EXAMPLES.parent,
    )


def smoke(name: str) -> Result:
    """An example script with ``--smoke``."""
    return [run(EXAMPLES / f"{name}.py", "--smoke")]


def cli(root: Path) -> Result:
    """A short LightningCLI run, then a resume of it with ``--ckpt_path last``."""
    common = (
        EXAMPLES / "cli.py",
        "fit",
        "--config",
        EXAMPLES / "cli_config.yaml",
        "--data.num_samples=256",
        f"--trainer.default_root_dir={root}",
        "--trainer.enable_progress_bar=false",
    )
    first = run(*common, "--trainer.max_steps=6")
    if first.returncode != 0:
        return [first]
    return [first, run(*common, "--trainer.max_steps=10", "--ckpt_path=last")]


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Future[Result]]]:
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = {name: pool.submit(smoke, name) for name in SMOKE}
        futures["cli"] = pool.submit(cli, tmp_path_factory.mktemp("cli"))
        yield futures


def output(results: dict[str, Future[Result]], name: str) -> list[str]:
    """The stdout of each process of an example, after checking they all exited 0."""
    processes = results[name].result()
    for process in processes:
        assert process.returncode == 0, process.stdout[-2000:] + process.stderr[-4000:]
    return [process.stdout for process in processes]


@pytest.mark.parametrize("name", [*SMOKE, "cli"])
def test_examples_are_quiet_and_keep_their_runs(
    results: dict[str, Future[Result]], name: str
) -> None:
    """A verdict or a report, none of Lightning's banners, and ``lrd inspect`` where it applies."""
    output(results, name)
    for process in results[name].result():
        text = process.stdout + process.stderr
        assert not [n for n in NOISE if n in text], text[-3000:]
        if "lrd inspect" in text:
            command = text.split("lrd inspect ", 1)[1].split()[0]
            assert (EXAMPLES.parent / command).is_file(), command


def test_single_dataset_resumes_with_identical_augmentations(
    results: dict[str, Future[Result]],
) -> None:
    (out,) = output(results, "single_dataset")
    assert "augmented features equal the uninterrupted run's" in out
    assert "Verdict: IDENTICAL" in out
    assert "lrd inspect runs/single_dataset/reference/ckpt/step=20.ckpt" in out
    # the printed command runs as printed, from the clone, without an activated venv
    line = out.split("Look into the checkpoint: ", 1)[1].splitlines()[0]
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PATH"] = "/usr/bin:/bin"
    ran = subprocess.run(
        shlex.split(line), cwd=EXAMPLES.parent, env=env, capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, f"{line}: {ran.stderr[-2000:]}"
    assert "consumed" in ran.stdout


def test_mixture_pretraining_follows_its_phases_across_a_resume(
    results: dict[str, Future[Result]],
) -> None:
    (out,) = output(results, "mixture_pretraining")
    assert "phase 0 (steps 0..19): web 0.60" in out  # exact counts: the weights, realised
    assert "phase 1 (steps 20..29)" in out
    assert "drawn this epoch" in out  # the callback's logged counts
    assert "across the phase change: the batches equal" in out
    # its checkpoint (a phase at step 0, no DataModule weights) inspected: the epoch's plan
    # is computed from the saved phases, not shown as "?"
    path = out.split("Look into the checkpoint: ", 1)[1].split(" inspect ", 1)[1].split()[0]
    shown = subprocess.run(
        [sys.executable, "-m", "lightning_resumable_data.cli", "inspect", path, "--json"],
        cwd=EXAMPLES.parent,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    mixture = json.loads(shown.stdout)["mixture"]
    assert mixture["epoch_totals_unknown"] is None
    assert sum(mixture["epoch_totals"].values()) == json.loads(shown.stdout)["epoch_length"]
    assert "Verdict: IDENTICAL" in out


def test_online_mixing_follows_the_loss_and_resumes(results: dict[str, Future[Result]]) -> None:
    (out,) = output(results, "online_mixing")
    assert "weight changes, every 5 steps once every loss is known" in out
    assert "steps 0..4: web" in out  # realised shares next to the weights in force
    assert "runs/online_mixing/online_mixing.json" in out
    assert "the batches equal the uninterrupted run's" in out
    assert "later weight changes equal its" in out
    assert "Verdict: IDENTICAL" in out


def test_fabric_loop_resumes_to_identical_weights(results: dict[str, Future[Result]]) -> None:
    (out,) = output(results, "fabric_loop")
    assert "resumed at step 30, epoch 1" in out
    assert "losses equal, final weights equal" in out
    assert "Verdict: IDENTICAL" in out


def test_sharded_tokens_resume_and_elastic_resume(results: dict[str, Future[Result]]) -> None:
    (out,) = output(results, "sharded_tokens")
    assert "wrote 11 shards" in out
    assert '"kind": "ShardedDataLoader"' in out  # the data state, printed on resume
    assert "batches: IDENTICAL" in out
    assert "read, 0 padded: exactly once" in out
    assert "Verdict: PASS" in out


def test_cli_trains_from_yaml_and_resumes_from_last(results: dict[str, Future[Result]]) -> None:
    first, resumed = output(results, "cli")
    assert "starting at step 0: data epoch 0, 0 samples of it consumed" in first
    assert "stopped at step 6: data epoch 1, 128 samples of it consumed" in first
    assert "starting at step 6: data epoch 1, 128 samples of it consumed" in resumed
    assert "stopped at step 10: data epoch 2, 128 samples of it consumed" in resumed


def test_megatron_corpus_resumes_a_packed_mixture(results: dict[str, Future[Result]]) -> None:
    (out,) = output(results, "megatron_corpus")
    assert "megatron-core's IndexedDatasetBuilder" in out  # the peer's own writer
    assert "(to epoch 1): the batches and their document boundaries equal" in out
    assert "Verdict: IDENTICAL" in out


def test_make_demo_says_identical(tmp_path: Path) -> None:
    """README: ``make demo`` (``examples/demo.py``) kills a 2-process run with SIGKILL,
    resumes it with ckpt_path and compares batches and final parameters: its verdict, and
    its exit status (0 only when both are identical)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "demo.py")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,  # its runs/demo folder lands here
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    verdict = [line for line in result.stdout.splitlines() if line.startswith("Verdict:")]
    assert verdict, result.stdout[-3000:]
    assert verdict[0].startswith(
        "Verdict: IDENTICAL: nothing replayed, nothing skipped; final parameters bit-identical"
    )
    assert "Compared 24 steps x 16 samples (2 ranks x 8): 24 identical, 0 different." in (
        result.stdout
    )
    assert (tmp_path / "runs" / "demo" / "b" / "ckpt").is_dir()
