"""Configuration: one frozen dataclass per TOML section; each section reads and checks itself.

Every key is optional; ``Config()`` is what ``ragmon run`` uses with no file, and each default
is written once, on its field. A field declares the rule its TOML value must pass; durations are
written as text (``"10s"``) and held as float seconds, parsed here once. ``load_config`` reads a
TOML file and dispatches each table to its section's ``from_mapping``, which rejects unknown
keys (with a did-you-mean) and checks every value; ``ConfigError`` lists each problem with its
dotted key.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import os
import re
import tomllib
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Self

from ragmon import defaults
from ragmon.errors import ConfigError
from ragmon.formats.jsonpath import parse_path
from ragmon.model import EVALUATORS

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
    "check_http_url",
    "parse_duration",
    "parse_listen",
    "load_config",
    "config_from_mapping",
    "probe_name",
    "toml_defaults",
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


_Rule = Callable[[Any], Any]
"""Checks a value of its key's TOML type and returns it as the section holds it; a
``ValueError`` says what is wrong (the problem text after ``"key: "``)."""

_INT64_MAX = 2**63 - 1
_EVALUATORS: tuple[str, ...] = EVALUATORS


def _setting(default: Any = dataclasses.MISSING, rule: _Rule | None = None, *,
             factory: Callable[[], Any] | None = None, read: _Rule | None = None) -> Any:
    """A key whose TOML value has the type of its default and passes ``rule``; ``read``, when
    given, replaces both (a key whose value may take several shapes)."""
    metadata = {"rule": rule, "read": read}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def _duration(text: str, *, zero: bool = False, at_most: str = "1d") -> Any:
    """A duration: written ``text`` in TOML, held as float seconds, longer than 0 (unless
    ``zero``) and at most ``at_most`` (a longer one is a typo, and past about 10^9 s asyncio
    cannot even schedule it)."""
    return field(default=parse_duration(text), metadata={
        "rule": functools.partial(_bounded_duration, zero=zero, at_most=at_most), "toml": text,
    })


def _count(default: int, maximum: int = _INT64_MAX) -> Any:
    """A count of at least 1 and at most ``maximum``."""
    return _setting(default, functools.partial(_at_least_one, maximum=maximum))


def _bounded_duration(text: str, *, zero: bool, at_most: str) -> float:
    seconds = parse_duration(text)
    if seconds <= 0 and not zero:
        raise ValueError(f"must be longer than 0, got {text!r}")
    if seconds > parse_duration(at_most):
        raise ValueError(f"must be at most {at_most}, got {text!r}")
    return seconds


def _at_least_one(value: int, maximum: int) -> int:
    if value < 1:
        raise ValueError(f"must be at least 1, got {value}")
    if value > maximum:
        raise ValueError(f"must be at most {maximum}, got {value}")
    return value


def _not_negative(value: float) -> float:
    if value < 0:
        raise ValueError(f"must be >= 0, got {value}")
    return value


def _listen(text: str) -> str:
    parse_listen(text)
    return text


MAX_K = 1000
"""The deepest cut-off (trec_eval's deepest default): each k is series and work per request."""
MAX_CUT_OFFS = 16
MAX_WINDOW = "30d"


def _cut_offs(k: tuple[int, ...]) -> tuple[int, ...]:
    if not k or min(k) < 1:
        raise ValueError("must list cut-offs >= 1")
    if max(k) > MAX_K:
        raise ValueError(f"each cut-off must be at most {MAX_K}, got {max(k)}")
    if len(k) > MAX_CUT_OFFS:
        raise ValueError(f"must list at most {MAX_CUT_OFFS} cut-offs, got {len(k)}")
    return k


def _windows(texts: tuple[str, ...]) -> tuple[float, ...]:
    if not texts:
        raise ValueError("must list at least one window")
    seconds = tuple(parse_duration(w) for w in texts)
    if min(seconds) <= 0:
        raise ValueError(f"each window must be longer than 0, got {list(texts)}")
    if max(seconds) > parse_duration(MAX_WINDOW):
        raise ValueError(f"each window must be at most {MAX_WINDOW}, got {list(texts)}")
    if len(set(seconds)) != len(seconds):
        raise ValueError(f"lists the same duration twice: {list(texts)}")
    return seconds


def _places(places: tuple[str, ...]) -> tuple[str, ...]:
    if not places:
        raise ValueError("must list at least one place")
    for place in places:
        check_document_id_place(place)
    return places


def _attribute(name: str) -> str:
    if not name:
        raise ValueError("must name an attribute")
    return name


def _evaluators(names: tuple[str, ...]) -> tuple[str, ...]:
    unknown = sorted(set(names) - set(_EVALUATORS))
    if unknown:
        raise ValueError(f"unknown evaluator(s) {unknown}; known: {list(_EVALUATORS)}")
    return names


def _patterns(patterns: tuple[str, ...]) -> tuple[str, ...]:
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None
    return patterns


def _share(rate: float) -> float:
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"must be between 0 and 1, got {rate}")
    return rate


