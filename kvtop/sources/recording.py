"""A recording (``kvtop --record FILE``) as data, and reading one: its header and records
(:class:`RecordingHeader`, :class:`Record`, :class:`Recording`), and the reader that streams a
file line by line within its bounds and stops at the first damaged line, saying where.

The format is described in :mod:`kvtop.sources.replay`; writing it is :mod:`kvtop.sources.recorder`.
I/O only; never imports Textual.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta, timezone, tzinfo
from typing import IO, Any, Literal

from kvtop import __version__
from kvtop.model.codec import decode
from kvtop.model.gpu_snapshots import GpuSnapshot, ProcSnapshot
from kvtop.model.slot_snapshots import SlotsSnapshot
from kvtop.model.snapshots import OllamaSnapshot


FORMAT_VERSION = 1
"""The recording format this kvtop writes and the newest it reads."""

BUNDLED = {"demo": "demo.jsonl.gz", "incident": "incident.jsonl.gz"}
"""``--replay NAME`` for the recordings shipped in ``snapshots/`` (package ``kvtop.snapshots``)."""


RecordKind = Literal["ollama", "gpu", "log", "slots", "apply"]


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
        apply_steps: The recording marks each apply step with an ``apply`` record.
    """

    version: int
    kvtop_version: str
    started_at: float
    host_url: str
    sources: Mapping[str, Any]
    demo: bool
    naive_tz: tzinfo
    alerts: Mapping[str, Any]
    apply_steps: bool = False


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

    def scan(self) -> _MemoryScan:
        """A pass over ``records`` with :class:`RecordScan`'s interface (``damage`` set at the end)."""
        return _MemoryScan(self)


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


MAX_LINE_BYTES = 64 * 2**20
"""The longest record line read (64 MiB): a longer line is damage (a gzip bomb, a file that is
not a recording), never an allocation of its size. A real record is a few kilobytes."""

MAX_HEADER_BYTES = 2**20
"""The longest first line read while looking for the header (1 MiB)."""

_READ_BYTES = 256 * 1024
"""File bytes read at a time."""

_INFLATE_BYTES = 256 * 1024
"""The most decompressed bytes one gzip step yields (a 4 MB bomb unpacks in bounded pieces)."""


_GZIP_PIECE_BYTES = 512
"""Compressed bytes inflated at a time."""


def _mib(n: int) -> str:
    return f"{n / 2**20:g} MiB" if n >= 2**20 else f"{n:,} bytes"


