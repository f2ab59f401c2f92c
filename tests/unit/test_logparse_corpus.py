"""Every corpus log against its oracle (tests/fixtures/logs/expected/<stem>.json).

Comparison rules (corpus/expected/README.md):

- a key absent from the oracle is not checked; a key present with ``null``, ``{}`` or
  ``[]`` must be exactly that;
- ``server.config`` lists only the certain keys: those are checked, extra keys are allowed;
- ``loads`` and ``events`` have the oracle's length and order; within an entry only the
  oracle's keys are compared;
- each ``memory`` component in the oracle has exactly the oracle's devices;
- numbers are equal, or within ``tolerance_bytes[path]`` when the path is listed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvtop.logparse import inspect_lines

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
EXPECTED = LOGS / "expected"
CORPUS = sorted(p.stem for p in LOGS.glob("*.log"))

XFAIL: dict[str, str] = {}
"""Oracles believed wrong, with the reason (none at present)."""


def compare(actual: Any, expected: Any, path: str, tolerance: dict[str, int], errors: list[str]) -> None:
    """Append to ``errors`` every way ``actual`` breaks the README's comparison rules for ``expected``."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            errors.append(f"{path}: expected an object, got {actual!r}")
            return
        if not expected:
            if actual != {}:
                errors.append(f"{path}: expected {{}}, got {actual!r}")
            return
        parts = path.split(".")
        exact_keys = len(parts) >= 2 and parts[-2] == "memory"
        if exact_keys and set(actual) != set(expected):
            errors.append(f"{path}: devices {sorted(actual)} != {sorted(expected)}")
        for key, value in expected.items():
            sub = f"{path}.{key}" if path else key
            if key not in actual:
                errors.append(f"{sub}: missing")
                continue
            compare(actual[key], value, sub, tolerance, errors)
        return
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            got = len(actual) if isinstance(actual, list) else actual
            errors.append(f"{path}: expected {len(expected)} entries, got {got!r}")
            if not isinstance(actual, list):
                return
        for i, (a, e) in enumerate(zip(actual, expected)):
            compare(a, e, f"{path}[{i}]", tolerance, errors)
        return
    if isinstance(expected, bool) or expected is None or isinstance(expected, str):
        if actual != expected or type(actual) is not type(expected):
            errors.append(f"{path}: {actual!r} != {expected!r}")
        return
    if isinstance(expected, (int, float)):
        if isinstance(actual, bool) or not isinstance(actual, (int, float)):
            errors.append(f"{path}: {actual!r} != {expected!r}")
            return
        tol = tolerance.get(path, 0)
        if abs(actual - expected) > tol:
            errors.append(f"{path}: {actual!r} != {expected!r} (tolerance {tol})")
        return
    errors.append(f"{path}: unexpected oracle value {expected!r}")


def test_corpus_is_complete() -> None:
    """Every log has an oracle and every oracle a log."""
    oracles = sorted(p.stem for p in EXPECTED.glob("*.json"))
    assert oracles == CORPUS
    assert len(CORPUS) >= 46


@pytest.mark.parametrize(
    "stem",
    [pytest.param(s, marks=pytest.mark.xfail(reason=XFAIL[s], strict=True)) if s in XFAIL else s for s in CORPUS],
)
def test_corpus_log_matches_oracle(stem: str) -> None:
    oracle = json.loads((EXPECTED / f"{stem}.json").read_text(encoding="utf-8"))
    with (LOGS / f"{stem}.log").open(encoding="utf-8", errors="replace", newline="") as fh:
        actual = inspect_lines(fh)
    json.dumps(actual)  # the document must be JSON-serialisable
    tolerance = oracle.get("tolerance_bytes", {})
    errors: list[str] = []
    for section in ("server", "loads", "events"):
        if section in oracle:
            compare(actual.get(section), oracle[section], section, tolerance, errors)
    assert not errors, f"{stem}:\n  " + "\n  ".join(errors) + f"\nnotes: {oracle.get('notes')}"


def test_compare_helper_rules() -> None:
    """The helper itself: absent keys unchecked, empty containers exact, device sets exact, tolerance."""
    errors: list[str] = []
    compare({"a": 1, "b": 2}, {"a": 1}, "", {}, errors)
    assert errors == []
    compare({"x": {"k": 1}}, {"x": {}}, "", {}, errors)
    assert errors and "expected {}" in errors[-1]
    errors.clear()
    compare({"memory": {"kv": {"CPU": 10, "CUDA0": 5}}}, {"memory": {"kv": {"CPU": 10}}}, "loads[0]", {}, errors)
    assert errors and "devices" in errors[0]
    errors.clear()
    compare({"kv_bytes": 105}, {"kv_bytes": 100}, "loads[0]", {"loads[0].kv_bytes": 5}, errors)
    assert errors == []
    compare([1, 2], [1], "events", {}, errors)
    assert errors
