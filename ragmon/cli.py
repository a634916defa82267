"""The ``ragmon`` command line: ``run`` (the sidecar), ``eval`` and ``compare`` (offline), ``check-config``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

from ragmon import __version__, defaults
from ragmon.errors import EXIT_JUDGE, EXIT_OK, EXIT_USAGE, ConfigError, InputError, ListenError, RagmonError
from ragmon.offline.options import DEFAULT_CACHE, FORMATS, SCHEMA_CHOICES

if TYPE_CHECKING:
    from ragmon.config import Config

__all__ = ["main"]


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
        k = ",".join(map(str, defaults.K))
        p.add_argument("--k", default=k, metavar="K,…", help=f"cut-offs (default {k})")
        p.add_argument("--format", choices=FORMATS, default="table", help="output format (default table)")
        places = ",".join(defaults.DOCUMENT_ID)
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
    from ragmon.config import load_config
    from ragmon.demo.run import DemoOptions, main as demo_main

    try:
        config = load_config(args.config) if args.config else None
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"ragmon demo: error: {exc.source}: {problem}", file=sys.stderr)
        return EXIT_USAGE
    from ragmon.sidecar.logs import configure_logging

    configure_logging("warning")
    return demo_main(DemoOptions(args.duration, args.rate, args.seed, config), sys.stdout)


def _run(args: argparse.Namespace) -> int:
    from ragmon.config import load_config
    from ragmon.sidecar.process import run

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"ragmon run: error: {exc.source}: {problem}", file=sys.stderr)
        return EXIT_USAGE
    from ragmon.sidecar.logs import configure_logging

    configure_logging(args.log_level, args.log_format)
    try:
        return run(config)
    except (ListenError, OSError, ValueError) as exc:  # a busy port; a value only the running parts can check
        print(f"ragmon run: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def file_problems(config: Config) -> list[str]:
    """What the files a configuration names say: the golden set and each probe's dataset must
    be readable and valid (``ragmon run`` reads them at start). One ``"key: problem"`` each."""
    from ragmon.formats.relevance import read_golden_queries
    from ragmon.offline.records import read_qrels

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


def _check_config(args: argparse.Namespace) -> int:
    from ragmon.config import load_config

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
        from ragmon.offline.command import compare_command, eval_command

        return (eval_command if args.command == "eval" else compare_command)(args, progress)
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
