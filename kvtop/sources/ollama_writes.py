"""Requests to an Ollama server outside a poller: a load (``POST /api/generate``) through a client of
its own, and the what-if's tensor list (``POST /api/show``). The polling client's own write is
``OllamaClient.generate`` (:mod:`kvtop.sources.ollama`).
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Mapping
from typing import Any

import httpx

from kvtop.sources.auth import ServerAccess, redact_url
from kvtop.sources.ollama_decode import _one_line
from kvtop.sources.ollama_errors import _root_os_error
from kvtop.sources.ollama_errors import auth_message, tls_message
from kvtop.sources.ollama_limits import (
    BODY_LIMIT_BYTES,
    ERROR_BODY_LIMIT_BYTES,
    JSON_VALUE_LIMIT,
    LARGE_BODY_BYTES,
    _read_capped,
    _TooLarge,
    _Undecodable,
    json_values_upper_bound,
)

LOAD_TIMEOUT_S = 600.0
"""A load can take minutes for a large model read from disk."""


# --------------------------------------------------------------------------------------------
# Requests outside a poller: a load through a client of its own (the dashboard sends its writes
# through the polling client, ``OllamaClient.generate``), and the what-if's tensor list


async def send_load_request(
    base_url: str,
    model: str,
    num_ctx: int,
    keep_alive: int | str | None,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    timeout_s: float = LOAD_TIMEOUT_S,
    access: ServerAccess | None = None,
) -> str | None:
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
        async with httpx.AsyncClient(
            **access.client_options(
                base_url=base_url, transport=transport, timeout=httpx.Timeout(timeout_s, connect=10.0)
            )
        ) as client:
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


async def fetch_tensors(
    base_url: str, model: str, *, transport: httpx.AsyncBaseTransport | None = None, access: ServerAccess | None = None
) -> list[Any] | None:
    """The ``/api/show`` tensor list (non-verbose: it is always present since Ollama v0.6.1, docs/ollama-internals.md §2.1).

    Read-only. Returns None when it cannot be read (also when the answer is over the
    ``/api/show`` limits of ``BODY_LIMIT_BYTES``, counted after decompression, and ``JSON_VALUE_LIMIT``).
    """
    try:
        access = access if access is not None else ServerAccess(base_url)
        async with httpx.AsyncClient(
            **access.client_options(base_url=base_url, transport=transport, timeout=10.0)
        ) as client:
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
