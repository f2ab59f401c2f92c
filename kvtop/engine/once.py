"""One sample of everything, and one round of the server view: the engine's synchronous reads.

:func:`sample_everything` is ``Engine.step`` (``--once``,
``--check``, each line of ``--stream``): every server, this machine's GPU and (``backlog``) the
log's newest lines read concurrently, then the processes, the runners' ``/slots``, the local
server's health and pulled models; everything staged through the engine and applied in one apply
step. :func:`sample_server_info` is one round of the server view (``i``). Both read through the
engine's sources and report failures through its ``_guarded``: they are the engine's, kept apart
so that ``core.py`` stays about staging, the apply step and the loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kvtop.engine.core import EngineCore
from kvtop.engine.fold import LogRun
from kvtop.engine.logfeed import LogFeed
from kvtop.engine.sources import health_source, pulled_source
from kvtop.engine.steps import Notice, Poll
from kvtop.model.gpu_snapshots import GpuSnapshot, ProcSnapshot
from kvtop.model.state import fold, fold_gpu, fold_slots
from kvtop.model.views import AppState

if TYPE_CHECKING:
    from kvtop.model.snapshots import OllamaSnapshot
    from kvtop.sources.tail_backlog import Backlog

__all__ = ["read_backlog", "sample_everything", "sample_server_info", "stage_backlog"]


async def sample_everything(engine: EngineCore, *, backlog: bool = False) -> list[AppState]:
    """One sample of everything, applied in one apply step; each server's state, in order.

    Every server, this machine's GPU and (``backlog``) the log's newest lines are read
    concurrently; then the processes, the runners' ``/slots``, the local server's health and
    pulled models (within what is left of the sample's bound: ``--timeout`` plus the
    ``/api/show`` budget). A server's own messages are staged first, then the log batches
    followed since the last step (``Engine.follow_log``), and one apply step folds them all with
    one alert evaluation per server (``--once``, ``--check``, each line of ``--stream``).
    """
    from kvtop.model.server_view import fold_server
    from kvtop.sources.slots import slot_runners

    src, settings = engine.sources, engine.settings
    held = engine._pending.pop(engine.log_host, [])  # the followed log's batches: after this sample's own
    started = time.monotonic()
    hosts = [h for h in src.servers if h in engine.states]

    async def nothing() -> None:
        return None

    gpu_call = src.gpu.sample() if src.gpu is not None else nothing()
    backlog_call = read_backlog(engine) if backlog else nothing()
    polls = asyncio.gather(*(engine._guarded("ollama", h, _sample_server(src.servers[h])) for h in hosts))
    snaps, gpu, read = await asyncio.gather(polls, engine._guarded("gpu", None, gpu_call), backlog_call)
    procs = ProcSnapshot(taken_at=time.time())
    if src.procs is not None:
        procs = await engine._guarded("procs", None, src.procs.sample(gpu.pids if gpu is not None else ())) or procs
    slots = None
    if src.slots is not None:  # the runner rung: each local llama-server's /props and /slots
        slots = await engine._guarded("slots", None, src.slots.sample(slot_runners(procs.runners)))
    conns = None
    port = engine.queue_port() if src.conns is not None else None
    if src.conns is not None and port is not None:  # the queue: the connections to the local API port
        conns = await engine._guarded("connections", engine.local_host, src.conns.sample(port))
    health = pulled = None
    if src.health is not None or src.pulled is not None:
        # the pre-flight's pulled models (--once: every one; --stream: a few per sample) within
        # what is left of this sample's bound, so a server with hundreds of slow models keeps
        # --once as quick as before; the rest say "waiting" (`kvtop plan --all` reads every one)
        budget_s = src.pulled.details_budget_s if src.pulled is not None else 0.0
        elapsed_s = time.monotonic() - started
        left_s = max(0.0, settings.timeout_s + budget_s - elapsed_s)
        health, pulled = await asyncio.gather(
            engine._guarded("health", engine.local_host, src.health.sample(procs, engine.local_host))
            if src.health is not None
            else nothing(),
            engine._guarded(
                "pulled",
                engine.local_host,
                src.pulled.sample_within(left_s, every=backlog, shows=0 if elapsed_s >= budget_s else None),
            )
            if src.pulled is not None
            else nothing(),
        )
    for host, snap in zip(hosts, snaps):
        if snap is None:
            continue
        if snap.host_url != host:
            snap = dataclasses.replace(snap, host_url=host)
        engine._polls.setdefault(host, []).append(Poll(snap, None))
        engine.stage(host, _folding(snap))
    if gpu is not None:
        engine.gpu = gpu
        for host in engine.hosts:
            if host in engine.gpu_hosts:
                engine.stage(host, lambda state: fold_gpu(state, gpu, procs))
            else:  # this machine's GPUs are not that server's: say so instead of "waiting"
                on_machine = host in engine.machine_hosts  # its runners and environment are readable here
                none = GpuSnapshot(
                    taken_at=gpu.taken_at,
                    status=(
                        f"GPU telemetry: none for this server (kvtop reads the GPUs of the machine it runs on,"
                        f" reported with {engine.local_host})"
                    ),
                )
                theirs = procs if on_machine else ProcSnapshot(taken_at=procs.taken_at)
                engine.stage(host, _folding_gpu(none, theirs))
    if slots is not None:
        for host in (*engine.gpu_hosts, *engine.machine_hosts):
            engine.stage(host, lambda state: fold_slots(state, slots))
    if conns is not None:
        engine.stage_connections(conns)
    if health is not None or pulled is not None:
        engine.stage(engine.local_host, lambda state: fold_server(state, health, pulled))
    if read is not None:
        stage_backlog(engine, read)
    if held:
        engine._pending.setdefault(engine.log_host, []).extend(held)
    engine.apply_step()
    return [engine.states[h] for h in engine.hosts]


def _folding(snap: OllamaSnapshot) -> Callable[[AppState], AppState]:
    return lambda state: fold(state, snap)


def _folding_gpu(gpu: GpuSnapshot, procs: ProcSnapshot) -> Callable[[AppState], AppState]:
    return lambda state: fold_gpu(state, gpu, procs)


async def read_backlog(engine: EngineCore) -> Backlog | None:
    """The server log's newest lines, once (``sources.tail_backlog``), None without a log."""
    if engine.settings.log_spec == "none":
        return None
    from kvtop.sources.tail import parse_log_spec
    from kvtop.sources.tail_backlog import read_backlog

    return await engine._guarded("log", engine.log_host, read_backlog(parse_log_spec(engine.settings.log_spec)))