class _Lines:
    """The lines of a recording file (plain, or gzip with one or more members), read in chunks.

    Iterating yields each complete line without its newline and counts it in ``count``. Memory
    stays below ``max_line_bytes`` plus two chunks whatever the file holds. When iteration ends,
    ``stop`` says why it ended early (corrupt gzip data, a line over the limit: ``too_long``),
    ``tail`` whether a last line without its newline was left, and ``open_end`` whether a gzip
    stream lacks its end (trailer). The file is closed when iteration ends or :meth:`close` is
    called.

    Raises:
        OSError: The file cannot be opened (from the constructor) or read (while iterating).
    """

    def __init__(self, path: str, *, max_line_bytes: int) -> None:
        self.max_line_bytes = max_line_bytes
        self.count = 0
        self.stop: str | None = None
        self.too_long = False
        self.tail = False
        self.open_end = False
        self.bytes_read = 0
        """File bytes read so far (compressed bytes for gzip)."""
        self._f: IO[bytes] | None = open(path, "rb")  # noqa: SIM115 - closed by close() / the end of iteration

    def close(self) -> None:
        """Close the file (idempotent)."""
        f, self._f = self._f, None
        if f is not None:
            f.close()

    def _read(self) -> bytes:
        if self._f is None:
            return b""
        data = self._f.read(_READ_BYTES)
        self.bytes_read += len(data)
        return data

    def _chunks(self) -> Iterator[bytes]:
        first = self._read()
        if first[:2] != b"\x1f\x8b":
            data = first
            while data:
                yield data
                data = self._read()
            return
        d = zlib.decompressobj(wbits=31)
        member = True  # inside a gzip member whose end is not seen yet
        for data in self._pieces(first):
            while True:
                if not member:
                    data = data.lstrip(b"\x00")  # padding between members
                    if not data:
                        break
                    d, member = zlib.decompressobj(wbits=31), True
                try:
                    out = d.decompress(data, _INFLATE_BYTES)
                except zlib.error as exc:
                    self.stop = f"the gzip data is corrupt ({exc})"
                    return
                if out:
                    yield out
                if d.eof:  # a member ended: another may follow
                    data, member = d.unused_data, False
                    continue
                data = d.unconsumed_tail
                if not data and len(out) < _INFLATE_BYTES:
                    break  # input used up and no output pending
        self.open_end = member  # no gzip trailer: kvtop was still recording, or stopped without closing

    def _pieces(self, first: bytes) -> Iterator[bytes]:
        """The compressed bytes in small pieces, so that corrupt bytes lose only the text after them."""
        data = first
        while data:
            for i in range(0, len(data), _GZIP_PIECE_BYTES):
                yield data[i : i + _GZIP_PIECE_BYTES]
            data = self._read()

    def __iter__(self) -> Iterator[bytes]:
        buf = bytearray()
        try:
            for chunk in self._chunks():
                search = len(buf)  # the held part has no newline
                buf += chunk
                pos = 0
                while (i := buf.find(b"\n", search)) >= 0:
                    self.count += 1
                    yield bytes(buf[pos:i])
                    pos = search = i + 1
                if pos:
                    del buf[:pos]
                if len(buf) > self.max_line_bytes:
                    self.too_long = True
                    self.stop = f"the line is longer than {_mib(self.max_line_bytes)} (not a kvtop record)"
                    return
            self.tail = bool(buf)
        finally:
            self.close()


