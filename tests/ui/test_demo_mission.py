"""``kvtop --demo`` shows everything that makes kvtop different within its first 60 s.

The demo is wired as the command line wires it (``kvtop.cli.demo.demo_server`` with the stand-in's
``--log-file``, ``kvtop.cli.demo._machine_sources``) and played at 6x (``--demo-speed``) headless, for
60 s of scenario time. Along the way the screen and the state must show: an allocated KV figure,
a flash attention value the runner resolved, a KV type fallback, a busy slot, a numeric TOK/S, the
spill alert with a fix and the GPU's memory bar. The host's GPU, RAM and process table must not be
read: their sources fail the test when they are made or called.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import tempfile
from pathlib import Path
from typing import Any

import psutil
import pytest

from kvtop.cli.demo import _machine_sources, demo_server
from kvtop.config import Settings
from kvtop.ui.app import make_app
from tests.ui.screen_text import screen_lines

SPEED = 6.0
SCENARIO_S = 60.0


class _Touched(AssertionError):
    """The demo read something of the host."""


@pytest.fixture
def no_host_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every way kvtop reads this machine's GPU, RAM or processes fails the test."""
    from kvtop.sources import gpu, procs

    def refuse(what: str) -> Any:
        def call(*args: object, **kwargs: object) -> Any:
            raise _Touched(f"the demo read the host: {what}")

        return call

    monkeypatch.setattr(gpu.GpuSource, "__init__", refuse("GpuSource (NVML / sysfs)"))
    monkeypatch.setattr(procs.ProcSource, "__init__", refuse("ProcSource (process table)"))
    for name in ("virtual_memory", "swap_memory", "process_iter", "pids"):
        monkeypatch.setattr(psutil, name, refuse(f"psutil.{name}"))


async def test_demo_shows_every_mission_element_in_its_first_60_s(no_host_machine: None) -> None:
    seen: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "server.log"
        with demo_server(SPEED, extra=["--log-file", str(log)]) as url:
            settings = Settings(host_url=url, interval_s=0.25, demo=True, log_spec=f"file:{log}")
            sources = _machine_sources(settings)
            assert sources is not None
            app = make_app(settings, gpu_source=sources[0], proc_source=sources[1])
            async with app.run_test(size=(160, 48)) as pilot:
                loop = asyncio.get_running_loop()
                end = loop.time() + SCENARIO_S / SPEED
                while loop.time() < end and len(seen) < 7:
                    await pilot.pause(0.2)
                    _look(app, screen_lines(app), seen)
    missing = {"kv allocated", "fa resolved", "kv fallback", "busy slot", "tok/s", "spill fix", "gpu bar"} - set(seen)
    assert not missing, f"never shown: {sorted(missing)}; seen: {seen}"
    assert seen["tok/s"] and float(seen["tok/s"]) > 0


def _look(app: Any, lines: list[str], seen: dict[str, str]) -> None:
    """Record each mission element the first time the state has it and the screen shows it."""
    state = app.state
    text = "\n".join(lines)
    table = [line for line in lines if re.search(r"qwen3:1\.7b|gemma4", line)]
    for m in state.models:
        row = next((line for line in table if m.name in line), "")
        kv = m.memory.kv
        if kv.source == "allocated" and kv.value == 469_762_048 and "KV 448M" in row:
            seen.setdefault("kv allocated", row)
        fa = m.flash_attention
        if fa.source == "allocated" and fa.value in ("enabled", "disabled") and fa.value in row:
            seen.setdefault("fa resolved", f"{m.name}: {fa.value}")
        if m.slots is not None and m.slots.busy and m.slots.busy >= 1 and "▶1" in row:
            seen.setdefault("busy slot", row)
        tps = m.throughput.avg_decode_tps if m.throughput is not None else None
        if tps is not None:
            shown = re.search(rf"\b{tps:.1f}\b", row)
            if shown:
                seen.setdefault("tok/s", shown.group(0))
    for a in state.alerts:
        if (
            a.kind == "kv_type_not_applied"
            and "f16 allocated, q8_0 requested" in a.message
            and "kv type not applied" in text
        ):
            seen.setdefault("kv fallback", a.message)
        if a.kind == "spill" and a.fixes and "fix:" in text and "spill gemma4" in text:
            seen.setdefault("spill fix", f"{a.message} / {a.fixes[0].action}")
    gpu_rows = [line for line in lines if "RTX 4060 Ti" in line and "█" in line]
    if gpu_rows and state.gpu is not None and state.gpu.ok:
        seen.setdefault("gpu bar", gpu_rows[0])


