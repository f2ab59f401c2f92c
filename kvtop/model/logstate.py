"""What the server log has told kvtop so far: parsed events and the model loads they form.

Pure: ``fold_events`` takes the events a worker parsed from one batch of lines and returns a new
``LogState``. Loads are regrouped only when a batch carries an event that can change a load, so
a busy server's per-request lines cost almost nothing; and then incrementally
(``logparse.loads.LoadGrouper``: the events since the last grouping are fed to the grouper the
previous state left), so the cost grows with the new lines, not with the ``LOAD_EVENTS`` kept.
A state whose grouper has moved on (an older state applied again) is regrouped from scratch:
the result is the same, only slower.

Memory: the events kept are compact copies (``logparse.event_compactor.EventCompactor``: no raw
line, one copy of a repeated short text), and ``load_events`` is one list shared by a state and
the states after it (:class:`Prefix`): a batch appends its events, never copies the history.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar, overload

from kvtop.logparse.event_compactor import EventCompactor
from kvtop.logparse.events import LogEvent, RequestTiming
from kvtop.logparse.load_build import Load
from kvtop.logparse.load_grouping import LoadGrouper, group_loads
from kvtop.model.traffic import Traffic, add_events

RECENT_EVENTS = 1000
"""Events kept for the events pane (newest last)."""

RAW_LINES = 500
"""Raw log lines kept for the events pane's raw view (``r``), parsed or not."""

LOAD_EVENTS = 20_000
"""Events kept for grouping loads (and the alerts' history); over it they are trimmed at a load
boundary, keeping the newest ``KEEP_LOADS`` loads, or else to ``TRIM_TO_EVENTS`` events."""

TRIM_TO_EVENTS = 15_000
"""Events kept when a trim cannot cut at a load boundary: well under ``LOAD_EVENTS``, so a
steady stream of per-request lines trims once per few thousand events, not on every batch."""

_COMPACTOR = EventCompactor()
"""Makes the events kept small (no raw line, one copy of each short text); shared by every log
state: it changes no value, only which object holds it."""

KEEP_LOADS = 16
"""Loads kept when ``LOAD_EVENTS`` overflows."""

PER_REQUEST_KINDS = frozenset({"gin_request", "request_timing", "prefill_progress", "slot_activity"})
"""Event kinds that never change a load's memory or settings."""

WARNING_KINDS = frozenset(
    {
        "oom",
        "load_failed",
        "eviction",
        "kv_type_fallback",
        "flash_attention_forced_off",
        "truncation",
        "fit_overflow",
        "unknown_warning",
        "context_clamped",
        "context_over_training",
        "prompt_rejected",
        "context_overflow",
    }
)
"""Kinds the events pane highlights."""


_T = TypeVar("_T")


