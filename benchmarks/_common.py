"""Shared helpers for the kvtop benchmarks (not a benchmark itself).

- ``StandIn``: the stand-in Ollama server (``python -m kvtop.demo.server --manual``) on a free
  loopback port, jumped to a scenario step.
- ``PtyApp``: a command (normally the ``kvtop`` console script) running as a real process on
  the slave side of a pseudo-terminal of a fixed size, with its own session and controlling
  terminal, like a program started from a terminal emulator.
- ``strip_ansi``: terminal output with the escape sequences removed, for text matching.
- ``many_models_scenario``: a scenario file with N models loaded at once (a third spilled), for
  ``StandIn(scenario=...)``.
- ``CpuMeter``, ``cpu_window``: CPU seconds of a process and its descendants over a window.
- ``ratio``, ``ratio_text``: a figure against the floor (``floor.py``) measured in the same run.

Standard library + psutil + the project only.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import select
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

if TYPE_CHECKING:
    from typing_extensions import Self

REPO_ROOT = Path(__file__).resolve().parent.parent

# CSI (ESC [ ... final), OSC (ESC ] ... BEL or ST), DCS/PM/APC/SOS strings (ESC P/^/_/X ... ST),
# charset selection (ESC ( B ...), and the remaining two-byte escapes (ESC 7, ESC =, ESC M ...).
_ANSI_RE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"
    r"|\x1b[P^_X][^\x1b]*\x1b\\"
    r"|\x1b[()*+][0-9A-Za-z]"
    r"|\x1b[@-Z\\-_0-9=>]"
    r"|\x9b[0-?]*[ -/]*[@-~]"
)


def strip_ansi(text: str) -> str:
    """``text`` without terminal escape sequences (a cut-off sequence at the end stays)."""
    return _ANSI_RE.sub("", text)


def kvtop_command() -> list[str]:
    """The ``kvtop`` console script of the running interpreter's environment, else ``-m kvtop``."""
    script = Path(sys.executable).with_name("kvtop")
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    found = shutil.which("kvtop")
    if found:
        return [found]
    return [sys.executable, "-m", "kvtop"]


def summary(values: Sequence[float]) -> dict[str, float]:
    """min / median / max / mean of ``values`` (seconds), rounded to 0.1 ms."""
    return {
        "min": round(min(values), 4),
        "median": round(statistics.median(values), 4),
        "max": round(max(values), 4),
        "mean": round(statistics.fmean(values), 4),
    }


def ratio(value: float | None, floor: float | None) -> float | None:
    """``value / floor`` rounded to 0.01, None when either is missing or the floor is 0."""
    if value is None or floor is None or floor <= 0:
        return None
    return round(value / floor, 2)


def ratio_text(value: float | None, floor: float | None, target: float | None = None) -> str:
    """``"1.23x the floor"`` (plus ``": MEETS <= 1.3x"`` / ``MISSES`` when ``target`` is given)."""
    r = ratio(value, floor)
    if r is None:
        return "no ratio (a figure is missing)"
    text = f"{r:.2f}x the floor"
    if target is not None:
        text += f": {'MEETS' if r <= target else 'MISSES'} (target <= {target:g}x)"
    return text


# --------------------------------------------------------------------------------------------
# CPU of a process tree


class CpuMeter:
    """CPU seconds (user + system) of a process and its descendants, live and reaped."""

    def __init__(self, pid: int) -> None:
        self.proc = psutil.Process(pid)

    def read(self) -> dict[str, float]:
        """``{"user", "system", "children", "total"}`` in CPU-seconds since the process started."""
        t = self.proc.cpu_times()
        own_user, own_sys = t.user, t.system
        reaped = t.children_user + t.children_system
        live = 0.0
        for child in self.proc.children(recursive=True):
            try:
                ct = child.cpu_times()
            except psutil.Error:
                continue
            live += ct.user + ct.system
        return {
            "user": own_user,
            "system": own_sys,
            "children": reaped + live,
            "total": own_user + own_sys + reaped + live,
        }

    def rss(self) -> int:
        """Resident set size in bytes of the process (not its children), 0 once it is gone."""
        try:
            return int(self.proc.memory_info().rss)
        except psutil.Error:
            return 0


