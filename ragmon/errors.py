"""ragmon's exceptions: one base, a shallow tree."""

from __future__ import annotations

__all__ = ["RagmonError", "InputError", "UsageError"]


class RagmonError(Exception):
    """Base of every error ragmon raises on purpose."""


class UsageError(RagmonError):
    """A command-line argument or option is wrong."""


class InputError(RagmonError):
    """An input file is unreadable or malformed; names the file and, when known, the line."""

    def __init__(self, path: str, problem: str, line: int | None = None) -> None:
        self.path = path
        self.line = line
        self.problem = problem
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {problem}")
