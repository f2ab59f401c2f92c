"""No write from keys typed ahead, in a real terminal: kvtop as its own process in tmux, watching the stand-in server.

tmux writes ``uy`` (and later ``buy``) to kvtop's terminal in one write, as a fast typist or a
paste does: the unload's confirmation opens and its ``y`` is ignored, also once the dialog is
armed (its button reads ``Unload (y)``) and the dashboard has polled again. A ``y`` typed after
that unloads. The judge is the stand-in's request log.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.standin import BUNDLED, Standin, running
from tests.ui.fakes import step_index

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def _tmux(sock: str, *args: str) -> str:
    return subprocess.run(["tmux", "-L", sock, *args], capture_output=True, text=True, timeout=10).stdout


def _until(cond: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached in {timeout_s} s: {what}")
        time.sleep(0.1)


def _polls(server: Standin) -> int:
    return sum(1 for r in server.requests() if r == ("GET", "/api/ps"))


def _two_more_polls(server: Standin) -> None:
    seen = _polls(server)
    _until(lambda: _polls(server) >= seen + 2, "two more polls of /api/ps")


def test_typed_ahead_y_in_a_real_terminal_unloads_nothing(tmp_path: Path) -> None:
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(step_index("gemma4 loads"))
        sock = f"kvtop-typeahead-{time.monotonic_ns()}"
        cmd = (
            f"cd {REPO} && XDG_CONFIG_HOME={tmp_path}/config XDG_STATE_HOME={tmp_path}/state "
            f"{sys.executable} -m kvtop --host {server.url} --interval 0.25 --log none; sleep 30"
        )
        subprocess.run(
            ["tmux", "-L", sock, "new-session", "-d", "-s", "k", "-x", "100", "-y", "30", cmd], check=True, timeout=10
        )

        def screen() -> str:
            return _tmux(sock, "capture-pane", "-p", "-t", "k")

        try:
            _until(lambda: "gemma4:latest" in screen() and "Unload" in screen(), "the dashboard with gemma4")
            for keys in ("uy", "buy"):
                _tmux(sock, "send-keys", "-t", "k", "-l", keys)  # one write to the terminal
                _until(lambda: "Unload (y)" in screen() or server.writes() != [], "the confirmation, armed")
                assert server.writes() == [], f"{keys!r} typed ahead unloaded a model"
                assert "now?" in screen()
                _two_more_polls(server)
                assert server.writes() == []
                _tmux(sock, "send-keys", "-t", "k", "Escape")
                _until(lambda: "now?" not in screen(), "the confirmation closed")
            assert server.writes() == []

            _tmux(sock, "send-keys", "-t", "k", "-l", "u")
            _until(lambda: "Unload (y)" in screen(), "the confirmation, armed")
            _tmux(sock, "send-keys", "-t", "k", "-l", "y")  # deliberate: after the button is ready
            _until(lambda: server.writes() == [("POST", "/api/generate")], "the unload", timeout_s=10)
            _tmux(sock, "send-keys", "-t", "k", "-l", "q")
        finally:
            subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True, timeout=10)
