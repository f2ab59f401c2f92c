"""Ollama HTTP API source: ``/api/version``, ``/api/ps``, ``/api/show``, ``/api/tags``.

Every poll becomes one ``OllamaSnapshot``; no exception leaves ``OllamaClient.sample()``.
Shapes follow ``api/types.go`` (docs/ollama-internals.md §1.1, §2.1); every field is optional on
the way in, because real servers differ by version (no ``context_length`` before v0.10.0,
empty ``details``, cloud models, extra fields).
"""

from __future__ import annotations

import asyncio
import json
import socket
import re
import ssl
import time
import zlib
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from kvtop.sources.auth import ServerAccess, redact_url
from kvtop.core.bounds import count_or_none
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

MiB = 1024 * 1024

BODY_LIMIT_BYTES: Mapping[str, int] = MappingProxyType({
    "/api/ps": 16 * MiB,
    "/api/tags": 16 * MiB,
    "/api/show": 24 * MiB,
    "/api/version": 1 * MiB,
})
"""Most bytes of a successful answer kvtop reads per endpoint, counted after decompression.

Generous on purpose: an ``/api/ps`` or ``/api/tags`` entry is about 0.5 KB, so 16 MiB is some
30,000 models; a verbose ``/api/show`` carries the tokenizer (a 262k-token vocabulary with its
scores and types is about 10 MB), so it gets 24 MiB (six are read at once: ``SHOW_CONCURRENCY``). A larger answer is not read further: the
request fails with "response too large" and the last good data stays. Other paths get
``DEFAULT_BODY_LIMIT_BYTES``."""

DEFAULT_BODY_LIMIT_BYTES = 16 * MiB
"""Body limit of a path missing from ``BODY_LIMIT_BYTES``."""

JSON_VALUE_LIMIT: Mapping[str, int] = MappingProxyType({
    "/api/ps": 500_000,
    "/api/tags": 500_000,
    "/api/show": 2_000_000,
})
"""Most JSON values (an upper bound: ``,``, ``{`` and ``[`` counted, ``json_values_upper_bound``) an
answer may hold before it is decoded. A byte cap alone does not bound memory: 16 MiB of ``{},``
decode to 5 million dicts (hundreds of MB). A real verbose ``/api/show`` of a 262k-token model holds
about 800k values (tokens, scores, types, merges); an ``/api/ps`` entry about 20."""

DEFAULT_JSON_VALUE_LIMIT = 500_000
"""Value limit of a path missing from ``JSON_VALUE_LIMIT``."""

MAX_MODEL_INFO_ARRAY = 65_536
"""``model_info`` arrays longer than this are dropped (kvtop reads per-layer arrays, a few hundred
long; the tokenizer's arrays are dropped by name already)."""


def json_values_upper_bound(content: bytes) -> int:
    """An upper bound of the values a JSON text holds, counted at C speed before it is decoded:
    every value but the first follows a ``,`` or opens a container (separators inside strings
    are counted too, so the bound is conservative)."""
    return content.count(b",") + content.count(b"{") + content.count(b"[") + 1


ERROR_BODY_LIMIT_BYTES = 64 * 1024
"""Most bytes of an HTTP error (>= 400) body read to find its message; the rest is not read."""

SHOW_CONCURRENCY = 6
"""Most ``/api/show`` requests in flight at once per server. With 1,000 loaded models, firing
them all at once makes httpx's connection pool degrade quadratically and bursts the server; the
rest wait their turn (outside their deadline) in the server's ``/api/ps`` order."""

SHOW_CACHE_SPARE = 64
"""``/api/show`` answers kept for models no longer loaded (the newest ones); older ones are dropped."""

SHOW_RETRY_S = 15.0
"""Seconds before a failed ``/api/show`` for a digest is tried again."""


LOAD_TIMEOUT_S = 600.0
"""A load can take minutes for a large model read from disk."""


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


_int_or_none = count_or_none
"""A JSON integer that Go's int64 could have sent, else None: the one rule for sizes and counts
that the log parser applies too (``kvtop.core.bounds``)."""


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
    seen: set[tuple[str, str]] = set()
    for entry in models:
        if not isinstance(entry, Mapping):
            continue
        name = _str_or_none(entry.get("name")) or _str_or_none(entry.get("model"))
        if not name:
            continue
        raw_expires = _str_or_none(entry.get("expires_at"))
        digest = (_str_or_none(entry.get("digest")) or "").removeprefix("sha256:")
        if (name, digest) in seen:
            continue  # the same model listed twice: show it once
        seen.add((name, digest))
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
        k: v for k, v in info.items() if isinstance(k, str) and not k.startswith("tokenizer.") and _kept_info(v)
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


