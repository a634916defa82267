"""ragmon's log lines: one handler on stderr, text or JSON, that lets only ragmon's own records
through below WARNING and masks URL passwords in every line (``ragmon run`` and ``ragmon demo``
set it up; the offline commands print their own lines)."""

from __future__ import annotations

import logging

from ragmon.judge.endpoint import mask_credentials

__all__ = ["QUIET_LOGGERS", "LogHygiene", "configure_logging"]

QUIET_LOGGERS = ("openai", "httpx", "httpx2", "httpcore", "httpcore2", "h11", "urllib3", "grpc")
"""Client libraries whose lower levels log content (prompts, replies, headers, URLs with
credentials): set to WARNING at least, whatever ``--log-level`` says, so they do not even format
those lines. The handler's filter (``LogHygiene``) is what keeps them out for any library."""


class LogHygiene(logging.Filter):
    """What ragmon's log handler lets through: below WARNING only ragmon's own records (any
    other library's INFO and DEBUG lines may carry requests, replies and URLs: ``openai``'s
    client moved from ``httpx`` to ``httpx2`` once, and its INFO line named the judge's base URL,
    password included); and in every record, URL passwords masked."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING and record.name != "ragmon" and not record.name.startswith("ragmon."):
            return False
        message = record.getMessage()
        masked = mask_credentials(message)
        if masked != message:
            record.msg, record.args = masked, None
        return True


class _Masking(logging.Formatter):
    """Another formatter's output with URL passwords masked (tracebacks and JSON included)."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self._inner = inner

    def format(self, record: logging.LogRecord) -> str:
        return mask_credentials(self._inner.format(record))


def configure_logging(level: str, form: str = "text") -> None:
    """ragmon's log lines on stderr at ``level``, as text or (``form="json"``) one JSON object a
    line with ``time`` (ISO 8601, UTC), ``level``, ``logger``, ``message`` (and ``exc_info`` with a traceback);
    other libraries' lines at WARNING at least and URL passwords masked in every line
    (``LogHygiene``)."""
    handler = logging.StreamHandler()
    formatter: logging.Formatter
    if form == "json":
        from pythonjsonlogger.json import JsonFormatter

        formatter = JsonFormatter(
            "%(levelname)s %(name)s %(message)s",
            rename_fields={"levelname": "level", "name": "logger"},
            timestamp="time",  # ISO 8601, UTC
        )
    else:
        formatter = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    handler.setFormatter(_Masking(formatter))
    handler.addFilter(LogHygiene())
    handler.setLevel(level.upper())  # a library that turned its own logger up still stops here
    logging.basicConfig(level=level.upper(), handlers=[handler])
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLogger().level))