def _headers(value: Any) -> Any:
    if not (isinstance(value, dict) and all(isinstance(v, str) for v in value.values())):
        raise ValueError("expected a table of strings")
    return value


def _body(value: Any) -> Any:
    if not isinstance(value, (dict, list, str)):
        raise ValueError(f"expected a table, an array or a string, got {type(value).__name__}")
    return value


def _typed(value: Any, template: Any) -> Any:
    """``value`` if it has the TOML type of ``template`` (lists as tuples, ints as floats where a
    float is expected); ``ValueError`` otherwise."""
    if isinstance(template, tuple):
        if not isinstance(value, list):
            raise ValueError(f"expected a list, got {type(value).__name__}")
        item_type = type(template[0]) if template else str
        if not all(isinstance(v, item_type) and not isinstance(v, bool) for v in value):
            raise ValueError(f"expected a list of {item_type.__name__}")
        return tuple(value)
    if template is None or isinstance(template, bool):
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false, got {value!r}")
        return value
    if isinstance(template, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"expected a number, got {value!r}")
        return float(value)
    if isinstance(template, Mapping):
        if not isinstance(value, dict):
            raise ValueError(f"expected a table, got {type(value).__name__}")
        return value
    if not isinstance(value, type(template)) or isinstance(value, bool) != isinstance(template, bool):
        raise ValueError(f"expected {type(template).__name__}, got {type(value).__name__} {value!r}")
    return value


def _unknown(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key.rsplit(".", 1)[-1], known, n=1)
    return f"{key}: unknown key" + (f" (did you mean {close[0]!r}?)" if close else "")


class _Section:
    """A TOML table read into a frozen dataclass whose fields declare their own rules."""

    __slots__ = ()

    @classmethod
    def from_mapping(cls, name: str, table: Any, problems: list[str], at: str = "") -> Self:
        """The section ``table`` sets; each bad key or value adds ``"at.key: problem"`` to
        ``problems`` (``at``: the section as the file places it, e.g. ``probe[2]``; default
        ``name``) and keeps its default, so every problem is found in one pass."""
        values: dict[str, Any] = {}
        at = at or name
        if not isinstance(table, dict):
            problems.append(f"{at}: expected a table, got {type(table).__name__}")
            table = {}
        fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        for key, value in table.items():
            if key not in fields:
                problems.append(_unknown(f"{at}.{key}", list(fields)))
                continue
            meta = fields[key].metadata
            try:
                if meta.get("read"):
                    values[key] = meta["read"](value)
                else:
                    value = _typed(value, meta.get("toml", fields[key].default))
                    values[key] = meta["rule"](value) if meta.get("rule") else value
            except ValueError as exc:
                problems.append(f"{at}.{key}: {exc}")
        section = cls(**values)
        problems.extend(f"{at}.{key}: {text}" if key else f"{at}: {text}" for key, text in section.problems())
        return section

    def problems(self) -> list[tuple[str, str]]:
        """What the section's keys cannot tell one at a time, as ``(key, problem)``; key ``""``:
        the section itself. None by default."""
        return []


def toml_defaults(cls: type[Any]) -> dict[str, Any]:
    """The defaults of a section class as they are written in TOML (durations as text)."""
    defaults = cls()
    return {f.name: f.metadata.get("toml", getattr(defaults, f.name)) for f in dataclasses.fields(cls)}


