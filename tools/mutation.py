"""Mutation check of ragmon's core: change one line at a time, run the tests, list what survives.

Usage::

    python tools/mutation.py [--children 6] [--max-test-seconds 1] [--report-only] [NAME ...]

Runs mutmut (``pip install mutmut``; configuration in pyproject.toml ``[tool.mutmut]``: the
modules to mutate and the test files to run) in the repository root; mutmut copies the code
into ``mutants/`` and runs, for each mutant, the tests that exercise the mutated function.
Each mutant is judged by the tests mutmut timed under ``--max-test-seconds`` in its first,
clean pass (tests/conftest.py deselects the others): about 1,000 of the suite's 1,100 tests,
all but the big-scrape, many-connection, fuzzing and process tests, which defend other
promises and would make the run take days. Most tests wait on sockets, so more children than
cores pay (``--children 6`` on two cores). The whole core takes about two hours, so it is not
part of CI.

Then every surviving mutant (and every timeout, and every mutant no fast test reaches) is
printed as its changed lines and checked against the list of mutants shown to be equivalent in
docs/explanation/reliability.md (the fenced block tagged ``mutants``: one ``path | original | mutated |
why`` line each, the original and mutated lines as mutmut prints them, stripped, in backticks
when they hold `` | `` themselves). The script
exits 1 when a survivor is neither killed nor listed: write a test that kills it, or argue in
the document why no test can (the change does not alter behaviour).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "explanation" / "reliability.md"
BLOCK = re.compile(r"```mutants\n(.*?)```", re.S)
QUOTED = re.compile(r"^(\S+) \| `(.*)` \| `(.*)` \| (.*)$")  # code that itself holds " | "
BUDGET_VARIABLE = "RAGMON_MUTATION_MAX_TEST_SECONDS"
DEFAULT_MAX_TEST_SECONDS = 1.0


@dataclass(frozen=True)
class Survivor:
    """One mutant no test killed: where, and its changed lines (stripped)."""

    name: str
    path: str
    status: str
    removed: tuple[str, ...]
    added: tuple[str, ...]

    def key(self) -> tuple[str, str, str]:
        return (self.path, " / ".join(self.removed), " / ".join(self.added))


def equivalent_mutants(doc: Path = DOC) -> dict[tuple[str, str, str], str]:
    """The documented equivalent mutants: (path, original, mutated) -> why."""
    known: dict[tuple[str, str, str], str] = {}
    text = doc.read_text() if doc.exists() else ""
    for block in BLOCK.findall(text):
        for line in block.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            quoted = QUOTED.match(line.strip())
            parts = list(quoted.groups()) if quoted else [p.strip() for p in line.split(" | ")]
            if len(parts) != 4:
                raise SystemExit(f"{doc}: expected 'path | original | mutated | why': {line!r}")
            known[(parts[0], parts[1].strip("`"), parts[2].strip("`"))] = parts[3]
    return known


def survivors() -> list[Survivor]:
    """Surviving and timed-out mutants of the last run, with their diffs."""
    os.chdir(ROOT)
    from mutmut.__main__ import walk_mutatable_files  # type: ignore[import-untyped]
    from mutmut.mutation.data import SourceFileMutationData  # type: ignore[import-untyped]
    from mutmut.mutation.diff_apply import get_diff_for_mutant  # type: ignore[import-untyped]
    from mutmut.stats import status_by_exit_code  # type: ignore[import-untyped]

    out = []
    for path in walk_mutatable_files():
        data = SourceFileMutationData(path=path)
        data.load()
        for name, code in data.exit_code_by_key.items():
            status = status_by_exit_code[code]
            if status not in ("survived", "timeout", "suspicious", "no tests"):
                continue
            diff = get_diff_for_mutant(name, path=path).splitlines()
            removed = tuple(line[1:].strip() for line in diff if line.startswith("-") and not line.startswith("---"))
            added = tuple(line[1:].strip() for line in diff if line.startswith("+") and not line.startswith("+++"))
            out.append(Survivor(name, str(path), status, removed, added))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--children", type=int, default=6, help="mutants run at once")
    parser.add_argument("--report-only", action="store_true", help="only report the last run")
    parser.add_argument("--max-test-seconds", type=float, default=DEFAULT_MAX_TEST_SECONDS,
                        help="judge mutants by the tests mutmut timed under this (0: every test)")
    parser.add_argument("names", nargs="*", help="mutant name patterns, e.g. 'ragmon.pipeline.queue*'")
    args = parser.parse_args(argv)
    if not args.report_only:
        command = [sys.executable, "-m", "mutmut", "run", "--max-children", str(args.children), *args.names]
        env = dict(os.environ, RAGMON_PIPELINE="python")  # mutants are edits of the source: run it
        if args.max_test_seconds > 0:
            env[BUDGET_VARIABLE] = str(args.max_test_seconds)  # read by tests/conftest.py
        done = subprocess.run(command, cwd=ROOT, env=env)
        if done.returncode != 0:
            print(f"mutmut run failed ({done.returncode})", file=sys.stderr)
            return 2
    known = equivalent_mutants()
    left = survivors()
    if args.names:
        patterns = [re.compile(re.escape(n).replace(r"\*", ".*")) for n in args.names]
        left = [s for s in left if any(p.fullmatch(s.name) for p in patterns)]
    unexplained = [s for s in left if s.key() not in known]
    by_file: dict[str, list[Survivor]] = defaultdict(list)
    for s in unexplained:
        by_file[s.path].append(s)
    for path, items in sorted(by_file.items()):
        print(f"\n{path}: {len(items)} surviving")
        for s in items:
            print(f"  {s.status}: {s.name}")
            print(f"    {s.path} | `{' / '.join(s.removed)}` | `{' / '.join(s.added)}` | ")
    print(f"\n{len(left)} mutants survived, {len(left) - len(unexplained)} of them documented as equivalent, "
          f"{len(unexplained)} unexplained")
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
