"""Run kvtop as a real process in a pseudo-terminal (for signal and terminal-restore tests)."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ANSI = re.compile(r"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


class PtyProcess:
    """``python -m kvtop ARGS`` on the slave side of a pty of ``cols``×``rows``."""

    def __init__(self, *args: str, cols: int = 100, rows: int = 30) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": str(cols), "LINES": str(rows)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kvtop", *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=str(REPO),
            env=env,
            start_new_session=True,
            close_fds=True,
        )
        os.close(slave)
        self.master = master
        self.raw = b""

    def read_for(self, seconds: float) -> None:
        """Collect output for ``seconds``."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            ready, _, _ = select.select([self.master], [], [], 0.05)
            if ready:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:
                    return
                if not chunk:
                    return
                self.raw += chunk

    def wait_text(self, needle: str, timeout_s: float = 15.0) -> bool:
        """Read until ``needle`` appears in the escape-stripped output."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if needle in self.text:
                return True
            self.read_for(0.1)
        return needle in self.text

    @property
    def text(self) -> str:
        return ANSI.sub("", self.raw.decode("utf-8", "replace"))

    def wait_exit(self, timeout_s: float = 10.0) -> int | None:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            self.read_for(0.05)
            if self.proc.poll() is not None:
                self.read_for(0.2)
                return self.proc.returncode
        return None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        try:
            os.close(self.master)
        except OSError:
            pass
