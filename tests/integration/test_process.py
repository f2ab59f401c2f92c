"""kvtop as a real process in a pty: signals quit cleanly, the terminal is restored, and the
demo's stand-in server never outlives kvtop."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from tests.ptyrun import PtyProcess

LEAVE_ALT_SCREEN = b"\x1b[?1049l"


def _demo_children(pid: int) -> list[psutil.Process]:
    try:
        return [c for c in psutil.Process(pid).children(recursive=True) if "kvtop.demo.server" in " ".join(c.cmdline())]
    except psutil.NoSuchProcess:
        return []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_signal_quits_cleanly_and_restores_the_terminal(sig: signal.Signals) -> None:
    p = PtyProcess("--demo")
    try:
        assert p.wait_text("DEMO"), p.text[-2000:]
        assert p.wait_text("Ollama 0.33.1"), p.text[-2000:]
        servers = _demo_children(p.proc.pid)
        assert len(servers) == 1
        os.kill(p.proc.pid, sig)
        assert p.wait_exit() == 0, p.text[-2000:]
        assert LEAVE_ALT_SCREEN in p.raw  # the alternate screen was left: the shell is usable again
        assert "Traceback" not in p.text
        servers[0].wait(timeout=10)  # the stand-in stopped with kvtop
    finally:
        p.close()


def test_demo_server_does_not_outlive_a_killed_kvtop() -> None:
    p = PtyProcess("--demo")
    try:
        assert p.wait_text("Ollama 0.33.1"), p.text[-2000:]
        servers = _demo_children(p.proc.pid)
        assert len(servers) == 1
        os.kill(p.proc.pid, signal.SIGKILL)
        p.proc.wait(5)
        servers[0].wait(timeout=10)  # --exit-with-parent: gone within a second or so
        assert not servers[0].is_running()
    finally:
        p.close()


def test_ctrl_c_and_q_quit() -> None:
    for key in (b"\x03", b"q"):
        p = PtyProcess("--demo")
        try:
            assert p.wait_text("Ollama 0.33.1"), p.text[-2000:]
            time.sleep(0.2)
            os.write(p.master, key)
            assert p.wait_exit() == 0, p.text[-2000:]
            assert LEAVE_ALT_SCREEN in p.raw
        finally:
            p.close()
