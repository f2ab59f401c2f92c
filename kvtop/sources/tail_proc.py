"""Stream log sources: ``JournalTail`` (journalctl), ``DockerTail`` (docker logs), ``StdinTail``.

All three drain their stream continuously into a bounded buffer (``backlog_lines`` lines /
``backlog_bytes`` bytes), so a slow screen never blocks the producer: with
``ollama serve 2>&1 | kvtop --log -`` a full pipe would stall the Ollama server itself. Lines
pushed out of the window are shed and counted in ``dropped_lines``, except those that may carry
an event (``tail_base.keep_line``: OOM, load, failure, allocation, KV, flash attention,
truncation, eviction, spawn, WARN/ERROR), which are kept up to ``EVENT_LINES_MIN`` /
``10 * backlog_lines`` and delivered first. ``batches()`` hands out what has gathered, at most once
per ``COALESCE_S``.

Child processes run in their own session and are stopped with SIGTERM, a
``TERMINATE_WAIT_S`` wait and SIGKILL to the whole group (``aclose()`` and generator exit).
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any, BinaryIO

from kvtop.sources.tail_base import COALESCE_S, LineSplitter, LogBatch, shed_lines, stop_process

READ_BYTES = 64 * 1024
"""Bytes per read from a pipe."""

EVENT_LINES_MIN = 20_000
"""Lines that may carry an event kept between two batches at least (``10 * backlog_lines``): a
memory bound that a real log never reaches; past it the oldest are dropped and counted too."""

RETRY_MIN_S = 2.0
"""First wait before a failed ``docker logs``/``journalctl`` is started again."""

RETRY_MAX_S = 15.0
"""Longest wait between restarts (doubling from ``RETRY_MIN_S``)."""

STABLE_RUN_S = 10.0
"""A child that ran this long resets the restart back-off."""

QUICK_EXIT_S = 3.0
"""A journalctl that fails within this many seconds is reported as an access problem."""

JOURNAL_PERMISSION = "journal: permission denied — add your user to the systemd-journal group (or run with sudo)"


class _Buffer:
    """Lines gathered between two batches, bounded, plus the current status (event-loop only)."""

    def __init__(self, backlog_lines: int, backlog_bytes: int) -> None:
        self.max_lines = max(1, backlog_lines)
        self.max_bytes = max(1, backlog_bytes)
        self.lines: collections.deque[str] = collections.deque()
        self.events: list[str] = []
        """Lines pushed out of the window that ``keep_line`` kept (delivered before ``lines``)."""
        self.max_events = max(EVENT_LINES_MIN, 10 * self.max_lines)
        self.nbytes = 0
        self.dropped = 0
        self.status: str | None = None
        self.ok = True
        self.changed = asyncio.Event()
        self.changed.set()  # the first batch names the source at once, even with nothing to say

    def add(self, lines: list[str]) -> None:
        if not lines:
            return
        for line in lines:
            self.lines.append(line)
            self.nbytes += len(line) + 1
        over: list[str] = []
        while self.lines and (len(self.lines) > self.max_lines or self.nbytes > self.max_bytes):
            line = self.lines.popleft()
            self.nbytes -= len(line) + 1
            over.append(line)
        if over:
            # Overload: lines that may carry an event are kept (older than every line still in
            # the bounded window, so they go first); the rest are shed and counted.
            kept, shed = shed_lines(over)
            self.dropped += shed
            self.events.extend(kept)
            if len(self.events) > self.max_events:
                extra = len(self.events) - self.max_events
                del self.events[:extra]
                self.dropped += extra
        self.changed.set()

    def set_status(self, status: str | None, ok: bool) -> None:
        if (status, ok) != (self.status, self.ok):
            self.status, self.ok = status, ok
        self.changed.set()

    def take(self) -> tuple[tuple[str, ...], int]:
        lines = (*self.events, *self.lines) if self.events else tuple(self.lines)
        dropped = self.dropped
        self.events = []
        self.lines.clear()
        self.nbytes = 0
        self.dropped = 0
        return lines, dropped


class _StreamTail:
    """Common ``batches()``/``aclose()`` for sources fed by a background producer task."""

    description: str

    def __init__(self, backlog_lines: int, backlog_bytes: int) -> None:
        self._backlog_lines = backlog_lines
        self._backlog_bytes = backlog_bytes
        self._buf: _Buffer | None = None
        self._task: asyncio.Task[None] | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._closed = False

    async def _produce(self, buf: _Buffer) -> None:
        raise NotImplementedError

    async def batches(self) -> AsyncIterator[LogBatch]:
        """Yield gathered lines (at most one batch per ``COALESCE_S``) and every status change."""
        buf = _Buffer(self._backlog_lines, self._backlog_bytes)
        self._buf = buf
        task = asyncio.create_task(self._guarded(buf))
        self._task = task
        last: tuple[str | None, bool] | None = None
        last_yield = float("-inf")
        try:
            while True:
                await buf.changed.wait()
                wait = COALESCE_S - (time.monotonic() - last_yield)
                state = (buf.status, buf.ok)
                if wait > 0 and state == last:
                    await asyncio.sleep(wait)  # let a burst gather into one batch
                buf.changed.clear()
                lines, dropped = buf.take()
                state = (buf.status, buf.ok)
                if lines or dropped or state != last:
                    yield LogBatch(self.description, lines, buf.status, buf.ok, time.time(), dropped)
                    last = state
                    last_yield = time.monotonic()
        finally:
            await self._stop()

    async def _guarded(self, buf: _Buffer) -> None:
        try:
            await self._produce(buf)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a bug must not end the log pane silently
            buf.set_status(f"{self.description}: reader error: {type(exc).__name__}: {exc}", False)

    async def _stop(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001, S110 - stopping: the reader's end is not news
                pass
        proc, self._proc = self._proc, None
        if proc is not None:
            await stop_process(proc)

    async def aclose(self) -> None:
        """Stop the reader and terminate the child process (TERM, 2 s, KILL)."""
        self._closed = True
        await self._stop()


class _ProcessTail(_StreamTail):
    """A source that runs a command whose stdout (and merged stderr) carries the log."""

    tool = ""
    merge_stderr = False

    def __init__(self, backlog_lines: int, backlog_bytes: int, env: Mapping[str, str] | None) -> None:
        super().__init__(backlog_lines, backlog_bytes)
        self._env = dict(os.environ if env is None else env)

    def _argv(self, restart: bool) -> list[str]:
        raise NotImplementedError

    def _stdout_lines(self, raw: list[str], buf: _Buffer) -> None:
        buf.add(raw)

    def _on_stderr(self, line: str, buf: _Buffer) -> None:
        """React to one stderr line while the process runs."""

    def _on_exit(self, rc: int, ran_s: float, stderr: list[str]) -> tuple[str, bool]:
        """Status after the child exited, and whether to start it again."""
        raise NotImplementedError

    async def _produce(self, buf: _Buffer) -> None:
        exe = shutil.which(self.tool, path=self._env.get("PATH", os.defpath))
        if exe is None:
            buf.set_status(f"{self.tool_label}: {self.tool} not found", False)
            return
        delay = RETRY_MIN_S
        restart = False
        while not self._closed:
            argv = [exe, *self._argv(restart)[1:]]
            started = time.monotonic()
            try:
                proc = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.STDOUT if self.merge_stderr else asyncio.subprocess.PIPE,
                    env=self._env,
                    start_new_session=sys.platform != "win32",
                )
            except FileNotFoundError:
                buf.set_status(f"{self.tool_label}: {self.tool} not found", False)
                return
            except PermissionError:
                buf.set_status(f"{self.tool_label}: cannot run {exe}: permission denied", False)
                return
            except OSError as exc:
                buf.set_status(f"{self.tool_label}: cannot run {exe}: {exc.strerror or exc}", False)
                return
            self._proc = proc
            stderr_lines: list[str] = []
            readers = [asyncio.create_task(self._read_stdout(proc, buf))]
            if not self.merge_stderr:
                readers.append(asyncio.create_task(self._read_stderr(proc, buf, stderr_lines)))
            try:
                await asyncio.gather(*readers)
                rc = await proc.wait()
            finally:
                for t in readers:
                    t.cancel()
                if proc.returncode is None:
                    await stop_process(proc)
                self._proc = None
            ran = time.monotonic() - started
            status, again = self._on_exit(rc, ran, stderr_lines)
            buf.set_status(status, False)
            if not again or self._closed:
                return
            if ran >= STABLE_RUN_S:
                delay = RETRY_MIN_S
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_S)
            restart = True

    @property
    def tool_label(self) -> str:
        return self.tool

    async def _read_stdout(self, proc: asyncio.subprocess.Process, buf: _Buffer) -> None:
        assert proc.stdout is not None
        splitter = LineSplitter()
        while True:
            data = await proc.stdout.read(READ_BYTES)
            if not data:
                self._stdout_lines(splitter.flush(), buf)
                return
            self._stdout_lines(splitter.feed(data), buf)

    async def _read_stderr(self, proc: asyncio.subprocess.Process, buf: _Buffer, keep: list[str]) -> None:
        assert proc.stderr is not None
        splitter = LineSplitter()
        while True:
            data = await proc.stderr.read(READ_BYTES)
            lines = splitter.feed(data) if data else splitter.flush()
            for line in lines:
                if line.strip():
                    keep.append(line.strip())
                    del keep[:-20]
                    self._on_stderr(line, buf)
            if not data:
                return


def journal_message(entry: Mapping[str, Any]) -> list[str]:
    """The log lines in one ``journalctl -o json`` entry's ``MESSAGE``.

    ``MESSAGE`` is a string, or an array of byte values when it is not valid UTF-8 (decoded
    with replacement); a message with newlines gives several lines; a null or missing message
    gives none.
    """
    msg = entry.get("MESSAGE")
    if isinstance(msg, list):
        try:
            text = bytes(int(b) & 0xFF for b in msg).decode("utf-8", errors="replace")
        except (TypeError, ValueError):
            return []
    elif isinstance(msg, str):
        text = msg
    else:
        return []
    text = text.removesuffix("\n")
    return [part.removesuffix("\r") for part in text.split("\n")]


class JournalTail(_ProcessTail):
    """``journalctl -u UNIT [--user] -f -o json -n N --no-pager``: a systemd unit's log.

    Restarts (after journalctl failed) resume with ``--after-cursor`` so nothing repeats.
    Journal lines are the bare ``MESSAGE``: no ``host ollama[PID]:`` prefix.
    """

    tool = "journalctl"

    def __init__(
        self,
        unit: str = "ollama",
        *,
        user: bool = False,
        backlog_lines: int = 2000,
        backlog_bytes: int = 4 * 2**20,
        env: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(backlog_lines, backlog_bytes, env)
        self.unit = unit
        self.user = user
        self.description = f"journal:{unit} ({'user' if user else 'system'})"
        self._cursor: str | None = None
        self._access_problem = False

    @property
    def tool_label(self) -> str:
        return "journal"

    def _argv(self, restart: bool) -> list[str]:
        argv = ["journalctl"]
        if self.user:
            argv.append("--user")
        argv += ["-u", self.unit, "-f", "-o", "json", "--no-pager"]
        if restart and self._cursor:
            argv += ["--after-cursor", self._cursor]
        else:
            argv += ["-n", str(max(0, self._backlog_lines))]
        return argv

    def _stdout_lines(self, raw: list[str], buf: _Buffer) -> None:
        out: list[str] = []
        for line in raw:
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                if not line.startswith("-- "):  # "-- No entries --", "-- Boot …"
                    out.append(line)
                continue
            if not isinstance(entry, dict):
                continue
            cursor = entry.get("__CURSOR")
            if isinstance(cursor, str):
                self._cursor = cursor
            out.extend(journal_message(entry))
        if out and not buf.ok and not self._access_problem:
            buf.set_status(None, True)  # running again after a restart
        buf.add(out)

    def _on_stderr(self, line: str, buf: _Buffer) -> None:
        low = line.lower()
        if "permission denied" in low or "access denied" in low:
            self._access_problem = True
            buf.set_status(JOURNAL_PERMISSION, False)
        elif "no journal files were found" in low:
            self._access_problem = True
            if self.user:
                buf.set_status("journal: no journal files were found for the user journal", False)
            else:
                buf.set_status(JOURNAL_PERMISSION, False)
        elif "not seeing messages from other users and the system" in low and not self.user:
            self._access_problem = True
            buf.set_status(JOURNAL_PERMISSION, False)

    def _on_exit(self, rc: int, ran_s: float, stderr: list[str]) -> tuple[str, bool]:
        if self._access_problem:
            status = self._buf.status if self._buf is not None and self._buf.status else JOURNAL_PERMISSION
            return status, False
        if rc == 0:
            return "log source ended", True
        detail = stderr[-1] if stderr else ""
        if ran_s < QUICK_EXIT_S and (not detail or "permission" in detail.lower()):
            return JOURNAL_PERMISSION, False
        msg = f"journal: journalctl exited with code {rc}"
        return (f"{msg}: {detail}" if detail else msg), ran_s >= QUICK_EXIT_S


_DOCKER_ERRORS = (
    "error response from daemon",
    "cannot connect to the docker daemon",
    "error during connect",
    "permission denied while trying to connect",
    "got permission denied",
    "is the docker daemon running",
    "no such container",
)


class DockerTail(_ProcessTail):
    """``docker logs -f --tail N CONTAINER`` with the container's stdout and stderr merged.

    Ollama logs to stderr and its GIN access lines to stdout; both come through one pipe, in
    the order docker writes them. Docker's own error lines (before any log line) become the
    status, not log lines. When the container stops, the source waits and re-attaches with
    ``--since`` the moment it lost it, so a restart is followed without repeating old lines.
    """

    tool = "docker"
    merge_stderr = True

    def __init__(
        self,
        container: str = "ollama",
        *,
        backlog_lines: int = 2000,
        backlog_bytes: int = 4 * 2**20,
        env: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(backlog_lines, backlog_bytes, env)
        self.container = container
        self.description = f"docker:{container}"
        self._since: float | None = None
        self._seen_log = False
        self._errors: list[str] = []

    def _argv(self, restart: bool) -> list[str]:
        self._seen_log = False
        self._errors = []
        argv = ["docker", "logs", "-f"]
        if restart and self._since is not None:
            argv += ["--since", f"{self._since:.3f}"]
        else:
            argv += ["--tail", str(max(0, self._backlog_lines))]
        return [*argv, self.container]

    def _stdout_lines(self, raw: list[str], buf: _Buffer) -> None:
        out: list[str] = []
        for line in raw:
            if not self._seen_log and any(p in line.lower() for p in _DOCKER_ERRORS):
                self._errors.append(line.strip())
                continue
            self._seen_log = True
            out.append(line)
        if out and not buf.ok:
            buf.set_status(None, True)
        buf.add(out)

    def _on_exit(self, rc: int, ran_s: float, stderr: list[str]) -> tuple[str, bool]:
        self._since = time.time()
        text = " ".join(self._errors).lower()
        c = self.container
        if "permission denied" in text:
            return (
                "docker: permission denied on the Docker socket — add your user to the docker group (or run with sudo)",
                False,
            )
        if "no such container" in text:
            return f"docker: no such container: {c}", True
        if "cannot connect" in text or "daemon running" in text or "error during connect" in text:
            return "docker: cannot connect to the Docker daemon — is it running?", True
        if rc == 0:
            return f"docker: container {c} stopped — waiting for it to start again", True
        detail = self._errors[-1] if self._errors else ""
        msg = f"docker: docker logs exited with code {rc}"
        return (f"{msg}: {detail}" if detail else msg), True


class StdinTail(_StreamTail):
    """Lines piped into kvtop (``ollama serve 2>&1 | kvtop --log -``), read in a daemon thread.

    A daemon thread, not ``asyncio.to_thread``: a read blocked on a quiet pipe must not keep
    the interpreter from exiting. EOF gives the status "log source ended".
    """

    def __init__(
        self, stream: BinaryIO | int | None = None, *, backlog_lines: int = 2000, backlog_bytes: int = 4 * 2**20
    ) -> None:
        super().__init__(backlog_lines, backlog_bytes)
        self.description = "stdin"
        self._stream = stream
        self._thread: threading.Thread | None = None

    def _fileno(self) -> int:
        s = self._stream
        if s is None:
            return sys.stdin.fileno()
        if isinstance(s, int):
            return s
        return s.fileno()

    async def _produce(self, buf: _Buffer) -> None:
        loop = asyncio.get_running_loop()
        done = asyncio.Event()
        splitter = LineSplitter()
        try:
            fd = self._fileno()
        except (OSError, ValueError, AttributeError) as exc:
            buf.set_status(f"stdin: cannot read: {exc}", False)
            return

        def deliver(data: bytes | None, error: str | None) -> None:
            if data:
                buf.add(splitter.feed(data))
            elif error is not None:
                buf.add(splitter.flush())
                buf.set_status(f"stdin: read error: {error}", False)
                done.set()
            else:
                buf.add(splitter.flush())
                buf.set_status("log source ended", False)
                done.set()

        def post(data: bytes | None, error: str | None) -> bool:
            try:
                loop.call_soon_threadsafe(deliver, data, error)
                return True
            except RuntimeError:  # the loop is closed: nobody is listening any more
                return False

        def pump() -> None:
            while not self._closed:
                try:
                    data = os.read(fd, READ_BYTES)
                except InterruptedError:  # pragma: no cover
                    continue
                except OSError as exc:
                    post(None, exc.strerror or str(exc))
                    return
                if not post(data, None) or not data:
                    return

        self._thread = threading.Thread(target=pump, name="kvtop-stdin", daemon=True)
        self._thread.start()
        await done.wait()
