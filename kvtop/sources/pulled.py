"""The models a server has pulled, for the pre-flight (``model.preflight``): ``/api/tags`` and each
model's ``/api/show``.

``PulledSource`` is an ``OllamaClient`` (its deadlines, body limits, proxy and TLS rules) with a
cache of its own: ``/api/tags`` is read again at most every ``TAGS_EVERY_S``; ``/api/show``
(verbose: per-layer arrays for the KV arithmetic) once per digest, lazily, through a rolling
pool: at most ``SHOW_CONCURRENCY`` in flight, the next one starting as soon as one answers, each
under its own ``show_timeout_s`` deadline, so a model whose ``/api/show`` hangs holds one slot for
its deadline, not a whole round. ``sample_all`` reads them all (``--once``, ``plan --all``);
``sample_pulled(wait_s=…)`` (the server view) reads for ``wait_s`` each call and leaves the
requests still running to the next; plain ``sample_pulled`` reads a few and waits for them. A failed ``/api/show`` is kept as a
``ShowInfo`` with its ``error`` (the reason) and tried again after ``SHOW_RETRY_S``. Read-only:
GET and ``POST /api/show``.
"""

from __future__ import annotations

import asyncio
import time
from types import MappingProxyType
from collections.abc import Iterator
from typing import Any

from kvtop.model.snapshots import PsModel, PulledSnapshot, ShowInfo, TagInfo
from kvtop.sources.ollama import SHOW_CONCURRENCY, SHOW_RETRY_S, OllamaClient
from kvtop.sources.ollama_decode import ShapeError, parse_ps, parse_show, parse_tags
from kvtop.sources.ollama_errors import RequestFailed

TAGS_EVERY_S = 30.0
"""``/api/tags`` is read again at most this often (a pull or a delete shows up within it)."""


