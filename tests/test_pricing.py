"""Tests for ragmon.scoring.pricing: the cost rule, matching, genai-prices parity, caching, offline.

Expected table prices are computed through genai-prices' public ``calc_price`` for the same
tokens, never hard-coded, so these tests follow the installed package's data.
"""

from __future__ import annotations

import math
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator, Sized
from datetime import UTC, datetime
from decimal import Decimal

import genai_prices
import pytest
from genai_prices import data_snapshot
from genai_prices.data import providers as bundled_providers
from genai_prices.types import ClauseEquals, ModelInfo, ModelPrice, Provider, Tier, TieredPrices

from ragmon.config import Config, Price
from ragmon.scoring import pricing
from ragmon.scoring.pricing import Pricer, PriceResult, _compile, _package_total, _TableRate

pytestmark = pytest.mark.system  # (tests/conftest.py: what a system test is)

LATEST = datetime(9999, 12, 31, 12, 0, tzinfo=UTC)


def _blocked(*args: object, **kwargs: object) -> None:
    raise AssertionError(f"network use attempted: {args!r}")


class _NoSocket(socket.socket):
    """Stands in for ``socket.socket``: creating one fails the test."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        _blocked(*args)


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fail any test that opens a socket or resolves a name; and no genai-prices updater thread."""
    monkeypatch.setattr(socket, "socket", _NoSocket)
    monkeypatch.setattr(socket, "create_connection", _blocked)
    monkeypatch.setattr(socket, "getaddrinfo", _blocked)
    yield
    assert not [t for t in threading.enumerate() if t.name.startswith("genai_prices")]


def package_usd(
    model: str,
    provider_id: str | None,
    input_tokens: int,
    output_tokens: int,
    cached: int = 0,
    at: datetime = LATEST,
) -> float:
    """genai-prices' own price for the same call, through its public API."""
    usage = genai_prices.Usage(
        input_tokens=input_tokens, output_tokens=output_tokens, cache_read_tokens=cached
    )
    calc = genai_prices.calc_price(
        usage, model, provider_id=provider_id, genai_request_timestamp=at
    )
    return float(calc.total_price)


def package_match(model: str, provider_id: str | None) -> str:
    """``provider:model-id`` of the entry genai-prices prices this call with."""
    usage = genai_prices.Usage(input_tokens=1, output_tokens=1)
    calc = genai_prices.calc_price(
        usage, model, provider_id=provider_id, genai_request_timestamp=LATEST
    )
    return f"{calc.provider.id}:{calc.model.id}"


def model_prices(model: ModelInfo) -> list[ModelPrice]:
    """A model's price, or each price of its history."""
    return [model.prices] if isinstance(model.prices, ModelPrice) else [c.prices for c in model.prices]


def bundled_model_prices() -> Iterator[tuple[str, ModelPrice]]:
    """Every ``ModelPrice`` in the bundled table, price history entries included."""
    for provider in bundled_providers:
        for model in provider.models:
            for i, model_price in enumerate(model_prices(model)):
                yield f"{provider.id}:{model.id}#{i}", model_price


def ns(at: datetime) -> int:
    return int(at.timestamp()) * 1_000_000_000


# --- the rule: span > config > table > unpriced ---------------------------------------------


def test_span_cost_wins_over_config_and_table() -> None:
    pricer = Pricer({"gpt-4o-mini": Price(input=100.0, output=100.0)})
    result = pricer.price("gpt-4o-mini", "openai", 1000, 500, span_cost_usd=0.0123)
    assert result == PriceResult(0.0123, "span")
    assert Pricer().price("llama3", None, 10, 10, span_cost_usd=0.0).source == "span"


@pytest.mark.parametrize("bad", [math.nan, math.inf, -0.5])
def test_invalid_span_cost_is_ignored(bad: float) -> None:
    result = Pricer().price("gpt-4o-mini", "openai", 1000, 500, span_cost_usd=bad)
    assert result.source == "table"
    assert result.usd == pytest.approx(package_usd("gpt-4o-mini", "openai", 1000, 500))


