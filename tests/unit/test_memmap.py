"""The memory map's segments (``kvtop.model.memmap``), in exact bytes and sources, from GPU and
process samples made by the real sources (fakes at their boundaries) and the demo scenario's models."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from kvtop.model.gpu_snapshots import GpuSnapshot, SystemMemory
from kvtop.demo.log_lines import load_lines, restamp
from kvtop.logparse.parser import parse_lines
from kvtop.model.logstate import LogState, fold_events
from kvtop.model.memmap import DeviceBar, gpu_device_index, loading_runners, memory_map
from kvtop.model.model_row import SHOW_PENDING
from kvtop.model.views import ModelView
from kvtop.sources.gpu_nvml import STATUS_NO_LIBRARY
from tests.fakes.nvml import GiB, MiB
from tests.fakes.scenario import Q4_PID, Q8_PID, shared_sample
from tests.ui.fakes import scenario
from tests.ui.mapfakes import foreign_nvml, one_gpu_nvml, sample_with, with_devices

Q4, GEMMA, Q8 = "qwen3:1.7b-q4_K_M", "gemma4:latest", "qwen3:1.7b-q8_0"


def _rows(bar: DeviceBar) -> list[tuple[str, int, str, str]]:
    return [(s.kind, s.bytes, s.source, s.label) for s in bar.segments]


def test_gpu_index_of_log_devices() -> None:
    assert [gpu_device_index(d) for d in ("CUDA0", "CUDA1", "ROCm2", "Vulkan0", "Metal")] == [0, 1, 2, 0, 0]
    assert [gpu_device_index(d) for d in ("CPU", "CPU_Mapped", "CUDA_Host", "BLAS", "")] == [None] * 5


def test_two_gpus_split_and_spilled_model(tmp_path: Path) -> None:
    gpu, procs, models = shared_sample(tmp_path)
    mm = memory_map(gpu, procs, models)
    assert mm.telemetry and [b.key for b in mm.bars] == ["GPU0", "GPU1", "RAM"]
    gpu0, gpu1, ram = mm.bars
    assert (gpu0.total_bytes, gpu0.free_bytes) == (48 * GiB, 48 * GiB - 512 * MiB - 14 * GiB)
    assert _rows(gpu0) == [
        # one GPU, not spilled: the model's own figures, and NVML's 2 GiB minus them
        ("weights", 1_360_000_000, "reported", Q4),
        ("kv", 469_762_048, "estimated", Q4),
        ("compute", 64_321_408, "estimated", Q4),
        ("overhead", 2 * GiB - 1_360_000_000 - 469_762_048 - 64_321_408, "estimated", Q4),
        # split over two GPUs with weights not known: what NVML measures, not broken down
        ("model", 3 * GiB + 512 * MiB, "reported", GEMMA),
        ("other", 8 * GiB, "reported", "alice python"),
        # total − free − listed: the driver's 512 MiB reserve is in it (NVML's free is net of it)
        (
            "unattributed",
            48 * GiB - (48 * GiB - 512 * MiB - 14 * GiB) - 2 * GiB - (3 * GiB + 512 * MiB) - 8 * GiB,
            "estimated",
            "unattributed",
        ),
        ("free", 48 * GiB - 512 * MiB - 14 * GiB, "reported", "free"),
    ]
    assert _rows(gpu1)[0] == ("model", 1 * GiB + 768 * MiB, "reported", GEMMA)
    assert ("other", 300 * MiB, "reported", "Xorg") in _rows(gpu1)
    gemma = next(m for m in models if m.name == GEMMA)
    assert gemma.size_bytes is not None and gemma.size_vram_bytes is not None
    cpu_part = gemma.size_bytes - gemma.size_vram_bytes
    assert cpu_part == 1_258_291_200
    assert _rows(ram) == [
        ("model", cpu_part, "reported", GEMMA),  # /api/ps size − size_vram: as the table's VRAM+RAM says it
        ("unattributed", 64 * GiB - 40 * GiB - cpu_part, "estimated", "OS and other programs"),
        ("free", 40 * GiB, "reported", "free"),
    ]
    assert ram.segments[0].model == gpu0.segments[4].model == (GEMMA, gemma.digest)  # joined by name and key


def test_one_gpu_three_models(tmp_path: Path) -> None:
    mm = memory_map(*sample_with(tmp_path, one_gpu_nvml()))
    gpu0 = mm.bars[0]
    assert [(s.kind, s.label) for s in gpu0.segments if s.model] == [
        ("weights", Q4),
        ("kv", Q4),
        ("compute", Q4),
        ("overhead", Q4),
        ("model", GEMMA),
        ("weights", Q8),
        ("kv", Q8),
        ("compute", Q8),
        ("overhead", Q8),
    ]
    assert sum(s.bytes for s in gpu0.segments if s.model) == 2 * GiB + 6 * GiB + 6 * GiB + 256 * MiB
    assert gpu0.segments[-1] == dataclasses.replace(
        gpu0.segments[-1], kind="free", bytes=48 * GiB - 512 * MiB - 15 * GiB
    )


def test_allocated_per_device_from_the_runner_log(tmp_path: Path) -> None:
    gpu, procs, models = sample_with(tmp_path, one_gpu_nvml())
    models = with_devices(
        models,
        Q8,
        {
            "weights": {"CUDA0": 1_900_000_000, "CPU_Mapped": 300_000_000},
            "kv": {"CUDA0": 3_758_096_384},
            "compute": {"CUDA0": 300_000_000},
        },
    )
    segs = [s for s in memory_map(gpu, procs, models).bars[0].segments if s.label == Q8]
    assert [(s.kind, s.bytes, s.source) for s in segs] == [
        ("weights", 1_900_000_000, "allocated"),
        ("kv", 3_758_096_384, "allocated"),
        ("compute", 300_000_000, "allocated"),
        ("overhead", 6 * GiB + 256 * MiB - 1_900_000_000 - 3_758_096_384 - 300_000_000, "estimated"),
    ]
    assert "CUDA0" in segs[0].note


def test_split_model_paired_by_pid_not_by_number(tmp_path: Path) -> None:
    """The runner's CUDA0 is the GPU its PID is on, in index order, unless only size order fits."""
    gpu, procs, models = shared_sample(tmp_path)  # gemma: 3.5 GiB on GPU 0, 1.75 GiB on GPU 1
    in_order = {
        "weights": {"CUDA0": 3 * GiB, "CUDA1": 1 * GiB},
        "kv": {"CUDA0": 64 * MiB, "CUDA1": 40 * MiB},
        "compute": {"CUDA0": 200 * MiB, "CUDA1": 100 * MiB},
    }
    bars = memory_map(gpu, procs, with_devices(models, GEMMA, in_order)).bars
    assert [(s.kind, s.bytes, s.source) for s in bars[0].segments if s.label == GEMMA] == [
        ("weights", 3 * GiB, "allocated"),
        ("kv", 64 * MiB, "allocated"),
        ("compute", 200 * MiB, "allocated"),
        ("overhead", 512 * MiB - 264 * MiB, "estimated"),
    ]
    assert [(s.kind, s.bytes) for s in bars[1].segments if s.label == GEMMA][0] == ("weights", 1 * GiB)
    swapped = {k: {"CUDA0": v["CUDA1"], "CUDA1": v["CUDA0"]} for k, v in in_order.items()}
    bars = memory_map(gpu, procs, with_devices(models, GEMMA, swapped)).bars
    assert [(s.kind, s.bytes) for s in bars[0].segments if s.label == GEMMA][0] == ("weights", 3 * GiB)
    too_big = {"weights": {"CUDA0": 9 * GiB, "CUDA1": 9 * GiB}}
    bars = memory_map(gpu, procs, with_devices(models, GEMMA, too_big)).bars
    assert [(s.kind, s.source) for s in bars[0].segments if s.label == GEMMA] == [("model", "reported")]


