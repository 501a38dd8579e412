"""``lrd plan`` is arithmetic: it imports neither torch nor Lightning, and counts as a real run.

``draws`` rebuilds the mixture plan the data module gives its sampler without torch; these
tests hold it equal to the real data module's sampler and loader (schedule, epoch layout,
counts), over generated configs, and run ``lrd plan`` in a fresh interpreter to check what
it imported and how long it took.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from lightning_resumable_data.cli.plan import draws, load_config
from lightning_resumable_data.lightning.plan import PlanConfig
from lightning_resumable_data.samplers.mixture import MixtureSampler

CONFIG = """\
sources: {web: 1000000, code: 200000, math: 50000}
weights: {web: 0.7, code: 0.2, math: 0.1}
temperature: 2.0
batch_size: 32
world_size: 8
max_steps: 20000
samples_per_epoch: 1048576
accumulate_grad_batches: 2
phases:
  - start_step: 6000
    weights: {web: 0.5, code: 0.3, math: 0.2}
  - start_step: 18000
    weights: {web: 0.2, code: 0.3, math: 0.5}
"""

_PROBE = """\
import json, sys, time
start = time.perf_counter()
from lightning_resumable_data.cli import main
code = main(["plan", sys.argv[1], "--json"])
seconds = time.perf_counter() - start
heavy = sorted(m for m in ("torch", "lightning", "pytorch_lightning") if m in sys.modules)
print(json.dumps({"code": code, "seconds": seconds, "heavy": heavy}), file=sys.stderr)
"""


def test_lrd_plan_imports_neither_torch_nor_lightning(tmp_path: Path) -> None:
    """The documented example config, planned in a fresh interpreter: no torch, in < 1 s."""
    config = tmp_path / "mixture.yaml"
    config.write_text(CONFIG)
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    probe = json.loads(done.stderr.strip().splitlines()[-1])
    assert probe["code"] == 0, done.stderr
    assert probe["heavy"] == [], f"lrd plan imported {probe['heavy']}"
    plan = json.loads(done.stdout)
    assert sum(s["drawn"] for s in plan["sources"].values()) == 20000 * 2 * 32 * 8
    assert probe["seconds"] < 1.0, f"lrd plan took {probe['seconds']:.2f} s"


def test_lrd_plan_command_answers_fast(tmp_path: Path) -> None:
    """The installed ``lrd`` script, start-up included, as a user times it."""
    config = tmp_path / "mixture.yaml"
    config.write_text(CONFIG)
    lrd = Path(sys.executable).with_name("lrd")
    if not lrd.exists():
        pytest.skip(f"no lrd script next to {sys.executable}")
    start = time.perf_counter()
    done = subprocess.run([str(lrd), "plan", str(config)], capture_output=True, text=True)
    seconds = time.perf_counter() - start
    assert done.returncode == 0, done.stderr
    assert "phase" in done.stdout
    assert seconds < 3.0, f"lrd plan took {seconds:.2f} s (imports: a regression?)"


def _real(config: PlanConfig) -> tuple[MixtureSampler, int]:
    loader = config.datamodule().train_dataloader()
    sampler = loader.position_sampler
    assert isinstance(sampler, MixtureSampler)
    return sampler, len(loader)


def _same_as_the_data_module(config: PlanConfig) -> str:
    """Compare; return what happened (for hypothesis's statistics)."""
    refused: ValueError | TypeError | None
    try:
        sampler, batches = _real(config)
    except (ValueError, TypeError) as error:
        refused = error
    else:
        refused = None
    if refused is not None:
        with pytest.raises(type(refused)) as raised:
            draws(config)
        assert str(raised.value) == str(refused)
        return f"refused: {type(refused).__name__}"
    found = draws(config)
    assert found.plan.schedule == sampler.schedule
    assert (found.epoch_length, found.per_rank, found.batches) == (
        sampler.epoch_length,
        len(sampler),
        batches,
    )
    for epoch in sorted({0, 1, *(e["epoch"] for e in sampler.schedule)}):
        for consumed in (0, found.epoch_length // 3, found.epoch_length):
            expected = list(sampler.source_counts(consumed, epoch).values())
            assert found.plan.counts(epoch, consumed).tolist() == expected
    return f"planned, {len(sampler.schedule)} schedule entries"


def _phase(names: list[str], by_step: bool) -> st.SearchStrategy[dict[str, Any]]:
    weights = st.lists(st.integers(0, 5), min_size=len(names), max_size=len(names)).filter(any)
    start = (
        st.fixed_dictionaries({"start_step": st.integers(0, 40)})
        if by_step
        else st.fixed_dictionaries({"start_epoch": st.integers(0, 3)})
    )
    return st.tuples(start, weights, st.sampled_from([0.5, 1.0, 3.0])).map(
        lambda t: {**t[0], "weights": dict(zip(names, t[1], strict=True)), "temperature": t[2]}
    )


@st.composite
def _configs(draw: st.DrawFn) -> PlanConfig:
    names = ["web", "code", "math"][: draw(st.integers(1, 3))]
    sizes = draw(st.lists(st.integers(1, 60), min_size=len(names), max_size=len(names)))
    phases = sorted(
        draw(st.lists(_phase(names, draw(st.booleans())), max_size=3)),
        key=lambda p: (p.get("start_epoch", 0), p.get("start_step", 0)),
    )
    raw = {
        "sources": dict(zip(names, sizes, strict=True)),
        "batch_size": draw(st.integers(1, 9)),
        "world_size": draw(st.integers(1, 4)),
        "accumulate_grad_batches": draw(st.integers(1, 3)),
        "max_steps": 50,
        "seed": draw(st.integers(0, 2**64 - 1)),
        "temperature": draw(st.sampled_from([0.5, 1.0, 2.0])),
        "samples_per_epoch": draw(st.one_of(st.none(), st.integers(1, 200))),
        "drop_last": draw(st.booleans()),
        "phases": phases,
    }
    return PlanConfig.from_mapping(raw)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_configs())
def test_draws_equal_the_data_modules_sampler(config: PlanConfig) -> None:
    """Same schedule, layout and counts as the sampler the data module builds (or same error)."""
    event(_same_as_the_data_module(config))


@pytest.mark.parametrize(
    "text",
    [
        CONFIG,
        CONFIG.replace("samples_per_epoch: 1048576", "samples_per_epoch: 7"),  # < 1 a rank
        CONFIG.replace("{web: 0.5, code: 0.3, math: 0.2}", "{web: 0.5, cod: 0.3, math: 0.2}"),
        CONFIG.replace("seed: 0", "") + "seed: -1\n",
        CONFIG + "drop_last: true\n",
    ],
    ids=["documented", "epoch-smaller-than-the-world", "unknown-source", "bad-seed", "drop-last"],
)
def test_documented_config_and_its_mistakes(text: str, tmp_path: Path) -> None:
    path = tmp_path / "mixture.yaml"
    path.write_text(textwrap.dedent(text))
    outcome = _same_as_the_data_module(load_config(path))
    assert outcome.startswith("refused") == (text != CONFIG and "drop_last" not in text)
