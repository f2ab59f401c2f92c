"""llama-server ``GET /slots`` source: which context slots each local runner is using right now.

Ollama v0.30+ runs every model in an upstream ``llama-server`` listening on 127.0.0.1 at the
``--port`` of its command line (ollama-reference.md §4.4, §5); its ``/slots`` endpoint is on by
default and lists each slot's ``id``, ``n_ctx`` and ``is_processing``. The Era A C++ runner
(``ollama_llama_server``) has ``/slots`` too, with ``state`` (0 idle) instead of
``is_processing``. Go runners (Era B) have no such endpoint and are not asked.

Rules: only 127.0.0.1, only the ports of runner processes seen in the process table, one GET
per runner per sample, all runners concurrently, each with a hard deadline (0.5 s by default,
however slowly the runner trickles bytes) and a size cap. A failure is a reason string in the
snapshot, never an exception. Nothing here imports Textual or Rich.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from typing import Any

import httpx

from kvtop.model.gpu import RunnerProcess
from kvtop.model.slots import RunnerSlots, SlotsSnapshot, SlotState

SLOTS_TIMEOUT_S = 0.5
"""Deadline of one ``/slots`` request: a runner busy with a long prefill still answers in
milliseconds, and the poll must never hold up the dashboard."""

MAX_BODY_BYTES = 1024 * 1024
"""Answers larger than this are refused (newer builds list each slot's prompt text)."""

SLOT_KINDS = frozenset({"llama-server", "ollama_llama_server"})
"""Runner kinds (``RunnerProcess.kind``) that serve ``/slots``."""


def slot_runners(runners: Sequence[RunnerProcess]) -> tuple[RunnerProcess, ...]:
    """The runners to ask: a ``/slots``-serving kind with a port on the command line."""
    return tuple(r for r in runners if r.kind in SLOT_KINDS and r.port is not None and 0 < r.port < 65536)


def parse_slots(body: Any) -> tuple[SlotState, ...]:
    """``/slots`` JSON -> slots in id order.

    Raises:
        ValueError: The body is not a list of slot objects with an integer ``id``.
    """
    if not isinstance(body, list):
        raise ValueError(f"expected a JSON list of slots, got {type(body).__name__}")  # noqa: TRY004 - one error type for every malformed answer
    out: list[SlotState] = []
    for item in body:
        if not isinstance(item, dict):
            raise ValueError("a slot is not a JSON object")  # noqa: TRY004 - as above
        sid = item.get("id")
        if not isinstance(sid, int) or isinstance(sid, bool) or sid < 0:
            raise ValueError(f"a slot has no integer id ({sid!r})")
        n_ctx = item.get("n_ctx")
        if not isinstance(n_ctx, int) or isinstance(n_ctx, bool) or n_ctx <= 0:
            n_ctx = None
        if "is_processing" in item:
            busy = item["is_processing"] is True
        else:
            state = item.get("state")
            busy = isinstance(state, int) and not isinstance(state, bool) and state != 0
        out.append(SlotState(sid, n_ctx, busy))
    return tuple(sorted(out, key=lambda s: s.id))


class SlotsSource:
    """Asks each local llama-server runner for ``/slots``; one :class:`SlotsSnapshot` per sample.

    Args:
        timeout_s: Deadline of each request (seconds).
        transport: An httpx transport for tests; None uses the network (127.0.0.1 only).
    """

    def __init__(self, timeout_s: float = SLOTS_TIMEOUT_S, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._timeout_s = timeout_s
        self._client = httpx.AsyncClient(trust_env=False, transport=transport, follow_redirects=False)

    async def sample(self, runners: Sequence[RunnerProcess]) -> SlotsSnapshot:
        """One round over ``slot_runners(runners)``; never raises (a failure is ``RunnerSlots.error``)."""
        asked = slot_runners(runners)
        found = await asyncio.gather(*(self._one(r) for r in asked))
        return SlotsSnapshot(taken_at=time.time(), runners=tuple(found))

    async def _one(self, r: RunnerProcess) -> RunnerSlots:
        assert r.port is not None
        start = time.monotonic()
        base = RunnerSlots(pid=r.pid, port=r.port, blob=r.blob, ctx_size=r.ctx_size)
        try:
            slots = await asyncio.wait_for(self._get(r.port), self._timeout_s)
        except asyncio.TimeoutError:
            error = f"no answer within {self._timeout_s:g} s"
        except httpx.ConnectError:
            error = "connection refused (the runner is starting, stopping, or not listening there)"
        except httpx.HTTPError as exc:
            error = f"request failed: {type(exc).__name__}"
        except _Refused as exc:
            error = str(exc)
        else:
            return RunnerSlots(pid=r.pid, port=r.port, blob=r.blob, ctx_size=r.ctx_size, slots=slots,
                               latency_s=time.monotonic() - start)
        return RunnerSlots(pid=base.pid, port=base.port, blob=base.blob, ctx_size=base.ctx_size, error=error,
                           latency_s=time.monotonic() - start)

    async def _get(self, port: int) -> tuple[SlotState, ...]:
        url = f"http://127.0.0.1:{port}/slots"
        async with self._client.stream("GET", url, timeout=httpx.Timeout(self._timeout_s)) as resp:
            if resp.status_code != 200:
                text = (await _read_capped(resp, 4096)).decode("utf-8", "replace")
                raise _Refused(f"HTTP {resp.status_code}: {_one_line(_error_text(text))}")
            body = await _read_capped(resp, MAX_BODY_BYTES)
        try:
            data = json.loads(body)
        except ValueError:
            raise _Refused("the answer is not JSON") from None
        try:
            return parse_slots(data)
        except ValueError as exc:
            raise _Refused(f"unexpected answer: {exc}") from None

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()


class _Refused(Exception):
    """The runner answered, but not with slots (the message says how)."""


async def _read_capped(resp: httpx.Response, limit: int) -> bytes:
    data = bytearray()
    async for chunk in resp.aiter_bytes():
        data += chunk
        if len(data) > limit:
            if limit < MAX_BODY_BYTES:
                return bytes(data[:limit])
            raise _Refused(f"the answer is larger than {limit // 1024} KiB")
    return bytes(data)


def _error_text(text: str) -> str:
    """llama-server errors are ``{"error": {"message": …}}``; other bodies are shown as text."""
    try:
        obj = json.loads(text)
    except ValueError:
        return text.strip() or "no body"
    if isinstance(obj, dict):
        err = obj.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return str(err["message"])
        if isinstance(err, str):
            return err
    return text.strip()


def _one_line(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
