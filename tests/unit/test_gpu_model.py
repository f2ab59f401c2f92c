"""The pure joins in ``kvtop.model.gpu``: runner PID -> blob -> /api/ps row, the per-GPU split,
each model's measured VRAM against ``size_vram``, and the ``--once --json`` GPU fields."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from kvtop.model.gpu import gpu_json, gpu_panel_data, gpu_views, match_runners, model_gpu_json, model_gpu_usage
from kvtop.model.gpu_snapshots import (
    GpuDevice,
    GpuProcess,
    GpuSnapshot,
    NOT_SAMPLED,
    PidNamespace,
    ProcSnapshot,
    RunnerProcess,
)
from kvtop.model.views import ModelView
from tests.fakes.nvml import GiB, MiB
from tests.fakes.scenario import (
    DISCOVERY_PID,
    GEMMA_PID,
    Q4_PID,
    Q8_PID,
    TRAINER_PID,
    XORG_PID,
    demo_models,
    shared_sample,
)


def _by_name(models: tuple[ModelView, ...], name: str) -> ModelView:
    return next(m for m in models if m.name == name)


def test_split_per_gpu(tmp_path: Path) -> None:
    gpu, procs, models = shared_sample(tmp_path)
    v0, v1 = gpu_views(gpu, procs, models)
    assert [(m.name, m.pids, m.measured_bytes) for m in v0.models] == [
        ("qwen3:1.7b-q4_K_M", (Q4_PID,), 2 * GiB),
        ("gemma4:latest", (GEMMA_PID,), 3 * GiB + 512 * MiB),
    ]
    assert [(m.name, m.measured_bytes) for m in v1.models] == [
        ("gemma4:latest", GiB + 768 * MiB),
        ("qwen3:1.7b-q8_0", 6 * GiB + 128 * MiB),
    ]
    assert v0.other_bytes == 8 * GiB and v0.ollama_bytes == 0
    # total − free − listed: the driver's reserve and whatever NVML does not list
    assert v0.unattributed_bytes == 48 * GiB - v0.device.memory_free_bytes - (13 * GiB + 512 * MiB)  # type: ignore[operator]
    assert v0.unattributed_bytes == 512 * MiB + 512 * MiB
    split = v0.split
    assert [p.kind for p in split] == ["model", "model", "other", "unattributed", "free"]
    assert sum(p.bytes for p in split) == 48 * GiB
    trainer = next(p for p in v0.processes if p.pid == TRAINER_PID)
    assert (trainer.kind, trainer.user, trainer.name, trainer.command) == (
        "other",
        "alice",
        "python",
        "python train.py --epochs 3",
    )
    xorg = next(p for p in v1.processes if p.pid == XORG_PID)
    assert (xorg.kind, xorg.name, xorg.user, xorg.command, xorg.gpu_memory_bytes) == (
        "other",
        "Xorg",
        None,
        None,
        300 * MiB,
    )
    assert "access denied" in (xorg.note or "")
    assert [p.pid for p in v1.others] == [XORG_PID]


def test_model_measured_vram_next_to_size_vram(tmp_path: Path) -> None:
    gpu, procs, models = shared_sample(tmp_path)
    usage = model_gpu_usage(gpu, procs, models)
    gemma = _by_name(models, "gemma4:latest")
    u = usage[(gemma.name, gemma.digest)]
    assert u.runner_pids == (GEMMA_PID,)
    assert u.by_gpu == ((0, 3 * GiB + 512 * MiB), (1, GiB + 768 * MiB))
    assert u.measured_bytes == 5 * GiB + 256 * MiB
    assert u.size_vram_bytes == gemma.size_vram_bytes
    assert u.overhead_bytes == u.measured_bytes - (gemma.size_vram_bytes or 0)
    q8 = _by_name(models, "qwen3:1.7b-q8_0")
    assert usage[(q8.name, q8.digest)].runner_pids == (Q8_PID,)
    assert "NVML per-process memory on GPU 1" in usage[(q8.name, q8.digest)].note
    data = model_gpu_json(u)
    assert data == {
        "runner_pids": [GEMMA_PID],
        "vram_measured": u.measured_bytes,
        "vram_measured_by_gpu": {"0": 3 * GiB + 512 * MiB, "1": GiB + 768 * MiB},
        "vram_overhead": u.overhead_bytes,
    }


def test_discovery_runner_and_unmatched_runner_are_ollama_not_foreign() -> None:
    models = demo_models()
    gpu = GpuSnapshot(
        taken_at=0,
        status="ok",
        ok=True,
        devices=(
            GpuDevice(
                index=0,
                memory_total_bytes=10 * GiB,
                memory_free_bytes=6 * GiB,
                processes=(GpuProcess(DISCOVERY_PID, 200 * MiB), GpuProcess(9, GiB)),
            ),
        ),
    )
    procs = ProcSnapshot(
        taken_at=0,
        discovery_pids=(DISCOVERY_PID,),
        runners=(RunnerProcess(pid=9, kind="llama-server", era="v0.30+", blob="sha256-" + "f" * 64),),
    )
    (v,) = gpu_views(gpu, procs, models)
    assert [p.kind for p in v.processes] == ["ollama", "ollama"]
    assert v.ollama_bytes == GiB + 200 * MiB and v.other_bytes == 0
    assert "no loaded model" in (v.processes[1].note or "")


def test_two_models_on_one_blob_are_told_apart_by_cells() -> None:
    base = demo_models()[0]
    short = dataclasses.replace(base, name="a:latest", digest="a" * 64)
    long = dataclasses.replace(
        base, name="b:latest", digest="b" * 64, context=dataclasses.replace(base.context, value=base.context.value * 4)
    )  # type: ignore[operator]
    procs = ProcSnapshot(
        taken_at=0,
        runners=(
            RunnerProcess(
                pid=1, kind="llama-server", era="", blob=base.model_blob, ctx_size=base.context.value, parallel=1
            ),
            RunnerProcess(
                pid=2,
                kind="llama-server",
                era="",
                blob=base.model_blob,
                ctx_size=base.context.value * 4,  # type: ignore[operator]
                parallel=1,
            ),
            RunnerProcess(pid=3, kind="ollama runner", era="", blob=base.model_blob),
        ),
    )
    m = match_runners(procs, [short, long])
    assert m[1].model is short and m[2].model is long
    assert m[3].model is None and "shared by a:latest, b:latest" in m[3].note


def test_mlx_runner_matches_by_name() -> None:
    model = dataclasses.replace(demo_models()[0], name="qwen3:8b", model_blob=None)
    procs = ProcSnapshot(taken_at=0, runners=(RunnerProcess(pid=5, kind="mlx runner", era="", model_name="qwen3:8b"),))
    assert match_runners(procs, [model])[5].model is model


def test_pid_namespace_mismatch_shows_pids_not_names(tmp_path: Path) -> None:
    gpu, procs, models = shared_sample(tmp_path)
    procs = dataclasses.replace(
        procs,
        namespace=PidNamespace(container="docker", private=True, mismatch=True, note="host PIDs: names not shown"),
    )
    views = gpu_views(gpu, procs, models)
    assert all(
        p.kind == "unknown" and p.name is None and p.note == "host PIDs: names not shown"
        for v in views
        for p in v.processes
    )
    assert all(not v.models for v in views)
    data = gpu_panel_data(gpu, procs, models)
    assert "host PIDs: names not shown" in data.notes
    u = data.usages[0]
    assert u.measured_bytes is None and "host PIDs" in u.note


def test_no_per_process_memory() -> None:
    models = demo_models()
    gpu = GpuSnapshot(
        taken_at=0,
        status="ok",
        ok=True,
        devices=(
            GpuDevice(
                index=0, memory_total_bytes=8 * GiB, memory_free_bytes=2 * GiB, processes=(GpuProcess(Q4_PID, None),)
            ),
        ),
    )
    procs = ProcSnapshot(
        taken_at=0,
        runners=(
            RunnerProcess(
                pid=Q4_PID, kind="llama-server", era="", blob=_by_name(models, "qwen3:1.7b-q4_K_M").model_blob
            ),
        ),
    )
    (v,) = gpu_views(gpu, procs, models)
    assert not v.processes_known and v.unattributed_bytes is None and "WSL2" in (v.note or "")
    assert [(m.name, m.measured_bytes) for m in v.models] == [("qwen3:1.7b-q4_K_M", None)]
    assert [p.kind for p in v.split] == ["unattributed", "free"]  # used, not broken down
    q4 = _by_name(models, "qwen3:1.7b-q4_K_M")
    u = model_gpu_usage(gpu, procs, models)[(q4.name, q4.digest)]
    assert u.runner_pids == (Q4_PID,) and u.measured_bytes is None and u.overhead_bytes is None


def test_cpu_only_runner_measures_zero() -> None:
    models = demo_models()
    q4 = _by_name(models, "qwen3:1.7b-q4_K_M")
    gpu = GpuSnapshot(
        taken_at=0,
        status="ok",
        ok=True,
        devices=(GpuDevice(index=0, memory_total_bytes=8 * GiB, memory_free_bytes=8 * GiB, processes=()),),
    )
    procs = ProcSnapshot(
        taken_at=0, runners=(RunnerProcess(pid=Q4_PID, kind="llama-server", era="", blob=q4.model_blob),)
    )
    u = model_gpu_usage(gpu, procs, models)[(q4.name, q4.digest)]
    assert u.measured_bytes == 0 and "not on any GPU" in u.note


def test_notes_when_nothing_is_known() -> None:
    models = demo_models()
    usage = model_gpu_usage(None, None, models)
    assert all(u.note == "process table not sampled yet" and u.measured_bytes is None for u in usage.values())
    assert gpu_views(None, None, models) == ()
    assert gpu_json(None, None, models) == {
        "gpus": [],
        "gpu_status": NOT_SAMPLED,
        "gpu_notes": [],
        "system_memory": None,
    }


def test_gpu_json(tmp_path: Path) -> None:
    gpu, procs, models = shared_sample(tmp_path)
    data = gpu_json(gpu, procs, models)
    json.dumps(data)  # serialisable
    assert data["gpu_status"] == "GPU telemetry: 2 NVIDIA GPUs (NVML, driver 550.54.15)"
    g0, g1 = data["gpus"]
    assert (g0["index"], g0["name"]) == (0, "NVIDIA RTX A6000")
    assert g0["memory"] == {
        "total": 48 * GiB,
        "used": 14 * GiB,
        "free": 48 * GiB - 512 * MiB - 14 * GiB,
        "reserved": 512 * MiB,
        "allocated": None,
        **dict.fromkeys(("pool", "vram_total", "vram_used", "gtt_total", "gtt_used")),  # AMD's pools only
    }
    assert g0["unified_memory"] is False and g0["memory_note"] is None
    assert g0["utilization"] == {"gpu": 45, "memory": 20}
    assert g0["temperature_c"] == 61 and g0["power"] == {"draw_mw": 250_000, "limit_mw": 300_000}
    procs0 = {p["pid"]: p for p in g0["processes"]}
    assert procs0[Q4_PID]["model"] == "qwen3:1.7b-q4_K_M" and procs0[Q4_PID]["gpu_memory"] == 2 * GiB
    assert procs0[TRAINER_PID] | {"command": None} == {
        "pid": TRAINER_PID,
        "user": "alice",
        "name": "python",
        "command": None,
        "gpu_memory": 8 * GiB,
        "model": None,
        "kind": "other",
        "note": None,
    }
    assert g0["split"]["other_processes"] == 8 * GiB
    assert [m["name"] for m in g1["split"]["models"]] == ["gemma4:latest", "qwen3:1.7b-q8_0"]
    assert data["system_memory"]["swap_total"] == 8 * GiB


def test_gpu_json_without_nvidia() -> None:
    gpu = GpuSnapshot(
        taken_at=0, status="GPU telemetry: no NVIDIA driver (NVML library not found)", problem="no_library"
    )
    data = gpu_json(gpu, ProcSnapshot(taken_at=0), demo_models())
    assert data["gpus"] == [] and data["gpu_status"] == "GPU telemetry: no NVIDIA driver (NVML library not found)"


@pytest.mark.parametrize("processes", [None, ()])
def test_amd_like_device_without_processes(processes: tuple[GpuProcess, ...] | None) -> None:
    gpu = GpuSnapshot(
        taken_at=0,
        status="ok",
        ok=True,
        backend="amd-sysfs",
        devices=(
            GpuDevice(
                index=0,
                vendor="amd",
                memory_total_bytes=16 * GiB,
                memory_used_bytes=4 * GiB,
                memory_free_bytes=12 * GiB,
                processes=processes,
                processes_note=None if processes is not None else "sysfs gives no per-process VRAM",
            ),
        ),
    )
    (v,) = gpu_views(gpu, ProcSnapshot(taken_at=0), demo_models())
    assert [(p.kind, p.bytes) for p in v.split] == [("unattributed", 4 * GiB), ("free", 12 * GiB)]
    entry = gpu_json(gpu, None, ())["gpus"][0]
    assert entry["processes"] == (None if processes is None else [])


def test_gpu_free_bytes(tmp_path: Path) -> None:
    from kvtop.model.gpu import gpu_free_bytes

    gpu, _, _ = shared_sample(tmp_path)
    assert gpu_free_bytes(gpu) == sum(d.memory_free_bytes or 0 for d in gpu.devices)
    assert gpu_free_bytes(None) is None
    assert gpu_free_bytes(GpuSnapshot(taken_at=0, status="no", ok=False)) is None


async def test_fixed_sources_for_app_tests() -> None:
    from tests.fakes.gpu_sources import FixedGpuSource, FixedProcSource

    g, p = FixedGpuSource(), FixedProcSource()
    snap = await g.sample()
    assert snap.status == "GPU telemetry: no NVIDIA driver (NVML library not found)"
    assert (await p.sample(snap.pids)).ok and p.asked == [()]
