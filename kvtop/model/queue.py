"""The request queue of a local server: requests in flight, how many wait for a slot, and for how long.

Ollama answers one request per slot (``OLLAMA_NUM_PARALLEL`` slots per model) and queues the rest
(up to ``OLLAMA_MAX_QUEUE``, default 512; ``docs/ollama-internals.md`` §3). Nothing in its API says
how many wait, so kvtop estimates it from what this machine shows:

- **in flight**: the TCP connections established to the server's API port
  (``sources.connections``), kvtop's own left out. An idle keep-alive connection of a client
  counts too, so the figure is an upper bound: marked ``estimated``.
- **busy slots**: per model, from the runner's ``/slots`` or the log (``ModelView.slots``).
- **waiting** = in flight − busy slots, counted only while some model has every slot busy (while
  every model has a free slot, the next request is served at once: 0). The newest connections are the
  ones waiting (Ollama serves in arrival order), so the **oldest wait** is the age of the oldest of
  them, from the time kvtop first saw each connection (a connection that was already open at
  kvtop's start is aged from then; after a single read, as ``--once`` makes, it is not known).

Pure: the connections are a :class:`~kvtop.model.queue_snapshots.ConnSnapshot` (the data, below
the views, in ``model.queue_snapshots``); :func:`fold_connections` carries the first-seen times from
one sample to the next.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from kvtop.model.known import marked
from kvtop.model.queue_snapshots import ConnSnapshot, QueueView
from kvtop.model.views import AppState, ModelView

__all__ = ["fold_connections", "fold_queue", "queue_json", "queue_short", "queue_summary", "requeue"]


def _slots(models: Sequence[ModelView]) -> tuple[int | None, int | None, tuple[str, ...]]:
    busy = total = None
    full: list[str] = []
    for view in models:
        use = view.slots
        if use is None or use.busy is None or use.total is None:
            continue
        busy = (busy or 0) + use.busy
        total = (total or 0) + use.total
        if use.total and use.busy >= use.total:
            full.append(view.name)
    return busy, total, tuple(full)


def fold_connections(previous: QueueView | None, snap: ConnSnapshot, models: Sequence[ModelView]) -> QueueView:
    """The queue after one connections read.

    Args:
        previous: The queue before (its ``first_seen`` ages the connections still open), or None.
        snap: The connections read.
        models: The server's loaded models (their slots).

    Returns:
        The new :class:`QueueView`; with ``snap.error`` set, every figure is None and the error is kept.
    """
    busy, total, full = _slots(models)
    if snap.error is not None:
        return QueueView(snap.taken_at, snap.port, None, busy, total, None, None, full, error=snap.error, snap=snap)
    read_before = previous is not None and previous.port == snap.port and previous.error is None
    seen = previous.first_seen if previous is not None and read_before else {}
    first_seen = {c: seen.get(c, snap.taken_at) for c in snap.clients}
    in_flight = len(snap.clients)
    waiting: int | None
    oldest: float | None = None
    if in_flight == 0 or not models:
        waiting = 0  # no connection open, or nothing loaded (a new load serves the request): nothing waits
    elif total is None:
        waiting = None  # connections open, slots not known: cannot tell
    elif full:
        waiting = max(0, in_flight - (busy or 0))
    else:
        waiting = 0  # every model has a free slot: the next request for it is served at once
    if waiting and read_before:  # a first read cannot age its connections: the oldest wait is not known yet
        times = sorted(first_seen.values())
        oldest = max(0.0, snap.taken_at - times[len(times) - waiting])
    per_client: dict[str, int] = {}
    for addr, _port in snap.clients:
        per_client[addr] = per_client.get(addr, 0) + 1
    clients = tuple(sorted(per_client.items(), key=lambda kv: (-kv[1], kv[0])))
    return QueueView(
        snap.taken_at,
        snap.port,
        in_flight,
        busy,
        total,
        waiting,
        oldest,
        full,
        clients,
        snap.own,
        None,
        first_seen,
        snap,
        read_before,
    )


def requeue(state: AppState) -> AppState:
    """``state`` with its queue derived again from its last connections read when the models' slots
    changed since (a ``/slots`` round or the log's slot lines arrive between two reads of the
    connections, which are read every few seconds); ``state`` itself when they did not."""
    queue = state.queue
    if queue is None or queue.snap is None:
        return state
    busy, total, full = _slots(state.models)
    if (busy, total, full) == (queue.busy_slots, queue.total_slots, queue.full_models):
        return state
    before = queue if queue.aged else None  # with no read before the last one, its ages stay unknown
    return dataclasses.replace(state, queue=fold_connections(before, queue.snap, state.models))


def fold_queue(state: AppState, snap: ConnSnapshot) -> AppState:
    """``state`` with its queue after one connections read (:func:`fold_connections` over its models)."""
    return dataclasses.replace(state, queue=fold_connections(state.queue, snap, state.models))


def queue_json(queue: QueueView | None) -> dict[str, Any] | None:
    """``--once --json``'s ``queue``: the figures above with their mark, or null when not read."""
    if queue is None:
        return None
    return {
        "port": queue.port,
        "in_flight": queue.in_flight,
        "busy_slots": queue.busy_slots,
        "total_slots": queue.total_slots,
        "waiting": queue.waiting,
        "oldest_wait_s": None if queue.oldest_wait_s is None else round(queue.oldest_wait_s, 1),
        "full_models": list(queue.full_models),
        "clients": [{"address": a, "connections": n} for a, n in queue.clients],
        "own_connections_left_out": queue.own,
        "source": queue.source,
        "error": queue.error,
    }


def queue_summary(queue: QueueView | None, *, clients: int = 3) -> str | None:
    """The queue in one line, the same on every face: ``in flight 3~ · waiting 2~ (oldest 30 s) ·
    slots busy 2/2 · full: qwen3 · clients 10.0.0.7 ×3``; the counts carry the estimated mark.
    None when the connections were never read; the reason when they could not be."""
    if queue is None:
        return None
    if queue.error is not None:
        return queue.error
    parts = [f"in flight {marked(queue.in_flight, queue.source)}"]
    waiting = f"waiting {marked(queue.waiting, queue.source)}"
    if queue.waiting and queue.oldest_wait_s is not None:
        waiting += f" (oldest {queue.oldest_wait_s:.0f} s)"
    parts.append(waiting)
    if queue.busy_slots is not None and queue.total_slots is not None:
        parts.append(f"slots busy {queue.busy_slots}/{queue.total_slots}")
    if queue.full_models:
        parts.append("full: " + ", ".join(queue.full_models))
    if queue.clients:
        shown = ", ".join(f"{addr} ×{n}" for addr, n in queue.clients[:clients])
        more = len(queue.clients) - clients
        parts.append(f"clients {shown}{f' +{more}' if more > 0 else ''}")
    return " · ".join(parts)


def queue_short(queue: QueueView | None) -> str | None:
    """The dashboard header's form of :func:`queue_summary`: ``queue 2~ waiting (oldest 30 s)``
    while requests wait (the count marked estimated); None while none waits, while the waiting
    count is not known, and when the connections were not read or could not be (the server view
    says why)."""
    if queue is None or queue.error is not None or not queue.waiting:
        return None
    text = f"queue {marked(queue.waiting, queue.source)} waiting"
    if queue.oldest_wait_s is not None:
        text += f" (oldest {queue.oldest_wait_s:.0f} s)"
    return text
