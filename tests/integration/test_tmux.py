"""kvtop --demo in a real tmux at 80×24: the essential columns are on screen, q exits 0 and the
terminal is restored (the alternate screen is left)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def _tmux(sock: str, *args: str) -> str:
    return subprocess.run(["tmux", "-L", sock, *args], capture_output=True, text=True, timeout=10).stdout


def test_demo_in_tmux_80x24(tmp_path: Path) -> None:
    sock = f"kvtop-test-{time.monotonic_ns()}"
    rc_file = tmp_path / "rc"
    cmd = f"cd {REPO} && {sys.executable} -m kvtop --demo; echo $? > {rc_file}; sleep 30"
    subprocess.run(
        ["tmux", "-L", sock, "new-session", "-d", "-s", "k", "-x", "80", "-y", "24", cmd], check=True, timeout=10
    )
    try:
        screen = ""
        deadline = time.monotonic() + 30  # the demo loads its first model 6 s in
        while time.monotonic() < deadline:
            screen = _tmux(sock, "capture-pane", "-p", "-t", "k")
            # the demo's own log (llama-server era, so v0.33.1) gives the allocated KV; its GPU is simulated
            if "Ollama 0.33.1" in screen and "KV 448M" in screen and "GPU0 RTX 4060 Ti" in screen:
                break
            time.sleep(0.2)
        lines = screen.splitlines()
        assert len(lines) == 24 and "DEMO" in lines[0] and "● up" in lines[0]
        header = next(line for line in lines if "NAME" in line)
        for column in ("NAME", "SIZE", "MEMORY", "CONTEXT", "PROCESSOR"):
            assert column in header
        # the models table's row, below its header: the alerts banner above it may name the model too
        row = next(line for line in lines[lines.index(header) + 1 :] if "qwen3:1.7b-q8_0" in line)
        assert "KV 448M" in row and re.search(r"4096(×1| ~▶1)", row) and "100% GPU" in row  # every essential number
        assert "sort:" in screen
        assert all(len(line) <= 80 for line in lines)
        _tmux(sock, "send-keys", "-t", "k", "q")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not rc_file.exists():
            time.sleep(0.1)
        assert rc_file.read_text().strip() == "0"
        assert _tmux(sock, "display-message", "-p", "-t", "k", "#{alternate_on}").strip() == "0"
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True, timeout=10)
