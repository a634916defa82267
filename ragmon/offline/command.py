"""``ragmon eval`` and ``ragmon compare`` as the command line runs them: the parsed flags in,
the report on stdout, warnings and verdicts on stderr, the exit code out. ``ragmon.cli`` loads
this module only for these commands (it holds the readers, the metrics and the judge)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any, TextIO

from ragmon.config import check_document_id_place, config_from_mapping, load_config
from ragmon.errors import EXIT_JUDGE, EXIT_OK, EXIT_THRESHOLD, ConfigError, UsageError
from ragmon.offline.agreement import HumanLabels, read_human_labels
from ragmon.offline.compare import compare_runs, index_run
from ragmon.offline.evaluate import NO_IDS, cutoffs, evaluate, parse_ks, parse_threshold
from ragmon.offline.files import read_records
from ragmon.offline.generation import GENERATION_METRICS, GenerationReport, lexical_estimates
from ragmon.offline.per_record import RecordResult, judge_agreement, record_json, record_results
from ragmon.offline.records import EvalRecord, Qrels, read_qrels
from ragmon.offline.report import render_compare, render_eval
from ragmon.offline.scan import scan_run

__all__ = ["compare_command", "eval_command"]


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


def _iter_run(paths: Sequence[str], progress: bool, document_id: tuple[str, ...], args: argparse.Namespace) -> Iterator[EvalRecord]:
    """The records of ``paths`` as one run, read as they are asked for; a warning line on
    stderr per file and key ignored."""

    def warn(message: str) -> None:
        print(f"ragmon {args.command}: warning: {message}", file=sys.stderr)

    for path in paths:
        yield from read_records(path, progress=progress, document_id=document_id, schema=args.schema, warn=warn)


def _read_run(paths: Sequence[str], progress: bool, document_id: tuple[str, ...], args: argparse.Namespace) -> list[EvalRecord]:
    """The records of ``paths`` as one run, all in memory (the judge and ``compare`` need them)."""
    return list(_iter_run(paths, progress, document_id, args))


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


def _write_records(out: TextIO, results: Iterable[RecordResult], human: HumanLabels | None) -> None:
    """``--records``: one JSON object per record; ``UsageError`` when the file cannot be written."""
    try:
        with out:
            for result in results:
                labels = None if human is None else human.records.get(str(result.record))
                out.write(json.dumps(record_json(result, labels), ensure_ascii=False) + "\n")
    except OSError as exc:
        raise UsageError(f"--records {out.name}: {exc.strerror or exc}") from None


def eval_command(args: argparse.Namespace, progress: bool) -> int:
    """``ragmon eval``: score one run's files; print the report; the exit code."""
    ks = parse_ks(args.k)
    thresholds = [parse_threshold(t) for t in args.fail_under] + [parse_threshold(t, above=True) for t in args.fail_over]
    _check_judge_flags(args)
    qrels = _qrels(args.qrels, progress)
    places = _document_id(args.document_id)
    scored_at = cutoffs(ks, thresholds)
    if args.judge:  # the judge needs every record's texts: the run is held
        records = _read_run(args.files, progress, places, args)
        _allowed_failures(_max_failures(args), 0)  # a bad value is a usage error before any call
        human = _human(args)
        records_out = _open_records(args.records)
        [generation] = _generation(args, [records], progress)
        scan = scan_run(records, qrels, scored_at)
    else:  # read once, nothing of a record kept but its scores and name
        human = _human(args)
        scan = scan_run(_iter_run(args.files, progress, places, args), qrels, scored_at, lexical=True)
        records_out = _open_records(args.records)
        generation = scan.estimates()
    report = evaluate(args.files, scan, thresholds, generation)
    each = record_results(report, scan.refs)
    results = list(each) if args.judge else ()  # the worst records and the agreement are the judge's
    agreement = None
    if human is not None:
        agreement, left_out = judge_agreement(results, human, args.human_threshold)
        for metric, (unscored, unknown) in left_out.items():
            if unscored or unknown:
                print(f"ragmon eval: warning: {metric}: of the labelled records, {unscored} have no judge's score "
                      f"and {unknown} are not in the run (matched by query_id, else line): left out", file=sys.stderr)
    if records_out is not None:
        _write_records(records_out, results if args.judge else each, human)
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


def compare_command(args: argparse.Namespace, progress: bool) -> int:
    """``ragmon compare``: two runs of the same queries, side by side; the exit code."""
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
