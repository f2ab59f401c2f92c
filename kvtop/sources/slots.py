"""llama-server ``GET /slots`` source: which context slots each local runner is using right now.

Ollama v0.30+ runs every model in an upstream ``llama-server`` listening on 127.0.0.1 at the
``--port`` of its command line (docs/ollama-internals.md §4.4, §5); its ``/slots`` endpoint is on by
default and lists each slot's ``id``, ``n_ctx`` and ``is_processing``. The Era A C++ runner
(``ollama_llama_server``) has ``/slots`` too, with ``state`` (0 idle) instead of
``is_processing``. Go runners (Era B) have no such endpoint and are not asked.

Rules: only 127.0.0.1, only the ports of runner processes seen in the process table, at most one
GET per runner per sample, all runners concurrently, each with a hard deadline (0.5 s by default,
however slowly the runner trickles bytes) and a size cap. A failure is a reason string in the
snapshot, never an exception. Nothing here imports Textual or Rich.

Observer cost: a runner whose slots are all idle is asked again only every
``IDLE_EVERY_S`` (a busy one, or one that failed otherwise, every sample); a runner whose port
refuses the connection is asked again after ``REFUSED_FIRST_S``, then twice as long each time it
still refuses, up to ``REFUSED_MAX_S``; a new PID or port starts afresh. A runner not asked in a
sample, and one whose answer equals the previous one but for its latency, is given as the same
``RunnerSlots`` object as before (an unchanged round then changes no state: no repaint).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from kvtop.model.gpu_snapshots import RunnerProcess
from kvtop.sources.hosts import httpx_verify
from kvtop.model.slot_snapshots import RunnerProps, RunnerSlots, SlotState, SlotsSnapshot

SLOTS_TIMEOUT_S = 0.5
"""Deadline of one ``/slots`` request: a runner busy with a long prefill still answers in
milliseconds, and the poll must never hold up the dashboard."""

MAX_BODY_BYTES = 1024 * 1024
"""Answers larger than this are refused (newer builds list each slot's prompt text)."""

IDLE_EVERY_S = 3.0
"""A runner whose last answer had no busy slot is asked again after this many seconds (a request
it starts shows within this; the runner's log shows it sooner, ``model.slots.slot_use``)."""

REFUSED_FIRST_S = 2.0
"""A runner whose port refused the connection is asked again after this many seconds ..."""

REFUSED_MAX_S = 60.0
"""... then twice as long each time it still refuses, up to this (a runner that is starting
listens within seconds: llama-server opens its port before it loads the model)."""

_EARLY_S = 0.05
"""A runner due within this many seconds is asked in this sample (samples are not exactly periodic)."""

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
        next_token = item.get("next_token")
        first = next_token[0] if isinstance(next_token, list) and next_token and isinstance(next_token[0], dict) else {}
        out.append(
            SlotState(
                sid,
                n_ctx,
                busy,
                _count(item.get("id_task")),
                _count(item.get("n_prompt_tokens")),
                _count(first.get("n_decoded")),
            )
        )
    return tuple(sorted(out, key=lambda s: s.id))


def _count(value: Any) -> int | None:
    """A JSON integer ≥ 0, else None (booleans and floats are not counts)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def parse_props(body: Any) -> RunnerProps:
    """``/props`` JSON -> :class:`RunnerProps` (fields it lacks stay None).

    Raises:
        ValueError: The body is not a JSON object.
    """
    if not isinstance(body, dict):
        raise ValueError(f"expected a JSON object, got {type(body).__name__}")  # noqa: TRY004 - one error type
    dgs = body.get("default_generation_settings")
    n_ctx = _count(dgs.get("n_ctx")) if isinstance(dgs, dict) else None
    slots = _count(body.get("total_slots"))
    path, build = body.get("model_path"), body.get("build_info")
    metrics = body.get("endpoint_metrics")
    return RunnerProps(
        n_ctx_per_slot=n_ctx or None,
        total_slots=slots or None,
        model_path=path if isinstance(path, str) else None,
        build_info=build if isinstance(build, str) else None,
        metrics_endpoint=metrics if isinstance(metrics, bool) else None,
    )


def parse_metrics(text: str) -> dict[str, float]:
    """The ``llamacpp:*`` samples of a Prometheus text body (``llamacpp:tokens_predicted_total 42``)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("llamacpp:"):
            continue
        name, _, value = line.partition(" ")
        try:
            out[name] = float(value.split()[0])
        except (ValueError, IndexError):
            continue
    return out


class SlotsSource:
    """Asks each local llama-server runner for ``/slots``; one :class:`SlotsSnapshot` per sample.

    Args:
        timeout_s: Deadline of each request (seconds).
        transport: An httpx transport for tests; None uses the network (127.0.0.1 only).
        idle_every_s: A runner with no busy slot is asked again after this many seconds
            (``IDLE_EVERY_S``; 0 asks every sample).
        clock: Monotonic seconds (when a runner is due again).

    Attributes:
        requests: HTTP requests started (``/slots``, ``/props``, ``/metrics``), for the
            observer-cost tests.
    """

    def __init__(
        self,
        timeout_s: float = SLOTS_TIMEOUT_S,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        idle_every_s: float = IDLE_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._timeout_s = timeout_s
        self._idle_every_s = idle_every_s
        self._clock = clock
        self._last: dict[tuple[int, int], tuple[RunnerSlots, float, int]] = {}
        """Per ``(pid, port)``: the last answer, when the runner is due again (clock seconds) and
        how many rounds in a row its port refused."""
        self.requests = 0
        # plain http to 127.0.0.1 only: no TLS context is needed (reading the CA bundle costs startup)
        self._client = httpx.AsyncClient(
            trust_env=False,
            transport=transport,
            follow_redirects=False,
            verify=httpx_verify("http://127.0.0.1", trust_env=False),
        )
        self._props: dict[tuple[int, int], RunnerProps] = {}

    async def sample(self, runners: Sequence[RunnerProcess]) -> SlotsSnapshot:
        """One round over ``slot_runners(runners)``; never raises (a failure is ``RunnerSlots.error``).

        A llama-server runner is also asked ``/props`` until it answers once (its slots and
        context are fixed for the process's life), and ``/metrics`` every round only when its
        ``/props`` says that endpoint is on.
        """
        asked = slot_runners(runners)
        live = {(r.pid, r.port) for r in asked}
        for key in [k for k in self._props if k not in live]:
            del self._props[key]
        for key in [k for k in self._last if k not in live]:
            del self._last[key]
        now = self._clock()
        found = await asyncio.gather(*(self._due(r, now) for r in asked))
        return SlotsSnapshot(taken_at=time.time(), runners=tuple(found))

    async def _due(self, r: RunnerProcess, now: float) -> RunnerSlots:
        """``r``'s answer: asked now when it is due (busy, failed, new, or its wait is over), else
        its last answer, the same object (see the module doc)."""
        assert r.port is not None
        key = (r.pid, r.port)
        last = self._last.get(key)
        if last is not None and now < last[1] - _EARLY_S:
            return last[0]
        got = await self._one(r)
        before = last[0] if last is not None else None
        if before is not None and dataclasses.replace(got, latency_s=before.latency_s) == before:
            got = before  # the same answer: the same object (its latency alone changes nothing shown)
        refusals = 0
        if got.error is not None and got.error.startswith(REFUSED_REASON):
            refusals = (last[2] if last is not None else 0) + 1
            wait = min(REFUSED_MAX_S, REFUSED_FIRST_S * 2 ** (refusals - 1))
        elif got.error is None and not got.busy:
            wait = self._idle_every_s
        else:
            wait = 0.0  # busy (its speed is measured between rounds), or failed otherwise: every sample
        self._last[key] = (got, now + wait, refusals)
        return got

    async def _one(self, r: RunnerProcess) -> RunnerSlots:
        """One runner's round: ``/slots`` and, concurrently, ``/props`` (until it answered once) and
        ``/metrics`` (when ``/props`` says it is on), so a round never takes more than one deadline."""
        assert r.port is not None
        port = r.port
        start = time.monotonic()
        props = self._props.get((r.pid, port))
        ask_props = props is None and r.kind == "llama-server"
        ask_metrics = props is not None and bool(props.metrics_endpoint)

        async def get_props() -> tuple[RunnerProps | None, str | None]:
            if not ask_props:
                return props, None
            try:
                got = parse_props(await self._json(port, "/props"))
            except _FAILURES as exc:
                return None, _reason(exc, self._timeout_s)
            except ValueError as exc:
                return None, f"unexpected answer: {exc}"
            self._props[(r.pid, port)] = got
            return got, None

        async def get_metrics() -> dict[str, float]:
            if not ask_metrics:
                return {}
            try:
                return parse_metrics((await self._body(port, "/metrics")).decode("utf-8", "replace"))
            except _FAILURES:
                return {}

        async def get_slots() -> tuple[tuple[SlotState, ...], str | None]:
            try:
                return parse_slots(await self._json(port, "/slots")), None
            except _FAILURES as exc:
                return (), _reason(exc, self._timeout_s)
            except ValueError as exc:
                return (), f"unexpected answer: {exc}"

        (props, props_error), metrics, (slots, error) = await asyncio.gather(get_props(), get_metrics(), get_slots())
        return RunnerSlots(
            pid=r.pid,
            port=port,
            blob=r.blob,
            ctx_size=r.ctx_size,
            slots=slots,
            error=error,
            latency_s=time.monotonic() - start,
            props=props,
            props_error=props_error,
            metrics=metrics,
        )

    async def _json(self, port: int, path: str) -> Any:
        body = await self._body(port, path)
        try:
            return json.loads(body)
        except ValueError:
            raise _Refused("the answer is not JSON") from None

    async def _body(self, port: int, path: str) -> bytes:
        return await asyncio.wait_for(self._get_body(port, path), self._timeout_s)

    async def _get_body(self, port: int, path: str) -> bytes:
        self.requests += 1
        url = f"http://127.0.0.1:{port}{path}"
        async with self._client.stream("GET", url, timeout=httpx.Timeout(self._timeout_s)) as resp:
            if resp.status_code != 200:
                text = (await _read_capped(resp, 4096)).decode("utf-8", "replace")
                raise _Refused(f"HTTP {resp.status_code}: {_one_line(_error_text(text))}")
            return await _read_capped(resp, MAX_BODY_BYTES)

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()


class _Refused(Exception):
    """The runner answered, but not with slots (the message says how)."""


REFUSED_REASON = "connection refused"
"""How a refused connection's reason starts (``RunnerSlots.error``)."""

_FAILURES = (asyncio.TimeoutError, httpx.HTTPError, _Refused)


def _reason(exc: BaseException, timeout_s: float) -> str:
    """One line for a failed request to a runner."""
    if isinstance(exc, asyncio.TimeoutError):
        return f"no answer within {timeout_s:g} s"
    if isinstance(exc, httpx.ConnectError):
        return f"{REFUSED_REASON} (the runner is starting, stopping, or not listening there)"
    if isinstance(exc, httpx.HTTPError):
        return f"request failed: {type(exc).__name__}"
    return str(exc)


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
