"""The metric catalogue (ragmon/catalogue.py) is the one list of families: the exposition
(golden file), the alert rules, the dashboard and the documentation name only what it holds, with
the labels it gives them. The metrics reference's table is generated from it
(``tools/docs_hooks.py``); the prose of the README and the docs is checked against it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_docs_reference import hooks  # tools/docs_hooks.py, the MkDocs hook that generates the reference tables

from ragmon.sidecar.wiring import Sidecar
from ragmon.config import Config
from ragmon.catalogue import CATALOGUE, Family, Kind, by_sample
from ragmon.ops.dashboard import dashboard
from ragmon.ops.rules import Thresholds, rule_groups

ROOT = Path(__file__).parent.parent
GOLDEN = Path(__file__).parent / "data" / "metric_families.txt"
MUTANTS = re.compile(r"^```mutants\n.*?^```$", re.MULTILINE | re.DOTALL)
"""docs/explanation/reliability.md's list of surviving mutants quotes source lines, not metric names."""
PAGES = {path.relative_to(ROOT).as_posix(): MUTANTS.sub("", path.read_text(encoding="utf-8"))
         for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]}
"""The hand-written pages: the README and every page of the documentation site."""
METRICS_PAGE = "docs/reference/metrics.md"
NOT_IN_GOLDEN = {
    "ragmon_connections_open", "ragmon_connections_refused", "ragmon_connections_closed",  # listeners, not the registry alone
    "ragmon_scrapes_dropped", "ragmon_scrape_bytes", "ragmon_http_requests_unrouted",  # the metrics server and receivers
    "ragmon_evaluations_exported",  # with judge.export_endpoint
    "ragmon_probe_requests", "ragmon_probe_duration_seconds", "ragmon_probe_traces", "ragmon_probe_traces_pending",  # with probes
}
"""Families the golden file's sidecar (default config, no listeners) does not export."""
HISTOGRAMS = frozenset(f.name for f in CATALOGUE if f.kind is Kind.HISTOGRAM)
TARGET_LABELS = frozenset({"job", "instance"})
"""Labels Prometheus adds at scrape time."""
SELECTOR = re.compile(r"\b(ragmon_\w+)(?:\{([^}]*)\})?")
MATCHER_NAME = re.compile(r"(\w+)\s*(?:=~|!~|!=|=)")
GROUPING = re.compile(r"\bby \(([^)]*)\) \((?:\w+\()?$")
LABEL_VALUES = re.compile(r"label_values\((ragmon_\w+)(?:\{[^}]*\})?, (\w+)\)")


def _exposed(family: Family) -> str:
    """The name people read: a counter's ``_total``, a histogram's or gauge's own name."""
    return family.total if family.kind is Kind.COUNTER else family.name


def test_names_are_unique_and_follow_the_conventions() -> None:
    names = [f.name for f in CATALOGUE]
    assert len(names) == len(set(names))
    samples = [s for f in CATALOGUE for s in f.samples()]
    assert len(samples) == len(set(samples)), "a sample name belongs to two families"
    for family in CATALOGUE:
        assert re.fullmatch(r"ragmon_[a-z][a-z0-9_]*", family.name), family.name
        assert not family.name.endswith("_total"), family.name
        assert family.help.endswith("."), family.name
        assert bool(family.buckets) == (family.kind is Kind.HISTOGRAM), family.name
        assert list(family.buckets) == sorted(family.buckets), family.name
        assert not family.unit or family.name.endswith(f"_{family.unit}") or f"_{family.unit}_" in family.name, family.name
        assert len(set(family.labels)) == len(family.labels), family.name
        assert by_sample(next(iter(family.samples()))) is family
    with pytest.raises(TypeError, match="_bucket"):
        _ = by_sample("ragmon_traces_total").bucket
    with pytest.raises(TypeError, match="histogram"):
        _family("ragmon_faithfulness").empty()


def test_the_series_budget_names_catalogue_families() -> None:
    """``ragmon_series_folded_total{metric}`` names each family as it is exposed."""
    metrics = Sidecar(Config(), clock=lambda: 10.0).metrics
    assert set(metrics.series_folded()) <= {_exposed(f) for f in CATALOGUE}


def _family(name: str) -> Family:
    """The family of a sample name or a histogram's own name."""
    return next((f for f in CATALOGUE if f.name == name and f.kind is Kind.HISTOGRAM), None) or by_sample(name)


