"""One bounded read of the server log's newest lines, for ``kvtop --once`` and ``--check``.

The dashboard follows the log (``kvtop.sources.tail``); a one-shot command only needs what the
log said lately, read once and bounded like the dashboard's start (``backlog_lines`` lines, at most
``backlog_bytes`` bytes):

- ``file:PATH``: the file's tail, read directly (no thread, no follow);
- ``journal[:UNIT]`` / ``journal-user[:UNIT]``: ``journalctl [--user] -u UNIT -n N -o json
  --no-pager -q`` (without ``-f``), each entry's ``MESSAGE``;
- ``docker:CONTAINER``: ``docker logs --tail N CONTAINER``, stdout and stderr merged;
- ``-``: stdin until end of file (``journalctl -u ollama | kvtop --check --log -``); a terminal
  on stdin is an error, not a wait;
- ``auto``: what ``resolve_auto()`` picks, read as above.

Every failure is a :class:`Backlog` with ``ok=False`` and a one-sentence ``status``; nothing but
``CancelledError`` is raised. Child processes have a deadline and are stopped with their group.
Nothing here parses the lines (``kvtop.logparse`` does).
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kvtop.sources.tail import DEFAULT_CONTAINER, DEFAULT_UNIT, NOT_FOUND_FIX, LogSpec, resolve_auto
from kvtop.sources.tail_base import LineSplitter, decode_line, stop_process
from kvtop.sources.tail_file import FileTail
from kvtop.sources.tail_file_reader import read_tail
from kvtop.sources.tail_proc import JOURNAL_PERMISSION, DockerTail, JournalTail, journal_message

__all__ = ["BACKLOG_BYTES", "BACKLOG_LINES", "READ_TIMEOUT_S", "Backlog", "read_backlog", "read_file_tail"]

BACKLOG_LINES = 2000
"""Newest lines read (the dashboard's ``FileTail`` start uses the same bound)."""

BACKLOG_BYTES = 4 * 2**20
"""Bytes read at most (4 MiB; the dashboard's bound too)."""

READ_TIMEOUT_S = 10.0
"""Deadline of one ``journalctl`` / ``docker logs`` run (a large journal takes a second or two)."""

_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class Backlog:
    """The newest lines of the server log, read once.

    Attributes:
        source: Where they come from: ``file:/var/log/ollama.log``, ``journal:ollama (system)``,
            ``docker:ollama``, ``stdin``, or the spec when nothing was read (``auto``).
        lines: The lines, oldest first (no newline, CR stripped, bad UTF-8 replaced).
        ok: False when the source could not be read (missing file, permission, tool failed).
        status: One plain sentence when something is off or nothing was found, else None.
        dropped_lines: Older lines left out by the bound (for a file, counted like the dashboard's start: exact up to ``tail_file_reader.COUNT_EXACT_MAX_BYTES``, then estimated).
        reasons: For ``auto``: one line per candidate saying why it was or was not used.
    """

    source: str
    lines: tuple[str, ...]
    ok: bool
    status: str | None = None
    dropped_lines: int = 0
    reasons: tuple[str, ...] = ()


def _bounded(lines: Iterable[str], max_lines: int, max_bytes: int) -> tuple[tuple[str, ...], int]:
    """The newest lines within both bounds, and how many were left out."""
    kept: collections.deque[str] = collections.deque()
    nbytes = 0
    dropped = 0
    for line in lines:
        kept.append(line)
        nbytes += len(line) + 1
        while kept and (len(kept) > max_lines or nbytes > max_bytes):
            nbytes -= len(kept.popleft()) + 1
            dropped += 1
    return tuple(kept), dropped


def read_file_tail(
    path: str | os.PathLike[str], *, backlog_lines: int = BACKLOG_LINES, backlog_bytes: int = BACKLOG_BYTES
) -> Backlog:
    """The last ``backlog_lines`` lines of a log file, reading at most ``backlog_bytes`` of its end
    (``tail_file_reader.read_tail``: the dashboard's own start). Errors (missing, a directory,
    permission) are a status."""
    source = f"file:{os.path.abspath(os.path.expanduser(os.fspath(path)))}"
    lines, dropped, status, ok = read_tail(path, backlog_lines=backlog_lines, backlog_bytes=backlog_bytes)
    return Backlog(source, tuple(lines), ok, status, dropped)


async def _run_tool(
    argv: list[str], env: Mapping[str, str] | None, timeout_s: float, merge_stderr: bool
) -> tuple[int | None, bytes, str]:
    """Run a log tool once: (exit code or None when it could not run / timed out, stdout, stderr text)."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT if merge_stderr else asyncio.subprocess.PIPE,
            env=dict(os.environ if env is None else env),
            start_new_session=sys.platform != "win32",
        )
    except OSError as exc:
        return None, b"", f"cannot run {argv[0]}: {exc.strerror or exc}"
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    except asyncio.TimeoutError:
        await stop_process(proc)
        return None, b"", f"{argv[0]} gave no answer within {timeout_s:g} s"
    except asyncio.CancelledError:
        await stop_process(proc)
        raise
    return proc.returncode, out, (err or b"").decode("utf-8", errors="replace")


async def _read_journal(
    unit: str, user: bool, lines: int, max_bytes: int, env: Mapping[str, str] | None, timeout_s: float
) -> Backlog:
    source = f"journal:{unit} ({'user' if user else 'system'})"
    argv = [
        "journalctl",
        *(["--user"] if user else []),
        "-u",
        unit,
        "-n",
        str(max(0, lines)),
        "-o",
        "json",
        "--no-pager",
        "-q",
    ]
    rc, out, err = await _run_tool(argv, env, timeout_s, merge_stderr=False)
    low = err.lower()
    if rc is None:
        return Backlog(source, (), False, f"journal: {err}")
    if (
        "permission denied" in low
        or "access denied" in low
        or "no journal files were found" in low
        or ("not seeing messages from other users" in low and not user)
    ):
        return Backlog(source, (), False, JOURNAL_PERMISSION)
    if rc != 0:
        detail = err.strip().splitlines()[-1] if err.strip() else ""
        return Backlog(
            source, (), False, f"journal: journalctl exited with code {rc}" + (f": {detail}" if detail else "")
        )
    found: list[str] = []
    for raw in out.split(b"\n"):
        text = decode_line(raw)
        if not text.strip():
            continue
        try:
            entry = json.loads(text)
        except ValueError:
            if not text.startswith("-- "):
                found.append(text)
            continue
        if isinstance(entry, dict):
            found.extend(journal_message(entry))
    kept, dropped = _bounded(found, max(1, lines), max_bytes)
    return Backlog(source, kept, True, None if kept else f"no journal entries for the {unit} unit", dropped)


async def _read_docker(
    container: str, lines: int, max_bytes: int, env: Mapping[str, str] | None, timeout_s: float
) -> Backlog:
    source = f"docker:{container}"
    rc, out, err = await _run_tool(
        ["docker", "logs", "--tail", str(max(0, lines)), container], env, timeout_s, merge_stderr=True
    )
    if rc is None:
        return Backlog(source, (), False, f"docker: {err}")
    splitter = LineSplitter()
    found = splitter.feed(out) + splitter.flush()
    if rc != 0:
        text = " ".join(found).lower()
        if "permission denied" in text:
            why = "permission denied on the Docker socket — add your user to the docker group (or run with sudo)"
        elif "no such container" in text:
            why = f"no such container: {container}"
        elif "cannot connect" in text or "daemon running" in text:
            why = "cannot connect to the Docker daemon — is it running?"
        else:
            why = f"docker logs exited with code {rc}" + (f": {found[-1].strip()}" if found else "")
        return Backlog(source, (), False, f"docker: {why}")
    kept, dropped = _bounded(found, max(1, lines), max_bytes)
    return Backlog(source, kept, True, None, dropped)


def _read_stdin(fd: int, lines: int, max_bytes: int) -> Backlog:
    if os.isatty(fd):
        return Backlog(
            "stdin",
            (),
            False,
            "nothing is piped into kvtop (stdin is the terminal); "
            "use e.g. `journalctl -u ollama | kvtop --check --log -`, or --log file:PATH",
        )
    splitter = LineSplitter()
    kept: collections.deque[str] = collections.deque()
    nbytes = dropped = 0
    while True:
        try:
            data = os.read(fd, _CHUNK)
        except OSError as exc:
            return Backlog("stdin", tuple(kept), False, f"stdin: read error: {exc.strerror or exc}", dropped)
        got = splitter.feed(data) if data else splitter.flush()
        for line in got:
            kept.append(line)
            nbytes += len(line) + 1
            while kept and (len(kept) > max(1, lines) or nbytes > max_bytes):
                nbytes -= len(kept.popleft()) + 1
                dropped += 1
        if not data:
            return Backlog("stdin", tuple(kept), True, None, dropped)


async def read_backlog(
    spec: LogSpec,
    *,
    backlog_lines: int = BACKLOG_LINES,
    backlog_bytes: int = BACKLOG_BYTES,
    env: Mapping[str, str] | None = None,
    timeout_s: float = READ_TIMEOUT_S,
    stdin_fd: int = 0,
) -> Backlog:
    """Read the newest lines of the log ``spec`` names, once.

    Args:
        spec: From ``parse_log_spec``; ``none`` reads nothing (``ok`` True, no lines).
        backlog_lines: Newest lines kept.
        backlog_bytes: Bytes kept at most (and, for a file, read at most).
        env: Environment for ``journalctl``/``docker`` and for ``auto``'s probes (default ``os.environ``).
        timeout_s: Deadline of each ``journalctl``/``docker logs`` run, in seconds.
        stdin_fd: The descriptor ``-`` reads (0).

    Returns:
        The lines and the source's status; ``auto`` adds one reason per candidate tried.
    """
    if spec.kind == "none":
        return Backlog("none", (), True, "log reading is off (--log none)")
    if spec.kind == "file":
        return await asyncio.to_thread(
            read_file_tail, spec.target, backlog_lines=backlog_lines, backlog_bytes=backlog_bytes
        )
    if spec.kind == "journal":
        return await _read_journal(spec.target or DEFAULT_UNIT, spec.user, backlog_lines, backlog_bytes, env, timeout_s)
    if spec.kind == "docker":
        return await _read_docker(spec.target or DEFAULT_CONTAINER, backlog_lines, backlog_bytes, env, timeout_s)
    if spec.kind == "stdin":
        return await asyncio.to_thread(_read_stdin, stdin_fd, backlog_lines, backlog_bytes)
    src, reasons = await resolve_auto(backlog_lines=backlog_lines, backlog_bytes=backlog_bytes, env=env)
    if src is not None:
        await src.aclose()  # nothing was started: resolve_auto only builds the source
    if isinstance(src, JournalTail):
        found = await _read_journal(src.unit, src.user, backlog_lines, backlog_bytes, env, timeout_s)
    elif isinstance(src, FileTail):
        found = await asyncio.to_thread(
            read_file_tail, src.path, backlog_lines=backlog_lines, backlog_bytes=backlog_bytes
        )
    elif isinstance(src, DockerTail):
        found = await _read_docker(src.container, backlog_lines, backlog_bytes, env, timeout_s)
    else:
        tried = "; ".join(r for r in reasons if "not tried" not in r)
        return Backlog(
            "auto",
            (),
            True,
            "no Ollama server log found" + (f" (tried: {tried})" if tried else "") + f" — {NOT_FOUND_FIX}",
            reasons=tuple(reasons),
        )
    return Backlog(found.source, found.lines, found.ok, found.status, found.dropped_lines, tuple(reasons))
