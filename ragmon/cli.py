"""The ``ragmon`` command line: ``run`` (the sidecar), ``eval`` and ``compare`` (offline), ``check-config``."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, NoReturn, TextIO

from ragmon import __version__
from ragmon.config import Config, ScoringConfig, check_document_id_place, config_from_mapping, load_config
from ragmon.errors import ConfigError, InputError, ListenError, RagmonError, UsageError
from ragmon.formats.relevance import read_golden_queries
from ragmon.judge.endpoint import mask_credentials
from ragmon.offline.cache import DEFAULT_CACHE
from ragmon.offline.compare import compare_runs, index_run
from ragmon.offline.evaluate import evaluate, parse_ks, parse_threshold
from ragmon.offline.evaluate import NO_IDS
from ragmon.offline.files import SCHEMA_CHOICES, read_records
from ragmon.offline.generation import GENERATION_METRICS, GenerationReport, lexical_estimates
from ragmon.offline.records import EvalRecord, Qrels, read_qrels
from ragmon.offline.agreement import HumanLabels, read_human_labels
from ragmon.offline.per_record import RecordResult, judge_agreement, record_json, record_results
from ragmon.offline.report import FORMATS, render_compare, render_eval

__all__ = ["main"]

EXIT_OK, EXIT_THRESHOLD, EXIT_USAGE, EXIT_JUDGE = 0, 1, 2, 3
"""Exit codes: passed; a threshold failed; bad input or usage; judgements failed beyond
``--max-judge-failures`` (a run whose judge failed must not pass for one whose answers did)."""
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
        p.add_argument("--schema", choices=SCHEMA_CHOICES, default="auto", help="the keys of record files: ragmon's, Ragas's (0.1 or 0.2+) or DeepEval's (default auto: told from each file's first record)")
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
        g.add_argument("--max-judge-failures", metavar="N|P%", help=f"records whose judgement may fail (the endpoint down, a timeout, an invalid reply, the budget) before the run exits {EXIT_JUDGE}: a count, or a share of the records judged (default 0; a run where no judgement succeeded fails whatever this says)")

    ev = commands.add_parser("eval", help="score files of RAG records or TREC runs", description="Score files of RAG records (one run): JSON Lines, a JSON array, CSV or Parquet, in ragmon's, Ragas's or DeepEval's keys; TREC run files; OTLP/JSON trace dumps. Exit 1 when a --fail-under threshold fails, 2 on bad input, 3 when judgements failed beyond --max-judge-failures.")
    ev.add_argument("files", nargs="+", metavar="FILE")
    common(ev)
    ev.add_argument("--fail-under", action="append", default=[], metavar="METRIC@K=VALUE", help="fail (exit 1) when the mean is below VALUE, e.g. hit_rate@5=0.8, mrr=0.5 or faithfulness=0.8 (with --judge); repeatable")
    ev.add_argument("--fail-over", action="append", default=[], metavar="METRIC=VALUE", help="fail (exit 1) when the mean is above VALUE, for a metric where higher is worse (e.g. the judge's toxicity); repeatable")
    ev.add_argument("--records", metavar="FILE", help="write one JSON object per record (JSON Lines): its score per metric or why it has none, the judge's verdict details, its human labels (with --human)")
    ev.add_argument("--worst", type=int, default=5, metavar="N", help="the table and markdown reports end with the N worst records per judged metric (default 5; 0: none)")
    ev.add_argument("--human", metavar="LABELS", help="JSONL of human labels (record, and per metric a 0/1 label or a score in [0, 1]): report the judge's agreement with them (needs --judge)")
    ev.add_argument("--human-threshold", type=float, default=0.5, metavar="T", help="for 0/1 labels, a judge's score >= T counts as 1 (default 0.5)")
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
    from ragmon.sidecar.process import run

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"ragmon run: error: {exc.source}: {problem}", file=sys.stderr)
        return EXIT_USAGE
    configure_logging(args.log_level, args.log_format)
    try:
        return run(config)
    except (ListenError, OSError, ValueError) as exc:  # a busy port; a value only the running parts can check
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


def _read_run(paths: Sequence[str], progress: bool, document_id: tuple[str, ...], args: argparse.Namespace) -> list[EvalRecord]:
    """The records of ``paths`` as one run; a warning line on stderr per file and key ignored."""

    def warn(message: str) -> None:
        print(f"ragmon {args.command}: warning: {message}", file=sys.stderr)

    records: list[EvalRecord] = []
    for path in paths:
        records.extend(read_records(path, progress=progress, document_id=document_id, schema=args.schema, warn=warn))
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
        ("--max-judge-failures", args.max_judge_failures),
    ) if value is not None]
    if given:
        raise UsageError(f"{given[0]} needs --judge")


def _generation(args: argparse.Namespace, runs: Sequence[Sequence[EvalRecord]], progress: bool) -> list[GenerationReport]:
    """Each run's generation report: judged with ``--judge`` (all runs in one judge session:
    one concurrency cap, budget and cache), else the lexical estimates."""
    if not args.judge:
        return [lexical_estimates(run) for run in runs]
    from ragmon.offline.session import judge_endpoint, judge_runs

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    judge = replace(config.judge, enabled=True, **_judge_flags(args))
    endpoint = judge_endpoint(judge, os.environ, "--judge", "--judge-base-url")
    report, parts = judge_runs(runs, config, judge, endpoint, cache_path=None if args.no_cache else args.cache, progress=progress)
    _judge_lines(args.command, report)
    return parts


def _judge_lines(command: str, report: GenerationReport) -> None:
    """What the judge did, on stderr: exact counts, then each cause of failure once with its
    count (the endpoint, the HTTP status or exception, its first message)."""
    records, skipped = report.records, report.nothing_to_judge
    cost = f"${report.cost_usd:.4f}" + (f" + {report.unpriced_tokens} unpriced tokens" if report.unpriced_tokens else "")
    print(
        f"ragmon {command}: judge {report.model} at {report.endpoint}: {records} record(s): {report.judged} tried, "
        f"{report.answered} answered, {report.cached} from the cache, {report.failed_records} failed, "
        f"{skipped} with nothing to judge; {cost}, {report.input_tokens} input + {report.output_tokens} output tokens",
        file=sys.stderr,
    )
    for line in report.cause_lines():
        print(f"ragmon {command}: judge failed for {line}", file=sys.stderr)


def _max_failures(args: argparse.Namespace) -> str:
    """``--max-judge-failures`` as given, ``"0"`` when not."""
    return "0" if args.max_judge_failures is None else str(args.max_judge_failures)


def _allowed_failures(text: str, judged: int) -> int:
    """``--max-judge-failures``: a count, or a percentage of the records judged (rounded down)."""
    spec = text.strip()
    try:
        if spec.endswith("%"):
            share = float(spec[:-1])
            if not 0.0 <= share <= 100.0:
                raise ValueError
            return int(judged * share / 100.0)
        count = int(spec)
        if count < 0:
            raise ValueError
        return count
    except ValueError:
        raise UsageError(f"--max-judge-failures takes a count >= 0 or a percentage such as 5%, got {text!r}") from None


def _judge_verdict(command: str, args: argparse.Namespace, reports: Sequence[GenerationReport]) -> int | None:
    """``EXIT_JUDGE`` (and one FAIL line) when judgements failed beyond ``--max-judge-failures``,
    or when no judgement succeeded at all; else None."""
    judged = [r for r in reports if r.mode == "llm"]
    if not judged:
        return None
    failed = sum(r.failed_records for r in judged)
    wanted = sum(r.records - r.nothing_to_judge for r in judged)
    spec = _max_failures(args)
    allowed = _allowed_failures(spec, wanted)
    none_judged = wanted > 0 and failed == wanted
    if failed > allowed or none_judged:
        why = ("no judgement succeeded" if none_judged and failed <= allowed
               else f"more than --max-judge-failures {spec} allows ({allowed})")
        print(f"ragmon {command}: FAIL judge: {failed} of {wanted} record(s) not judged: {why}; the causes are above", file=sys.stderr)
        return EXIT_JUDGE
    return None


def _human(args: argparse.Namespace) -> HumanLabels | None:
    """``--human``'s labels, read before any judge call; usage errors for its flags."""
    if args.worst < 0:
        raise UsageError(f"--worst takes a count >= 0, got {args.worst}")
    if not 0.0 <= args.human_threshold <= 1.0:
        raise UsageError(f"--human-threshold takes a number in [0, 1], got {args.human_threshold:g}")
    if args.human is None:
        return None
    if not args.judge:
        raise UsageError("--human needs --judge (agreement is the judge's with the labels)")
    return read_human_labels(args.human)