def test_spill_cpu_part_from_the_log(tmp_path: Path) -> None:
    gpu, procs, models = shared_sample(tmp_path)
    models = with_devices(
        models,
        GEMMA,
        {
            "weights": {"CUDA0": 3 * GiB, "CUDA1": 1 * GiB, "CPU": 1_000_000_000},
            "kv": {"CUDA0": 64 * MiB, "CUDA1": 40 * MiB, "CUDA_Host": 8 * MiB},
            "compute": {"CUDA0": 200 * MiB, "CUDA1": 100 * MiB, "CUDA_Host": 20 * MiB},
        },
    )
    ram = memory_map(gpu, procs, models).bars[-1]
    assert [(s.kind, s.bytes, s.source) for s in ram.segments if s.label == GEMMA] == [
        ("weights", 1_000_000_000, "allocated"),
        ("kv", 8 * MiB, "allocated"),
        ("compute", 20 * MiB, "allocated"),
    ]


def test_foreign_processes_one_segment_each(tmp_path: Path) -> None:
    gpu, procs, models = sample_with(tmp_path, foreign_nvml())
    gpu0 = memory_map(gpu, procs, tuple(m for m in models if m.name == Q8)).bars[0]
    others = [(s.bytes, s.source, s.label) for s in gpu0.segments if s.kind == "other"]
    assert others == [(300 * MiB, "reported", "Xorg"), (10 * GiB, "reported", "alice python")]
    assert "PID 7777" in next(s.note for s in gpu0.segments if s.label == "alice python")


