"""The real app against the stand-in Ollama server running as a real process on 127.0.0.1.

The scenario advances step by step (manual mode); the table must follow with the right rows,
processor strings and KV figures. The server is killed mid-run and started again on the same port.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from kvtop.config import Settings
from kvtop.ui.app import KvtopApp, make_app
from kvtop.ui.widgets.header import ServerHeader
from kvtop.ui.widgets.models_table import ModelsTable
from tests.standin import BUNDLED, _stop, port_of, running


def rows(app: KvtopApp) -> list[list[str]]:
    table = app.query_one(ModelsTable)
    return [[str(getattr(c, "plain", c)) for c in table.get_row_at(i)] for i in range(table.row_count)]


async def until(pilot: Any, cond: Callable[[], bool], timeout_s: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        try:
            if cond():
                return
        except Exception:  # noqa: BLE001, S110 - the table may be between rebuilds
            pass
        if loop.time() > deadline:
            raise AssertionError("condition not met within %.0f s" % timeout_s)
        await pilot.pause(0.05)


async def test_dashboard_follows_the_scenario_and_survives_a_server_restart() -> None:
    args = ["--manual", "--scenario", str(BUNDLED)]
    with running(args) as server:
        url = server.url
        app = make_app(Settings(host_url=url, interval_s=0.25, timeout_s=1.0))
        async with app.run_test(size=(160, 48)) as pilot:
            await until(pilot, lambda: app.state.reachable is True)
            assert rows(app) == []
            assert "Ollama 0.22.1" in app.query_one(ServerHeader).render().plain

            server.goto(1)  # qwen3:1.7b-q8_0 at num_ctx 4096
            await until(pilot, lambda: [r[0] for r in rows(app)] == ["qwen3:1.7b-q8_0"])
            # /api/show runs in the background: its answer joins a later poll
            await until(pilot, lambda: "KV ~" in rows(app)[0][3])
            r = rows(app)[0]
            assert r[4] == "4096×1*" and r[5] == "100% GPU"
            assert " KV ~448M " in r[3]  # 4096 × 114,688 B = 448 MiB

            server.goto(2)  # num_ctx raised to 32768: the KV bar grows
            await until(pilot, lambda: rows(app)[0][4] == "32768×1*")
            assert " KV ~3.5G " in rows(app)[0][3]
            assert app.state.models[0].memory.kv.value == 32768 * 114_688
            assert app.state.models[0].size_bytes == 6_106_141_568

            server.goto(4)  # gemma4 spills
            await until(pilot, lambda: len(rows(app)) == 3)
            procs = {r[0]: r[5] for r in rows(app)}
            assert procs == {
                "qwen3:1.7b-q4_K_M": "100% GPU",
                "qwen3:1.7b-q8_0": "100% GPU",
                "gemma4:latest": "19%/81% CPU/GPU",
            }
            assert "1 spilled to CPU" in app.query_one(ServerHeader).render().plain

            server.goto(5)  # busy gemma4: expires_at in the past
            await until(pilot, lambda: any(r[0] == "gemma4:latest" and r[9] == "Stopping" for r in rows(app)))

            # the server dies: the header says so, the last models stay on screen
            port = port_of(url)
            _stop(server.proc)
            await until(pilot, lambda: app.state.reachable is False)
            head = app.query_one(ServerHeader).render().plain
            assert "✖ down" in head and "connection refused" in head
            assert len(rows(app)) == 3

            # ... and comes back on the same port
            with running(args, port=port) as again:
                again.goto(6)
                await until(pilot, lambda: app.state.reachable is True and len(rows(app)) == 2)
                assert "● up" in app.query_one(ServerHeader).render().plain
                assert {r[0] for r in rows(app)} == {"qwen3:1.7b-q8_0", "qwen3:1.7b-q4_K_M"}
                await pilot.press("q")


async def test_garbage_and_http_errors_are_shown_not_raised(tmp_path: Any) -> None:
    import json

    scenario = json.loads(BUNDLED.read_text(encoding="utf-8"))
    scenario["steps"] = [
        {"at_s": 0, "label": "busy", "status": 503, "loaded": []},
        {"at_s": 1, "label": "garbage", "garbage": True, "loaded": []},
        {"at_s": 2, "label": "ok", "loaded": []},
    ]
    path = tmp_path / "s.json"
    path.write_text(json.dumps(scenario), encoding="utf-8")
    with running(["--manual", "--scenario", str(path)]) as server:
        app = make_app(Settings(host_url=server.url, interval_s=0.25, timeout_s=1.0))
        async with app.run_test(size=(120, 30)) as pilot:
            await until(pilot, lambda: app.state.ollama is not None)
            assert app.state.ollama.error_kind == "http"
            assert "HTTP 503" in app.query_one(ServerHeader).render().plain
            server.goto(1)
            await until(pilot, lambda: app.state.ollama.error_kind == "invalid_json")
            assert "invalid JSON" in app.query_one(ServerHeader).render().plain
            server.goto(2)
            await until(pilot, lambda: app.state.reachable is True)
