"""The one pass over the server log that the alert rules read, kept between evaluations.

:func:`scan_log` gives the :class:`LogScan` of a state's log events: each event's effective time
(Unix seconds; a line without a stamp takes the one before it, a naive stamp the zone given), the
recent events the rules read (:data:`RECENT_KINDS`, as :class:`Timed`), the server configs and the
runner launches. It depends only on the events and the zone of unstamped times, so it is kept for
the events tuple it scanned and extended, not repeated, when the next state's tuple only adds
events at the end (``logstate.fold_events`` appends). Its columns only grow and are shared with the
scan that extends it (each scan sees its own prefix), so a batch costs its new events, never a copy
of the log kept. That memo is the only state the alerts package keeps between evaluations; it never
changes a result. Also here: :func:`log_events`, :func:`reference_time` and :func:`service_env`, the
other readings of the state every evaluation starts with.
"""

from __future__ import annotations

import bisect
import math
import threading
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import TYPE_CHECKING, Final

from kvtop.logparse.events import ContextOverTraining, LoadRequest, LogEvent, RunnerStarted, ServerConfig
from kvtop.model.gpu_snapshots import ServiceEnv
from kvtop.model.ladder import RunnerIndex
from kvtop.model.logstate import Prefix

if TYPE_CHECKING:  # annotations only: the rules read the state, the state never imports the rules
    from kvtop.model.views import AppState

__all__ = [
    "RECENT_KINDS",
    "LogScan",
    "Timed",
    "log_events",
    "reference_time",
    "scan_log",
    "service_env",
    "unix_seconds",
]


@dataclass(frozen=True, slots=True)
class Timed:
    """A log event with its effective time (Unix seconds, None when no stamp precedes it)."""

    event: LogEvent
    ts: float | None


RECENT_KINDS: Final = frozenset(
    {
        "truncation",
        "oom",
        "load_failed",
        "eviction",
        "unknown_warning",
        "flash_attention_forced_off",
        "kv_type_fallback",
        "context_clamped",
        "context_over_training",
        "prompt_rejected",
        "context_overflow",
    }
)
"""Event kinds the event rules read (kept with their effective time by :func:`scan_log`)."""


# --------------------------------------------------------------------------------------------
# The log scan


