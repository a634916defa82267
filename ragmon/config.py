"""Configuration: one frozen dataclass per TOML section, validated with key names.

Every key is optional; ``Config()`` is what ``ragmon run`` uses with no file. ``load_config``
reads a TOML file, rejects unknown keys (with a did-you-mean), checks every value and raises
``ConfigError`` listing each problem with its dotted key.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ragmon.errors import ConfigError
from ragmon.groundtruth.jsonpath import parse_path

__all__ = [
    "Config",
    "ReceiverConfig",
    "MetricsConfig",
    "TracesConfig",
    "ScoringConfig",
    "JudgeConfig",
    "ProbeConfig",
    "FeedbackConfig",
    "Price",
    "check_document_id_place",
    "parse_duration",
    "parse_listen",
    "load_config",
    "config_from_mapping",
    "TOKEN_ENVIRONMENT",
    "with_environment",
]


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float:
    """``"500ms"``, ``"2s"``, ``"5m"``, ``"1h"``, ``"1d"`` -> seconds; ``ValueError`` otherwise."""
    match = _DURATION.match(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"expected a duration such as 500ms, 2s, 5m or 1h, got {text!r}")
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def check_document_id_place(place: str) -> None:
    """A ``[scoring] document_id`` place is ``document.<field>`` or ``metadata.<key>``."""
    head, dot, rest = place.partition(".") if isinstance(place, str) else ("", "", "")
    if head not in ("document", "metadata") or not dot or not rest:
        raise ValueError(f'{place!r} is not a place; use "document.<field>" or "metadata.<key>"')


def parse_listen(text: str) -> tuple[str, int] | None:
    """``"127.0.0.1:4318"`` -> ``("127.0.0.1", 4318)``; ``""`` -> ``None`` (turned off).

    IPv6 hosts go in brackets: ``"[::1]:4318"``. Port 0 picks a free port.
    """
    if text == "":
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f'expected "host:port" (or "" to turn it off), got {text!r}')
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    return host or "0.0.0.0", int(port)


@dataclass(frozen=True, slots=True)
class ReceiverConfig:
    """``[receiver]``: OTLP ingest."""

    http: str = "127.0.0.1:4318"
    grpc: str = "127.0.0.1:4317"
    token: str = ""
    max_body_bytes: int = 16 * 1024 * 1024
    max_queued_spans: int = 200_000
    """Spans waiting for assembly; past it receivers answer 503/UNAVAILABLE (exporters retry)."""
    max_queued_bytes: int = 128 * 1024 * 1024
    """The same bound in approximate bytes of kept span data."""
    max_attribute_chars: int = 16_384
    """Every kept value is bounded by this many units: strings (characters), bytes, arrays and
    key-value lists (characters of their JSON text), span names and ``service.name``; cuts are
    counted in ragmon_attributes_truncated_total."""
    max_connections: int = 1024
    """Open connections per receiver; past it new connections are closed at once (counted)."""
    max_inflight_bytes: int = 64 * 1024 * 1024
    """Request bytes being read at once across connections; past it 503 + Retry-After."""
    header_timeout: str = "10s"
    """A request's line and headers must arrive within this (slow clients are cut off)."""
    body_timeout: str = "30s"
    """A request's body must arrive within this once its headers have."""
    idle_timeout: str = "60s"
    """A kept-alive connection with no request for this long is closed."""


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    """``[metrics]``: the Prometheus endpoint."""

    listen: str = "0.0.0.0:9464"
    token: str = ""
    max_label_values: int = 100
    """Distinct values kept per label (service, variant, model, …); more fold into ``other``."""
    max_label_chars: int = 128
    """Longer label values are cut to this many characters (counted)."""
    max_series: int = 1000
    """Label sets per metric family; past it new combinations fold into ``other`` (counted)."""
    max_connections: int = 64
    """Open connections to the metrics server; past it new ones are closed at once (counted)."""
    linger: str = "10s"
    """After SIGTERM and the drain, /metrics keeps answering until one scrape has read the
    final values, or this long."""


@dataclass(frozen=True, slots=True)
class TracesConfig:
    """``[traces]``: trace assembly."""

    grace: str = "2s"
    max_wait: str = "60s"
    max_pending: int = 50_000
    max_spans: int = 1_000_000
    """Spans held across all pending traces; past it the oldest trace is finished early."""
    max_bytes: int = 256 * 1024 * 1024
    """Approximate bytes of span data held across pending traces; likewise."""


