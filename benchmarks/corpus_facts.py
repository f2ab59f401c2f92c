"""Corpus accuracy: how many of the oracle's facts ``inspect-log --json`` gets right.

Method
------
For every ``<dir>/logs/<stem>.log`` that has ``<dir>/expected/<stem>.json`` (the layout of
``tests/fixtures/logs`` with ``--logs`` and ``--expected`` given, or of a corpus folder given as
one ``--corpus`` path), run :func:`kvtop.logparse.inspect_lines` on the log and compare it with
the oracle under the oracle README's rules (the same rules as ``tests/unit/test_logparse_corpus.py``):
a key absent from the oracle is not checked, ``null``/``{}``/``[]`` must be exactly that, lists have
the oracle's length, a ``memory`` component has exactly the oracle's devices, numbers are equal or
within ``tolerance_bytes[path]``.

A *fact* is one leaf of the oracle's ``server``, ``loads`` and ``events`` (an empty container is
one fact; a ``memory`` component's device set is one more). A fact is matched when its comparison
finds no error; a list entry the parser did not produce misses all its facts.

Two transformations measure how the parser stands the forms real posts take, on the same facts:
``--wrap N`` cuts every line into pieces of N characters (a terminal or a forum that hard-wraps at a
fixed width, mid-token; a piece may start with a space), ``--identifier-only`` removes the date and
host of journald lines (``Jul 24 16:07:51 host ollama[1]: `` becomes ``ollama[1]: ``).

Usage::

    python benchmarks/corpus_facts.py --corpus /path/to/corpus          # logs/ and expected/ inside
    python benchmarks/corpus_facts.py --logs tests/fixtures/logs --expected tests/fixtures/logs/expected
    python benchmarks/corpus_facts.py --wrap 120                        # the fixtures, hard-wrapped at 120

Prints one line per log that misses a fact (with the misses), then ``matched N of M facts (P %)``;
the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from kvtop.logparse import inspect_lines  # noqa: E402 - after the path is set


def score(actual: Any, expected: Any, path: str, tolerance: dict[str, int], misses: list[str]) -> int:
    """The number of facts in ``expected``; every fact ``actual`` gets wrong is appended to ``misses``."""
    if isinstance(expected, dict):
        if not expected:
            if actual != {}:
                misses.append(f"{path}: expected {{}}, got {actual!r}")
            return 1
        facts = 0
        parts = path.split(".")
        if len(parts) >= 2 and parts[-2] == "memory":
            facts += 1
            if not isinstance(actual, dict) or set(actual) != set(expected):
                got = sorted(actual) if isinstance(actual, dict) else actual
                misses.append(f"{path}: devices {got} != {sorted(expected)}")
        for key, value in expected.items():
            sub = f"{path}.{key}" if path else key
            got = actual.get(key, _MISSING) if isinstance(actual, dict) else _MISSING
            facts += score(got, value, sub, tolerance, misses)
        return facts
    if isinstance(expected, list):
        if not expected:
            if actual != []:
                misses.append(f"{path}: expected [], got {actual!r}")
            return 1
        facts = 0
        items = actual if isinstance(actual, list) else []
        for i, value in enumerate(expected):
            got = items[i] if i < len(items) else _MISSING
            facts += score(got, value, f"{path}[{i}]", tolerance, misses)
        facts += 1  # the length
        if len(items) != len(expected):
            misses.append(f"{path}: {len(items)} entries != {len(expected)}")
        return facts
    if actual is _MISSING:
        misses.append(f"{path}: missing")
        return 1
    if isinstance(expected, (bool, str)) or expected is None:
        if actual != expected or type(actual) is not type(expected):
            misses.append(f"{path}: {actual!r} != {expected!r}")
        return 1
    if isinstance(expected, (int, float)):
        ok = isinstance(actual, (int, float)) and not isinstance(actual, bool)
        if not ok or abs(actual - expected) > tolerance.get(path, 0):
            misses.append(f"{path}: {actual!r} != {expected!r}")
        return 1
    misses.append(f"{path}: unexpected oracle value {expected!r}")
    return 1


_MISSING = object()
_JOURNAL_DATE_HOST = re.compile(r"^\S+\s+\d+ \d\d:\d\d:\d\d (?:<[^>]*>|\S+) (?=\S+\[\d+\]: )")


def transform(lines: list[str], wrap: int, identifier_only: bool) -> list[str]:
    """``lines`` as ``--identifier-only`` and ``--wrap`` make them (in that order)."""
    if identifier_only:
        lines = [_JOURNAL_DATE_HOST.sub("", line) for line in lines]
    if wrap > 0:
        lines = [line[i : i + wrap] for line in lines for i in range(0, max(len(line), 1), wrap)]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--corpus", type=Path, help="a folder with logs/ and expected/")
    parser.add_argument("--logs", type=Path, default=REPO_ROOT / "tests" / "fixtures" / "logs")
    parser.add_argument("--expected", type=Path)
    parser.add_argument("--wrap", type=int, default=0, help="cut every line into pieces of this many characters")
    parser.add_argument("--identifier-only", action="store_true", help="drop journald's date and host")
    args = parser.parse_args(argv)
    logs: Path = args.corpus / "logs" if args.corpus else args.logs
    expected_dir: Path = args.corpus / "expected" if args.corpus else (args.expected or logs / "expected")
    total = matched = 0
    per_log: dict[str, list[str]] = {}
    for oracle_path in sorted(expected_dir.glob("*.json")):
        log = logs / f"{oracle_path.stem}.log"
        if not log.exists():
            continue
        oracle = json.loads(oracle_path.read_text(encoding="utf-8"))
        with log.open(encoding="utf-8", errors="replace", newline="") as fh:
            text = fh.read().splitlines()
        actual = inspect_lines(transform(text, args.wrap, args.identifier_only))
        tolerance = oracle.get("tolerance_bytes", {})
        misses: list[str] = []
        facts = 0
        for section in ("server", "loads", "events"):
            if section in oracle:
                facts += score(actual.get(section, _MISSING), oracle[section], section, tolerance, misses)
        total += facts
        matched += facts - len(misses)
        if misses:
            per_log[oracle_path.stem] = misses
    for stem, misses in per_log.items():
        print(f"{stem}: {len(misses)} missed")
        for miss in misses:
            print(f"    {miss}")
    share = 100.0 * matched / total if total else 0.0
    print(f"matched {matched} of {total} facts ({share:.1f} %)")
    print(json.dumps({"matched": matched, "facts": total, "percent": round(share, 2), "logs_missing": len(per_log)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