def test_config_beats_table() -> None:
    pricer = Pricer({"gpt-4o-mini": Price(input=1.0, output=2.0)})
    result = pricer.price("gpt-4o-mini", "openai", 1_000_000, 500_000, cached_input_tokens=200_000)
    assert result.source == "config"
    assert result.matched == "gpt-4o-mini"
    # cached tokens are part of the input tokens and billed at the config input price
    assert result.usd == pytest.approx(1.0 + 1.0)
    assert result.usd != pytest.approx(
        package_usd("gpt-4o-mini", "openai", 1_000_000, 500_000, 200_000)
    )


def test_config_matching_case_prefix_and_date() -> None:
    pricer = Pricer({"My-Model": Price(input=3.0, output=6.0)}, package_table=False)
    expected = (1000 * 3.0 + 10 * 6.0) / 1e6
    for name in (
        "My-Model",
        "my-model",
        "MY-MODEL",
        "acme/my-model",
        "my-model-2024-07-18",
        "acme/My-Model-20240718",
    ):
        result = pricer.price(name, None, 1000, 10)
        assert (result.source, result.matched) == ("config", "My-Model"), name
        assert result.usd == pytest.approx(expected)
    assert pricer.price("my-model-v2", None, 1000, 10).source == "unpriced"


def test_config_names_drop_every_path_segment_before_the_model() -> None:
    """``openrouter/acme/my-model`` finds ``[pricing."my-model"]``: the config key is matched
    against the part after the last ``/``."""
    pricer = Pricer({"my-model": Price(input=3.0, output=6.0)}, package_table=False)
    result = pricer.price("openrouter/acme/my-model", None, 1000, 10)
    assert (result.source, result.matched) == ("config", "my-model")


def test_config_exact_name_beats_stripped_name() -> None:
    pricer = Pricer({"gpt-4o": Price(1.0, 1.0), "openai/gpt-4o": Price(2.0, 2.0)})
    assert pricer.price("openai/gpt-4o", None, 1_000_000, 0).usd == pytest.approx(2.0)
    assert pricer.price("azure/gpt-4o", None, 1_000_000, 0).usd == pytest.approx(1.0)


def test_unknown_model_is_unpriced() -> None:
    pricer = Pricer()
    for provider in (None, "ollama", "openai"):
        result = pricer.price("llama3", provider, 1000, 500)
        assert result == PriceResult(None, "unpriced")
    assert pricer.price("", None, 10, 10).usd is None


def test_without_package_table_only_config_prices() -> None:
    assert Pricer(package_table=False).price("gpt-4o-mini", "openai", 10, 10).source == "unpriced"


# --- parity with genai-prices ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "provider", "provider_id"),
    [
        ("gpt-4o-mini", "openai", "openai"),
        ("gpt-4o", None, None),
        ("claude-3-5-sonnet-20241022", "anthropic", "anthropic"),
        ("gpt-4o", "azure.ai.openai", "azure"),
        ("anthropic.claude-3-5-sonnet-20241022-v2:0", "aws.bedrock", "aws"),
        ("gemini-1.5-pro", "gcp.vertex_ai", "google"),
        ("mistral-large-latest", "mistral_ai", "mistral"),
    ],
)
def test_table_price_equals_genai_prices(
    model: str, provider: str | None, provider_id: str | None
) -> None:
    result = Pricer().price(model, provider, 12_345, 678, cached_input_tokens=2_000)
    expected = package_usd(model, provider_id, 12_345, 678, 2_000)
    assert result.source == "table"
    assert result.matched == package_match(model, provider_id)
    assert expected > 0
    assert result.usd == pytest.approx(expected, rel=1e-12)