@dataclass(frozen=True, slots=True)
class ReceiverConfig(_Section):
    """``[receiver]``: OTLP ingest."""

    http: str = _setting("127.0.0.1:4318", _listen)
    grpc: str = _setting("127.0.0.1:4317", _listen)
    token: str = ""
    max_body_bytes: int = _count(16 * 1024 * 1024, maximum=2**31 - 1)
    """At most a C int: gRPC's message size limit is one."""
    max_queued_spans: int = _count(200_000)
    """Spans waiting for assembly; past it receivers answer 503/UNAVAILABLE (exporters retry)."""
    max_queued_bytes: int = _count(128 * 1024 * 1024)
    """The same bound in approximate bytes of kept span data."""
    max_attribute_chars: int = _count(16_384)
    """Every kept value is bounded by this many units: strings (characters), bytes, arrays and
    key-value lists (characters of their JSON text), span names and ``service.name``; cuts are
    counted in ragmon_attributes_truncated_total."""
    max_connections: int = _count(1024)
    """Open connections per receiver; past it new connections are closed at once (counted)."""
    max_inflight_bytes: int = _count(64 * 1024 * 1024)
    """Request bytes being read at once across connections; past it 503 + Retry-After."""
    header_timeout: float = _duration("10s", at_most="10m")
    """A request's line and headers must arrive within this (slow clients are cut off)."""
    body_timeout: float = _duration("30s", at_most="10m")
    """A request's body must arrive within this once its headers have."""
    idle_timeout: float = _duration("60s")
    """A kept-alive connection with no request for this long is closed."""


@dataclass(frozen=True, slots=True)
class MetricsConfig(_Section):
    """``[metrics]``: the Prometheus endpoint."""

    listen: str = _setting("0.0.0.0:9464", _listen)
    token: str = ""
    max_label_values: int = _count(100)
    """Distinct values kept per label (service, variant, model, …); more fold into ``other``."""
    max_label_chars: int = _count(128)
    """Longer label values are cut to this many characters (counted)."""
    max_series: int = _count(1000)
    """Label sets per metric family; past it new combinations fold into ``other`` (counted)."""
    max_connections: int = _count(64)
    """Open connections to the metrics server; past it new ones are closed at once (counted)."""
    max_inflight_bytes: int = _count(64 * 1024 * 1024)
    """Bytes of /metrics answers held at once (rendered, not yet written out); past it a scrape
    gets 503 + Retry-After (counted). One answer may always proceed alone."""
    write_timeout: float = _duration("10s", at_most="10m")
    """A /metrics answer must be written out within this (a client that does not read is cut
    off and its answer freed; Prometheus' default scrape timeout is 10 s)."""
    linger: float = _duration("10s", zero=True, at_most="10m")
    """After SIGTERM and the drain, /metrics keeps answering until one scrape has read the
    final values, or this long."""


@dataclass(frozen=True, slots=True)
class TracesConfig(_Section):
    """``[traces]``: trace assembly."""

    grace: float = _duration("2s", at_most="1h")
    max_wait: float = _duration("60s")
    max_duration: float = _duration("1d", at_most="30d")
    """A span lasting longer than this (or ending before it starts: a start of 0 ns, an end in
    the far future) gives no latency; counted in ragmon_durations_invalid_total."""
    max_pending: int = _count(50_000)
    max_spans: int = _count(1_000_000)
    """Spans held across all pending traces; past it the oldest trace is finished early."""
    max_bytes: int = _count(128 * 1024 * 1024)
    """Approximate bytes of span data held across pending traces; likewise (128 MiB: with the
    queue's and the feedback store's bounds, a sidecar under sustained full load holds about
    245-270 MB, docs/explanation/benchmarks.md)."""


_WINDOWS = ("5m", "1h")


@dataclass(frozen=True, slots=True)
class ScoringConfig(_Section):
    """``[scoring]``: retrieval metrics and windows."""

    k: tuple[int, ...] = _setting(defaults.K, _cut_offs)
    windows: tuple[float, ...] = field(
        default=tuple(parse_duration(w) for w in _WINDOWS), metadata={"rule": _windows, "toml": _WINDOWS},
    )
    """Rolling windows in seconds (written as durations)."""
    document_id: tuple[str, ...] = _setting(defaults.DOCUMENT_ID, _places)
    variant_attribute: str = _setting("ragmon.variant", _attribute)
    golden: str = ""


MAX_JUDGE_MODEL_CHARS = 256
"""The longest ``judge.model`` name (the judge client reads no longer name from a reply)."""


def check_http_url(url: str) -> str:
    """Empty, or an ``http://`` / ``https://`` URL naming a host, with a valid port if any
    (``urllib.parse``). The problem never quotes the URL: it may hold a password."""
    if not url:
        return url
    problem = "must be empty or an http:// or https:// URL with a host"
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number in range
    except ValueError:
        raise ValueError(f"{problem} and a port in 0-65535") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(problem)
    return url


def _model_name(name: str) -> str:
    if not name.strip():
        raise ValueError("must name a model")
    if len(name) > MAX_JUDGE_MODEL_CHARS:
        raise ValueError(f"must be at most {MAX_JUDGE_MODEL_CHARS} characters, got {len(name)}")
    return name


