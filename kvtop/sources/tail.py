"""Lines of the Ollama server log, from wherever it lives, in batches that never block the loop.

Pure I/O: lines are delivered as text (no trailing newline, CR stripped, invalid UTF-8
replaced); understanding them is ``kvtop.logparse``'s job. Where the log lives is described
in docs/ollama-internals.md §6; what is in it in §4.0.

Public API:

- ``LogBatch`` (``tail_base``): what every source yields (lines, status, ok, time, dropped lines).
- ``LogSpec`` / ``parse_log_spec(text)``: the ``--log`` value.
- ``LogSource``: ``description``, ``batches()`` (an async iterator that runs until cancelled)
  and ``aclose()``.
- ``open_log_source(spec)``: a source for a spec (``auto`` resolves lazily, inside ``batches()``).
- ``resolve_auto()``: the source ``auto`` picks on this machine, with one reason per candidate.

Every source yields a first batch at once (possibly with no lines) that names it, then a batch
whenever lines arrive (at most one per ``COALESCE_S``) or the status changes. Failures become
batches with ``ok=False`` and a one-sentence ``status``; nothing but ``CancelledError`` leaves
``batches()``.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sys
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PureWindowsPath
from typing import Literal, Protocol

from kvtop.sources.tail_base import LogBatch, stop_process
from kvtop.sources.tail_file import FileTail
from kvtop.sources.tail_proc import DockerTail, JournalTail, StdinTail

__all__ = [
    "AutoTail",
    "LogSource",
    "LogSpec",
    "NOT_FOUND_FIX",
    "NullTail",
    "auto_file_candidates",
    "open_log_source",
    "parse_log_spec",
    "resolve_auto",
]

LogKind = Literal["auto", "journal", "file", "docker", "stdin", "none"]

NOT_FOUND_FIX = "choose one with --log (journal, file:PATH, docker:NAME or -)"
"""What to do when ``auto`` finds no log, said in its status (a log never found is no alert)."""

DEFAULT_UNIT = "ollama"
"""The systemd unit Ollama's Linux installer creates (``/etc/systemd/system/ollama.service``)."""

DEFAULT_CONTAINER = "ollama"
"""The container name in Ollama's Docker instructions (``docker run … --name ollama ollama/ollama``)."""

PROBE_TIMEOUT_S = 3.0
"""Longest wait for one ``systemctl``/``journalctl``/``docker`` probe while resolving ``auto``."""

AUTO_RETRY_S = 30.0
"""While ``auto`` finds nothing, look again after this long (the server may be started later)…"""

AUTO_RETRY_MAX_S = 300.0
"""…doubling up to this: a probe round spawns systemctl/journalctl/docker, which is most of an
idle kvtop's CPU on a machine without any Ollama log (``benchmarks/cpu_idle.py``)."""

_UNIT_RE = re.compile(r"^[A-Za-z0-9@:._\\*?\[\]][A-Za-z0-9@:._\\*?\[\]-]*$")
_CONTAINER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True, slots=True)
class LogSpec:
    """A parsed ``--log`` value.

    Attributes:
        kind: Which source: auto, journal, file, docker, stdin or none.
        target: The unit (journal), path (file, ``~`` expanded) or container (docker); else "".
        user: For journal: a user unit (``journalctl --user``).
    """

    kind: LogKind
    target: str = ""
    user: bool = False

    def __str__(self) -> str:
        if self.kind == "journal":
            return f"{'journal-user' if self.user else 'journal'}:{self.target}"
        if self.kind in ("file", "docker"):
            return f"{self.kind}:{self.target}"
        return "-" if self.kind == "stdin" else self.kind


_SPEC_HELP = "expected auto, journal, journal:UNIT, journal-user:UNIT, file:PATH, docker:CONTAINER, - (stdin) or none"