def test_no_gpu_vram_bar_is_what_api_ps_reports(tmp_path: Path) -> None:
    _gpu, _procs, models = shared_sample(tmp_path)
    system = SystemMemory(ram_total_bytes=64 * GiB, ram_available_bytes=48 * GiB, ram_used_bytes=16 * GiB)
    no_gpu = GpuSnapshot(taken_at=0.0, status=STATUS_NO_LIBRARY, problem="no_library", system=system)
    mm = memory_map(no_gpu, None, models)
    assert not mm.telemetry and mm.status == STATUS_NO_LIBRARY
    vram, ram = mm.bars
    assert (vram.key, vram.total_bytes, vram.free_bytes) == ("VRAM", None, None)
    gemma = next(m for m in models if m.name == GEMMA)
    assert ("model", gemma.size_vram_bytes, "reported", GEMMA) in _rows(vram)
    assert sum(s.bytes for s in vram.segments if s.label == Q8) == next(m.size_bytes for m in models if m.name == Q8)
    assert (ram.total_bytes, ram.free_bytes) == (64 * GiB, 48 * GiB)
    assert _rows(ram)[-1] == ("free", 48 * GiB, "reported", "free")


def test_lost_gpu_is_an_error_bar(tmp_path: Path) -> None:
    gpu, procs, models = shared_sample(tmp_path)
    lost = dataclasses.replace(gpu.devices[1], error="GPU is lost (NVML_ERROR_GPU_IS_LOST)")
    gpu = dataclasses.replace(gpu, devices=(gpu.devices[0], lost))
    bar = memory_map(gpu, procs, models).bars[1]
    assert bar.error == "GPU is lost (NVML_ERROR_GPU_IS_LOST)" and bar.segments == ()


def test_equal_inputs_give_an_equal_map(tmp_path: Path) -> None:
    """The widget skips a redraw when the map is equal: an unchanged sample must give an equal map."""
    assert memory_map(*shared_sample(tmp_path)) == memory_map(*shared_sample(tmp_path))


def test_rounding_is_not_an_overhead_segment(tmp_path: Path) -> None:
    """The log prints MiB with two decimals: a measured figure a few hundred bytes above the parts is
    rounding: its ``overhead`` segment (the unexplained remainder) takes no cell (from 1 MiB on it does)."""
    gpu, procs, models = sample_with(tmp_path, one_gpu_nvml())
    measured = 6 * GiB + 256 * MiB
    close = with_devices(models, Q8, {"weights": {"CUDA0": measured - 405 - 3 * GiB}, "kv": {"CUDA0": 3 * GiB}})
    segs = [s for s in memory_map(gpu, procs, close).bars[0].segments if s.label == Q8]
    # the remainder is never hidden (model.ledger), but rounding takes no cell of the bar
    assert [(s.kind, s.bytes, s.signed_bytes) for s in segs] == [
        ("weights", measured - 405 - 3 * GiB, None),
        ("kv", 3 * GiB, None),
        ("overhead", 0, 405),
    ]
    far = with_devices(models, Q8, {"weights": {"CUDA0": measured - MiB - 3 * GiB}, "kv": {"CUDA0": 3 * GiB}})
    segs = [s for s in memory_map(gpu, procs, far).bars[0].segments if s.label == Q8]
    assert [(s.kind, s.bytes) for s in segs][-1] == ("overhead", MiB)