def stage_backlog(engine: EngineCore, backlog: Backlog) -> None:
    """Parse a read backlog into the log's server and say what was read (a note).

    A log that ``auto`` picked but could not read is left out (the user asked for no log):
    the note says so and no ``log_source_lost`` alert is raised; a log named with ``--log``
    that cannot be read raises it, as on the dashboard.
    """
    auto = engine.settings.extra.get("log_origin") == "default"
    where = backlog.source
    host = engine.log_host
    if not backlog.ok:
        engine.report(
            Notice(
                "log", host, f"server log {where}: {backlog.status}" + (" — no log read" if auto else ""), error=False
            )
        )
        if auto:
            return
    elif not backlog.lines:
        engine.report(Notice("log", host, f"server log {where}: {backlog.status or 'no lines'}", error=False))
        if where in ("auto", "none"):
            return
    else:
        more = f"; {backlog.dropped_lines:,} older left out" if backlog.dropped_lines else ""
        engine.report(
            Notice("log", host, f"server log {where}: read its newest {len(backlog.lines):,} lines{more}", error=False)
        )
    events, error = LogFeed().parse(backlog.lines, final=True)
    if error is not None:
        engine.report(Notice("log", host, error))
    run = LogRun(
        list(events),
        source=where,
        status=backlog.status,
        ok=backlog.ok,
        lines=len(backlog.lines),
        dropped_lines=backlog.dropped_lines,
    )
    engine._log_events.extend(events)
    engine.stage(host, run.fold)


async def sample_server_info(engine: EngineCore, host: str, *, wait_s: float | None = None) -> None:
    """One round of the server view (``i``) for ``host``, staged for its next apply step: the
    health of its ``ollama serve`` when it runs on this machine (the demo's stand-in has none)
    and a read of its pulled models (``/api/tags``, ``/api/show`` a few at a time; a hanging
    ``/api/show`` holds one of its slots, never the round: ``wait_s``, default the interval)."""
    from kvtop.model.server_view import fold_server
    from kvtop.model.server_health import ServerHealth
    from kvtop.sources.ollama import OllamaClient

    state = engine.states.get(host)
    if state is None:
        return
    health = None
    if engine.settings.demo:
        health = ServerHealth(
            taken_at=time.time(), error="the demo's server is a stand-in: there is no ollama serve process to read"
        )
    elif host in engine.gpu_hosts or host in engine.machine_hosts:
        if engine.sources.health is None:
            engine.sources.health = health_source()
        health = await engine._guarded("health", host, engine.sources.health.sample(state.procs, host))
    pulled = None
    if isinstance(engine.sources.servers.get(host), OllamaClient):
        source = engine._pulled_sources.get(host)
        if source is None:
            source = engine._pulled_sources[host] = pulled_source(engine.settings, host)
        pulled = await engine._guarded(
            "pulled", host, source.sample_pulled(wait_s=max(0.5, engine.interval_s) if wait_s is None else wait_s)
        )
    engine.stage(host, lambda st: fold_server(st, health, pulled))


async def _sample_server(source: Any) -> OllamaSnapshot:
    """One poll; a real client waits for the loaded models' details (``--once`` is one sample)."""
    from kvtop.sources.ollama import OllamaClient

    if isinstance(source, OllamaClient):
        return await source.sample(wait_details=True)
    result: OllamaSnapshot = await source.sample()
    return result
