"""Observer cost of the runner endpoints: an idle runner is asked ``/slots`` every
``IDLE_EVERY_S`` and a busy one every sample; a port that refuses is asked again after a wait that
doubles each time, afresh for a new PID; an unchanged answer is the same object. Real HTTP servers
on 127.0.0.1 count the requests they get; a refusing port is a real port nobody listens on (bound,
noted, closed). The clock is the source's own (injected), so no test waits for time."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kvtop.model.gpu_snapshots import RunnerProcess
from kvtop.sources.slots import IDLE_EVERY_S, REFUSED_FIRST_S, REFUSED_MAX_S, SlotsSource

BLOB = "sha256-" + "b" * 64


class _Runner(BaseHTTPRequestHandler):
    """``/slots``: two slots, slot 0 busy while ``server.busy``; ``/props``: fixed; counts paths."""

    def do_GET(self) -> None:
        srv = self.server
        srv.asked.append(self.path)  # type: ignore[attr-defined]
        if self.path == "/props":
            body = json.dumps({"default_generation_settings": {"n_ctx": 4096}, "total_slots": 2}).encode()
        else:
            busy = bool(srv.busy)  # type: ignore[attr-defined]
            body = json.dumps(
                [{"id": 0, "n_ctx": 4096, "is_processing": busy}, {"id": 1, "n_ctx": 4096, "is_processing": False}]
            ).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return


def _serve(port: int = 0) -> ThreadingHTTPServer:
    srv = ThreadingHTTPServer(("127.0.0.1", port), _Runner)
    srv.asked, srv.busy = [], False  # type: ignore[attr-defined]
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


@pytest.fixture
def runner_server() -> Iterator[ThreadingHTTPServer]:
    srv = _serve()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


def refusing_port() -> int:
    """A port on 127.0.0.1 that nobody listens on (bound, noted, closed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_an_idle_runner_is_asked_every_idle_period_a_busy_one_every_sample(
    runner_server: ThreadingHTTPServer,
) -> None:
    clock = Clock()
    r = RunnerProcess(7, "llama-server", "C", blob=BLOB, port=runner_server.server_address[1])
    source = SlotsSource(clock=clock)
    asked: list[str] = runner_server.asked  # type: ignore[attr-defined]
    try:
        first = (await source.sample([r])).runners[0]
        assert first.error is None and first.busy == 0
        assert asked.count("/slots") == 1 and asked.count("/props") == 1
        got = []
        for _ in range(int(IDLE_EVERY_S) - 1):  # one sample a second while idle: none asked
            clock.now += 1.0
            got.append((await source.sample([r])).runners[0])
        assert asked.count("/slots") == 1
        assert all(g is first for g in got)  # the same object: the round changes no state
        clock.now += 1.0  # IDLE_EVERY_S after the first: asked, the same answer, the same object
        assert (await source.sample([r])).runners[0] is first
        assert asked.count("/slots") == 2
        runner_server.busy = True  # type: ignore[attr-defined]
        clock.now += IDLE_EVERY_S
        busy = (await source.sample([r])).runners[0]
        assert busy.busy == 1 and asked.count("/slots") == 3
        for n in range(4):  # busy: every sample asks
            clock.now += 1.0
            assert (await source.sample([r])).runners[0].busy == 1
            assert asked.count("/slots") == 4 + n
        runner_server.busy = False  # type: ignore[attr-defined]
        clock.now += 1.0
        assert (await source.sample([r])).runners[0].busy == 0
        clock.now += 1.0
        await source.sample([r])
        assert asked.count("/slots") == 8  # idle again: the next sample is not asked
        assert asked.count("/props") == 1  # once per runner, as before
    finally:
        await source.aclose()


async def test_idle_every_zero_asks_every_sample(runner_server: ThreadingHTTPServer) -> None:
    r = RunnerProcess(7, "llama-server", "C", blob=BLOB, port=runner_server.server_address[1])
    source = SlotsSource(idle_every_s=0)
    try:
        snaps = [await source.sample([r]) for _ in range(3)]
    finally:
        await source.aclose()
    assert runner_server.asked.count("/slots") == 3  # type: ignore[attr-defined]
    assert snaps[0].runners[0] is snaps[2].runners[0]  # equal answers but for latency: one object


async def test_a_refusing_port_is_asked_again_after_a_doubling_wait_and_afresh_for_a_new_pid() -> None:
    clock = Clock()
    port = refusing_port()
    r = RunnerProcess(9, "llama-server", "C", blob=BLOB, port=port)
    source = SlotsSource(clock=clock)
    try:
        first = (await source.sample([r])).runners[0]
        assert first.error is not None and first.error.startswith("connection refused")
        per_round = source.requests  # /slots and /props, concurrently
        assert per_round == 2
        asked_at: list[float] = []
        start = clock.now
        while clock.now - start < 130:  # a sample a second for 130 s
            before = source.requests
            got = (await source.sample([r])).runners[0]
            if source.requests > before:
                asked_at.append(clock.now - start)
            else:
                assert got is first  # not asked: the last answer, the same object
            clock.now += 1.0
        waits = [b - a for a, b in zip([0.0, *asked_at], asked_at)]
        expected = []
        w = REFUSED_FIRST_S
        while sum(expected) + w <= 129:
            expected.append(w)
            w = min(REFUSED_MAX_S, 2 * w)
        assert waits == expected, (waits, expected)  # 2, 4, 8, 16, 32, 60 s
        assert source.requests == per_round * (1 + len(asked_at))  # 7 rounds in 131 samples
        # the runner restarted: a new PID on the same port is asked at once
        before = source.requests
        await source.sample([RunnerProcess(10, "llama-server", "C", blob=BLOB, port=port)])
        assert source.requests == before + per_round
    finally:
        await source.aclose()


async def test_a_refusing_port_that_starts_listening_is_read_at_its_next_ask() -> None:
    clock = Clock()
    port = refusing_port()
    r = RunnerProcess(9, "llama-server", "C", blob=BLOB, port=port)
    source = SlotsSource(clock=clock)
    srv = None
    try:
        assert (await source.sample([r])).runners[0].error is not None
        srv = _serve(port)  # the runner now listens
        clock.now += REFUSED_FIRST_S - 1
        assert (await source.sample([r])).runners[0].error is not None  # still waiting: not asked
        assert srv.asked == []  # type: ignore[attr-defined]
        clock.now += 1
        got = (await source.sample([r])).runners[0]
        assert got.error is None and [s.n_ctx for s in got.slots] == [4096, 4096]
        assert srv.asked.count("/slots") == 1  # type: ignore[attr-defined]
    finally:
        await source.aclose()
        if srv is not None:
            srv.shutdown()
            srv.server_close()


class _CountingSlots(SlotsSource):
    """The real source, counting its rounds."""

    def __init__(self) -> None:
        super().__init__()
        self.rounds = 0

    async def sample(self, runners):  # type: ignore[no-untyped-def, override]
        self.rounds += 1
        return await super().sample(runners)


async def test_the_app_asks_an_idle_runner_every_idle_period_and_repaints_nothing_for_it(
    runner_server: ThreadingHTTPServer,
) -> None:
    """The real app at a 0.25 s interval with a runner (a real HTTP server) in its process sample:
    while the runner is idle its /slots is asked once per IDLE_EVERY_S and the rounds change no
    state (the state keeps its first /slots snapshot: nothing is folded, evaluated or repainted for
    them); busy, it is asked every round."""
    import asyncio

    from kvtop.config import Settings
    from kvtop.model.gpu_snapshots import ProcSnapshot
    from kvtop.ui.app import make_app
    from tests.fakes.gpu_sources import FixedGpuSource, FixedProcSource
    from tests.ui.fakes import HOST, FakeSource, snapshot_at, step_index

    port = runner_server.server_address[1]
    procs = ProcSnapshot(taken_at=0.0, runners=(RunnerProcess(4242, "llama-server", "C", blob=BLOB, port=port),))
    slots = _CountingSlots()
    app = make_app(
        Settings(host_url=HOST, interval_s=0.25, log_spec="none"),
        FakeSource(snapshot_at(step_index("spills")), hold=True),  # type: ignore[arg-type]
        gpu_source=FixedGpuSource(),
        proc_source=FixedProcSource(procs),
        slots_source=slots,
    )
    asked: list[str] = runner_server.asked  # type: ignore[attr-defined]
    async with app.run_test(size=(120, 40)) as pilot:

        async def until(cond, timeout_s: float = 30.0) -> None:  # type: ignore[no-untyped-def]
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout_s
            while not cond():
                assert loop.time() < deadline, "timed out"
                await pilot.pause(0.05)

        await until(lambda: asked.count("/slots") >= 1 and app.state is not None and app.state.slots is not None)
        started = asyncio.get_running_loop().time()  # the first ask was before this
        await pilot.pause(0.3)
        rounds0, first, asks0 = slots.rounds, app.state.slots, asked.count("/slots")
        await until(lambda: slots.rounds >= rounds0 + 6)  # 1.5 s of rounds on a quiet machine
        await pilot.pause(0.3)
        elapsed_s = asyncio.get_running_loop().time() - started
        # the first ask, then one per idle period at most however slow the rounds ran (a loaded machine)
        assert asked.count("/slots") <= 2 + int(elapsed_s // IDLE_EVERY_S)
        assert asked.count("/slots") - asks0 < slots.rounds - rounds0  # idle: not asked every round
        assert app.state.slots is first  # every round since gave the same answer: no state changed for it
        runner_server.busy = True  # type: ignore[attr-defined]
        await until(lambda: app.state.slots is not None and any(r.busy for r in app.state.slots.runners))
        before, rounds1 = asked.count("/slots"), slots.rounds
        await until(lambda: slots.rounds >= rounds1 + 4)
        assert asked.count("/slots") >= before + 3  # busy: asked (nearly) every round
