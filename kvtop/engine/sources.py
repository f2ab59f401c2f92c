"""The one factory of a run's sources: each server's client and this machine's readers, built once.

:func:`build_sources` turns the resolved :class:`~kvtop.config.Settings` into
:class:`EngineSources`: one ``OllamaClient`` per server with that server's access options
(``settings.access_for(host)``), the server log (``sources.tail.open_log_source``), this machine's
GPU and process readers (or those given: the demo's simulated machine with ``--demo``), the runners' ``/slots``,
the server's health and its pulled models. Every argument given replaces the one it names, so the
dashboard's constructor arguments and the tests' fakes go through the same factory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kvtop.config import Settings
from kvtop.sources.protocols import GpuSourceLike, OllamaSource, ProcSourceLike, SlotsSourceLike

if TYPE_CHECKING:
    from kvtop.sources.connections import ConnectionSource
    from kvtop.sources.health import HealthSource
    from kvtop.sources.pulled import PulledSource
    from kvtop.sources.tail import LogSource

__all__ = ["EngineSources", "build_sources", "health_source", "machine_sources", "ollama_client", "pulled_source"]


@dataclass(slots=True)
class EngineSources:
    """Everything one engine reads: each server's client (in ``--host`` order) and this machine's readers.

    Attributes:
        servers: Host URL → its poller, in the order given (the first is the one on screen first).
        log: The server log of the local server, or None (``--log none``).
        gpu / procs: This machine's GPU and process readers (both or neither).
        slots: The local llama-server runners' ``/props`` + ``/slots``, or None.
        health: The local server's health (``--once``/``--stream``), or None.
        pulled: The local server's pulled models for the pre-flight (``--once``/``--stream``), or None.
        conns: The TCP connections to the local server's API port (the queue), or None.
    """

    servers: dict[str, OllamaSource] = field(default_factory=dict)
    log: LogSource | None = None
    gpu: GpuSourceLike | None = None
    procs: ProcSourceLike | None = None
    slots: SlotsSourceLike | None = None
    health: HealthSource | None = None
    pulled: PulledSource | None = None
    conns: ConnectionSource | None = None

    def closables(self) -> list[Any]:
        """Every source, each once (a source given twice is closed once)."""
        out: list[Any] = []
        for src in (
            *self.servers.values(),
            self.log,
            self.gpu,
            self.procs,
            self.slots,
            self.health,
            self.pulled,
            self.conns,
        ):
            if src is not None and not any(src is seen for seen in out):
                out.append(src)
        return out

    async def aclose(self) -> None:
        """Close every source (safe to call twice; a failing close never blocks exiting)."""
        for closable in self.closables():
            try:
                await closable.aclose()
            except Exception:  # noqa: BLE001, S110 - closing must never block exiting
                pass


def ollama_client(settings: Settings, host: str, *, show_timeout_s: float | None = None) -> OllamaSource:
    """The ``OllamaClient`` of one server, with its timeouts and access options (TLS, credentials)."""
    from kvtop.sources.ollama import OllamaClient

    return OllamaClient(
        host,
        timeout_s=settings.timeout_s,
        show_timeout_s=settings.show_timeout_s if show_timeout_s is None else show_timeout_s,
        access=settings.access_for(host),
    )


def health_source() -> HealthSource:
    """The reader of an ``ollama serve`` process's health on this machine (restarts, cgroup limits)."""
    from kvtop.sources.health import HealthSource

    return HealthSource()


def pulled_source(settings: Settings, host: str) -> PulledSource:
    """The reader of one server's pulled models (``/api/tags``, then ``/api/show`` a few at a time),
    with that server's timeouts and access options."""
    from kvtop.sources.pulled import PulledSource

    return PulledSource(
        host, timeout_s=settings.timeout_s, show_timeout_s=settings.show_timeout_s, access=settings.access_for(host)
    )


def machine_sources() -> tuple[GpuSourceLike, ProcSourceLike]:
    """This machine's GPU and process readers (``--demo`` passes the scenario's simulated machine
    instead: ``kvtop.cli``, a face, builds it; the engine does not import the demo)."""
    from kvtop.sources.gpu import GpuSource
    from kvtop.sources.procs import ProcSource

    return GpuSource(), ProcSource()


def build_sources(
    settings: Settings,
    *,
    servers: Mapping[str, OllamaSource] | None = None,
    log: LogSource | None = None,
    gpu: GpuSourceLike | None = None,
    procs: ProcSourceLike | None = None,
    slots: SlotsSourceLike | None = None,
    machine: bool = True,
    read_slots: bool | None = None,
    server_info: bool = False,
    show_timeout_s: float | None = None,
) -> EngineSources:
    """Build each source of a run once.

    Args:
        settings: The resolved settings (hosts, timeouts, access, ``log_spec``, ``demo``).
        servers: Pollers to use instead of new clients (host URL → source); a server of
            ``settings.host_urls`` missing from it gets a new client unless ``servers`` is given.
        log: The log source to use; else one is opened for ``settings.log_spec`` (none for ``none``).
        gpu / procs / slots: Readers to use instead of this machine's (``--demo``: its simulated machine).
        machine: Read this machine's GPU and processes when no reader is given.
        read_slots: Ask the runners for ``/slots`` (default: when this machine's own readers are made).
        server_info: Also read the local server's health and pulled models (``--once``/``--stream``).
        show_timeout_s: ``/api/show``'s timeout, when not ``settings.show_timeout_s``.

    Raises:
        ValueError: ``settings.log_spec`` is not a valid log spec.
    """
    if servers is None:
        clients = {h: ollama_client(settings, h, show_timeout_s=show_timeout_s) for h in settings.host_urls}
    else:
        clients = dict(servers)
    if log is None and settings.log_spec != "none":
        from kvtop.sources.tail import open_log_source, parse_log_spec

        log = open_log_source(parse_log_spec(settings.log_spec))
    own = machine and gpu is None and procs is None
    if own:
        gpu, procs = machine_sources()
    if slots is None and (read_slots if read_slots is not None else own):
        from kvtop.sources.slots import SlotsSource

        slots = SlotsSource()
    health = pulled = None
    if server_info:
        from kvtop.sources.hosts import local_host

        health = health_source()
        pulled = pulled_source(settings, local_host(tuple(clients) or settings.host_urls))
    conns = None
    if own:  # the queue: this machine's sockets (the demo's simulated machine has none)
        from kvtop.sources.connections import ConnectionSource

        conns = ConnectionSource()
    return EngineSources(
        servers=clients, log=log, gpu=gpu, procs=procs, slots=slots, health=health, pulled=pulled, conns=conns
    )