def test_the_exposition_is_the_catalogue() -> None:
    """Every family of the golden file is a catalogue entry with its help, type, labels and
    buckets; every entry is in the golden file unless it needs a listener, probes or onward export."""
    golden = GOLDEN.read_text()
    seen = set()
    for name, help_text, kind in re.findall(r"^# HELP (\S+) (.*)\n# TYPE \1 (\w+)$", golden, flags=re.MULTILINE):
        if not name.endswith("_created"):
            family = _family(name)
            seen.add(family.name)
            assert (family.help, family.kind.value) == (help_text, kind), name
    assert seen == {f.name for f in CATALOGUE} - NOT_IN_GOLDEN
    for name, labels in re.findall(r"^(ragmon_\w+)\{(.*)\}$", golden, flags=re.MULTILINE):
        if not name.endswith("_created"):
            assert sorted(by_sample(name).samples()[name]) == [label for label in labels.split(",") if label], name
    for family in CATALOGUE:
        le = re.search(rf"^{family.name}_bucket\{{.*\n  le: (.*)$", golden, flags=re.MULTILINE)
        if le:
            assert le.group(1).split()[:-1] == [str(b) for b in family.buckets], family.name


def _uses(expr: str) -> Iterator[tuple[str, set[str]]]:
    """Each ``ragmon_*`` series ``expr`` reads and the labels it reads it by: its matchers, the
    ``by (…)`` of the aggregation right around it and ``label_values``' label."""
    for match in SELECTOR.finditer(expr):
        labels = set(MATCHER_NAME.findall(match.group(2) or ""))
        grouping = GROUPING.search(expr[: match.start()])
        if grouping:
            labels |= {label.strip() for label in grouping.group(1).split(",")}
        yield match.group(1), labels
    for match in LABEL_VALUES.finditer(expr):
        yield match.group(1), {match.group(2)}


def _check(exprs: list[str]) -> set[str]:
    read = set()
    for expr in exprs:
        for name, labels in _uses(expr):
            assert name not in HISTOGRAMS, f"a histogram is read by its _bucket, _sum or _count, not {name}: {expr}"
            family = by_sample(name)
            unknown = labels - set(family.samples()[name]) - TARGET_LABELS
            assert not unknown, (name, unknown, expr)
            read.add(name)
    return read


def _rule_exprs() -> list[str]:
    variants = (Thresholds(), Thresholds(hit_rate_floor=0.5, mrr_floor=0.5, faithfulness_floor=0.5, faithfulness_skip_judges=()))
    return [rule["expr"] for t in variants for group in rule_groups(thresholds=t)["groups"] for rule in group["rules"]]


def test_every_series_the_rules_read_is_in_the_catalogue_with_its_labels() -> None:
    assert len(_check(_rule_exprs())) >= 15


def test_rules_read_only_aggregatable_series() -> None:
    """No rule reads a gauge (the rolling ones are one replica's view); quality ratios are sums
    of counter and histogram rates."""
    for expr in _rule_exprs():
        for name, _ in _uses(expr):
            assert by_sample(name).kind in (Kind.COUNTER, Kind.HISTOGRAM), (name, expr)


def test_every_series_the_dashboard_reads_is_in_the_catalogue_with_its_labels() -> None:
    model = dashboard()
    exprs = [t["expr"] for p in model["panels"] for t in p.get("targets", [])]
    exprs += [v["query"] for v in model["templating"]["list"] if v["type"] == "query"]
    assert len(_check(exprs)) >= 40


def test_the_checks_see_a_wrong_name_or_label() -> None:
    with pytest.raises(KeyError):
        _check(['sum by (service) (rate(ragmon_trace_total[5m]))'])
    with pytest.raises(AssertionError, match="stage"):
        _check(['sum by (service, stage) (rate(ragmon_traces_total[5m]))'])
    with pytest.raises(AssertionError, match="model"):
        _check(['sum (rate(ragmon_retrieval_hits_total{model="x"}[5m]))'])
    with pytest.raises(AssertionError, match="histogram"):
        _check(["sum (rate(ragmon_faithfulness[5m]))"])
    assert _check(['histogram_quantile(0.9, sum by (le, instance) (rate(ragmon_request_duration_seconds_bucket[5m])))'])


# -- the documentation ------------------------------------------------------------------------------