def _kept_info(value: Any) -> bool:
    """A ``model_info`` value worth keeping: a scalar, or a flat array of scalars of at most
    ``MAX_MODEL_INFO_ARRAY`` (GGUF metadata holds nothing else; anything nested is not GGUF's)."""
    if isinstance(value, list):
        return len(value) <= MAX_MODEL_INFO_ARRAY and all(not isinstance(x, (list, dict)) for x in value)
    return not isinstance(value, dict)


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
    """``text`` on one line, at most ``limit`` characters, control characters replaced (it is
    server text: it must never reach a terminal as an escape sequence)."""
    text = " ".join(_CONTROL.sub("\ufffd", text[: limit * 4]).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _safe_location(location: str) -> str:
    """A redirect's ``Location`` fit for a message: user:password@ dropped, one line, ≤ 120 chars."""
    try:
        parts = urlsplit(location)
        if parts.username is not None or parts.password is not None:
            location = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    except ValueError:
        pass
    return _one_line(location, 120) or "''"


def _mib(n_bytes: int) -> str:
    return f"{n_bytes / MiB:.0f} MiB" if n_bytes >= 10 * MiB else f"{n_bytes / MiB:.1f} MiB"


AUTH_FLAGS = ("OLLAMA_API_KEY (Bearer), --password-file FILE or --netrc (basic auth), or the config file's"
              " [servers.\"URL\"] headers")
"""The ways to give a server credentials, as the 401/403 messages name them: those that keep the
secret off the command line (where every local user sees it with ``ps``) first."""


def auth_message(status: int, access: ServerAccess) -> str:
    """The error of a 401 or 403 answer: what to set, and what kvtop sent (values masked).

    ``authentication required (401): set credentials with OLLAMA_API_KEY (Bearer), --password-file
    FILE or --netrc (basic auth), or the config file's [servers."URL"] headers (sent: no
    credentials)``; a 403 says
    ``authentication refused (403)``: the credentials sent are not allowed.
    """
    sent = access.sent_words()
    if status == 401:
        return f"authentication required (401): set credentials with {AUTH_FLAGS} (sent: {sent})"
    return f"authentication refused (403): these credentials are not allowed here (sent: {sent}); check {AUTH_FLAGS}"


_TLS_UNKNOWN_CA = frozenset({2, 18, 19, 20, 21})
"""OpenSSL verify codes of a certificate whose CA is not trusted here (unable to get the issuer,
self-signed, self-signed in the chain, no local issuer, cannot verify the first certificate)."""


def _verify_error(cause: BaseException) -> BaseException:
    """The ``ssl.SSLCertVerificationError`` behind ``cause`` (its ``__cause__``/``__context__``
    chain, as httpx wraps it), else ``cause`` itself."""
    seen: set[int] = set()
    e: BaseException | None = cause
    while e is not None and id(e) not in seen:
        if isinstance(e, ssl.SSLCertVerificationError):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return cause


def tls_message(base_url: str, cause: BaseException) -> str:
    """The error of a TLS certificate that did not verify: why (one line) and what fixes that reason.

    Expired (or not yet valid): the certificate must be renewed (or this machine's clock is wrong);
    an unknown CA: ``--cacert FILE`` names it; another name: ``--host`` by the name it was issued
    for. ``--insecure`` is never offered as the fix (it is in ``--help`` for who needs it)."""
    err = _verify_error(cause)
    code = getattr(err, "verify_code", None)
    reason = getattr(err, "verify_message", None) or getattr(err, "reason", None) or str(err)
    text = str(reason)
    head = f"TLS certificate of {base_url} not verified ({_one_line(text, 80)})"
    if code == 10 or (code is None and "has expired" in text):
        return head + ": it has expired: renew the server's certificate"
    if code == 9 or (code is None and "not yet valid" in text):
        return head + ": it is not valid yet: check this machine's clock and the certificate's start date"
    if code == 62 or (code is None and "mismatch" in text.lower()):
        return head + ": it was issued for another name: reach the server by that name (--host)"
    if code in _TLS_UNKNOWN_CA or code is None:
        return head + ": name the CA that signed it with --cacert FILE (PEM)"
    return head + ": the server's certificate must be fixed"


class RequestFailed(Exception):
    """A request to the server that got no usable answer (raised by ``OllamaClient._request``).

    Attributes:
        kind: The ``ErrorKind`` (``refused``, ``timeout``, ``connect``, ``tls``, ``auth``, ``http``,
            ``invalid_json``, ``other``).
        message: One line for the user, credentials scrubbed; server text in it is data (render it
            through ``kvtop.textsafe``).
    """

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind
        self.message = message


class _TooLarge(Exception):
    """A body over its limit: ``size_bytes`` declared by Content-Length, or None when counted."""

    def __init__(self, size_bytes: int | None) -> None:
        super().__init__(size_bytes)
        self.size_bytes = size_bytes


class _Undecodable(Exception):
    """A body kvtop cannot decode: an encoding it did not ask for, or a corrupt compressed stream."""


class _BoundedDecoder:
    """Decodes a body's ``Content-Encoding`` (identity, gzip, deflate) and never yields more than
    asked: zlib's ``max_length`` stops a gzip bomb at the limit. (httpx's own decoder inflates
    each 64 KiB network read whole: one read of a bomb becomes a 66 MB chunk before any count.)

    Raises:
        _Undecodable: An encoding kvtop did not ask for (br, zstd, stacked encodings).
    """

    def __init__(self, encoding: str) -> None:
        enc = encoding.strip().lower()
        self._zlib: Any = None
        self._deflate = False
        if enc in ("gzip", "x-gzip"):
            self._zlib = zlib.decompressobj(zlib.MAX_WBITS | 16)
        elif enc == "deflate":
            self._zlib = zlib.decompressobj()
            self._deflate = True  # zlib-wrapped by the RFC, raw deflate by some servers
        elif enc not in ("", "identity"):
            raise _Undecodable(f"unsupported Content-Encoding {_one_line(enc, 40)!r}")
        self._first = True

    def decode(self, data: bytes, room: int) -> bytes:
        """At most ``room`` decoded bytes of ``data`` and of the input held back by earlier calls.

        Raises:
            zlib.error: A corrupt compressed stream.
        """
        if room <= 0:
            return b""  # zlib reads max_length 0 as "no limit"
        if self._zlib is None:
            return data[:room]
        data = self._zlib.unconsumed_tail + data  # what an earlier call left when its room was full
        if self._first and self._deflate:
            try:
                out = self._zlib.decompress(data, room)
            except zlib.error:
                self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)
                out = self._zlib.decompress(data, room)
        else:
            out = self._zlib.decompress(data, room)
        self._first = False
        chunks = [out]
        got = len(out)
        while self._zlib.unconsumed_tail and got < room:
            more = self._zlib.decompress(self._zlib.unconsumed_tail, room - got)
            if not more:
                break
            chunks.append(more)
            got += len(more)
        return b"".join(chunks)


