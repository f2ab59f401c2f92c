"""One engine behind every face: the faces show the same things.

One scripted stand-in and one server log give equal models, alerts and figure sources through
the dashboard (Pilot), ``--once --json``, ``--stream`` and the exporter's samples; a log line that
makes the parser raise is reported once in every face, and the lines after it are still read
(the loads written after it are in every face's state).

Every face runs in this process (so one monkeypatch makes the parser raise on the marker line in
all of them): ``kvtop.cli.main`` for ``--once`` and ``--stream`` in a thread of its own, the
exporter's ``Exporter`` on its engine, the dashboard through Textual's Pilot.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import time
from pathlib import Path
from typing import Any

import pytest

from kvtop.config import Settings
from kvtop.logparse.parser import LogParser
from tests.standin import BUNDLED, running

MARKER = "KVTOP-TEST-PARSER-BOOM"
PARSER_ERROR = "log parser error: ValueError: boom"
MODEL_KEYS = (
    "name",
    "digest",
    "size",
    "size_vram",
    "processor",
    "context_length",
    "parallel",
    "kv_type",
    "flash_attention",
    "memory",
    "kv_bytes_per_token",
    "sources",
    "spilled",
)


def raising_on_marker(monkeypatch: pytest.MonkeyPatch) -> None:
    real = LogParser.feed

    def feed(self: LogParser, line: str) -> Any:
        if MARKER in line:
            raise ValueError("boom")
        return real(self, line)

    monkeypatch.setattr(LogParser, "feed", feed)


def projection(doc: dict[str, Any]) -> tuple[list[dict[str, Any]], list[tuple[Any, ...]]]:
    """What must be equal across faces: each model's figures and their sources, and the alerts."""
    models = [{k: m.get(k) for k in MODEL_KEYS} for m in doc["models"]]
    alerts = [(a["kind"], a["severity"], a["model"], a["message"]) for a in doc["alerts"]]
    return models, alerts


def run_main(args: list[str]) -> tuple[int, str, str]:
    from kvtop.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    return code, out.getvalue(), err.getvalue()


def settle(log: Path) -> int:
    """Wait until the stand-in stopped writing the log; its line count."""
    size, deadline = -1, time.monotonic() + 10
    while time.monotonic() < deadline:
        now = log.stat().st_size if log.exists() else 0
        if now == size and now > 0:
            break
        size = now
        time.sleep(0.3)
    return len(log.read_text(encoding="utf-8").splitlines())


async def exporter_face(url: str, spec: str, total: int) -> tuple[dict[str, Any], int, str]:
    from kvtop.engine import build_sources
    from kvtop.export.exporter import Exporter, HostPoller
    from kvtop.report import state_json

    settings = Settings(host_url=url, log_spec=spec, interval_s=0.3, timeout_s=3.0)
    sources = build_sources(settings)
    poller = HostPoller(url, sources.servers[url], local=True, alerts={}, log=True)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        exporter = Exporter(
            [poller],
            interval_s=0.3,
            gpu_source=sources.gpu,
            proc_source=sources.procs,
            log_source=sources.log,
            slots_source=sources.slots,
        )
        stop = asyncio.Event()
        task = asyncio.create_task(exporter.run(stop))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            st = poller.view.state
            if poller.view.polls >= 2 and st.log.lines >= total and st.gpu is not None and len(st.models) == 3:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # a poll after the log was read
        stop.set()
        await asyncio.wait_for(task, 10)
    state = poller.view.state
    return state_json(state), state.log.lines, err.getvalue()


async def dashboard_face(url: str, spec: str, total: int) -> tuple[dict[str, Any], int, list[str]]:
    from kvtop.report import state_json
    from kvtop.ui.app import make_app

    app = make_app(Settings(host_url=url, log_spec=spec, interval_s=0.3, timeout_s=3.0))
    async with app.run_test(size=(160, 48)) as pilot:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            st = app.states[url]
            if app.apply_steps >= 2 and st.log.lines >= total and st.gpu is not None and len(st.models) == 3:
                break
            await pilot.pause(0.05)
        await pilot.pause(0.5)
        state = app.states[url]
        assert app.state is state  # the subscription set the state on screen
        notes = [n.message for n in app._notifications]
    return state_json(state), state.log.lines, notes


def test_every_face_gives_the_same_models_alerts_and_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    raising_on_marker(monkeypatch)
    log = tmp_path / "ollama.log"
    with running(["--manual", "--scenario", str(BUNDLED), "--log-file", str(log)]) as server:
        server.goto(2)
        settle(log)
        with log.open("a", encoding="utf-8") as f:  # a line the (patched) parser raises on
            f.write(f'time=2026-11-18T09:00:00.000Z level=INFO source=server.go:1 msg="{MARKER}"\n')
        server.goto(4)  # two more loads written after the marker: gemma4 spills
        total = settle(log)
        url, spec = server.url, f"file:{log}"

        code, out, once_err = run_main(["--host", url, "--log", spec, "--once", "--json", "--timeout", "3"])
        assert code == 0, once_err
        once = json.loads(out)

        code, out, stream_err = run_main(
            ["--host", url, "--log", spec, "--stream", "--count", "4", "--interval", "0.5", "--timeout", "3"]
        )
        assert code == 0, stream_err
        stream = [json.loads(line) for line in out.splitlines()]

        exported, exported_lines, exporter_err = asyncio.run(exporter_face(url, spec, total))
        shown, shown_lines, notes = asyncio.run(dashboard_face(url, spec, total))

    faces = {"--once --json": once, "--stream": stream[-1], "exporter": exported, "dashboard": shown}
    models, alerts = projection(once)
    assert len(models) == 3 and any(m["spilled"] for m in models)
    assert any(m["sources"]["kv"] == "allocated" for m in models if m["name"].startswith("gemma4")), models
    for name, doc in faces.items():
        assert projection(doc) == (models, alerts), name
    # every line read, those after the marker too (the stand-in adds an access line per request)
    assert exported_lines >= total and shown_lines >= total

    # the parser error: said once in every face, and following went on
    assert once_err.count(PARSER_ERROR) == 1, once_err
    assert stream_err.count(PARSER_ERROR) == 1, stream_err
    assert exporter_err.count(PARSER_ERROR) == 1, exporter_err
    assert sum(PARSER_ERROR in n for n in notes) == 1, notes
