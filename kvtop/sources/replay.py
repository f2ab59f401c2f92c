"""``kvtop --record FILE`` and ``kvtop --replay FILE``: a session as JSON Lines, and its playback.

A recording is one JSON object per line, UTF-8, gzip-compressed when the name ends in ``.gz``:

- line 1, the header: ``{"kvtop_recording": 1, "kvtop_version": "0.1.0", "started_at": <unix s>,
  "host": <base URL>, "sources": {"ollama": <URL>, "hosts": [<URL>, ...], "log": <--log spec>,
  "gpu": <bool>},
  "demo": <bool>, "naive_tz": {"offset_s": <int>, "name": <str>}, "alerts": {<threshold>: value}}``.
  ``naive_tz`` and ``alerts`` are the zone of log stamps without one and the alert thresholds the
  recording kvtop used: replay uses the same, so it raises the same alerts;
- then one record per message the dashboard applied, in the order it applied them, each with
  ``t``, the wall-clock time (Unix seconds) it was applied:

  - ``{"t", "kind": "ollama", "snapshot": <OllamaSnapshot>}`` (``SnapshotReceived``),
  - ``{"t", "kind": "gpu", "gpu": <GpuSnapshot>, "procs": <ProcSnapshot>}`` (``GpuSampled``),
  - ``{"t", "kind": "slots", "slots": <SlotsSnapshot>}`` (``SlotsSampled``: runners' ``/props``, ``/slots``),
  - ``{"t", "kind": "log", "source", "status", "ok", "lines": <count>, "dropped_lines",
    "raw_lines": [<str>, ...]}`` (``LogEventsReceived``: the raw lines of one batch; replay parses
    them again with the same ``LogParser``, so the events are the live ones).

  Snapshots are encoded by ``kvtop.model.codec``.

The :class:`Recorder` only ever appends, and flushes after every record (gzip with
``Z_SYNC_FLUSH``), so a crash loses at most the record being written. :func:`read_recording`
reads up to the first damaged line (a cut gzip stream, a line cut short, bad JSON, a record that
does not decode) and says where it stopped. I/O only; never imports Textual.
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
import os
import time
import typing
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo
from pathlib import Path
from typing import IO, Any, Literal

from kvtop import __version__
from kvtop.logparse.events import LogEvent
from kvtop.logparse.parser import LogParser
from kvtop.model.codec import CodecError, decode, encode
from kvtop.model.gpu import GpuSnapshot, ProcSnapshot
from kvtop.model.slots import SlotsSnapshot
from kvtop.model.snapshots import OllamaSnapshot

FORMAT_VERSION = 1
"""The recording format this kvtop writes and the newest it reads."""

BUNDLED = {"demo": "demo.jsonl.gz", "incident": "incident.jsonl.gz"}
"""``--replay NAME`` for the recordings shipped in ``snapshots/`` (package ``kvtop.snapshots``)."""

SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
"""Playback speeds, slowest first (``<`` / ``>`` step through them)."""

MAX_GAP_S = 5.0
"""Longest real-time wait between two records at any speed: a recording that spans a suspended
laptop or a stopped kvtop would otherwise stall for hours."""

RecordKind = Literal["ollama", "gpu", "log", "slots"]


class RecordingError(Exception):
    """The file cannot be replayed at all (missing, not a recording, a newer format)."""


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One batch of server-log lines as the dashboard applied it (``LogEventsReceived``)."""

    source: str | None
    status: str | None
    ok: bool
    lines: int
    dropped_lines: int
    raw_lines: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Record:
    """One applied message: its wall-clock time ``t`` (Unix seconds) and its payload."""

    t: float
    kind: RecordKind
    ollama: OllamaSnapshot | None = None
    gpu: GpuSnapshot | None = None
    procs: ProcSnapshot | None = None
    log: LogRecord | None = None
    slots: SlotsSnapshot | None = None


