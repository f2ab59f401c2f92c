"""The synchronous reader of one log file by byte offset, across rotation, truncation and deletion.

``FileReader`` is the thread-confined part of ``tail_file.FileTail`` (which polls it from a daemon
thread) and of ``read_tail`` (one read, as ``FileTail`` starts).

How it reads (toolong's poll watcher's way, plus rotation, truncation and deletion, which it lacks):

- ``os.pread`` (``tail_fileio.pread``: seek + read on Windows) in 64 KiB chunks from a byte offset, split on ``b"\\n"``; the unfinished last line
  is held until its newline arrives.
- Every poll compares the path's ``st_ino``/``st_dev`` with the open descriptor's, and the
  descriptor's size with the offset:
  - **rename + recreate** (logrotate ``create``, the Ollama app's ``server.log`` →
    ``server-1.log``): the new file is opened at once (so a second quick rotation cannot skip it),
    the old one is read on until it has been quiet for ``ROTATE_QUIET_S`` (a writer that has not
    reopened yet still appends there), its held partial line is flushed, then reading moves to
    the new file from byte 0. No line is lost or repeated.
  - **copytruncate** (size below the offset, or the bytes just before the offset changed): read
    again from byte 0 of the same file. Lines written after the last read and before the
    truncate are lost; logrotate documents the same window for its copy.
  - **deletion**: said in the status while the path is missing; the old descriptor is still
    drained (a writer may keep writing to the unlinked file); a re-created file is read from its
    start.
- Start: only the last ``backlog_lines`` lines / ``backlog_bytes`` bytes are read (found by
  reading backwards); the skipped lines are counted into ``dropped_lines`` by scanning at most
  ``COUNT_EXACT_MAX_BYTES`` (beyond that it is an estimate from the mean line length).
- Overload: when the reader is more than ``backlog_bytes`` behind the end (a burst faster than
  the consumer parses), the bytes before the newest ``backlog_bytes`` are scanned in slices of
  ``SHED_SCAN_BYTES`` with the substring prefilter ``tail_base.keep_line``: lines that may carry
  an event (OOM, load, failure, allocation, KV, flash attention, truncation, eviction, spawn,
  any WARN/ERROR) are delivered in order, the others are shed and counted in ``dropped_lines``.
"""

from __future__ import annotations

import collections
import os
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from kvtop.sources import tail_fileio
from kvtop.sources.tail_base import LineSplitter, shed_block
from kvtop.sources.tail_fileio import open_log

CHUNK_BYTES = 64 * 1024
"""Bytes per ``pread`` (toolong reads 64 KiB at a time)."""

ROTATE_QUIET_S = 0.3
"""After a rename rotation, the old file must be quiet this long before reading moves on."""

ROTATE_MAX_GRACE_S = 10.0
"""Move to the new file after this long even if something still appends to the old one."""

NOTICE_S = 10.0
"""How long an informational status (rotated, truncated, re-created) stays before it clears."""

COUNT_EXACT_MAX_BYTES = 64 * 2**20
"""Skipped prefixes up to this size are scanned to count ``dropped_lines`` exactly."""

SIGNATURE_BYTES = 32
"""Bytes just before the offset that are re-read to notice a truncate hidden by fast regrowth."""

SHED_SCAN_BYTES = 8 * 2**20
"""Bytes of a far-behind file scanned for event lines per poll (about 0.3 s of one core)."""

MAX_PENDING_FILES = 8
"""Newer files opened while the old one drains; more rotations than this in ``ROTATE_QUIET_S`` are skipped."""


@dataclass(slots=True)
class _Open:
    """One open generation of the file (one inode), read by offset."""

    fd: int
    ino: int
    dev: int
    offset: int = 0
    signature: bytes = b""
    opened_at: float = field(default_factory=time.monotonic)
    last_data: float = field(default_factory=time.monotonic)
    skip_fragment: bool = False
    initial: bool = False  # opened at its tail: the first drain trims to backlog_lines and counts the skip

    @property
    def ident(self) -> tuple[int, int]:
        return (self.ino, self.dev)


@dataclass(slots=True)
class FilePoll:
    """What one poll read, and the status after it."""

    lines: list[str]
    dropped: int
    status: str | None
    ok: bool