def unix_seconds(when: datetime, naive_tz: tzinfo) -> float | None:
    """Unix seconds of a log time; a naive time is read in ``naive_tz``; None when out of range."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=naive_tz)
    try:
        return when.timestamp()
    except (OverflowError, OSError, ValueError):
        return None


class _Buffers:
    """The append-only columns of a log scan, shared by a scan and the scans that extend it.

    ``end`` is how many events the newest scan using them has claimed: a scan whose ``n`` equals it
    may append (under ``_scans_lock`` it claims the new end first); any other (an older state
    extended a second time) copies its prefix instead, so a column is never written twice.
    """

    __slots__ = ("configs", "end", "launches", "line_nos", "over", "timed", "times")

    def __init__(self) -> None:
        self.line_nos: array[int] = array("q")
        self.times: array[float] = array("d")
        self.timed: list[Timed] = []
        self.configs: list[tuple[int, Mapping[str, str]]] = []
        self.launches: list[RunnerStarted | LoadRequest] = []
        self.over: list[ContextOverTraining] = []
        self.end = 0

    def prefix_of(self, scan: LogScan) -> _Buffers:
        """New buffers holding what ``scan`` sees (a copy: the rare branch of an older state)."""
        out = _Buffers()
        out.line_nos = self.line_nos[: scan.n]
        out.times = self.times[: scan.n]
        out.timed = self.timed[: scan.n_timed]
        out.configs = self.configs[: scan.n_configs]
        out.launches = self.launches[: scan.n_launches]
        out.over = self.over[: scan.n_over]
        out.end = scan.n
        return out


@dataclass(frozen=True, slots=True)
class LogScan:
    """One pass over a tuple of log events: every event's effective time and the events the
    rules read, in log order.

    A line printed without a timestamp (llama.cpp's own lines) takes the time of the nearest
    timestamped line before it, None when no stamped line precedes it.

    The columns live in buffers that only grow, shared with the scan of the next state (which
    appends the new events' entries): extending a scan costs the new events only, and the memo's
    scans of one log share one copy of them. The attributes below are read-only views.

    Attributes:
        events: The events scanned (held, so that its ``id`` is never reused while cached).
        naive_tz: The zone naive stamps were read in.
        n: ``len(events)``.
        timed: Every event of :data:`RECENT_KINDS` with its effective time.
        configs: ``(line_no, env)`` of every ``server config`` line.
        launches: Runner spawns and load requests.
        over_training: The runner's ``n_ctx_per_seq > n_ctx_train`` lines.
        line_nos: Each event's line number, one per event.
        times: Each event's effective time in Unix seconds, NaN for None, one per event.
        ordered: True when ``line_nos`` never decreases (line lookups bisect; else they search).
        ts_sorted: True when the stamped ``timed`` times never decrease and every unstamped one
            comes first (``untimed_head`` of them): :meth:`timed_since` then bisects.
        last_time: The last stamp object seen, and ``last_ts`` its seconds: where a scan of
            events appended later resumes.
    """

    events: Sequence[LogEvent]
    naive_tz: tzinfo
    buf: _Buffers = field(repr=False, compare=False)
    n: int
    n_timed: int
    n_configs: int
    n_launches: int
    n_over: int
    ordered: bool
    ts_sorted: bool
    untimed_head: int
    last_timed_ts: float | None
    last_time: datetime | None
    last_ts: float | None

    @property
    def timed(self) -> Prefix[Timed]:
        return Prefix(self.buf.timed, self.n_timed)

    @property
    def configs(self) -> Prefix[tuple[int, Mapping[str, str]]]:
        return Prefix(self.buf.configs, self.n_configs)

    @property
    def launches(self) -> Prefix[RunnerStarted | LoadRequest]:
        return Prefix(self.buf.launches, self.n_launches)

    @property
    def over_training(self) -> Prefix[ContextOverTraining]:
        return Prefix(self.buf.over, self.n_over)

    @property
    def line_nos(self) -> Prefix[int]:
        return Prefix(self.buf.line_nos, self.n)

    @property
    def times(self) -> Prefix[float]:
        return Prefix(self.buf.times, self.n)

    def time_of_line(self, line_no: int) -> float | None:
        """The effective time of the first event printed on ``line_no``; None when no event has
        that line number or no stamp precedes it."""
        lines, n = self.buf.line_nos, self.n
        if self.ordered:
            i = bisect.bisect_left(lines, line_no, 0, n)
            if i >= n or lines[i] != line_no:
                return None
        else:
            try:
                i = lines.index(line_no, 0, n)
            except ValueError:
                return None
        t = self.buf.times[i]
        return None if math.isnan(t) else t

    def timed_since(self, cutoff: float | None) -> list[Timed]:
        """The ``timed`` events with no time or a time at or after ``cutoff`` (all when None), in
        log order: a bisection when ``ts_sorted`` (the cost grows with the events returned, not
        with the log kept), else one pass."""
        timed, n = self.buf.timed, self.n_timed
        if cutoff is None:
            return timed[:n]
        if self.ts_sorted:
            head = self.untimed_head
            i = bisect.bisect_left(timed, cutoff, head, n, key=_ts_of)
            return timed[:head] + timed[i:n]
        return [t for t in timed[:n] if t.ts is None or t.ts >= cutoff]


def _ts_of(t: Timed) -> float:
    return t.ts  # type: ignore[return-value]  # (only called on stamped entries)


def _scan(
    events: Sequence[LogEvent],
    start: int,
    naive_tz: tzinfo,
    base: LogScan | None,
    whole: Sequence[LogEvent],
    buf: _Buffers,
) -> LogScan:
    """Scan ``events[start:]`` into ``buf``, continuing ``base`` (the scan of ``events[:start]``)
    when given."""
    if base is not None:
        ordered, last_dt, last_ts = base.ordered, base.last_time, base.last_ts
        ts_sorted, head, last_timed_ts = base.ts_sorted, base.untimed_head, base.last_timed_ts
    else:
        ordered, last_dt, last_ts = True, None, None
        ts_sorted, head, last_timed_ts = True, 0, None
    line_nos, times, timed = buf.line_nos, buf.times, buf.timed
    configs, launches, over = buf.configs, buf.launches, buf.over
    prev_line = line_nos[start - 1] if start else None
    nan = math.nan
    recent_kinds = RECENT_KINDS
    for e in events[start:]:
        when = e.time
        if when is not None and when is not last_dt:
            last_dt = when
            last_ts = unix_seconds(when, naive_tz)
        line = e.line_no
        if prev_line is not None and line < prev_line:
            ordered = False
        prev_line = line
        line_nos.append(line)
        times.append(nan if last_ts is None else last_ts)
        if e.kind in recent_kinds:
            timed.append(Timed(e, last_ts))
            if last_ts is None:
                if last_timed_ts is None:
                    head += 1
                else:
                    ts_sorted = False
            else:
                if last_timed_ts is not None and last_ts < last_timed_ts:
                    ts_sorted = False
                last_timed_ts = last_ts
            if isinstance(e, ContextOverTraining):
                over.append(e)
        elif isinstance(e, ServerConfig):
            configs.append((e.line_no, e.env))
        elif isinstance(e, (RunnerStarted, LoadRequest)):
            launches.append(e)
        elif isinstance(e, ContextOverTraining):  # pragma: no cover - its kind is a recent kind
            over.append(e)
    return LogScan(
        events=whole,
        naive_tz=naive_tz,
        buf=buf,
        n=len(events),
        n_timed=len(timed),
        n_configs=len(configs),
        n_launches=len(launches),
        n_over=len(over),
        ordered=ordered,
        ts_sorted=ts_sorted,
        untimed_head=head,
        last_timed_ts=last_timed_ts,
        last_time=last_dt,
        last_ts=last_ts,
    )


_SCANS_KEPT: Final = 4
"""Scans kept (one per log followed). A scan is dropped when a newer one extends it, or when the log
it scanned was trimmed at its cap (the full pass over the trimmed tuple finds the old one's last
event in it), so the memo holds one scan per log, not old copies of it."""
_scans: dict[int, LogScan] = {}
_scans_lock = threading.Lock()


def _extends(new: Sequence[LogEvent], old: Sequence[LogEvent]) -> bool:
    """Whether ``new`` is ``old`` with events appended (checked by identity at both ends of
    ``old``: ``logstate.fold_events`` only appends, or trims the oldest, which this rejects)."""
    n = len(old)
    return 0 < n < len(new) and new[0] is old[0] and new[n - 1] is old[n - 1]


def _holds_end_of(scan: LogScan, old: Sequence[LogEvent]) -> bool:
    """Whether ``old``'s last event (the same object) is among ``scan``'s events: ``old`` is the log
    ``scan`` scanned before its oldest events were trimmed. Found by bisection on the line numbers
    of an ordered scan; an unordered one answers False (the memo's bound then drops the old one)."""
    if not old or not scan.ordered or old is scan.events:
        return False
    last = old[-1]
    lines, n, events = scan.buf.line_nos, scan.n, scan.events
    i = bisect.bisect_left(lines, last.line_no, 0, n)
    while i < n and lines[i] == last.line_no:
        if events[i] is last:
            return True
        i += 1
    return False


def scan_log(events: Sequence[LogEvent], naive_tz: tzinfo) -> LogScan:
    """The scan of ``events`` (see :class:`LogScan`): from the memo when this tuple was scanned,
    extended from the scan of a tuple it appends to (only the new events are scanned, their
    entries appended to the columns that scan shares), else a full pass.

    Args:
        events: The log events, oldest first (``LogState.load_events`` or ``recent``).
        naive_tz: The zone of stamps printed without one.

    Returns:
        The scan; equal to a full pass over ``events`` in every case.
    """
    with _scans_lock:
        hit = _scans.get(id(events))
        if hit is not None and hit.events is events and hit.naive_tz == naive_tz:
            return hit
        base = next(
            (s for s in reversed(_scans.values()) if s.naive_tz == naive_tz and _extends(events, s.events)), None
        )
        if base is None:
            buf = _Buffers()
        elif base.buf.end == base.n:
            buf = base.buf  # the newest scan of these columns: append to them
        else:
            buf = base.buf.prefix_of(base)  # an older state extended again: its own copy
        buf.end = len(events)
    result = _scan(events, base.n if base is not None else 0, naive_tz, base, events, buf)
    if not events:
        return result  # nothing to keep: an empty log (a remote host's) must not push a real one out
    with _scans_lock:
        if base is not None and _scans.get(id(base.events)) is base:
            del _scans[id(base.events)]  # the new scan covers its log
        elif base is None:
            for key in [k for k, s in _scans.items() if _holds_end_of(result, s.events)]:
                del _scans[key]  # the same log before it was trimmed
        _scans.pop(id(events), None)
        _scans[id(events)] = result
        while len(_scans) > _SCANS_KEPT:
            _scans.pop(next(iter(_scans)))
    return result


def log_events(state: AppState) -> Sequence[LogEvent]:
    """The longest history the log state keeps (``load_events``, else the events pane's ``recent``)."""
    log = state.log
    return log.load_events if len(log.load_events) >= len(log.recent) else log.recent


def reference_time(state: AppState, events: Sequence[LogEvent], naive_tz: tzinfo) -> float | None:
    """ "Now" for the rules: the latest ``/api/ps`` poll's time, else the latest GPU or process
    sample's, else the newest log stamp; None when there is none."""
    if state.ollama is not None:
        return state.ollama.taken_at
    times = [s.taken_at for s in (state.gpu, state.procs) if s is not None]
    if times:
        return max(times)
    for e in reversed(events):
        if e.time is not None:
            return unix_seconds(e.time, naive_tz)
    return None


def service_env(state: AppState) -> ServiceEnv | None:
    """The environment of the ``ollama serve`` that serves this state's host (found by its listen
    port), else of the server whose runner a model of this state runs on; None when neither is
    known or readable (the service rung)."""
    env = RunnerIndex(state.procs, None, state.host_url).host_env
    if env is None:
        envs = {id(v.local.env): v.local.env for v in state.models if v.local.env is not None}
        env = next(iter(envs.values())) if len(envs) == 1 else None
    return env if env is not None and env.readable else None