@dataclass(frozen=True, slots=True)
class RecordingHeader:
    """The first line of a recording.

    Attributes:
        version: Recording format version.
        kvtop_version: The kvtop that wrote it.
        started_at: Unix seconds when recording started.
        host_url: The server watched.
        sources: ``ollama`` (URL), ``log`` (the ``--log`` spec) and ``gpu`` (GPU sampled or not).
        demo: Recorded from ``kvtop --demo``'s stand-in server.
        naive_tz: Zone of log timestamps printed without one, as the recording kvtop assumed.
        alerts: The alert thresholds in force (``Thresholds`` field names).
    """

    version: int
    kvtop_version: str
    started_at: float
    host_url: str
    sources: Mapping[str, Any]
    demo: bool
    naive_tz: tzinfo
    alerts: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Recording:
    """A recording read into memory.

    Attributes:
        path: Where it was read from.
        header: Its header.
        records: Every intact record, in order.
        damage: ``recording ends at line N: <reason>`` when the file is cut or corrupt after
            ``records``; None when it ends cleanly.
        unfinished: A gzip file without its end (trailer): kvtop was still recording, was killed,
            or the file was cut at a line boundary. Every record read is intact.
    """

    path: str
    header: RecordingHeader
    records: tuple[Record, ...]
    damage: str | None = None
    unfinished: bool = False


# --------------------------------------------------------------------------------------------
# Writing


def recording_header(*, hosts: Sequence[str], log_spec: str, gpu: bool, demo: bool, naive_tz: tzinfo,
                     thresholds: Any, started_at: float) -> dict[str, Any]:
    """The header object of a new recording.

    Args:
        hosts: The servers watched, the first one shown first (``KvtopApp.hosts``).
        log_spec: The ``--log`` spec read.
        gpu: Whether GPU and process samples are taken.
        demo: Whether the server is ``--demo``'s stand-in.
        naive_tz: Zone assumed for log stamps without one (``AppState.naive_tz``).
        thresholds: The alert thresholds (``model.alerts.Thresholds``).
        started_at: Unix seconds.
    """
    offset = naive_tz.utcoffset(datetime.now(naive_tz)) or timedelta(0)
    return {
        "kvtop_recording": FORMAT_VERSION,
        "kvtop_version": __version__,
        "started_at": started_at,
        "host": hosts[0],
        "sources": {"ollama": hosts[0], "hosts": list(hosts), "log": log_spec, "gpu": gpu},
        "demo": demo,
        "naive_tz": {"offset_s": int(offset.total_seconds()), "name": naive_tz.tzname(None) or ""},
        "alerts": dataclasses.asdict(thresholds),
    }