def _waiting_for_show(models: tuple[ModelView, ...], name: str) -> tuple[ModelView, ...]:
    """``models`` with ``name`` as in the poll that first lists it: its /api/show not read yet."""
    return tuple(
        dataclasses.replace(m, model_blob=None, kv_unavailable=SHOW_PENDING) if m.name == name else m for m in models
    )


def test_a_runner_not_paired_yet_is_loading_its_model(tmp_path: Path) -> None:
    """The demo's gemma4 read "other Ollama processes 5.0G" for the poll its /api/show was not read yet:
    a runner that a row waiting for /api/show explains is "loading <model>"."""
    gpu, procs, models = sample_with(tmp_path, one_gpu_nvml())
    q8 = next(m for m in models if m.name == Q8)
    assert q8.model_blob is not None and q8.context.value == 32768
    waiting = _waiting_for_show(models, Q8)
    # by the runner's cells (-c 32768 = num_ctx 32768 x 1 slot): the only waiting row it fits
    loading = loading_runners(procs, waiting)
    assert loading == {Q8_PID: f"loading {Q8}"}
    gpu0 = memory_map(gpu, procs, waiting, loading=loading).bars[0]
    assert ("ollama", 6 * GiB + 256 * MiB, "reported", f"loading {Q8}") in _rows(gpu0)
    assert not any(s.label == "other Ollama processes" for s in gpu0.segments)
    # by the name /api/ps showed for the blob before (a reload)
    assert loading_runners(procs, waiting, blob_names={q8.model_blob: Q8}) == {Q8_PID: f"loading {Q8}"}
    # without the map's help it is what it was: other Ollama processes
    plain = memory_map(gpu, procs, waiting).bars[0]
    assert ("ollama", 6 * GiB + 256 * MiB, "reported", "other Ollama processes") in _rows(plain)


def test_a_runner_no_waiting_row_explains_is_not_loading(tmp_path: Path) -> None:
    """A runner of a model /api/ps no longer lists (unloading) with no load in progress in the log,
    or one a waiting row of another size does not fit, stays "other Ollama processes"."""
    gpu, procs, models = sample_with(tmp_path, one_gpu_nvml())
    assert loading_runners(procs, models) == {}  # every runner paired
    gone = tuple(m for m in models if m.name != Q8)
    assert loading_runners(procs, gone) == {}
    q4_waiting = _waiting_for_show(gone, Q4)  # Q4's own runner is unpaired too, and fits by cells
    assert loading_runners(procs, q4_waiting) == {Q4_PID: f"loading {Q4}"}


def _log_of(lines: list[str]) -> LogState:
    events = parse_lines(lines)
    return fold_events(LogState(), events, source="file:server.log", status=None, ok=True, lines=len(lines))


