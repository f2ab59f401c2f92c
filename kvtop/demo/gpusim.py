"""The demo machine's simulated GPU and process table, as the stand-in serves them.

``GET /_standin/machine`` (``kvtop.demo.server``) answers :func:`machine_doc`: the scenario's RAM,
one NVIDIA-shaped GPU (name, memory, utilization, power, temperature) and every process on it —
one llama-server runner per loaded model holding its ``size_vram`` plus its CUDA context
(:data:`RUNNER_CUDA_CONTEXT_BYTES`), plus the scenario's foreign processes (another user's job). ``kvtop.demo.machine`` turns that document into the same
``GpuSnapshot`` / ``ProcSnapshot`` that NVML and the process table give, so ``kvtop --demo`` shows
the GPU panel without reading this machine's GPU, RAM or processes. Pure, standard library only.

Scenario ``machine.gpu`` keys (:data:`GPU_KEYS`; sizes in bytes, power in watts)::

    {"name": "NVIDIA GeForce RTX 4060 Ti", "memory_total": 17175674880,
     "reserved": 83886080,                  # used but listed by no process (the driver's own)
     "power_limit_w": 165, "idle_w": 17, "loaded_w": 34, "busy_w": 148,
     "server_pid": 1187,                    # the simulated ``ollama serve``
     "foreign": [{"pid": 23011, "user": "dana", "name": "python3",
                  "cmdline": ["python3", "train_lora.py"], "gpu_bytes": 2621440000,
                  "rss": 5368709120}]}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["GPU_KEYS", "RUNNER_CUDA_CONTEXT_BYTES", "machine_doc", "parse_gpu"]

GPU_KEYS = (
    "name",
    "memory_total",
    "reserved",
    "power_limit_w",
    "idle_w",
    "loaded_w",
    "busy_w",
    "server_pid",
    "foreign",
)
"""The keys of a scenario's ``machine.gpu`` object (all required)."""

_FOREIGN_KEYS = ("pid", "user", "name", "cmdline", "gpu_bytes", "rss")

RUNNER_CUDA_CONTEXT_BYTES = 251_658_240
"""What NVML lists for a runner on the GPU beyond the buffers its log prints (240 MiB, staged): the CUDA
context, cuBLAS workspace and the driver's per-process allocations, a few hundred MiB on a real
card. Era C Ollama's ``size_vram`` is the sum of llama-server's GPU buffer lines
(docs/ollama-internals.md §1.2, ``memoryParsingWriter``), so a runner's NVML figure is ``size_vram`` +
this, and kvtop shows the difference as the runner's overhead (measured − listed). A runner with
nothing on the GPU (``size_vram`` 0) is given none."""

RUNNER_RSS_BYTES = 402_653_184
"""What a llama-server runner holds in RAM besides a spilled model's layers (384 MiB, staged)."""


def parse_gpu(obj: Mapping[str, Any], path: str) -> Mapping[str, Any]:
    """Validate a scenario's ``machine.gpu`` object.

    Returns:
        The object as given (a plain dict).

    Raises:
        ValueError: A key is missing, unknown or of the wrong type; the message names its path.
    """

    def fail(where: str, message: str) -> ValueError:
        return ValueError(f"scenario {where}: {message}")

    notes = {"note", "notes", "source", "sources"}
    for key in GPU_KEYS:
        if key not in obj:
            raise fail(f"{path}.{key}", "missing required key")
    for key in obj:
        if key not in GPU_KEYS and key not in notes:
            raise fail(f"{path}.{key}", f"unknown key (allowed: {', '.join(GPU_KEYS)})")
    if not isinstance(obj["name"], str) or not obj["name"]:
        raise fail(f"{path}.name", "expected a non-empty string")
    for key in GPU_KEYS[1:-1]:
        if isinstance(obj[key], bool) or not isinstance(obj[key], int) or obj[key] < 0:
            raise fail(f"{path}.{key}", "expected a non-negative integer")
    if not isinstance(obj["foreign"], list):
        raise fail(f"{path}.foreign", "expected a list")
    for i, proc in enumerate(obj["foreign"]):
        where = f"{path}.foreign[{i}]"
        if not isinstance(proc, dict) or set(proc) - notes != set(_FOREIGN_KEYS):
            raise fail(where, f"expected an object with exactly {', '.join(_FOREIGN_KEYS)}")
        if not isinstance(proc["cmdline"], list) or not all(isinstance(a, str) for a in proc["cmdline"]):
            raise fail(f"{where}.cmdline", "expected a list of strings")
        for key in ("pid", "gpu_bytes", "rss"):
            if isinstance(proc[key], bool) or not isinstance(proc[key], int) or proc[key] < 0:
                raise fail(f"{where}.{key}", "expected a non-negative integer")
    return dict(obj)


