"""Ollama HTTP API source: ``/api/version``, ``/api/ps``, ``/api/show``, ``/api/tags``.

Every poll becomes one ``OllamaSnapshot``; no exception leaves ``OllamaClient.sample()``.
Shapes follow ``api/types.go`` (ollama-reference.md §1.1, §2.1); every field is optional on
the way in, because real servers differ by version (no ``context_length`` before v0.10.0,
empty ``details``, cloud models, extra fields).
"""

from __future__ import annotations

import asyncio
import json
import math
import socket
import re
import time
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from types import MappingProxyType
from typing import Any

import httpx

from kvtop.sources.hosts import is_loopback_url
from kvtop.model.snapshots import ErrorKind, ModelDetails, OllamaSnapshot, PsModel, ShowInfo, TagInfo, detail_key

_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(Z|z|[+-]\d{2}:?\d{2})?$"
)

TAGS_REFRESH_S = 30.0
"""Minimum seconds between two ``/api/tags`` calls made to learn a new digest's file size."""

VERSION_RETRY_S = 30.0
"""Seconds before a failed ``/api/version`` is tried again."""

FIRST_DETAILS_WAIT_S = 1.0
"""How long the first sample waits for ``/api/version`` and ``/api/show`` before returning."""


LARGE_BODY_BYTES = 256 * 1024
"""Bodies larger than this are decoded in a thread so the UI never stalls."""

SHOW_RETRY_S = 15.0
"""Seconds before a failed ``/api/show`` for a digest is tried again."""


_BLOB_FROM = re.compile(r"(?m)^FROM\s+\S*?sha256[-:]([0-9a-f]{64})\s*$")
"""``FROM /…/blobs/sha256-<hex>`` in the Modelfile ``/api/show`` generates."""


class ShapeError(ValueError):
    """A response that is valid JSON but not the shape Ollama sends."""


def parse_go_time(text: Any) -> datetime | None:
    """Parse Go's RFC 3339 ``time.Time`` JSON (nanoseconds, ``Z`` or an offset).

    Years past 9999 (Go's "forever" keep-alive is about now + 292 years, still < 9999) and
    nanosecond fractions are handled; anything unparsable gives None.
    """
    if not isinstance(text, str):
        return None
    m = _RFC3339.match(text.strip())
    if not m:
        return None
    year, month, day, hour, minute, second, frac, zone = m.groups()
    try:
        micro = int((frac or "0")[:6].ljust(6, "0"))
        if zone is None or zone in ("Z", "z"):
            tz = timezone.utc
        else:
            sign = -1 if zone[0] == "-" else 1
            digits = zone[1:].replace(":", "")
            tz = timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:])))
        return datetime(int(year), int(month), int(day), int(hour), int(minute), int(second), micro, tzinfo=tz)
    except ValueError:
        return None


INT64_MAX = 2**63 - 1