class FileReader:
    """The synchronous, thread-confined part of ``FileTail`` (all calls under one lock)."""

    def __init__(self, path: Path, backlog_lines: int, backlog_bytes: int, *, follow: bool = True) -> None:
        self.path = path
        self.follow = follow
        """False for a one-shot read (``read_tail``): a missing file is not waited for."""
        self.backlog_lines = max(0, backlog_lines)
        self.backlog_bytes = max(1, backlog_bytes)
        self._lock = threading.Lock()
        self._cur: _Open | None = None
        self._pending: collections.deque[tuple[_Open, str]] = collections.deque()
        self._splitter = LineSplitter(strip_nul=True)
        self._started = False  # a generation has been opened (the first poll's is read from its tail)
        self._first_poll = True
        self._closed = False
        self._missing = False
        self._fail: str | None = None
        self._notice: str | None = None
        self._notice_until = 0.0

    # -- public (thread) ------------------------------------------------------------------

    def poll(self) -> FilePoll:
        """Read what is new, follow rotations, and report the status."""
        with self._lock:
            if self._closed:
                return FilePoll([], 0, "log source closed", False)
            out: list[str] = []
            dropped = 0
            if self._cur is None:
                self._cur = self._open_path(initial=self._first_poll)
                if self._cur is not None:
                    self._missing = False
                    self._fail = None
                    if self._started:
                        self._set_notice("file re-created — reading it from the start")
                    elif not self._first_poll:
                        self._set_notice("file appeared — reading it from the start")
                    self._started = True
            self._first_poll = False
            if self._cur is not None:
                dropped += self._drain(self._cur, out)
                dropped += self._check_path(out)
            status, ok = self._status()
            return FilePoll(out, dropped, status, ok)

    def flush(self) -> list[str]:
        """A last line still without its newline (a one-shot read keeps it: the server may be writing it)."""
        with self._lock:
            return self._splitter.flush()

    def close(self) -> None:
        """Close every descriptor; later polls return nothing."""
        with self._lock:
            self._closed = True
            if self._cur is not None:
                _close(self._cur.fd)
                self._cur = None
            while self._pending:
                _close(self._pending.popleft()[0].fd)

    # -- opening --------------------------------------------------------------------------

    def _open_path(self, *, initial: bool) -> _Open | None:
        try:
            fd = open_log(self.path)  # POSIX: O_NONBLOCK (a FIFO must not hang); Windows: lets the app rotate it
        except FileNotFoundError:
            self._missing = True
            self._fail = (
                f"{self.path} not found"
                if not self.follow
                else f"{self.path} not found — waiting for it to be created"
                if not self._started
                else f"{self.path} was deleted — waiting for it to be re-created"
            )
            return None
        except PermissionError:
            self._fail = f"cannot read {self.path}: permission denied"
            return None
        except OSError as exc:
            self._fail = f"cannot open {self.path}: {exc.strerror or exc}"
            return None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            _close(fd)
            self._fail = (
                f"{self.path} is a directory, not a log file"
                if stat.S_ISDIR(st.st_mode)
                else f"{self.path} is not a regular file (for a pipe, use --log -)"
            )
            return None
        op = _Open(fd=fd, ino=st.st_ino, dev=st.st_dev)
        if initial:
            self._seek_tail(op, st.st_size)
        return op

    def _seek_tail(self, op: _Open, size: int) -> None:
        """Place ``op`` so that only the last ``backlog_lines`` lines / ``backlog_bytes`` are read."""
        floor = max(0, size - self.backlog_bytes)
        pos = size
        need = self.backlog_lines + 1  # the newline before the first line we keep
        start = floor
        found = False
        while pos > floor and need > 0:
            lo = max(floor, pos - CHUNK_BYTES)
            chunk = tail_fileio.pread(op.fd, pos - lo, lo)
            if not chunk:
                break
            n = chunk.count(b"\n")
            if n < need:
                need -= n
                pos = lo
                continue
            end = len(chunk)
            for _ in range(need):
                end = chunk.rfind(b"\n", 0, end)
            start = lo + end + 1
            found = True
            break
        if not found:
            start = floor
        op.offset = start
        op.initial = True
        if start > 0:
            op.skip_fragment = tail_fileio.pread(op.fd, 1, start - 1) != b"\n"

    # -- reading --------------------------------------------------------------------------

    def _drain(self, op: _Open, out: list[str]) -> int:
        """Read ``op`` from its offset to its end (at most ``backlog_bytes``); returns lines dropped."""
        dropped = 0
        size = os.fstat(op.fd).st_size
        if size < op.offset or (size > op.offset and self._signature_changed(op)):
            out.extend(self._splitter.flush())
            op.offset = 0
            op.signature = b""
            op.skip_fragment = False
            self._set_notice("file truncated (copytruncate) — reading it from the start")
        if size - op.offset > self.backlog_bytes and not op.initial:
            # Fell far behind (a burst faster than the consumer): shed what lies before the newest
            # backlog_bytes, keeping every line that may carry an event; at most SHED_SCAN_BYTES
            # per poll, so a huge backlog is worked off in slices (the file holds the rest).
            dropped += self._shed(op, size - self.backlog_bytes, out)
            if size - op.offset > self.backlog_bytes:
                op.last_data = time.monotonic()
                return dropped
        start_offset = op.offset
        got = 0
        lines_before = len(out)
        while op.offset < size:
            chunk = tail_fileio.pread(op.fd, min(CHUNK_BYTES, size - op.offset), op.offset)
            if not chunk:
                break
            op.offset += len(chunk)
            got += len(chunk)
            op.signature = (op.signature + chunk)[-SIGNATURE_BYTES:]
            if op.skip_fragment:
                nl = chunk.find(b"\n")
                if nl < 0:
                    continue
                chunk = chunk[nl + 1 :]
                op.skip_fragment = False
                dropped += 1
            out.extend(self._splitter.feed(chunk))
        if got:
            op.last_data = time.monotonic()
        if op.initial:
            op.initial = False
            if self.backlog_lines and len(out) - lines_before > self.backlog_lines:
                extra = len(out) - lines_before - self.backlog_lines
                del out[lines_before : lines_before + extra]
                dropped += extra
            if start_offset > 0:
                kept = len(out) - lines_before
                dropped += self._count_lines(op.fd, 0, start_offset, (kept, got))
            if self.backlog_lines == 0:
                dropped += len(out) - lines_before
                del out[lines_before:]
        return dropped

    def _shed(self, op: _Open, target: int, out: list[str]) -> int:
        """Read ``op`` from its offset towards ``target`` (at most ``SHED_SCAN_BYTES``; the last slice
        runs on to the end of the line holding ``target``), appending to ``out`` only the lines
        ``keep_line`` keeps; returns the lines shed.

        The offset ends on a line boundary (just after a newline), so the next read starts a line;
        the splitter's held partial line is joined to the first line of the slice.
        """
        end = min(target, op.offset + SHED_SCAN_BYTES)
        data = tail_fileio.pread(op.fd, end - op.offset, op.offset)
        if not data:
            return 0
        if end == target and not data.endswith(b"\n"):  # the last slice ends with the line holding target
            more = tail_fileio.pread(op.fd, CHUNK_BYTES, end)
            nl = more.find(b"\n")
            if nl >= 0:
                data += more[: nl + 1]
        dropped = 0
        if op.skip_fragment:
            nl = data.find(b"\n")
            if nl < 0:  # still inside the cut first line
                op.offset += len(data)
                return 0
            data = data[nl + 1 :]
            op.offset += nl + 1
            op.skip_fragment = False
            dropped += 1
        last_nl = data.rfind(b"\n")
        if last_nl < 0:  # one line longer than the slice: cut like any over-long line
            out.extend(self._splitter.feed(data))
            op.offset += len(data)
        else:
            block = self._splitter.take_partial() + data[: last_nl + 1]
            kept, shed = shed_block(block, self._splitter.decode)
            out.extend(kept)
            dropped += shed
            op.offset += last_nl + 1
        n = min(SIGNATURE_BYTES, op.offset)
        op.signature = tail_fileio.pread(op.fd, n, op.offset - n)
        return dropped

    def _signature_changed(self, op: _Open) -> bool:
        """True when the bytes just before the offset are no longer what was read there."""
        sig = op.signature
        if not sig or op.offset < len(sig):
            return False
        try:
            return tail_fileio.pread(op.fd, len(sig), op.offset - len(sig)) != sig
        except OSError:  # pragma: no cover
            return False

    def _count_lines(self, fd: int, lo: int, hi: int, window: tuple[int, int] | None) -> int:
        """Newlines in ``[lo, hi)``: exact up to ``COUNT_EXACT_MAX_BYTES``, else estimated.

        The estimate uses the mean line length of ``window`` (lines kept, bytes read) when
        given, else 100 bytes per line.
        """
        span = hi - lo
        if span <= 0:
            return 0
        if span > COUNT_EXACT_MAX_BYTES:
            kept, nbytes = window if window is not None else (0, 0)
            mean = nbytes / kept if kept and nbytes else 100.0
            return max(1, round(span / max(mean, 1.0)))
        count = 0
        pos = lo
        while pos < hi:
            chunk = tail_fileio.pread(fd, min(1 << 20, hi - pos), pos)
            if not chunk:
                break
            count += chunk.count(b"\n")
            pos += len(chunk)
        return count

    # -- rotation -------------------------------------------------------------------------

    def _check_path(self, out: list[str]) -> int:
        """Compare the path with the open file; queue a new generation; returns lines dropped."""
        cur = self._cur
        assert cur is not None
        try:
            st: os.stat_result | None = os.stat(self.path)
        except FileNotFoundError:
            st = None
        except OSError as exc:
            st = None
            self._fail = f"cannot stat {self.path}: {exc.strerror or exc}"
        if st is None:
            if not self._pending and not self._missing:
                self._missing = True
                self._notice = None
                if self._fail is None:
                    self._fail = (
                        f"{self.path} was deleted — waiting for it to be re-created"
                        if _nlink(cur.fd) == 0
                        else f"{self.path} was moved away — waiting for a new file"
                    )
        else:
            ident = (st.st_ino, st.st_dev)
            newest = self._pending[-1][0].ident if self._pending else cur.ident
            if ident == newest:
                if self._missing or self._fail is not None:  # moved back, or a stat error passed
                    self._missing = False
                    self._fail = None
            elif len(self._pending) < MAX_PENDING_FILES:
                deleted = _nlink(cur.fd) == 0 if not self._pending else False
                nxt = self._open_path(initial=False)
                if nxt is not None and nxt.ident != newest:
                    how = (
                        "file re-created — reading it from the start"
                        if deleted
                        else "file rotated (rename) — following the new file"
                    )
                    self._pending.append((nxt, how))
                    self._missing = False
                    self._fail = None
                    self._set_notice(how)
                elif nxt is not None:
                    _close(nxt.fd)
        return self._maybe_switch(out)

    def _maybe_switch(self, out: list[str]) -> int:
        dropped = 0
        while self._pending and self._cur is not None:
            cur = self._cur
            nxt, how = self._pending[0]
            now = time.monotonic()
            quiet = now - max(cur.last_data, nxt.opened_at)
            if quiet < ROTATE_QUIET_S and now - nxt.opened_at < ROTATE_MAX_GRACE_S:
                break
            # One last read of the old generation, then its partial line is final.
            dropped += self._drain(cur, out)
            out.extend(self._splitter.flush())
            _close(cur.fd)
            self._pending.popleft()
            self._cur = nxt
            self._set_notice(how)
            dropped += self._drain(nxt, out)
        return dropped

    # -- status ---------------------------------------------------------------------------

    def _set_notice(self, text: str) -> None:
        self._notice = text
        self._notice_until = time.monotonic() + NOTICE_S

    def _status(self) -> tuple[str | None, bool]:
        if self._fail is not None:
            return self._fail, False
        if self._notice is not None and time.monotonic() < self._notice_until:
            return self._notice, True
        self._notice = None
        return None, True


def _nlink(fd: int) -> int:
    """Links to the open file (0 once it has been deleted); 1 when unknown."""
    try:
        return os.fstat(fd).st_nlink
    except OSError:  # pragma: no cover
        return 1


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:  # pragma: no cover
        pass


def read_tail(
    path: str | os.PathLike[str], *, backlog_lines: int = 2000, backlog_bytes: int = 4 * 2**20
) -> tuple[list[str], int, str | None, bool]:
    """Read a log file's newest lines once, exactly as ``FileTail`` starts (same bounds, same
    handling of a cut first line, same errors), keeping a last line without its newline.

    Returns:
        The lines (oldest first), the older lines left out, the status (None when fine) and ok.
    """
    reader = FileReader(
        Path(os.path.abspath(os.path.expanduser(os.fspath(path)))), backlog_lines, backlog_bytes, follow=False
    )
    try:
        first = reader.poll()
        lines = first.lines + reader.flush()
        extra = max(0, len(lines) - max(0, backlog_lines))  # the kept last line counts in the bound
        return lines[extra:], first.dropped + extra, first.status, first.ok
    finally:
        reader.close()
