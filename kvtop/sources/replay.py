"""``kvtop --record FILE`` and ``kvtop --replay FILE``: a session as JSON Lines, and its playback.

A recording is one JSON object per line, UTF-8, gzip-compressed when the name ends in ``.gz``:

- line 1, the header: ``{"kvtop_recording": 1, "kvtop_version": "0.1.0", "started_at": <unix s>,
  "host": <base URL>, "sources": {"ollama": <URL>, "hosts": [<URL>, ...], "log": <--log spec>,
  "gpu": <bool>},
  "demo": <bool>, "naive_tz": {"offset_s": <int>, "name": <str>}, "alerts": {<threshold>: value},
  "apply_steps": true}``.
  ``naive_tz`` and ``alerts`` are the zone of log stamps without one and the alert thresholds the
  recording kvtop used: replay uses the same, so it raises the same alerts;
- then one record per message the dashboard applied, in the order it applied them, each with
  ``t``, the wall-clock time (Unix seconds) it was applied:

  - ``{"t", "kind": "ollama", "snapshot": <OllamaSnapshot>}`` (``SnapshotReceived``),
  - ``{"t", "kind": "gpu", "gpu": <GpuSnapshot>, "procs": <ProcSnapshot>}`` (``GpuSampled``),
  - ``{"t", "kind": "slots", "slots": <SlotsSnapshot>}`` (``SlotsSampled``: runners' ``/props``, ``/slots``),
  - ``{"t", "kind": "log", "source", "status", "ok", "lines": <count>, "dropped_lines",
    "raw_lines": [<str>, ...]}`` (``LogEventsReceived``: the raw lines of one batch; replay parses
    them again with the same loop (``kvtop.engine.LogFeed``), so the events are the live ones),
  - ``{"t", "kind": "apply"}``: the dashboard's apply step took every message recorded since
    the previous one (folded into the state, alerts evaluated once). Written when the header says
    ``"apply_steps": true``; replay applies at these records, so its states equal the live ones.
    A recording without them (older kvtop) is applied record by record.

  Snapshots are encoded by ``kvtop.model.codec``.

Every record passes ``kvtop.redact.scrub_json_text`` before it is written: the secrets this
kvtop was given, URL userinfo and ``?token=`` values a server echoed (in a model name, an error)
are masked, as on every other output. The :class:`Recorder` only ever appends, and flushes after every record (gzip with
``Z_SYNC_FLUSH``), so a crash loses at most the record being written. :func:`read_recording`
reads up to the first damaged line (a cut gzip stream, a line cut short, bad JSON, a record that
does not decode) and says where it stopped. I/O only; never imports Textual.

This module is the playback (:class:`Player`); a recording's data and its reading are
:mod:`kvtop.sources.recording`, its writing :mod:`kvtop.sources.recorder`.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, tzinfo

from kvtop.sources.recording import Record, RecordScan, Recording, RecordingFile, _MemoryScan

SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
"""Playback speeds, slowest first (``<`` / ``>`` step through them)."""

MAX_GAP_S = 5.0
"""Longest real-time wait between two records at any speed: a recording that spans a suspended
laptop or a stopped kvtop would otherwise stall for hours."""


# --------------------------------------------------------------------------------------------
# Playback (pure bookkeeping; the app's replay worker does the waiting and posting)


class Player:
    """Where playback is in a recording: the next record, speed, pause.

    Records are read as they are played (a :class:`RecordingFile` is streamed; a
    :class:`Recording` already in memory works the same way): only the last applied record and
    the next one are held. Going back re-reads the recording from its first record, since the
    dashboard's state is a fold over the records anyway.

    Attributes:
        position: Index of the next record to apply (the number applied so far). Setting it
            moves there, reading forward (or again from the start when it goes back).
        speed: Playback speed, one of :data:`SPEEDS`.
        paused: True while paused.
        damage: Once at the end: ``recording ends at line N: <reason>``, or None for a clean end.
        unfinished: Once at the end: a gzip recording without its end (every record intact).
    """

    def __init__(self, recording: Recording | RecordingFile, *, speed: float = 1.0) -> None:
        self.recording = recording
        self.speed = speed if speed in SPEEDS else 1.0
        self.paused = False
        self.damage: str | None = None
        self.unfinished = False
        self._scan: RecordScan | _MemoryScan | None = None
        self._rewind()

    def _rewind(self) -> None:
        if self._scan is not None:
            self._scan.close()
        self._scan = self.recording.scan()
        self._position = 0
        self._last: Record | None = None
        self._next: Record | None = self._read()

    def _read(self) -> Record | None:
        assert self._scan is not None
        record = next(self._scan, None)
        if record is None:
            self.damage, self.unfinished = self._scan.damage, self._scan.unfinished
        return record

    def close(self) -> None:
        """Close the recording file (a later move opens it again)."""
        if self._scan is not None:
            self._scan.close()

    @property
    def position(self) -> int:
        return self._position

    @position.setter
    def position(self, index: int) -> None:
        if index < self._position:
            self._rewind()
        while self._position < index and self._next is not None:
            self.take()

    @property
    def at_end(self) -> bool:
        """All records applied."""
        return self._next is None

    @property
    def time_s(self) -> float | None:
        """Recorded wall-clock time of the last applied record (None before the first)."""
        return self._last.t if self._last is not None else None

    def gap_s(self) -> float:
        """Real seconds to wait before the next record: the recorded gap divided by the speed,
        at most :data:`MAX_GAP_S` (0 for the first record and at the end)."""
        if self._last is None or self._next is None:
            return 0.0
        gap = self._next.t - self._last.t
        return min(MAX_GAP_S, max(0.0, gap / self.speed))

    def take(self) -> Record:
        """The next record; advances (reading the one after it). Raises IndexError at the end."""
        record = self._next
        if record is None:
            raise IndexError("no record after the end of the recording")
        following = self._read()
        self._last = record
        self._position += 1
        self._next = following
        return record

    def faster(self) -> float:
        """Double the speed (at most 16×); returns the new speed."""
        self.speed = next((s for s in SPEEDS if s > self.speed), SPEEDS[-1])
        return self.speed

    def slower(self) -> float:
        """Halve the speed (at least ¼×); returns the new speed."""
        self.speed = next((s for s in reversed(SPEEDS) if s < self.speed), SPEEDS[0])
        return self.speed

    def _now(self) -> float:
        if self._last is not None:
            return self._last.t
        return self._next.t if self._next is not None else 0.0

    def jump(self, seconds: float | None) -> tuple[bool, Iterator[Record]]:
        """Start a jump of ``seconds`` of recorded time (negative: back; None: to the start).

        Returns:
            ``back``, True when playback went back to the first record (the caller resets the
            state to the initial one before applying), and the records to apply in order, read
            as the iterator is consumed. Forward jumps apply at least one record; back jumps
            stop at the latest before the current one.
        """
        if seconds is not None and seconds > 0:
            return False, self._forward(self._now() + seconds)
        limit = 0 if seconds is None else self._position - 1
        until = self._now() + (seconds or 0.0)
        back = self._position > 0
        if back:
            self._rewind()
        return back, self._up_to(limit, until)

    def _forward(self, until: float) -> Iterator[Record]:
        first = True
        while self._next is not None and (first or self._next.t <= until):
            first = False
            yield self.take()

    def _up_to(self, limit: int, until: float) -> Iterator[Record]:
        while self._next is not None and self._position < limit and self._next.t <= until:
            yield self.take()

    def target(self, seconds: float | None) -> int:
        """The position :meth:`jump` would reach (a dry run: it reads the recording again).

        Forward jumps move at least one record; back jumps at least to the record before the
        current one.
        """
        if seconds is None:
            return 0
        until = self._now() + seconds
        scan = self.recording.scan()
        n = 0
        try:
            if seconds > 0:
                for record in scan:
                    if n > self._position and record.t > until:
                        break
                    n += 1
                return max(n, self._position)
            for record in scan:
                if n >= self._position - 1 or record.t > until:
                    break
                n += 1
            return n
        finally:
            scan.close()


def speed_text(speed: float) -> str:
    """``×¼``, ``×½``, ``×1`` … ``×16``."""
    return {0.25: "×¼", 0.5: "×½"}.get(speed, f"×{speed:g}")


def clock_text(t: float | None, tz: tzinfo) -> str:
    """A recorded time as ``2026-11-29 17:02:13`` in the recording's zone (``--`` before the first)."""
    if t is None:
        return "--"
    try:
        return datetime.fromtimestamp(t, tz).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return "?"