def _table_rows(text: str) -> Iterator[tuple[list[str], str | None, list[str]]]:
    """(names, type or None, label names) of each row of the metric tables in ``text``: tables
    headed ``| metric | type | labels | … |`` (labels ``—``: none) or ``| metric | labels |``."""
    header: list[str] = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|"):
            header = []
            continue
        if not header:
            header = cells
            continue
        if header[:3] not in (["metric", "type", "labels"], ["metric", "labels"]) or not line.startswith("| `ragmon_"):
            continue
        names = re.findall(r"`(ragmon_\w+)`", cells[0])
        kind = cells[1] if header[1] == "type" else None
        labels = re.sub(r"\([^)]*\)", "", cells[2 if kind else 1].split(" — ")[0])
        yield names, kind, [label.strip() for label in labels.split(",") if label.strip() not in ("", "—")]


def _check_rows(rows: list[tuple[list[str], str | None, list[str]]]) -> set[str]:
    """Each row's type and labels are the catalogue's; the names the rows give."""
    named = set()
    for names, kind, labels in rows:
        for name in names:
            family = by_sample(name) if kind != "histogram" else next(f for f in CATALOGUE if f.name == name)
            assert kind is None or kind == family.kind.value, name
            assert labels == list(family.labels), (name, labels, family.labels)
            named.add(name)
    return named


def test_the_generated_metrics_table_lists_every_family_with_its_type_labels_and_help() -> None:
    table = hooks.metrics_table()
    rows = list(_table_rows(table))
    assert len(rows) == len(CATALOGUE)
    assert _check_rows(rows) == {_exposed(f) for f in CATALOGUE}
    for family in CATALOGUE:
        assert f"| `{_exposed(family)}` | {family.kind.value} |" in table and family.help in table, family.name


def test_the_metrics_page_generates_the_table() -> None:
    page = PAGES[METRICS_PAGE]
    assert page.count("<!-- generated: metrics -->") == 1
    rendered = hooks.render(page)
    assert hooks.metrics_table() in rendered and "<!-- generated" not in rendered


def test_the_docs_name_only_catalogue_series_with_their_labels() -> None:
    """Every ``ragmon_*`` name the README and the docs write by hand is a family or a sample of
    the catalogue, every ``name{labels}`` gives its labels, and every hand-written table row its
    type and labels; the metrics page names every family in its prose or its generated table."""
    known = {f.name for f in CATALOGUE} | {s for f in CATALOGUE for s in f.samples()}
    mentioned: set[str] = set()
    for page, text in PAGES.items():
        names = set(re.findall(r"\bragmon_\w+", text))
        assert names <= known, (page, sorted(names - known))
        mentioned |= names
        for name, labels in re.findall(r"`(ragmon_\w+)\{([\w,]+)\}`", text):
            assert labels.split(",") == list(_family(name).labels), (page, name)
        _check_rows(list(_table_rows(text)))
    assert len(mentioned) >= 60  # the pages were really read
    rendered = hooks.render(PAGES[METRICS_PAGE])
    undocumented = {_exposed(f) for f in CATALOGUE} - set(re.findall(r"\bragmon_\w+", rendered))
    assert not undocumented, f"{METRICS_PAGE} leaves out: {sorted(undocumented)}"


HEAD = "| metric | type | labels | help |\n| --- | --- | --- | --- |\n"


def test_the_docs_checks_see_a_wrong_name_label_or_type() -> None:
    with pytest.raises(AssertionError):
        _check_rows(list(_table_rows(HEAD + "| `ragmon_traces_total` | gauge | service, variant | x |")))
    with pytest.raises(AssertionError):
        _check_rows(list(_table_rows(HEAD + "| `ragmon_traces_total` | counter | service | x |")))
    with pytest.raises(KeyError):
        _check_rows(list(_table_rows(HEAD + "| `ragmon_trace_total` | counter | service, variant | x |")))
    with pytest.raises(AssertionError):
        _check_rows(list(_table_rows("| metric | labels |\n| --- | --- |\n| `ragmon_retrieval_mrr` | service, variant |")))
    assert _check_rows(list(_table_rows(HEAD + "| `ragmon_build_info` | gauge | decoder, pipeline, version | x |")))
    assert not list(_table_rows("| test | what |\n| --- | --- |\n| `ragmon_build_info` | anything |"))