async def _read_capped(resp: httpx.Response, limit_bytes: int, *, truncate: bool) -> bytes:
    """Read ``resp``'s body as a stream, decoded, up to ``limit_bytes``.

    Raises:
        _TooLarge: More than ``limit_bytes`` decoded bytes (unless ``truncate``: then the first
            ``limit_bytes`` are returned and the rest is not read).
        _Undecodable: An unsupported Content-Encoding, or a corrupt compressed body.
    """
    if resp.is_stream_consumed:  # built whole in memory (httpx.MockTransport): already decoded
        if len(resp.content) > limit_bytes and not truncate:
            raise _TooLarge(None)
        return resp.content[:limit_bytes]
    decoder = _BoundedDecoder(resp.headers.get("content-encoding", ""))
    buf = bytearray()
    async for raw in resp.aiter_raw():
        try:
            buf += decoder.decode(raw, limit_bytes + 1 - len(buf))
        except zlib.error as exc:
            raise _Undecodable(str(exc)) from None
        if len(buf) > limit_bytes:
            if truncate:
                return bytes(buf[:limit_bytes])
            raise _TooLarge(None)
    return bytes(buf)


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
        self._client = httpx.AsyncClient(**self.access.client_options(
            base_url=self.base_url, timeout=httpx.Timeout(timeout_s), transport=transport))
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
                self._fetch(method, path, json_body, deadline, limit), deadline)
        except (asyncio.TimeoutError, httpx.ReadTimeout, httpx.WriteTimeout, httpx.PoolTimeout):
            raise RequestFailed("timeout", f"{path}: no answer within {deadline:g} s") from None
        except httpx.ConnectTimeout:
            raise RequestFailed("timeout", f"{path}: connect timed out after {deadline:g} s") from None
        except httpx.ConnectError as exc:
            cause = _root_os_error(exc)
            if isinstance(cause, ConnectionRefusedError) or "refused" in str(exc).lower():
                raise RequestFailed("refused", f"connection refused ({self.base_url})") from None
            if isinstance(cause, socket.gaierror):
                raise RequestFailed("connect", f"cannot resolve host of {self.base_url}: {_one_line(str(cause), 80)}") from None
            if isinstance(cause, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(exc):
                raise RequestFailed("tls", tls_message(self.base_url, cause or exc)) from None
            detail = str(cause) if cause is not None else str(exc)
            raise RequestFailed("connect", f"cannot connect to {self.base_url}: {_one_line(detail, 100)}") from None
        except _TooLarge as exc:
            size = f"{_mib(exc.size_bytes)}, limit {_mib(limit)}" if exc.size_bytes is not None else f"over {_mib(limit)}"
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
            raise RequestFailed("other", f"{path}: too many JSON values (up to {values:,}; kvtop reads at most"
                                          f" {max_values:,}): not decoded")
        try:
            if len(content) > LARGE_BODY_BYTES:
                # a verbose /api/show carries the tokenizer (MBs): decode off the event loop
                return await asyncio.to_thread(json.loads, content)
            return json.loads(content)
        except (ValueError, UnicodeDecodeError, RecursionError):
            text = content[:240].decode("utf-8", "replace")
            raise RequestFailed("invalid_json", f"{path}: invalid JSON ({_one_line(text, 60)!r})") from None

    async def _fetch(self, method: str, path: str, json_body: Any, deadline: float,
                     limit_bytes: int) -> tuple[int, str, str | None, bytes]:
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
            return self._snapshot(taken_at, reachable=False, error_kind="other",
                                  error=f"internal error while polling: {type(exc).__name__}: {_one_line(str(exc), 120)}")

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
            return self._snapshot(taken_at, reachable=False,
                                  error=f"/api/ps: unexpected shape: {exc}", error_kind="invalid_shape")
        self._samples += 1
        self._start_details(models, taken_at)
        pending = [t for t in self._tasks() if not t.done()]
        if pending and (wait_details or self._samples == 1):
            await asyncio.wait(pending, timeout=self.details_budget_s if wait_details else FIRST_DETAILS_WAIT_S)
        self._collect(taken_at)
        return self._snapshot(taken_at, reachable=True, latency_s=latency_s, models=models)

    def _start_details(self, models: tuple[PsModel, ...], now: float) -> None:
        if self._version is None and self._version_task is None and (
            self._version_failed_at is None or now - self._version_failed_at >= VERSION_RETRY_S
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
                body = await self._request("POST", "/api/show", json_body={"model": m.name, "verbose": True},
                                           deadline_s=self._show_timeout_s)
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

    async def generate(self, model: str, *, keep_alive: int | str | None = None, num_ctx: int | None = None,
                       timeout_s: float = LOAD_TIMEOUT_S) -> str | None:
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
            async with self._client.stream("POST", "/api/generate", json=body,
                                           timeout=httpx.Timeout(timeout_s, connect=10.0)) as resp:
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


# --------------------------------------------------------------------------------------------
# Requests outside a poller: a load through a client of its own (the dashboard sends its writes
# through the polling client, ``OllamaClient.generate``), and the what-if's tensor list

async def send_load_request(base_url: str, model: str, num_ctx: int, keep_alive: int | str | None, *,
                            transport: httpx.AsyncBaseTransport | None = None,
                            timeout_s: float = LOAD_TIMEOUT_S, access: ServerAccess | None = None) -> str | None:
    """``POST {base_url}/api/generate`` with an empty prompt and ``options.num_ctx``: load the model.

    Args:
        base_url: Ollama server URL.
        model: Model name.
        num_ctx: Context per slot to load with.
        keep_alive: The model's keep-alive to keep (``-1`` for forever); None leaves it out
            (the server's default applies).
        transport: An ``httpx`` transport for tests.
        timeout_s: Bound on the whole request (loading reads the weights).
        access: Credentials, headers and TLS trust for the server (``config.server_accesses``).

    Returns:
        None on success, else one line saying what went wrong.
    """
    body = generate_body(model, keep_alive=keep_alive, num_ctx=num_ctx)
    access = access if access is not None else ServerAccess(base_url)
    try:
        async with httpx.AsyncClient(**access.client_options(base_url=base_url, transport=transport,
                                                             timeout=httpx.Timeout(timeout_s, connect=10.0))) as client:
            async with client.stream("POST", "/api/generate", json=body) as resp:
                status, reason = resp.status_code, resp.reason_phrase
                # only an error's text is used: read at most ERROR_BODY_LIMIT_BYTES of any answer
                content = await _read_capped(resp, ERROR_BODY_LIMIT_BYTES, truncate=True)
    except Exception as exc:  # noqa: BLE001 - said in one line
        return _write_error(base_url, exc, timeout_s, access)
    return _write_status(status, reason, content, access)


def generate_body(model: str, *, keep_alive: int | str | None = None, num_ctx: int | None = None) -> dict[str, Any]:
    """The JSON of an empty-prompt ``POST /api/generate``: ``{"model", "prompt": "", "stream": false}``
    plus ``keep_alive`` and ``options.num_ctx`` when given (None leaves them out)."""
    body: dict[str, Any] = {"model": model, "prompt": "", "stream": False}
    if num_ctx is not None:
        body["options"] = {"num_ctx": num_ctx}
    if keep_alive is not None:
        body["keep_alive"] = keep_alive
    return body


def _write_error(base_url: str, exc: BaseException, timeout_s: float, access: ServerAccess) -> str:
    """One line for a write that raised (connect, TLS, timeout, protocol, undecodable answer), in
    the polls' words (``tls_message``) and without this server's secrets (``ServerAccess.scrub``)."""
    base_url = redact_url(base_url)
    if isinstance(exc, httpx.ConnectError):
        cause = _root_os_error(exc)
        if isinstance(cause, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(exc):
            return access.scrub(tls_message(base_url, cause or exc))
        return f"cannot connect to {base_url}"
    if isinstance(exc, httpx.TimeoutException):
        return f"no answer from {base_url} within {timeout_s:g} s"
    if isinstance(exc, _Undecodable):
        return f"POST /api/generate: cannot decode the answer: {_one_line(access.scrub(str(exc)), 160)}"
    if isinstance(exc, httpx.HTTPError):
        return f"{type(exc).__name__}: {_one_line(access.scrub(str(exc)), 160)}"
    return f"POST /api/generate: {type(exc).__name__}: {_one_line(access.scrub(str(exc)), 160)}"


def _write_status(status: int, reason: str, content: bytes, access: ServerAccess) -> str | None:
    """None for a 2xx answer to a write, else one line (a redirect is never followed): a 401/403
    says what to set as the polls do (``auth_message``); the server's text is scrubbed of this
    server's secrets (``ServerAccess.scrub``: a proxy may echo the ``Authorization`` header)."""
    if 300 <= status < 400:
        return f"POST /api/generate: HTTP {status} {_one_line(access.scrub(reason), 40)}: a redirect, not followed"
    if status in (401, 403):
        return auth_message(status, access)
    if status >= 400:
        # scrubbed before it is cut to one line: a secret cut in two would no longer match
        content = access.scrub(content.decode("utf-8", "replace")).encode()
        detail = ""
        try:
            err = json.loads(content)
            if isinstance(err, Mapping) and isinstance(err.get("error"), str):
                detail = f": {_one_line(access.scrub(err['error']), 160)}"
        except (ValueError, RecursionError):
            text = content.decode("utf-8", "replace")
            detail = f": {_one_line(text, 160)}" if text.strip() else ""
        return f"POST /api/generate: HTTP {status} {_one_line(access.scrub(reason), 40)}{detail}"
    return None


async def fetch_tensors(base_url: str, model: str, *, transport: httpx.AsyncBaseTransport | None = None,
                        access: ServerAccess | None = None) -> list[Any] | None:
    """The ``/api/show`` tensor list (non-verbose: it is always present since Ollama v0.6.1, docs/ollama-internals.md §2.1).

    Read-only. Returns None when it cannot be read (also when the answer is over the
    ``/api/show`` limits of ``BODY_LIMIT_BYTES``, counted after decompression, and ``JSON_VALUE_LIMIT``).
    """
    try:
        access = access if access is not None else ServerAccess(base_url)
        async with httpx.AsyncClient(**access.client_options(base_url=base_url, transport=transport,
                                                             timeout=10.0)) as client:
            async with client.stream("POST", "/api/show", json={"model": model}) as resp:
                if resp.status_code != 200:
                    return None
                content = await _read_capped(resp, BODY_LIMIT_BYTES["/api/show"], truncate=False)
        if json_values_upper_bound(content) > JSON_VALUE_LIMIT["/api/show"]:
            return None  # decoding it would build millions of objects
        body = await asyncio.to_thread(json.loads, content) if len(content) > LARGE_BODY_BYTES else json.loads(content)
    except (httpx.HTTPError, ValueError, RecursionError, _TooLarge, _Undecodable):
        return None
    tensors = body.get("tensors") if isinstance(body, Mapping) else None
    return tensors if isinstance(tensors, list) and tensors else None
