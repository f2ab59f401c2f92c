"""What following a log keeps in memory (it must stop growing at its cap, not add ~0.8 MiB/min),
proved with byte and work counts, never clocks.

The log state keeps compact events (``logparse.event_compactor.EventCompactor``: no raw line, one copy of a
repeated short text, a time object shared with the previous event's when equal), and the alerts'
log scan appends each batch to columns it shares with the scan it extends instead of copying them
(``model.alerts.context``). ``benchmarks/log_memory.py`` prints the figures over simulated minutes.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import tracemalloc
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from kvtop.logparse.event_compactor import EventCompactor
from kvtop.logparse.events import EVENT_TYPES, ServerListening, UnknownWarning, event_to_dict
from kvtop.logparse.load_grouping import LoadGrouper, group_loads
from kvtop.logparse.parser import LogParser, parse_lines
from kvtop.model.alerts import log_scan
from kvtop.model.alerts import evaluate_state
from kvtop.model import logstate
from kvtop.model.logstate import LOAD_EVENTS, LogState, Prefix, fold_events
from kvtop.model.state import fold_log_events
from kvtop.model.views import AppState

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
HOST = "http://127.0.0.1:11434"


def corpus_lines() -> list[str]:
    """Every corpus log's lines (comment lines dropped), file after file."""
    out: list[str] = []
    for path in sorted(LOGS.rglob("*.log")):
        out.extend(x for x in path.read_text(encoding="utf-8", errors="replace").splitlines() if not x.startswith("#"))
    return out


def fresh_lines(lines: list[str]) -> Iterator[str]:
    """``lines`` cycled for ever, each a new string object (as a file read gives them)."""
    while True:
        for line in lines:
            yield (line + "\n")[:-1]


