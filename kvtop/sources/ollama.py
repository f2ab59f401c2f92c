"""Ollama HTTP API source: ``/api/version``, ``/api/ps``, ``/api/show``, ``/api/tags``.

Every poll becomes one ``OllamaSnapshot``; no exception leaves ``OllamaClient.sample()``.
Shapes follow ``api/types.go`` (docs/ollama-internals.md §1.1, §2.1); every field is optional on
the way in, because real servers differ by version (no ``context_length`` before v0.10.0,
empty ``details``, cloud models, extra fields).

This module is the polling client; its parts live beside it: the answers' decoding
(``ollama_decode``), the bounds on a body (``ollama_limits``), what a failure says
(``ollama_errors``) and the requests outside a poller (``ollama_writes``).
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import time
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import httpx

from kvtop.sources.auth import ServerAccess
from kvtop.model.snapshots import OllamaSnapshot, PsModel, ShowInfo, TagInfo, detail_key
from kvtop.sources.ollama_decode import ShapeError, _one_line, _str_or_none, parse_ps, parse_show, parse_tags
from kvtop.sources.ollama_errors import RequestFailed, _mib, _root_os_error, _safe_location, auth_message, tls_message
from kvtop.sources.ollama_limits import (
    BODY_LIMIT_BYTES,
    DEFAULT_BODY_LIMIT_BYTES,
    DEFAULT_JSON_VALUE_LIMIT,
    ERROR_BODY_LIMIT_BYTES,
    JSON_VALUE_LIMIT,
    LARGE_BODY_BYTES,
    _TooLarge,
    _Undecodable,
    _read_capped,
    json_values_upper_bound,
)
from kvtop.sources.ollama_writes import LOAD_TIMEOUT_S, _write_error, _write_status, generate_body

TAGS_REFRESH_S = 30.0
"""Minimum seconds between two ``/api/tags`` calls made to learn a new digest's file size."""

VERSION_RETRY_S = 30.0
"""Seconds before a failed ``/api/version`` is tried again."""

FIRST_DETAILS_WAIT_S = 1.0
"""How long the first sample waits for ``/api/version`` and ``/api/show`` before returning."""


SHOW_CONCURRENCY = 6
"""Most ``/api/show`` requests in flight at once per server. With 1,000 loaded models, firing
them all at once makes httpx's connection pool degrade quadratically and bursts the server; the
rest wait their turn (outside their deadline) in the server's ``/api/ps`` order."""

SHOW_CACHE_SPARE = 64
"""``/api/show`` answers kept for models no longer loaded (the newest ones); older ones are dropped."""

SHOW_RETRY_S = 15.0
"""Seconds before a failed ``/api/show`` for a digest is tried again."""


def _local_plain_http(url: str) -> bool:
    """Whether ``url`` is plain http to this machine (a new connection per request costs ~0.1 ms there)."""
    from kvtop.sources.hosts import host_is_this_machine

    return url.lower().startswith("http://") and host_is_this_machine(url)


