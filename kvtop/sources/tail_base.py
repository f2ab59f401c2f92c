"""Shared pieces of the log sources: the ``LogBatch`` they yield and byte-to-line splitting.

Kept apart from ``tail.py`` so the file, process and stdin tails can import it without a
cycle; ``kvtop.sources.tail`` opens the right tail for a ``--log`` value.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import os
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

COALESCE_S = 0.25
"""Minimum seconds between two batches that carry lines: bursts are merged, not streamed. Four
batches a second at most: the dashboard applies them about once per interval anyway, and each
batch costs an event-loop wake-up and a message (``benchmarks/log_follow.py``)."""

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
        dropped_lines: Lines not delivered: older history skipped at start (approximate only past
            ``COUNT_EXACT_MAX_BYTES`` of skipped file), and lines shed under overload (the reader
            fell more than the backlog bound behind). Shed lines are only those without any
            ``EVENT_MARKERS`` (see ``keep_line``): a line that may carry an event is delivered.
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

    def take_partial(self) -> bytes:
        """The held unfinished line's raw bytes, forgotten here (the caller carries them on)."""
        raw, self._partial = self._partial, b""
        return raw

    def decode(self, raw: bytes) -> str:
        """One line's bytes as this splitter decodes them (leading NULs stripped when set)."""
        if self.strip_nul and raw.startswith(b"\x00"):
            raw = raw.lstrip(b"\x00")
        return decode_line(raw)

    _decode = decode


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


# -- shedding under overload ------------------------------------------------------------------

_EXTRA_MARKERS = (
    # free-text trouble (llamacpp_trouble.may_be_trouble / TROUBLE_RE) and asserts
    "ut of memory",
    "ailed to",
    "nable to ",
    "OutOf",
    "Malloc failed",
    "nsufficient ",
    "ot enough memory",
    "rror loading model",
    "Unsupported cache type",
    "requires flash_attn",
    "GGML_ASSERT",
    "CUDA error",
    # warnings and errors of every grammar (slog, Go logger, Era A, JSON runner, llama-server prefix)
    "level=WARN",
    "level=ERROR",
    ": WARN ",
    ": ERROR ",
    "WARN [",
    "ERROR [",
    "ERR [",
    '"level":"ERR',
    '"level":"WARN',
    " W ",
    " E ",
    "panic",
    "goroutine ",
    # llama-server / Era A runner lines that are not per-request (runner_lines)
    "input truncated",
    "tokens) ",
    "load_model",
    "initializing slots",
    "new slot",
    "msg=load ",
    'msg="kv cache',
    'msg=\\"kv cache',
    # llama-server's memory beyond its buffers (logparse.memory_events.MARKERS)
    "cache state:",
    "context checkpoint",
    "usage of mmproj",
    # short covers for families of the names below (fewer passes over a shed block)
    "ggml_",
    "common_",
    "llama_memory",
    "llama-server",
    "llama runner",
    "llama server",
    "unload",
    "flash attention",
    "too large",
    "expir",
    "OLLAMA_",
    "VRAM",
)


def _event_markers() -> tuple[str, ...]:
    """Substrings of which every line that can carry a non-per-request event has at least one.

    Built from the parser's own dispatch tables (slog messages, message prefixes, llama.cpp
    function names) plus the free-text, warning and runner words above; a marker that contains
    another one is left out (the shorter one finds its lines already).
    """
    from kvtop.logparse import llamacpp_lines, ollama_lines

    # "load" and "kv cache" alone would keep llama-server's per-request "kv cache rm" lines: anchored on msg=
    found = {key for key in ollama_lines.EXACT if key not in ("load", "kv cache")}
    found.update(prefix.strip() for prefix, _ in ollama_lines.PREFIXED)
    found.update(f"{func}: " if func in ("llama.cpp", "panic") else func for func in llamacpp_lines.HANDLERS)
    found.update(_EXTRA_MARKERS)
    short_first = sorted(found, key=len)
    kept: list[str] = []
    for marker in short_first:
        if not any(k in marker for k in kept):
            kept.append(marker)
    return tuple(kept)


_MARKERS: tuple[tuple[str, ...], tuple[bytes, ...]] | None = None


def _markers() -> tuple[tuple[str, ...], tuple[bytes, ...]]:
    """``EVENT_MARKERS`` and their UTF-8 bytes, built on first use: building them imports the line
    grammars (their regexes compiled: tens of ms), which only reading a log needs (kvtop's start
    must stay fast)."""
    global _MARKERS
    if _MARKERS is None:
        markers = _event_markers()
        _MARKERS = (markers, tuple(m.encode() for m in markers))
    return _MARKERS


def __getattr__(name: str) -> object:
    if name == "EVENT_MARKERS":
        return _markers()[0]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if TYPE_CHECKING:
    EVENT_MARKERS: tuple[str, ...]
"""What the prefilter looks for (see :func:`keep_line`); a line with none of them may be shed.
Built on first use (``_markers``)."""


def keep_line(line: str) -> bool:
    """True when ``line`` may carry an event that matters (OOM, load, failure, allocation, KV,
    flash attention, truncation, eviction, spawn, any WARN/ERROR): such a line is never shed.

    A substring test only (no regex); it errs on the side of keeping. Lines without any marker
    (access lines, request timings, slot progress, debug chatter) may be shed under overload.
    """
    return any(m in line for m in (_MARKERS or _markers())[0])


def shed_block(block: bytes, decode: Callable[[bytes], str] = decode_line) -> tuple[list[str], int]:
    """The lines of ``block`` that :func:`keep_line` keeps, and how many others were shed.

    ``block`` holds complete lines, each ending in ``b"\\n"``. Cost: one ``bytes.find`` pass per
    marker over the whole block (a few GB/s each, no per-line Python work for shed lines).

    Returns:
        (kept lines in order, decoded like every other line; number of lines shed).
    """
    if not block:
        return [], 0
    starts: dict[int, int] = {}
    find = block.find
    rfind = block.rfind
    for marker in _markers()[1]:
        i = find(marker)
        while i >= 0:
            s = rfind(b"\n", 0, i) + 1
            e = find(b"\n", i)
            if e < 0:
                e = len(block)
            starts[s] = e
            i = find(marker, e)
    total = block.count(b"\n") + (0 if block.endswith(b"\n") else 1)
    kept = [decode(block[s : min(starts[s], s + MAX_LINE_BYTES)]) for s in sorted(starts)]
    return kept, total - len(kept)


def shed_lines(lines: Sequence[str]) -> tuple[list[str], int]:
    """:func:`shed_block` for lines already decoded: (the lines kept, in order; lines shed)."""
    if not lines:
        return [], 0
    block = "\n".join(lines)
    offsets = list(itertools.accumulate((len(x) + 1 for x in lines), initial=0))
    hit: set[int] = set()
    find = block.find
    for marker in _markers()[0]:
        i = find(marker)
        while i >= 0:
            k = bisect.bisect_right(offsets, i) - 1
            hit.add(k)
            i = find(marker, offsets[k + 1])
    kept = [lines[k] for k in sorted(hit)]
    return kept, len(lines) - len(kept)
