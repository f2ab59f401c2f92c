"""The capped history: bucketing, caps, markers, window slicing, and a long scripted run."""

from __future__ import annotations

import dataclasses

import pytest

from kvtop.model.gpu_snapshots import GpuDevice, GpuSnapshot
from kvtop.model.history import MAX_MARKERS, History, Series, downsample, sparkline
from kvtop.model.logstate import Throughput
from kvtop.model.views import AppState
from kvtop.model.fold_alerts import fold_with_alerts, fold_gpu_with_alerts
from kvtop.model.gpu_snapshots import ProcSnapshot
from kvtop.demo.logwriter import script_lines
from kvtop.logparse.load_build import Load
from kvtop.logparse.load_grouping import group_loads
from kvtop.logparse.parser import parse_lines
from tests.ui.fakes import HOST, TAKEN_AT, scenario, snapshot_at, step_index

GiB = 1024**3


def _state_at(step: int, t: float, prev: AppState | None = None) -> AppState:
    return fold_with_alerts(prev or AppState(host_url=HOST), snapshot_at(step, taken_at=t))


def _gpu(t: float, used: int, total: int = 24 * GiB, index: int = 0) -> GpuSnapshot:
    return GpuSnapshot(
        taken_at=t,
        status="GPU telemetry: NVML",
        ok=True,
        backend="nvml",
        devices=(
            GpuDevice(
                index=index,
                name="NVIDIA RTX 4090",
                memory_total_bytes=total,
                memory_used_bytes=used,
                memory_free_bytes=total - used,
            ),
        ),
    )


def test_samples_in_one_bucket_coalesce_newest_wins() -> None:
    s = Series(bucket_s=1.0, retention_s=10.0)
    s.add(100.0, 1.0)
    s.add(100.25, 2.0)
    s.add(100.75, 3.0)
    assert len(s) == 1 and s.latest == (100.0, 3.0)
    s.add(101.1, 4.0)
    assert s.window(0, 1e9) == ((100.0, 3.0), (101.0, 4.0))


def test_a_sample_older_than_the_newest_bucket_never_goes_back_in_time() -> None:
    s = Series(bucket_s=1.0, retention_s=10.0)
    s.add(105.0, 1.0)
    s.add(103.0, 9.0)
    assert s.window(0, 1e9) == ((105.0, 9.0),)


def test_series_cap_and_retention() -> None:
    s = Series(bucket_s=1.0, retention_s=10.0)
    assert s.cap == 10
    for i in range(50):
        s.add(1000.0 + i, float(i))
    assert len(s) == 10
    assert s.window(0, 1e9)[0] == (1040.0, 40.0)
    s.add(2000.0, 1.0)  # a long gap: everything older than the retention goes
    assert s.window(0, 1e9) == ((2000.0, 1.0),)


def test_invalid_bucket_is_refused() -> None:
    with pytest.raises(ValueError):
        Series(bucket_s=0.0)
    with pytest.raises(ValueError):
        Series(bucket_s=10.0, retention_s=5.0)


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        (0.0, 1e9, (10.0, 11.0, 12.0, 13.0, 14.0)),
        (11.0, 13.0, (11.0, 12.0, 13.0)),
        (11.5, 12.5, (12.0,)),
        (20.0, 30.0, ()),
    ],
)
def test_window_slicing(start: float, end: float, expected: tuple[float, ...]) -> None:
    s = Series(bucket_s=1.0, retention_s=100.0)
    for t in range(10, 15):
        s.add(float(t), float(t) * 2)
    assert tuple(t for t, _ in s.window(start, end)) == expected


def test_downsample_keeps_the_peak_of_each_slice() -> None:
    pts = tuple((float(t), 100.0 if t == 37 else 1.0) for t in range(100))
    out = downsample(pts, 0.0, 100.0, 10)
    assert len(out) == 10
    assert (37.0, 100.0) in out
    assert downsample(pts[:5], 0.0, 100.0, 10) == pts[:5]


@pytest.mark.parametrize(
    ("values", "cells", "expected"),
    [
        ([(0.0, 1.0), (10.0, 1.0), (20.0, 1.0)], 3, "███"),
        ([(0.0, 1.0), (29.0, 8.0)], 3, "▂ █"),  # 1/8 of the peak: index round(7 / 8) = 1
        ([(20.0, 4.0)], 3, "  █"),
        ([], 3, "   "),
        ([(0.0, 0.0), (29.0, 0.0)], 3, "▁ ▁"),
    ],
)
def test_sparkline(values: list[tuple[float, float]], cells: int, expected: str) -> None:
    assert sparkline(values, 0.0, 30.0, cells) == expected


