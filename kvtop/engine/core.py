"""The headless engine: poll every source, stage what comes in, one apply step, hand out states.

Every face runs the same path (``ARCHITECTURE.md``, "The one data path"):

- sources (built once by :func:`kvtop.engine.sources.build_sources`) are sampled by the engine;
  each result is **staged** for its server (``stage_*``), in arrival order, and recorded when a
  ``Recorder`` is attached;
- **one apply step** (:meth:`Engine.apply_step`) folds every staged message of each server
  (:func:`kvtop.engine.fold.fold_pending`), evaluates that server's alerts once when its state
  changed (``model.fold_alerts.with_alerts``), records its history once, and calls the subscribers with
  a :class:`Step` (the new immutable ``AppState`` of each server);
- a source that raises (they should not: failures are data) or a parser bug is caught and
  reported the same way for every source (:class:`Notice` to the reporters), and the engine goes on.

Three ways to drive it: :meth:`Engine.run` (the continuous loop: one poller per server, this
machine's GPU and ``/slots`` in step with the local server's poll, the log followed; the apply
step ``APPLY_SETTLE_S`` after a poll, log batches alone at most every ``LOG_APPLY_GAP_INTERVALS``
intervals), ``Engine.step`` (one synchronous sample of everything: ``--once``, ``--check``,
each line of ``--stream``; ``kvtop.engine.once``, joined in ``kvtop.engine.engine``), and a replay staging recorded messages and calling :meth:`apply_step`
where the recording says (``replaying``). Nothing here imports Textual or Rich.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from datetime import datetime, timezone, tzinfo
from typing import TYPE_CHECKING, Any, TypeVar

from kvtop.config import Settings
from kvtop.config.files import state_dir
from kvtop.engine.fold import LogRun, Pending, fold_pending
from kvtop.engine.logfeed import LogFeed
from kvtop.engine.sources import EngineSources
from kvtop.engine.timeline import ChangeKeeper
from kvtop.engine.steps import (
    APPLY_SETTLE_S,
    LOG_APPLY_GAP_INTERVALS,
    QUEUE_EVERY_S,
    REPLAY_PENDING_MAX,
    Notice,
    Poll,
    Step,
)
from kvtop.logparse.events import LogEvent
from kvtop.model.fold_alerts import with_alerts
from kvtop.model.gpu_snapshots import GpuSnapshot, ProcSnapshot
from kvtop.model.history import History
from kvtop.model.ladder import url_port
from kvtop.model.queue import fold_queue
from kvtop.model.queue_snapshots import ConnSnapshot
from kvtop.model.slot_snapshots import SlotsSnapshot
from kvtop.model.snapshots import OllamaSnapshot
from kvtop.model.state import fold, fold_gpu, fold_procs, fold_slots, initial_state
from kvtop.model.views import AppState
from kvtop.sources.hosts import host_is_this_machine, local_host
from kvtop.sources.protocols import GpuWithProcs

if TYPE_CHECKING:
    from kvtop.sources.recorder import Recorder

__all__ = ["EngineCore"]

T = TypeVar("T")


class EngineCore:
    """Each server's state, kept by one apply path whoever drives it (:class:`kvtop.engine.engine.Engine`
    adds the synchronous reads of ``kvtop.engine.once``).

    Args:
        settings: The resolved settings (hosts, interval, alert thresholds, ``log_spec``).
        sources: What to read (``build_sources``); its ``servers`` name the hosts unless ``hosts`` does.
        hosts: The servers, in order (default: ``sources.servers``, else ``settings.host_urls``).
        alerts / naive_tz: Alert thresholds (``[alerts]``) and the zone of log stamps without one.
        gpu_hosts: The servers this machine's GPU sample joins (default: the local one only;
            the exporter joins it to every server on this machine).
        log_host: The server the log belongs to (default: the local one).
        poll: Poll the servers and this machine in :meth:`run` (False: only the log is followed).
        clock: Monotonic seconds (tests).
    """

    def __init__(
        self,
        settings: Settings,
        sources: EngineSources | None = None,
        *,
        hosts: Sequence[str] | None = None,
        alerts: Mapping[str, Any] | None = None,
        naive_tz: tzinfo | None = None,
        gpu_hosts: Collection[str] | None = None,
        log_host: str | None = None,
        poll: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.sources = sources if sources is not None else EngineSources()
        self.interval_s = settings.interval_s
        """Seconds between two polls (the dashboard's ``+``/``-`` change it; :meth:`wake` applies it now)."""
        self.paused = False
        """While True the loop samples nothing (the log is still followed)."""
        self.poll = poll
        self.recorder: Recorder | None = None
        """Where every staged message and every apply step is written (``--record``), or None."""
        self.on_record_error: Callable[[Recorder, Exception], None] | None = None
        """Called once when writing the recording fails (the recorder is closed and dropped)."""
        self.replaying = False
        """A replay drives the apply steps (:meth:`apply_step` where the recording has one)."""
        self.apply_each = False
        """A replay of a recording without apply records: every staged message is applied at once."""
        self.apply_steps = 0
        """Apply steps run (each: one fold of the staged messages per server, one alert evaluation each)."""
        self.alert_evaluations = 0
        """Alert evaluations run by the apply steps (one per changed server per step)."""
        self.gpu: GpuSnapshot | None = None
        """This machine's latest GPU sample."""
        self._clock = clock
        self._subscribers: list[Callable[[Step], None]] = []
        self._reporters: list[Callable[[Notice], None]] = []
        self._failing: dict[tuple[str, str | None], str] = {}
        self._wake = asyncio.Event()
        self._tick = asyncio.Event()
        self._first_poll = asyncio.Event()
        """Set once the local server's first poll has ended (answered or failed): :meth:`run`
        starts the log, GPU and ``/slots`` loops after it, so the first frame with data waits for
        one HTTP round trip only, not for the log probes' subprocesses and the process scan."""
        self.scheduled = False
        """Staged messages are applied by a timer (``APPLY_SETTLE_S`` / the log gap): set while
        :meth:`run` runs, and by a live dashboard whatever polls it (False: :meth:`step` or a replay applies)."""
        self._apply_timer: asyncio.TimerHandle | None = None
        self._apply_due = 0.0
        self._last_apply_at = float("-inf")
        self._gpu_hosts_arg = tuple(gpu_hosts) if gpu_hosts is not None else None
        self._log_host_arg = log_host
        self.log_feed: LogFeed | None = None
        self._pulled_sources: dict[str, Any] = {}
        """The server view's pulled-model readers, one per server asked about (closed by :meth:`aclose`)."""
        tz = naive_tz or datetime.now().astimezone().tzinfo or timezone.utc
        self.timeline = ChangeKeeper(
            None if settings.demo else state_dir(), lambda h, t: self.report(Notice("timeline", h, t))
        )
        """Each server's changes (``engine.timeline``), kept in the state folder (not the demo's)."""
        self.warnings: list[str] = []
        self.reset(
            tuple(hosts or self.sources.servers or settings.host_urls),
            settings.alerts if alerts is None else alerts,
            tz,
        )

    # ----------------------------------------------------------------------------------------
    # state

    def reset(self, hosts: Sequence[str], alerts: Mapping[str, Any], naive_tz: tzinfo) -> list[str]:
        """Start again from each server's initial state (a replay jumping back); the threshold warnings."""
        self.hosts: tuple[str, ...] = tuple(hosts)
        self.local_host = local_host(self.hosts)
        """The server this machine's GPU sample and the server log belong to."""
        self.log_host = self._log_host_arg if self._log_host_arg in self.hosts else self.local_host
        self.gpu_hosts = tuple(
            h
            for h in (self._gpu_hosts_arg if self._gpu_hosts_arg is not None else (self.local_host,))
            if h in self.hosts
        )
        self.machine_hosts = tuple(h for h in self.hosts if h not in self.gpu_hosts and host_is_this_machine(h))
        """The other servers on this machine: their runners and environment are read here too."""
        self.states: dict[str, AppState] = {}
        for h in self.hosts:
            self.states[h], warnings = initial_state(h, alerts, naive_tz)
            if h == self.hosts[0]:
                self.warnings = list(warnings)
        self.histories: dict[str, History] = {h: History() for h in self.hosts}
        self._pending: dict[str, list[Pending]] = {}
        self._polls: dict[str, list[Poll]] = {}
        self._log_events: list[LogEvent] = []
        return self.warnings

    @property
    def pending(self) -> Mapping[str, Sequence[Pending]]:
        """The staged messages not applied yet, by server."""
        return self._pending

    def subscribe(self, callback: Callable[[Step], None]) -> Callable[[], None]:
        """Call ``callback`` after each apply step; returns the function that unsubscribes it."""
        self._subscribers.append(callback)
        return lambda: self._subscribers.remove(callback) if callback in self._subscribers else None

    def on_notice(self, callback: Callable[[Notice], None]) -> Callable[[], None]:
        """Call ``callback`` with each source failure and note; returns the function that removes it."""
        self._reporters.append(callback)
        return lambda: self._reporters.remove(callback) if callback in self._reporters else None

    def report(self, notice: Notice) -> None:
        """Hand ``notice`` to every reporter (a reporter that raises is left out of it)."""
        for callback in tuple(self._reporters):
            try:
                callback(notice)
            except Exception:  # noqa: BLE001, S110 - a face's bug must not stop the engine
                pass

    # ----------------------------------------------------------------------------------------
    # staging

    def _record(self, write: Callable[[Recorder], None]) -> None:
        """``--record``: write one message; on a write error stop recording and say so once."""
        if self.recorder is None:
            return
        try:
            write(self.recorder)
        except Exception as exc:  # noqa: BLE001 - disk full, removed disk: kvtop keeps running
            recorder, self.recorder = self.recorder, None
            recorder.close()
            if self.on_record_error is not None:
                self.on_record_error(recorder, exc)
            else:
                self.report(Notice("recording", None, f"recording stopped: {recorder.path}: {exc}"))

    def stage(self, host: str, item: Pending, *, urgent: bool = True) -> None:
        """Keep one message for ``host``'s next apply step. Live, a poll result (``urgent``) is
        applied ``APPLY_SETTLE_S`` later with the other samples of its tick; log batches alone
        wait for that step, or ``interval_s`` after the last one (``LOG_APPLY_GAP_INTERVALS``
        while polling). A replay applies where its recording says (at once without apply records)."""
        if host not in self.states:
            return
        pending = self._pending.setdefault(host, [])
        pending.append(item)
        self._staged(host, urgent=urgent)

    def _staged(self, host: str, *, urgent: bool) -> None:
        if self.scheduled and not self.replaying:
            self._schedule_apply(urgent=urgent)
        elif self.replaying and (self.apply_each or len(self._pending.get(host, ())) > REPLAY_PENDING_MAX):
            self.apply_step()

    def stage_snapshot(self, snap: OllamaSnapshot, *, duration_s: float | None = None) -> None:
        """A poll of one server (routed by its ``host_url``; with one server, to it)."""
        self._record(lambda r: r.ollama(snap))
        host = snap.host_url
        if host not in self.states:
            if len(self.hosts) != 1:
                return
            host = self.hosts[0]
        self._polls.setdefault(host, []).append(Poll(snap, duration_s))
        self.stage(host, lambda state: fold(state, snap))

    def stage_gpu(self, gpu: GpuSnapshot, procs: ProcSnapshot) -> None:
        """This machine's GPU + process sample: the GPU servers' figures, the other local servers' runners."""
        self._record(lambda r: r.gpu(gpu, procs))
        self.gpu = gpu
        for host in self.gpu_hosts:
            self.stage(host, lambda state: fold_gpu(state, gpu, procs))
        for host in self.machine_hosts:  # runners and environment only: the GPU panel is the first server's
            self.stage(host, lambda state: fold_procs(state, procs))

    def stage_connections(self, snap: ConnSnapshot) -> None:
        """A read of the connections to the local server's API port (the queue, ``model.queue``)."""
        self.stage(self.local_host, lambda state: fold_queue(state, snap))

    def stage_slots(self, snap: SlotsSnapshot) -> None:
        """A ``/props`` + ``/slots`` round of this machine's runners (the runner rung)."""
        self._record(lambda r: r.slots(snap))
        for host in (*self.gpu_hosts, *self.machine_hosts):
            self.stage(host, lambda state: fold_slots(state, snap))

    def stage_log(
        self,
        events: Sequence[LogEvent],
        *,
        source: str | None,
        status: str | None,
        ok: bool,
        lines: int,
        dropped_lines: int,
        raw_lines: Sequence[str],
    ) -> None:
        """One parsed log batch (merged with the batches staged just before it)."""
        self._record(
            lambda r: r.log(
                source=source, status=status, ok=ok, lines=lines, dropped_lines=dropped_lines, raw_lines=list(raw_lines)
            )
        )
        host = self.log_host
        if host not in self.states:
            return
        self._log_events.extend(events)
        pending = self._pending.setdefault(host, [])
        if pending and isinstance(pending[-1], LogRun):
            pending[-1].add(
                events,
                source=source,
                status=status,
                ok=ok,
                lines=lines,
                dropped_lines=dropped_lines,
                raw_lines=raw_lines,
            )  # the loads are grouped once
        else:
            run = LogRun([])
            run.add(
                events,
                source=source,
                status=status,
                ok=ok,
                lines=lines,
                dropped_lines=dropped_lines,
                raw_lines=raw_lines,
            )
            pending.append(run)
        self._staged(host, urgent=False)

    def log_batch(
        self, lines: Sequence[str], *, source: str | None, status: str | None, ok: bool, dropped_lines: int = 0
    ) -> None:
        """Parse one batch of raw log lines (:class:`LogFeed`) and stage it; a parser error is
        reported once and the parser starts again."""
        if self.log_feed is None:
            self.log_feed = LogFeed()
        events, error = self.log_feed.parse(lines)
        if error is not None:
            self.report(Notice("log", self.log_host, error))
        self.stage_log(
            events, source=source, status=status, ok=ok, lines=len(lines), dropped_lines=dropped_lines, raw_lines=lines
        )

    # ----------------------------------------------------------------------------------------
    # the apply step

    def _schedule_apply(self, *, urgent: bool) -> None:
        now = self._clock()
        # the first step is applied at once: the other loops start after the first poll (run), so
        # nothing could join it, and the first frame with data waits for no timer
        due = now + (APPLY_SETTLE_S if self._last_apply_at > float("-inf") else 0.0)
        if not urgent:
            gap = self.interval_s * (LOG_APPLY_GAP_INTERVALS if self.poll and self.sources.servers else 1.0)
            due = max(due, self._last_apply_at + gap)
        if self._apply_timer is not None:
            if self._apply_due <= due:
                return  # an earlier step takes this message too
            self._apply_timer.cancel()
        self._apply_due = due
        self._apply_timer = asyncio.get_running_loop().call_later(due - now, self.apply_step)

    def apply_step(self) -> Step | None:
        """The apply step: for each server with staged messages, fold them into its state, evaluate
        its alerts once (only when the state changed) and record its history once; then the
        subscribers get the :class:`Step`. None when nothing was staged (a replay's apply records
        count a step all the same)."""
        if self._apply_timer is not None:
            self._apply_timer.cancel()
            self._apply_timer = None
        pending, self._pending = self._pending, {}
        polls, self._polls = self._polls, {}
        log_events, self._log_events = self._log_events, []
        if not pending and not (self.replaying and not self.apply_each):
            return None
        self._last_apply_at = self._clock()
        self.apply_steps += 1
        changed: list[str] = []
        previous: dict[str, AppState] = {}
        for host, items in pending.items():
            old = self.states.get(host)
            if old is None:
                continue
            try:
                new = fold_pending(old, items)
                if new is old:
                    continue  # nothing changed (a repeated /slots round): no evaluation, no repaint
                self.alert_evaluations += 1
                new = with_alerts(new)
                if not self.replaying:  # a recording's past is not this server's timeline
                    new = self.timeline.observe(host, new, log_events if host == self.log_host else ())
            except Exception as exc:  # noqa: BLE001 - a bug in the model must not stop the engine
                self.report(Notice("apply", host, f"internal error applying a sample: {type(exc).__name__}: {exc}"))
                continue
            self.states[host] = new
            self.histories[host].record(new)
            previous[host] = old
            changed.append(host)
        self._record(lambda r: r.apply())
        step = Step(
            self.apply_steps,
            dict(self.states),
            tuple(changed),
            previous,
            {h: tuple(p) for h, p in polls.items()},
            tuple(log_events),
        )
        for callback in tuple(self._subscribers):
            callback(step)
        return step

    # ----------------------------------------------------------------------------------------
    # failures

    async def _guarded(self, source: str, host: str | None, call: Awaitable[T]) -> T | None:
        """Await one source call; a raise is reported once (again when its text changes) and gives None."""
        key = (source, host)
        try:
            result = await call
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - one source's bug must not stop the others
            text = f"{source} source failed: {type(exc).__name__}: {exc}"
            if self._failing.get(key) != text:
                self._failing[key] = text
                self.report(Notice(source, host, text))
            return None
        self._failing.pop(key, None)
        return result

    # ----------------------------------------------------------------------------------------
    # the continuous loop

    def wake(self) -> None:
        """Poll now (an interval made shorter, pause lifted)."""
        self._wake.set()

    async def run(self) -> None:
        """Poll every server and this machine and follow the log until cancelled; apply steps as
        results come in. Sources stay open (:meth:`aclose` closes them)."""
        src = self.sources
        coros: list[Awaitable[None]] = []
        later: list[Callable[[], Awaitable[None]]] = []  # started after the local server's first poll
        if self.poll:
            coros += [self._poll_host(host) for host in src.servers if host in self.states]
        if src.log is not None:
            later.append(self._follow_log)
        if self.poll and src.gpu is not None and src.procs is not None:
            later.append(self._poll_gpu)
            if src.slots is not None:
                later.append(self._poll_slots)
        if self.poll and src.conns is not None and self.queue_port() is not None:
            later.append(self._poll_connections)
        if self.poll and self.local_host in src.servers and self.local_host in self.states:
            coros += [self._after_first_poll(start) for start in later]
        else:
            coros += [start() for start in later]
        tasks = [asyncio.ensure_future(self._supervised(c)) for c in coros]
        scheduled, self.scheduled = self.scheduled, True
        try:
            await asyncio.gather(*tasks)
        finally:
            self.scheduled = scheduled
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _after_first_poll(self, start: Callable[[], Awaitable[None]]) -> None:
        """Run the loop ``start`` makes once the local server's first poll has ended, or after
        ``interval_s`` when that poll hangs (a dead server's timeout must not delay the log)."""
        try:
            await asyncio.wait_for(self._first_poll.wait(), timeout=self.interval_s)
        except asyncio.TimeoutError:
            pass
        await start()

    async def _supervised(self, loop: Awaitable[None]) -> None:
        """One of :meth:`run`'s loops; a bug that ends it is reported and the other loops go on."""
        try:
            await loop
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - one loop's bug must not stop the others
            self.report(Notice("engine", None, f"a polling loop stopped: {type(exc).__name__}: {exc}"))

    async def _poll_host(self, host: str) -> None:
        """Sample one server, stage it, sleep ``interval_s`` after the sample (its polls never
        overlap; every server has its own loop, so a slow one never delays another)."""
        source = self.sources.servers[host]
        while True:
            if not self.paused:
                if host == self.local_host:
                    self._tick.set()  # the waiters wake; clearing at once does not undo that
                    self._tick.clear()
                started = time.perf_counter()
                snap = await self._guarded("ollama", host, source.sample())
                if snap is not None:
                    if snap.host_url != host:  # a source reports the URL it polled; route by ours
                        snap = dataclasses.replace(snap, host_url=host)
                    self.stage_snapshot(snap, duration_s=time.perf_counter() - started)
                if host == self.local_host:
                    self._first_poll.set()
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=self.interval_s)
            except asyncio.TimeoutError:
                pass

    async def _next_tick(self) -> None:
        """Wait for the local server's next poll (so this machine's samples are applied with it),
        or ``interval_s`` when it is not polled or its poll is late (a dead server's timeout)."""
        wait = self.interval_s * (1.5 if self.poll and self.local_host in self.sources.servers else 1.0)
        try:
            await asyncio.wait_for(self._tick.wait(), timeout=wait)
        except asyncio.TimeoutError:
            pass

    async def _poll_gpu(self) -> None:
        """One GPU sample, then the processes on it, staged together; then the next tick."""
        assert self.sources.gpu is not None and self.sources.procs is not None
        sampler = GpuWithProcs(self.sources.gpu, self.sources.procs)
        while True:
            if not self.paused:
                sample = await self._guarded("gpu", None, sampler.sample())
                if sample is not None:
                    self.stage_gpu(*sample)
            await self._next_tick()

    async def _poll_slots(self) -> None:
        """Ask the local llama-server runners for ``/slots`` each tick, only while the process
        sample lists one with a port (one last empty round clears the rows when they go)."""
        assert self.sources.slots is not None
        from kvtop.sources.slots import slot_runners

        asked = False
        while True:
            state = self.states.get(self.local_host)
            procs = state.procs if state is not None else None
            runners = slot_runners(procs.runners) if procs is not None else ()
            if not self.paused and (runners or asked):
                snap = await self._guarded("slots", None, self.sources.slots.sample(runners))
                if snap is not None:
                    self.stage_slots(snap)
                asked = bool(runners)
            await self._next_tick()

    def queue_port(self) -> int | None:
        """The API port whose connections make the local server's queue: the port of its URL when
        it is on this machine, else None (a remote server's connections are not visible here)."""
        if not host_is_this_machine(self.local_host):
            return None
        return url_port(self.local_host)

    async def _poll_connections(self) -> None:
        """Read the connections to the local server's API port every :data:`QUEUE_EVERY_S` (with the
        tick that follows): the kernel walks its whole TCP hash table for ``/proc/net/tcp``, about
        5 ms of system time a read however few sockets there are, and a wait worth an alert lasts
        longer than that (``Thresholds.queue_wait_s``)."""
        assert self.sources.conns is not None
        port = self.queue_port()
        last = float("-inf")
        while port is not None:
            if not self.paused and self._clock() - last >= QUEUE_EVERY_S - 0.05 * self.interval_s:
                last = self._clock()
                snap = await self._guarded("connections", self.local_host, self.sources.conns.sample(port))
                if snap is not None:
                    self.stage_connections(snap)
            await self._next_tick()

    async def _follow_log(self) -> None:
        """Read the log's batches, parse each (:meth:`log_batch`) and stage it."""
        assert self.sources.log is not None
        self.log_feed = self.log_feed or LogFeed()
        try:
            async for batch in self.sources.log.batches():
                self.log_batch(
                    batch.lines,
                    source=batch.source,
                    status=batch.status,
                    ok=batch.ok,
                    dropped_lines=batch.dropped_lines,
                )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a log source's bug: said, the rest goes on
            self.report(Notice("log", self.log_host, f"log source failed: {type(exc).__name__}: {exc}"))

    # ----------------------------------------------------------------------------------------
    # one synchronous sample

    def follow_log(self) -> None:
        """Between :meth:`step` calls (``--stream``): follow the log; each step applies the batches
        read since the previous one, in order. Needs a running event loop."""
        if self.sources.log is None or getattr(self, "_log_task", None) is not None:
            return
        self._log_task: asyncio.Task[None] | None = asyncio.ensure_future(self._follow_log())

    async def aclose(self) -> None:
        """Stop following, drop a pending apply step and close every source (safe to call twice)."""
        if self._apply_timer is not None:
            self._apply_timer.cancel()
            self._apply_timer = None
        task = getattr(self, "_log_task", None)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            self._log_task = None
        pulled, self._pulled_sources = self._pulled_sources, {}
        for source in pulled.values():
            try:
                await source.aclose()
            except Exception:  # noqa: BLE001, S110 - closing must never block exiting
                pass
        await self.sources.aclose()
