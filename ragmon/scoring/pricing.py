"""Token cost in USD: span attribute, else config price table, else genai-prices' table.

The rule (SPEC §6, "Cost"), first that applies wins:

1. ``span``: the span carried a cost attribute (``span_cost_usd``, finite and >= 0);
2. ``config``: the model is in ``[pricing."model"]`` (USD per million tokens);
3. ``table``: the model is in the price table bundled with the installed ``genai-prices``
   package, matched with that package's own model matchers (dated snapshots, aliases,
   provider fallbacks such as Azure -> OpenAI);
4. ``unpriced``: ``usd`` is ``None``; the caller counts the tokens in
   ``ragmon_unpriced_tokens_total{model}``. A model is never priced at 0 by default.

Offline by construction. genai-prices can refresh its prices from GitHub, but only through
``genai_prices.UpdatePrices`` (a background thread doing an HTTP GET every hour, started by
``UpdatePrices.start()`` or its ``with`` block, or by the package's CLI); it stores what it
fetches in a process-global snapshot that ``genai_prices.calc_price`` then reads. ragmon never
creates ``UpdatePrices`` and never calls ``calc_price``: it builds its own snapshot from the
bundled data (``genai_prices.data.providers``), so even if another library in the process
starts the updater, ragmon's prices stay those of the installed package version. Upgrading
the package is the way to get new prices.

Time. genai-prices keeps price history (start dates) and time-of-day prices (DeepSeek
off-peak). ``Pricer.price`` takes the request time as ``at_ns`` (Unix nanoseconds, e.g. the
span's start); without it the Pricer's ``default_at`` is used, by default a far-future instant
at 12:00 UTC meaning "the newest price listed in the installed table, standard hours". The
clock is never read.

Speed. Lookups (model name and provider -> price) go through a bounded LRU cache keyed by
``(provider, model)`` as they arrive, unknown models included. On a table hit the package's
price for that model is compiled once into per-token rates (one set per input-token tier for
tiered prices) by evaluating genai-prices' own ``ModelPrice.calc_price`` at a few probe
points and checking the fit at another; a price that does not fit falls back to calling
genai-prices per request.
"""

from __future__ import annotations

import bisect
import functools
import math
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Final, Literal, TypeAlias

from ragmon.config import Config, Price

if TYPE_CHECKING:
    from genai_prices.data_snapshot import DataSnapshot
    from genai_prices.types import ModelInfo, ModelPrice, Provider

# genai-prices is imported where it is first used (its table takes about half a second to
# import): a ``Pricer`` imports it when made, so ``ragmon run`` pays at start-up, never on the
# loop, and commands that price nothing (``ragmon eval`` on JSONL, ``--version``) never do.

__all__ = ["PriceResult", "PriceSource", "Pricer"]

PriceSource: TypeAlias = Literal["span", "config", "table", "unpriced"]
"""Where a price came from; ``unpriced`` means no price was found (``usd`` is ``None``)."""

_LATEST: Final = datetime(9999, 12, 31, 12, 0, tzinfo=UTC)
"""Default request time: after every start date in the table, at a standard (peak) hour."""

_SNAPSHOT_TIME: Final = datetime(1970, 1, 1, tzinfo=UTC)
"""Passed to ``DataSnapshot`` so it does not read the clock (only used for auto-updates)."""

_PER_MILLION: Final = 1_000_000

# OTel ``gen_ai.provider.name`` / deprecated ``gen_ai.system`` and OpenInference
# ``llm.provider`` / ``llm.system`` values whose genai-prices provider id differs. Anything
# else is passed to genai-prices as is (lower-cased); its own ``provider_match`` rules then
# apply (e.g. "Anthropic", "bedrock", "together_ai").
_PROVIDER_IDS: Final[Mapping[str, str]] = {
    "aws.bedrock": "aws",
    "bedrock": "aws",
    "azure.ai.openai": "azure",
    "az.ai.openai": "azure",
    "azure.ai.inference": "azure",
    "az.ai.inference": "azure",
    "azure_openai": "azure",
    "gcp.gemini": "google",
    "gcp.vertex_ai": "google",
    "gcp.gen_ai": "google",
    "vertex_ai": "google",
    "vertexai": "google",
    "gemini": "google",
    "mistral_ai": "mistral",
    "mistralai": "mistral",
    "x_ai": "x-ai",
    "xai": "x-ai",
}

_DATE_SUFFIX: Final = re.compile(r"-(?:\d{4}-\d{2}-\d{2}|\d{8})$")


@dataclass(frozen=True, slots=True)
class PriceResult:
    """The price of one model call.

    ``usd`` is ``None`` exactly when ``source`` is ``"unpriced"``. ``matched`` names what
    priced it: the config key (``config``) or ``"provider:model-id"`` in genai-prices
    (``table``); ``None`` for ``span`` and ``unpriced``.
    """

    usd: float | None
    source: PriceSource
    matched: str | None = None