class OllamaClient:
    """Polls one Ollama server over ``httpx.AsyncClient`` and returns complete snapshots.

    Only ``/api/ps`` is on the poll's critical path. ``/api/version``, ``/api/show`` (verbose,
    once per manifest digest, again when a digest changes) and ``/api/tags`` (when a loaded
    digest's file size is unknown, at most every ``TAGS_REFRESH_S``) run as background tasks
    whose answers join the next snapshot, so a slow ``/api/show`` never delays the table.
    Every request has a hard deadline (a server trickling bytes cannot stall a poll).
    Polls are read-only: only GET and the read-only ``POST /api/show``; the one write,
    ``generate`` (unload, keep-alive, load with a num_ctx), is sent only when the operator
    confirms one (never with ``--readonly``: the UI offers no write then).

    Args:
        base_url: Server base URL (``config.parse_ollama_host``).
        timeout_s: Deadline of ``/api/ps``, ``/api/version`` and ``/api/tags``, in seconds.
        show_timeout_s: Deadline of ``/api/show`` (verbose answers carry the tokenizer: MBs).
        transport: An ``httpx`` transport for tests (e.g. ``httpx.MockTransport``).
        clock: Wall-clock function (Unix seconds) stamped on snapshots.
        access: Credentials, extra headers and TLS trust for this server
            (``config.server_accesses``); None sends none and verifies as httpx does.
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 3.0,
        show_timeout_s: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
        clock: Any = time.time,
        access: ServerAccess | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._timeout_s = timeout_s
        self._show_timeout_s = show_timeout_s
        self._clock = clock
        # credentials, extra headers and TLS trust (sources.auth); a proxy never sits between kvtop
        # and a local server; no CA bundle is read for plain http; only the encodings
        # _BoundedDecoder can decode with a bound are asked for
        self.access = access if access is not None else ServerAccess(self.base_url)
        options = self.access.client_options(
            base_url=self.base_url, timeout=httpx.Timeout(timeout_s), transport=transport
        )
        if _local_plain_http(self.base_url):
            # no idle keep-alive connection to a server on this machine: another kvtop reading its queue
            # (the connections to the API port, model.queue) would count it as a request in flight
            options["limits"] = httpx.Limits(max_keepalive_connections=0)
        self._client = httpx.AsyncClient(**options)
        self._show_slots = asyncio.Semaphore(SHOW_CONCURRENCY)
        self._shows: dict[str, ShowInfo] = {}
        self._show_failed_at: dict[str, float] = {}
        self._show_tasks: dict[str, asyncio.Task[ShowInfo]] = {}
        self._tags: dict[str, TagInfo] = {}
        self._tags_read_at: float | None = None
        self._tags_task: asyncio.Task[dict[str, TagInfo] | None] | None = None
        self._version: str | None = None
        self._version_failed_at: float | None = None
        self._version_task: asyncio.Task[str | None] | None = None
        self._samples = 0

    @property
    def details_budget_s(self) -> float:
        """Seconds ``sample(wait_details=True)`` waits for background answers, in all: the
        longest single deadline (``max(timeout_s, show_timeout_s)``)."""
        return max(self._timeout_s, self._show_timeout_s)

    async def aclose(self) -> None:
        """Cancel background requests and close the connection pool."""
        for task in self._tasks():
            task.cancel()
        await self._client.aclose()

    def _tasks(self) -> list[asyncio.Task[Any]]:
        tasks: list[asyncio.Task[Any]] = list(self._show_tasks.values())
        tasks += [t for t in (self._tags_task, self._version_task) if t is not None]
        return tasks

    async def _request(self, method: str, path: str, *, json_body: Any = None, deadline_s: float | None = None) -> Any:
        """One request under one hard deadline, its body read as a bounded stream and decoded.

        Raises:
            RequestFailed: Refused, timed out, TLS or authentication refused, HTTP error or
                redirect, too large, invalid JSON. Its message never holds this server's
                credentials (``ServerAccess.scrub``: a proxy may echo them in its error page).
        """
        try:
            return await self._request_raw(method, path, json_body=json_body, deadline_s=deadline_s)
        except RequestFailed as exc:
            if exc.kind in ("auth", "tls"):
                raise  # kvtop's own words (auth_message, tls_message): nothing the server sent
            scrubbed = self.access.scrub(exc.message)
            if scrubbed == exc.message:
                raise
            raise RequestFailed(exc.kind, scrubbed) from None

    async def _request_raw(self, method: str, path: str, *, json_body: Any, deadline_s: float | None) -> Any:
        """:meth:`_request` before its message is scrubbed."""
        deadline = deadline_s or self._timeout_s
        limit = BODY_LIMIT_BYTES.get(path, DEFAULT_BODY_LIMIT_BYTES)
        try:
            status, reason, location, content = await asyncio.wait_for(
                self._fetch(method, path, json_body, deadline, limit), deadline
            )
        except (asyncio.TimeoutError, httpx.ReadTimeout, httpx.WriteTimeout, httpx.PoolTimeout):
            raise RequestFailed("timeout", f"{path}: no answer within {deadline:g} s") from None
        except httpx.ConnectTimeout:
            raise RequestFailed("timeout", f"{path}: connect timed out after {deadline:g} s") from None
        except httpx.ConnectError as exc:
            cause = _root_os_error(exc)
            if isinstance(cause, ConnectionRefusedError) or "refused" in str(exc).lower():
                raise RequestFailed("refused", f"connection refused ({self.base_url})") from None
            if isinstance(cause, socket.gaierror):
                raise RequestFailed(
                    "connect", f"cannot resolve host of {self.base_url}: {_one_line(str(cause), 80)}"
                ) from None
            if isinstance(cause, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(exc):
                raise RequestFailed("tls", tls_message(self.base_url, cause or exc)) from None
            detail = str(cause) if cause is not None else str(exc)
            raise RequestFailed("connect", f"cannot connect to {self.base_url}: {_one_line(detail, 100)}") from None
        except _TooLarge as exc:
            size = (
                f"{_mib(exc.size_bytes)}, limit {_mib(limit)}" if exc.size_bytes is not None else f"over {_mib(limit)}"
            )
            raise RequestFailed("other", f"{path}: response too large ({size})") from None
        except httpx.HTTPError as exc:
            if isinstance(exc, httpx.RemoteProtocolError) and "location header" in str(exc).lower():
                # httpx parses a redirect's Location even when it does not follow it
                raise RequestFailed("http", f"{path}: redirect to an invalid URL, not followed") from None
            raise RequestFailed("other", f"{path}: {type(exc).__name__}: {_one_line(str(exc), 100)}") from None
        except _Undecodable as exc:  # an encoding kvtop did not ask for, a corrupt gzip body
            raise RequestFailed("other", f"{path}: cannot decode the body: {_one_line(str(exc), 80)}") from None
        if 300 <= status < 400:
            where = f"redirect to {_safe_location(location)}" if location else "redirect without a Location"
            raise RequestFailed("http", f"{path}: HTTP {status} {reason}: {where}, not followed")
        if status in (401, 403):
            raise RequestFailed("auth", auth_message(status, self.access))
        if status >= 400:
            detail = ""
            text = content.decode("utf-8", "replace")
            try:
                body = json.loads(content)
                if isinstance(body, Mapping) and isinstance(body.get("error"), str):
                    detail = ": " + _one_line(body["error"], 120)
            except (ValueError, UnicodeDecodeError, RecursionError):
                detail = ": " + _one_line(text, 120) if text.strip() else ""
            raise RequestFailed("http", f"{path}: HTTP {status} {_one_line(reason, 40)}{detail}")
        values = json_values_upper_bound(content)
        max_values = JSON_VALUE_LIMIT.get(path, DEFAULT_JSON_VALUE_LIMIT)
        if values > max_values:
            raise RequestFailed(
                "other",
                f"{path}: too many JSON values (up to {values:,}; kvtop reads at most {max_values:,}): not decoded",
            )
        try:
            if len(content) > LARGE_BODY_BYTES:
                # a verbose /api/show carries the tokenizer (MBs): decode off the event loop
                return await asyncio.to_thread(json.loads, content)
            return json.loads(content)
        except (ValueError, UnicodeDecodeError, RecursionError):
            text = content[:240].decode("utf-8", "replace")
            raise RequestFailed("invalid_json", f"{path}: invalid JSON ({_one_line(text, 60)!r})") from None

    async def _fetch(
        self, method: str, path: str, json_body: Any, deadline: float, limit_bytes: int
    ) -> tuple[int, str, str | None, bytes]:
        """``(status, reason, Location, body)``; the body read as a stream, decoded, capped.

        A successful answer over ``limit_bytes`` raises ``_TooLarge`` (before reading anything
        when its Content-Length says so); an error body is cut at ``ERROR_BODY_LIMIT_BYTES``;
        a redirect's body is not read.
        """
        async with self._client.stream(method, path, json=json_body, timeout=httpx.Timeout(deadline)) as resp:
            status, reason = resp.status_code, resp.reason_phrase
            if 300 <= status < 400:
                return status, reason, resp.headers.get("location"), b""
            if status < 400:
                declared = resp.headers.get("content-length", "")
                identity = resp.headers.get("content-encoding", "").strip().lower() in ("", "identity")
                if identity and declared.isdigit() and int(declared) > limit_bytes:
                    raise _TooLarge(int(declared))
                return status, reason, None, await _read_capped(resp, limit_bytes, truncate=False)
            return status, reason, None, await _read_capped(resp, ERROR_BODY_LIMIT_BYTES, truncate=True)

    async def sample(self, *, wait_details: bool = False) -> OllamaSnapshot:
        """Poll the server once; never raises (except cancellation).

        Args:
            wait_details: Wait for the pending ``/api/version``, ``/api/show`` and
                ``/api/tags`` answers before returning, as ``--once`` does, for at most
                ``details_budget_s`` in all (so a sample takes at most the ``/api/ps``
                deadline plus that, however many models are loaded: ``/api/show`` runs
                ``SHOW_CONCURRENCY`` at a time). Otherwise only the first sample waits, up to
                ``FIRST_DETAILS_WAIT_S``.

        Returns:
            A complete snapshot. ``reachable`` is False when ``/api/ps`` failed; ``error``
            then says how (refused, timeout, HTTP status or redirect, response too large,
            invalid JSON or shape). Failures of the other calls are kept per model and do not
            fail the snapshot; a model whose ``/api/show`` has not arrived has no ``shows``
            entry yet (the state says "waiting for /api/show").
        """
        taken_at = self._clock()
        try:
            return await self._sample(taken_at, wait_details)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a bug must become a visible error, not a dead poller
            return self._snapshot(
                taken_at,
                reachable=False,
                error_kind="other",
                error=f"internal error while polling: {type(exc).__name__}: {_one_line(str(exc), 120)}",
            )

    async def _sample(self, taken_at: float, wait_details: bool) -> OllamaSnapshot:
        t0 = time.perf_counter()
        try:
            body = await self._request("GET", "/api/ps")
            latency_s = time.perf_counter() - t0
            models = parse_ps(body)
        except RequestFailed as exc:
            self._version = None  # a server that comes back may be another version
            self._version_failed_at = None
            return self._snapshot(taken_at, reachable=False, error=exc.message, error_kind=exc.kind)
        except ShapeError as exc:
            return self._snapshot(
                taken_at, reachable=False, error=f"/api/ps: unexpected shape: {exc}", error_kind="invalid_shape"
            )
        self._samples += 1
        self._start_details(models, taken_at)
        pending = [t for t in self._tasks() if not t.done()]
        if pending and (wait_details or self._samples == 1):
            await asyncio.wait(pending, timeout=self.details_budget_s if wait_details else FIRST_DETAILS_WAIT_S)
        self._collect(taken_at)
        return self._snapshot(taken_at, reachable=True, latency_s=latency_s, models=models)

    def _start_details(self, models: tuple[PsModel, ...], now: float) -> None:
        if (
            self._version is None
            and self._version_task is None
            and (self._version_failed_at is None or now - self._version_failed_at >= VERSION_RETRY_S)
        ):
            self._version_task = asyncio.create_task(self._fetch_version())
        live = set()
        for m in models:
            key = detail_key(m)
            live.add(key)
            if key not in self._show_tasks and self._show_due(key, now):
                self._show_tasks[key] = asyncio.create_task(self._show(m))
        for key in [k for k, t in self._show_tasks.items() if k not in live and not t.done()]:
            self._show_tasks.pop(key).cancel()  # unloaded while queued: it must not hold up the loaded ones
        missing = any(m.digest and m.digest not in self._tags and not self._is_remote(m) for m in models)
        if (
            missing
            and self._tags_task is None
            and (self._tags_read_at is None or now - self._tags_read_at >= TAGS_REFRESH_S)
        ):
            self._tags_read_at = now
            self._tags_task = asyncio.create_task(self._fetch_tags())

    def _is_remote(self, m: PsModel) -> bool:
        """A cloud model (its ``/api/show`` says remote): ``/api/tags`` has no file for it."""
        show = self._shows.get(detail_key(m))
        return show is not None and show.remote

    def _collect(self, now: float) -> None:
        """Move finished background answers into the caches."""
        for key, task in list(self._show_tasks.items()):
            if not task.done():
                continue
            del self._show_tasks[key]
            info = task.result() if not task.cancelled() else ShowInfo(digest=key, name=key, error="cancelled")
            self._shows[key] = info
            if info.error:
                self._show_failed_at[key] = now
            else:
                self._show_failed_at.pop(key, None)
        if self._version_task is not None and self._version_task.done():
            version = None if self._version_task.cancelled() else self._version_task.result()
            self._version_task = None
            self._version = version
            self._version_failed_at = None if version else now
        if self._tags_task is not None and self._tags_task.done():
            tags = None if self._tags_task.cancelled() else self._tags_task.result()
            self._tags_task = None
            if tags is not None:
                self._tags = tags

    async def _fetch_version(self) -> str | None:
        try:
            body = await self._request("GET", "/api/version")
        except RequestFailed:
            return None
        return _str_or_none(body.get("version")) if isinstance(body, Mapping) else None

    async def _fetch_tags(self) -> dict[str, TagInfo] | None:
        try:
            return parse_tags(await self._request("GET", "/api/tags"))
        except (RequestFailed, ShapeError):
            return None

    async def _show(self, m: PsModel) -> ShowInfo:
        key = detail_key(m)
        try:
            async with self._show_slots:  # the deadline starts once a slot is free
                body = await self._request(
                    "POST", "/api/show", json_body={"model": m.name, "verbose": True}, deadline_s=self._show_timeout_s
                )
            return parse_show(body, digest=key, name=m.name)
        except RequestFailed as exc:
            return ShowInfo(digest=key, name=m.name, error=exc.message)
        except ShapeError as exc:
            return ShowInfo(digest=key, name=m.name, error=f"/api/show: unexpected shape: {exc}")

    def _forget_shows(self, live: set[str]) -> None:
        """Keep the ``/api/show`` answers of the loaded models and the ``SHOW_CACHE_SPARE`` newest
        others (a model that comes back soon is not asked again); the oldest go, so a server that
        loads ever new models does not grow kvtop's memory."""
        spare = [k for k in self._shows if k not in live]
        for key in spare[: max(0, len(spare) - SHOW_CACHE_SPARE)]:
            del self._shows[key]
            self._show_failed_at.pop(key, None)

    def _show_due(self, key: str, now: float) -> bool:
        """True when ``/api/show`` for ``key`` is not cached, or failed ≥ SHOW_RETRY_S ago."""
        if key not in self._shows:
            return True
        failed_at = self._show_failed_at.get(key)
        return failed_at is not None and now - failed_at >= SHOW_RETRY_S

    async def generate(
        self,
        model: str,
        *,
        keep_alive: int | str | None = None,
        num_ctx: int | None = None,
        timeout_s: float = LOAD_TIMEOUT_S,
    ) -> str | None:
        """``POST /api/generate`` with an empty prompt, through this client's own connection
        pool (its headers, TLS and proxy settings apply): the one kind of write kvtop sends.

        ``keep_alive=0`` unloads the model as ``ollama stop`` does; a duration (``"5m"``,
        ``"1h"``; a number is seconds, negative is forever) keeps it loaded that long from now,
        as ``ollama run --keepalive`` does; ``num_ctx`` (re)loads it with that context
        (docs/ollama-internals.md §1.4, §3.5 ``keep_alive``; Ollama API docs "Load a model",
        "Unload a model").

        Args:
            model: Model name as ``/api/ps`` lists it.
            keep_alive: Sent when not None.
            num_ctx: Sent as ``options.num_ctx`` when not None.
            timeout_s: Bound on the whole request (a load reads the weights: minutes).

        Returns:
            None on success, else one line saying what went wrong (never raises but cancellation).
        """
        body = generate_body(model, keep_alive=keep_alive, num_ctx=num_ctx)
        try:
            async with self._client.stream(
                "POST", "/api/generate", json=body, timeout=httpx.Timeout(timeout_s, connect=10.0)
            ) as resp:
                status, reason = resp.status_code, resp.reason_phrase
                content = await _read_capped(resp, ERROR_BODY_LIMIT_BYTES, truncate=True)
        except Exception as exc:  # noqa: BLE001 - said in one line, never raised into the UI
            return _write_error(self.base_url, exc, timeout_s, self.access)
        return _write_status(status, reason, content, self.access)

    def _snapshot(self, taken_at: float, **kw: Any) -> OllamaSnapshot:
        models: tuple[PsModel, ...] = kw.get("models", ())
        live = {detail_key(m) for m in models}
        if kw.get("reachable") and len(self._shows) > len(live) + SHOW_CACHE_SPARE:
            self._forget_shows(live)
        shows = {d: s for d, s in self._shows.items() if d in live}
        return OllamaSnapshot(
            host_url=self.base_url,
            taken_at=taken_at,
            version=self._version,
            shows=MappingProxyType(shows),
            tags=MappingProxyType({d: t for d, t in self._tags.items() if d in live}),
            **kw,
        )
