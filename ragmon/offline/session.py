"""One offline judge session (``ragmon eval --judge``, ``compare --judge``, the Python API): the
records of one or more runs judged together (one concurrency cap, budget and cache), with the
endpoint named in the report for its cause lines."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import replace

from ragmon.config import Config, JudgeConfig
from ragmon.errors import UsageError
from ragmon.judge.endpoint import JudgeEndpoint, endpoint_from_config
from ragmon.offline.generation import GenerationReport
from ragmon.offline.records import EvalRecord

__all__ = ["judge_endpoint", "judge_runs"]


def judge_endpoint(judge: JudgeConfig, environ: Mapping[str, str], asker: str, base_url_option: str) -> JudgeEndpoint:
    """The endpoint ``judge`` calls (turned on); ``UsageError`` when there is none, naming
    ``asker`` (``--judge``) and the option that gives a base URL."""
    if not (judge.base_url.strip() or environ.get("OPENAI_BASE_URL", "").strip() or environ.get(judge.api_key_env, "").strip()):
        raise UsageError(
            f"{asker} needs an endpoint: set {judge.api_key_env}, or {base_url_option} (or [judge] base_url, or OPENAI_BASE_URL)"
        )
    try:
        endpoint = endpoint_from_config(replace(judge, enabled=True), environ)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    assert endpoint is not None  # enabled=True always gives one
    return endpoint


def judge_runs(
    runs: Sequence[Sequence[EvalRecord]],
    config: Config,
    judge: JudgeConfig,
    endpoint: JudgeEndpoint,
    *,
    cache_path: str | None,
    progress: bool = False,
) -> tuple[GenerationReport, list[GenerationReport]]:
    """Judge every record of ``runs`` at once; the whole session's report (its counts and
    cost) and one report per run. ``cache_path`` ``None``: no disk cache."""
    from ragmon.judge.client import JudgeClient
    from ragmon.offline.cache import JudgeCache
    from ragmon.offline.judging import judge_records
    from ragmon.scoring.pricing import Pricer

    records = [r for run in runs for r in run]
    judge = replace(judge, enabled=True)
    cache = None if cache_path is None else JudgeCache(cache_path)

    async def go() -> GenerationReport:
        client = JudgeClient(endpoint, judge.model, judge.timeout)
        return await judge_records(records, judge, client, Pricer.from_config(config), cache=cache, progress=progress)

    try:
        report = asyncio.run(go())
    finally:
        if cache is not None:
            cache.close()
    report = replace(report, endpoint=endpoint.shown)
    return report, report.split([len(run) for run in runs])