def test_dated_snapshot_names_resolve() -> None:
    pricer = Pricer()
    for dated, base in [
        ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),
        ("gpt-4o-mini-20240718", "gpt-4o-mini"),
        ("claude-3-5-sonnet-20241022", "claude-3-5-sonnet"),
    ]:
        a, b = pricer.price(dated, None, 5000, 700), pricer.price(base, None, 5000, 700)
        assert a.source == "table"
        assert a.usd == pytest.approx(b.usd) == pytest.approx(package_usd(dated, None, 5000, 700))
        assert a.matched == b.matched


def test_provider_prefixed_names() -> None:
    pricer = Pricer()
    for prefixed, plain, provider in [
        ("openai/gpt-4o", "gpt-4o", None),
        ("openai/gpt-4o", "gpt-4o", "openai"),
        ("anthropic/claude-3-5-sonnet-20241022", "claude-3-5-sonnet-20241022", None),
    ]:
        result = pricer.price(prefixed, provider, 3000, 300)
        assert result.source == "table"
        assert result.usd == pytest.approx(package_usd(plain, None, 3000, 300))
    # an aggregator that lists the prefixed name itself prices it as it does
    via_openrouter = pricer.price("openai/gpt-4o", "openrouter", 3000, 300)
    assert via_openrouter.matched is not None and via_openrouter.matched.startswith("openrouter:")
    assert via_openrouter.usd == pytest.approx(
        package_usd("openai/gpt-4o", "openrouter", 3000, 300)
    )


def test_zero_tokens_of_known_model_cost_zero_not_unpriced() -> None:
    result = Pricer().price("gpt-4o-mini", "openai", 0, 0)
    assert result.source == "table"
    assert result.usd == 0.0


def test_request_time_selects_price_history() -> None:
    """Models with dated/time-of-day prices follow ``at_ns`` exactly as genai-prices does."""
    pricer = Pricer()
    histories = [
        (p.id, m.id)
        for p in bundled_providers
        for m in p.models
        if not isinstance(m.prices, ModelPrice)
    ]
    assert histories
    for provider_id, model_id in histories[:40]:
        for at in (
            datetime(2024, 6, 1, 3, 0, tzinfo=UTC),
            datetime(2025, 9, 1, 18, 0, tzinfo=UTC),
            LATEST,
        ):
            try:
                expected = package_usd(model_id, provider_id, 10_000, 1_000, 1_000, at)
            except LookupError:
                continue
            result = pricer.price(
                model_id, provider_id, 10_000, 1_000, 1_000, at_ns=None if at is LATEST else ns(at)
            )
            assert result.usd == pytest.approx(expected, rel=1e-9), (provider_id, model_id, at)


