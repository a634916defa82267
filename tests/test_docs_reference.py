"""The reference tables generated from the code (``tools/docs_hooks.py``, the MkDocs hook) are
complete: every configuration key with its default, every command with every flag; the pages
generate them; a page that leaves a key out, or names one the code does not have, fails.

(The metric table: tests/test_catalogue.py.)"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

from ragmon.config import Config, toml_defaults

ROOT = Path(__file__).resolve().parents[1]
CONFIG_PAGE = ROOT / "docs" / "reference" / "configuration.md"
CLI_PAGE = ROOT / "docs" / "reference" / "cli.md"


def _load_hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "tools" / "docs_hooks.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hooks = _load_hooks()


def test_every_section_of_the_configuration_is_one_the_hook_knows() -> None:
    sections = {f.name for f in dataclasses.fields(Config)}
    assert sections == set(hooks.SECTIONS)
    for name, cls in hooks.SECTIONS.items():
        field_type = {f.name: f for f in dataclasses.fields(Config)}[name].type
        assert cls.__name__ in str(field_type), (name, field_type)


def test_the_configuration_page_gives_every_key_with_its_default() -> None:
    page = CONFIG_PAGE.read_text(encoding="utf-8")
    assert sorted(re.findall(r"^<!-- generated: config (\w+) -->$", page, re.MULTILINE)) == sorted(hooks.SECTIONS)
    rendered = hooks.render(page)
    assert "<!-- generated" not in rendered
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `([^`]+)` \|.*$", rendered, re.MULTILINE)}
    count = 0
    for section, cls in hooks.SECTIONS.items():
        defaults = toml_defaults(cls)
        for key, field in zip(hooks.config_keys(section), dataclasses.fields(cls)):
            assert key in rows, key
            cells = [c.strip() for c in rows[key].strip("|").split(" | ")]
            assert len(cells) == 4 and all(cells), rows[key]
            default = defaults[field.name]
            if section != "pricing":
                assert cells[1] == ("unset" if default is None else f"`{hooks._toml(default)}`"), (key, cells[1])
            count += 1
    assert count >= 70
    assert '| `receiver.http` | `"127.0.0.1:4318"` |' in rendered
    assert '| `scoring.windows` | `["5m", "1h"]` |' in rendered
    assert '| `judge.timeout` | `"30s"` | a duration > 0, at most `10m` |' in rendered


def test_a_key_left_out_or_made_up_fails_the_page() -> None:
    page = CONFIG_PAGE.read_text(encoding="utf-8")
    missing = "\n".join(line for line in page.splitlines() if not line.startswith("| `traces.max_spans` |"))
    with pytest.raises(ValueError, match=r"keys without a meaning \['traces.max_spans'\]"):
        hooks.render(missing)
    made_up = page.replace("| `traces.grace` |", "| `traces.grace_period` | made up |\n| `traces.grace` |")
    with pytest.raises(ValueError, match=r"keys the code does not have \['traces.grace_period'\]"):
        hooks.render(made_up)
    with pytest.raises(ValueError, match="unknown marker"):
        hooks.render("<!-- generated: nothing -->\n")


def test_a_rule_the_hook_cannot_describe_fails() -> None:
    def _novel(value: int) -> int:
        return value

    @dataclasses.dataclass(frozen=True)
    class Novel:
        odd: int = dataclasses.field(default=1, metadata={"rule": _novel})

    with pytest.raises(ValueError, match="rule _novel is not described"):
        hooks._allowed(Novel, dataclasses.fields(Novel)[0])


def test_the_command_line_page_gives_every_command_and_flag() -> None:
    page = CLI_PAGE.read_text(encoding="utf-8")
    commands = hooks.cli_commands()
    assert set(commands) == {"run", "demo", "eval", "compare", "check-config"}
    assert sorted(re.findall(r"^<!-- generated: cli ([\w-]+) -->$", page, re.MULTILINE)) == sorted(commands)
    rendered = hooks.render(page)
    from ragmon import cli

    parser = cli._build_parser()
    subparsers = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    flags = 0
    for name, sub in subparsers.choices.items():  # type: ignore[attr-defined]
        reference = hooks.cli_reference(name)
        assert reference in rendered, name
        assert reference.startswith(f"```\nragmon {name}"), name
        first_cells = re.findall(r"^\| ([^|]*) \|", reference, re.MULTILINE)
        for action in sub._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert any(f"`{option}`" in cell for cell in first_cells), (name, option)
                    flags += 1
            if not action.option_strings:
                assert f"`{action.metavar or action.dest}`" in first_cells, (name, action.dest)
    assert flags >= 30


def test_every_page_renders() -> None:
    """No page holds a marker the hook does not know (the build would fail on it)."""
    for page in sorted((ROOT / "docs").rglob("*.md")):
        hooks.render(page.read_text(encoding="utf-8"))