def test_models_are_recorded_with_their_vram_size_and_kv() -> None:
    h = History()
    step = step_index("raised to 32768")
    state = _state_at(step, TAKEN_AT)
    assert h.record(state, TAKEN_AT) and h.version == 1
    view = state.models[0]
    series = h.model(view.name, view.digest)
    assert series is not None
    assert series.vram_bytes.latest == (TAKEN_AT, float(view.size_vram_bytes or 0))
    assert series.size_bytes.latest == (TAKEN_AT, float(view.size_bytes or 0))
    assert series.kv_bytes.latest == (TAKEN_AT, float(view.memory.kv.value or 0))
    assert view.memory.kv.value == 3_758_096_384  # 3.5 GiB: qwen3 1.7B at 32768 cells, f16
    assert series.kv_source == "estimated"
    assert not h.record(state, TAKEN_AT + 5)  # the same snapshot again stores nothing
    assert h.version == 1


def test_load_unload_and_reload_markers() -> None:
    h = History()
    t = TAKEN_AT
    state = _state_at(0, t)
    h.record(state, t)
    for i, label in enumerate(
        (
            "loads at num_ctx 4096",
            "raised to 32768",
            "A second model",
            "gemma4 loads",
            "gemma4 finished",
            "Models unloaded",
        ),
        1,
    ):
        state = _state_at(step_index(label), t + 10 * i, state)
        h.record(state, t + 10 * i)
    got = [(m.t_s - t, m.kind, m.model) for m in h.markers]
    assert got == [
        (10, "load", "qwen3:1.7b-q8_0"),
        (20, "reload", "qwen3:1.7b-q8_0"),
        (30, "load", "qwen3:1.7b-q4_K_M"),
        (40, "load", "gemma4:latest"),
        (50, "reload", "qwen3:1.7b-q8_0"),
        (50, "unload", "gemma4:latest"),
        (60, "unload", "qwen3:1.7b-q4_K_M"),
        (60, "unload", "qwen3:1.7b-q8_0"),
    ]
    assert [m.kind for m in h.markers_between(t + 25, t + 45)] == ["load", "load"]


def _with_loads(state: AppState, loads: dict[str, int | None], all_loads: list[Load]) -> AppState:
    """``state`` with its rows paired to the demo log's loads by index (None: not paired yet)."""
    models = tuple(
        dataclasses.replace(v, load=None if loads.get(v.name) is None else all_loads[loads[v.name] or 0])
        for v in state.models
    )
    return dataclasses.replace(state, models=models)


def test_a_row_paired_with_its_load_a_poll_late_is_not_a_reload() -> None:
    """The demo's races: a new model's /api/show, which pairs it with its runner log
    load, arrives a poll after /api/ps lists it; during a reload the log and /api/ps are read at
    different times, so for a poll the row pairs with no load. Each load or reload is one marker."""
    loads = group_loads(parse_lines(script_lines(scenario())))
    assert [ld.num_ctx_per_seq for ld in loads] == [4096, 32768, 4096, 4096, 4096]  # q8, q8, q4, gemma4, q8
    h = History()
    t = TAKEN_AT
    state = _state_at(0, t)
    h.record(state, t)
    q8, q4, gemma = "qwen3:1.7b-q8_0", "qwen3:1.7b-q4_K_M", "gemma4:latest"
    plan: list[tuple[float, str, dict[str, int | None]]] = [
        (10, "loads at num_ctx 4096", {q8: None}),  # /api/show not read yet
        (11, "loads at num_ctx 4096", {q8: 0}),
        (20, "raised to 32768", {q8: None}),  # /api/ps has the new runner, the log not yet
        (21, "raised to 32768", {q8: 1}),
        (30, "A second model", {q8: 1, q4: None}),
        (31, "A second model", {q8: 1, q4: 2}),
        (40, "gemma4 loads", {q8: 1, q4: 2, gemma: 3}),
        (49, "gemma4 loads", {q8: None, q4: 2, gemma: 3}),  # the log has q8's new load, /api/ps not yet
        (50, "gemma4 finished", {q8: 4, q4: 2}),
    ]
    prev = state
    for dt, label, paired in plan:
        prev = _with_loads(_state_at(step_index(label), t + dt, prev), paired, loads)
        h.record(prev, t + dt)
    got = [(m.t_s - t, m.kind, m.model) for m in h.markers]
    assert got == [
        (10, "load", q8),
        (20, "reload", q8),
        (30, "load", q4),
        (40, "load", gemma),
        (50, "reload", q8),
        (50, "unload", gemma),
    ]


def test_models_loaded_before_the_first_sample_are_not_loads() -> None:
    h = History()
    h.record(_state_at(step_index("gemma4 loads"), TAKEN_AT), TAKEN_AT)
    assert list(h.markers) == []


def test_gpu_devices_are_recorded_from_their_own_sample_time() -> None:
    h = History()
    state = fold_gpu_with_alerts(AppState(host_url=HOST), _gpu(500.0, 3 * GiB), ProcSnapshot(taken_at=500.0))
    h.record(state, 900.0)
    dev = h.devices[0]
    assert dev.used_bytes.latest == (500.0, 3.0 * GiB)
    assert dev.total_bytes.latest == (500.0, 24.0 * GiB)
    assert h.latest_s == 500.0 and h.gpu_note is None
    failed = fold_gpu_with_alerts(
        state, GpuSnapshot(taken_at=501.0, status="GPU telemetry: no NVIDIA driver"), ProcSnapshot(taken_at=501.0)
    )
    h.record(failed, 901.0)
    assert h.gpu_note == "GPU telemetry: no NVIDIA driver" and len(dev.used_bytes) == 1


