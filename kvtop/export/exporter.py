"""The headless exporter loop: the engine polls, each apply step is published to the hosts' views.

The dashboard's own engine (``kvtop.engine.Engine``) polls every host, sleeping the interval after
each sample, and folds each interval's samples in one apply step (one alert evaluation per host);
each step is published to the hosts' views (:class:`HostPoller`), so a server is polled at most
once per interval whatever the number of scrapers. Every host has its own task, and every
request a hard deadline, so a slow or dead server delays no other.

GPU and process telemetry describe the machine kvtop runs on: they are sampled only when a host is
on this machine and joined to those hosts only. The server log is the log of the first host: its
events give the ``allocated`` figures, the tokens-per-second gauges and the truncation and reload
counters (``kvtop.export.log_counters``).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from kvtop.export.log_counters import count_log
from kvtop.export.metrics import HostView, KvtopCollector
from kvtop.export.metrics_cache import MetricsCache
from kvtop.model.gpu_snapshots import GpuSnapshot
from kvtop.model.snapshots import OllamaSnapshot
from kvtop.model.state import initial_state
from kvtop.sources.protocols import GpuSourceLike, OllamaSource, ProcSourceLike, SlotsSourceLike

if TYPE_CHECKING:
    from kvtop.engine import Notice, Step
    from kvtop.sources.connections import ConnectionSource
    from kvtop.sources.tail import LogSource


def say(text: str) -> None:
    """Write one line, ``kvtop export: <text>``, to stderr (``text`` already made safe)."""
    print(f"kvtop export: {text}", file=sys.stderr, flush=True)


class HostPoller:
    """One server's published view: the engine's state of it, its poll counts and log counters.

    The engine (:class:`Exporter`'s ``engine``) polls; :meth:`on_step` publishes each apply step.
    All mutation happens on the event loop's thread; :attr:`view` is replaced whole, so the
    HTTP threads always read a consistent snapshot.
    """

    def __init__(
        self,
        url: str,
        source: OllamaSource,
        *,
        local: bool,
        alerts: Mapping[str, Any],
        log: bool = False,
        tls_verified: bool | None = None,
    ) -> None:
        self.url = url
        self.source = source
        self.alerts = alerts
        state, self.warnings = initial_state(url, alerts, datetime.now().astimezone().tzinfo or timezone.utc)
        self.view = HostView(url=url, local=local, log=log, state=state, tls_verified=tls_verified)
        self.said_error: str | None = None
        """The TLS or auth error last said on stderr (said once, again when it changes)."""

    def _publish(self, **changes: Any) -> None:
        self.view = replace(self.view, **changes)

    def on_step(self, step: Step) -> bool:
        """Publish this server's part of one apply step (its state, polls and log counters);
        True when the view changed."""
        hv = self.view
        state = step.states.get(self.url, hv.state)
        polls = step.polls.get(self.url, ())
        changes: dict[str, Any] = {}
        if state is not hv.state:
            changes["state"] = state
        if polls:
            changes.update(
                polls=hv.polls + len(polls),
                poll_failures=hv.poll_failures + sum(1 for p in polls if not p.snapshot.reachable),
                poll_duration_s=polls[-1].duration_s,
            )
        if hv.log and step.log_events:
            counters = count_log(hv.counters, step.log_events, state.log.loads)
            if counters is not hv.counters:
                changes["counters"] = counters
        if changes:
            self._publish(**changes)
        for poll in polls:
            self._say_access_error(poll.snapshot)
        return bool(changes)

    def _say_access_error(self, snap: OllamaSnapshot) -> None:
        """A certificate that does not verify or credentials refused (configuration, not an outage)
        are said on stderr once, and when they change or clear; other failures are metrics only."""
        from kvtop.textsafe import safe

        error = snap.error if snap.error_kind in ("tls", "auth") else None
        if error != self.said_error:
            if error is not None:
                say(safe(f"{self.url}: {error}"))  # the error may quote the server: data, not escapes
            elif self.said_error is not None:
                say(f"{self.url}: reached again")
            self.said_error = error

    def access_error(self) -> str | None:
        """The TLS or auth error of the latest poll, None when it had none."""
        snap = self.view.state.ollama
        return snap.error if snap is not None and snap.error_kind in ("tls", "auth") else None


class Exporter:
    """The headless loop: the engine (``kvtop.engine``) polls every host, this machine and the log;
    each apply step is published to the hosts' views and ``/metrics`` is rendered once.

    Args:
        pollers: One per server, first one gets the log.
        interval_s: Seconds slept after each sample.
        gpu_source / proc_source: This machine's telemetry; None when no host is local. The GPU
            sample joins every host on this machine.
        log_source: The first host's server log, or None.
    """

    def __init__(
        self,
        pollers: Sequence[HostPoller],
        *,
        interval_s: float,
        gpu_source: GpuSourceLike | None = None,
        proc_source: ProcSourceLike | None = None,
        log_source: LogSource | None = None,
        slots_source: SlotsSourceLike | None = None,
        conns_source: ConnectionSource | None = None,
    ) -> None:
        from kvtop.config import Settings
        from kvtop.engine import Engine, EngineSources

        self.slots_source = slots_source
        self.pollers = tuple(pollers)
        self.interval_s = interval_s
        self.gpu_source = gpu_source
        self.proc_source = proc_source
        self.log_source = log_source
        urls = [p.url for p in self.pollers]
        settings = Settings(
            host_url=urls[0] if urls else "http://127.0.0.1:11434",
            more_hosts=tuple(urls[1:]),
            interval_s=interval_s,
            log_spec="none",
        )
        self.engine = Engine(
            settings,
            EngineSources(
                servers={p.url: p.source for p in self.pollers},
                log=log_source,
                gpu=gpu_source,
                procs=proc_source,
                slots=slots_source,
                conns=conns_source,  # the queue of the first host when it is on this machine
            ),
            hosts=urls or None,
            alerts=self.pollers[0].alerts if self.pollers else {},
            gpu_hosts=[p.url for p in self.pollers if p.view.local],
            log_host=urls[0] if urls else None,
        )
        """Polls, stages and applies (one alert evaluation per host and step)."""
        self.engine.subscribe(self._on_step)
        self.engine.on_notice(self._on_notice)
        self.collector = KvtopCollector(lambda: [p.view for p in self.pollers], lambda: self.gpu)
        self.cache = MetricsCache(self.collector)
        """``/metrics`` rendered once per apply step (``MetricsServer(cache=...)``)."""

    @property
    def gpu(self) -> GpuSnapshot | None:
        """This machine's latest GPU sample (read by scrapes)."""
        return self.engine.gpu

    def _on_step(self, step: Step) -> None:
        """After an apply step: publish each host's view; the cached body is stale: render it now
        if a scrape is due before the next poll."""
        changed = [p.on_step(step) for p in self.pollers]
        if any(changed):
            self._polled()

    def _on_notice(self, notice: Notice) -> None:
        say(notice.text if notice.host is None else f"{notice.host}: {notice.text}")

    def _polled(self) -> None:
        self.cache.invalidate()
        took = max((p.view.poll_duration_s or 0.0 for p in self.pollers), default=0.0)
        self.cache.prerender(self.interval_s + took)  # a poll sleeps the interval after its sample

    async def run(self, stop: asyncio.Event) -> None:
        """Poll until ``stop`` is set, then stop the engine and close every source."""
        engine = asyncio.create_task(self.engine.run(), name="engine")
        waiter = asyncio.create_task(stop.wait())
        try:
            done, _ = await asyncio.wait({engine, waiter}, return_when=asyncio.FIRST_COMPLETED)
            if engine in done and not engine.cancelled() and engine.exception() is not None:
                exc = engine.exception()
                say(f"engine stopped: {type(exc).__name__}: {exc}")
            await stop.wait()
        finally:
            for t in (engine, waiter):
                t.cancel()
            await asyncio.gather(engine, waiter, return_exceptions=True)
            await self.engine.aclose()