def _retries(value: int) -> int:
    if not 0 <= value <= 10:
        raise ValueError(f"must be between 0 and 10, got {value}")
    return value


def _failure_ratio(value: float) -> float:
    if not 0.0 < value <= 1.0:
        raise ValueError(f"must be more than 0 and at most 1, got {value}")
    return value


@dataclass(frozen=True, slots=True)
class JudgeConfig(_Section):
    """``[judge]``: the sampled LLM judge."""

    base_url: str = _setting("", check_http_url)
    model: str = _setting("gpt-4o-mini", _model_name)
    sample_rate: float = _setting(0.1, _share)
    max_per_minute: int = _setting(60, _not_negative)
    max_usd_per_hour: float = _setting(1.0, _not_negative)
    concurrency: int = _count(4, maximum=256)
    timeout: float = _duration("30s", at_most="10m")
    enabled: bool | None = None
    """``None``: on when an OpenAI key or base URL is set (config or environment)."""
    api_key_env: str = "OPENAI_API_KEY"
    """Environment variable holding the endpoint's key (never the key itself in the file)."""
    evaluators: tuple[str, ...] = _setting(_EVALUATORS, _evaluators)
    max_retries: int = _setting(2, _retries)
    """Retries of a call answered 429/5xx or cut off, with jittered exponential backoff."""
    max_queue: int = _count(1000, maximum=100_000)
    """Sampled traces waiting for a judge slot; past it they are dropped (counted)."""
    max_queue_bytes: int = _count(32 * 1024 * 1024, maximum=1024 * 1024 * 1024)
    """Bytes those traces hold (as queued: cut to ``max_documents``, every string at its object
    size); past it they are dropped (counted). An empty queue takes one trace whatever its size
    (once cut, at most about 2 MiB with the defaults: 23 texts of 9,024 characters, 20 ids)."""
    max_documents: int = _count(20, maximum=256)
    """Documents of a trace's context sent to the judge, its first ones; the rest are left out
    and never judged (20: twice the deepest default ``scoring.k``, so the judge's relevance
    source covers every default cut-off, and with 8,000 characters each a prompt stays near
    50k tokens, inside common judge models' context)."""
    breaker_failures: int = _count(5, maximum=1000)
    """Failed calls in a row that open the circuit breaker."""
    breaker_failure_ratio: float = _setting(0.5, _failure_ratio)
    """Share of failed calls over ``breaker_window`` that opens it (with ``breaker_min_calls``)."""
    breaker_min_calls: int = _count(10, maximum=100_000)
    """Calls over ``breaker_window`` before ``breaker_failure_ratio`` applies."""
    breaker_window: float = _duration("60s", at_most="1d")
    breaker_cooldown: float = _duration("5s", at_most="1h")
    """How long the open breaker refuses calls before one trial; doubled per failed trial."""
    breaker_max_cooldown: float = _duration("5m", at_most="1d")
    """The longest cool-down the doubling reaches."""
    cache_size: int = _count(10000)
    """Judgements remembered by (query, answer, contexts): identical ones are not judged twice."""
    redact: tuple[str, ...] = _setting((), _patterns)
    """Regular expressions; every match is replaced by ``[REDACTED]`` before text leaves."""
    send_documents: bool = True
    """False: document content is never sent (faithfulness and context relevance are off)."""
    lexical_max_per_second: int = _setting(50, _not_negative)
    """Without an endpoint: lexical estimates over the last second, at most (its cost grows with
    the text; past it a sampled record is skipped, counted); probes' records are always read."""
    export_endpoint: str = _setting("", check_http_url)
    """OTLP/HTTP base URL to send ``gen_ai.evaluation.result`` events to; empty: off."""

    def problems(self) -> list[tuple[str, str]]:
        """The breaker's longest cool-down is not shorter than its first."""
        if self.breaker_max_cooldown < self.breaker_cooldown:
            return [("breaker_max_cooldown", "must be at least breaker_cooldown")]
        return []


_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