def parse_log_spec(spec: str) -> LogSpec:
    """Parse a ``--log`` value; ValueError with a message that says what is accepted.

    ``journal`` and ``journal-user`` alone mean the unit ``ollama``. The keyword is
    case-insensitive; the part after the first ``:`` is kept as typed.
    """
    text = spec.strip()
    if not text:
        raise ValueError(f"empty log source: {_SPEC_HELP}")
    low = text.lower()
    if low in ("auto", "none"):
        return LogSpec("auto" if low == "auto" else "none")
    if text == "-":
        return LogSpec("stdin")
    if low in ("journal", "journal-user"):
        return LogSpec("journal", DEFAULT_UNIT, user=low == "journal-user")
    head, sep, rest = text.partition(":")
    head = head.lower()
    if sep and head in ("journal", "journal-user"):
        unit = rest.strip()
        if not unit:
            raise ValueError(f"{head}: needs a unit name, e.g. {head}:ollama")
        if not _UNIT_RE.match(unit):
            raise ValueError(f"{head}: {unit!r} is not a systemd unit name")
        return LogSpec("journal", unit, user=head == "journal-user")
    if sep and head == "file":
        if not rest.strip():
            raise ValueError("file: needs a path, e.g. file:/var/log/ollama.log")
        return LogSpec("file", os.path.expanduser(rest))
    if sep and head == "docker":
        name = rest.strip()
        if not name:
            raise ValueError("docker: needs a container name, e.g. docker:ollama")
        if not _CONTAINER_RE.match(name):
            raise ValueError(f"docker: {name!r} is not a container name or ID")
        return LogSpec("docker", name)
    hint = ""
    if text.startswith(("/", "~", ".")) or os.sep in text:
        hint = f" (for a file, write file:{text})"
    raise ValueError(f"unknown log source {text!r}{hint}: {_SPEC_HELP}")


class LogSource(Protocol):
    """Anything that yields ``LogBatch``es until cancelled and can be closed."""

    description: str

    def batches(self) -> AsyncIterator[LogBatch]:
        """Run until cancelled, yielding new lines and status changes (an async generator)."""
        ...

    async def aclose(self) -> None:
        """Release files and terminate child processes; safe to call twice."""
        ...


class NullTail:
    """``--log none``: one batch saying the log is off, then nothing until cancelled."""

    def __init__(self) -> None:
        self.description = "none"
        self._stop = asyncio.Event()

    async def batches(self) -> AsyncIterator[LogBatch]:
        """Yield one status batch, then wait until cancelled or closed."""
        yield LogBatch(self.description, (), "log reading is off (--log none)", True, time.time())
        await self._stop.wait()

    async def aclose(self) -> None:
        """End ``batches()``."""
        self._stop.set()


def open_log_source(
    spec: LogSpec, *, backlog_lines: int = 2000, backlog_bytes: int = 4 * 2**20, env: Mapping[str, str] | None = None
) -> LogSource:
    """A source for ``spec``; nothing is opened or started until ``batches()`` is iterated.

    Args:
        spec: From ``parse_log_spec``.
        backlog_lines: Lines of history to deliver at start (and the bound on lines gathered
            between two batches for stream sources).
        backlog_bytes: Bytes of history read at start, at most.
        env: Environment for child processes and for finding ``journalctl``/``docker`` on
            ``PATH`` and home directories (default ``os.environ``).
    """
    if spec.kind == "file":
        return FileTail(spec.target, backlog_lines=backlog_lines, backlog_bytes=backlog_bytes)
    if spec.kind == "journal":
        return JournalTail(
            spec.target or DEFAULT_UNIT,
            user=spec.user,
            backlog_lines=backlog_lines,
            backlog_bytes=backlog_bytes,
            env=env,
        )
    if spec.kind == "docker":
        return DockerTail(
            spec.target or DEFAULT_CONTAINER, backlog_lines=backlog_lines, backlog_bytes=backlog_bytes, env=env
        )
    if spec.kind == "stdin":
        return StdinTail(backlog_lines=backlog_lines, backlog_bytes=backlog_bytes)
    if spec.kind == "auto":
        return AutoTail(backlog_lines=backlog_lines, backlog_bytes=backlog_bytes, env=env)
    return NullTail()


# -- auto ------------------------------------------------------------------------------------


