"""The incremental load grouping (``LoadGrouper``, ``logstate.fold_events``) gives exactly what
grouping every event from scratch gives, on every real log in the fixtures, however the lines
are cut into batches; and its work grows with the new events, not with the history (counted)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from kvtop.logparse import load_grouping as grouping_mod
from kvtop.logparse.load_grouping import LoadGrouper, group_loads
from kvtop.logparse.parser import parse_lines
from kvtop.model import logstate
from kvtop.model.logstate import LogState, fold_events

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
REAL_LOGS = sorted(p for p in LOGS.rglob("*.log"))
LOAD_LOG = LOGS / "llama-server-runs" / "gemma3-iswa-q8_0-fa-on-np2.log"


def _events(path: Path) -> list:
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return parse_lines(lines, default_year=2026)


@pytest.mark.parametrize("path", REAL_LOGS, ids=lambda p: p.name)
def test_incremental_grouping_equals_grouping_from_scratch(path: Path) -> None:
    events = _events(path)
    rng = random.Random(path.name)
    g = LoadGrouper()
    i = 0
    while i < len(events):
        n = rng.choice((1, 2, 3, 7, 50))
        g.extend(events[i : i + n])
        i += n
        assert g.loads_now() == group_loads(events[:i])
    assert g.loads_now() == group_loads(events)


def test_apply_log_in_batches_equals_one_batch_and_an_older_state_regroups() -> None:
    events = _events(LOAD_LOG) * 3
    one = fold_events(LogState(), events, source="s", status=None, ok=True, lines=len(events))
    state = LogState()
    states = []
    for k in range(0, len(events), 13):
        state = fold_events(state, events[k : k + 13], source="s", status=None, ok=True, lines=len(events[k : k + 13]))
        states.append(state)
    assert state.loads == one.loads and len(state.loads) == 3
    # an older state applied again (its grouper has moved on) is regrouped: the same answer
    old = states[len(states) // 2]
    rest = events[(len(states) // 2 + 1) * 13 :]
    again = fold_events(old, rest, source="s", status=None, ok=True, lines=len(rest))
    assert again.loads == one.loads


def test_grouping_work_grows_with_new_events_not_with_history(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counted: events fed to a grouper. Appending 50 batches of one load each feeds each event
    once (a regroup from scratch would feed the whole history every batch)."""
    fed = 0
    real_feed = grouping_mod._Grouper.feed

    def counting_feed(self, e):  # type: ignore[no-untyped-def]
        nonlocal fed
        fed += 1
        return real_feed(self, e)

    monkeypatch.setattr(grouping_mod._Grouper, "feed", counting_feed)
    load = _events(LOAD_LOG)
    state = LogState()
    total = 0
    for _ in range(50):
        state = fold_events(state, load, source="s", status=None, ok=True, lines=len(load))
        total += len(load)
    assert len(state.loads) == 50
    assert total <= logstate.LOAD_EVENTS  # no trim in this test
    assert fed == total  # linear: each event grouped once


def test_request_noise_never_pushes_an_oom_out_and_the_history_stays_bounded() -> None:
    events = _events(LOAD_LOG)
    gin = next(
        e
        for e in parse_lines(
            ['[GIN] 2026/11/29 - 12:00:00 | 200 |  1.234567ms |       127.0.0.1 | POST     "/api/chat"'],
            default_year=2026,
        )
    )
    assert gin.kind in logstate.PER_REQUEST_KINDS
    state = fold_events(LogState(), events, source="s", status=None, ok=True, lines=len(events))
    important = [e for e in state.load_events if e.kind not in logstate.PER_REQUEST_KINDS]
    for _ in range(100):  # 100 × 1,000 request lines
        state = fold_events(state, [gin] * 1000, source="s", status=None, ok=True, lines=1000)
        assert len(state.load_events) <= logstate.LOAD_EVENTS
    kept = [e for e in state.load_events if e.kind not in logstate.PER_REQUEST_KINDS]
    assert kept == important
    assert state.loads == tuple(group_loads(events)) and len(state.loads) == 1
