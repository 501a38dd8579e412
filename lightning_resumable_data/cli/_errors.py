"""The one error type of the command line: a message, a hint, and an exit code."""

from __future__ import annotations

from typing import Final

__all__ = ["DOCS_URL", "EXIT_FAILURE", "EXIT_USAGE", "CliError"]

DOCS_URL: Final = "https://lightning-resumable-data.readthedocs.io/en/latest/"  # mkdocs site_url

EXIT_USAGE: Final = 2  # bad arguments or bad input files (argparse uses 2 as well)
EXIT_FAILURE: Final = 1  # everything else: a missing optional dependency, an unwritable file


class CliError(Exception):
    """A user-facing failure, printed as one line on stderr without a traceback.

    Args:
        message: What went wrong, naming the file or value at fault.
        hint: What to do about it.
        code: The process exit code.

    Example:
        >>> str(CliError("no such file: x.ckpt", hint="check the path"))
        'no such file: x.ckpt HINT: check the path'
    """

    def __init__(self, message: str, *, hint: str = "", code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.code = code

    def __str__(self) -> str:
        text = " ".join(self.message.split())  # one line, whatever the message held
        return f"{text} HINT: {self.hint}" if self.hint else text
