"""Hostile answers (bodies too large or too deep, slow drips, escapes in text) against a real hostile server on 127.0.0.1 (``tests/hostile.py``).

Each attack is driven three ways: against ``OllamaClient.sample()`` directly, against the real
``kvtop --once --json`` and ``kvtop --check`` as subprocesses (peak RSS sampled with psutil while
they run), and against the dashboard with Pilot (keys still answered, the last good models kept).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from typing import Any

import httpx

import pytest

from kvtop.config import Settings
from kvtop.sources.ollama import OllamaClient
from kvtop.ui.app import make_app
from kvtop.ui.widgets.header import ServerHeader
from tests.hostile import (
    ESCAPES,
    Attack,
    Custom,
    ErrorBody,
    GzipBomb,
    HugeBody,
    JsonBody,
    MiB,
    NestedJson,
    Redirect,
    Trickle,
    hostile_server,
    kvtop_command,
    ps_body,
    run_measured,
    show_body,
)
from tests.integration.test_app_live import rows, until

TIMEOUT_S = 2.0
"""``--timeout`` / ``timeout_s`` of every run here."""

SLACK_S = 6.0
"""What a subprocess may add to its deadline between its first request and its exit (the report,
teardown). Its start-up (Python, imports) is not counted: on a busy machine that alone took over
10 s (:func:`after_first_request_s`)."""


def after_first_request_s(run: Any, server: Any) -> float:
    """Seconds from the hostile server's first request to the process's end: the part of a run
    that ``--timeout`` bounds, whatever its start-up cost on a loaded machine."""
    assert server.first_request_at is not None, "no request came"
    return float(run.ended_at - server.first_request_at)


RSS_LIMIT_BYTES = 300 * MiB
"""Peak RSS a kvtop process may reach under any attack (about 60 MiB when healthy; the attacks
used to take it to 0.6-1.2 GiB)."""

# attack, error kind, the error text (exactly, or its start when it ends with "…")
ATTACKS: dict[str, tuple[Attack, str, str]] = {
    "huge-chunked": (HugeBody(200 * MiB), "other", "/api/ps: response too large (over 16 MiB)"),
    "huge-declared": (
        HugeBody(200 * MiB, declare_length=True),
        "other",
        "/api/ps: response too large (200 MiB, limit 16 MiB)",
    ),
    "gzip-bomb": (GzipBomb(4 * MiB), "other", "/api/ps: response too large (over 16 MiB)"),
    "trickle": (Trickle(interval_s=0.2), "timeout", f"/api/ps: no answer within {TIMEOUT_S:g} s"),
    "redirect": (
        Redirect("http://admin:hunter2@login.example/sso?next=/api/ps"),
        "http",
        "/api/ps: HTTP 302 Found: redirect to http://login.example/sso?next=/api/ps, not followed",
    ),
    "escapes": (
        ErrorBody(500),
        "http",
        "/api/ps: HTTP 500 Internal Server Error: model failed \ufffd]52;c;aGFja2Vk\ufffd\ufffd[2J\ufffd[31mto load",
    ),
    "nested": (NestedJson(100_000), "invalid_json", '/api/ps: invalid JSON (\'{"models":[[[[[[[[[…'),
}


def _matches(error: str | None, expected: str) -> bool:
    if error is None:
        return False
    return error.startswith(expected[:-1]) if expected.endswith("…") else error == expected


def _no_escapes(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text and "\x9b" not in text, repr(text[:400])


# --- OllamaClient.sample() -----------------------------------------------------------------------


@pytest.mark.parametrize("name", list(ATTACKS))
async def test_sample_reports_each_attack_within_its_deadline(name: str) -> None:
    attack, kind, expected = ATTACKS[name]
    with hostile_server({"/api/ps": attack}) as server:
        client = OllamaClient(server.url, timeout_s=TIMEOUT_S)
        t0 = time.perf_counter()
        snap = await client.sample()
        elapsed_s = time.perf_counter() - t0
        await client.aclose()
    assert not snap.reachable and snap.error_kind == kind
    assert _matches(snap.error, expected), snap.error
    _no_escapes(snap.error or "")
    assert elapsed_s < TIMEOUT_S + 1.0, f"{name}: the sample took {elapsed_s:.1f} s, deadline {TIMEOUT_S} s"
    if isinstance(attack, HugeBody) and not attack.declare_length:
        # the client hung up after its limit: the server got nowhere near 200 MiB out
        assert attack.sent_bytes < 64 * MiB, attack.sent_bytes


async def test_sample_keeps_its_caches_through_an_attack_and_recovers() -> None:
    with hostile_server() as server:
        client = OllamaClient(server.url, timeout_s=TIMEOUT_S)
        good = await client.sample(wait_details=True)
        assert good.reachable and good.version == "0.12.6" and len(good.shows) == 1
        server.set("/api/ps", GzipBomb())
        bad = await client.sample()
        assert bad.error == "/api/ps: response too large (over 16 MiB)"
        server.set("/api/ps", JsonBody(ps_body()))
        again = await client.sample()
        await client.aclose()
    assert again.reachable and again.shows == good.shows  # /api/show is not asked again
    assert server.hits["/api/show"] == 1


async def test_a_too_large_show_fails_that_model_only() -> None:
    with hostile_server({"/api/show": HugeBody(100 * MiB)}) as server:
        client = OllamaClient(server.url, timeout_s=TIMEOUT_S)
        snap = await client.sample(wait_details=True)
        await client.aclose()
    assert snap.reachable and len(snap.models) == 1
    (show,) = snap.shows.values()
    assert show.error == "/api/show: response too large (over 24 MiB)"


# --- kvtop --once --json and kvtop --check as subprocesses ---------------------------------------


def _kvtop(url: str, *args: str, limit_s: float) -> Any:
    return run_measured(
        kvtop_command(*args, "--host", url, "--timeout", f"{TIMEOUT_S:g}", "--log", "none"), limit_s=limit_s
    )


@pytest.mark.parametrize("name", ["huge-chunked", "gzip-bomb", "trickle", "redirect", "escapes", "nested"])
def test_once_json_stays_bounded_under_each_attack(name: str) -> None:
    attack, kind, expected = ATTACKS[name]
    with hostile_server({"/api/ps": attack}) as server:
        run = _kvtop(server.url, "--once", "--json", limit_s=TIMEOUT_S + 60)
    assert run.rc is not None, f"{name}: kvtop --once still running after {run.wall_s:.0f} s"
    took_s = after_first_request_s(run, server)
    assert took_s < TIMEOUT_S + SLACK_S, (
        f"{name}: kvtop --once took {took_s:.1f} s after asking (--timeout {TIMEOUT_S:g})"
    )
    assert run.peak_rss_bytes < RSS_LIMIT_BYTES, f"{name}: peak RSS {run.peak_rss_bytes / MiB:.0f} MiB"
    assert run.rc == 2, (run.rc, run.stderr[-2000:])  # unreachable
    out = json.loads(run.stdout)
    assert out["reachable"] is False and _matches(out["error"], expected), out["error"]
    _no_escapes(run.stdout + run.stderr)


@pytest.mark.parametrize("name", ["gzip-bomb", "escapes", "redirect"])
def test_check_names_the_attack_in_plain_text(name: str) -> None:
    attack, kind, expected = ATTACKS[name]
    with hostile_server({"/api/ps": attack}) as server:
        run = _kvtop(server.url, "--check", limit_s=TIMEOUT_S + 60)
    assert run.rc is not None and after_first_request_s(run, server) < TIMEOUT_S + SLACK_S, run.wall_s
    assert run.peak_rss_bytes < RSS_LIMIT_BYTES, f"{name}: peak RSS {run.peak_rss_bytes / MiB:.0f} MiB"
    assert run.rc != 0
    first = run.stdout.splitlines()[0]
    assert first.startswith(f"kvtop: {server.url}: unreachable: ")
    assert _matches(first.split(": unreachable: ", 1)[1], expected), first
    _no_escapes(run.stdout + run.stderr)
    assert ESCAPES not in run.stdout


def test_once_lists_a_thousand_models_with_slow_shows_in_bounded_time() -> None:
    show_delay_s = 0.5
    with hostile_server({"/api/show": JsonBody(show_body(), delay_s=show_delay_s)}, n_models=1000) as server:
        run = _kvtop(server.url, "--once", "--json", limit_s=90)
        shows_asked = server.hits["/api/show"]
        most_at_once = server.most_in_flight["/api/show"]
    # /api/ps (--timeout) plus the details budget (the 10 s /api/show deadline), whatever the count
    budget_s = TIMEOUT_S + 10.0
    assert run.rc == 0, (run.rc, run.wall_s, run.stderr[-2000:])
    took_s = after_first_request_s(run, server)
    assert took_s < budget_s + SLACK_S, f"kvtop --once with 1,000 models took {took_s:.1f} s after asking"
    assert run.peak_rss_bytes < RSS_LIMIT_BYTES, f"peak RSS {run.peak_rss_bytes / MiB:.0f} MiB"
    models = json.loads(run.stdout)["models"]
    assert [m["name"] for m in models] == [f"m{i:04d}:latest" for i in range(1000)]
    waiting = [m for m in models if m["kv_estimate_unavailable"] == "waiting for /api/show"]
    estimated = [m for m in models if m["memory"]["kv"] == 4096 * 114_688]  # 28 layers x 8 KV heads x 128 x 2 x f16
    assert len(waiting) + len(estimated) == 1000
    assert estimated and waiting  # the first ones in server order got their details, the rest say so
    assert models[0] in estimated and models[-1] in waiting
    # 6 at a time, 0.5 s each, within the 10 s budget: about 120 asked (not 1,000 at once); the
    # pre-flight asks a server that could not answer those in time for no more /api/show
    assert shows_asked <= 6 * (10.0 / show_delay_s + 2), shows_asked
    assert most_at_once == 6, most_at_once
    preflight = json.loads(run.stdout)["server"]["preflight"]
    assert len(preflight) == 1000 and {row["verdict"] for row in preflight} == {"waiting"}


# --- the dashboard (Pilot) -----------------------------------------------------------------------


def _header(app: Any) -> str:
    return app.query_one(ServerHeader).render().plain


async def test_dashboard_keeps_the_last_models_and_answers_keys_under_attack() -> None:
    from kvtop.ui.screens.help import HelpScreen

    with hostile_server() as server:
        app = make_app(Settings(host_url=server.url, interval_s=0.25, timeout_s=TIMEOUT_S))
        async with app.run_test(size=(160, 48)) as pilot:
            await until(pilot, lambda: [r[0] for r in rows(app)] == ["llama3.2:latest"])
            for name in ("huge-chunked", "gzip-bomb", "redirect", "escapes", "trickle"):
                attack, kind, expected = ATTACKS[name]
                server.set("/api/ps", attack)
                await until(
                    pilot,
                    lambda: app.state.ollama is not None and _matches(app.state.ollama.error, expected),
                    timeout_s=TIMEOUT_S + 5,
                )
                assert [r[0] for r in rows(app)] == ["llama3.2:latest"], name  # the last good data stays
                head = _header(app)
                assert "✖" in head and "\x1b" not in head, head
                # keys are answered while the poller fights the attack
                before = app.sort_key
                await pilot.press("s")
                assert app.sort_key != before
                await pilot.press("question_mark")
                await until(pilot, lambda: isinstance(app.screen, HelpScreen), timeout_s=2)
                await pilot.press("escape")
                await until(pilot, lambda: not isinstance(app.screen, HelpScreen), timeout_s=2)
                server.set("/api/ps", JsonBody(ps_body()))
                await until(pilot, lambda: app.state.reachable is True, timeout_s=TIMEOUT_S + 5)
            await pilot.press("q")


async def test_dashboard_with_a_thousand_models_and_slow_shows_stays_responsive() -> None:
    with hostile_server({"/api/show": JsonBody(show_body(), delay_s=0.2)}, n_models=1000) as server:
        app = make_app(Settings(host_url=server.url, interval_s=0.5, timeout_s=TIMEOUT_S))
        async with app.run_test(size=(160, 48)) as pilot:
            await until(pilot, lambda: len(rows(app)) == 1000, timeout_s=20)
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            before = app.sort_key
            await pilot.press("s")
            await pilot.pause()
            assert app.sort_key != before and len(rows(app)) == 1000
            assert loop.time() - t0 < 5.0, "a key took more than 5 s with 1,000 models"
            # details keep arriving in the background, a bounded number at a time
            await until(pilot, lambda: server.hits["/api/show"] >= 40, timeout_s=20)
            assert server.hits["/api/show"] < 1000
            assert server.most_in_flight["/api/show"] == 6
            await pilot.press("q")


# --- the what-if planner's two requests ----------------------------------------------------------


async def test_planner_requests_read_bounded_bodies() -> None:
    from kvtop.sources.ollama_writes import fetch_tensors, send_load_request

    big_error = ErrorBody(500, text="load failed " + ESCAPES + "x" * (8 * MiB))
    with hostile_server({"/api/show": GzipBomb(), "/api/generate": big_error}) as server:
        assert await fetch_tensors(server.url, "m") is None  # a bomb is not inflated past 24 MiB
        error = await send_load_request(server.url, "m", 4096, None)
        server.set("/api/show", JsonBody({"tensors": [{"name": "blk.0.attn_k.weight", "shape": [4096, 1024]}]}))
        server.set("/api/generate", Redirect())
        tensors = await fetch_tensors(server.url, "m")
        redirected = await send_load_request(server.url, "m", 4096, None)
    # 64 KiB of the 8 MiB error is read: the JSON is cut, so its text is shown as sent (escaped)
    assert error is not None and error.startswith(
        'POST /api/generate: HTTP 500 Internal Server Error: {"error": "load failed \\u001b]52'
    )
    assert len(error) < 300 and "\x1b" not in error
    assert tensors == [{"name": "blk.0.attn_k.weight", "shape": [4096, 1024]}]
    assert redirected == "POST /api/generate: HTTP 302 Found: a redirect, not followed"


def test_the_exporter_survives_every_attack_and_serves_clean_labels(tmp_path: Path) -> None:
    """``kvtop export prometheus`` polling a hostile server: scrapes keep answering, the up gauge
    says 0 during an attack and 1 after it, no label carries a control character, memory stays
    bounded."""
    import psutil
    from prometheus_client.parser import text_string_to_metric_families

    from tests.integration.test_export_prometheus import exporter

    with hostile_server({"/api/show": JsonBody(show_body(architecture="llama" + ESCAPES))}) as server:
        with exporter(tmp_path, "--host", server.url, "--interval", "0.25", "--log", "none") as exp:
            fams = exp.until(
                lambda f: (
                    any(s.value == 1 for s in f["kvtop_server_up"].samples)
                    and "kvtop_model_info" in f
                    and f["kvtop_model_info"].samples
                )
            )
            (info,) = fams["kvtop_model_info"].samples
            assert info.labels["architecture"].startswith("llama") and "\x1b" not in info.labels["architecture"]
            peak = 0
            for attack in (HugeBody(200 * MiB), GzipBomb(), ErrorBody(status=502)):
                server.set("/api/ps", attack)
                fams = exp.until(lambda f: any(s.value == 0 for s in f["kvtop_server_up"].samples))
                text = httpx.get(exp.url, timeout=5.0, trust_env=False).text
                assert "\x1b" not in text and not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", text)
                list(text_string_to_metric_families(text))  # still valid exposition text
                peak = max(peak, psutil.Process(exp.proc.pid).memory_info().rss)
            server.set("/api/ps", JsonBody(ps_body()))
            exp.until(lambda f: any(s.value == 1 for s in f["kvtop_server_up"].samples))
            assert peak < 300 * MiB, f"exporter RSS reached {peak / MiB:.0f} MiB"
            assert exp.stop() == 0


def test_once_stays_bounded_when_every_show_is_an_object_bomb() -> None:
    """16 models whose ``/api/show`` is 20 MiB of ``{}`` inside ``model_info`` (under the byte cap,
    about 7 million values each): refused before decoding, so kvtop stays small and says why."""
    body = b'{"model_info":{"general.architecture":"llama","x":[' + b"{}," * 7_000_000 + b"{}]}}"

    def bomb(h: Any, stop: Any) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    with hostile_server({"/api/show": Custom(bomb)}, n_models=16) as server:
        run = _kvtop(server.url, "--once", "--json", limit_s=90)
    assert run.rc == 0, run.stderr[-2000:]
    assert run.peak_rss_bytes < RSS_LIMIT_BYTES, f"peak RSS {run.peak_rss_bytes / MiB:.0f} MiB"
    out = json.loads(run.stdout)
    assert len(out["models"]) == 16
    assert all("too many JSON values" in (m["kv_estimate_unavailable"] or "") for m in out["models"]), [
        m["kv_estimate_unavailable"] for m in out["models"]
    ]
