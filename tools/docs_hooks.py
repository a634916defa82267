"""MkDocs hook: the reference tables whose source is the code, generated at build time.

``mkdocs.yml`` lists this file under ``hooks:``. In every page, a marker line is replaced:

- ``<!-- generated: metrics -->``: every family of ``ragmon/catalogue.py`` (name as exposed,
  type, labels, help), in the order of the exposition (``metrics_table``);
- ``<!-- generated: config SECTION -->`` followed by a ``| key | meaning |`` table: the same
  table with each key's default and allowed values read from ``ragmon/config.py``
  (``config_table``). The meanings are prose and stay in the page; the keys must be exactly the
  section's, or the build fails naming the missing or unknown ones;
- ``<!-- generated: cli COMMAND -->``: the command's usage line and a table of its arguments,
  from the ``ragmon`` command's own argument parser (``cli_reference``).

tests/test_docs.py calls the same functions, so a family, a key or a flag the pages would leave
out fails a test as well as the build.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # the pages describe this checkout's code, whatever else is installed
    sys.path.insert(0, str(ROOT))

from ragmon import config as _config  # noqa: E402
from ragmon.catalogue import CATALOGUE, Family, Kind  # noqa: E402

MARKER = re.compile(r"^<!-- generated: (\w+)(?: ([\w-]+))? -->[ \t]*$", re.MULTILINE)

SECTIONS: Mapping[str, type[Any]] = {
    "receiver": _config.ReceiverConfig,
    "metrics": _config.MetricsConfig,
    "traces": _config.TracesConfig,
    "scoring": _config.ScoringConfig,
    "judge": _config.JudgeConfig,
    "feedback": _config.FeedbackConfig,
    "probe": _config.ProbeConfig,
    "pricing": _config.Price,
}
"""Each configuration table a page can generate, by the name its marker gives."""

_RULES: Mapping[str, str] = {
    "_listen": '`"host:port"` (IPv6 in brackets; port 0: a free port), or `""` (off)',
    "check_http_url": "empty, or an `http://` / `https://` URL with a host",
    "_share": "0 to 1",
    "_not_negative": "≥ 0",
    "_retries": "0 to 10",
    "_failure_ratio": "more than 0, at most 1",
    "_model_name": f"a model name of 1 to {_config.MAX_JUDGE_MODEL_CHARS} characters",
    "_evaluators": "a list of: " + ", ".join(f"`{e}`" for e in _config.EVALUATORS),
    "_patterns": "a list of regular expressions (Python syntax)",
    "_attribute": "a non-empty attribute name",
    "_places": 'a non-empty list of `"document.<field>"` or `"metadata.<key>"`',
    "_cut_offs": f"1 to {_config.MAX_CUT_OFFS} cut-offs, each 1 to {_config.MAX_K}",
    "_windows": f"1 or more distinct durations, each at most `{_config.MAX_WINDOW}`",
    "_headers": "a table of strings",
    "_body": "a table, an array or a string",
}
"""What a field's rule admits, by the rule's function name. A rule missing here fails the build:
a new rule cannot go undocumented."""

_INT64_MAX = 2**63 - 1


# -- the metric catalogue -----------------------------------------------------------------------


def exposed_name(family: Family) -> str:
    """The name a reader sees in ``/metrics``: a counter's ``_total`` sample, else the family."""
    return family.total if family.kind is Kind.COUNTER else family.name


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def metrics_table() -> str:
    """Every family of the catalogue, one row each: name, type, labels (``—``: none), help."""
    rows = ["| metric | type | labels | help |", "| --- | --- | --- | --- |"]
    for family in CATALOGUE:
        labels = ", ".join(family.labels) if family.labels else "—"
        rows.append(f"| `{exposed_name(family)}` | {family.kind.value} | {labels} | {_cell(family.help)} |")
    return "\n".join(rows) + "\n"


# -- the configuration ----------------------------------------------------------------------------


def _toml(value: Any) -> str:
    """``value`` written as TOML (lists of strings or numbers, inline tables, booleans)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML form for {value!r}")


def _default(field: dataclasses.Field[Any], defaults: Mapping[str, Any]) -> str:
    value = defaults[field.name]
    if value is None:
        return "unset"
    return f"`{_toml(value)}`"


def _allowed(cls: type[Any], field: dataclasses.Field[Any]) -> str:
    """What the field's TOML value may be, read from the rule the field declares."""
    meta = field.metadata
    rule = meta.get("read") or meta.get("rule")
    template = meta.get("toml", field.default if field.default is not dataclasses.MISSING else None)
    if rule is None:
        if isinstance(template, bool) or (template is None and field.type in ("bool | None", "bool")):
            return "`true` or `false`"
        if isinstance(template, str):
            return "a string"
        if isinstance(template, float):
            return "a number"
        if isinstance(template, int):
            return "an integer"
        raise ValueError(f"{cls.__name__}.{field.name}: no rule, and a default of no known type")
    if isinstance(rule, functools.partial):
        keywords = rule.keywords
        name = rule.func.__name__
        if name == "_bounded_duration":
            low = "≥ 0" if keywords["zero"] else "> 0"
            return f"a duration {low}, at most `{keywords['at_most']}`"
        if name == "_at_least_one":
            maximum = keywords["maximum"]
            return "an integer ≥ 1" if maximum == _INT64_MAX else f"an integer from 1 to {maximum:,}"
        raise ValueError(f"{cls.__name__}.{field.name}: rule {name} is not described in tools/docs_hooks.py")
    name = getattr(rule, "__name__", repr(rule))
    if name not in _RULES:
        raise ValueError(f"{cls.__name__}.{field.name}: rule {name} is not described in tools/docs_hooks.py")
    return _RULES[name]