def delta(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    """``b - a`` per key of two ``CpuMeter.read()`` results."""
    return {k: b[k] - a[k] for k in a}


# --------------------------------------------------------------------------------------------
# The stand-in server


def many_models_scenario(n: int, path: Path, *, spilled_every: int = 3, name_prefix: str = "bench") -> Path:
    """Write a one-step scenario with ``n`` models loaded at once to ``path`` and return it.

    The models are copies of the bundled scenario's three (their GGUF metadata, details and the
    sizes they have at step 4), named ``{name_prefix}-0000-<original name>`` (distinct digests:
    sha256 of the name). Every ``spilled_every``-th model (the 3rd, 6th, ...) has 80 % of its
    size in VRAM (spilled to the CPU), the others 100 %. Use it with ``StandIn(step=0,
    scenario=str(path))``.
    """
    bundled = json.loads((REPO_ROOT / "snapshots" / "demo-scenario.json").read_text(encoding="utf-8"))
    templates = bundled["models"]
    sized = {row["model"]: row for row in bundled["steps"][4]["loaded"]}
    names = list(templates)
    models: dict[str, Any] = {}
    loaded: list[dict[str, Any]] = []
    for i in range(n):
        base = names[i % len(names)]
        name = f"{name_prefix}-{i:04d}-{base}"
        entry = {k: v for k, v in templates[base].items() if k not in ("note", "notes", "source", "sources")}
        entry["digest"] = hashlib.sha256(name.encode()).hexdigest()
        models[name] = entry
        size = int(sized[base]["size"])
        spilled = spilled_every > 0 and i % spilled_every == spilled_every - 1
        loaded.append(
            {
                "model": name,
                "context_length": sized[base]["context_length"],
                "size": size,
                "size_vram": int(size * 0.8) if spilled else size,
                "expires_in_s": 300,
            }
        )
    doc = {
        "format": 1,
        "version": bundled["version"],
        "description": f"{n} models loaded (benchmark)",
        "models": models,
        "steps": [{"at_s": 0, "label": f"{n} models, 1 in {spilled_every} spilled", "loaded": loaded}],
    }
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


# --------------------------------------------------------------------------------------------
# The stand-in server process


class StandIn:
    """``python -m kvtop.demo.server --port 0 --manual`` as a subprocess; use as a context manager."""

    def __init__(self, step: int | None = 4, scenario: str | None = None) -> None:
        self.step = step
        self.scenario = scenario
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""
        self._stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed in close()

    def __enter__(self) -> Self:
        argv = [sys.executable, "-m", "kvtop.demo.server", "--port", "0", "--manual"]
        if self.scenario:
            argv += ["--scenario", self.scenario]
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._stderr, text=True
        )
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], 15)
        line = self.proc.stdout.readline() if ready else ""
        if not line.startswith("LISTENING "):
            self._stderr.seek(0)
            self.close()
            raise RuntimeError(f"the stand-in server did not start: {line!r} {self._stderr.read()[-500:]}")
        self.url = line.split(None, 1)[1].strip()
        # Nothing more is read from its stdout; it prints only the one line.
        if self.step is not None:
            self.advance(self.step)
        return self

    def advance(self, step: int) -> dict:
        req = urllib.request.Request(
            self.url + "/_standin/advance",
            data=json.dumps({"to": step}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=5) as resp:
            return json.loads(resp.read() or b"{}")

    def state(self) -> dict:
        with urllib.request.urlopen(self.url + "/_standin/state", timeout=5) as resp:
            return json.loads(resp.read())

    def close(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()
        self._stderr.close()

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------------------------------
# A process in a pseudo-terminal


def _set_winsize(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


class PtyApp:
    """Run ``argv`` on the slave side of a ``cols``x``rows`` pty (own session, controlling tty).

    The parent keeps the master side. Either call ``read_until()`` (non-blocking reads with
    ``select``) or ``start_drain()`` (a thread that keeps reading so the child never blocks on
    a full pty buffer); not both at once.
    """

    def __init__(
        self, argv: Sequence[str], *, cols: int = 80, rows: int = 24, env: dict[str, str] | None = None
    ) -> None:
        self.argv = list(argv)
        self.cols, self.rows = cols, rows
        self.env = dict(os.environ if env is None else env)
        self.env["TERM"] = "xterm-256color"
        self.env["COLUMNS"], self.env["LINES"] = str(cols), str(rows)
        for var in ("TEXTUAL", "TEXTUAL_DEBUG", "TEXTUAL_DEVTOOLS", "NO_COLOR"):
            self.env.pop(var, None)
        self.raw = bytearray()
        self.master = -1
        self.proc: subprocess.Popen[bytes] | None = None
        self.t_start = 0.0
        self._lock = threading.Lock()
        self._drain: threading.Thread | None = None
        self._stop = threading.Event()
        self.eof = False
        self.bytes_read = 0

    def start(self) -> float:
        """Start the child; returns the ``time.perf_counter()`` taken just before the fork."""
        master, slave = os.openpty()
        _set_winsize(slave, self.rows, self.cols)
        os.set_blocking(master, False)

        def child_setup() -> None:  # runs in the child between fork and exec
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.t_start = time.perf_counter()
        self.proc = subprocess.Popen(
            self.argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=self.env,
            # preexec_fn: setsid + TIOCSCTTY (no Popen option makes the pty the controlling
            # terminal); the benchmarks start their threads only after this fork.
            preexec_fn=child_setup,
            close_fds=True,  # noqa: PLW1509
        )
        os.close(slave)
        self.master = master
        return self.t_start

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    # -- reading ------------------------------------------------------------------------------

    def _read_available(self, timeout: float) -> bool:
        """Read what the master has within ``timeout`` s; False at EOF (the child closed the tty)."""
        if self.eof:
            return False
        ready, _, _ = select.select([self.master], [], [], max(0.0, timeout))
        if not ready:
            return True
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except BlockingIOError:
                return True
            except OSError as exc:  # EIO: every slave fd is closed (the child exited)
                if exc.errno == errno.EIO:
                    self.eof = True
                    return False
                raise
            if not chunk:
                self.eof = True
                return False
            with self._lock:
                self.raw += chunk
                self.bytes_read += len(chunk)

    def text(self) -> str:
        """Everything the child wrote so far, escape sequences removed."""
        with self._lock:
            data = bytes(self.raw)
        return strip_ansi(data.decode("utf-8", "replace"))

    def watch(self, needles: Sequence[str], timeout: float) -> dict[str, float | None]:
        """Read until every one of ``needles`` showed in the stripped output, or ``timeout``.

        Returns, per needle, the ``perf_counter`` time of the read that first made it visible
        (None if it never did before the timeout or the child's exit). ``""`` stands for the
        first byte of output.
        """
        found: dict[str, float | None] = {n: None for n in needles}
        deadline = time.perf_counter() + timeout
        scanned = 0
        while True:
            with self._lock:
                # Re-scan a margin before the new bytes: a needle or an escape sequence may
                # have been split between two reads.
                tail = bytes(self.raw[max(0, scanned - 4096) :])
                scanned = len(self.raw)
                have_bytes = self.bytes_read > 0
            now = time.perf_counter()
            text = strip_ansi(tail.decode("utf-8", "replace")) if tail else ""
            for n in needles:
                if found[n] is None and ((n == "" and have_bytes) or (n and n in text)):
                    found[n] = now
            if all(v is not None for v in found.values()) or now >= deadline:
                return found
            if not self._read_available(min(0.05, deadline - now)) and not tail:
                return found  # EOF and nothing left to scan

    def read_until(self, needle: str, timeout: float) -> float | None:
        """``watch([needle], timeout)[needle]``."""
        return self.watch([needle], timeout)[needle]

    def start_drain(self, keep_bytes: int = 1 << 20) -> None:
        """Keep reading the pty in a daemon thread (keeps only the last ``keep_bytes``)."""

        def loop() -> None:
            while not self._stop.is_set():
                if not self._read_available(0.2):
                    break
                with self._lock:
                    if len(self.raw) > keep_bytes:
                        del self.raw[: len(self.raw) - keep_bytes]

        self._drain = threading.Thread(target=loop, name="pty-drain", daemon=True)
        self._drain.start()

    # -- input and shutdown -------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        os.write(self.master, data)

    def quit(self, key: bytes = b"q", grace_s: float = 5.0) -> tuple[int | None, bool]:
        """Send ``key``; wait up to ``grace_s`` for exit, else SIGKILL.

        Returns (exit code, whether it exited by itself).
        """
        assert self.proc is not None
        if self.proc.poll() is None:
            try:
                self.send(key)
            except OSError:
                pass
        deadline = time.perf_counter() + grace_s
        while self.proc.poll() is None and time.perf_counter() < deadline:
            if self._drain is None:
                self._read_available(0.05)  # keep reading so its last writes cannot block
            else:
                time.sleep(0.05)
        clean = self.proc.poll() is not None
        if not clean:
            self.kill()
        return self.proc.returncode, clean

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            except PermissionError:
                self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        self.kill()
        self._stop.set()
        if self._drain is not None:
            self._drain.join(timeout=2)
        if self.master >= 0:
            os.close(self.master)
            self.master = -1

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
