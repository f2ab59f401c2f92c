"""Queue rule: requests wait for a slot longer than ``Thresholds.queue_wait_s`` while every slot of a
model is busy (``AppState.queue``, estimated from the connections to the API port: ``model.queue``).

The fixes: more slots (``OLLAMA_NUM_PARALLEL``: each slot adds num_ctx cells of KV cache, so the
runner's KV grows by that share; it fits when the GPU's free memory holds it;
docs/ollama-internals.md §3.3), or a shorter queue (``OLLAMA_MAX_QUEUE``, default 512: a request
beyond it is refused with HTTP 503 at once instead of waiting; §3.5).
"""

from __future__ import annotations

from kvtop.model.alerts.context import Ctx
from kvtop.model.alerts.text import delta, ib
from kvtop.model.alerts.types import Alert, Fix

__all__ = ["queue_alerts"]


def _free_bytes(ctx: Ctx) -> int | None:
    gpu = ctx.state.gpu
    if gpu is None or not gpu.ok:
        return None
    frees = [d.memory_free_bytes for d in gpu.devices if d.error is None]
    if not frees or any(f is None for f in frees):
        return None
    return sum(f or 0 for f in frees)


def queue_alerts(ctx: Ctx) -> list[Alert]:
    """``queue_wait`` for the server, with the slots and queue-length fixes (none while nothing waits)."""
    queue = ctx.state.queue
    if (
        queue is None
        or not queue.waiting
        or queue.oldest_wait_s is None
        or queue.oldest_wait_s < ctx.th.queue_wait_s
        or not ctx.live
    ):
        return []
    full = [v for v in ctx.views if v.name in queue.full_models]
    model = full[0].name if len(full) == 1 else None
    busy = f" ({queue.busy_slots}/{queue.total_slots} slots busy)" if queue.total_slots is not None else ""
    text = (
        f"{queue.waiting} request{'s' if queue.waiting != 1 else ''} waiting for a slot, the oldest "
        f"{queue.oldest_wait_s:.0f} s: every slot of {', '.join(v.name for v in full) or 'a model'} is busy{busy}"
        f" (estimated: {queue.in_flight} connections to port {queue.port})"
    )
    fixes: list[Fix] = []
    free = _free_bytes(ctx)
    for view in full[:1]:
        slots, kv_bytes = view.parallel.value, view.memory.kv.value
        if not slots or kv_bytes is None:
            continue
        wanted = slots + queue.waiting
        extra = kv_bytes * (wanted - slots) // slots
        fits = None if free is None else extra <= free
        room = "" if free is None else f", {ib(free)} free on the GPU"
        fixes.append(
            Fix(
                f"OLLAMA_NUM_PARALLEL={wanted}",
                f"KV ~{ib(kv_bytes + extra)} (~{delta(extra)}){room}",
                fits,
                "a restart of ollama serve; every model loaded after it gets that many slots, each with its own num_ctx of KV",
            )
        )
    fixes.append(
        Fix(
            "OLLAMA_MAX_QUEUE=" + str(max(1, queue.waiting)),
            "requests beyond it are refused at once (HTTP 503)",
            None,
            "clients get 'server busy' instead of waiting; a restart of ollama serve",
        )
    )
    return [
        Alert(
            kind="queue_wait",
            severity="warning",
            model=model,
            since=ctx.now,
            message=text,
            fixes=tuple(fixes),
            key=f"queue_wait:{model or '-'}",
        )
    ]
