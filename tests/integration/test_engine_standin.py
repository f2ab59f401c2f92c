"""The engine against the real stand-in server (a process speaking Ollama's API over HTTP)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kvtop.config import Settings
from kvtop.engine import Engine, Step, build_sources
from tests.standin import BUNDLED, running


def test_steps_and_the_loop_read_the_standin_through_one_apply_path() -> None:
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(4)
        s = Settings(host_url=server.url, timeout_s=2, interval_s=0.2, log_spec="none")

        async def steps() -> tuple[list[int], int, int]:
            engine = Engine(s, build_sources(s, machine=False))
            try:
                first = (await engine.step())[0]
                second = (await engine.step())[0]
            finally:
                await engine.aclose()
            assert second.last_ok is not None and second.reachable
            return (
                [len(first.latencies_s), len(second.latencies_s), len(second.models)],
                engine.apply_steps,
                engine.alert_evaluations,
            )

        counts, applied, evaluated = asyncio.run(steps())
        assert counts == [1, 2, 3] and applied == 2 and evaluated == 2

        async def server_view() -> Any:
            engine = Engine(s, build_sources(s, machine=False))
            try:
                await engine.sample_server_info(server.url, wait_s=5.0)  # the server view's round (i)
                engine.apply_step()
            finally:
                await engine.aclose()
            return engine.states[server.url].server.pulled

        pulled = asyncio.run(server_view())
        assert pulled is not None and pulled.tags  # the stand-in's pulled models, read by the engine

        async def loop() -> tuple[list[Step], Engine]:
            engine = Engine(s, build_sources(s, machine=False))
            seen: list[Step] = []
            engine.subscribe(seen.append)
            task = asyncio.ensure_future(engine.run())
            deadline = time.monotonic() + 10
            while (len(seen) < 3 or not engine.states[server.url].models) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await engine.aclose()
            return seen, engine

        seen, engine = asyncio.run(loop())
    assert len(seen) >= 3 and engine.apply_steps == len(seen)
    assert [st.number for st in seen] == list(range(1, len(seen) + 1))
    assert len(engine.states[server.url].models) == 3
    assert engine.alert_evaluations <= engine.apply_steps
