"""``kvtop --stream``: NDJSON of ``--once --json`` objects, as real processes against the stand-in."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kvtop.cli.outputs import sample_engine
from kvtop.config import Settings
from tests.integration.test_cli import free_port, kvtop
from tests.standin import BUNDLED, REPO, running

FIXTURES = REPO / "tests" / "fixtures" / "logs"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVTOP_") and k != "OLLAMA_HOST"}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def test_stream_count_prints_once_json_objects_one_a_line() -> None:
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(4)
        once = kvtop("--once", "--json", "--host", server.url)
        proc = kvtop("--stream", "--count", "3", "--interval", "0.25", "--host", server.url)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.endswith("\n")
    lines = proc.stdout.splitlines()
    assert len(lines) == 3
    docs: list[dict[str, Any]] = [json.loads(line) for line in lines]
    reference = json.loads(once.stdout)
    for doc in docs:
        assert set(doc) == set(reference)  # the same schema as --once --json
        assert doc["host"] == server.url and doc["reachable"] is True
        assert sorted(m["name"] for m in doc["models"]) == sorted(m["name"] for m in reference["models"])
        assert {m["name"]: m["memory"]["kv"] for m in doc["models"]} == {
            m["name"]: m["memory"]["kv"] for m in reference["models"]
        }
    times = [d["taken_at"] for d in docs]
    assert times == sorted(times) and len(set(times)) == 3
    assert times[2] - times[0] >= 0.4  # two intervals of 0.25 s, less the first sample's lead


def test_stream_through_head_exits_cleanly() -> None:
    """``kvtop --stream | head -3``: three whole lines, then kvtop exits 0 without a traceback."""
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        proc = subprocess.run(
            f"{sys.executable} -m kvtop --stream --interval 0.25 --host {server.url} | head -3",
            shell=True,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=str(REPO),
            env=_env(),
            executable="/bin/bash",
        )
        # PIPESTATUS is not visible here: run again, recording kvtop's own status
        both = subprocess.run(
            f"set -o pipefail; {sys.executable} -m kvtop --stream --interval 0.25 --host {server.url} | head -2",
            shell=True,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=str(REPO),
            env=_env(),
            executable="/bin/bash",
        )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 3 and all(json.loads(line)["reachable"] is True for line in lines)
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
    assert both.returncode == 0, both.stderr  # pipefail: kvtop's status is 0 too
    assert len(both.stdout.splitlines()) == 2 and "Traceback" not in both.stderr


def test_stream_of_a_dead_server_goes_on_with_the_error() -> None:
    port = free_port()
    proc = kvtop("--stream", "--count", "2", "--interval", "0.25", "--host", f"127.0.0.1:{port}")
    assert proc.returncode == 0, proc.stderr
    docs = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(docs) == 2
    for doc in docs:
        assert doc["reachable"] is False and doc["models"] == []
        assert doc["error"] == f"connection refused (http://127.0.0.1:{port})"
        assert doc["hints"]  # the way forward, as --once --json gives it


def test_stream_stops_cleanly_on_sigint_and_sigterm() -> None:
    port = free_port()
    for sig in (signal.SIGINT, signal.SIGTERM):
        proc = subprocess.Popen(
            [sys.executable, "-m", "kvtop", "--stream", "--interval", "0.25", "--host", f"127.0.0.1:{port}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=str(REPO),
            env=_env(),
        )
        assert proc.stdout is not None
        first = proc.stdout.readline()  # the loop runs: its handlers are installed
        assert json.loads(first)["reachable"] is False
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=15)
        assert proc.returncode == 0, (sig, err)
        assert "Traceback" not in err and "KeyboardInterrupt" not in err
        assert all(json.loads(line)["reachable"] is False for line in out.splitlines())


def test_stream_arguments_are_checked() -> None:
    for args, text in (
        (("--stream", "--once"), "--stream prints a sample per interval"),
        (("--count", "3"), "--count needs --stream"),
        (("--stream", "--count", "0"), "--count must be 1 or more"),
    ):
        proc = kvtop(*args)
        assert proc.returncode == 2 and text in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr


def test_sampler_carries_state_across_samples() -> None:
    """Each sample is applied to the previous state (the dashboard's apply path), not to a fresh one."""
    port = free_port()

    async def three() -> list[Any]:
        engine = sample_engine(Settings(host_url=f"http://127.0.0.1:{port}", timeout_s=0.5, log_spec="none"))
        try:
            return [(await engine.step())[0] for _ in range(3)]
        finally:
            await engine.aclose()

    states = asyncio.run(three())
    assert [st.failures for st in states] == [1, 2, 3]  # consecutive failures counted across samples

    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(4)

        async def two() -> list[Any]:
            engine = sample_engine(Settings(host_url=server.url, timeout_s=2, log_spec="none"))
            try:
                return [(await engine.step())[0] for _ in range(2)]
            finally:
                await engine.aclose()

        first, second = asyncio.run(two())
    assert len(first.latencies_s) == 1 and len(second.latencies_s) == 2
    assert second.last_ok is not None and len(second.models) == 3


def test_sampler_follows_the_log_between_samples(tmp_path: Path) -> None:
    """``--stream --log file:PATH``: each sample applies the lines written since the previous one."""
    real = (FIXTURES / "014-truncating-input-prompt-embeddings-0.6.log").read_text(encoding="utf-8").splitlines()
    lines, more = real[:-1], real[-1]
    log = tmp_path / "ollama.log"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    port = free_port()

    async def run() -> tuple[int, int]:
        engine = sample_engine(Settings(host_url=f"http://127.0.0.1:{port}", timeout_s=0.5, log_spec=f"file:{log}"))
        engine.follow_log()
        try:
            deadline = time.monotonic() + 10
            first = (await engine.step())[0]
            while first.log.lines < len(lines) and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
                first = (await engine.step())[0]
            with log.open("a", encoding="utf-8") as f:
                f.write(more + "\n")
            second = first
            while second.log.lines < len(lines) + 1 and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
                second = (await engine.step())[0]
            return first.log.lines, second.log.lines
        finally:
            await engine.aclose()

    before, after = asyncio.run(run())
    assert (before, after) == (len(lines), len(lines) + 1)