_UNPRICED: Final = PriceResult(None, "unpriced")


@dataclass(frozen=True, slots=True)
class _Piece:
    """Affine price on one input tier: ``base + uncached*(in-cached) + cached*c + output*out``."""

    base: float
    uncached: float
    cached: float
    output: float


@dataclass(frozen=True, slots=True)
class _Compiled:
    """A genai-prices ``ModelPrice`` as rates.

    Piece ``i`` applies when ``thresholds[i-1] < input_tokens <= thresholds[i]`` (genai-prices
    applies a tier once the input tokens exceed its start).
    """

    thresholds: tuple[int, ...]
    pieces: tuple[_Piece, ...]

    def cost(self, input_tokens: int, cached: int, output_tokens: int) -> float:
        p = (
            self.pieces[bisect.bisect_left(self.thresholds, input_tokens)]
            if self.thresholds
            else self.pieces[0]
        )
        return (
            p.base
            + p.uncached * (input_tokens - cached)
            + p.cached * cached
            + p.output * output_tokens
        )


def _package_total(
    model_price: ModelPrice, input_tokens: int, cached: int, output_tokens: int
) -> Decimal:
    """genai-prices' own total for this usage (``input_tokens`` includes ``cached``)."""
    from genai_prices.types import Usage

    usage = Usage(input_tokens=input_tokens, cache_read_tokens=cached, output_tokens=output_tokens)
    return model_price.calc_price(usage)["total_price"]


def _fit_piece(model_price: ModelPrice, lo: int, hi: int) -> _Piece | None:
    """Fit the affine price on input counts ``lo..hi`` (one tier) and check it at a third point."""
    if hi - lo < 2:
        return None
    p_lo = _package_total(model_price, lo, 0, 0)
    uncached = (_package_total(model_price, hi, 0, 0) - p_lo) / (hi - lo)
    base = p_lo - uncached * lo
    cached = (_package_total(model_price, hi, hi, 0) - base) / hi
    output = (_package_total(model_price, lo, 0, _PER_MILLION) - p_lo) / _PER_MILLION
    n = (lo + hi) // 2
    c, o = n // 3, 7_777
    want = _package_total(model_price, n, c, o)
    got = base + uncached * (n - c) + cached * c + output * o
    if abs(want - got) > Decimal("1e-12") * max(Decimal(1), abs(want)):
        return None
    return _Piece(float(base), float(uncached), float(cached), float(output))


def _compile(model_price: ModelPrice) -> _Compiled | None:
    """Turn a genai-prices price into per-token rates; ``None`` when it is not affine per tier."""
    from genai_prices.types import TieredPrices

    starts = sorted(
        {
            tier.start
            for value in vars(model_price).values()
            if isinstance(value, TieredPrices)
            for tier in value.tiers
        }
    )
    pieces: list[_Piece] = []
    try:
        for i in range(len(starts) + 1):
            lo = starts[i - 1] + 1 if i else 0
            hi = starts[i] if i < len(starts) else lo + _PER_MILLION
            piece = _fit_piece(model_price, lo, hi)
            if piece is None:
                return None
            pieces.append(piece)
    except (ValueError, ArithmeticError):
        return None
    return _Compiled(tuple(starts), tuple(pieces))


class _ConfigRate:
    """A ``[pricing."model"]`` entry; cached input tokens are billed at the input price."""

    __slots__ = ("_input", "_output", "_result_key")

    def __init__(self, key: str, price: Price) -> None:
        self._input = price.input / _PER_MILLION
        self._output = price.output / _PER_MILLION
        self._result_key = key

    def price(
        self, input_tokens: int, cached: int, output_tokens: int, at_ns: int | None
    ) -> PriceResult:
        return PriceResult(
            input_tokens * self._input + output_tokens * self._output, "config", self._result_key
        )


