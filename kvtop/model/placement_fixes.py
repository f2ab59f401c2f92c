"""The computed fixes of a placement report (``model.placement_reason``): each sized in bytes, none asking for
what is already set. Pure. The rules they follow are in ``docs/placement.md`` §6.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kvtop.logparse.load_build import Load
from kvtop.model.known import Known

__all__ = ["PlacementFix", "context_fixes", "short_fix", "spread_fix", "unload_fixes"]

MIB = 1024 * 1024
GIB = 1024 * MIB

MIN_NUM_CTX = 2048
"""The smallest per-slot num_ctx a fix proposes (Ollama's default before v0.6.5; docs/ollama-internals.md §3.3)."""

_QUANT_KV = {"q8_0", "q4_0"}


@dataclass(frozen=True, slots=True)
class PlacementFix:
    """One way to get the overflow back onto the GPUs.

    Attributes:
        action: What to set or do (``OLLAMA_SCHED_SPREAD=1``, ``num_ctx 8192``, ``unload qwen3:8b``).
        detail: What it moves or frees, in words with sizes.
        bytes: The bytes it frees or moves onto the GPUs (estimated), None when not a size.
        enough: Whether that covers what overflowed (None when not known).
    """

    action: str
    detail: str
    bytes: int | None = None
    enough: bool | None = None


def _size(n: int) -> str:
    return f"{n / GIB:.1f} GiB" if n >= GIB else f"{n / MIB:.0f} MiB"


def spread_fix(over: int | None, unused: Sequence[tuple[str, int]]) -> PlacementFix:
    """``OLLAMA_SCHED_SPREAD=1`` with the bytes each unused GPU would take of ``over``: filled in the order given
    (most free first), each up to its free memory less llama-server's 1024 MiB fit margin."""
    if not over:
        names = ", ".join(name for name, _ in unused)
        return PlacementFix("OLLAMA_SCHED_SPREAD=1", f"lets the load use {names} as well")
    left, parts = over, []
    for name, free in sorted(unused, key=lambda u: -u[1]):
        room = max(0, free - 1024 * MIB)
        take = min(left, room)
        if take > 0:
            parts.append(f"{name} ~{_size(take)}")
            left -= take
        if left <= 0:
            break
    moved = over - left
    detail = "the overflow would go to " + (", ".join(parts) if parts else "no GPU: none has room past the margin")
    if left > 0 and parts:
        detail += f"; ~{_size(left)} would still not fit"
    return PlacementFix("OLLAMA_SCHED_SPREAD=1", detail, moved or None, left <= 0)


def context_fixes(load: Load, over: int | None, settings: Mapping[str, Known[str]]) -> list[PlacementFix]:
    """Lower num_ctx to free ``over`` bytes of KV cache (estimated from the load's KV bytes per cell), and a
    quantized KV cache when flash attention is on and the cache is f16; neither when the log lacks the figures."""
    if not over:
        return []
    kv = load.kv_bytes if load.kv_bytes else (load.estimate.kv_bytes if load.estimate is not None else None)
    total = load.num_ctx_total
    parallel = load.parallel or 1
    out: list[PlacementFix] = []
    if kv and total:
        per_cell = kv / total
        need_cells = -(-over // max(1, int(per_cell)))
        per_slot = (total - need_cells) // parallel
        step = 1024 if per_slot >= MIN_NUM_CTX else 256
        per_slot = per_slot // step * step
        current = total // parallel
        if per_slot >= MIN_NUM_CTX and per_slot < current:
            freed = int((current - per_slot) * parallel * per_cell)
            out.append(
                PlacementFix(
                    f"num_ctx {per_slot}",
                    f"from {current} per slot: frees ~{_size(freed)} of KV cache for the ~{_size(over)} that"
                    " overflowed",
                    freed,
                    freed >= over,
                )
            )
        elif current > MIN_NUM_CTX:
            freed = int((current - MIN_NUM_CTX) * parallel * per_cell)
            out.append(
                PlacementFix(
                    f"num_ctx {MIN_NUM_CTX}",
                    f"from {current} per slot frees only ~{_size(freed)} of the ~{_size(over)}: the whole KV cache is"
                    f" {_size(kv)}",
                    freed,
                    False,
                )
            )
    kv_type = settings.get("OLLAMA_KV_CACHE_TYPE")
    set_type = (kv_type.value or "").lower() if kv_type is not None else ""
    if kv and load.flash_attention == "enabled" and (load.kv_type_k in (None, "f16")) and set_type not in _QUANT_KV:
        freed = kv // 2
        out.append(
            PlacementFix(
                "OLLAMA_KV_CACHE_TYPE=q8_0",
                f"halves the {_size(kv)} f16 KV cache (flash attention is on): frees ~{_size(freed)}",
                freed,
                freed >= over,
            )
        )
    return out


def unload_fixes(over: int | None, others: Sequence[tuple[str, int]]) -> list[PlacementFix]:
    """Unload the smallest other model whose VRAM covers ``over``; else all of them, when together they do."""
    if not over:
        return []
    on_gpu = sorted(((n, b) for n, b in others if b > 0), key=lambda x: x[1])
    for name, nbytes in on_gpu:
        if nbytes >= over:
            return [
                PlacementFix(f"unload {name}", f"frees {_size(nbytes)} of VRAM for the ~{_size(over)}", nbytes, True)
            ]
    total = sum(b for _, b in on_gpu)
    if len(on_gpu) > 1 and total >= over:
        names = ", ".join(n for n, _ in on_gpu)
        return [PlacementFix(f"unload {names}", f"together free {_size(total)} of VRAM", total, True)]
    if on_gpu:
        return [
            PlacementFix(
                f"unload {on_gpu[-1][0]}", f"frees {_size(on_gpu[-1][1])}: not enough alone", on_gpu[-1][1], False
            )
        ]
    return []


def short_fix(over: int | None, fixes: Sequence[PlacementFix]) -> list[PlacementFix]:
    """When no fix is enough: the bytes still missing, which only a smaller model or more GPU memory gives."""
    if not over or any(f.enough for f in fixes):
        return []
    return [
        PlacementFix(
            "a smaller quantization or more GPU memory",
            f"the GPUs are ~{_size(over)} short of holding the whole model",
            over,
            None,
        )
    ]