class PulledSource(OllamaClient):
    """Reads ``/api/tags`` and, a few at a time, ``/api/show`` of every pulled model.

    Args: as ``OllamaClient``; ``clock`` also times the caches.
    """

    def __init__(self, base_url: str, **kw: Any) -> None:
        super().__init__(base_url, **kw)
        self._pulled_tags: dict[str, TagInfo] | None = None
        self._pulled_tags_at: float | None = None
        self._pulled_error: str | None = None
        self._pulled_shows: dict[str, ShowInfo] = {}
        self._pulled_failed_at: dict[str, float] = {}
        self._pulled_inflight: dict[str, asyncio.Task[None]] = {}
        """``/api/show`` requests left running between calls (``sample_pulled(wait_s=…)``), by digest."""

    async def sample_pulled(self, *, shows: int = SHOW_CONCURRENCY, wait_s: float | None = None) -> PulledSnapshot:
        """One round: ``/api/tags`` when due, then up to ``shows`` missing ``/api/show`` answers
        (``shows=0``: none). Never raises (except cancellation).

        ``wait_s`` None: waits for the ones it asked. A number (the server view, every interval):
        for ``wait_s`` seconds the missing ones are read through the rolling pool (``shows`` does
        not cap them), and the requests still running then run on between calls (at most
        ``SHOW_CONCURRENCY`` in flight in all), so a model whose ``/api/show`` hangs holds one
        slot for its deadline and never the sample."""
        now = self._clock()
        if self._pulled_tags_at is None or now - self._pulled_tags_at >= TAGS_EVERY_S:
            self._pulled_tags_at = now
            try:
                self._pulled_tags = parse_tags(await self._request("GET", "/api/tags"))
                self._pulled_error = None
            except RequestFailed as exc:
                self._pulled_error = exc.message
            except ShapeError as exc:
                self._pulled_error = f"/api/tags: unexpected shape: {exc}"
        tags = self._pulled_tags
        if tags is not None:
            for gone in [d for d in self._pulled_shows if d not in tags]:
                del self._pulled_shows[gone]
                self._pulled_failed_at.pop(gone, None)
            due = [t for t in self._due(tags, now) if t.digest not in self._pulled_inflight]
            if wait_s is None:
                if due[: max(0, shows)]:
                    await self._read_shows(due[: max(0, shows)], now, end=None)
            else:
                await self._roll_on(iter(due), now, end=time.monotonic() + max(0.0, wait_s))
        return self.snapshot(now)

    async def _roll_on(self, waiting: Iterator[TagInfo], now: float, *, end: float) -> None:
        """The rolling pool of ``sample_pulled(wait_s=…)``: until ``end`` (``time.monotonic()``),
        start the next of ``waiting`` whenever fewer than ``SHOW_CONCURRENCY`` run; the ones
        running at ``end`` are left running (``_pulled_inflight``) for the next call."""
        inflight = self._pulled_inflight
        while True:
            for digest in [d for d, t in inflight.items() if t.done()]:
                del inflight[digest]
            while len(inflight) < SHOW_CONCURRENCY and time.monotonic() < end:
                tag = next(waiting, None)
                if tag is None:
                    break
                inflight[tag.digest] = asyncio.create_task(self._pulled_show(tag, now))
            left_s = end - time.monotonic()
            if not inflight or left_s <= 0:
                return
            done, _ = await asyncio.wait(set(inflight.values()), timeout=left_s, return_when=asyncio.FIRST_COMPLETED)
            if not done:
                return

    async def aclose(self) -> None:
        """Cancel the ``/api/show`` requests left running, then as ``OllamaClient.aclose``."""
        running = list(self._pulled_inflight.values())
        for task in running:
            task.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)
        await super().aclose()

    def _due(self, tags: dict[str, TagInfo], now: float) -> list[TagInfo]:
        """The models whose ``/api/show`` is missing, or failed ``SHOW_RETRY_S`` ago or more (``/api/tags`` order)."""
        return [
            t
            for d, t in tags.items()
            if d not in self._pulled_shows
            or (d in self._pulled_failed_at and now - self._pulled_failed_at[d] >= SHOW_RETRY_S)
        ]

    async def _read_shows(self, due: list[TagInfo], now: float, *, end: float | None) -> None:
        """Read ``due``'s ``/api/show`` through a rolling pool: at most ``SHOW_CONCURRENCY`` in
        flight, the next started as soon as one answers (or fails: each has its own deadline).
        ``end`` (``time.monotonic()``): no request starts after it, and those in flight then are
        cancelled (not kept: asked again next time). Cancellation cancels the ones in flight."""
        waiting = iter(due)
        running: set[asyncio.Task[None]] = set()
        try:
            while True:
                while len(running) < SHOW_CONCURRENCY and (end is None or time.monotonic() < end):
                    tag = next(waiting, None)
                    if tag is None:
                        break
                    running.add(asyncio.create_task(self._pulled_show(tag, now)))
                if not running:
                    return
                left_s = None if end is None else max(0.0, end - time.monotonic())
                done, running = await asyncio.wait(running, timeout=left_s, return_when=asyncio.FIRST_COMPLETED)
                if not done:  # the budget ran out with these in flight
                    return
        finally:
            for task in running:
                task.cancel()
            if running:
                await asyncio.gather(*running, return_exceptions=True)

    def snapshot(self, now: float | None = None) -> PulledSnapshot:
        """What was read so far (no I/O): the last ``/api/tags`` and every ``/api/show`` answer."""
        tags = self._pulled_tags
        return PulledSnapshot(
            taken_at=self._clock() if now is None else now,
            tags=MappingProxyType(dict(tags)) if tags is not None else None,
            shows=MappingProxyType(dict(self._pulled_shows)),
            error=self._pulled_error,
        )

    async def sample_within(self, budget_s: float, *, every: bool, shows: int | None = None) -> PulledSnapshot:
        """:meth:`sample_all` (``every``) or one :meth:`sample_pulled` round, cut off after
        ``budget_s`` seconds: then what was read by that time (answers are kept as they arrive, and
        the ones cut off are asked again next time). ``shows=0``: ``/api/tags`` only (when due), no
        ``/api/show``. Never raises (except cancellation)."""
        if shows is not None:
            work = self.sample_pulled(shows=shows)
        else:
            work = self.sample_all(budget_s) if every else self.sample_pulled()
        try:
            return await asyncio.wait_for(work, timeout=max(0.0, budget_s))
        except TimeoutError:
            return self.snapshot()

    async def sample_all(self, budget_s: float | None = None) -> PulledSnapshot:
        """``/api/tags`` when due, then every missing (or failed, ``SHOW_RETRY_S`` ago) model's
        ``/api/show`` through the rolling pool, for ``--once`` and ``kvtop plan --all``.

        ``budget_s`` (default ``3 × details_budget_s``) bounds the whole: no request starts after
        it, and the ones in flight then are cancelled. A model is asked once per call; one that
        failed (its deadline, an HTTP error) is in ``shows`` with its ``error``, one not asked in
        time is missing from ``shows``. Never raises (except cancellation)."""
        end = time.monotonic() + (budget_s if budget_s is not None else self.details_budget_s * 3)
        snap = await self.sample_pulled(shows=0)
        tags = self._pulled_tags
        if tags is not None:
            due = self._due(tags, snap.taken_at)
            if due:
                await self._read_shows(due, snap.taken_at, end=end)
                snap = self.snapshot()
        return snap

    async def version_and_ps(self) -> tuple[str | None, tuple[PsModel, ...], str | None]:
        """``(/api/version, /api/ps rows, why /api/ps could not be read)``; never raises."""
        version = await self._fetch_version()
        try:
            return version, parse_ps(await self._request("GET", "/api/ps")), None
        except RequestFailed as exc:
            return version, (), exc.message
        except ShapeError as exc:
            return version, (), f"/api/ps: unexpected shape: {exc}"

    async def _pulled_show(self, tag: TagInfo, now: float) -> None:
        """Read one model's ``/api/show`` and keep the answer (an error is asked again after
        ``SHOW_RETRY_S``)."""
        try:
            body = await self._request(
                "POST", "/api/show", json_body={"model": tag.name, "verbose": True}, deadline_s=self._show_timeout_s
            )
            info = parse_show(body, digest=tag.digest, name=tag.name)
        except RequestFailed as exc:
            info = ShowInfo(digest=tag.digest, name=tag.name, error=exc.message)
        except ShapeError as exc:
            info = ShowInfo(digest=tag.digest, name=tag.name, error=f"/api/show: unexpected shape: {exc}")
        self._pulled_shows[tag.digest] = info
        if info.error:
            self._pulled_failed_at[tag.digest] = now
        else:
            self._pulled_failed_at.pop(tag.digest, None)