class _TableRate:
    """One genai-prices model; compiled rates per ``ModelPrice`` it can resolve to."""

    __slots__ = ("_by_price", "_default_at", "_fixed", "_matched", "_model")

    def __init__(self, provider: Provider, model: ModelInfo, default_at: datetime) -> None:
        from genai_prices.types import ModelPrice

        self._model = model
        self._matched = f"{provider.id}:{model.id}"
        self._default_at = default_at
        # prices that do not depend on time are compiled once; a history is compiled lazily,
        # one entry per ModelPrice object (kept alive by ``model``, so ids are stable).
        self._fixed: tuple[ModelPrice, _Compiled | None] | None = None
        self._by_price: dict[int, tuple[ModelPrice, _Compiled | None]] = {}
        if isinstance(model.prices, ModelPrice):
            self._fixed = (model.prices, _compile(model.prices))

    def price(
        self, input_tokens: int, cached: int, output_tokens: int, at_ns: int | None
    ) -> PriceResult:
        entry = self._fixed
        if entry is None:
            at = self._default_at if at_ns is None else datetime.fromtimestamp(at_ns / 1e9, UTC)
            model_price = self._model.get_prices(at)
            entry = self._by_price.get(id(model_price))
            if entry is None:
                entry = self._by_price[id(model_price)] = (model_price, _compile(model_price))
        model_price, compiled = entry
        if compiled is not None:
            usd = compiled.cost(input_tokens, cached, output_tokens)
        else:
            try:
                usd = float(_package_total(model_price, input_tokens, cached, output_tokens))
            except (ValueError, ArithmeticError, InvalidOperation):
                return _UNPRICED
        return PriceResult(usd, "table", self._matched)


_Rate: TypeAlias = _ConfigRate | _TableRate


def _provider_id(provider: str | None) -> str | None:
    """An OTel/OpenInference provider name as a genai-prices provider id (``None`` if empty)."""
    if not provider:
        return None
    name = provider.strip().lower()
    return _PROVIDER_IDS.get(name, name) or None


def _config_names(model: str) -> list[str]:
    """Config keys to try, in order: the name, without ``provider/`` prefix, without date suffix."""
    name = model.strip().lower()
    names = [name]
    if "/" in name:
        names.append(name.rpartition("/")[2])
    for n in list(names):
        undated = _DATE_SUFFIX.sub("", n)
        if undated != n:
            names.append(undated)
    return names


