"""Apps and samples for the memory map and panel-layout tests: the shared two-GPU server of
``tests.fakes.scenario`` (three models, one split over both GPUs and spilled, a foreign trainer
and Xorg), through the real GPU and process sources with fakes at their boundaries."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from kvtop.config import Settings
from kvtop.model.gpu_snapshots import GpuSnapshot, ProcSnapshot
from kvtop.model.views import ModelView
from kvtop.ui.app import KvtopApp, make_app
from kvtop.ui.widgets.models_table import ModelsTable
from tests.fakes.gpu_sources import FixedGpuSource, FixedProcSource
from tests.fakes.nvml import FakeGpu, FakeNvml, GiB, MiB
from tests.fakes.scenario import (
    GEMMA_PID,
    Q4_PID,
    Q8_PID,
    TRAINER_PID,
    XORG_PID,
    demo_models,
    shared_processes,
    shared_sample,
    sources,
)
from tests.ui.fakes import HOST, FakeSource, snapshot_at, step_index


def shared_app(tmp_root: Path, *, gpu: bool = True) -> KvtopApp:
    """The dashboard on the demo scenario's "spills" step, with the shared server's GPU and
    process samples (``gpu=False``: a machine without NVIDIA, RAM fixed)."""
    gpu_snap, procs, _models = shared_sample(tmp_root)
    return make_app(
        Settings(host_url=HOST, interval_s=0.25),
        FakeSource(snapshot_at(step_index("spills")), hold=True),
        gpu_source=FixedGpuSource(gpu_snap if gpu else None),
        proc_source=FixedProcSource(procs if gpu else None),
    )


async def settle(pilot: Any, rows: int = 3) -> None:
    """Wait until the poll, the GPU sample and the repaints that lay the panels out have landed
    (the layout measures the rows left free after a repaint and may show the events pane then)."""
    app = pilot.app
    for _ in range(200):
        await pilot.pause(0.05)
        if (
            app.state is not None
            and app.state.ollama is not None
            and app.state.gpu is not None
            and app.query_one(ModelsTable).row_count == rows
            and app.dashboard.panels.settled()
        ):
            break
    else:
        raise AssertionError("the screen did not settle")
    await pilot.pause(0.2)


# --------------------------------------------------------------------------------------------
# samples for the map's own tests (bytes chosen so every figure can be asserted exactly)


def one_gpu_nvml() -> FakeNvml:
    """One 48 GiB RTX A6000 holding the three runners and nothing else."""
    return FakeNvml(
        [
            FakeGpu(
                name="NVIDIA RTX A6000",
                total=48 * GiB,
                reserved=512 * MiB,
                used=15 * GiB,
                compute=[(Q4_PID, 2 * GiB), (GEMMA_PID, 6 * GiB), (Q8_PID, 6 * GiB + 256 * MiB)],
            )
        ]
    )


def foreign_nvml() -> FakeNvml:
    """One 24 GiB RTX 4090: one runner, alice's trainer and Xorg."""
    return FakeNvml(
        [
            FakeGpu(
                name="NVIDIA GeForce RTX 4090",
                total=24 * GiB,
                reserved=300 * MiB,
                used=17 * GiB,
                compute=[(Q8_PID, 6 * GiB + 256 * MiB), (TRAINER_PID, 10 * GiB)],
                graphics=[(XORG_PID, 300 * MiB)],
            )
        ]
    )


def sample_with(
    tmp_root: Path, nvml: FakeNvml, models: tuple[ModelView, ...] | None = None
) -> tuple[GpuSnapshot, ProcSnapshot, tuple[ModelView, ...]]:
    """A GPU and process sample of ``nvml`` with the shared server's processes."""
    models = demo_models() if models is None else models
    gpu_source, proc_source = sources(nvml, shared_processes(models), tmp_root)
    gpu = gpu_source.sample_sync()
    return gpu, proc_source.sample_sync(gpu.pids), models


def with_devices(models: tuple[ModelView, ...], name: str, devices: dict[str, dict[str, int]]) -> tuple[ModelView, ...]:
    """``models`` with ``name``'s per-device allocations as a runner log gives them
    (``logparse.loads.Load.memory``: component → device → bytes)."""
    return tuple(dataclasses.replace(m, devices=devices) if m.name == name else m for m in models)