def follow(state: AppState, parser: LogParser, lines: Iterator[str], n_lines: int, per_batch: int = 100) -> AppState:
    """Feed ``n_lines`` as the dashboard does: parse each batch, fold it once, evaluate the alerts."""
    for _ in range(n_lines // per_batch):
        batch = [next(lines) for _ in range(per_batch)]
        events = [e for line in batch for e in parser.feed(line)]
        events.extend(parser.end_batch())
        state = fold_log_events(
            state, events, source="file:/x.log", status=None, ok=True, lines=len(batch), raw_lines=batch
        )
        state = evaluate_state(state)
    return state


# --------------------------------------------------------------------------------------------
# Compact events


def test_compact_events_keep_every_field_but_the_raw_line() -> None:
    events = parse_lines(corpus_lines(), default_year=2025)
    assert len({type(e) for e in events}) > len(EVENT_TYPES) * 2 // 3  # most kinds, from every era
    lean = EventCompactor().compact(events)
    assert len(lean) == len(events) > 200
    for a, b in zip(events, lean, strict=True):
        assert type(b) is type(a) and b.raw == "" and a.raw
        assert {k: v for k, v in event_to_dict(b).items() if k != "raw"} == {
            k: v for k, v in event_to_dict(a).items() if k != "raw"
        }
        assert b == dataclasses.replace(a, raw="")
        with pytest.raises(dataclasses.FrozenInstanceError):
            b.line_no = 0  # type: ignore[misc]


def test_compact_events_share_repeated_text_configs_and_equal_times() -> None:
    lines = [
        'time=2026-11-29T12:00:00.000Z level=WARN source=runner.go:131 msg="truncating input prompt" limit=2048 '
        "prompt=5065 keep=5 new=2048",
        'time=2026-11-29T12:00:00.000Z level=WARN source=runner.go:131 msg="truncating input prompt" limit=2048 '
        "prompt=6000 keep=5 new=2048",
        "load_tensors:        CUDA0 model buffer size =  1918.35 MiB",
        "load_tensors:        CUDA0 model buffer size =  1918.35 MiB",
        'time=2026-11-29T12:00:01.000Z level=INFO source=routes.go:1 msg="server config" env="map[OLLAMA_DEBUG:false '
        'OLLAMA_NUM_PARALLEL:4]"',
        'time=2026-11-29T12:00:02.000Z level=INFO source=routes.go:1 msg="server config" env="map[OLLAMA_DEBUG:false '
        'OLLAMA_NUM_PARALLEL:4]"',
    ]
    fresh = [(x + "\n")[:-1] for x in lines]
    t1, t2, a1, a2, c1, c2 = parse_lines(fresh)
    t2 = dataclasses.replace(t2, time=datetime(2026, 11, 29, 12, 0, 0, tzinfo=timezone.utc))  # equal, another object
    assert t1.time == t2.time and t1.time is not t2.time and a1.device is not a2.device and c1.env is not c2.env
    lean = EventCompactor().compact([t1, t2, a1, a2, c1, c2])
    assert lean[0].time is lean[1].time and lean[0].limit == 2048
    assert lean[2].device is lean[3].device == "CUDA0" and lean[2].component is lean[3].component
    assert lean[4].env is lean[5].env and dict(lean[4].env) == {"OLLAMA_DEBUG": "false", "OLLAMA_NUM_PARALLEL": "4"}


def test_the_string_table_is_bounded_and_long_text_is_not_remembered() -> None:
    c = EventCompactor(max_strings=8, max_chars=40)
    events = [UnknownWarning(i, None, "", level="WARN", message=f"unique {i}", source=None) for i in range(100)]
    lean = c.compact(events)
    assert [e.message for e in lean] == [f"unique {i}" for i in range(100)]
    assert 0 < c.strings_held <= 8
    long = "x" * 41
    assert c.share(long) is long and c.share((long + "\n")[:-1]) is not long  # never remembered
    odd = [
        UnknownWarning(1, None, "x", level="WARN", message=None, source=None),  # not what the parser makes,
        UnknownWarning(2, None, "x", level=7, message=b"\x1b", source=None),
    ]  # but never a traceback
    assert [(e.level, e.message, e.raw) for e in c.compact(odd)] == [("WARN", None, ""), (7, b"\x1b", "")]


def test_the_grouper_keeps_the_newest_builder_alone_and_follows_a_new_server_version() -> None:
    """A load that is not the newest is final: its builder is released once built (only its
    ``Load`` kept), and a new server version still gives its era to the loads whose lines gave none."""
    events = parse_lines(corpus_lines(), default_year=2026)
    third = len(events) // 3
    for at, version in ((2 * third, "0.30.1"), (third, "0.3.14"), (0, "0.12.3")):  # inserted back to front
        n = events[at].line_no
        events.insert(at, ServerListening(n, None, "", address="127.0.0.1:11434", version=version))
    g = LoadGrouper()
    fed: list[Any] = []
    for i in range(0, len(events), 17):
        g.extend(events[i : i + 17])
        fed.extend(events[i : i + 17])
        assert g.loads_now() == group_loads(fed)
        assert sum(b is not None for b in g.loads) <= 1  # the newest builder alone
    final = g.loads_now()
    assert len(final) > 10 and sum(b is None for b in g.loads) == len(final) - 1
    by_server = [ld for ld, (_, _, own_era) in zip(final, g._built, strict=True) if not own_era]
    assert by_server and all(ld.era == "C" for ld in by_server)  # released, then given the last version's era


# --------------------------------------------------------------------------------------------
# Bytes kept per event, lines counted


def test_a_busy_log_keeps_few_bytes_per_event_and_counts_every_line(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = corpus_lines()
    warm = fresh_lines(lines)
    follow(
        AppState(host_url=HOST), LogParser(default_year=2026), warm, len(lines) // 100 * 100 + 100
    )  # lazy imports, regex caches
    monkeypatch.setattr(log_scan, "_scans", {})
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        state = AppState(host_url=HOST)
        fed = 12_000
        state = follow(state, LogParser(default_year=2026), fresh_lines(lines), fed)
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    n = len(state.log.load_events)
    assert state.log.lines == fed and state.log.dropped_lines == 0  # every line counted
    assert 3_000 < n < LOAD_EVENTS and len(state.log.raw) == 500
    assert all(e.raw == "" for e in state.log.load_events)
    per_event = kept / n
    # the events, the loads and their grouper, the alerts' scan and the raw view: ~370 B a kept event
    # (each event kept its raw line, the memo four copies of the scan's columns and the grouper every
    # load's builder: ~1,000 B before)
    assert per_event < 600, f"{per_event:.0f} bytes kept per event"


# --------------------------------------------------------------------------------------------
# The alerts' scan: work per batch independent of the history kept


def _history(n_events: int) -> tuple[AppState, list[Any]]:
    """A state holding about ``n_events`` corpus events (under the cap), and 50 more to append."""
    lines = corpus_lines()
    events = parse_lines([x for _ in range(n_events // 200 + 2) for x in lines], default_year=2026)
    assert len(events) >= n_events + 50
    state = AppState(host_url=HOST)
    for i in range(0, n_events, 500):
        state = fold_log_events(
            state, events[i : min(i + 500, n_events)], source="file:/x", status=None, ok=True, lines=1
        )
    return state, events[n_events : n_events + 50]


@pytest.mark.parametrize("history", [1_000, 15_000])
def test_extending_the_scan_copies_nothing_kept(monkeypatch: pytest.MonkeyPatch, history: int) -> None:
    monkeypatch.setattr(log_scan, "_scans", {})
    state, more = _history(history)
    tz = timezone.utc
    first = log_scan.scan_log(log_scan.log_events(state), tz)
    assert first.n == len(state.log.load_events) == history
    copied: list[int] = []
    real_array = log_scan.array

    def counting_array(typecode: str, init: Any = ()) -> Any:
        copied.append(len(init))
        return real_array(typecode, init)

    monkeypatch.setattr(log_scan, "array", counting_array)
    later = fold_log_events(state, more, source="file:/x", status=None, ok=True, lines=1)
    scan = log_scan.scan_log(log_scan.log_events(later), tz)
    assert scan.n == history + 50 and list(scan.line_nos[-50:]) == [e.line_no for e in more]
    assert sum(copied) == 0  # no column copied: the old scan copied both arrays (2 x history elements)
    assert list(log_scan._scans.values()) == [scan]  # the extended scan is not kept beside its successor
    assert list(first.line_nos) == [e.line_no for e in state.log.load_events]  # the older scan still sees its prefix
    fresh_memo: dict[int, Any] = {}
    monkeypatch.setattr(log_scan, "_scans", fresh_memo)
    full = log_scan.scan_log(log_scan.log_events(later), tz)
    assert (full.timed, full.configs, full.launches, full.over_training, full.ordered) == (
        scan.timed,
        scan.configs,
        scan.launches,
        scan.over_training,
        scan.ordered,
    )
    assert str(list(full.times)) == str(list(scan.times))


def test_an_older_state_extended_again_gets_its_own_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log_scan, "_scans", {})
    state, more = _history(1_000)
    tz = timezone.utc
    base = log_scan.scan_log(log_scan.log_events(state), tz)
    one = fold_log_events(state, more[:20], source="file:/x", status=None, ok=True, lines=1)
    other = fold_log_events(state, more[20:], source="file:/x", status=None, ok=True, lines=1)  # a branch
    a = log_scan.scan_log(log_scan.log_events(one), tz)
    log_scan._scans[id(base.events)] = base  # as if the older state's scan were still remembered
    b = log_scan.scan_log(log_scan.log_events(other), tz)
    assert list(a.line_nos) == [e.line_no for e in one.log.load_events]
    assert list(b.line_nos) == [e.line_no for e in other.log.load_events]
    assert list(base.line_nos) == [e.line_no for e in state.log.load_events]


def test_the_recent_window_is_found_by_bisection(monkeypatch: pytest.MonkeyPatch) -> None:
    """``timed_since`` (the events within the alert windows) looks at O(log n) entries of a long
    history of warnings, not at each of them."""
    base = (
        'time=2026-11-29T{h:02d}:{m:02d}:{s:02d}.000Z level=WARN source=runner.go:131 msg="truncating input '
        'prompt" limit=2048 prompt=5065 keep=5 new=2048'
    )
    lines = [base.format(h=8 + i // 3600, m=i // 60 % 60, s=i % 60) for i in range(16_000)]
    events = tuple(EventCompactor().compact(parse_lines(lines)))
    monkeypatch.setattr(log_scan, "_scans", {})
    scan = log_scan.scan_log(events, timezone.utc)
    assert scan.n_timed == 16_000 and scan.ts_sorted and scan.untimed_head == 0
    calls = [0]
    real = log_scan._ts_of

    def counted(t: Any) -> float:
        calls[0] += 1
        return real(t)

    monkeypatch.setattr(log_scan, "_ts_of", counted)
    last = scan.timed[-1].ts
    assert last is not None
    window = scan.timed_since(last - 99)
    assert [t.event.line_no for t in window] == list(range(15_901, 16_001))
    assert calls[0] <= 2 * math.ceil(math.log2(16_000)) + 2
    assert scan.timed_since(None) == list(scan.timed)
    assert scan.timed_since(last + 1) == []


# --------------------------------------------------------------------------------------------
# The log state: a batch appends, the history kept is not copied


def test_a_batch_appends_to_the_history_without_copying_it(monkeypatch: pytest.MonkeyPatch) -> None:
    copied: list[int] = []
    real = logstate._copy

    def counting_copy(events: Any) -> list[Any]:
        copied.append(len(events))
        return real(events)

    monkeypatch.setattr(logstate, "_copy", counting_copy)
    events = parse_lines([x for _ in range(60) for x in corpus_lines()], default_year=2026)[:15_050]
    state = LogState()
    for i in range(0, 15_000, 500):
        state = fold_events(state, events[i : i + 500], source="s", status=None, ok=True, lines=500)
    assert copied == [0]  # the first batch's list; every later batch appended to it
    before = state
    later = fold_events(before, events[15_000:], source="s", status=None, ok=True, lines=50)
    assert copied == [0] and len(later.load_events) == 15_050 and len(before.load_events) == 15_000
    # an older state extended again (a branch) copies its own history: the newer one is untouched
    other = fold_events(before, events[15_000:15_010], source="s", status=None, ok=True, lines=10)
    assert copied == [0, 15_000]
    assert len(other.load_events) == 15_010 and len(later.load_events) == 15_050
    assert [e.line_no for e in later.load_events[-50:]] == [e.line_no for e in events[15_000:]]
    assert [e.line_no for e in other.load_events[-10:]] == [e.line_no for e in events[15_000:15_010]]
    assert before.load_events == later.load_events[:15_000] and len(before.load_events) == 15_000


def test_prefix_reads_as_the_tuple_of_its_items() -> None:
    items = [1, 2, 3, 4, 5]
    p = Prefix(items, 3)
    items.append(6)  # a later state's append: not seen
    assert len(p) == 3 and list(p) == [1, 2, 3] and p == (1, 2, 3) and (1, 2, 3) == p and p != (1, 2)  # noqa: SIM300 - both sides' __eq__
    assert p[-1] == 3 and p[0] == 1 and p[1:] == [2, 3] and p[::-1] == [3, 2, 1] and p[-5:10] == [1, 2, 3]
    assert p[::2] == [1, 3] and p[2:0:-1] == [3, 2] and p[5:] == []
    assert list(reversed(p)) == [3, 2, 1] and 2 in p and 5 not in p and p.index(3) == 2
    with pytest.raises(IndexError):
        p[3]
    with pytest.raises(IndexError):
        p[-4]
    with pytest.raises(TypeError):
        hash(p)
