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

from kvtop.model.snapshots import ErrorKind, ModelDetails, OllamaSnapshot, PsModel, ShowInfo, TagInfo

_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(Z|z|[+-]\d{2}:?\d{2})?$"
)

TAGS_REFRESH_S = 30.0
"""Minimum seconds between two ``/api/tags`` calls made to learn a new digest's file size."""


LARGE_BODY_BYTES = 256 * 1024
"""Bodies larger than this are decoded in a thread so the UI never stalls."""

SHOW_RETRY_S = 15.0
"""Seconds before a failed ``/api/show`` for a digest is tried again."""


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


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


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
        rows.append(
            PsModel(
                name=name,
                model=_str_or_none(entry.get("model")) or name,
                digest=(_str_or_none(entry.get("digest")) or "").removeprefix("sha256:"),
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
    return ShowInfo(
        digest=digest,
        name=name,
        model_info=MappingProxyType(model_info),
        parameters=_str_or_none(obj.get("parameters")) or "",
        capabilities=tuple(c for c in caps if isinstance(c, str)) if isinstance(caps, list) else (),
        remote=bool(obj.get("remote_host") or obj.get("remote_model")),
    )


def parse_tags(obj: Any) -> dict[str, TagInfo]:
    """Turn a ``GET /api/tags`` body into ``{digest: TagInfo}`` (entries without a digest skipped)."""
    if not isinstance(obj, Mapping):
        raise ShapeError(f"expected a JSON object, got {type(obj).__name__}")
    out: dict[str, TagInfo] = {}
    for entry in obj.get("models") or []:
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

    ``/api/show`` (verbose) is called once per manifest digest and cached; a digest that
    changes (a model re-pulled under the same name) is fetched again. ``/api/tags`` is read
    when a loaded digest's file size is unknown, at most every ``TAGS_REFRESH_S`` seconds.
    Read-only: only GET and the read-only ``POST /api/show`` are sent.

    Args:
        base_url: Server base URL (``config.parse_ollama_host``).
        timeout_s: Bound on connect and read of the frequent calls.
        show_timeout_s: Bound for ``/api/show`` (verbose answers carry the tokenizer: MBs).
        transport: An ``httpx`` transport for tests (e.g. ``httpx.MockTransport``).
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
        self._timeout = httpx.Timeout(timeout_s)
        self._timeout_s = timeout_s
        self._show_timeout = httpx.Timeout(show_timeout_s)
        self._clock = clock
        host = httpx.URL(self.base_url).host
        loopback = host in ("127.0.0.1", "::1", "localhost") or host.startswith("127.")
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=self._timeout,
            transport=transport,
            trust_env=not loopback,  # a proxy must never sit between kvtop and a local server
            headers={"User-Agent": "kvtop"},
        )
        self._shows: dict[str, ShowInfo] = {}
        self._tags: dict[str, TagInfo] = {}
        self._show_failed_at: dict[str, float] = {}
        self._tags_read_at: float | None = None
        self._version: str | None = None

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()

    async def _request(self, method: str, path: str, *, json_body: Any = None,
                       timeout: httpx.Timeout | None = None) -> Any:
        try:
            resp = await self._client.request(method, path, json=json_body,
                                              timeout=timeout or self._timeout)
        except httpx.ConnectTimeout:
            raise _RequestFailed("timeout", f"{path}: connect timed out after {self._timeout_s:g} s") from None
        except httpx.TimeoutException:
            raise _RequestFailed("timeout", f"{path}: no answer within {self._timeout_s:g} s") from None
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
                body = resp.json()
                if isinstance(body, Mapping) and isinstance(body.get("error"), str):
                    detail = ": " + _one_line(body["error"], 120)
            except ValueError:
                detail = ": " + _one_line(resp.text, 120) if resp.text.strip() else ""
            raise _RequestFailed("http", f"{path}: HTTP {resp.status_code} {resp.reason_phrase}{detail}")
        try:
            if len(resp.content) > LARGE_BODY_BYTES:
                # a verbose /api/show carries the tokenizer (MBs): decode off the event loop
                return await asyncio.to_thread(json.loads, resp.content)
            return json.loads(resp.content)
        except (ValueError, UnicodeDecodeError):
            raise _RequestFailed("invalid_json", f"{path}: invalid JSON ({_one_line(resp.text, 60)!r})") from None

    async def sample(self) -> OllamaSnapshot:
        """Poll the server once; never raises (except cancellation).

        Returns:
            A complete snapshot. ``reachable`` is False when ``/api/ps`` failed; ``error``
            then says how (refused, timeout, HTTP status, invalid JSON or shape). Failures of
            ``/api/show`` or ``/api/tags`` are kept per model and do not fail the snapshot.
        """
        taken_at = self._clock()
        t0 = time.perf_counter()
        try:
            body = await self._request("GET", "/api/ps")
            latency_s = time.perf_counter() - t0
            models = parse_ps(body)
        except _RequestFailed as exc:
            self._version = None  # a server that comes back may be another version
            return self._snapshot(taken_at, reachable=False, error=exc.message, error_kind=exc.kind)
        except ShapeError as exc:
            return self._snapshot(taken_at, reachable=False,
                                  error=f"/api/ps: unexpected shape: {exc}", error_kind="invalid_shape")
        if self._version is None:
            try:
                v = await self._request("GET", "/api/version")
                self._version = _str_or_none(v.get("version")) if isinstance(v, Mapping) else None
            except _RequestFailed:
                self._version = None
        for m in models:
            if m.digest and self._show_due(m.digest, taken_at):
                info = await self._show(m)
                self._shows[m.digest] = info
                if info.error:
                    self._show_failed_at[m.digest] = taken_at
                else:
                    self._show_failed_at.pop(m.digest, None)
        await self._refresh_tags(models)
        return self._snapshot(taken_at, reachable=True, latency_s=latency_s, models=models)

    async def _show(self, m: PsModel) -> ShowInfo:
        try:
            body = await self._request("POST", "/api/show", json_body={"model": m.name, "verbose": True},
                                       timeout=self._show_timeout)
            return parse_show(body, digest=m.digest, name=m.name)
        except _RequestFailed as exc:
            return ShowInfo(digest=m.digest, name=m.name, error=exc.message)
        except ShapeError as exc:
            return ShowInfo(digest=m.digest, name=m.name, error=f"/api/show: unexpected shape: {exc}")

    async def _refresh_tags(self, models: tuple[PsModel, ...]) -> None:
        missing = [m for m in models if m.digest and m.digest not in self._tags]
        if not missing:
            return
        now = self._clock()
        if self._tags_read_at is not None and now - self._tags_read_at < TAGS_REFRESH_S:
            return
        self._tags_read_at = now
        try:
            self._tags = parse_tags(await self._request("GET", "/api/tags"))
        except (_RequestFailed, ShapeError):
            return

    def _show_due(self, digest: str, now: float) -> bool:
        """True when ``/api/show`` for ``digest`` is not cached, or failed ≥ SHOW_RETRY_S ago."""
        if digest not in self._shows:
            return True
        failed_at = self._show_failed_at.get(digest)
        return failed_at is not None and now - failed_at >= SHOW_RETRY_S

    def _snapshot(self, taken_at: float, **kw: Any) -> OllamaSnapshot:
        live = {m.digest for m in kw.get("models", ())}
        shows = {d: s for d, s in self._shows.items() if d in live}
        return OllamaSnapshot(
            host_url=self.base_url,
            taken_at=taken_at,
            version=self._version,
            shows=MappingProxyType(shows),
            tags=MappingProxyType({d: t for d, t in self._tags.items() if d in live}),
            **kw,
        )

