"""Grouping loads as a stream, one load in memory at a time (``kvtop inspect-log`` on a log of any
size): :class:`LoadStream` keeps per load the incidents that give findings and the first requests,
and counts the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from kvtop.logparse.cmdline import era_of_version
from kvtop.logparse.events import LogEvent
from kvtop.logparse.load_build import Load, _Builder
from kvtop.logparse.load_grouping import _continues, _Grouper

MAX_FINDING_EVENTS = 100
"""Per load, the incidents that each give a finding line (KV type fallback, flash attention forced
off, OOM, load failure) that :class:`LoadStream` keeps; the rest are counted (``events_left_out``)."""

FINDING_KINDS = frozenset({"kv_type_fallback", "flash_attention_forced_off", "oom", "load_failed"})
"""Incident kinds that give one finding line each (:meth:`Load.findings`)."""

REQUEST_KINDS = ("truncation", "request_timing")
"""Incident kinds listed under a load's requests in the human report."""

MAX_LOAD_REQUESTS = 20
"""Per load, the requests :class:`LoadStream` keeps (the first ones); the rest are counted."""


@dataclass
class _Kept:
    """What :class:`LoadStream` keeps of one load's incidents."""

    events: list[LogEvent] = field(default_factory=list)
    left_out: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    requests: list[LogEvent] = field(default_factory=list)
    requests_total: int = 0

    def add(self, e: LogEvent) -> None:
        self.counts[e.kind] = self.counts.get(e.kind, 0) + 1
        if e.kind in FINDING_KINDS:
            if len(self.events) < MAX_FINDING_EVENTS:
                self.events.append(e)
            else:
                self.left_out += 1
        if e.kind in REQUEST_KINDS:
            self.requests_total += 1
            if len(self.requests) < MAX_LOAD_REQUESTS:
                self.requests.append(e)


class _LastLoad:
    """Stands in for ``_Grouper.loads``: counts the loads and keeps only the last one."""

    def __init__(self) -> None:
        self.count = 0
        self.last: _Builder | None = None

    def append(self, b: _Builder) -> None:
        self.count += 1
        self.last = b

    def __len__(self) -> int:
        return self.count


class LoadStream(_Grouper):
    """The grouping of :func:`inspect_events`, one event at a time, with memory bounded by one load.

    Call :meth:`feed` with each event in log order, then :meth:`finish`. Each load is handed to
    ``on_load(load, requests, requests_total)`` once it is complete (when the next load starts,
    or at :meth:`finish`): ``load.era`` is None when only the server's version gives it (use
    :meth:`era` afterwards); ``load.events`` holds at most :data:`MAX_FINDING_EVENTS` incidents
    of :data:`FINDING_KINDS` (``events_left_out`` counts the rest, ``event_counts`` every kind),
    so ``load.findings()`` is the document's; ``requests`` are its first
    :data:`MAX_LOAD_REQUESTS` truncations and request timings of ``requests_total``. Each
    reported incident goes to ``on_incident(event, load)`` as it is recorded, in log order, with
    the load index it names; :meth:`resolve` turns that into the document's ``load`` after
    :meth:`finish` (an incident announced for a load that never started has none).

    The document these make is :func:`inspect_events`' exactly (``tests/unit/test_inspect_log_stream.py``).
    """

    def __init__(
        self, on_load: Callable[[Load, list[LogEvent], int], None], on_incident: Callable[[LogEvent, int | None], None]
    ) -> None:
        super().__init__()
        self.loads = _LastLoad()  # type: ignore[assignment]
        self._on_load = on_load
        self._on_incident = on_incident
        self._last_incident: tuple[LogEvent, int | None] | None = None
        self._kept = _Kept()
        self._next = _Kept()
        """Incidents announced for the load about to start (a KV type fallback before its spawn)."""
        self.incident_count = 0
        """Reported incidents so far (the document's ``events``)."""

    @property
    def load_count(self) -> int:
        """Loads started so far."""
        return len(self.loads)

    def new(self, event: LogEvent) -> _Builder:
        self._complete()
        b = super().new(event)
        self._kept, self._next = self._next, _Kept()
        return b

    def _complete(self) -> None:
        if self.cur is None:
            return
        kept = self._kept
        load = replace(
            self.cur.build(None),
            events=tuple(kept.events),
            event_counts=dict(kept.counts),
            events_left_out=kept.left_out,
        )
        self._on_load(load, kept.requests, kept.requests_total)

    def incident(self, e: LogEvent, load: int | None) -> None:
        last = self._last_incident
        if last is not None and _continues(last[0], last[1], e, load):
            return
        self._last_incident = (e, load)
        self.incident_count += 1
        if load is not None:
            (self._next if load >= len(self.loads) else self._kept).add(e)
        self._on_incident(e, load)

    def finish(self) -> None:
        """The end of the log: the last load is complete."""
        self._complete()
        self.cur = None

    def era(self) -> str | None:
        """The era the server's version gives (a load's era when its own lines give none)."""
        return era_of_version(self.version)

    def resolve(self, load: int | None) -> int | None:
        """The document's ``load`` of an incident handed over with ``load`` (after :meth:`finish`)."""
        return load if load is not None and load < len(self.loads) else None
