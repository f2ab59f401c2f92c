"""The history screen (h): keys, windows, idle re-renders, and snapshots at 80×24 and 160×48."""

from __future__ import annotations

import dataclasses
from typing import Any

from kvtop.config import Settings
from kvtop.model.gpu_snapshots import GpuDevice, GpuSnapshot, ProcSnapshot
from kvtop.model.history import History
from kvtop.model.logstate import Throughput
from kvtop.model.views import AppState
from kvtop.model.fold_alerts import fold_with_alerts, fold_gpu_with_alerts
from kvtop.ui.app import KvtopApp, make_app
from kvtop.ui.format import ibytes
from kvtop.ui.screens.dashboard import DashboardScreen
from kvtop.ui.screens.history import HistoryScreen, gpu_spec, kv_spec, tps_spec
from kvtop.ui.widgets.models_table import ModelsTable
from kvtop.ui.widgets.plot import PlotView, render_plot
from tests.fakes.gpu_sources import FixedGpuSource, FixedProcSource
from tests.ui.fakes import HOST, TAKEN_AT, FakeSource, snapshot_at, step_index

GiB = 1024**3


def scripted_history() -> History:
    """Nine minutes of the demo scenario at fixed times, one poll every 2 s, with a 24 GiB GPU
    whose use follows the models, and decode timings for qwen3:1.7b-q8_0 every 30 s."""
    h = History()
    plan = [
        (0, "loads at num_ctx 4096"),
        (120, "raised to 32768"),
        (240, "A second model"),
        (330, "gemma4 loads"),
        (450, "gemma4 finished"),
    ]
    start = TAKEN_AT - 540
    state = fold_with_alerts(AppState(host_url=HOST), snapshot_at(0, taken_at=start - 2))
    h.record(state, start - 2)
    requests = 0
    for t in range(0, 541, 2):
        step = max(step_index(label) for at, label in plan if at <= t)
        now = start + t
        state = fold_with_alerts(state, snapshot_at(step, taken_at=now))
        vram = sum(m.size_vram_bytes or 0 for m in state.models)
        gpu = GpuSnapshot(
            taken_at=now,
            status="GPU telemetry: NVML",
            ok=True,
            backend="nvml",
            devices=(
                GpuDevice(
                    index=0, name="NVIDIA RTX 4090", memory_total_bytes=24 * GiB, memory_used_bytes=vram + GiB // 2
                ),
            ),
        )
        state = fold_gpu_with_alerts(state, gpu, ProcSnapshot(taken_at=now))
        if t % 30 == 0:
            requests += 1
        views = tuple(
            dataclasses.replace(v, throughput=Throughput(requests, 900.0, 40.0 + (requests % 5) * 3, 42.0, 2))
            if v.name == "qwen3:1.7b-q8_0"
            else v
            for v in state.models
        )
        h.record(dataclasses.replace(state, models=views), now)
    return h


def _app(**kw: Any) -> KvtopApp:
    return make_app(
        Settings(host_url=HOST, interval_s=0.25, **kw),
        FakeSource(snapshot_at(step_index("raised to 32768")), hold=True),
        gpu_source=FixedGpuSource(),
        proc_source=FixedProcSource(),
    )


async def _settle(pilot: Any) -> None:
    app = pilot.app
    for _ in range(100):
        await pilot.pause(0.05)
        if app.state is not None and app.state.ollama is not None and app.query_one(ModelsTable).row_count == 1:
            break
    else:
        raise AssertionError("the dashboard did not settle")


def test_specs_from_the_scripted_history() -> None:
    h = scripted_history()
    gpu = gpu_spec(h, 600.0, 200, 5.0)
    assert gpu.empty is None and gpu.title.startswith("GPU memory, GiB (NVML)")
    used = gpu.lines[0]
    assert used.label == "GPU 0 used" and -3.0 < used.points[-1][0] <= 0.0  # the end rounds up to a 3 s slot
    last = snapshot_at(step_index("gemma4 finished"))
    expected = sum(m.size_vram_bytes or 0 for m in last.models) + GiB // 2
    assert used.latest == f"{ibytes(expected)} of 24.0 GiB" == "4.8 GiB of 24.0 GiB"
    assert gpu.lines[1].kind == "reference" and gpu.lines[1].points == ((0.0, 24.0),)
    assert [m.text for m in gpu.markers] == [
        "load qwen3:1.7b-q8_0",
        "reload qwen3:1.7b-q8_0",
        "load qwen3:1.7b-q4_K_M",
        "load gemma4:latest",
        "reload qwen3:1.7b-q8_0",
        "unload gemma4:latest",
    ]
    tps = tps_spec(h, 600.0, 200, "")
    assert [ln.label for ln in tps.lines] == ["qwen3:1.7b-q8_0"]
    assert len(tps.lines[0].points) == 19  # one point per new request (every 30 s over 9 min)
    assert tps.lines[0].latest == "52.0 · 2 req/min"  # the 19th request: 40 + (19 % 5) × 3
    kv = kv_spec(h, 600.0, 200, 5.0)
    assert kv.title.startswith("KV cache per model, GiB (estimated)")
    assert {ln.label for ln in kv.lines} == {"qwen3:1.7b-q8_0", "qwen3:1.7b-q4_K_M", "gemma4:latest"}
    one_min = gpu_spec(h, 60.0, 200, 5.0)
    assert all(x >= -60 for ln in one_min.lines for x, _ in ln.points)
    assert [m.text for m in one_min.markers] == []


def test_empty_history_says_so_in_words() -> None:
    h = History()
    assert gpu_spec(h, 60.0, 100, 5.0).empty == "no sample yet: the first poll has not returned"
    text = render_plot(tps_spec(h, 60.0, 100, "timings come from the server log (--log), which is off"), 80, 7, {})
    assert "no sample yet" in text.plain


