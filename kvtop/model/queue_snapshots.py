"""The queue's data: the connections read (``sources.connections``) and the queue figures the state
keeps (``AppState.queue``). Frozen data only, below the views; the folds and the JSON are in
``model.queue``, which says how each figure is estimated. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["ConnSnapshot", "Endpoint", "QueueView"]

Endpoint = tuple[str, int]
"""A client's address and TCP port."""


@dataclass(frozen=True, slots=True)
class ConnSnapshot:
    """The TCP connections established to one local port (``sources.connections.ConnectionSource``).

    Attributes:
        taken_at: Unix seconds of the read.
        port: The server's API port.
        clients: The remote end (address, port) of each connection, kvtop's own left out.
        own: How many of kvtop's own connections were left out.
        error: Why the connections could not be read (None when they were).
    """

    taken_at: float
    port: int
    clients: tuple[Endpoint, ...] = ()
    own: int = 0
    error: str | None = None


@dataclass(frozen=True, slots=True)
class QueueView:
    """One server's queue (see the module for how each figure is estimated).

    Attributes:
        taken_at: Unix seconds of the connections read it comes from.
        port: The API port counted.
        in_flight: Connections established to the API port (kvtop's own left out); None when not read.
        busy_slots / total_slots: Summed over the loaded models whose slots are known; None when
            no model's are.
        waiting: Requests waiting for a slot (0 while a slot is free); None when not known.
        oldest_wait_s: Seconds the oldest waiting request has waited; None when none waits, and
            after the first read (a connection's age is counted from when kvtop first saw it).
        full_models: The models whose every slot is busy: a new request for them would wait.
        clients: Connections per client address, most first.
        own: kvtop's own connections left out.
        error: Why the connections could not be read.
        first_seen: When each open connection was first seen (Unix seconds), carried to the next sample.
        snap: The connections read these figures come from: the slots figures are derived again from
            it when the models' slots change between two reads (``model.queue.requeue``).
    """

    taken_at: float
    port: int
    in_flight: int | None
    busy_slots: int | None
    total_slots: int | None
    waiting: int | None
    oldest_wait_s: float | None
    full_models: tuple[str, ...] = ()
    clients: tuple[tuple[str, int], ...] = ()
    own: int = 0
    error: str | None = None
    first_seen: Mapping[Endpoint, float] = dataclasses.field(default_factory=dict, compare=False)
    snap: ConnSnapshot | None = dataclasses.field(default=None, compare=False)
    aged: bool = dataclasses.field(default=False, compare=False)
    """Whether the connections were read before ``snap`` (then their ages are known)."""

    @property
    def source(self) -> str:
        """The mark of every figure here: ``estimated`` (idle keep-alive connections count as in flight)."""
        return "estimated"