def test_a_runner_the_log_is_loading_is_loading(tmp_path: Path) -> None:
    """Before /api/ps lists a model, its runner is up and the runner log shows its load (real Ollama
    lists it once the runner reports ready): "loading <model>" while the load has not finished, or
    while it is the log's newest load of a blob /api/ps never listed; a blob /api/ps listed before
    and no load in progress is an old runner (unloading), still "other Ollama processes"."""
    gpu, procs, models = sample_with(tmp_path, one_gpu_nvml())
    q4 = next(m for m in models if m.name == Q4)
    gone = tuple(m for m in models if m.name != Q4)
    sc = scenario()
    row = next(r for s in sc.steps for r in s.loaded if r.model == Q4)
    lines = load_lines(sc, row)
    assert any(q4.model_blob in line for line in lines)  # the demo's blob is the fake runner's
    ready_at = next(i for i, line in enumerate(lines) if "model loaded" in line)
    starting = _log_of(lines[:ready_at])
    assert starting.loads and not starting.loads[-1].ready
    assert loading_runners(procs, gone, starting) == {Q4_PID: "loading a model"}  # the log names no model
    assert loading_runners(procs, gone, starting, {q4.model_blob: Q4}) == {Q4_PID: f"loading {Q4}"}
    up = _log_of(lines)
    assert up.loads[-1].ready
    assert loading_runners(procs, gone, up) == {Q4_PID: "loading a model"}  # newest load, never listed
    assert loading_runners(procs, gone, up, {q4.model_blob: Q4}) == {}  # listed before, loaded long ago: exiting
    t = procs.taken_at
    fresh = _log_of([restamp(line, t - 5) for line in lines])  # a reload 5 s before the sample
    assert loading_runners(procs, gone, fresh, {q4.model_blob: Q4}) == {Q4_PID: f"loading {Q4}"}
    stale = _log_of([restamp(line, t - 40) for line in lines])
    assert loading_runners(procs, gone, stale, {q4.model_blob: Q4}) == {}


def test_a_paired_gpu_shows_every_ledger_part_and_a_negative_remainder(tmp_path: Path) -> None:
    """The real iSWA load of ollama/ollama#16480 (both KV pools on ROCm0) on the q8 runner's one GPU: the SWA pool
    is a segment of its own, and NVML measuring less than the log lists gives a remainder below zero, shown in the
    legend and taking no cell."""
    from kvtop.logparse import group_loads
    from kvtop.ui.widgets.memory_map import legend_pieces

    log = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "posted"
    lines = (next(log.glob("ollama-16480-*.log"))).read_text(encoding="utf-8").splitlines()
    (load,) = group_loads(parse_lines([line for line in lines if not line.startswith("#")]))
    gpu, procs, models = sample_with(tmp_path, one_gpu_nvml())
    models = tuple(dataclasses.replace(m, load=load, devices=load.memory) if m.name == Q8 else m for m in models)
    bar = memory_map(gpu, procs, models).bars[0]
    segs = [s for s in bar.segments if s.label == Q8]
    remainder = 6 * GiB + 256 * MiB - 9216 * MiB - 90 * MiB
    assert [(s.kind, s.bytes, s.source, s.signed_bytes) for s in segs] == [
        ("kv", 9216 * MiB, "allocated", None),
        ("kv_swa", 90 * MiB, "allocated", None),
        ("overhead", 0, "estimated", remainder),
    ]
    entry = next(p for p in legend_pieces(bar) if any(Q8 in text for text, _ in p))
    assert "".join(text for text, _ in entry).endswith(" KV 9.0G SWA 90M ~−2.8G")


def test_the_ram_bar_shows_a_spilled_models_cpu_parts_pool_by_pool(tmp_path: Path) -> None:
    """A real llama-server run of an interleaved-SWA model (CPU only) as the spilled gemma's log: its CPU parts in
    RAM, the SWA pool apart from the full-context one (model.ledger)."""
    from kvtop.logparse import group_loads

    run = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "llama-server-runs"
    lines = (run / "gemma3-iswa-prompt-cache-np2.log").read_text(encoding="utf-8").splitlines()
    (load,) = group_loads(parse_lines([line for line in lines if not line.startswith("#")]))
    gpu, procs, models = shared_sample(tmp_path)
    models = tuple(dataclasses.replace(m, load=load, devices=load.memory) if m.name == GEMMA else m for m in models)
    ram = memory_map(gpu, procs, models).bars[-1]
    assert [(s.kind, s.bytes, s.source) for s in ram.segments if s.label == GEMMA] == [
        ("weights", 3722445, "allocated"),
        ("kv", 1111491, "allocated"),
        ("kv_swa", 1048576, "allocated"),
        ("compute", 7895777, "allocated"),
    ]