def test_no_gpu_telemetry_plots_model_vram_and_says_why() -> None:
    h = History()
    state = fold_with_alerts(AppState(host_url=HOST), snapshot_at(step_index("raised to 32768"), taken_at=TAKEN_AT))
    state = fold_gpu_with_alerts(
        state, GpuSnapshot(taken_at=TAKEN_AT, status="GPU telemetry: no NVIDIA driver"), ProcSnapshot(taken_at=TAKEN_AT)
    )
    h.record(state, TAKEN_AT)
    spec = gpu_spec(h, 60.0, 100, 5.0)
    assert spec.title == "Model VRAM, GiB (/api/ps size_vram) · last 1 min · GPU telemetry: no NVIDIA driver"
    assert [ln.label for ln in spec.lines] == ["qwen3:1.7b-q8_0"]
    tps = tps_spec(h, 60.0, 100, "timings come from the server log (--log), which is off")
    assert tps.empty == "no timed request in the last 1 min: timings come from the server log (--log), which is off"


async def test_h_opens_z_cycles_escape_returns() -> None:
    app = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        await _settle(pilot)
        await pilot.press("h")
        await pilot.pause(0.1)
        screen = app.screen
        assert isinstance(screen, HistoryScreen)
        assert screen.window_s == 60.0  # kvtop just started: the 1 min window
        title = str(screen.query_one("#history-title").render())
        assert "1 min window" in title
        await pilot.press("z")
        assert screen.window_s == 600.0
        await pilot.press("z")
        assert screen.window_s == 3600.0
        await pilot.pause(0.05)
        # a few seconds of history: the axis spans what there is, not an hour of empty space
        assert "last 30 s" in (screen.query_one("#plot-gpu", PlotView).spec or gpu_spec(History(), 1, 1, 1)).title
        assert "1 h window, 30 s shown (all there is)" in str(screen.query_one("#history-title").render())
        await pilot.press("z")
        assert screen.window_s == 60.0
        await pilot.press("left")
        assert screen.window_s == 3600.0
        await pilot.press("right")
        assert screen.window_s == 60.0
        await pilot.press("escape")
        await pilot.pause(0.05)
        assert isinstance(app.screen, DashboardScreen)
        await pilot.press("h")
        await pilot.pause(0.05)
        await pilot.press("q")  # q closes the plots, it does not quit kvtop
        await pilot.pause(0.05)
        assert isinstance(app.screen, DashboardScreen) and app.is_running


async def test_the_app_records_history_and_the_table_shows_the_sparkline() -> None:
    app = _app()
    async with app.run_test(size=(160, 40)) as pilot:
        await _settle(pilot)
        history = app.histories[HOST]
        view = app.state.models[0]
        series = history.model(view.name, view.digest)
        assert series is not None and series.vram_bytes.latest == (TAKEN_AT, float(view.size_vram_bytes or 0))
        table = app.query_one(ModelsTable)
        assert [str(c.label) for c in table.columns.values()][-1] == "VRAM 1m"
        assert table.get_row_at(0)[-1].plain == "      █"  # one sample: the newest slice of the minute


async def test_idle_plots_do_not_re_render() -> None:
    app = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        await _settle(pilot)
        app.histories[HOST] = scripted_history()
        await pilot.press("h")
        await pilot.pause(0.3)
        plots = list(app.screen.query(PlotView))
        before = [p.renders for p in plots]
        assert all(n >= 1 for n in before[:1])
        await pilot.pause(1.0)  # the GPU source keeps polling (same sample): nothing new to draw
        assert [p.renders for p in plots] == before


def _snap_app() -> KvtopApp:
    return _app()


async def _open_history(pilot: Any) -> None:
    await _settle(pilot)
    pilot.app.histories[HOST] = scripted_history()
    await pilot.press("h")
    await pilot.pause(0.3)


def test_history_80x24(snap_compare: Any) -> None:
    assert snap_compare(_snap_app(), terminal_size=(80, 24), run_before=_open_history)


def test_history_160x48(snap_compare: Any) -> None:
    assert snap_compare(_snap_app(), terminal_size=(160, 48), run_before=_open_history)


def test_the_gpu_plot_names_where_its_figures_come_from() -> None:
    """The GPU memory plot's title names its source: NVML, the amdgpu/Intel sysfs, ioreg, or the
    demo's simulated GPU (it said "(NVML)" for every one of them)."""
    from kvtop.demo.machine import DEMO_GPU_STATUS

    for backend, status, label in (
        ("nvml", "GPU telemetry: NVML", "NVML"),
        ("amd-sysfs", "", "amdgpu sysfs"),
        ("ioreg", "", "ioreg"),
        ("nvml", DEMO_GPU_STATUS, "DEMO, simulated"),
    ):
        h = History()
        state = fold_with_alerts(AppState(host_url=HOST), snapshot_at(step_index("spills"), taken_at=TAKEN_AT))
        gpu = GpuSnapshot(
            taken_at=TAKEN_AT,
            status=status,
            ok=True,
            backend=backend,  # type: ignore[arg-type]
            devices=(GpuDevice(index=0, name="a GPU", memory_total_bytes=24 * 2**30, memory_used_bytes=8 * 2**30),),
        )
        h.record(fold_gpu_with_alerts(state, gpu, ProcSnapshot(taken_at=TAKEN_AT)), TAKEN_AT)
        assert gpu_spec(h, 600.0, 200, 5.0).title.startswith(f"GPU memory, GiB ({label}) · last"), label