def config_keys(section: str) -> list[str]:
    """The keys of a configuration table, as a page names them (``receiver.http``,
    ``probe.url``, ``pricing."MODEL".input``), in the order of the code."""
    prefix = 'pricing."MODEL"' if section == "pricing" else section
    return [f"{prefix}.{f.name}" for f in dataclasses.fields(SECTIONS[section])]


def config_table(section: str, meanings: Mapping[str, str]) -> str:
    """The table of ``[section]``: key, default, allowed values (from the code), meaning (from
    ``meanings``, which must name exactly the section's keys: ``ValueError`` otherwise)."""
    cls = SECTIONS[section]
    keys = config_keys(section)
    missing = [k for k in keys if k not in meanings]
    unknown = [k for k in meanings if k not in keys]
    if missing or unknown:
        raise ValueError(f"[{section}] table: keys without a meaning {missing}, keys the code does not have {unknown}")
    defaults = _config.toml_defaults(cls)
    rows = ["| key | default | allowed | meaning |", "| --- | --- | --- | --- |"]
    for key, field in zip(keys, dataclasses.fields(cls)):
        default = "—" if section == "pricing" else _default(field, defaults)
        rows.append(f"| `{key}` | {default} | {_allowed(cls, field)} | {meanings[key]} |")
    return "\n".join(rows) + "\n"


_ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|(.*)\|\s*$")


def _meanings(table: str, section: str) -> dict[str, str]:
    lines = table.splitlines()
    if not lines or [c.strip() for c in lines[0].strip().strip("|").split("|")] != ["key", "meaning"]:
        raise ValueError(f"<!-- generated: config {section} --> must be followed by a | key | meaning | table")
    meanings: dict[str, str] = {}
    for line in lines[2:]:
        match = _ROW.match(line)
        if not match:
            raise ValueError(f"[{section}] table: not a | `key` | meaning | row: {line!r}")
        if match.group(1) in meanings:
            raise ValueError(f"[{section}] table: {match.group(1)} twice")
        meanings[match.group(1)] = match.group(2).strip()
    return meanings


# -- the command line -----------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    from ragmon import cli

    return cli._build_parser()


def _commands(parser: argparse.ArgumentParser) -> Mapping[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise ValueError("the ragmon parser has no commands")


def cli_commands() -> list[str]:
    """Every command of ``ragmon``."""
    return list(_commands(_parser()))


def _help(action: argparse.Action, prog: str) -> str:
    text = action.help or ""
    if "%" in text:
        text = text % {**vars(action), "prog": prog}
    return text


def cli_reference(command: str) -> str:
    """``ragmon COMMAND``'s usage line and a table of its arguments (flag, value, help)."""
    commands = _commands(_parser())
    if command not in commands:
        raise ValueError(f"ragmon has no command {command!r} (it has {sorted(commands)})")
    sub = commands[command]
    formatter = argparse.HelpFormatter(sub.prog, width=100)
    formatter.add_usage(sub.usage, sub._actions, sub._mutually_exclusive_groups, prefix="")
    usage = formatter.format_help().strip()
    lines = ["```", usage, "```", ""]
    if sub.description:
        lines += [sub.description.replace("%%", "%"), ""]
    lines += ["| argument | value | meaning |", "| --- | --- | --- |"]
    for action in sub._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        names = ", ".join(f"`{o}`" for o in action.option_strings) or f"`{action.metavar or action.dest}`"
        if action.option_strings and action.nargs == 0:
            value = "—"
        elif action.choices:
            value = " \\| ".join(f"`{c}`" for c in action.choices)
        else:
            value = f"`{action.metavar or action.dest.upper()}`"
        if action.nargs in ("+", "*"):
            value += " …"
        lines.append(f"| {names} | {value} | {_cell(_help(action, sub.prog)) or '—'} |")
    return "\n".join(lines) + "\n"


# -- the page transform ---------------------------------------------------------------------------


def _table_after(markdown: str, start: int) -> tuple[str, int]:
    """The markdown table starting on the line after ``start`` (blank lines skipped) and where it ends."""
    rest = markdown[start:]
    lead = len(rest) - len(rest.lstrip("\n"))
    lines = []
    end = start + lead
    for line in rest[lead:].splitlines(keepends=True):
        if not line.startswith("|"):
            break
        lines.append(line)
        end += len(line)
    return "".join(lines), end


def render(markdown: str) -> str:
    """``markdown`` with every ``<!-- generated: … -->`` marker replaced by its table."""
    out: list[str] = []
    pos = 0
    for match in MARKER.finditer(markdown):
        if match.start() < pos:
            continue
        out.append(markdown[pos:match.start()])
        kind, arg = match.group(1), match.group(2)
        pos = match.end()
        if kind == "metrics" and arg is None:
            out.append(metrics_table())
        elif kind == "config" and arg in SECTIONS:
            table, pos = _table_after(markdown, match.end() + 1)
            out.append(config_table(arg, _meanings(table, arg)))
        elif kind == "cli" and arg:
            out.append(cli_reference(arg))
        else:
            raise ValueError(f"unknown marker: {match.group(0)}")
    out.append(markdown[pos:])
    return "".join(out)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs' hook: generate each page's tables before the page is rendered."""
    return render(markdown)
