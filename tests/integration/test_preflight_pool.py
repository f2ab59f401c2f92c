"""The pre-flight's ``/api/show`` pool against a real HTTP server whose ``/api/show`` hangs for chosen
models (``tests.hostile``): a rolling pool (a hanging model holds one slot, not a whole round), at
most six in flight, a deadline per request, the unread models listed with their reason, and
``kvtop plan --all`` exiting 3 when its answer is incomplete."""

from __future__ import annotations

import asyncio
import json
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from typing import Any

from kvtop.model.preflight import preflight, server_defaults, unread
from kvtop.plan_cli.inputs import EXIT_INCOMPLETE
from kvtop.sources.ollama import SHOW_CONCURRENCY
from kvtop.sources.pulled import PulledSource
from tests.hostile import Custom, HostileServer, JsonBody, hostile_server, show_body, tags_body

GiB = 1024**3
N_MODELS = 270
HUNG = {f"m{i:04d}:latest" for i in (0, 1, 2, 3, 4, 57, 99, 150, 151, 200, 269)}  # 11, the first five together


NEVER = threading.Event()
"""Never set: a model hung with it waits for the client (or the server's end)."""


def _name(i: int) -> str:
    return f"m{i:04d}:latest"


@contextmanager
def _server(hang: Callable[[str], threading.Event | None]) -> Iterator[tuple[HostileServer, dict[str, int]]]:
    """A server with ``N_MODELS`` pulled models; ``/api/show`` of a model of ``HUNG`` for which
    ``hang(name)`` gives an event never answers: it hangs up when the client does, when that event
    is set, or when the server stops. Yields the server and the count of answered
    ``/api/show`` (``{"answered": n}``)."""
    counts = {"answered": 0}
    lock = threading.Lock()
    body = json.dumps(show_body()).encode()

    def show(h: BaseHTTPRequestHandler, stop: threading.Event) -> None:
        name = json.loads(getattr(h, "request_body", b"{}") or b"{}").get("model", "")
        release = hang(name) if name in HUNG else None
        if release is not None:
            _until_hung_up(h, stop, release)  # hung until the client gives up (or the test ends it)
            h.close_connection = True  # then hangs up without an answer
            return
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)
        with lock:
            counts["answered"] += 1

    with hostile_server(
        {"/api/show": Custom(show), "/api/tags": JsonBody(tags_body(N_MODELS)), "/api/ps": JsonBody({"models": []})},
        n_models=1,
    ) as server:
        yield server, counts


def _until_hung_up(h: BaseHTTPRequestHandler, stop: threading.Event, release: threading.Event) -> None:
    """Block until the client closes the connection (its deadline), or ``stop`` or ``release`` is
    set: the server's ``in_flight`` then counts only the requests the client still waits for."""
    sock = h.connection
    while not stop.is_set() and not release.is_set():
        readable, _, _ = select.select([sock], [], [], 0.05)
        if readable:
            try:
                if sock.recv(1, socket.MSG_PEEK) == b"":
                    return
            except OSError:
                return
            stop.wait(0.05)  # something else to read (not expected): keep waiting for the close


def _wait_for(cond: Callable[[], bool], deadline_s: float = 90.0) -> bool:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def test_a_hanging_model_holds_one_slot_not_a_round() -> None:
    """The five hung models are the first five asked: with rounds of six, nothing past the sixth
    would be read until they end. With the rolling pool every healthy model is read through the
    one free slot while they still hang; only then does the test release them."""
    release = threading.Event()
    first = {_name(i) for i in range(5)}  # of HUNG, only these hang here (a sixth would hold the last slot)
    with _server(lambda name: release if name in first else None) as (server, counts):
        healthy = N_MODELS - len(first)
        result: dict[str, Any] = {}

        def run() -> None:
            async def go() -> Any:
                src = PulledSource(server.url, show_timeout_s=300.0)
                try:
                    return await src.sample_all(budget_s=300.0)
                finally:
                    await src.aclose()

            result["snap"] = asyncio.run(go())

        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        try:
            all_read = _wait_for(lambda: counts["answered"] >= healthy)
        finally:
            release.set()
        worker.join(timeout=20)
        assert all_read, f"only {counts['answered']} of {healthy} healthy models read while 5 hung"
        assert not worker.is_alive()
        assert counts["answered"] == healthy
        snap = result["snap"]
        assert snap.tags is not None and len(snap.tags) == N_MODELS
        assert server.most_in_flight["/api/show"] <= SHOW_CONCURRENCY
        assert server.hits["/api/show"] == N_MODELS  # each model asked once
        errors = {s.name: s.error for s in snap.shows.values() if s.error}
        assert set(errors) == first  # released without an answer: an error each, with its reason
        assert sum(1 for s in snap.shows.values() if not s.error and s.model_info) == healthy


