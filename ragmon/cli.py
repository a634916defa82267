"""The ``ragmon`` command line: ``run`` (the sidecar), ``eval`` and ``compare`` (offline), ``check-config``."""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, NoReturn

from ragmon import __version__
from ragmon.config import Config, ScoringConfig, check_document_id_place, config_from_mapping, load_config
from ragmon.errors import ConfigError, InputError, RagmonError, UsageError
from ragmon.groundtruth.relevance import read_golden_queries
from ragmon.offline.cache import DEFAULT_CACHE
from ragmon.offline.compare import compare_runs, index_run
from ragmon.offline.evaluate import evaluate, parse_ks, parse_threshold
from ragmon.offline.files import read_records
from ragmon.offline.generation import GENERATION_METRICS, GenerationReport, lexical_estimates
from ragmon.offline.records import EvalRecord, Qrels, read_qrels
from ragmon.offline.report import FORMATS, render_compare, render_eval

__all__ = ["main"]

EXIT_OK, EXIT_THRESHOLD, EXIT_USAGE = 0, 1, 2
QUIET_LOGGERS = ("openai", "httpx", "httpx2", "httpcore", "httpcore2", "h11", "urllib3", "grpc")
"""Client libraries whose lower levels log content (prompts, replies, headers, URLs with
credentials): set to WARNING at least, whatever ``--log-level`` says, so they do not even format
those lines. The handler's filter (``LogHygiene``) is what keeps them out for any library."""
_CREDENTIALS = re.compile(r"(://[^\s/@:]*):[^\s/@]*@")
"""The password of a URL's ``user:password@``."""


def mask_credentials(text: str) -> str:
    """``text`` with every URL's password replaced by ``***``."""
    return _CREDENTIALS.sub(r"\1:***@", text)


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


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line and exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def _build_parser() -> _Parser:
    parser = _Parser(prog="ragmon", description="Production monitor for RAG services.")
    parser.add_argument("--version", action="version", version=f"ragmon {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--qrels", metavar="FILE", help="relevance labels (JSONL by query_id or query text, or TREC qrels); they win over labels in the records")
        k = ",".join(map(str, ScoringConfig().k))
        p.add_argument("--k", default=k, metavar="K,…", help=f"cut-offs (default {k})")
        p.add_argument("--format", choices=FORMATS, default="table", help="output format (default table)")
        places = ",".join(ScoringConfig().document_id)
        p.add_argument("--document-id", default=places, metavar="PLACE,…", help=f"for OTLP/JSON trace dumps: where document ids come from, in order (default {places}; e.g. metadata.doc_id,document.id)")

    def judging(p: argparse.ArgumentParser) -> None:
        g = p.add_argument_group("generation", "Without --judge, records with an answer and contexts get the lexical faithfulness estimate (faithfulness_lexical), labelled as an estimate.")
        g.add_argument("--judge", action="store_true", help="judge every record's answer with the LLM judge for every [judge] evaluator it has the content for (faithfulness, answer relevance, …), one call per record; needs OPENAI_API_KEY or a base URL")
        g.add_argument("--config", metavar="FILE", help="TOML configuration whose [judge] and [pricing] apply, as for ragmon run (default: $RAGMON_CONFIG, else built-in defaults)")
        g.add_argument("--judge-model", metavar="MODEL", help="judge model (default [judge] model)")
        g.add_argument("--judge-base-url", metavar="URL", help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1 (default [judge] base_url, else $OPENAI_BASE_URL, else OpenAI)")
        g.add_argument("--judge-concurrency", type=int, metavar="N", help="calls in flight (default [judge] concurrency)")
        g.add_argument("--cache", default=DEFAULT_CACHE, metavar="FILE", help=f"judgements by content, so a re-run costs nothing (default {DEFAULT_CACHE})")
        g.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")

    ev = commands.add_parser("eval", help="score JSONL files of RAG records", description="Score JSONL files of RAG records (one run). Exit 1 when a --fail-under threshold fails, 2 on bad input.")
    ev.add_argument("files", nargs="+", metavar="FILE")
    common(ev)
    ev.add_argument("--fail-under", action="append", default=[], metavar="METRIC@K=VALUE", help="fail (exit 1) when the mean is below VALUE, e.g. hit_rate@5=0.8, mrr=0.5 or faithfulness=0.8 (with --judge); repeatable")
    ev.add_argument("--fail-over", action="append", default=[], metavar="METRIC=VALUE", help="fail (exit 1) when the mean is above VALUE, for a metric where higher is worse (e.g. the judge's toxicity); repeatable")
    judging(ev)

    cmp = commands.add_parser("compare", help="compare two runs of the same queries", description="Compare two runs of the same queries: means on their common queries, difference B − A, paired randomization-test p-value and bootstrap 95%% CI.")
    cmp.add_argument("a", metavar="A")
    cmp.add_argument("b", metavar="B")
    common(cmp)
    cmp.add_argument("--seed", type=int, default=0, help="random seed of the tests (default 0)")
    cmp.add_argument("--resamples", type=int, default=10_000, help="resamples of each test (default 10000)")
    judging(cmp)
    run = commands.add_parser("run", help="run the sidecar: OTLP receivers, scoring, /metrics", description="Run the sidecar: OTLP/HTTP and OTLP/gRPC receivers, trace assembly, scoring and the Prometheus endpoint. Runs with no configuration file; stops cleanly on SIGTERM.")
    run.add_argument("--config", metavar="FILE", help="TOML configuration (default: $RAGMON_CONFIG, else built-in defaults)")
    run.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"], help="log level (default info)")
    run.add_argument("--log-format", default="text", choices=["text", "json"], help="log lines as text or one JSON object each, for log shippers (default text)")
    dem = commands.add_parser("demo", help="ragmon and a synthetic RAG service, live, with a regression halfway", description="Start ragmon and a small synthetic RAG service instrumented with the OpenTelemetry SDK (offline, no API key), show the metrics live and degrade one variant's retrieval halfway.")
    dem.add_argument("--duration", type=_positive, default=60.0, metavar="S", help="seconds of traffic (default 60)")
    dem.add_argument("--rate", type=_positive, default=10.0, metavar="N", help="requests per second (default 10)")
    dem.add_argument("--seed", type=int, default=1, help="random seed of the service and the traffic (default 1)")
    dem.add_argument("--config", metavar="FILE", help="TOML configuration whose [judge] and [pricing] the demo uses (default: no LLM judge, the lexical estimate)")
    chk = commands.add_parser("check-config", help="validate a configuration file", description="Validate a TOML configuration: print each problem with its key; exit 2 on error.")
    chk.add_argument("file", metavar="FILE")
    return parser


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def _demo(args: argparse.Namespace) -> int:
    from ragmon.demo.run import DemoOptions, main as demo_main

    try:
        config = load_config(args.config) if args.config else None
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"ragmon demo: error: {exc.source}: {problem}", file=sys.stderr)
        return EXIT_USAGE
    configure_logging("warning")
    return demo_main(DemoOptions(args.duration, args.rate, args.seed, config), sys.stdout)


