"""``--demo``: the stand-in Ollama server on a free loopback port, its busiest step for ``--once``,
and the scenario's simulated machine (GPU, RAM, processes) in place of this one's."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from kvtop.config import Settings


@contextmanager
def demo_server(speed: float = 1.0, *, manual: bool = False, extra: Sequence[str] = ()) -> Iterator[str]:
    """Run the stand-in Ollama server (``kvtop.demo.server``) on a free loopback port.

    The server exits by itself if kvtop dies without stopping it (``--exit-with-parent``).
    ``extra``: more of its arguments (e.g. ``--scenario PATH --no-loop``).

    Yields:
        Its base URL, e.g. ``http://127.0.0.1:40321``.

    Raises:
        RuntimeError: The server did not announce ``LISTENING`` within 10 s.
    """
    cmd = [sys.executable, "-m", "kvtop.demo.server", "--port", "0", "--speed", str(speed), "--exit-with-parent"]
    proc = subprocess.Popen(
        cmd + (["--manual"] if manual else []) + list(extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 10
        url = None
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            if line.startswith("LISTENING "):
                url = line.split(None, 1)[1].strip()
                break
        if url is None:
            err = proc.stderr.read() if proc.stderr and proc.poll() is not None else ""
            raise RuntimeError(f"the demo server did not start{': ' + err.strip()[-300:] if err else ''}")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _show_busiest_step(url: str) -> None:
    """For ``--demo --once``: jump the stand-in to the step with the most models loaded."""
    import httpx

    from kvtop.demo.server import load_default_scenario

    steps = load_default_scenario().steps
    busiest = max(range(len(steps)), key=lambda i: len(steps[i].loaded))
    httpx.post(f"{url}/_standin/advance", json={"to": busiest}, timeout=5, trust_env=False)


def _machine_sources(settings: Settings) -> tuple[Any, Any] | None:
    """``--demo``: the scenario's machine (its simulated GPU, RAM and processes; nothing of this host),
    else None (this machine's GPU and process sources)."""
    if not settings.demo:
        return None
    from kvtop.demo.machine import DemoMachineSource

    machine = DemoMachineSource(settings.host_url)
    return machine, machine.procs_source()
