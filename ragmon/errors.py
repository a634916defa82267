"""ragmon's exceptions: one base, a shallow tree.

Every error ragmon raises on purpose derives from ``RagmonError``; foreign exceptions (protobuf,
JSON, TOML, openai, zlib) are translated into one of these where they enter::

    RagmonError
    ├── UsageError            a command-line argument or option is wrong
    ├── InputError            an input file is unreadable or malformed (file and line)
    ├── ConfigError           the configuration is invalid (every problem, by dotted key)
    ├── DecodeError           a body is not a valid OTLP trace export (HTTP 400 / INVALID_ARGUMENT)
    │   └── DecodedTooLargeError  its spans take more than one decode may hold (HTTP 413 / RESOURCE_EXHAUSTED)
    ├── BodyTooLargeError     a decompressed body is larger than its limit (HTTP 413)
    ├── FeedbackError         a feedback body is refused (HTTP 400; ``str()`` names the field)
    └── JudgeCallError        a judge call failed (``status``: the HTTP status, if any)
        ├── JudgeRetryableError   429, 5xx or connection: worth retrying (``retry_after``)
        ├── JudgeTimeoutError     no answer within the timeout
        └── JudgePermanentError   refused (other 4xx) or an unusable reply: do not retry

Control-flow exceptions that never leave their module stay private there (``_Malformed`` in
``otlp/decode.py``, ``_Bad`` in ``judge/evaluators.py``, ``_UnsafeReply`` in ``judge/client.py``,
which must be an ``httpx`` error to pass through the openai client).
"""

from __future__ import annotations

__all__ = [
    "EXIT_JUDGE",
    "EXIT_OK",
    "EXIT_THRESHOLD",
    "EXIT_USAGE",
    "BodyTooLargeError",
    "ConfigError",
    "DecodeError",
    "DecodedTooLargeError",
    "FeedbackError",
    "InputError",
    "JudgeCallError",
    "JudgePermanentError",
    "JudgeRetryableError",
    "JudgeTimeoutError",
    "RagmonError",
    "UsageError",
]


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


class ConfigError(RagmonError):
    """The configuration is invalid; ``problems`` holds one ``"key: problem"`` line each."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: " + "; ".join(problems))


class DecodeError(RagmonError):
    """The body is not a valid OTLP trace export."""


class DecodedTooLargeError(DecodeError):
    """The spans a body decodes to take more than one decode may hold (``max_bytes``)."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(f"the spans of this body take more than {max_bytes} bytes once decoded; send smaller batches")
        self.max_bytes = max_bytes


class BodyTooLargeError(RagmonError):
    """The decompressed body is larger than the limit."""


class JudgeCallError(RagmonError):
    """A judge call failed; ``status`` is the HTTP status when there was one; ``detail`` the
    endpoint's or the connection's own first message (for ``ragmon eval``'s cause lines, never
    for the sidecar's logs: a server's error text may echo the request)."""

    def __init__(self, message: str, status: int | None = None, detail: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail


class JudgeRetryableError(JudgeCallError):
    """The endpoint is overloaded or unreachable (429, 5xx, connection): worth retrying."""

    def __init__(self, message: str, status: int | None = None, retry_after: float | None = None,
                 detail: str = "") -> None:
        super().__init__(message, status, detail)
        self.retry_after = retry_after


class JudgeTimeoutError(JudgeCallError):
    """No answer within the timeout."""


class JudgePermanentError(JudgeCallError):
    """The request was refused (4xx other than 429) or the reply was unusable: do not retry."""


class FeedbackError(RagmonError):
    """A feedback body refused (HTTP 400): ``str()`` names the field."""


class ListenError(RagmonError):
    """A configured address cannot be listened on: ``str()`` is one line naming the setting and the
    address (``metrics.listen 0.0.0.0:9464 is in use``)."""


EXIT_OK, EXIT_THRESHOLD, EXIT_USAGE, EXIT_JUDGE = 0, 1, 2, 3
"""The commands' exit codes: passed; a threshold failed; bad input or usage; judgements failed
beyond ``--max-judge-failures`` (a run whose judge failed must not pass for one whose answers did)."""