def _usages(prices: list[ModelPrice]) -> list[tuple[int, int, int]]:
    """(input, cached, output) token counts that probe a price: zero, one token, cached
    tokens, both sides of every input-token tier threshold and far above the top tier."""
    starts = {t.start for mp in prices for v in vars(mp).values() if isinstance(v, TieredPrices) for t in v.tiers}
    return [
        (0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 0, 1), (1234, 234, 567), (3_000_000, 1_000_000, 50_000),
        *((s, 0, 10) for s in starts),
        *((s, s, 0) for s in starts),
        *((s + 1, 0, 10) for s in starts),
        *((s + 1, s // 2, 10) for s in starts),
    ]


def test_every_bundled_model_matches_genai_prices() -> None:
    """The compiled per-token rates equal genai-prices' Decimal math for the whole table, at
    every probe of ``_usages``, through the public ``Pricer``."""
    pricer = Pricer(cache_size=100_000)
    checked = 0
    for provider in bundled_providers:
        for model in provider.models:
            for input_tokens, cached, output_tokens in _usages(model_prices(model)):
                try:
                    expected = package_usd(
                        model.id, provider.id, input_tokens, output_tokens, cached
                    )
                except LookupError:  # an id shadowed by an earlier model's matcher
                    continue
                result = pricer.price(model.id, provider.id, input_tokens, output_tokens, cached)
                assert result.source == "table"
                assert result.usd == pytest.approx(expected, rel=1e-9, abs=1e-15), (
                    provider.id,
                    model.id,
                )
                checked += 1
    assert checked > 1000


def test_fallback_to_genai_prices_when_rates_do_not_fit() -> None:
    """A price that cannot be compiled (degenerate tier) is computed by genai-prices per call."""
    model_price = ModelPrice(
        input_mtok=TieredPrices(base=Decimal(1), tiers=[Tier(start=0, price=Decimal(2))]),
        output_mtok=Decimal(4),
    )
    assert _compile(model_price) is None
    model = ModelInfo(id="synthetic", match=ClauseEquals(equals="synthetic"), prices=model_price)
    provider = Provider(id="acme", name="Acme", api_pattern="", models=[model])
    rate = _TableRate(provider, model, LATEST)
    result = rate.price(1000, 0, 10, None)
    assert result == PriceResult((1000 * 2 + 10 * 4) / 1e6, "table", "acme:synthetic")
    assert rate.price(0, 0, 0, None).usd == 0.0


def test_every_bundled_price_is_compiled_to_exact_rates() -> None:
    """The fast path covers the whole table: every bundled ``ModelPrice`` compiles, and the
    compiled rates give genai-prices' own total to 1e-12 relative at every probe of ``_usages``."""
    compiled_count = 0
    for name, model_price in bundled_model_prices():
        compiled = _compile(model_price)
        assert compiled is not None, name
        compiled_count += 1
        for input_tokens, cached, output_tokens in _usages([model_price]):
            expected = float(_package_total(model_price, input_tokens, cached, output_tokens))
            got = compiled.cost(input_tokens, cached, output_tokens)
            assert got == pytest.approx(expected, rel=1e-12, abs=1e-18), (
                name,
                (input_tokens, cached, output_tokens),
            )
    assert compiled_count > 1000


def test_table_prices_are_compiled_once_not_per_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model's price is compiled on first use and reused; a price history compiles each
    price it resolves to once."""
    calls: list[ModelPrice] = []

    def counting(model_price: ModelPrice) -> object:
        calls.append(model_price)
        return _compile(model_price)

    monkeypatch.setattr(pricing, "_compile", counting)
    pricer = Pricer()
    for tokens in (10, 1_000, 100_000):
        assert pricer.price("gpt-4o-mini", "openai", tokens, 10).source == "table"
    assert len(calls) == 1
    calls.clear()
    peak = datetime(2025, 3, 3, 12, 0, tzinfo=UTC)
    off_peak = datetime(2025, 3, 3, 20, 0, tzinfo=UTC)
    for at in (peak, off_peak, peak, off_peak, peak):
        result = pricer.price("deepseek-chat", "deepseek", 5_000, 500, at_ns=ns(at))
        expected = package_usd("deepseek-chat", "deepseek", 5_000, 500, at=at)
        assert result.usd == pytest.approx(expected)
    assert len(calls) == 2
    assert calls[0] is not calls[1]


@pytest.mark.parametrize(
    "at",
    [
        datetime(2025, 3, 3, 16, 30, tzinfo=UTC),  # the discount window opens at 16:30:00 UTC
        datetime(2025, 3, 4, 0, 30, tzinfo=UTC),  # and closes at 00:30:00 UTC
    ],
)
def test_request_time_is_exact_at_price_boundaries(at: datetime) -> None:
    """``at_ns`` is honoured to the second: a request at the instant a price starts gets it."""
    pricer = Pricer()
    before = datetime.fromtimestamp(at.timestamp() - 1, UTC)
    usd_at = pricer.price("deepseek-chat", "deepseek", 10_000, 1_000, at_ns=ns(at)).usd
    usd_before = pricer.price("deepseek-chat", "deepseek", 10_000, 1_000, at_ns=ns(before)).usd
    assert usd_at == pytest.approx(package_usd("deepseek-chat", "deepseek", 10_000, 1_000, at=at))
    assert usd_before == pytest.approx(
        package_usd("deepseek-chat", "deepseek", 10_000, 1_000, at=before)
    )
    assert usd_at != usd_before


@pytest.fixture
def host_time_zone_tokyo(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Run with the process' local time zone at UTC+9 (POSIX TZ rule, no tzdata needed)."""
    monkeypatch.setenv("TZ", "JST-9")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.usefixtures("host_time_zone_tokyo")
def test_request_time_is_utc_whatever_the_host_time_zone() -> None:
    """Time-of-day prices follow the UTC clock of ``at_ns``, not the host's local time."""
    pricer = Pricer()
    for at in (datetime(2025, 3, 3, 12, 0, tzinfo=UTC), datetime(2025, 3, 3, 20, 0, tzinfo=UTC)):
        result = pricer.price("deepseek-chat", "deepseek", 10_000, 1_000, at_ns=ns(at))
        assert result.usd == pytest.approx(
            package_usd("deepseek-chat", "deepseek", 10_000, 1_000, at=at)
        ), at


def test_fallback_bills_cached_tokens_at_the_cache_read_price() -> None:
    """The per-call genai-prices path passes cached tokens through (cache-read price)."""
    model_price = ModelPrice(
        input_mtok=TieredPrices(base=Decimal(1), tiers=[Tier(start=0, price=Decimal(2))]),
        cache_read_mtok=Decimal("0.5"),
        output_mtok=Decimal(4),
    )
    assert _compile(model_price) is None
    model = ModelInfo(id="synthetic", match=ClauseEquals(equals="synthetic"), prices=model_price)
    provider = Provider(id="acme", name="Acme", api_pattern="", models=[model])
    result = _TableRate(provider, model, LATEST).price(1000, 400, 10, None)
    assert result.usd == pytest.approx((600 * 2 + 400 * 0.5 + 10 * 4) / 1e6, rel=1e-12)


@pytest.mark.parametrize(
    ("provider", "provider_id"),
    [
        ("azure.ai.openai", "azure"),
        ("az.ai.inference", "azure"),
        ("azure_openai", "azure"),
        ("Azure.AI.OpenAI", "azure"),
    ],
)
def test_semantic_convention_provider_names_select_the_provider(
    provider: str, provider_id: str
) -> None:
    """OTel provider names map to genai-prices providers (Azure is not priced as OpenAI)."""
    result = Pricer().price("gpt-4o", provider, 3000, 300)
    assert result.matched == package_match("gpt-4o", provider_id) == "azure:gpt-4o"


def test_only_the_first_path_segment_is_a_provider_prefix() -> None:
    """``openrouter/openai/gpt-4o`` is OpenRouter's ``openai/gpt-4o``, not OpenAI's gpt-4o."""
    result = Pricer().price("openrouter/openai/gpt-4o", None, 3000, 300)
    assert result.matched == package_match("openai/gpt-4o", "openrouter")
    assert result.usd == pytest.approx(package_usd("openai/gpt-4o", "openrouter", 3000, 300))


def test_provider_prefix_names_the_provider_of_a_model_only_it_lists() -> None:
    """``groq/gemma-7b-it``: genai-prices cannot infer the provider of ``gemma-7b-it`` from
    the name alone; the ``groq/`` prefix is taken as the provider."""
    with pytest.raises(LookupError):
        package_usd("gemma-7b-it", None, 3000, 300)
    result = Pricer().price("groq/gemma-7b-it", None, 3000, 300)
    assert result.matched == package_match("gemma-7b-it", "groq")
    assert result.usd == pytest.approx(package_usd("gemma-7b-it", "groq", 3000, 300))


@pytest.mark.parametrize("provider, model", [("azure", "gpt-4o"), ("github-copilot", "gpt-4o")])
def test_without_a_hint_the_prefix_is_the_provider_even_of_a_model_others_list(provider: str, model: str) -> None:
    """``azure/gpt-4o`` is Azure's price, not OpenAI's: the prefix is tried as the provider
    before genai-prices guesses a provider from the bare name."""
    result = Pricer().price(f"{provider}/{model}", None, 3000, 300)
    assert result.matched == package_match(model, provider)
    assert result.usd == pytest.approx(package_usd(model, provider, 3000, 300))


def test_model_unknown_to_the_hinted_provider_is_found_by_its_name() -> None:
    """A provider hint that does not list the model (e.g. an OpenAI-compatible proxy) does
    not stop genai-prices from inferring the provider from the model name."""
    result = Pricer().price("openai/claude-3-5-sonnet-20241022", "openai", 3000, 300)
    assert result.matched == package_match("claude-3-5-sonnet-20241022", None)
    assert result.usd == pytest.approx(package_usd("claude-3-5-sonnet-20241022", None, 3000, 300))


# --- offline --------------------------------------------------------------------------------


def test_ignores_process_global_auto_updated_snapshot() -> None:
    """If something else in the process runs genai-prices' updater, ragmon's prices don't move."""
    pricer = Pricer()
    before = pricer.price("gpt-4o-mini", "openai", 1000, 100)
    data_snapshot.set_custom_snapshot(
        data_snapshot.DataSnapshot(providers=[], from_auto_update=True)
    )
    try:
        with pytest.raises(LookupError):
            package_usd("gpt-4o-mini", "openai", 1000, 100)
        assert Pricer().price("gpt-4o-mini", "openai", 1000, 100) == before
    finally:
        data_snapshot.set_custom_snapshot(None)


def test_network_guard_catches_genai_prices_updater() -> None:
    """The guard is real: genai-prices' own remote refresh trips it (and ragmon never calls it)."""
    with pytest.raises(AssertionError, match="network use attempted"):
        genai_prices.UpdatePrices().fetch()


def test_import_and_pricing_use_no_network() -> None:
    """In a fresh interpreter with sockets disabled before the first import."""
    code = textwrap.dedent(
        """
        import socket, threading
        def blocked(*a, **k):
            raise SystemExit("network use attempted")
        class NoSocket(socket.socket):
            def __init__(self, *a, **k):
                blocked()
        socket.socket = NoSocket
        socket.create_connection = blocked
        socket.getaddrinfo = blocked
        from ragmon.scoring.pricing import Pricer
        p = Pricer()
        assert p.price("gpt-4o-mini", "openai", 100, 10).source == "table"
        assert p.price("llama3", None, 100, 10).source == "unpriced"
        assert not [t for t in threading.enumerate() if t.name.startswith("genai_prices")]
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


# --- caching --------------------------------------------------------------------------------


def test_cache_is_bounded() -> None:
    pricer = Pricer(cache_size=8)
    for i in range(200):
        assert pricer.price(f"no-such-model-{i}", None, 1, 1).source == "unpriced"
        pricer.price(f"gpt-4o-mini-{i}", "openai", 1, 1)
    assert pricer.cached_lookups <= 8
    # genai-prices' memo dicts in our snapshot are bounded too: the snapshot is renewed every
    # cache_size misses, each adding a few entries; unrenewed, 400 misses would leave >= 400.
    snapshot = pricer._snapshot
    memo: list[Sized] = [
        snapshot._lookup_cache,
        snapshot._provider_cache,
        snapshot._provider_misses,
    ]
    assert sum(len(m) for m in memo) <= 12 * 8


def test_repeated_lookups_are_served_from_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    pricer = Pricer()
    first = pricer.price("gpt-4o-mini-2024-07-18", "openai", 100, 10)
    unknown = pricer.price("llama3", "ollama", 100, 10)

    def fail(provider: str | None, model: str) -> None:
        raise AssertionError("cache miss")

    monkeypatch.setattr(pricer, "_find_in_package", fail)
    assert pricer.price("gpt-4o-mini-2024-07-18", "openai", 100, 10) == first
    assert pricer.price("llama3", "ollama", 100, 10) == unknown
    assert pricer.cached_lookups == 2


# --- validation and construction ------------------------------------------------------------


@pytest.mark.parametrize(
    ("i", "o", "c", "message"),
    [
        (-1, 0, 0, "token counts must be >= 0, got input=-1 output=0 cached=0"),
        (0, -1, 0, "token counts must be >= 0, got input=0 output=-1 cached=0"),
        (10, 0, -1, "token counts must be >= 0, got input=10 output=0 cached=-1"),
        (10, 0, 11, r"cached_input_tokens \(11\) cannot exceed input_tokens \(10\)"),
    ],
)
def test_bad_token_counts_raise(i: int, o: int, c: int, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{message}$"):
        Pricer().price("gpt-4o-mini", "openai", i, o, c)


def test_bad_config_table_raises_naming_the_key() -> None:
    with pytest.raises(ValueError, match=r'pricing\."m"\.output'):
        Pricer({"m": Price(input=1.0, output=-1.0)})
    with pytest.raises(ValueError, match=r'pricing\."M"'):
        Pricer({"m": Price(), "M": Price()})
    with pytest.raises(ValueError, match="cache_size"):
        Pricer(cache_size=0)


def test_from_config() -> None:
    pricer = Pricer.from_config(Config(pricing={"my-model": Price(input=0.15, output=0.60)}))
    result = pricer.price("my-model", None, 1_000_000, 1_000_000)
    assert result.source == "config"
    assert result.usd == pytest.approx(0.75)
    assert pricer.price("gpt-4o-mini", "openai", 10, 10).source == "table"


def _modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``code``."""
    script = f"import sys\n{code}\nprint('\\n'.join(sys.modules))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    return set(done.stdout.split())


def test_the_price_table_is_imported_when_warmed_or_first_needed_not_by_the_command_line() -> None:
    """genai-prices takes about a fifth of a second to import: the command line (``eval``,
    ``--version``, ``run`` before its ports open) does not pay it and neither does making a
    ``Pricer``; ``warm`` (``ragmon run`` calls it in a thread once it listens) or the first
    package lookup does."""
    assert not any(m.startswith("genai_prices") for m in _modules_after("import ragmon.cli, ragmon.sidecar.process"))
    table = {"genai_prices.data", "genai_prices.data_snapshot", "genai_prices.types"}
    assert not table & _modules_after("from ragmon.scoring.pricing import Pricer\nPricer()")
    assert table <= _modules_after("from ragmon.scoring.pricing import Pricer\nPricer().warm()")
    assert table <= _modules_after("from ragmon.scoring.pricing import Pricer\nPricer().price('gpt-4o-mini', None, 1, 1)")
    assert not table & _modules_after("from ragmon.scoring.pricing import Pricer\nPricer(package_table=False).warm()")


def test_a_pricer_loads_its_table_once_and_warm_means_loaded() -> None:
    pricer = Pricer()
    assert not pricer.loaded
    pricer.warm()
    assert pricer.loaded
    first = pricer._table()
    pricer.warm()
    assert pricer._table() is first
    assert pricer.price("gpt-4o-mini", "openai", 10, 10).source == "table"
    assert not Pricer(package_table=False).loaded


def test_threads_asking_at_once_share_one_load(monkeypatch: pytest.MonkeyPatch) -> None:
    pricer = Pricer()
    made: list[object] = []
    real = Pricer._new_snapshot

    def slow(self: Pricer) -> object:
        time.sleep(0.05)
        made.append(real(self))
        return made[-1]

    monkeypatch.setattr(Pricer, "_new_snapshot", slow)
    threads = [threading.Thread(target=pricer.warm) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made) == 1 and pricer._table() is made[0]