def test_deadline_per_request_and_unread_with_reason() -> None:
    with _server(lambda name: NEVER) as (server, counts):

        async def go() -> Any:
            src = PulledSource(server.url, show_timeout_s=5.0)
            try:
                return await src.sample_all(budget_s=300.0)
            finally:
                await src.aclose()

        snap = asyncio.run(go())
        assert server.most_in_flight["/api/show"] <= SHOW_CONCURRENCY
    rows = preflight(snap, server_defaults("0.22.1", None, 24 * GiB), free_bytes=8 * GiB)
    missing = unread(rows)
    assert {name for name, _ in missing} == HUNG
    assert all(why == "/api/show: no answer within 5 s" for _, why in missing), missing
    assert [r.verdict for r in rows].count("error") == len(HUNG)
    assert not any(r.verdict == "waiting" for r in rows)


def test_budget_out_leaves_the_rest_unasked_and_says_so() -> None:
    """Everything hangs; the budget ends the call: the ones in flight are cancelled, no more are
    started, and the rows not read say they were not asked."""
    with _server(lambda name: NEVER) as (server, counts):
        global HUNG
        saved, HUNG = HUNG, {_name(i) for i in range(N_MODELS)}
        try:

            async def go() -> Any:
                src = PulledSource(server.url, show_timeout_s=300.0)
                try:
                    return await src.sample_all(budget_s=1.0)
                finally:
                    await src.aclose()

            snap = asyncio.run(go())
        finally:
            HUNG = saved
        assert server.hits["/api/show"] <= SHOW_CONCURRENCY  # none started once the first six hung past it
    assert snap.tags is not None and len(snap.tags) == N_MODELS and len(snap.shows) == 0
    rows = preflight(snap, server_defaults("0.22.1", None, 24 * GiB), free_bytes=8 * GiB)
    missing = unread(rows, "not asked")
    assert len(missing) == N_MODELS and all(why == "not asked" for _, why in missing)


def _plan_all(url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvtop", "plan", "--all", "--host", url, "--gpu-free", "8GiB", "--timeout", "5", *extra],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_plan_all_lists_unread_models_and_exits_3() -> None:
    with _server(lambda name: NEVER) as (server, counts):
        done = _plan_all(server.url, "--json")
        text = _plan_all(server.url)
    assert done.returncode == EXIT_INCOMPLETE == 3, done.stderr
    doc = json.loads(done.stdout)
    assert doc["complete"] is False
    assert {u["name"] for u in doc["unread"]} == HUNG
    assert all(u["reason"] == "/api/show: no answer within 5 s" for u in doc["unread"])
    verdicts = {m["name"]: m["verdict"] for m in doc["models"]}
    assert len(verdicts) == N_MODELS
    assert all(v in ("fits", "marginal", "spills") for n, v in verdicts.items() if n not in HUNG)
    assert all(verdicts[n] == "error" for n in HUNG)
    assert text.returncode == 3, text.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"kvtop plan: incomplete: /api/show of {len(HUNG)} of {N_MODELS} "
        "model(s) not read (listed as unread, with the reason)"
    )
    assert f"incomplete: /api/show of {len(HUNG)} of {N_MODELS} model(s) not read (exit 3):" in text.stdout
    for name in HUNG:
        assert f"  unread  {name}: /api/show: no answer within 5 s\n" in text.stdout


def test_plan_all_complete_exits_0() -> None:
    with _server(lambda name: None) as (server, counts):
        done = _plan_all(server.url, "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["complete"] is True and doc["unread"] == [] and len(doc["models"]) == N_MODELS


def test_server_view_rounds_do_not_wait_for_a_hanging_model() -> None:
    """The server view's ``sample_pulled(wait_s=…)``: each call returns within its wait while five
    models hang, the requests running on between calls; every healthy model is read meanwhile,
    never more than six in flight, and closing the source cancels the hung ones."""
    release = threading.Event()
    first = {_name(i) for i in range(5)}
    with _server(lambda name: release if name in first else None) as (server, counts):
        healthy = N_MODELS - len(first)

        async def go() -> int:
            src = PulledSource(server.url, show_timeout_s=300.0)
            try:
                loop = asyncio.get_running_loop()
                end = loop.time() + 90.0
                while counts["answered"] < healthy and loop.time() < end:
                    await src.sample_pulled(wait_s=0.2)  # returns although five requests still hang
                in_flight = len(src._pulled_inflight)
            finally:
                await src.aclose()
            return in_flight

        try:
            in_flight = asyncio.run(go())
        finally:
            release.set()
        assert counts["answered"] == healthy, counts
        assert in_flight == len(first)  # the five still hang, each in its slot, when all else is read
        assert server.most_in_flight["/api/show"] <= SHOW_CONCURRENCY
