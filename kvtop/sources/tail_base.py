"""Shared pieces of the log sources: the ``LogBatch`` they yield and byte-to-line splitting.

Kept apart from ``tail.py`` so the file, process and stdin tails can import it without a
cycle; ``kvtop.sources.tail`` re-exports everything a caller needs.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from dataclasses import dataclass

COALESCE_S = 0.05
"""Minimum seconds between two batches that carry lines: bursts are merged, not streamed."""

MAX_LINE_BYTES = 1 << 20
"""A line with no newline after this many bytes is delivered as it is (cut), so memory stays bounded."""

TERMINATE_WAIT_S = 2.0
"""How long ``aclose()`` waits after SIGTERM before it sends SIGKILL to a child process."""


@dataclass(frozen=True, slots=True)
class LogBatch:
    """New lines of the Ollama server log, and the source's status when they were read.

    One batch per read (not one per line) keeps the UI's message queue short.

    Attributes:
        source: Human description of where the lines come from, e.g. ``"file:/var/log/ollama.log"``.
        lines: New complete lines in order: no trailing newline, CR stripped, bad UTF-8 replaced.
        status: None when all is well, else one plain sentence for the screen.
        ok: False while the source is failing (missing file, permission denied, process gone).
        taken_at: ``time.time()`` of the read.
        dropped_lines: Lines skipped because the backlog bound was hit (at start, or when the
            reader fell far behind); approximate only past ``COUNT_EXACT_MAX_BYTES`` of skipped file.
    """

    source: str
    lines: tuple[str, ...]
    status: str | None
    ok: bool
    taken_at: float
    dropped_lines: int = 0


def decode_line(raw: bytes) -> str:
    """One line's bytes as text: a trailing CR removed, invalid UTF-8 replaced by U+FFFD."""
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    return raw.decode("utf-8", errors="replace")


class LineSplitter:
    """Turns a byte stream into complete lines, holding the unfinished last line back.

    The held part is bounded by ``MAX_LINE_BYTES``; ``flush()`` gives it up as a line when the
    stream ends or the file it came from is rotated away.
    """

    __slots__ = ("_partial", "strip_nul")

    def __init__(self, *, strip_nul: bool = False) -> None:
        self._partial = b""
        self.strip_nul = strip_nul
        """Drop leading NUL bytes of each line (the hole a non-O_APPEND writer leaves after a truncate)."""

    @property
    def pending_bytes(self) -> int:
        """Bytes of the unfinished line held back."""
        return len(self._partial)

    def feed(self, data: bytes) -> list[str]:
        """The lines completed by ``data`` (possibly none)."""
        if not data:
            return []
        buf = self._partial + data if self._partial else data
        parts = buf.split(b"\n")
        self._partial = parts.pop()
        out = [self._decode(p) for p in parts]
        while len(self._partial) > MAX_LINE_BYTES:
            out.append(self._decode(self._partial[:MAX_LINE_BYTES]))
            self._partial = self._partial[MAX_LINE_BYTES:]
        return out

    def flush(self) -> list[str]:
        """The held unfinished line as a line of its own (empty list when nothing is held)."""
        if not self._partial:
            return []
        line = self._decode(self._partial)
        self._partial = b""
        return [line]

    def discard(self) -> int:
        """Forget the held unfinished line; 1 if there was one, else 0."""
        had = 1 if self._partial else 0
        self._partial = b""
        return had

    def _decode(self, raw: bytes) -> str:
        if self.strip_nul and raw.startswith(b"\x00"):
            raw = raw.lstrip(b"\x00")
        return decode_line(raw)


async def stop_process(proc: asyncio.subprocess.Process) -> None:
    """Terminate a child and its process group: SIGTERM, wait ``TERMINATE_WAIT_S``, then SIGKILL.

    Children are started in their own session (``start_new_session=True``) so a wrapper script
    (``docker`` as a shell script around podman, a test's fake) cannot leave a grandchild behind.
    """
    if proc.returncode is not None:
        # The leader is gone; a grandchild it left in the group may still hold our pipe.
        if sys.platform != "win32":
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        return
    _signal_group(proc, signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), TERMINATE_WAIT_S)
        return
    except asyncio.TimeoutError:
        pass
    _signal_group(proc, getattr(signal, "SIGKILL", signal.SIGTERM))
    try:
        await asyncio.wait_for(proc.wait(), TERMINATE_WAIT_S)
    except asyncio.TimeoutError:  # pragma: no cover - a process that survives SIGKILL
        pass


def _signal_group(proc: asyncio.subprocess.Process, sig: int) -> None:
    try:
        if sys.platform != "win32":
            os.killpg(proc.pid, sig)
        else:  # pragma: no cover - POSIX CI
            proc.terminate()
    except (ProcessLookupError, PermissionError):
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            pass
