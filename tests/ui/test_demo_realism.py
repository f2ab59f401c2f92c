"""Demo realism: the demo shows a machine and a server as they would be, never the host's.

* ``--demo`` shows the scenario's machine: its simulated GPU, RAM and processes are the
  stand-in's (``GET /_standin/machine``: RAM growing by what a spilled model holds in system RAM,
  one runner per loaded model and another user's job on the GPU), never the host's.
* The bundled recordings carry neither the recording host's temporary log path nor its RAM.
* The sorted column is marked in the table header (``▼`` largest first, ``▲`` A to Z, flipped by ``S``).
"""

from __future__ import annotations

import httpx

from kvtop.config import Settings
from kvtop.demo.log_lines import LLAMA_SERVER
from kvtop.demo.machine import DEMO_GPU_STATUS, DemoMachineSource, NoProcSource
from kvtop.model.memmap import state_memory_map
from kvtop.sources.recording import read_recording, resolve_recording
from kvtop.ui.app import make_app
from kvtop.ui.widgets.models_table import Column, sorted_label
from tests.standin import BUNDLED, running
from tests.ui.fakes import FakeSource, snapshot_at, step_index
from tests.ui.screen_text import screen_lines
from tests.ui.test_plan_screen import wait_for

GIB = 1024**3


async def test_demo_machine_ram_is_the_scenarios_and_grows_with_a_spill() -> None:
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        source = DemoMachineSource(server.url)
        try:
            server.goto(step_index("raised to 32768"))
            calm = await source.sample()
            calm_procs = await source.procs_source().sample(calm.pids)
            server.goto(step_index("spills"))
            spilled = await source.sample()
        finally:
            await source.aclose()
        ps = httpx.get(f"{server.url}/api/ps", timeout=5).json()["models"]
    assert calm.status == DEMO_GPU_STATUS and calm.ok
    (device,) = calm.devices
    assert device.name == "NVIDIA GeForce RTX 4060 Ti (DEMO)"
    # the one runner holds qwen3's size_vram and its 240 MiB CUDA context, dana's job 2500 MiB; the driver's
    # 80 MiB are used but unlisted
    on_gpu = {p.pid: p.used_memory_bytes for p in device.processes}
    assert on_gpu == {4100: 6_106_141_568 + 251_658_240, 23011: 2_621_440_000}
    assert device.memory_used_bytes == 6_106_141_568 + 251_658_240 + 2_621_440_000 + 83_886_080
    (runner,) = calm_procs.runners
    assert runner.pid == 4100 and runner.kind == "llama-server" and runner.ctx_size == 32768
    assert calm_procs.processes[23011].user == "dana"
    assert calm.system is not None and spilled.system is not None
    assert calm.system.ram_total_bytes == 32 * GIB and calm.system.ram_used_bytes == 3 * GIB
    in_ram = sum(m["size"] - m["size_vram"] for m in ps)
    assert in_ram > 0 and spilled.system.ram_used_bytes == 3 * GIB + in_ram
    procs = await NoProcSource().sample((1, 2, 3))
    assert procs.runners == () and procs.servers == ()


async def test_demo_dashboard_shows_the_demo_machines_gpu_and_ram() -> None:
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(step_index("raised to 32768"))
        machine = DemoMachineSource(server.url)
        app = make_app(
            Settings(host_url=server.url, interval_s=0.25, log_spec="none", demo=True),
            gpu_source=machine,
            proc_source=machine.procs_source(),
        )
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(
                pilot, lambda: app.state is not None and app.state.gpu is not None and app.state.gpu.system is not None
            )
            await pilot.pause(0.1)
            lines = screen_lines(app)
            bar = next(b for b in state_memory_map(app.state).bars if b.key == "GPU0")
    gpu_line = next(line for line in lines if line.lstrip().startswith("GPU0"))
    assert "RTX 4060 Ti" in gpu_line and "8.4G/16G" in gpu_line
    # the runner's NVML figure is its size_vram + its CUDA context: the map shows that as the runner's overhead,
    # and only the driver's own 80 MiB as unattributed
    by_kind = {(s.kind, s.label): s.bytes for s in bar.segments}
    assert by_kind[("overhead", "qwen3:1.7b-q8_0")] == 251_658_240
    assert by_kind[("unattributed", "unattributed")] == 83_886_080
    assert any("RAM 3.0G/32G" in line for line in lines)


def test_bundled_recordings_carry_no_host_path_or_host_ram() -> None:
    for name in ("demo", "incident"):
        rec = read_recording(resolve_recording(name))
        log = rec.header.sources.get("log")
        assert log == "file:server.log", log
        sources = {r.log.source for r in rec.records if r.log is not None}
        assert sources <= {log}, sources
        gpus = [r for r in rec.records if r.kind == "gpu"]
        assert gpus, name
        for r in gpus:
            snap = r.gpu
            assert snap is not None and snap.status == DEMO_GPU_STATUS
            assert [d.name for d in snap.devices] in (
                ["NVIDIA GeForce RTX 4060 Ti (DEMO)"],
                ["NVIDIA GeForce RTX 3060 (DEMO)"],
            )
            # the simulated runners only: llama-server of the scenario, no process of the recording host
            assert r.procs is None or all(p.cmdline[:1] == (LLAMA_SERVER,) for p in r.procs.runners)
            assert snap.system is not None and snap.system.ram_total_bytes == 32 * GIB


def test_sorted_label_marks_the_column_and_its_direction() -> None:
    size = Column("size", "SIZE", 8, lambda v, c: "")
    memory = Column("memory", "MEMORY w|KV|c", 18, lambda v, c: "")
    name = Column("name", "NAME", 20, lambda v, c: "")
    assert sorted_label(size, "server") == "SIZE"
    assert sorted_label(size, "size") == "SIZE ▼" and sorted_label(size, "size", True) == "SIZE ▲"
    assert sorted_label(name, "name") == "NAME ▲" and sorted_label(name, "name", True) == "NAME ▼"
    assert sorted_label(memory, "kv") == "MEMORY w|KV▼|c" and sorted_label(size, "kv") == "SIZE"
    spilled = Column("size", "VRAM+RAM", 9, lambda v, c: "")
    assert sorted_label(spilled, "size") == "VRAM+RAM▼" and sorted_label(spilled, "server") == "VRAM+RAM"


async def test_the_sorted_column_is_marked_in_the_header() -> None:
    app = make_app(
        Settings(host_url="http://127.0.0.1:11434", interval_s=0.25),
        FakeSource(snapshot_at(step_index("spills")), hold=True),
    )
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: bool(app.state.models))

        def header() -> str:
            return next(line for line in screen_lines(app) if "NAME" in line and "PROCESSOR" in line)

        assert "▼" not in header() and "▲" not in header()  # the server's order: no column
        seen = {}
        for key in ("size", "name", "cpu", "context", "kv"):
            await pilot.press("s")
            await wait_for(pilot, lambda: app.sort_key == key)
            await pilot.pause(0.05)
            seen[key] = header()
        # gemma4 is spilled: SIZE reads VRAM+RAM; it and CONTEXT (8 cells at 80 columns) have no room
        # for the space before the mark (the header would cut the mark off)
        assert "VRAM+RAM▼" in seen["size"] and "NAME ▲" in seen["name"] and "PROCESSOR ▼" in seen["cpu"]
        assert "CONTEXT▼" in seen["context"] and "KV▼" in seen["kv"]
        for key, line in seen.items():
            assert line.count("▼") + line.count("▲") == 1, (key, line)
        await pilot.press("S")
        await pilot.pause(0.1)
        assert "KV▲" in header()