async def test_the_demo_gpu_is_the_scenarios_and_labelled_demo(no_host_machine: None) -> None:
    with demo_server(20.0) as url:
        settings = Settings(host_url=url, interval_s=0.25, demo=True, log_spec="none")
        sources = _machine_sources(dataclasses.replace(settings))
        assert sources is not None
        gpu, procs = sources
        try:
            snap = await gpu.sample()
            table = await procs.sample(snap.pids)
        finally:
            await gpu.aclose()
    assert snap.ok and snap.status.startswith("GPU telemetry: DEMO")
    (device,) = snap.devices
    assert device.name == "NVIDIA GeForce RTX 4060 Ti (DEMO)" and device.memory_total_bytes == 17_175_674_880
    foreign = table.processes[23011]
    assert foreign.user == "dana" and foreign.cmdline == ("python3", "train_lora.py", "--bf16")
    assert {p.pid: p.used_memory_bytes for p in device.processes}[23011] == 2_621_440_000
    assert [s.pid for s in table.servers] == [1187]


async def test_the_demo_server_view_shows_traffic_from_the_access_lines(no_host_machine: None) -> None:
    """The demo's log carries gin's access lines (the scenario's chat/generate requests and kvtop's own
    polls), so the server view (``i``) shows requests per minute, p50/p95 per endpoint and the clients."""
    from kvtop.ui.screens.server_view import ServerScreen

    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "server.log"
        with demo_server(10.0, extra=["--log-file", str(log)]) as url:
            settings = Settings(host_url=url, interval_s=0.25, demo=True, log_spec=f"file:{log}")
            sources = _machine_sources(settings)
            assert sources is not None
            app = make_app(settings, gpu_source=sources[0], proc_source=sources[1])
            async with app.run_test(size=(120, 40)) as pilot:
                loop = asyncio.get_running_loop()
                end = loop.time() + 20.0

                def traffic() -> Any:
                    return app.state.log.traffic if app.state is not None else None

                while loop.time() < end:
                    t = traffic()
                    chat = t.endpoint("/api/chat") if t is not None else None
                    if chat is not None and chat.requests >= 2 and t.endpoint("/api/ps") is not None:
                        break
                    await pilot.pause(0.2)
                await pilot.press("i")
                await pilot.pause(0.3)
                assert isinstance(app.screen, ServerScreen)
                body = str(app.screen.query_one("#server-body").render())
    t = traffic()
    assert t is not None and t.server_errors == 0
    chat, ps = t.endpoint("/api/chat"), t.endpoint("/api/ps")
    assert chat is not None and ps is not None and chat.requests >= 2 and ps.requests >= 1
    assert chat.p50_s is not None and 1.0 < chat.p50_s < 10.0  # qwen3's scripted requests: prefill + 240 tokens
    assert ps.p95_s is not None and ps.p95_s < 1.0  # kvtop's own poll, answered in milliseconds
    clients = dict(t.busiest_clients())
    assert clients.get("192.0.2.24", 0) >= 2 and clients.get("127.0.0.1", 0) >= 1
    assert "no access lines yet" not in body
    assert re.search(r"\b\d+ req/min", body), body
    assert "/api/chat" in body and "/api/ps" in body and "192.0.2.24" in body