class Recorder:
    """Appends records to a recording and flushes after each one.

    Create it with :meth:`create` (which writes the header); then call :meth:`ollama`,
    :meth:`gpu` and :meth:`log` for each message the dashboard applies, in that order.
    Every write is one line of a few kilobytes, so the dashboard never waits on it noticeably.

    Raises (every method):
        OSError: The file cannot be created or written (disk full, permission, removed disk).
    """

    def __init__(self, path: Path, stream: IO[bytes], raw: IO[bytes], *,
                 clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self._stream = stream
        self._raw = raw
        self._clock = clock
        self.records = 0
        """Records written so far (the header not counted)."""

    @classmethod
    def create(cls, path: str | os.PathLike[str], header: Mapping[str, Any], *,
               clock: Callable[[], float] = time.time) -> Recorder:
        """Create ``path`` (gzip when it ends in ``.gz``) and write ``header`` as its first line.

        Raises:
            FileExistsError: ``path`` exists: a recording is never overwritten.
            OSError: The file cannot be created or written.
        """
        p = Path(path).expanduser()
        raw = open(p, "xb")  # noqa: SIM115 - kept open for the session; closed in close()
        try:
            stream: IO[bytes] = (typing.cast(IO[bytes], gzip.GzipFile(fileobj=raw, mode="wb", filename=""))
                                 if p.name.endswith(".gz") else raw)
            rec = cls(p, stream, raw, clock=clock)
            rec._write(header)
        except BaseException:
            raw.close()
            raise
        return rec

    def ollama(self, snapshot: OllamaSnapshot) -> None:
        """Record one ``SnapshotReceived``."""
        self._write({"t": self._clock(), "kind": "ollama", "snapshot": encode(snapshot)})
        self.records += 1

    def gpu(self, gpu: GpuSnapshot, procs: ProcSnapshot) -> None:
        """Record one ``GpuSampled``."""
        self._write({"t": self._clock(), "kind": "gpu", "gpu": encode(gpu), "procs": encode(procs)})
        self.records += 1

    def slots(self, snapshot: SlotsSnapshot) -> None:
        """Record one ``SlotsSampled`` (the local runners' ``/props`` + ``/slots``: the runner rung)."""
        self._write({"t": self._clock(), "kind": "slots", "slots": encode(snapshot)})
        self.records += 1

    def log(self, *, source: str | None, status: str | None, ok: bool, lines: int, dropped_lines: int,
            raw_lines: Sequence[str]) -> None:
        """Record one ``LogEventsReceived`` (its raw lines; the events are parsed again on replay)."""
        self._write({"t": self._clock(), "kind": "log", "source": source, "status": status, "ok": ok,
                     "lines": lines, "dropped_lines": dropped_lines, "raw_lines": list(raw_lines)})
        self.records += 1

    def _write(self, obj: Mapping[str, Any]) -> None:
        data = (json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8", "replace")
        self._stream.write(data)
        self._stream.flush()  # GzipFile.flush: Z_SYNC_FLUSH, then the file's own flush
        if self._stream is not self._raw:
            self._raw.flush()

    def close(self) -> None:
        """Finish the file (the gzip trailer); errors are ignored: every record is already flushed."""
        for closable in (self._stream, self._raw):
            try:
                closable.close()
            except OSError:
                pass


# --------------------------------------------------------------------------------------------
# Reading


def resolve_recording(name: str) -> str:
    """The file ``--replay NAME`` means: an existing path, else a bundled recording's name.

    Raises:
        RecordingError: Neither a file nor a bundled name.
    """
    if os.path.exists(os.path.expanduser(name)):
        return os.path.expanduser(name)
    if name in BUNDLED:
        from kvtop.bundled import bundled_dir

        try:
            found = bundled_dir("snapshots") / BUNDLED[name]
        except FileNotFoundError as exc:
            raise RecordingError(str(exc)) from None
        if found.is_file():
            return str(found)
        raise RecordingError(f"the bundled recording {name!r} ({BUNDLED[name]}) is missing from this installation")
    names = ", ".join(BUNDLED)
    raise RecordingError(f"{name}: no such file (bundled recordings: {names})")


def read_recording(path: str | os.PathLike[str]) -> Recording:
    """Read a whole recording, stopping at the first damaged line.

    Returns:
        The header, every record before the damage, and ``damage`` saying where and why it
        stopped (None for a clean end).

    Raises:
        RecordingError: The file cannot be opened, is empty, has no valid header, or is written in
            a newer format than this kvtop reads.
    """
    p = os.fspath(path)
    try:
        with open(p, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise RecordingError(f"{p}: {exc.strerror or exc}") from None
    gz = data[:2] == b"\x1f\x8b"
    text, cut, open_end = _decompress(data) if gz else (data, None, False)
    lines = text.split(b"\n")
    tail = lines.pop()  # after the last newline: empty when the file ends cleanly
    if not lines and not tail:
        raise RecordingError(f"{p}: {cut}" if cut else f"{p}: empty file, not a kvtop recording")
    if not lines:
        raise RecordingError(f"{p}: not a kvtop recording, or its header line is cut short")
    header = _header(lines[0], p)
    records: list[Record] = []
    damage: str | None = None
    for number, raw in enumerate(lines[1:], start=2):
        try:
            records.append(_record(raw))
        except (ValueError, CodecError, KeyError, TypeError) as exc:
            damage = f"recording ends at line {number}: {_reason(exc)}"
            break
    else:
        if cut is not None:
            damage = f"recording ends at line {len(lines) + 1}: {cut}"
        elif tail:
            damage = f"recording ends at line {len(lines) + 1}: the line is cut short (kvtop stopped while writing it?)"
    return Recording(path=p, header=header, records=tuple(records), damage=damage, unfinished=open_end and damage is None)


def _decompress(data: bytes) -> tuple[bytes, str | None, bool]:
    """Everything a gzip stream (possibly several members) yields, why it stopped early, and
    whether its last member has no end (no trailer).

    Fed in small chunks so that corrupt bytes lose only the text after them.
    """
    out = io.BytesIO()
    d = zlib.decompressobj(wbits=31)
    pos, chunk = 0, 512
    while pos < len(data):
        piece = data[pos:pos + chunk]
        pos += len(piece)
        try:
            out.write(d.decompress(piece))
        except zlib.error as exc:
            return out.getvalue(), f"the gzip data is corrupt ({exc})", False
        if d.eof:  # a member ended: another may follow
            rest = d.unused_data.lstrip(b"\x00") + data[pos:]
            if not rest:
                return out.getvalue(), None, False
            data, pos = rest, 0
            d = zlib.decompressobj(wbits=31)
    # no gzip trailer (d.eof False): kvtop was still recording, or stopped without closing the file
    return out.getvalue(), None, not d.eof


def _reason(exc: BaseException) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"not valid JSON ({exc.msg} at column {exc.colno})"
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text"
    if isinstance(exc, KeyError):
        return f"no {exc.args[0]!r} field"
    return str(exc) or type(exc).__name__


def _header(raw: bytes, path: str) -> RecordingHeader:
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise RecordingError(f"{path}: not a kvtop recording (the first line is not a JSON header)") from None
    if not isinstance(obj, dict) or "kvtop_recording" not in obj:
        raise RecordingError(f"{path}: not a kvtop recording (no kvtop_recording header)")
    version = obj["kvtop_recording"]
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise RecordingError(f"{path}: unknown recording format {version!r}")
    if version > FORMAT_VERSION:
        raise RecordingError(
            f"{path}: recording format {version} (written by kvtop {obj.get('kvtop_version', '?')}) is newer "
            f"than this kvtop {__version__} reads (format {FORMAT_VERSION}): upgrade kvtop to replay it")
    try:
        tz_obj = obj.get("naive_tz") or {}
        offset = int(tz_obj.get("offset_s", 0))
        name = str(tz_obj.get("name") or "") or None
        tz = timezone(timedelta(seconds=offset), name) if name else timezone(timedelta(seconds=offset))
        sources = obj.get("sources") or {}
        alerts = obj.get("alerts") or {}
        if not isinstance(sources, dict) or not isinstance(alerts, dict):
            raise TypeError("sources and alerts must be objects")
        host = obj["host"]
        if not isinstance(host, str):
            raise TypeError("host must be a string")
        return RecordingHeader(
            version=version, kvtop_version=str(obj.get("kvtop_version", "?")),
            started_at=float(obj.get("started_at", 0.0)), host_url=host, sources=sources,
            demo=bool(obj.get("demo", False)), naive_tz=tz, alerts=alerts,
        )
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise RecordingError(f"{path}: the recording header is invalid ({_reason(exc)})") from None


def _record(raw: bytes) -> Record:
    obj = json.loads(raw.decode("utf-8"))
    if not isinstance(obj, dict):
        raise TypeError("a record is not a JSON object")
    t = obj["t"]
    if not isinstance(t, (int, float)) or isinstance(t, bool):
        raise TypeError("the record's time is not a number")
    kind = obj["kind"]
    if kind == "ollama":
        return Record(float(t), "ollama", ollama=decode(OllamaSnapshot, obj["snapshot"]))
    if kind == "gpu":
        return Record(float(t), "gpu", gpu=decode(GpuSnapshot, obj["gpu"]), procs=decode(ProcSnapshot, obj["procs"]))
    if kind == "slots":
        return Record(float(t), "slots", slots=decode(SlotsSnapshot, obj["slots"]))
    if kind == "log":
        raw_lines = obj["raw_lines"]
        if not isinstance(raw_lines, list) or not all(isinstance(s, str) for s in raw_lines):
            raise ValueError("raw_lines is not a list of strings")
        return Record(float(t), "log", log=decode(LogRecord, {**obj, "raw_lines": raw_lines}))
    raise ValueError(f"unknown record kind {kind!r}")


# --------------------------------------------------------------------------------------------
# Playback (pure bookkeeping; the app's replay worker does the waiting and posting)


def parse_batch(parser: LogParser, lines: Sequence[str]) -> tuple[list[LogEvent], str | None]:
    """The events of one batch of log lines, exactly as the live log worker parses them.

    Returns:
        The events, and None, or the events parsed before the parser raised and
        ``ExceptionType: message`` (the caller then starts a new parser, as the live worker does).
    """
    events: list[LogEvent] = []
    try:
        for line in lines:
            events.extend(parser.feed(line))
        events.extend(parser.end_batch())  # a held line (it might have continued) is released
    except Exception as exc:  # noqa: BLE001 - a parser bug must not stop the replay
        return events, f"{type(exc).__name__}: {exc}"
    return events, None


class Player:
    """Where playback is in a recording: the next record, speed, pause.

    Attributes:
        position: Index of the next record to apply (``len(records)`` at the end).
        speed: Playback speed, one of :data:`SPEEDS`.
        paused: True while paused.
    """

    def __init__(self, recording: Recording, *, speed: float = 1.0) -> None:
        self.recording = recording
        self.records = recording.records
        self.position = 0
        self.speed = speed if speed in SPEEDS else 1.0
        self.paused = False

    @property
    def at_end(self) -> bool:
        """All records applied."""
        return self.position >= len(self.records)

    @property
    def time_s(self) -> float | None:
        """Recorded wall-clock time of the last applied record (None before the first)."""
        if self.position == 0:
            return None
        return self.records[self.position - 1].t

    def gap_s(self) -> float:
        """Real seconds to wait before the next record: the recorded gap divided by the speed,
        at most :data:`MAX_GAP_S` (0 for the first record and at the end)."""
        if self.position == 0 or self.at_end:
            return 0.0
        gap = self.records[self.position].t - self.records[self.position - 1].t
        return min(MAX_GAP_S, max(0.0, gap / self.speed))

    def take(self) -> Record:
        """The next record; advances. Raises IndexError at the end."""
        record = self.records[self.position]
        self.position += 1
        return record

    def faster(self) -> float:
        """Double the speed (at most 16×); returns the new speed."""
        self.speed = next((s for s in SPEEDS if s > self.speed), SPEEDS[-1])
        return self.speed

    def slower(self) -> float:
        """Halve the speed (at least ¼×); returns the new speed."""
        self.speed = next((s for s in reversed(SPEEDS) if s < self.speed), SPEEDS[0])
        return self.speed

    def index_at(self, t: float) -> int:
        """How many records have ``t`` at or before ``t`` (the position that shows time ``t``)."""
        n = 0
        for record in self.records:
            if record.t > t:
                break
            n += 1
        return n

    def target(self, seconds: float | None) -> int:
        """The position after jumping ``seconds`` of recorded time (negative: back; None: to the start).

        Forward jumps move at least one record; back jumps at least to the record before the
        current one.
        """
        if seconds is None:
            return 0
        now = self.time_s if self.time_s is not None else (self.records[0].t if self.records else 0.0)
        n = self.index_at(now + seconds)
        if seconds > 0:
            return min(len(self.records), max(n, self.position + 1))
        return max(0, min(n, self.position - 1))


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