def _run(args: argparse.Namespace) -> int:
    from ragmon.app import run

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"ragmon run: error: {exc.source}: {problem}", file=sys.stderr)
        return EXIT_USAGE
    configure_logging(args.log_level, args.log_format)
    try:
        return run(config)
    except (OSError, ValueError) as exc:  # a busy port; a value only the running parts can check
        print(f"ragmon run: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def file_problems(config: Config) -> list[str]:
    """What the files a configuration names say: the golden set and each probe's dataset must
    be readable and valid (``ragmon run`` reads them at start). One ``"key: problem"`` each."""
    problems: list[str] = []
    if config.scoring.golden:
        try:
            read_qrels(config.scoring.golden)
            read_golden_queries(config.scoring.golden)
        except InputError as exc:
            problems.append(f"scoring.golden: {exc}")
    for i, probe in enumerate(config.probe):
        if probe.dataset:
            try:
                read_golden_queries(probe.dataset)
            except InputError as exc:
                problems.append(f"probe[{i}].dataset: {exc}")
    return problems


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


def _check_config(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.file)
        problems = file_problems(config)
    except ConfigError as exc:
        problems = exc.problems
    for problem in problems:
        print(f"{args.file}: {problem}", file=sys.stderr)
    if problems:
        return EXIT_USAGE
    print(f"{args.file}: ok")
    return EXIT_OK


def _document_id(text: str) -> tuple[str, ...]:
    places = tuple(p.strip() for p in text.split(",") if p.strip())
    if not places:
        raise UsageError("--document-id needs at least one place")
    for place in places:
        try:
            check_document_id_place(place)
        except ValueError as exc:
            raise UsageError(f"--document-id: {exc}") from None
    return places


def _read_run(paths: Sequence[str], progress: bool, document_id: tuple[str, ...]) -> list[EvalRecord]:
    records: list[EvalRecord] = []
    for path in paths:
        records.extend(read_records(path, progress=progress, document_id=document_id))
    return records


def _qrels(path: str | None, progress: bool) -> Qrels | None:
    return None if path is None else read_qrels(path, progress=progress)


_JUDGE_FLAGS = {"model": "--judge-model", "base_url": "--judge-base-url", "concurrency": "--judge-concurrency"}
"""``[judge]`` keys the ``--judge-*`` flags set."""


def _judge_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The ``[judge]`` values the ``--judge-*`` flags give, checked by the same rules as the
    file's (``UsageError`` naming the flag)."""
    given = {key: getattr(args, f"judge_{key}") for key in _JUDGE_FLAGS if getattr(args, f"judge_{key}") is not None}
    try:
        judge = config_from_mapping({"judge": given}, "flags").judge
    except ConfigError as exc:
        key, _, problem = exc.problems[0].partition(": ")
        raise UsageError(f"{_JUDGE_FLAGS[key.removeprefix('judge.')]}: {problem}") from None
    return {key: getattr(judge, key) for key in given}


def _check_judge_flags(args: argparse.Namespace) -> None:
    """Judge flags without ``--judge`` are a usage error (they would silently do nothing)."""
    if args.judge:
        _judge_flags(args)
        return
    given = [flag for flag, value in (
        ("--judge-model", args.judge_model), ("--judge-base-url", args.judge_base_url),
        ("--judge-concurrency", args.judge_concurrency), ("--config", args.config),
    ) if value is not None]
    if given:
        raise UsageError(f"{given[0]} needs --judge")


def _generation(args: argparse.Namespace, runs: Sequence[Sequence[EvalRecord]], progress: bool) -> list[GenerationReport]:
    """Each run's generation report: judged with ``--judge`` (all runs in one judge session:
    one concurrency cap, budget and cache), else the lexical estimates."""
    if not args.judge:
        return [lexical_estimates(run) for run in runs]
    import asyncio

    from ragmon.judge.client import JudgeClient, endpoint_from_config
    from ragmon.offline.cache import JudgeCache
    from ragmon.offline.judging import judge_records
    from ragmon.scoring.pricing import Pricer

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    judge = replace(config.judge, enabled=True, **_judge_flags(args))
    if not (judge.base_url.strip() or os.environ.get("OPENAI_BASE_URL", "").strip() or os.environ.get(judge.api_key_env, "").strip()):
        raise UsageError(f"--judge needs an endpoint: set {judge.api_key_env}, or --judge-base-url (or [judge] base_url, or OPENAI_BASE_URL)")
    endpoint = endpoint_from_config(judge, os.environ)
    assert endpoint is not None  # enabled=True always gives one
    records = [r for run in runs for r in run]
    cache = None if args.no_cache else JudgeCache(args.cache)

    async def go() -> GenerationReport:
        client = JudgeClient(endpoint, judge.model, judge.timeout)
        return await judge_records(records, judge, client, Pricer.from_config(config), cache=cache, progress=progress)

    try:
        report = asyncio.run(go())
    finally:
        if cache is not None:
            cache.close()
    cost = f"${report.cost_usd:.4f}" + (f" + {report.unpriced_tokens} unpriced tokens" if report.unpriced_tokens else "")
    print(
        f"ragmon {args.command}: judge {report.model}: {report.judged} record(s) sent, {report.cached} from the cache; "
        f"{cost}, {report.input_tokens} input + {report.output_tokens} output tokens",
        file=sys.stderr,
    )
    failed = {m.key: m.failures for m in report.metrics if m.failures}
    if failed:
        listed = ", ".join(f"{k} {n}" for k, n in failed.items())
        print(f"ragmon {args.command}: judgements failed (records per metric: {listed}); never scored, see the report", file=sys.stderr)
    return report.split([len(run) for run in runs])


def _eval(args: argparse.Namespace, progress: bool) -> int:
    ks = parse_ks(args.k)
    thresholds = [parse_threshold(t) for t in args.fail_under] + [parse_threshold(t, above=True) for t in args.fail_over]
    _check_judge_flags(args)
    qrels = _qrels(args.qrels, progress)
    records = _read_run(args.files, progress, _document_id(args.document_id))
    [generation] = _generation(args, [records], progress)
    report = evaluate(args.files, records, qrels, ks, thresholds, generation)
    print(render_eval(report, args.format))
    for result in report.thresholds:
        if not result.passed:
            t = result.threshold
            if result.value is None and t.key in GENERATION_METRICS:
                print(f"ragmon eval: FAIL {t.key}: {result.why_none}", file=sys.stderr)
            else:
                value = "no scored query" if result.value is None else f"{result.value:.4f}"
                print(f"ragmon eval: FAIL {t.key} = {value} {t.breaks} {t.limit:g}", file=sys.stderr)
    return EXIT_OK if report.passed else EXIT_THRESHOLD


def _compare(args: argparse.Namespace, progress: bool) -> int:
    ks = parse_ks(args.k)
    if args.resamples < 1:
        raise UsageError(f"--resamples must be >= 1, got {args.resamples}")
    _check_judge_flags(args)
    qrels = _qrels(args.qrels, progress)
    places = _document_id(args.document_id)
    run_a = _read_run([args.a], progress, places)
    run_b = _read_run([args.b], progress, places)
    index_run(run_a), index_run(run_b)  # a repeated query is an error before any judge call
    generation_a, generation_b = _generation(args, [run_a, run_b], progress)
    comparison = compare_runs(
        args.a, run_a, args.b, run_b, qrels, ks, resamples=args.resamples, seed=args.seed,
        generation_a=generation_a, generation_b=generation_b,
    )
    print(render_compare(comparison, args.format))
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.error("choose a command: run, demo, eval, compare, check-config")
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="backslashreplace")
    progress = sys.stderr.isatty()
    try:
        if args.command == "run":
            return _run(args)
        if args.command == "check-config":
            return _check_config(args)
        if args.command == "demo":
            return _demo(args)
        if args.command == "eval":
            return _eval(args, progress)
        return _compare(args, progress)
    except RagmonError as exc:
        print(f"ragmon {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        sys.stderr.close()
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