def test_decode_tps_is_one_point_per_new_request() -> None:
    h = History()
    base = _state_at(step_index("raised to 32768"), TAKEN_AT)

    def with_tps(requests: int, tps: float, t: float) -> AppState:
        snap = dataclasses.replace(base.last_ok, taken_at=t)
        view = dataclasses.replace(base.models[0], throughput=Throughput(requests, 900.0, tps, tps, requests))
        return dataclasses.replace(base, last_ok=snap, ollama=snap, models=(view,))

    h.record(with_tps(1, 41.5, TAKEN_AT), TAKEN_AT)
    h.record(with_tps(1, 41.5, TAKEN_AT + 2), TAKEN_AT + 2)  # same newest request: no new point
    h.record(with_tps(2, 38.0, TAKEN_AT + 4), TAKEN_AT + 4)
    view = base.models[0]
    series = h.model(view.name, view.digest)
    assert series is not None
    assert series.decode_tps.window(0, 1e12) == ((TAKEN_AT, 41.5), (TAKEN_AT + 4, 38.0))
    assert series.requests_per_min.latest == (TAKEN_AT + 4, 2.0)


def test_model_count_is_capped_and_gone_models_are_forgotten() -> None:
    h = History(max_models=4)
    base = _state_at(step_index("raised to 32768"), TAKEN_AT)
    view = base.models[0]
    for i in range(10):
        t = TAKEN_AT + i
        snap = dataclasses.replace(base.last_ok, taken_at=t)
        renamed = dataclasses.replace(view, name=f"model-{i}:latest")
        h.record(dataclasses.replace(base, last_ok=snap, ollama=snap, models=(renamed,)), t)
    assert len(h.models) == 4
    assert sorted(k[0] for k in h.models) == ["model-6:latest", "model-7:latest", "model-8:latest", "model-9:latest"]
    late = TAKEN_AT + 9 + 3601
    snap = dataclasses.replace(base.last_ok, taken_at=late)
    h.record(dataclasses.replace(base, last_ok=snap, ollama=snap, models=(view,)), late)
    assert list(h.models) == [(view.name, view.digest)]  # gone for more than an hour: forgotten


def test_long_run_stays_at_the_cap() -> None:
    """100 000 samples at 0.25 s (about 7 h): the stored points stop growing at the cap."""
    h = History()
    states = [_state_at(step_index("gemma4 loads"), TAKEN_AT), _state_at(step_index("A second model"), TAKEN_AT)]
    proc = ProcSnapshot(taken_at=0.0)
    t = TAKEN_AT
    counts = []
    for i in range(100_000):
        t = TAKEN_AT + i * 0.25
        base = states[(i // 20_000) % 2]  # gemma4 loads and unloads every 20 000 samples
        snap = dataclasses.replace(base.last_ok, taken_at=t)
        state = dataclasses.replace(base, last_ok=snap, ollama=snap, gpu=_gpu(t, (10 + i % 7) * GiB), procs=proc)
        h.record(state, t)
        if i % 10_000 == 9_999:
            counts.append(h.point_count())
    cap = 3600
    models = len(h.models)
    assert models == 3  # gemma4 was seen within the last hour
    assert all(len(s) <= cap for m in h.models.values() for s in m.series())
    assert len(h.devices[0].used_bytes) == cap and len(h.devices[0].total_bytes) == cap
    # per loaded model: vram, size and KV series; per device: used and total
    assert h.point_count() <= 2 * cap + models * 3 * cap
    # three models loaded for more than an hour: every series is full, and stays so
    assert counts[-1] == counts[-5] == 2 * cap + 3 * 3 * cap
    assert max(counts) == 2 * cap + 3 * 3 * cap
    assert len(h.markers) <= MAX_MARKERS
    assert all(t - m.t_s <= 3600 for m in h.markers)
    assert h.span_s() <= 3600


def test_without_a_time_the_state_s_newest_sample_dates_the_points() -> None:
    """The app passes no clock: throughput points take the state's newest sample time (a replay
    plots recorded time), and a state without any sample stores nothing."""
    h = History()
    assert not h.record(AppState("http://127.0.0.1:11434"))
    base = _state_at(step_index("raised to 32768"), TAKEN_AT)
    view = dataclasses.replace(base.models[0], throughput=Throughput(1, 900.0, 41.5, 41.5, 1))
    assert h.record(dataclasses.replace(base, models=(view,)))
    series = h.model(view.name, view.digest)
    assert series is not None and series.decode_tps.latest == (TAKEN_AT, 41.5)