class Pricer:
    """Prices model calls: span cost, else config table, else genai-prices, else unpriced.

    ``prices`` is the config's ``[pricing."model"]`` table (USD per million tokens); keys match
    case-insensitively, first as given, then without a ``provider/`` prefix, then without a
    trailing ``-YYYY-MM-DD`` / ``-YYYYMMDD`` date. ``package_table=False`` turns the
    genai-prices fallback off. ``default_at`` is the request time used when a call gives none
    (see the module docstring). ``cache_size`` bounds the lookup cache.

    Thread-safe: lookups go through ``functools.lru_cache``; a lookup may be computed twice
    under contention, with the same result. The package table loads once, on ``warm`` or the
    first package lookup (a lookup during a load waits for it).
    """

    def __init__(
        self,
        prices: Mapping[str, Price] | None = None,
        *,
        package_table: bool = True,
        default_at: datetime = _LATEST,
        cache_size: int = 4096,
    ) -> None:
        if cache_size < 1:
            raise ValueError(f"cache_size: must be at least 1, got {cache_size}")
        self._config: dict[str, _ConfigRate] = {}
        seen: dict[str, str] = {}
        for key, price in (prices or {}).items():
            for field, value in (("input", price.input), ("output", price.output)):
                if not math.isfinite(value) or value < 0:
                    raise ValueError(
                        f'pricing."{key}".{field}: must be a number >= 0, got {value!r}'
                    )
            norm = key.strip().lower()
            if norm in seen:
                raise ValueError(
                    f'pricing."{key}": same model as pricing."{seen[norm]}" (names ignore case)'
                )
            seen[norm] = key
            self._config[norm] = _ConfigRate(key, price)
        self._package_table = package_table
        self._default_at = default_at
        self._cache_size = cache_size
        self._snapshot: DataSnapshot | None = None
        """Loaded on the first package lookup or by ``warm`` (genai-prices takes ~0.2 s to import)."""
        self._loading = threading.Lock()
        self._snapshot_misses = 0
        self._lookup = functools.lru_cache(
            maxsize=cache_size
        )(self._resolve)

    @classmethod
    def from_config(cls, config: Config) -> Pricer:
        """The Pricer for a ``Config``: its ``[pricing]`` table plus the package table."""
        return cls(config.pricing)

    def price(
        self,
        model: str,
        provider: str | None,
        input_tokens: int,
        output_tokens: int,
        cached_input_tokens: int = 0,
        span_cost_usd: float | None = None,
        at_ns: int | None = None,
    ) -> PriceResult:
        """Price one model call.

        ``model`` as the span names it (``gen_ai.response.model`` or ``gen_ai.request.model``,
        ``llm.model_name``); ``provider`` from ``gen_ai.provider.name`` / ``gen_ai.system`` /
        ``llm.provider``, or ``None``. ``input_tokens`` counts all input tokens, cached ones
        included (OpenAI's ``prompt_tokens``; for Anthropic add ``cache_read_input_tokens``
        and ``cache_creation_input_tokens`` to ``input_tokens``); ``cached_input_tokens`` is
        the part read from a prompt cache, billed at the cache-read price when the table has
        one. ``span_cost_usd`` wins when it is finite and >= 0 (otherwise it is ignored).
        ``at_ns`` is the request time in Unix nanoseconds (for price history).

        A known model with zero tokens costs 0.0 (plus any per-request price), not unpriced.
        Raises ``ValueError`` for negative token counts or more cached than input tokens.
        """
        if span_cost_usd is not None and math.isfinite(span_cost_usd) and span_cost_usd >= 0:
            return PriceResult(float(span_cost_usd), "span")
        if input_tokens < 0 or output_tokens < 0 or cached_input_tokens < 0:
            raise ValueError(
                f"token counts must be >= 0, got input={input_tokens} output={output_tokens} "
                f"cached={cached_input_tokens}"
            )
        if cached_input_tokens > input_tokens:
            raise ValueError(
                f"cached_input_tokens ({cached_input_tokens}) cannot exceed "
                f"input_tokens ({input_tokens})"
            )
        rate = self._lookup(provider, model)
        if rate is None:
            return _UNPRICED
        return rate.price(input_tokens, cached_input_tokens, output_tokens, at_ns)

    @property
    def cached_lookups(self) -> int:
        """How many ``(provider, model)`` lookups the cache holds now (at most ``cache_size``)."""
        return self._lookup.cache_info().currsize

    def _resolve(self, provider: str | None, model: str) -> _Rate | None:
        """Uncached lookup: the config table, then the package table."""
        for name in _config_names(model):
            if (config_rate := self._config.get(name)) is not None:
                return config_rate
        if not self._package_table:
            return None
        found = self._find_in_package(provider, model)
        if found is None:
            return None
        return _TableRate(found[0], found[1], self._default_at)

    @property
    def loaded(self) -> bool:
        """Whether the package table is loaded (``warm`` or a package lookup loads it)."""
        return self._snapshot is not None

    def warm(self) -> None:
        """Load the package table now (imports genai-prices), so no lookup waits for it:
        ``ragmon run`` calls it in a thread once its listeners are up."""
        if self._package_table:
            self._table()

    def _table(self) -> DataSnapshot:
        """The package table's snapshot, loaded once (a concurrent first call waits for it)."""
        snapshot = self._snapshot
        if snapshot is None:
            with self._loading:
                snapshot = self._snapshot
                if snapshot is None:
                    snapshot = self._snapshot = self._new_snapshot()
        return snapshot

    def _new_snapshot(self) -> DataSnapshot:
        """Our own snapshot of the bundled data, never the process-global (auto-updatable) one."""
        from genai_prices.data import providers
        from genai_prices.data_snapshot import DataSnapshot

        return DataSnapshot(
            providers=providers, from_auto_update=False, timestamp=_SNAPSHOT_TIME
        )

    def _find_in_package(
        self, provider: str | None, model: str
    ) -> tuple[Provider, ModelInfo] | None:
        """genai-prices' own matching, trying the provider hint, then ``provider/`` prefixes.

        Order: (provider, model); if the model has a ``prefix/``: (provider, rest) when there is
        a hint, (prefix as provider, rest), (no provider, rest); finally (no provider, model), i.e.
        genai-prices infers the provider from the model name. A provider genai-prices does
        not know (``ollama``, ``ibm.watsonx.ai``) counts as none.
        """
        # DataSnapshot memoizes every lookup in plain dicts; start a fresh one now and then so
        # a stream of distinct model names cannot grow them without bound.
        self._snapshot_misses += 1
        if self._snapshot_misses > self._cache_size:
            self._snapshot = self._new_snapshot()
            self._snapshot_misses = 0
        snapshot = self._table()
        pid = self._known_provider(snapshot, _provider_id(provider))
        attempts: list[tuple[str | None, str]] = [(pid, model)]
        if "/" in model:
            prefix, _, rest = model.partition("/")
            if pid is not None:
                attempts.append((pid, rest))
            attempts += [(self._known_provider(snapshot, _provider_id(prefix)), rest), (None, rest)]
        attempts.append((None, model))
        tried: set[tuple[str | None, str]] = set()
        for attempt in attempts:
            if attempt in tried or (attempt[0] is None and not attempt[1]):
                continue
            tried.add(attempt)
            try:
                return snapshot.find_provider_model(attempt[1], None, attempt[0], None)
            except LookupError:
                continue
        return None

    @staticmethod
    def _known_provider(snapshot: DataSnapshot, pid: str | None) -> str | None:
        """``pid`` if genai-prices knows the provider (id or its matchers), else ``None``."""
        if pid is None:
            return None
        try:
            snapshot.find_provider(None, pid, None)
        except LookupError:
            return None
        return pid
