"""A shared GPU server, through kvtop's real sources with fakes at their boundaries.

Two GPUs (RTX A6000 48 GiB, RTX 4090 24 GiB). The demo scenario's "spills" step has three models
loaded; their runners are Ollama v0.30+ ``llama-server`` processes (children of ``ollama serve``):

* ``qwen3:1.7b-q4_K_M`` (PID 4101) on GPU 0,
* ``gemma4:latest`` (PID 4102) split over GPU 0 and GPU 1,
* ``qwen3:1.7b-q8_0`` (PID 4103) on GPU 1.

A foreign trainer (PID 7777, user alice) holds 8 GiB on GPU 0, and Xorg (PID 1234, another user's:
its command line is AccessDenied) a graphics context on GPU 1. A GPU-discovery runner (PID 4200)
is running but holds no GPU memory.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from kvtop.model.gpu import GpuPanelData, gpu_panel_data
from kvtop.model.gpu_snapshots import GpuSnapshot, ProcSnapshot
from kvtop.model.views import AppState, ModelView
from kvtop.model.fold_alerts import fold_with_alerts
from kvtop.sources.gpu import GpuSource
from kvtop.sources.procs import ProcSource
from tests.fakes.nvml import FakeGpu, FakeNvml, GiB, MiB
from tests.fakes.procs import FakeProcess

TAKEN_AT = 1_795_000_000.0
SERVER_PID = 100
Q4_PID, GEMMA_PID, Q8_PID, DISCOVERY_PID = 4101, 4102, 4103, 4200
TRAINER_PID, XORG_PID = 7777, 1234
MODELS_DIR = "/usr/share/ollama/.ollama/models/blobs"


def demo_models() -> tuple[ModelView, ...]:
    """The three models of the demo scenario's "spills" step (with their ``/api/show`` blobs)."""
    from tests.ui.fakes import snapshot_at, step_index

    return fold_with_alerts(AppState(host_url="http://127.0.0.1:11434"), snapshot_at(step_index("spills"))).models


def _blob(models: tuple[ModelView, ...], name: str) -> str:
    blob = next(m.model_blob for m in models if m.name == name)
    assert blob is not None
    return blob


def shared_nvml() -> FakeNvml:
    """The two fake GPUs with their processes."""
    return FakeNvml(
        [
            FakeGpu(
                name="NVIDIA RTX A6000",
                uuid="GPU-aaaaaaaa-0000-0000-0000-000000000000",
                bus_id="00000000:01:00.0",
                total=48 * GiB,
                reserved=512 * MiB,
                used=14 * GiB,
                util_gpu=45,
                util_memory=20,
                temperature_c=61,
                power_mw=250_000,
                power_limit_mw=300_000,
                compute=[(Q4_PID, 2 * GiB), (GEMMA_PID, 3 * GiB + 512 * MiB), (TRAINER_PID, 8 * GiB)],
            ),
            FakeGpu(
                name="NVIDIA GeForce RTX 4090",
                uuid="GPU-bbbbbbbb-0000-0000-0000-000000000000",
                bus_id="00000000:02:00.0",
                total=24 * GiB,
                reserved=300 * MiB,
                used=8 * GiB + 512 * MiB,
                util_gpu=3,
                util_memory=1,
                temperature_c=78,
                power_mw=90_000,
                power_limit_mw=450_000,
                compute=[(GEMMA_PID, 1 * GiB + 768 * MiB), (Q8_PID, 6 * GiB + 128 * MiB)],
                graphics=[(XORG_PID, 300 * MiB)],
            ),
        ]
    )


def _runner(pid: int, blob: str, port: int, ctx: int) -> FakeProcess:
    argv = [
        "/usr/local/lib/ollama/llama-server",
        "--model",
        f"{MODELS_DIR}/{blob}",
        "--port",
        str(port),
        "--host",
        "127.0.0.1",
        "--no-webui",
        "--offline",
        "-c",
        str(ctx),
        "-np",
        "1",
    ]
    return FakeProcess(pid, argv, ppid=SERVER_PID, user="ollama", rss=700 * MiB)


def shared_processes(models: tuple[ModelView, ...]) -> list[FakeProcess]:
    """The process table: init, ollama serve, three runners, discovery, a trainer, Xorg, a shell."""
    return [
        FakeProcess(1, ["/sbin/init"], name="systemd", ppid=0, user="root"),
        FakeProcess(SERVER_PID, ["/usr/local/bin/ollama", "serve"], user="ollama"),
        _runner(Q4_PID, _blob(models, "qwen3:1.7b-q4_K_M"), 40101, 4096),
        _runner(GEMMA_PID, _blob(models, "gemma4:latest"), 40102, 4096),
        _runner(Q8_PID, _blob(models, "qwen3:1.7b-q8_0"), 40103, 32768),
        FakeProcess(
            DISCOVERY_PID,
            [
                "/usr/local/lib/ollama/llama-server",
                "--port",
                "40200",
                "--host",
                "127.0.0.1",
                "--no-webui",
                "--offline",
                "--verbose",
            ],
            ppid=SERVER_PID,
        ),
        FakeProcess(TRAINER_PID, ["python", "train.py", "--epochs", "3"], user="alice", rss=3 * GiB),
        FakeProcess(XORG_PID, ["/usr/lib/xorg/Xorg", ":0"], name="Xorg", user="root", denied=("cmdline", "username")),
        FakeProcess(555, ["-bash"], user="bob"),
    ]


FAKE_PSUTIL = SimpleNamespace(
    virtual_memory=lambda: SimpleNamespace(total=64 * GiB, available=40 * GiB, used=22 * GiB),
    swap_memory=lambda: SimpleNamespace(total=8 * GiB, used=256 * MiB),
)
"""A psutil stand-in for system memory, so snapshots do not depend on the machine."""


def sources(nvml: FakeNvml, processes: list[FakeProcess], tmp_root: Any) -> tuple[GpuSource, ProcSource]:
    """The real sources with fakes at their boundaries (no container markers under ``tmp_root``)."""
    gpu = GpuSource(
        nvml=nvml.module, sysfs_root=tmp_root, platform="linux", psutil_module=FAKE_PSUTIL, clock=lambda: TAKEN_AT
    )
    procs = ProcSource(
        process_iter=lambda: list(processes),
        proc_root=tmp_root,
        root=tmp_root,
        environ={},
        clock=lambda: TAKEN_AT,
        platform="linux",
    )
    return gpu, procs


def shared_sample(
    tmp_root: Any, nvml: FakeNvml | None = None
) -> tuple[GpuSnapshot, ProcSnapshot, tuple[ModelView, ...]]:
    """One GPU sample and one process sample of the shared server, and the loaded models."""
    models = demo_models()
    gpu_source, proc_source = sources(nvml or shared_nvml(), shared_processes(models), tmp_root)
    gpu = gpu_source.sample_sync()
    return gpu, proc_source.sample_sync(gpu.pids), models


def shared_panel_data(tmp_root: Any) -> GpuPanelData:
    """What the GPU panel shows for the shared server."""
    return gpu_panel_data(*shared_sample(tmp_root))
