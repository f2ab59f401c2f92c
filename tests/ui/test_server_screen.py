"""The server view (``i``): Pilot opens and closes it; snapshots at 80×24 and 160×48 with a fixed
health sample, the pulled models of the bundled scenario, one GPU and real access lines."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

from kvtop.config import Settings
from kvtop.demo.api_bodies import show_body, tags_body
from kvtop.logparse.parser import parse_lines
from kvtop.model.gpu_snapshots import GpuDevice, GpuSnapshot, ProcSnapshot
from kvtop.model.snapshots import PulledSnapshot
from kvtop.model.server_health import CgroupLimits, ProcessTree, Restarts, ServerHealth
from kvtop.sources.ollama_decode import parse_show, parse_tags
from kvtop.ui.app import make_app
from kvtop.ui.messages import GpuSampled, LogEventsReceived, SnapshotReceived
from kvtop.ui.screens.server_view import ServerScreen
from kvtop.ui.server_rounds import ServerSampled
from tests.ui.fakes import HOST, TAKEN_AT, FakeSource, scenario, snapshot_at, step_index

GiB = 1024**3
LOG = Path(__file__).resolve().parents[1] / "fixtures" / "gin" / "access-corpus.log"


def _pulled() -> PulledSnapshot:
    sc = scenario()
    tags = parse_tags(tags_body(sc))
    shows = {}
    for digest, tag in tags.items():
        cat = next(c for c in sc.models.values() if c.digest == digest)
        shows[digest] = parse_show(show_body(cat, True), digest=digest, name=tag.name)
    return PulledSnapshot(TAKEN_AT, MappingProxyType(tags), MappingProxyType(shows))


def _health() -> ServerHealth:
    tree = ProcessTree(4242, 3, 12.5, 6 * GiB, TAKEN_AT - 5 * 3600 - 120, ((4300, 4 * GiB, 9.0), (4301, 1 * GiB, 1.5)))
    return ServerHealth(
        TAKEN_AT,
        tree,
        CgroupLimits("/sys/fs/cgroup/system.slice/ollama.service", 2, 32 * GiB, 7 * GiB, 8.0),
        Restarts(2, "systemd NRestarts (ollama.service)"),
        env=MappingProxyType(
            {"OLLAMA_API_KEY": "****", "OLLAMA_CONTEXT_LENGTH": "8192", "OLLAMA_HOST": "0.0.0.0:11434"}
        ),
        env_source="systemctl show ollama.service",
    )


def _gpu() -> GpuSnapshot:
    dev = GpuDevice(
        0,
        name="NVIDIA GeForce RTX 4090",
        memory_total_bytes=24 * GiB,
        memory_used_bytes=9 * GiB,
        memory_free_bytes=15 * GiB,
    )
    return GpuSnapshot(TAKEN_AT, "GPU telemetry: NVML", ok=True, devices=(dev,))


def _app() -> object:
    return make_app(Settings(host_url=HOST, interval_s=0.25), FakeSource(snapshot_at(step_index("gemma4"))), poll=False)  # type: ignore[arg-type]


async def _feed(pilot: object) -> None:
    app = pilot.app  # type: ignore[attr-defined]
    lines = LOG.read_text().splitlines()
    app.post_message(SnapshotReceived(snapshot_at(step_index("gemma4"))))
    app.post_message(GpuSampled(_gpu(), ProcSnapshot(taken_at=TAKEN_AT)))
    app.post_message(
        LogEventsReceived(
            tuple(parse_lines(lines, default_year=2025)),
            source="file:server.log",
            status=None,
            ok=True,
            lines=len(lines),
            dropped_lines=0,
            raw_lines=lines,
        )
    )
    app.post_message(ServerSampled(HOST, _health(), _pulled()))
    await pilot.pause(0.3)  # type: ignore[attr-defined]


async def test_i_opens_and_escape_closes() -> None:
    app = _app()
    async with app.run_test(size=(120, 40)) as pilot:  # type: ignore[attr-defined]
        await _feed(pilot)
        await pilot.press("i")
        await pilot.pause(0.2)
        assert isinstance(app.screen, ServerScreen)  # type: ignore[attr-defined]
        body = str(app.screen.query_one("#server-body").render())  # type: ignore[attr-defined]
        assert "4xx 0 · 5xx 1" in body and "queue: 1 answered 503" in body
        assert "/api/chat" in body and "2m39s" in body  # p50 of the chat latencies
        assert "restarts: 2 (systemd NRestarts (ollama.service))" in body
        assert "OLLAMA_API_KEY=****" in body and "cgroup v2: memory 32.0 GiB (using 7.0 GiB) · CPU 8 cores" in body
        assert "num_ctx 8192=" in body  # the server env's OLLAMA_CONTEXT_LENGTH, its mark '=' after it
        for tag in _pulled().tags.values():  # type: ignore[union-attr]
            assert tag.name in body
        await pilot.press("escape")
        await pilot.pause(0.1)
        assert not isinstance(app.screen, ServerScreen)  # type: ignore[attr-defined]


def _fixed() -> ServerScreen:
    return ServerScreen(clock=lambda: TAKEN_AT)


def test_server_screen_80x24(snap_compare: object) -> None:
    async def run(pilot: object) -> None:
        await _feed(pilot)
        await pilot.app.push_screen(_fixed())  # type: ignore[attr-defined]
        await pilot.pause(0.2)  # type: ignore[attr-defined]

    assert snap_compare(_app(), terminal_size=(80, 24), run_before=run)  # type: ignore[operator]


def test_server_screen_160x48(snap_compare: object) -> None:
    async def run(pilot: object) -> None:
        await _feed(pilot)
        await pilot.app.push_screen(_fixed())  # type: ignore[attr-defined]
        await pilot.pause(0.2)  # type: ignore[attr-defined]

    assert snap_compare(_app(), terminal_size=(160, 48), run_before=run)  # type: ignore[operator]


def test_preflight_says_what_num_ctx_it_assumed_without_the_vram_total() -> None:
    """No GPU telemetry on an Ollama v0.15.5+ server: the rows are at ~4096, and the view says that
    is an assumption (the default follows the total VRAM), within the width (80 and 160)."""
    from kvtop.model.preflight import preflight, server_defaults
    from kvtop.model.server_health import ServerInfo
    from kvtop.ui.screens.server_view import preflight_lines

    pulled = _pulled()
    defaults = server_defaults("0.22.1", None, None)
    rows = preflight(pulled, defaults, free_bytes=None)
    assert rows and all(r.num_ctx.value == 4096 and r.verdict == "unknown" for r in rows)
    for width in (80, 160):
        text = [t.plain for t in preflight_lines(defaults, rows, ServerInfo(pulled=pulled), width)]
        said = [line for line in text if "assumed" in line]
        assert len(said) == 1 and "4096~" in said[0] and ("VRAM" in said[0] or "total memory" in said[0])
        assert all(len(line) <= width - 2 for line in text), [line for line in text if len(line) > width - 2]
    known = server_defaults("0.22.1", None, 24 * GiB)
    assert not any(
        "assumed" in t.plain
        for t in preflight_lines(known, preflight(pulled, known, free_bytes=None), ServerInfo(pulled=pulled), 160)
    )


def test_traffic_without_access_lines_says_where_it_looks() -> None:
    from kvtop.model.traffic import Traffic
    from kvtop.ui.screens.server_view import traffic_lines

    def text(source: str | None) -> str:
        return "\n".join(line.plain for line in traffic_lines(Traffic(), source, None, 80))

    assert "kvtop is still looking for the server log (--log names it)" in text("auto")  # was "… yet in auto"
    assert "no access lines yet in journal:ollama" in text("journal:ollama")
    assert "no server log (--log)" in text(None)