class RecordScan:
    """The records of a recording file, from the first, read and decoded one at a time.

    An iterator of :class:`Record`. It ends at the end of the file or at the first damaged line;
    then ``damage`` (``recording ends at line N: <reason>``, or None for a clean end) and
    ``unfinished`` (a gzip file without its end, every record intact) are set. Nothing raises:
    a file that cannot be read any more is damage too. Memory: one line (at most
    ``max_line_bytes``) and one decoded record at a time.
    """

    def __init__(self, path: str, *, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self.damage: str | None = None
        self.unfinished = False
        self.done = False
        self._lines: _Lines | None = None
        try:
            self._lines = _Lines(path, max_line_bytes=MAX_HEADER_BYTES)
            self._it = iter(self._lines)
            next(self._it, None)  # the header, read and checked by open_recording
            self._lines.max_line_bytes = max_line_bytes
        except OSError as exc:
            self._end(f"recording ends at line 2: the file cannot be read ({exc.strerror or exc})")

    @property
    def bytes_read(self) -> int:
        """File bytes read so far: less than the file's size until the scan nears its end."""
        return self._lines.bytes_read if self._lines is not None else 0

    def __iter__(self) -> RecordScan:
        return self

    def __next__(self) -> Record:
        if self.done or self._lines is None:
            raise StopIteration
        lines = self._lines
        try:
            raw = next(self._it, None)
        except OSError as exc:
            self._end(f"recording ends at line {lines.count + 1}: the file cannot be read ({exc.strerror or exc})")
            raise StopIteration from None
        if raw is None:
            where = f"recording ends at line {lines.count + 1}"
            if lines.stop is not None:
                self._end(f"{where}: {lines.stop}")
            elif lines.tail:
                self._end(f"{where}: the line is cut short (kvtop stopped while writing it?)")
            else:
                self._end(None)
                self.unfinished = lines.open_end
            raise StopIteration
        try:
            return _record(raw)
        except Exception as exc:  # noqa: BLE001 - any malformed line ends the recording, never a traceback
            self._end(f"recording ends at line {lines.count}: {_reason(exc)}")
            raise StopIteration from None

    def _end(self, damage: str | None) -> None:
        self.damage, self.done = damage, True
        self.close()

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._lines is not None:
            self._lines.close()


class _MemoryScan:
    """:class:`RecordScan`'s interface over a :class:`Recording` already in memory."""

    def __init__(self, recording: Recording) -> None:
        self._it = iter(recording.records)
        self._recording = recording
        self.damage: str | None = None
        self.unfinished = False

    def __iter__(self) -> _MemoryScan:
        return self

    def __next__(self) -> Record:
        try:
            return next(self._it)
        except StopIteration:
            self.damage, self.unfinished = self._recording.damage, self._recording.unfinished
            raise

    def close(self) -> None:
        pass


@dataclass(frozen=True, slots=True)
class RecordingFile:
    """A recording opened for playback as a stream: its header is read, its records are read as
    they are played (:meth:`scan`), so a long or hostile file costs neither memory nor waiting.

    Attributes:
        path: The file.
        header: Its header.
        max_line_bytes: The longest record line read; a longer one is damage.
    """

    path: str
    header: RecordingHeader
    max_line_bytes: int = MAX_LINE_BYTES

    def scan(self) -> RecordScan:
        """A new pass over the records from the first (the file is opened again)."""
        return RecordScan(self.path, max_line_bytes=self.max_line_bytes)


def open_recording(path: str | os.PathLike[str], *, max_line_bytes: int = MAX_LINE_BYTES) -> RecordingFile:
    """Open a recording for streamed playback: read and check its header only.

    Args:
        path: The file (gzip when it starts with the gzip magic bytes, whatever its name).
        max_line_bytes: The longest record line read; a longer one ends the recording as damage.

    Raises:
        RecordingError: The file cannot be opened, is empty, has no valid header, or is written in
            a newer format than this kvtop reads.
    """
    p = os.fspath(path)
    try:
        lines = _Lines(p, max_line_bytes=MAX_HEADER_BYTES)
        try:
            first = next(iter(lines), None)
        finally:
            lines.close()
    except OSError as exc:
        raise RecordingError(f"{p}: {exc.strerror or exc}") from None
    if first is None:
        if lines.too_long:
            raise RecordingError(f"{p}: not a kvtop recording (its first line is longer than {_mib(MAX_HEADER_BYTES)})")
        if lines.tail:
            raise RecordingError(f"{p}: not a kvtop recording, or its header line is cut short")
        raise RecordingError(f"{p}: {lines.stop}" if lines.stop else f"{p}: empty file, not a kvtop recording")
    return RecordingFile(path=p, header=_header(first, p), max_line_bytes=max_line_bytes)


def read_recording(path: str | os.PathLike[str], *, max_line_bytes: int = MAX_LINE_BYTES) -> Recording:
    """Read a whole recording into memory, stopping at the first damaged line.

    For tools and tests: playback streams instead (:func:`open_recording`). Memory grows with the
    records kept, but a hostile line costs at most ``max_line_bytes``.

    Returns:
        The header, every record before the damage, and ``damage`` saying where and why it
        stopped (None for a clean end).

    Raises:
        RecordingError: As :func:`open_recording`.
    """
    opened = open_recording(path, max_line_bytes=max_line_bytes)
    scan = opened.scan()
    records = tuple(scan)
    return Recording(
        path=opened.path, header=opened.header, records=records, damage=scan.damage, unfinished=scan.unfinished
    )


def _reason(exc: BaseException) -> str:
    """Why a line is damaged, in words: printable and at most 200 characters (it quotes the file)."""
    text = _reason_text(exc)
    if not text.isprintable():
        text = "".join(ch if ch.isprintable() else "\ufffd" for ch in text)
    return text if len(text) <= 200 else text[:199] + "…"


def _reason_text(exc: BaseException) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"not valid JSON ({exc.msg} at column {exc.colno})"
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text"
    if isinstance(exc, KeyError):
        return f"no {exc.args[0]!r} field"
    if isinstance(exc, RecursionError):
        return "a value is nested too deeply"
    if isinstance(exc, (ValueError, TypeError, OverflowError)):
        return str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _header(raw: bytes, path: str) -> RecordingHeader:
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):  # (UnicodeDecodeError is a ValueError)
        raise RecordingError(f"{path}: not a kvtop recording (the first line is not a JSON header)") from None
    if not isinstance(obj, dict) or "kvtop_recording" not in obj:
        raise RecordingError(f"{path}: not a kvtop recording (no kvtop_recording header)")
    version = obj["kvtop_recording"]
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise RecordingError(f"{path}: unknown recording format {version!r}")
    if version > FORMAT_VERSION:
        raise RecordingError(
            f"{path}: recording format {version} (written by kvtop {obj.get('kvtop_version', '?')}) is newer "
            f"than this kvtop {__version__} reads (format {FORMAT_VERSION}): upgrade kvtop to replay it"
        )
    try:
        tz_obj = obj.get("naive_tz") or {}
        offset = tz_obj.get("offset_s", 0)
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise ValueError(f"naive_tz offset_s {_short(offset)} is not a whole number of seconds")
        if not -_DAY_S < offset < _DAY_S:
            raise ValueError(f"naive_tz offset_s {_short(offset)} is not under a day")
        name = tz_obj.get("name") or None
        if name is not None and not isinstance(name, str):
            raise TypeError("naive_tz name must be a string")
        tz = timezone(timedelta(seconds=offset), name[:64]) if name else timezone(timedelta(seconds=offset))
        started_at = obj.get("started_at", 0.0)
        if not isinstance(started_at, (int, float)) or isinstance(started_at, bool) or not 0 <= started_at <= _LAST_S:
            raise ValueError(f"started_at {_short(started_at)} is not a time in years 1970-9999")
        sources = obj.get("sources") or {}
        alerts = obj.get("alerts") or {}
        if not isinstance(sources, dict) or not isinstance(alerts, dict):
            raise TypeError("sources and alerts must be objects")
        host = obj["host"]
        if not isinstance(host, str):
            raise TypeError("host must be a string")
        hosts = sources.get("hosts")
        for url in [host, *(hosts if isinstance(hosts, list) else [])]:
            if not isinstance(url, str) or not _valid_url(url):
                raise ValueError(f"host {_short(url)} is not a server URL")
        return RecordingHeader(
            version=version,
            kvtop_version=str(obj.get("kvtop_version", "?")),
            started_at=float(started_at),
            host_url=host,
            sources=sources,
            demo=bool(obj.get("demo", False)),
            naive_tz=tz,
            alerts=alerts,
            apply_steps=obj.get("apply_steps") is True,
        )
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
        raise RecordingError(f"{path}: the recording header is invalid ({_reason(exc)})") from None