def auto_file_candidates(env: Mapping[str, str] | None = None, platform: str | None = None) -> list[tuple[Path, str]]:
    """Well-known server log files for ``platform`` (default ``sys.platform``), with why each.

    Only places something Ollama-related writes by default or by a widely copied recipe; no
    guessing. There is no Ollama setting for a log file (``OLLAMA_LOG`` does not exist), so no
    environment variable is consulted other than ``HOME``/``LOCALAPPDATA``.
    """
    e = os.environ if env is None else env
    plat = sys.platform if platform is None else platform
    home = Path(e.get("HOME") or e.get("USERPROFILE") or os.path.expanduser("~"))
    out: list[tuple[Path, str]] = []
    if plat.startswith("win"):
        # app/server/server_windows.go: serverLogPath = %LOCALAPPDATA%\Ollama\server.log, rotated to
        # server-1.log … server-5.log at each start (app/logrotate); app.log beside it is the tray
        # app's own log, not the server's (docs/ollama-internals.md §6)
        local = e.get("LOCALAPPDATA") or (
            str(PureWindowsPath(e["USERPROFILE"]) / "AppData" / "Local") if e.get("USERPROFILE") else ""
        )
        if local:
            out.append(
                (
                    Path(str(PureWindowsPath(local) / "Ollama" / "server.log")),  # str: backslashes kept on any host
                    "the Windows app's server log (rotated to server-1.log … on each start)",
                )
            )
        return out
    out.append(
        (
            home / ".ollama" / "logs" / "server.log",
            "the macOS app's server log (rotated to server-1.log … on each start)",
        )
    )
    if plat == "darwin":
        out.append((Path("/opt/homebrew/var/log/ollama.log"), "`brew services start ollama` on Apple silicon"))
        out.append((Path("/usr/local/var/log/ollama.log"), "`brew services start ollama` on Intel Macs"))
        return out
    out.append((Path("/var/log/ollama.log"), "the usual `ollama serve > /var/log/ollama.log 2>&1 &` redirect"))
    out.append((Path("/var/log/ollama/ollama.log"), "a per-service log directory used by init scripts"))
    out.append((Path("/home/linuxbrew/.linuxbrew/var/log/ollama.log"), "`brew services start ollama` on Linux"))
    return out


