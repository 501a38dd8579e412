"""The install commands the docs show work: from the clone, or from a wheel (issue 30).

The package is not on a package index, so no page may tell a user to ``pip install`` it by
name; every extra a page names exists; and ``make wheel``'s command builds a wheel that
installs into a fresh venv and runs there (``lrd``, the import) without the clone.
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = [
    REPO / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
    *sorted(REPO.glob("examples/*.py")),
]
PIP = re.compile(r"pip install ([^`\n]+)")
EXTRAS = re.compile(r"\[([\w,]+)\]")


def _install_commands() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for match in PIP.finditer(page.read_text()):
            found.append((page.name, match.group(1).strip()))
    return found


def test_no_page_installs_the_package_by_name_from_an_index() -> None:
    commands = _install_commands()
    assert commands  # the pages do show install commands
    for page, command in commands:
        if "torch" in command or "mutmut" in command or "bench-venv" in command:
            continue  # other packages, or the benchmark venv's peers
        assert "lightning-resumable-data" not in command, (page, command)
        assert re.search(r"-e \.|-e \"\.|-e '\.|dist/|\$\(ls dist", command), (page, command)


def test_every_extra_a_page_names_exists() -> None:
    metadata = importlib.metadata.metadata("lightning-resumable-data")
    declared = set(metadata.get_all("Provides-Extra") or [])
    named = {
        extra
        for _, command in _install_commands()
        if "-e" in command or "dist/" in command
        for group in EXTRAS.findall(command)
        for extra in group.split(",")
    }
    assert named  # e.g. [remote], [cli], [test,docs,cli]
    assert named <= declared, named - declared


@pytest.mark.slow
def test_the_wheel_installs_and_runs_without_the_clone(tmp_path: Path) -> None:
    """``make wheel``'s command, then ``pip install <wheel>`` into a fresh venv."""
    dist = tmp_path / "dist"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(dist),
            str(REPO),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = dist.glob("lightning_resumable_data-*-py3-none-any.whl")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    # the dependencies (torch, lightning, ...) come from this environment: no download
    site = next(p for p in sys.path if p.endswith("site-packages"))
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(purelib) / "deps.pth").write_text(site + "\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--quiet",
            "--no-deps",
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    where = subprocess.run(
        [python, "-c", "import lightning_resumable_data as m; print(m.__file__)"],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    ).stdout
    assert where.startswith(purelib), where  # the wheel's copy, not the clone
    version = subprocess.run(
        [env_dir / "bin" / "lrd", "--version"], check=True, capture_output=True, text=True
    )
    assert version.stdout.startswith("lrd ")
