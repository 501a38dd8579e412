"""docs/cli.md's ``lrd plan`` example is the command's real output, kept so by running it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lightning_resumable_data.cli import main

PAGE = Path(__file__).resolve().parents[1] / "docs" / "cli.md"


def test_the_plan_example_is_what_lrd_plan_prints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    text = PAGE.read_text()
    config = re.search(r"```yaml\n(# mixture\.yaml:.*?)```", text, re.S)
    shown = re.search(
        r"```text\n\$ (lrd plan mixture\.yaml --png mixture\.png)\n(.*?)```", text, re.S
    )
    assert config is not None, "the example moved: update this test"
    assert shown is not None, "the example moved: update this test"
    (tmp_path / "mixture.yaml").write_text(config.group(1))
    monkeypatch.chdir(tmp_path)
    pytest.importorskip("matplotlib")
    assert main(shown.group(1).split()[1:]) == 0
    assert capsys.readouterr().out == shown.group(2)