def _open_records(path: str | None) -> TextIO | None:
    """``--records``' file, opened before any judge call so a wrong path costs nothing."""
    if path is None:
        return None
    try:
        return open(path, "w", encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--records {path}: {exc.strerror or exc}") from None


def _write_records(out: TextIO, results: Sequence[RecordResult], human: HumanLabels | None) -> None:
    """``--records``: one JSON object per record; ``UsageError`` when the file cannot be written."""
    try:
        with out:
            for result in results:
                labels = None if human is None else human.records.get(str(result.record))
                out.write(json.dumps(record_json(result, labels), ensure_ascii=False) + "\n")
    except OSError as exc:
        raise UsageError(f"--records {out.name}: {exc.strerror or exc}") from None


def _eval(args: argparse.Namespace, progress: bool) -> int:
    ks = parse_ks(args.k)
    thresholds = [parse_threshold(t) for t in args.fail_under] + [parse_threshold(t, above=True) for t in args.fail_over]
    _check_judge_flags(args)
    qrels = _qrels(args.qrels, progress)
    records = _read_run(args.files, progress, _document_id(args.document_id), args)
    if args.judge:
        _allowed_failures(_max_failures(args), 0)  # a bad value is a usage error before any call
    human = _human(args)
    records_out = _open_records(args.records)
    [generation] = _generation(args, [records], progress)
    report = evaluate(args.files, records, qrels, ks, thresholds, generation)
    results = list(record_results(report, records))
    agreement = None
    if human is not None:
        agreement, left_out = judge_agreement(results, human, args.human_threshold)
        for metric, (unscored, unknown) in left_out.items():
            if unscored or unknown:
                print(f"ragmon eval: warning: {metric}: of the labelled records, {unscored} have no judge's score "
                      f"and {unknown} are not in the run (matched by query_id, else line): left out", file=sys.stderr)
    if records_out is not None:
        _write_records(records_out, results, human)
    print(render_eval(report, args.format, results=results, worst_count=args.worst, agreement=agreement))
    for result in report.thresholds:
        if not result.passed:
            t = result.threshold
            if result.value is None and (t.key in GENERATION_METRICS or result.why_none == NO_IDS):
                print(f"ragmon eval: FAIL {t.key}: {result.why_none}", file=sys.stderr)
            else:
                value = "no scored query" if result.value is None else f"{result.value:.4f}"
                print(f"ragmon eval: FAIL {t.key} = {value} {t.breaks} {t.limit:g}", file=sys.stderr)
    judge = _judge_verdict("eval", args, [generation])
    if judge is not None:
        return judge
    return EXIT_OK if report.passed else EXIT_THRESHOLD


def _compare(args: argparse.Namespace, progress: bool) -> int:
    ks = parse_ks(args.k)
    if args.resamples < 1:
        raise UsageError(f"--resamples must be >= 1, got {args.resamples}")
    _check_judge_flags(args)
    qrels = _qrels(args.qrels, progress)
    places = _document_id(args.document_id)
    run_a = _read_run([args.a], progress, places, args)
    run_b = _read_run([args.b], progress, places, args)
    index_run(run_a), index_run(run_b)  # a repeated query is an error before any judge call
    if args.judge:
        _allowed_failures(_max_failures(args), 0)
    generation_a, generation_b = _generation(args, [run_a, run_b], progress)
    comparison = compare_runs(
        args.a, run_a, args.b, run_b, qrels, ks, resamples=args.resamples, seed=args.seed,
        generation_a=generation_a, generation_b=generation_b,
    )
    print(render_compare(comparison, args.format))
    judge = _judge_verdict("compare", args, [generation_a, generation_b])
    return EXIT_OK if judge is None else judge


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
