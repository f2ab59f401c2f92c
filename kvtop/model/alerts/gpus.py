"""GPU rules: GPUs Ollama uses that are nearly full or shared with processes outside Ollama, and
swap in use while a model runs partly in system RAM (from the GPU + process sample)."""

from __future__ import annotations

from kvtop.model.alerts.context import Ctx
from kvtop.model.alerts.text import ib
from kvtop.model.alerts.types import Alert, Fix
from kvtop.model.gpu import GpuView

__all__ = ["gpu_alerts"]


def _gpu_name(v: GpuView) -> str:
    d = v.device
    return f"GPU {d.index}" + (f" ({d.name})" if d.name else "")


def gpu_alerts(ctx: Ctx) -> list[Alert]:
    """``foreign_vram`` and ``gpu_nearly_full`` per GPU Ollama uses, and ``swap_in_use`` while a
    live row is spilled."""
    out: list[Alert] = []
    th = ctx.th
    for v in ctx.gviews:
        d = v.device
        if d.error is not None or not (v.models or v.ollama_bytes):
            continue  # a GPU Ollama does not use (or its processes are unknown)
        foreign = [p for p in v.others if p.gpu_memory_bytes]
        held = sum(p.gpu_memory_bytes or 0 for p in foreign)
        if held > th.foreign_vram_bytes:
            top = sorted(foreign, key=lambda p: -(p.gpu_memory_bytes or 0))
            who = ", ".join(
                f"{p.name or 'PID'} (PID {p.pid}{', ' + p.user if p.user else ''}) {ib(p.gpu_memory_bytes)}"
                for p in top[:3]
            )
            more = f" and {len(top) - 3} more" if len(top) > 3 else ""
            text = f"{_gpu_name(v)}: {ib(held)} held by processes outside Ollama: {who}{more}"
            fixes = tuple(
                Fix(
                    f"stop PID {p.pid}",
                    f"frees {ib(p.gpu_memory_bytes)}",
                    None,
                    f"{p.user or 'its owner'}'s {p.name or 'process'} stops",
                )
                for p in top[:1]
            )
            out.append(Alert("foreign_vram", "warning", None, ctx.now, text, fixes, f"foreign_vram:gpu{d.index}"))
        free = d.memory_free_bytes
        if free is not None and free < th.gpu_headroom_bytes:
            of = f" of {ib(d.memory_total_bytes)}" if d.memory_total_bytes else ""
            text = (
                f"{_gpu_name(v)}: {ib(free)} free{of}, under the {ib(th.gpu_headroom_bytes)} headroom:"
                " the next model or a longer context spills to system RAM"
            )
            out.append(Alert("gpu_nearly_full", "warning", None, ctx.now, text, (), f"gpu_nearly_full:gpu{d.index}"))
    gpu = ctx.state.gpu
    system = gpu.system if gpu is not None else None
    spilled = [v for v in ctx.views if v.spilled] if ctx.live else []
    if system is not None and spilled and (system.swap_used_bytes or 0) > th.swap_used_bytes:
        names = ", ".join(v.name for v in spilled)
        total = f" of {ib(system.swap_total_bytes)}" if system.swap_total_bytes else ""
        avail = f"; {ib(system.ram_available_bytes)} RAM available" if system.ram_available_bytes is not None else ""
        text = (
            f"{ib(system.swap_used_bytes)} swap in use{total} while {names} runs partly in system RAM{avail}:"
            " swapped layers make every token wait on the disk"
        )
        out.append(Alert("swap_in_use", "warning", None, ctx.now, text, (), "swap_in_use"))
    return out