def machine_doc(
    ram_total: int, ram_used: int, gpu: Mapping[str, Any] | None, runners: Sequence[Mapping[str, Any]], busy: bool
) -> dict[str, Any]:
    """The ``GET /_standin/machine`` answer.

    Args:
        ram_total / ram_used: The scenario's RAM (bytes) and what is in use with no model.
        gpu: The scenario's ``machine.gpu`` (:func:`parse_gpu`), None for a machine without one.
        runners: One per loaded model: ``{"pid", "model", "argv", "size", "size_vram"}`` (bytes).
        busy: A request is being served now (utilization and power go up).

    Returns:
        ``{"ram_total", "ram_used", "gpu": {...} | None, "processes": [...]}``: ``ram_used`` grows by
        each model's part in system RAM (``size - size_vram``); ``gpu.processes`` lists ``{pid,
        gpu_bytes}`` (a runner's: its ``size_vram`` + :data:`RUNNER_CUDA_CONTEXT_BYTES`); ``processes`` describes every PID (``kind`` ``server``, ``runner`` or ``other``).
    """
    spilled = sum(max(0, int(r["size"]) - int(r["size_vram"])) for r in runners)
    doc: dict[str, Any] = {
        "ram_total": ram_total,
        "ram_used": min(ram_total, ram_used + spilled),
        "gpu": None,
        "processes": [],
    }
    if gpu is None:
        return doc
    server_pid = int(gpu["server_pid"])
    procs: list[dict[str, Any]] = [
        {
            "pid": server_pid,
            "kind": "server",
            "user": "ollama",
            "name": "ollama",
            "cmdline": ["/usr/local/bin/ollama", "serve"],
            "rss": 134_217_728,
        }
    ]
    on_gpu: list[dict[str, int]] = []
    for r in runners:
        procs.append(
            {
                "pid": int(r["pid"]),
                "kind": "runner",
                "user": "ollama",
                "name": "llama-server",
                "cmdline": list(r["argv"]),
                "ppid": server_pid,
                "rss": RUNNER_RSS_BYTES + max(0, int(r["size"]) - int(r["size_vram"])),
            }
        )
        vram = int(r["size_vram"])
        on_gpu.append({"pid": int(r["pid"]), "gpu_bytes": vram + RUNNER_CUDA_CONTEXT_BYTES if vram > 0 else 0})
    for f in gpu["foreign"]:
        procs.append(
            {
                "pid": int(f["pid"]),
                "kind": "other",
                "user": f["user"],
                "name": f["name"],
                "cmdline": list(f["cmdline"]),
                "rss": int(f["rss"]),
            }
        )
        on_gpu.append({"pid": int(f["pid"]), "gpu_bytes": int(f["gpu_bytes"])})
    total = int(gpu["memory_total"])
    used = min(total, int(gpu["reserved"]) + sum(p["gpu_bytes"] for p in on_gpu))
    watts = gpu["busy_w"] if busy and runners else gpu["loaded_w"] if runners else gpu["idle_w"]
    doc["gpu"] = {
        "name": gpu["name"],
        "memory_total": total,
        "memory_used": used,
        "memory_free": total - used,
        "gpu_util": (97 if busy else 1) if runners else 0,
        "memory_util": (58 if busy else 0) if runners else 0,
        "temperature_c": 66 if busy and runners else 43,
        "power_draw_mw": int(watts) * 1000,
        "power_limit_mw": int(gpu["power_limit_w"]) * 1000,
        "processes": on_gpu,
    }
    doc["processes"] = procs
    return doc