@dataclass(frozen=True, slots=True)
class ScoringConfig:
    """``[scoring]``: retrieval metrics and windows."""

    k: tuple[int, ...] = (1, 3, 5, 10)
    windows: tuple[str, ...] = ("5m", "1h")
    document_id: tuple[str, ...] = ("document.id",)
    variant_attribute: str = "ragmon.variant"
    golden: str = ""


@dataclass(frozen=True, slots=True)
class JudgeConfig:
    """``[judge]``: the sampled LLM judge."""

    base_url: str = ""
    model: str = "gpt-4o-mini"
    sample_rate: float = 0.1
    max_per_minute: int = 60
    max_usd_per_hour: float = 1.0
    concurrency: int = 4
    timeout: str = "30s"
    enabled: bool | None = None
    """``None``: on when an OpenAI key or base URL is set (config or environment)."""
    api_key_env: str = "OPENAI_API_KEY"
    """Environment variable holding the endpoint's key (never the key itself in the file)."""
    evaluators: tuple[str, ...] = ("faithfulness", "answer_relevance", "context_relevance", "answer_correctness")
    max_retries: int = 2
    """Retries of a call answered 429/5xx or cut off, with jittered exponential backoff."""
    max_queue: int = 1000
    """Sampled traces waiting for a judge slot; past it they are dropped (counted)."""
    cache_size: int = 10000
    """Judgements remembered by (query, answer, contexts): identical ones are not judged twice."""
    redact: tuple[str, ...] = ()
    """Regular expressions; every match is replaced by ``[REDACTED]`` before text leaves."""
    send_documents: bool = True
    """False: document content is never sent (faithfulness and context relevance are off)."""
    export_endpoint: str = ""
    """OTLP/HTTP base URL to send ``gen_ai.evaluation.result`` events to; empty: off."""


@dataclass(frozen=True, slots=True)
class ProbeConfig:
    """``[[probe]]``: a golden query replayer."""

    name: str = ""
    url: str = ""
    method: str = "POST"
    headers: Mapping[str, str] = field(default_factory=dict)
    body: Any = field(default_factory=lambda: {"question": "{query}"})
    interval: str = "60s"
    timeout: str = "10s"
    concurrency: int = 2
    dataset: str = ""
    response_ids: str = ""
    response_answer: str = ""


@dataclass(frozen=True, slots=True)
class FeedbackConfig:
    """``[feedback]``: joining late labels to finished traces."""

    retention: str = "1h"
    max_traces: int = 100_000


@dataclass(frozen=True, slots=True)
class Price:
    """``[pricing."model"]``: USD per million tokens."""

    input: float = 0.0
    output: float = 0.0


