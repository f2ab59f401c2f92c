"""``FileTail``: follow a log file by byte offset, across rotation, truncation and deletion.

The reading itself (offsets, rotation, copytruncate, deletion, the start's backlog, shedding under
overload) is ``tail_file_reader.FileReader``'s. All reading is in one daemon poll thread per
``batches()``; the event loop is woken only when there are lines or a new status (an idle tail costs
the UI loop nothing), and the thread stops polling while more than ``max(1000, backlog_lines)``
lines wait for the consumer.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

from kvtop.sources.tail_base import COALESCE_S, LogBatch
from kvtop.sources.tail_file_reader import FilePoll, FileReader

IDLE_POLL_S = 0.1
"""Seconds between polls when nothing has arrived for ``ACTIVE_FOR_S``."""

ACTIVE_POLL_S = 0.02
"""Seconds between polls while data is flowing."""

ACTIVE_FOR_S = 1.0
"""After data arrives, poll at ``ACTIVE_POLL_S`` for this long."""

FAILING_POLL_S = 0.25
"""Seconds between polls while the file is missing or unreadable."""


class _Channel:
    """Hand-over from the poll thread to the event loop, with back-pressure.

    The thread appends; the loop takes. While more than ``max_lines`` lines wait, the thread
    stops polling (the file keeps them; nothing is dropped). The loop is woken only when
    there is something new, so an idle tail costs no event-loop wake-ups at all.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, max_lines: int) -> None:
        self.loop = loop
        self.max_lines = max(1000, max_lines)
        self.cond = threading.Condition()
        self.lines: list[str] = []
        self.dropped = 0
        self.state: tuple[str | None, bool] | None = None
        self.stopped = False
        self.wake = asyncio.Event()
        self._signalled = False

    def put(self, res: FilePoll) -> bool:
        """Thread side: add a poll's result; False once the consumer is gone."""
        with self.cond:
            while len(self.lines) >= self.max_lines and not self.stopped:
                self.cond.wait(0.5)
            if self.stopped:
                return False
            state = (res.status, res.ok)
            if not res.lines and not res.dropped and state == self.state:
                return True
            self.lines.extend(res.lines)
            self.dropped += res.dropped
            self.state = state
            if self._signalled:
                return True
            self._signalled = True
        try:
            self.loop.call_soon_threadsafe(self.wake.set)
        except RuntimeError:  # the loop is closed
            self.stop()
            return False
        return True

    def take(self) -> tuple[list[str], int, tuple[str | None, bool] | None]:
        """Loop side: everything gathered so far."""
        with self.cond:
            lines, self.lines = self.lines, []
            dropped, self.dropped = self.dropped, 0
            self._signalled = False
            self.wake.clear()
            self.cond.notify_all()
            return lines, dropped, self.state

    def stop(self) -> None:
        with self.cond:
            self.stopped = True
            self.cond.notify_all()


class FileTail:
    """Follows one log file from its last lines on, surviving rotation, truncation and deletion.

    A daemon thread per iteration polls the file (``IDLE_POLL_S`` when quiet, ``ACTIVE_POLL_S``
    while data flows) and wakes the event loop only when there are lines or a new status:
    a thread rather than ``asyncio.to_thread`` per poll, because ten loop wake-ups a second
    cost about 0.4 % of a core on their own (measured), and the loop is the UI's.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, backlog_lines: int = 2000, backlog_bytes: int = 4 * 2**20
    ) -> None:
        self.path = Path(os.path.abspath(os.fspath(path)))
        self.description = f"file:{self.path}"
        self._backlog_lines = backlog_lines
        self._reader = FileReader(self.path, backlog_lines, backlog_bytes)
        self._stop = threading.Event()

    def _pump(self, chan: _Channel) -> None:
        """Poll thread: read, hand over, sleep; until the channel or the tail is stopped."""
        active_until = 0.0
        while not self._stop.is_set() and not chan.stopped:
            try:
                res = self._reader.poll()
            except OSError as exc:  # a read error mid-file (EIO): report, then retry
                res = FilePoll([], 0, f"read error on {self.path}: {exc.strerror or exc}", False)
            except Exception as exc:  # noqa: BLE001 - a bug must not kill the log pane: say it, keep polling
                res = FilePoll([], 0, f"log reader error: {type(exc).__name__}: {exc}", False)
            if not chan.put(res):
                return
            now = time.monotonic()
            if res.lines or res.dropped:
                active_until = now + ACTIVE_FOR_S
            if not res.ok and not res.lines:
                delay = FAILING_POLL_S
            elif now < active_until:
                delay = ACTIVE_POLL_S
            else:
                delay = IDLE_POLL_S
            if self._stop.wait(delay):
                return

    async def batches(self) -> AsyncIterator[LogBatch]:
        """Yield new lines (at most one batch per ``COALESCE_S``) and every status change.

        The first batch comes after the first read (the last lines of the file, or the reason
        it cannot be read).
        """
        chan = _Channel(asyncio.get_running_loop(), self._backlog_lines)
        thread = threading.Thread(target=self._pump, args=(chan,), name=f"kvtop-tail:{self.path.name}", daemon=True)
        thread.start()
        last: tuple[str | None, bool] | None = None
        last_yield = float("-inf")
        try:
            while True:
                await chan.wake.wait()
                with chan.cond:
                    state = chan.state
                wait = COALESCE_S - (time.monotonic() - last_yield)
                if wait > 0 and state == last:
                    await asyncio.sleep(wait)  # let a burst gather into one batch
                lines, dropped, state = chan.take()
                if state is None:
                    continue
                if lines or dropped or state != last:
                    yield LogBatch(self.description, tuple(lines), state[0], state[1], time.time(), dropped)
                    last = state
                    last_yield = time.monotonic()
        finally:
            chan.stop()

    async def aclose(self) -> None:
        """Stop the poll thread and close the file descriptors (waits for a read in progress)."""
        self._stop.set()
        await asyncio.to_thread(self._reader.close)
