"""Reading ``lrd plan``'s config file (YAML, or JSON with a ``.json`` suffix) into a PlanConfig."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any, Final

from lightning_resumable_data.cli._errors import DOCS_URL, CliError
from lightning_resumable_data.lightning.plan import PlanConfig

__all__ = ["FORMAT_URL", "load_config"]

FORMAT_URL: Final = f"{DOCS_URL}cli/#lrd-plan"


def _parse(path: Path) -> object:
    if not path.is_file():
        what = "is a directory, not a config file" if path.is_dir() else "does not exist"
        raise CliError(f"{path} {what}", hint=f"pass a YAML or JSON mixture config ({FORMAT_URL}).")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise CliError(f"cannot read {path}: {error}", hint="pass a UTF-8 text file.") from None
    if path.suffix.lower() == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as error:
            raise CliError(
                f"{path} is not valid JSON: {error.msg} at line {error.lineno}, column "
                f"{error.colno}",
                hint="fix the syntax, or use YAML (.yaml).",
            ) from None
    yaml: Any = importlib.import_module("yaml")  # PyYAML, a dependency of lightning
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        problem = getattr(error, "problem", None) or "syntax error"
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise CliError(
            f"{path} is not valid YAML: {problem}{where}",
            hint="check the indentation and the colons; JSON files need a .json suffix.",
        ) from None


def load_config(path: Path) -> PlanConfig:
    """Read a plan config.

    Raises:
        CliError: A missing or unparsable file, or a config the package refuses (an unknown
            or missing key, a bad value, phases out of order: the package's own message).
    """
    raw = _parse(path)
    try:
        return PlanConfig.from_mapping(raw)
    except (TypeError, ValueError) as error:
        raise CliError(f"{path}: {error}", hint=f"the config format: {FORMAT_URL}") from None