@dataclass(frozen=True, slots=True)
class Config:
    """The whole configuration."""

    receiver: ReceiverConfig = field(default_factory=ReceiverConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    traces: TracesConfig = field(default_factory=TracesConfig)
    scoring: ScoringConfig = field(default_factory=ScoringConfig)
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    probe: tuple[ProbeConfig, ...] = ()
    feedback: FeedbackConfig = field(default_factory=FeedbackConfig)
    pricing: Mapping[str, Price] = field(default_factory=dict)


_SECTIONS: dict[str, type[Any]] = {
    "receiver": ReceiverConfig,
    "metrics": MetricsConfig,
    "traces": TracesConfig,
    "scoring": ScoringConfig,
    "judge": JudgeConfig,
    "feedback": FeedbackConfig,
}
_DURATIONS = {
    "traces.grace", "traces.max_wait", "judge.timeout", "probe.interval", "probe.timeout",
    "feedback.retention", "receiver.header_timeout", "receiver.body_timeout", "receiver.idle_timeout",
}
_DURATIONS_OR_ZERO = {"metrics.linger"}
_EVALUATORS = ("faithfulness", "answer_relevance", "context_relevance", "answer_correctness")
_LISTENS = {"receiver.http", "receiver.grpc", "metrics.listen"}
_POSITIVE_INTS = {
    "receiver.max_body_bytes", "receiver.max_queued_spans", "receiver.max_queued_bytes",
    "receiver.max_attribute_chars", "traces.max_bytes", "metrics.max_label_values", "traces.max_pending", "traces.max_spans",
    "judge.concurrency", "probe.concurrency", "feedback.max_traces", "judge.max_queue", "judge.cache_size",
    "receiver.max_connections", "receiver.max_inflight_bytes", "metrics.max_label_chars", "metrics.max_series",
    "metrics.max_connections",
}

_INT64_MAX = 2**63 - 1
_MAX_INT = {"receiver.max_body_bytes": 2**31 - 1}
"""Upper bounds below int64 (gRPC's message size limit is a C int)."""


def _unknown(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key.rsplit(".", 1)[-1], known, n=1)
    return f"{key}: unknown key" + (f" (did you mean {close[0]!r}?)" if close else "")


def _check_value(key: str, value: Any, default: Any, problems: list[str]) -> Any:
    """Check one value against its default's type and the key's rules; return it normalized."""
    expected = type(default)
    if key == "probe.body":
        if not isinstance(value, (dict, list, str)):
            problems.append(f"{key}: expected a table, an array or a string, got {type(value).__name__}")
            return default
        return value
    if key == "probe.headers" and not (
        isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
    ):
        problems.append(f"{key}: expected a table of strings")
        return default
    if isinstance(default, tuple):
        if not isinstance(value, list):
            problems.append(f"{key}: expected a list, got {type(value).__name__}")
            return default
        item_type = type(default[0]) if default else str
        if not all(isinstance(v, item_type) and not isinstance(v, bool) for v in value):
            problems.append(f"{key}: expected a list of {item_type.__name__}")
            return default
        value = tuple(value)
    elif default is None or isinstance(default, bool):
        if not isinstance(value, bool):
            problems.append(f"{key}: expected true or false, got {value!r}")
            return default
    elif isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            problems.append(f"{key}: expected a number, got {value!r}")
            return default
        value = float(value)
    elif isinstance(default, Mapping):
        if not isinstance(value, dict):
            problems.append(f"{key}: expected a table, got {type(value).__name__}")
            return default
    elif not isinstance(value, expected) or isinstance(value, bool) != isinstance(default, bool):
        problems.append(f"{key}: expected {expected.__name__}, got {type(value).__name__} {value!r}")
        return default
    try:
        if key in _DURATIONS:
            if parse_duration(value) <= 0:
                raise ValueError(f"must be longer than 0, got {value!r}")
        elif key in _DURATIONS_OR_ZERO:
            parse_duration(value)
        elif key in _LISTENS:
            parse_listen(value)
        elif key in _POSITIVE_INTS and value < 1:
            raise ValueError(f"must be at least 1, got {value}")
        elif key in _POSITIVE_INTS and value > _MAX_INT.get(key, _INT64_MAX):
            raise ValueError(f"must be at most {_MAX_INT.get(key, _INT64_MAX)}, got {value}")
        elif key == "scoring.k" and (not value or min(value) < 1):
            raise ValueError("must list cut-offs >= 1")
        elif key == "scoring.windows":
            if not value:
                raise ValueError("must list at least one window")
            seconds = [parse_duration(w) for w in value]
            if min(seconds) <= 0:
                raise ValueError(f"each window must be longer than 0, got {list(value)}")
            if len(set(seconds)) != len(seconds):
                raise ValueError(f"lists the same duration twice: {list(value)}")
        elif key == "scoring.document_id":
            if not value:
                raise ValueError("must list at least one place")
            for place in value:
                check_document_id_place(place)
        elif key == "scoring.variant_attribute" and not value:
            raise ValueError("must name an attribute")
        elif key == "judge.max_retries" and value < 0:
            raise ValueError(f"must be >= 0, got {value}")
        elif key == "judge.evaluators":
            unknown = sorted(set(value) - set(_EVALUATORS))
            if unknown:
                raise ValueError(f"unknown evaluator(s) {unknown}; known: {list(_EVALUATORS)}")
        elif key == "judge.redact":
            for pattern in value:
                try:
                    re.compile(pattern)
                except re.error as exc:
                    raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None
        elif key == "judge.export_endpoint" and value and not value.startswith(("http://", "https://")):
            raise ValueError(f"must be an http:// or https:// URL, got {value!r}")
        elif key == "judge.sample_rate" and not 0.0 <= value <= 1.0:
            raise ValueError(f"must be between 0 and 1, got {value}")
        elif (key in ("judge.max_per_minute", "judge.max_usd_per_hour") or key.startswith("pricing.")) and value < 0:
            raise ValueError(f"must be >= 0, got {value}")
    except ValueError as exc:
        problems.append(f"{key}: {exc}")
        return default
    return value


def _section(name: str, cls: type[Any], table: Any, problems: list[str]) -> Any:
    if not isinstance(table, dict):
        problems.append(f"{name}: expected a table, got {type(table).__name__}")
        return cls()
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values: dict[str, Any] = {}
    defaults = cls()
    for key, value in table.items():
        dotted = f"{name}.{key}"
        if key not in fields:
            problems.append(_unknown(dotted, list(fields)))
            continue
        values[key] = _check_value(dotted, value, getattr(defaults, key), problems)
    return cls(**values)


def config_from_mapping(data: Mapping[str, Any], source: str = "config") -> Config:
    """Build and validate a ``Config`` from parsed TOML; ``ConfigError`` lists every problem."""
    problems: list[str] = []
    sections: dict[str, Any] = {}
    for name, table in data.items():
        if name in _SECTIONS:
            sections[name] = _section(name, _SECTIONS[name], table, problems)
        elif name == "probe":
            if not isinstance(table, list):
                problems.append("probe: use [[probe]] (an array of tables)")
                continue
            sections["probe"] = tuple(_section("probe", ProbeConfig, item, problems) for item in table)
        elif name == "pricing":
            if not isinstance(table, dict):
                problems.append("pricing: expected a table of models")
                continue
            sections["pricing"] = {
                model: _section(f'pricing."{model}"', Price, price, problems)
                for model, price in table.items()
            }
            seen: dict[str, str] = {}
            for model in table:
                if model.strip().lower() in seen:
                    problems.append(f'pricing."{model}": same model as pricing."{seen[model.strip().lower()]}" (names ignore case)')
                seen.setdefault(model.strip().lower(), model)
        else:
            problems.append(_unknown(name, [*_SECTIONS, "probe", "pricing"]))
    if "probe" in sections:
        _check_probes(sections["probe"], sections.get("scoring", ScoringConfig()), problems)
    if problems:
        raise ConfigError(source, problems)
    return Config(**sections)


def probe_name(config: ProbeConfig) -> str:
    """The ``probe`` label: the configured name, else the URL."""
    return config.name or config.url


_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def _check_probes(probes: tuple[ProbeConfig, ...], scoring: ScoringConfig, problems: list[str]) -> None:
    """What one ``[[probe]]`` table cannot tell: URL, method, paths, unique names, a dataset."""
    names: dict[str, int] = {}
    for i, probe in enumerate(probes):
        if not probe.url:
            problems.append(f"probe[{i}].url: required")
        elif not probe.url.startswith(("http://", "https://")):
            problems.append(f"probe[{i}].url: must be an http:// or https:// URL, got {probe.url!r}")
        if probe.method.upper() not in _METHODS:
            problems.append(f"probe[{i}].method: expected one of {sorted(_METHODS)}, got {probe.method!r}")
        for key in ("response_ids", "response_answer"):
            if getattr(probe, key):
                try:
                    parse_path(getattr(probe, key))
                except ValueError as exc:
                    problems.append(f"probe[{i}].{key}: {exc}")
        if not probe.dataset and not scoring.golden:
            problems.append(f"probe[{i}].dataset: required when [scoring] golden is not set")
        name = probe_name(probe)
        if name in names:
            problems.append(f"probe[{i}].name: {name!r} is also probe[{names[name]}]'s name")
        names.setdefault(name, i)


TOKEN_ENVIRONMENT: Mapping[str, tuple[str, str]] = {
    "RAGMON_RECEIVER_TOKEN": ("receiver", "token"),
    "RAGMON_METRICS_TOKEN": ("metrics", "token"),
}
"""Environment variables that set a secret instead of the file (a Kubernetes Secret, say); set
and not empty, they win over the file's value."""


def with_environment(config: Config, environ: Mapping[str, str]) -> Config:
    """``config`` with the tokens the environment sets (``TOKEN_ENVIRONMENT``)."""
    for variable, (section, key) in TOKEN_ENVIRONMENT.items():
        value = environ.get(variable, "")
        if value:
            part = dataclasses.replace(getattr(config, section), **{key: value})
            config = dataclasses.replace(config, **{section: part})
    return config


def load_config(path: str | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Read the TOML file at ``path`` (else ``$RAGMON_CONFIG``, else defaults), validate it and
    apply the token variables of ``environ`` (default: the process environment)."""
    environ = os.environ if environ is None else environ
    path = path or environ.get("RAGMON_CONFIG") or None
    if path is None:
        return with_environment(Config(), environ)
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except OSError as exc:
        raise ConfigError(path, [f"cannot read: {exc.strerror or exc}"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(path, [f"invalid TOML: {exc}"]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(path, [f"not UTF-8 ({exc.reason} at byte {exc.start})"]) from None
    except RecursionError:
        raise ConfigError(path, ["invalid TOML: nested too deeply"]) from None
    return with_environment(config_from_mapping(data, path), environ)