class Prefix(Sequence[_T]):
    """The first ``n`` items of a list or array that only grows, read-only and O(1) to make: what
    one :class:`LogState` keeps of the events it shares with the states after it
    (``load_events``), and one ``alerts.context.LogScan`` of the columns it shares with the scans
    that extend it. Indexing, slicing (a copy of the slice), iteration and equality with any
    sequence are those of a tuple of the items."""

    __slots__ = ("_items", "_n")

    def __init__(self, items: Sequence[_T], n: int) -> None:
        self._items = items
        self._n = n

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, i: int) -> _T: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[_T]: ...

    def __getitem__(self, i: int | slice) -> _T | Sequence[_T]:
        if isinstance(i, slice):
            start, stop, step = i.indices(self._n)
            if step == 1:
                return self._items[start:stop]
            return [self._items[k] for k in range(start, stop, step)]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError("Prefix index out of range")
        return self._items[i]

    def __iter__(self) -> Iterator[_T]:
        return itertools.islice(self._items, self._n)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(other) == self._n and all(a is b or a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Prefix({list(self)!r})"


@dataclass(frozen=True, slots=True)
class LogState:
    """The log as far as read.

    Attributes:
        source: Which log is read (``file:/var/log/ollama.log``), None before one is chosen.
        status: One sentence about the source when something is off (permission, rotation…).
        ok: False while the source is failing.
        lines: Lines read so far.
        dropped_lines: Lines skipped by the backlog bound.
        recent: The newest ``RECENT_EVENTS`` events, oldest first (compact copies: ``raw`` is ``""``).
        raw: The newest ``RAW_LINES`` lines as read (untrusted text: sanitize before display).
        load_events: Events the loads are grouped from, oldest first: a read-only sequence
            (:class:`Prefix`) sharing one list with the states after this one, so that a batch
            appends its events instead of copying the history kept.
        loads: Model loads in log order.
        grouper: The incremental grouper ``loads`` came from (shared with the states after this
            one; not part of equality).
        grouped: How many of ``load_events`` that grouper had taken when ``loads`` was made.
        group_mark: The grouper's mark then: equal to ``grouper.mark`` while it has not moved on.
        traffic: The access lines' running aggregates (``model.traffic``): kept apart from the
            events, which are trimmed.
    """

    source: str | None = None
    status: str | None = None
    ok: bool = True
    lines: int = 0
    dropped_lines: int = 0
    recent: tuple[LogEvent, ...] = ()
    raw: tuple[str, ...] = ()
    load_events: Sequence[LogEvent] = ()
    loads: tuple[Load, ...] = ()
    grouper: LoadGrouper | None = field(default=None, compare=False, repr=False)
    grouped: int = field(default=0, compare=False, repr=False)
    group_mark: object = field(default=None, compare=False, repr=False)
    traffic: Traffic = Traffic()

    def latest_load(self, model_blob: str | None) -> Load | None:
        """The newest load of the weights blob ``sha256-<hex>``, if the log has one."""
        if not model_blob:
            return None
        for load in reversed(self.loads):
            if load.model_blob == model_blob:
                return load
        return None


def fold_events(
    state: LogState,
    events: Sequence[LogEvent],
    *,
    source: str | None,
    status: str | None,
    ok: bool,
    lines: int,
    dropped_lines: int = 0,
    raw_lines: Sequence[str] = (),
) -> LogState:
    """Return the state after one batch: ``events`` parsed from ``lines`` new lines.

    The events are kept as :class:`~kvtop.logparse.event_compactor.EventCompactor` copies (``raw`` is
    ``""``: the raw view shows ``raw``, the newest lines as read); ``raw_lines`` are the batch's
    lines as read, of which the newest ``RAW_LINES`` are kept.
    """
    if events:
        events = _COMPACTOR.compact(events)
    raw = (state.raw + tuple(raw_lines))[-RAW_LINES:] if raw_lines else state.raw
    recent = state.recent + tuple(events)
    if len(recent) > RECENT_EVENTS:
        recent = recent[-RECENT_EVENTS:]
    load_events = state.load_events
    loads = state.loads
    grouper, grouped, mark = state.grouper, state.grouped, state.group_mark
    if events:
        load_events = _appended(load_events, events)
        trimmed = len(load_events) > LOAD_EVENTS
        if trimmed:
            load_events = _trim(load_events)
        if trimmed or any(e.kind not in PER_REQUEST_KINDS for e in events):
            if trimmed or grouper is None or grouper.mark is not mark:
                grouper, grouped = LoadGrouper(), 0  # from scratch: trimmed, or an older state
            grouper.extend(load_events[grouped:])
            grouped = len(load_events)
            mark = grouper.mark = object()
            loads = tuple(grouper.loads_now())
    return dataclasses.replace(
        state,
        traffic=add_events(state.traffic, events) if events else state.traffic,
        source=source,
        status=status,
        ok=ok,
        lines=state.lines + lines,
        dropped_lines=state.dropped_lines + dropped_lines,
        recent=recent,
        raw=raw,
        load_events=load_events,
        loads=loads,
        grouper=grouper,
        grouped=grouped,
        group_mark=mark,
    )


@dataclass(frozen=True, slots=True)
class Throughput:
    """A model's request timings from the runner log (llama-server ``print_timing`` lines).

    Attributes:
        requests: Timed requests in the events kept (``RECENT_EVENTS``).
        last_prefill_tps / last_decode_tps: The newest request's prompt and generation speed (tokens per second;
            the prefill counts only the prompt tokens evaluated, not those reused from the cache).
        last_prompt_cached_tokens: The newest request's prompt tokens reused from the slot's cache (llama-server's
            ``cached n_tokens`` line, docs/ollama-internals.md §4.10); None when the log does not say.
        avg_decode_tps: Mean generation speed of the last ``window`` timed requests.
        requests_per_min: Timed requests in the minute before ``now_s`` (None without timestamps).
    """

    requests: int
    last_prefill_tps: float | None
    last_decode_tps: float | None
    avg_decode_tps: float | None
    requests_per_min: int | None
    last_prompt_cached_tokens: int | None = None


def throughput(log: LogState, load: Load, now_s: float, window: int = 10) -> Throughput:
    """Timings of the requests served by ``load``: each timing line belongs to the newest load
    that started before it (the runner log's timing lines name no model; docs/ollama-internals.md §4.10)."""
    starts = [ld.first_line for ld in log.loads]
    mine: list[RequestTiming] = []
    for e in log.recent:
        if not isinstance(e, RequestTiming):
            continue
        i = bisect.bisect_right(starts, e.line_no) - 1
        if i >= 0 and log.loads[i].index == load.index:
            mine.append(e)
    last = mine[-1] if mine else None
    decode = [e.eval_tps for e in mine[-window:] if e.eval_tps]
    timed = [e.time for e in mine if e.time is not None and e.time.tzinfo is not None]
    per_min = sum(1 for t in timed if 0 <= now_s - t.timestamp() <= 60) if timed else None
    return Throughput(
        requests=len(mine),
        last_prefill_tps=last.prompt_tps if last else None,
        last_decode_tps=last.eval_tps if last else None,
        avg_decode_tps=sum(decode) / len(decode) if decode else None,
        requests_per_min=per_min,
        last_prompt_cached_tokens=last.prompt_cached_tokens if last else None,
    )


_append_lock = threading.Lock()


def _appended(kept: Sequence[LogEvent], events: Sequence[LogEvent]) -> Prefix[LogEvent]:
    """``kept`` with ``events`` after it: appended to the list ``kept`` shares when ``kept`` is its
    newest state (O(len(events))), else (the first batch, an older state extended again) a copy."""
    with _append_lock:
        items = kept._items if isinstance(kept, Prefix) else None  # noqa: SLF001 - the class's own buffer
        if type(items) is not list or len(items) != len(kept):
            items = _copy(kept)
        items.extend(events)
        return Prefix(items, len(items))


def _copy(events: Sequence[LogEvent]) -> list[LogEvent]:
    """A list of its own for a history extended off its newest state (tests count these copies)."""
    return list(events)


def _trim(kept: Sequence[LogEvent]) -> Prefix[LogEvent]:
    """Drop the oldest events, down to at most ``TRIM_TO_EVENTS``: per-request events first (only
    the newest ``TRIM_TO_EVENTS // 2`` of the window are kept; a burst of request lines must not
    push an OOM or a load out of the alerts' history), then whole loads: cut at the start of the
    oldest of the newest ``KEEP_LOADS`` loads that leaves few enough; else the newest events. The
    result has a list of its own (the states before keep theirs)."""
    keep_from = len(kept) - TRIM_TO_EVENTS // 2
    events = [e for i, e in enumerate(kept) if i >= keep_from or e.kind not in PER_REQUEST_KINDS]
    if len(events) > TRIM_TO_EVENTS:
        loads = group_loads(events)
        for load in loads[-KEEP_LOADS:]:
            cut = bisect.bisect_left(events, load.first_line, key=lambda e: e.line_no)
            if cut > 0 and len(events) - cut <= TRIM_TO_EVENTS:
                events = events[cut:]
                break
        else:
            events = events[-TRIM_TO_EVENTS:]
    return Prefix(events, len(events))
