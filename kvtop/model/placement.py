"""Where a loaded model's bytes are: VRAM and system RAM, each with its source.

Pure. The table shows both when a model is spilled (``ModelView.spilled``: ``size_vram < size``).
"""

from __future__ import annotations

from kvtop.logparse.load_build import COMPONENTS, is_cpu_device
from kvtop.model.known import Known
from kvtop.model.views import ModelView

__all__ = ["vram_ram"]


def vram_ram(view: ModelView) -> tuple[Known[int], Known[int]]:
    """``(VRAM, RAM)`` bytes of ``view``.

    Allocated when the runner log gave every component's buffers per device (weights, KV cache
    and compute; host buffers — ``CPU``, ``CPU_Mapped``, ``*_Host`` — count as RAM, the others as
    VRAM; docs/ollama-internals.md §1.2, §4.5); else reported from ``/api/ps``: ``size_vram`` and
    ``size − size_vram``. Unknown (``Known()``) when neither says.
    """
    mem = view.devices
    if mem and all(mem.get(c) for c in COMPONENTS):
        vram = sum(b for c in COMPONENTS for d, b in mem[c].items() if not is_cpu_device(d))
        ram = sum(b for c in COMPONENTS for d, b in mem[c].items() if is_cpu_device(d))
        note = "the runner log's buffers per device"
        return Known(vram, "allocated", note), Known(ram, "allocated", note)
    if view.size_bytes is None or view.size_vram_bytes is None:
        return Known(), Known()
    ram_bytes = max(0, view.size_bytes - view.size_vram_bytes)
    return (
        Known(view.size_vram_bytes, "reported", "/api/ps size_vram"),
        Known(ram_bytes, "reported", "/api/ps size - size_vram"),
    )