def _valid_url(url: str) -> bool:
    """A printable http(s) URL that httpx can parse (the dashboard builds its hosts from these)."""
    import httpx

    if not url.isprintable() or len(url) > 2048:
        return False
    try:
        return httpx.URL(url).scheme in ("http", "https")
    except (httpx.InvalidURL, ValueError, TypeError):
        return False


_DAY_S = 86_400
_LAST_S = 253_402_300_799
"""9999-12-31 23:59:59 UTC: the last Unix second a datetime can show."""


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _record(raw: bytes) -> Record:
    obj = json.loads(raw.decode("utf-8"))
    if not isinstance(obj, dict):
        raise TypeError("a record is not a JSON object")
    t = obj["t"]
    if not isinstance(t, (int, float)) or isinstance(t, bool) or not 0 <= t <= _LAST_S:
        raise TypeError(f"the record's time {_short(t)} is not a time in years 1970-9999")
    kind = obj["kind"]
    if kind == "ollama":
        return Record(float(t), "ollama", ollama=decode(OllamaSnapshot, obj["snapshot"]))
    if kind == "gpu":
        return Record(float(t), "gpu", gpu=decode(GpuSnapshot, obj["gpu"]), procs=decode(ProcSnapshot, obj["procs"]))
    if kind == "slots":
        return Record(float(t), "slots", slots=decode(SlotsSnapshot, obj["slots"]))
    if kind == "apply":
        return Record(float(t), "apply")
    if kind == "log":
        raw_lines = obj["raw_lines"]
        if not isinstance(raw_lines, list) or not all(isinstance(s, str) for s in raw_lines):
            raise ValueError("raw_lines is not a list of strings")
        return Record(float(t), "log", log=decode(LogRecord, {**obj, "raw_lines": raw_lines}))
    raise ValueError(f"unknown record kind {kind!r}")