def _int_or_none(value: Any) -> int | None:
    """A JSON integer that Go's int64 could have sent, else None (bools, floats with a
    fraction, out-of-range or negative numbers are not sizes)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and 0 <= value <= INT64_MAX:
        return value
    return None


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _str_or_none(value: Any) -> str | None:
    """A JSON string with control and bidi-override characters replaced by U+FFFD (server text
    is data: it must never reach a terminal as an escape sequence), else None."""
    return _CONTROL.sub("\ufffd", value) if isinstance(value, str) else None


def parse_details(obj: Any) -> ModelDetails:
    """Read a ``details`` object; a missing or malformed one gives empty details."""
    if not isinstance(obj, Mapping):
        return ModelDetails()
    families = obj.get("families")
    return ModelDetails(
        format=_str_or_none(obj.get("format")),
        family=_str_or_none(obj.get("family")),
        families=tuple(f for f in families if isinstance(f, str)) if isinstance(families, list) else (),
        parameter_size=_str_or_none(obj.get("parameter_size")),
        quantization_level=_str_or_none(obj.get("quantization_level")),
        parent_model=_str_or_none(obj.get("parent_model")),
    )


def parse_ps(obj: Any) -> tuple[PsModel, ...]:
    """Turn a ``GET /api/ps`` body into ``PsModel`` rows.

    Args:
        obj: The decoded JSON body.

    Returns:
        One ``PsModel`` per entry of ``models`` that has a name, in the server's order.

    Raises:
        ShapeError: The body is not an object with a ``models`` list (``null`` counts as empty:
            Go encodes an empty slice that way in some versions).
    """
    if not isinstance(obj, Mapping):
        raise ShapeError(f"expected a JSON object, got {type(obj).__name__}")
    models = obj.get("models")
    if models is None:
        return ()
    if not isinstance(models, list):
        raise ShapeError(f"'models' is {type(models).__name__}, expected a list")
    rows: list[PsModel] = []
    for entry in models:
        if not isinstance(entry, Mapping):
            continue
        name = _str_or_none(entry.get("name")) or _str_or_none(entry.get("model"))
        if not name:
            continue
        raw_expires = _str_or_none(entry.get("expires_at"))
        digest = (_str_or_none(entry.get("digest")) or "").removeprefix("sha256:")
        if any(r.name == name and r.digest == digest for r in rows):
            continue  # the same model listed twice: show it once
        rows.append(
            PsModel(
                name=name,
                model=_str_or_none(entry.get("model")) or name,
                digest=digest,
                size_bytes=_int_or_none(entry.get("size")),
                size_vram_bytes=_int_or_none(entry.get("size_vram")),
                context_length=_int_or_none(entry.get("context_length")) or None,
                expires_at=parse_go_time(raw_expires),
                expires_at_raw=raw_expires,
                details=parse_details(entry.get("details")),
            )
        )
    return tuple(rows)


def parse_show(obj: Any, *, digest: str, name: str) -> ShowInfo:
    """Turn a ``POST /api/show`` body into a ``ShowInfo`` (tokenizer arrays dropped).

    Raises:
        ShapeError: The body is not a JSON object.
    """
    if not isinstance(obj, Mapping):
        raise ShapeError(f"expected a JSON object, got {type(obj).__name__}")
    info = obj.get("model_info")
    model_info = {
        k: v for k, v in info.items() if isinstance(k, str) and not k.startswith("tokenizer.")
    } if isinstance(info, Mapping) else {}
    caps = obj.get("capabilities")
    blob = _BLOB_FROM.search(_str_or_none(obj.get("modelfile")) or "")
    return ShowInfo(
        digest=digest,
        name=name,
        model_info=MappingProxyType(model_info),
        parameters=_str_or_none(obj.get("parameters")) or "",
        capabilities=tuple(c for c in caps if isinstance(c, str)) if isinstance(caps, list) else (),
        remote=bool(obj.get("remote_host") or obj.get("remote_model")),
        model_blob=f"sha256-{blob.group(1)}" if blob else None,
    )


def parse_tags(obj: Any) -> dict[str, TagInfo]:
    """Turn a ``GET /api/tags`` body into ``{digest: TagInfo}`` (entries without a digest skipped)."""
    if not isinstance(obj, Mapping):
        raise ShapeError(f"expected a JSON object, got {type(obj).__name__}")
    out: dict[str, TagInfo] = {}
    models = obj.get("models")
    if models is None:
        return out
    if not isinstance(models, list):
        raise ShapeError(f"'models' is {type(models).__name__}, expected a list")
    for entry in models:
        if not isinstance(entry, Mapping):
            continue
        digest = (_str_or_none(entry.get("digest")) or "").removeprefix("sha256:")
        name = _str_or_none(entry.get("name")) or _str_or_none(entry.get("model")) or ""
        if digest:
            out[digest] = TagInfo(name=name, digest=digest, size_bytes=_int_or_none(entry.get("size")))
    return out


def _root_os_error(exc: BaseException) -> OSError | None:
    """The innermost ``OSError`` behind an httpx error (httpx hides ECONNREFUSED behind
    "All connection attempts failed")."""
    found: OSError | None = None
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, OSError):
            found = cur
        cur = cur.__cause__ or cur.__context__
    return found


def _one_line(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _RequestFailed(Exception):
    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind
        self.message = message


class OllamaClient:
    """Polls one Ollama server over ``httpx.AsyncClient`` and returns complete snapshots.

    Only ``/api/ps`` is on the poll's critical path. ``/api/version``, ``/api/show`` (verbose,
    once per manifest digest, again when a digest changes) and ``/api/tags`` (when a loaded
    digest's file size is unknown, at most every ``TAGS_REFRESH_S``) run as background tasks
    whose answers join the next snapshot, so a slow ``/api/show`` never delays the table.
    Every request has a hard deadline (a server trickling bytes cannot stall a poll).
    Read-only: only GET and the read-only ``POST /api/show`` are sent.

    Args:
        base_url: Server base URL (``config.parse_ollama_host``).
        timeout_s: Deadline of ``/api/ps``, ``/api/version`` and ``/api/tags``, in seconds.
        show_timeout_s: Deadline of ``/api/show`` (verbose answers carry the tokenizer: MBs).
        transport: An ``httpx`` transport for tests (e.g. ``httpx.MockTransport``).
        clock: Wall-clock function (Unix seconds) stamped on snapshots.
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 3.0,
        show_timeout_s: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
        clock: Any = time.time,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._timeout_s = timeout_s
        self._show_timeout_s = show_timeout_s
        self._clock = clock
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=httpx.Timeout(timeout_s),
            transport=transport,
            trust_env=not is_loopback_url(self.base_url),  # a proxy must never sit between kvtop and a local server
            headers={"User-Agent": "kvtop"},
        )
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
        deadline = deadline_s or self._timeout_s
        try:
            resp = await asyncio.wait_for(
                self._client.request(method, path, json=json_body, timeout=httpx.Timeout(deadline)), deadline
            )
        except (asyncio.TimeoutError, httpx.ReadTimeout, httpx.WriteTimeout, httpx.PoolTimeout):
            raise _RequestFailed("timeout", f"{path}: no answer within {deadline:g} s") from None
        except httpx.ConnectTimeout:
            raise _RequestFailed("timeout", f"{path}: connect timed out after {deadline:g} s") from None
        except httpx.ConnectError as exc:
            cause = _root_os_error(exc)
            if isinstance(cause, ConnectionRefusedError) or "refused" in str(exc).lower():
                raise _RequestFailed("refused", f"connection refused ({self.base_url})") from None
            if isinstance(cause, socket.gaierror):
                raise _RequestFailed("connect", f"cannot resolve host of {self.base_url}: {_one_line(str(cause), 80)}") from None
            detail = str(cause) if cause is not None else str(exc)
            raise _RequestFailed("connect", f"cannot connect to {self.base_url}: {_one_line(detail, 100)}") from None
        except httpx.HTTPError as exc:
            raise _RequestFailed("other", f"{path}: {type(exc).__name__}: {_one_line(str(exc), 100)}") from None
        if resp.status_code >= 400:
            detail = ""
            try:
                body = json.loads(resp.content)
                if isinstance(body, Mapping) and isinstance(body.get("error"), str):
                    detail = ": " + _one_line(body["error"], 120)
            except (ValueError, UnicodeDecodeError):
                detail = ": " + _one_line(resp.text, 120) if resp.text.strip() else ""
            raise _RequestFailed("http", f"{path}: HTTP {resp.status_code} {resp.reason_phrase}{detail}")
        try:
            if len(resp.content) > LARGE_BODY_BYTES:
                # a verbose /api/show carries the tokenizer (MBs): decode off the event loop
                return await asyncio.to_thread(json.loads, resp.content)
            return json.loads(resp.content)
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise _RequestFailed("invalid_json", f"{path}: invalid JSON ({_one_line(resp.text, 60)!r})") from None

    async def sample(self, *, wait_details: bool = False) -> OllamaSnapshot:
        """Poll the server once; never raises (except cancellation).

        Args:
            wait_details: Wait for every pending ``/api/version``, ``/api/show`` and
                ``/api/tags`` answer (each bounded by its deadline) before returning, as
                ``--once`` does. Otherwise only the first sample waits, up to
                ``FIRST_DETAILS_WAIT_S``.

        Returns:
            A complete snapshot. ``reachable`` is False when ``/api/ps`` failed; ``error``
            then says how (refused, timeout, HTTP status, invalid JSON or shape). Failures of
            the other calls are kept per model and do not fail the snapshot.
        """
        taken_at = self._clock()
        try:
            return await self._sample(taken_at, wait_details)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a bug must become a visible error, not a dead poller
            return self._snapshot(taken_at, reachable=False, error_kind="other",
                                  error=f"internal error while polling: {type(exc).__name__}: {_one_line(str(exc), 120)}")

    async def _sample(self, taken_at: float, wait_details: bool) -> OllamaSnapshot:
        t0 = time.perf_counter()
        try:
            body = await self._request("GET", "/api/ps")
            latency_s = time.perf_counter() - t0
            models = parse_ps(body)
        except _RequestFailed as exc:
            self._version = None  # a server that comes back may be another version
            self._version_failed_at = None
            return self._snapshot(taken_at, reachable=False, error=exc.message, error_kind=exc.kind)
        except ShapeError as exc:
            return self._snapshot(taken_at, reachable=False,
                                  error=f"/api/ps: unexpected shape: {exc}", error_kind="invalid_shape")
        self._samples += 1
        self._start_details(models, taken_at)
        pending = [t for t in self._tasks() if not t.done()]
        if pending and (wait_details or self._samples == 1):
            await asyncio.wait(pending, timeout=None if wait_details else FIRST_DETAILS_WAIT_S)
        self._collect(taken_at)
        return self._snapshot(taken_at, reachable=True, latency_s=latency_s, models=models)

    def _start_details(self, models: tuple[PsModel, ...], now: float) -> None:
        if self._version is None and self._version_task is None and (
            self._version_failed_at is None or now - self._version_failed_at >= VERSION_RETRY_S
        ):
            self._version_task = asyncio.create_task(self._fetch_version())
        for m in models:
            key = detail_key(m)
            if key not in self._show_tasks and self._show_due(key, now):
                self._show_tasks[key] = asyncio.create_task(self._show(m))
        missing = any(
            m.digest and m.digest not in self._tags and not self._is_remote(m) for m in models
        )
        if missing and self._tags_task is None and (
            self._tags_read_at is None or now - self._tags_read_at >= TAGS_REFRESH_S
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
        except _RequestFailed:
            return None
        return _str_or_none(body.get("version")) if isinstance(body, Mapping) else None

    async def _fetch_tags(self) -> dict[str, TagInfo] | None:
        try:
            return parse_tags(await self._request("GET", "/api/tags"))
        except (_RequestFailed, ShapeError):
            return None

    async def _show(self, m: PsModel) -> ShowInfo:
        key = detail_key(m)
        try:
            body = await self._request("POST", "/api/show", json_body={"model": m.name, "verbose": True},
                                       deadline_s=self._show_timeout_s)
            return parse_show(body, digest=key, name=m.name)
        except _RequestFailed as exc:
            return ShowInfo(digest=key, name=m.name, error=exc.message)
        except ShapeError as exc:
            return ShowInfo(digest=key, name=m.name, error=f"/api/show: unexpected shape: {exc}")

    def _show_due(self, key: str, now: float) -> bool:
        """True when ``/api/show`` for ``key`` is not cached, or failed ≥ SHOW_RETRY_S ago."""
        if key not in self._shows:
            return True
        failed_at = self._show_failed_at.get(key)
        return failed_at is not None and now - failed_at >= SHOW_RETRY_S

    def _snapshot(self, taken_at: float, **kw: Any) -> OllamaSnapshot:
        models: tuple[PsModel, ...] = kw.get("models", ())
        live = {detail_key(m) for m in models}
        shows = {d: s for d, s in self._shows.items() if d in live}
        return OllamaSnapshot(
            host_url=self.base_url,
            taken_at=taken_at,
            version=self._version,
            shows=MappingProxyType(shows),
            tags=MappingProxyType({d: t for d, t in self._tags.items() if d in live}),
            **kw,
        )


# --------------------------------------------------------------------------------------------
# The what-if planner's requests (the load is the only request kvtop sends that changes anything)

LOAD_TIMEOUT_S = 600.0
"""A load can take minutes for a large model read from disk."""


async def send_load_request(base_url: str, model: str, num_ctx: int, keep_alive: int | str | None, *,
                            transport: httpx.AsyncBaseTransport | None = None,
                            timeout_s: float = LOAD_TIMEOUT_S) -> str | None:
    """``POST {base_url}/api/generate`` with an empty prompt and ``options.num_ctx``: load the model.

    Args:
        base_url: Ollama server URL.
        model: Model name.
        num_ctx: Context per slot to load with.
        keep_alive: The model's keep-alive to keep (``-1`` for forever); None leaves it out
            (the server's default applies).
        transport: An ``httpx`` transport for tests.
        timeout_s: Bound on the whole request (loading reads the weights).

    Returns:
        None on success, else one line saying what went wrong.
    """
    body: dict[str, Any] = {"model": model, "prompt": "", "options": {"num_ctx": num_ctx}, "stream": False}
    if keep_alive is not None:
        body["keep_alive"] = keep_alive
    try:
        async with httpx.AsyncClient(base_url=base_url, transport=transport, trust_env=not is_loopback_url(base_url),
                                     timeout=httpx.Timeout(timeout_s, connect=10.0),
                                     headers={"User-Agent": "kvtop"}) as client:
            resp = await client.post("/api/generate", json=body)
    except httpx.ConnectError:
        return f"cannot connect to {base_url}"
    except httpx.TimeoutException:
        return f"no answer from {base_url} within {timeout_s:g} s"
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}"
    if resp.status_code >= 400:
        detail = ""
        try:
            err = resp.json()
            if isinstance(err, Mapping) and isinstance(err.get("error"), str):
                detail = f": {err['error'][:160]}"
        except ValueError:
            detail = f": {resp.text[:160]}" if resp.text.strip() else ""
        return f"POST /api/generate: HTTP {resp.status_code} {resp.reason_phrase}{detail}"
    return None


async def fetch_tensors(base_url: str, model: str, *,
                        transport: httpx.AsyncBaseTransport | None = None) -> list[Any] | None:
    """The ``/api/show`` tensor list (non-verbose: it is always present since Ollama v0.6.1, Ref §2.1).

    Read-only. Returns None when it cannot be read.
    """
    try:
        async with httpx.AsyncClient(base_url=base_url, transport=transport, timeout=10.0,
                                     trust_env=not is_loopback_url(base_url)) as client:
            resp = await client.post("/api/show", json={"model": model})
        body = resp.json() if resp.status_code < 400 else None
    except (httpx.HTTPError, ValueError):
        return None
    tensors = body.get("tensors") if isinstance(body, Mapping) else None
    return tensors if isinstance(tensors, list) and tensors else None