async def _probe(argv: Sequence[str], env: Mapping[str, str], timeout: float) -> tuple[int | None, str]:
    """Run a short command; (exit code or None when it could not run / timed out, stdout)."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env=dict(env),
            start_new_session=sys.platform != "win32",
        )
    except OSError:
        return None, ""
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except asyncio.TimeoutError:
        await stop_process(proc)
        return None, ""
    except asyncio.CancelledError:
        await stop_process(proc)
        raise
    return proc.returncode, out.decode("utf-8", errors="replace")


async def _journal_candidate(
    user: bool, journalctl: str, systemctl: str | None, env: Mapping[str, str], timeout: float
) -> tuple[bool, str]:
    label = f"journal:{DEFAULT_UNIT} ({'user' if user else 'system'})"
    scope = ["--user"] if user else []
    active_probe = _probe([systemctl, *scope, "is-active", DEFAULT_UNIT], env, timeout) if systemctl else _none_probe()
    entries_probe = _probe(
        [journalctl, *scope, "-u", DEFAULT_UNIT, "-n", "1", "-o", "json", "--no-pager", "-q"], env, timeout
    )
    (_, active_out), (rc, entries_out) = await asyncio.gather(active_probe, entries_probe)
    if active_out.strip() == "active":
        return True, f"{label}: used — the {DEFAULT_UNIT} unit is active"
    if rc == 0 and entries_out.strip():
        return True, f"{label}: used — the journal has entries for the {DEFAULT_UNIT} unit"
    return False, f"{label}: not used — the unit is not active and no journal entries for it are visible"


async def _none_probe() -> tuple[int | None, str]:
    return None, ""


async def resolve_auto(
    *,
    backlog_lines: int = 2000,
    backlog_bytes: int = 4 * 2**20,
    env: Mapping[str, str] | None = None,
    platform: str | None = None,
    files: Sequence[tuple[Path, str]] | None = None,
    probe_timeout_s: float = PROBE_TIMEOUT_S,
) -> tuple[LogSource | None, list[str]]:
    """Pick this machine's Ollama log; (the source or None, one line per candidate saying why).

    Tried in order, first match wins:

    1. ``journal:ollama (system)`` (Linux): the official installer's systemd unit. Used when
       ``journalctl`` exists and ``systemctl is-active ollama`` says active or the journal
       shows entries for it (an active unit whose entries you may not read is still chosen, so
       the permission problem is reported instead of silently falling through).
    2. ``journal:ollama (user)``: the same as a user unit (``systemctl --user``).
    3. Files from ``auto_file_candidates()`` (``files`` replaces them): the first that exists
       as a regular file.
    4. ``docker:ollama``: a container of that name (the name in Ollama's Docker docs), running
       or stopped, when ``docker`` exists and ``docker inspect`` knows it.

    The probes are short child processes (at most ``probe_timeout_s`` each), run concurrently
    where independent; nothing is read from the chosen source yet.
    """
    e: Mapping[str, str] = os.environ if env is None else env
    plat = sys.platform if platform is None else platform
    path_var = e.get("PATH", os.defpath)
    reasons: list[str] = []
    file_list = list(auto_file_candidates(e, plat) if files is None else files)
    later = [f"file:{p}" for p, _ in file_list] + [f"docker:{DEFAULT_CONTAINER}"]

    def chosen(src: LogSource, skipped: list[str]) -> tuple[LogSource | None, list[str]]:
        reasons.extend(f"{label}: not tried — an earlier candidate was chosen" for label in skipped)
        return src, reasons

    if plat.startswith("linux"):
        journalctl = shutil.which("journalctl", path=path_var)
        systemctl = shutil.which("systemctl", path=path_var)
        if journalctl is None:
            reasons.append(f"journal:{DEFAULT_UNIT} (system): not used — journalctl not found")
            reasons.append(f"journal:{DEFAULT_UNIT} (user): not used — journalctl not found")
        else:
            (sys_ok, sys_why), (user_ok, user_why) = await asyncio.gather(
                _journal_candidate(False, journalctl, systemctl, e, probe_timeout_s),
                _journal_candidate(True, journalctl, systemctl, e, probe_timeout_s),
            )
            reasons.append(sys_why)
            if sys_ok:
                src = JournalTail(
                    DEFAULT_UNIT, user=False, backlog_lines=backlog_lines, backlog_bytes=backlog_bytes, env=e
                )
                return chosen(src, [f"journal:{DEFAULT_UNIT} (user)", *later])
            reasons.append(user_why)
            if user_ok:
                user_src = JournalTail(
                    DEFAULT_UNIT, user=True, backlog_lines=backlog_lines, backlog_bytes=backlog_bytes, env=e
                )
                return chosen(user_src, later)
    else:
        reasons.append("journal: not tried — not Linux")

    for i, (path, why) in enumerate(file_list):
        try:
            is_file = await asyncio.to_thread(path.is_file)
        except OSError:
            is_file = False
        if is_file:
            reasons.append(f"file:{path}: used — {why}")
            return chosen(FileTail(path, backlog_lines=backlog_lines, backlog_bytes=backlog_bytes), later[i + 1 :])
        reasons.append(f"file:{path}: not used — no such file ({why})")

    docker = shutil.which("docker", path=path_var)
    label = f"docker:{DEFAULT_CONTAINER}"
    if docker is None:
        reasons.append(f"{label}: not used — docker not found")
    else:
        rc, out = await _probe(
            [docker, "inspect", "--format", "{{.State.Running}}", DEFAULT_CONTAINER], e, probe_timeout_s
        )
        if rc == 0:
            state = "running" if out.strip() == "true" else "not running"
            reasons.append(f"{label}: used — a container named {DEFAULT_CONTAINER} exists ({state})")
            docker_src = DockerTail(DEFAULT_CONTAINER, backlog_lines=backlog_lines, backlog_bytes=backlog_bytes, env=e)
            return docker_src, reasons
        reasons.append(f"{label}: not used — no container named {DEFAULT_CONTAINER} (or the daemon is not reachable)")
    return None, reasons


class AutoTail:
    """``--log auto``: resolves with ``resolve_auto()`` when iterated, then follows what it chose.

    ``reasons`` holds the last resolution's one line per candidate. While nothing is found it
    says so (``ok=False``) and looks again after ``AUTO_RETRY_S``, doubling up to ``AUTO_RETRY_MAX_S``.
    """

    def __init__(
        self, *, backlog_lines: int = 2000, backlog_bytes: int = 4 * 2**20, env: Mapping[str, str] | None = None
    ) -> None:
        self.description = "auto"
        self.reasons: list[str] = []
        self._backlog_lines = backlog_lines
        self._backlog_bytes = backlog_bytes
        self._env = env
        self._inner: LogSource | None = None

    async def batches(self) -> AsyncIterator[LogBatch]:
        """Resolve, then yield the chosen source's batches; status batches while none is found."""
        said: str | None = None
        retry_s = AUTO_RETRY_S
        while self._inner is None:
            try:
                src, self.reasons = await resolve_auto(
                    backlog_lines=self._backlog_lines, backlog_bytes=self._backlog_bytes, env=self._env
                )
            except Exception as exc:  # noqa: BLE001 - never let a probe bug end the log pane
                src, self.reasons = None, [f"auto: error while looking: {type(exc).__name__}: {exc}"]
            if src is not None:
                self._inner = src
                self.description = src.description
                break
            tried = "; ".join(r for r in self.reasons if "not tried" not in r)
            status = f"no Ollama server log found — {NOT_FOUND_FIX}" + (f". Tried: {tried}" if tried else "")
            if status != said:
                yield LogBatch(self.description, (), status, False, time.time())
                said = status
            await asyncio.sleep(retry_s)
            retry_s = min(AUTO_RETRY_MAX_S, retry_s * 2)
        async for batch in self._inner.batches():
            yield batch

    async def aclose(self) -> None:
        """Close the chosen source, if any."""
        if self._inner is not None:
            await self._inner.aclose()