@dataclass(frozen=True, slots=True)
class ProbeConfig(_Section):
    """``[[probe]]``: a golden query replayer."""

    name: str = ""
    url: str = ""
    method: str = "POST"
    headers: Mapping[str, str] = _setting(factory=dict, read=_headers)
    body: Any = _setting(factory=lambda: {"question": "{query}"}, read=_body)
    interval: float = _duration("60s")
    timeout: float = _duration("10s", at_most="10m")
    concurrency: int = _count(2, maximum=64)
    dataset: str = ""
    response_ids: str = ""
    response_answer: str = ""

    def problems(self) -> list[tuple[str, str]]:
        """The URL (required), the method and the response paths."""
        found: list[tuple[str, str]] = []
        if not self.url:
            found.append(("url", "required"))
        elif not self.url.startswith(("http://", "https://")):
            found.append(("url", f"must be an http:// or https:// URL, got {self.url!r}"))
        if self.method.upper() not in _METHODS:
            found.append(("method", f"expected one of {sorted(_METHODS)}, got {self.method!r}"))
        for key in ("response_ids", "response_answer"):
            if getattr(self, key):
                try:
                    parse_path(getattr(self, key))
                except ValueError as exc:
                    found.append((key, str(exc)))
        return found


@dataclass(frozen=True, slots=True)
class FeedbackConfig(_Section):
    """``[feedback]``: how long (``retention``) and how many (``max_traces``) scored RAG traces
    stay joinable by ``POST /v1/feedback``."""

    retention: float = _duration("1h", at_most="7d")
    max_traces: int = _count(100_000)
    max_bytes: int = _count(256 * 1024 * 1024)
    """Bytes of the traces kept (every id and string, plus a fixed cost per trace); past it the
    oldest are evicted whatever ``max_traces`` says."""


@dataclass(frozen=True, slots=True)
class Price(_Section):
    """``[pricing."model"]``: USD per million tokens."""

    input: float = _setting(0.0, _not_negative)
    output: float = _setting(0.0, _not_negative)


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


_SECTIONS: dict[str, type[_Section]] = {
    "receiver": ReceiverConfig,
    "metrics": MetricsConfig,
    "traces": TracesConfig,
    "scoring": ScoringConfig,
    "judge": JudgeConfig,
    "feedback": FeedbackConfig,
}


def _probes(table: Any, problems: list[str]) -> tuple[ProbeConfig, ...] | None:
    """``[[probe]]`` tables; each probe's own problems are named ``probe[i].key``."""
    if not isinstance(table, list):
        problems.append("probe: use [[probe]] (an array of tables)")
        return None
    return tuple(ProbeConfig.from_mapping("probe", item, problems, f"probe[{i}]") for i, item in enumerate(table))


def _pricing(table: Any, problems: list[str]) -> dict[str, Price] | None:
    """``[pricing."model"]`` tables; model names are compared without case."""
    if not isinstance(table, dict):
        problems.append("pricing: expected a table of models")
        return None
    prices = {model: Price.from_mapping(f'pricing."{model}"', price, problems) for model, price in table.items()}
    seen: dict[str, str] = {}
    for model in table:
        if model.strip().lower() in seen:
            problems.append(f'pricing."{model}": same model as pricing."{seen[model.strip().lower()]}" (names ignore case)')
        seen.setdefault(model.strip().lower(), model)
    return prices


def _across_probes(probes: tuple[ProbeConfig, ...], scoring: ScoringConfig) -> list[str]:
    """What no single ``[[probe]]`` can tell: unique names, a dataset or a golden set."""
    found: list[str] = []
    names: dict[str, int] = {}
    for i, probe in enumerate(probes):
        if not probe.dataset and not scoring.golden:
            found.append(f"probe[{i}].dataset: required when [scoring] golden is not set")
        name = probe_name(probe)
        if name in names:
            found.append(f"probe[{i}].name: {name!r} is also probe[{names[name]}]'s name")
        names.setdefault(name, i)
    return found


def config_from_mapping(data: Mapping[str, Any], source: str = "config") -> Config:
    """Build and validate a ``Config`` from parsed TOML; ``ConfigError`` lists every problem."""
    problems: list[str] = []
    sections: dict[str, Any] = {}
    for name, table in data.items():
        if name in _SECTIONS:
            sections[name] = _SECTIONS[name].from_mapping(name, table, problems)
        elif name in ("probe", "pricing"):
            part = (_probes if name == "probe" else _pricing)(table, problems)
            if part is not None:
                sections[name] = part
        else:
            problems.append(_unknown(name, [*_SECTIONS, "probe", "pricing"]))
    if "probe" in sections:
        problems.extend(_across_probes(sections["probe"], sections.get("scoring", ScoringConfig())))
    if problems:
        raise ConfigError(source, problems)
    return Config(**sections)


def probe_name(config: ProbeConfig) -> str:
    """The ``probe`` label: the configured name, else the URL."""
    return config.name or config.url


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
