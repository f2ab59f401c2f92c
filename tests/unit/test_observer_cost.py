"""What watching costs, proved with counters, not clocks.

- ``/api/show`` requests in flight never exceed ``SHOW_CONCURRENCY`` (counted by a real
  127.0.0.1 server), and an answered digest is not asked again;
- ``parse_ps`` of N models does O(N) work (bytecode instructions counted);
- plain-http clients never read a CA bundle (``certifi.where`` calls counted);
- the exporter renders ``/metrics`` once per state, whatever the number of scrapes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import sys
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_families
from prometheus_client.parser import text_string_to_metric_families

from kvtop.export.exporter import Exporter, HostPoller
from kvtop.export.http_server import make_wsgi
from kvtop.export.metrics import HostView, KvtopCollector, make_registry
from kvtop.export.metrics_cache import SCRAPED_RECENTLY_S, MetricsCache
from kvtop.sources.hosts import httpx_verify
from kvtop.sources.ollama import SHOW_CONCURRENCY, OllamaClient
from kvtop.sources.ollama_decode import parse_ps
from tests.hostile import JsonBody, hostile_server, ps_body, show_body
from tests.unit.test_prometheus import HOST, CountingSource, StandinTransport, state_at

# --------------------------------------------------------------------------------------------
# /api/show: bounded concurrency, asked once per digest


async def test_show_requests_in_flight_never_exceed_the_bound_on_a_real_server() -> None:
    n = 40
    with hostile_server({"/api/show": JsonBody(show_body(), delay_s=0.05)}, n_models=n) as server:
        client = OllamaClient(server.url, timeout_s=5, show_timeout_s=10)
        try:
            snap = await client.sample(wait_details=True)
            assert len(snap.models) == n and len(snap.shows) == n
            assert all(s.error is None for s in snap.shows.values())
            assert server.most_in_flight["/api/show"] == SHOW_CONCURRENCY  # reached, never passed
            assert server.hits["/api/show"] == n  # one per digest
            for _ in range(3):
                await client.sample(wait_details=True)
            assert server.hits["/api/show"] == n  # answered digests are not asked again
            assert server.hits["/api/ps"] == 4
        finally:
            await client.aclose()


# --------------------------------------------------------------------------------------------
# parse_ps: linear


def _instructions(fn: Callable[[], Any]) -> int:
    """Bytecode instructions executed by ``fn()`` and everything it calls (``sys.settrace``)."""
    count = [0]

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        if event == "opcode":
            count[0] += 1
        return tracer

    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(None)
    return count[0]


def _ps(n: int, duplicates: bool) -> dict[str, Any]:
    models = ps_body(n)["models"]
    return {"models": models + models[::-1] if duplicates else models}


@pytest.mark.parametrize("duplicates", [False, True])
def test_parse_ps_work_grows_linearly_with_models(duplicates: bool) -> None:
    small = _instructions(lambda: parse_ps(_ps(100, duplicates)))
    large = _instructions(lambda: parse_ps(_ps(1000, duplicates)))
    assert len(parse_ps(_ps(1000, duplicates))) == 1000
    # 10x the models: 10x the work (plus the constant part); a quadratic scan would be ~100x
    assert large <= 10.5 * small, (small, large)


# --------------------------------------------------------------------------------------------
# TLS: no CA bundle for plain http


def test_plain_http_gets_a_context_without_a_ca_bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    import ssl

    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    ctx = httpx_verify("http://127.0.0.1:11434", trust_env=False)
    assert isinstance(ctx, ssl.SSLContext)
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname  # a TLS connection would fail, not go unchecked
    assert ctx.get_ca_certs() == []
    assert httpx_verify("http://gpu-box:11434", trust_env=True) is ctx  # one per process
    assert httpx_verify("https://ollama.example", trust_env=False) is True
    assert httpx_verify("HTTPS://ollama.example", trust_env=True) is True
    monkeypatch.setenv("HTTPS_PROXY", "https://proxy.example:3128")
    assert httpx_verify("http://gpu-box:11434", trust_env=True) is True  # the proxy is reached over TLS
    assert httpx_verify("http://127.0.0.1:11434", trust_env=False) is ctx  # no proxy for loopback
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    assert httpx_verify("http://gpu-box:11434", trust_env=True) is ctx


async def test_clients_for_plain_http_read_no_ca_bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    import ssl

    from kvtop.sources.slots import SlotsSource

    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    reads: list[str] = []
    default = ssl.create_default_context  # what httpx calls to load the CA bundle (certifi or SSL_CERT_FILE)

    def counting(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        reads.append("ca")
        return default(*args, **kwargs)

    monkeypatch.setattr(ssl, "create_default_context", counting)
    clients = [OllamaClient("http://127.0.0.1:11434"), OllamaClient("http://10.1.2.3:11434")]
    slots = SlotsSource()
    assert reads == []
    tls = OllamaClient("https://ollama.example")
    assert reads == ["ca"]  # https keeps httpx's own verification
    for c in (*clients, tls):
        await c.aclose()
    await slots.aclose()


# --------------------------------------------------------------------------------------------
# The exporter: one render per state


def _parse(body: bytes) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(body.decode())}


def _samples(
    fams: dict[str, Any], drop: tuple[str, ...] = ("kvtop_exporter_scrapes", "kvtop_exporter_collect_duration_seconds")
) -> set[Any]:
    return {
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for name, f in fams.items()
        if name not in drop
        for s in f.samples
    }


def _scrapes(fams: dict[str, Any]) -> float:
    (sample,) = [s for s in fams["kvtop_exporter_scrapes"].samples if s.name == "kvtop_exporter_scrapes_total"]
    return float(sample.value)


async def test_many_scrapes_of_one_state_cost_one_render() -> None:
    state = await state_at(4)
    views = [HostView(url=HOST, local=False, log=False, state=state)]
    collector = KvtopCollector(lambda: views, lambda: None)
    cache = MetricsCache(collector)
    bodies = [cache.body(None, None) for _ in range(50)]
    assert (cache.renders, cache.encodes, cache.served) == (1, 1, 50)
    assert all(h == [("Content-Type", "text/plain; version=0.0.4; charset=utf-8")] for _, h in bodies)
    first, last = _parse(bodies[0][0]), _parse(bodies[-1][0])
    assert (_scrapes(first), _scrapes(last)) == (1, 50)  # the counter is per scrape, the rest cached
    assert _samples(first) == _samples(last)
    # the cached body carries what prometheus-client renders from the same state
    from prometheus_client import generate_latest

    assert _samples(first) == _samples(_parse(generate_latest(make_registry(collector))))
    assert len(_samples(first)) > 30

    cache.invalidate()  # a poll that changed nothing the scrape reads: no new render
    cache.body(None, None)
    assert cache.renders == 1
    views[0] = dataclasses.replace(views[0], polls=7)  # a poll published a new view
    cache.invalidate()
    fams = _parse(cache.body(None, None)[0])
    assert cache.renders == 2
    assert [s.value for s in fams["kvtop_server_polls"].samples if s.name.endswith("_total")] == [7]


async def test_cached_openmetrics_and_gzip_bodies_are_whole() -> None:
    state = await state_at(4)
    views = [HostView(url=HOST, local=False, log=False, state=state)]
    cache = MetricsCache(KvtopCollector(lambda: views, lambda: None))
    om = "application/openmetrics-text; version=1.0.0; charset=utf-8"
    plain, _ = cache.body(None, None)
    for i in range(3):
        body, headers = cache.body(om, "gzip")
        assert ("Content-Encoding", "gzip") in headers
        text = gzip.decompress(body).decode()
        assert text.endswith("# EOF\n") and text.count("# EOF") == 1
        fams = {f.name: f for f in om_families(text)}  # the strict OpenMetrics parser accepts it
        assert _scrapes(fams) == 2 + 2 * i
        gz_plain, headers = cache.body(None, "gzip, deflate")
        assert _samples(_parse(gzip.decompress(gz_plain))) == _samples(_parse(plain))
    assert cache.renders == 1 and cache.encodes == 3  # text; OpenMetrics with gzip; text again once gzip was asked


async def test_prerender_only_while_a_scraper_is_about() -> None:
    state = await state_at(4)
    views = [HostView(url=HOST, local=False, log=False, state=state)]
    now = [1000.0]
    cache = MetricsCache(KvtopCollector(lambda: views, lambda: None), clock=lambda: now[0])
    cache.invalidate()
    assert not cache.prerender() and cache.renders == 0  # nobody scrapes: nothing rendered
    cache.body(None, None)
    views[0] = dataclasses.replace(views[0], polls=1)
    cache.invalidate()
    assert cache.prerender() and cache.renders == 2  # rendered after the poll, before the next scrape
    cache.body(None, None)
    assert cache.renders == 2
    now[0] += SCRAPED_RECENTLY_S + 1
    views[0] = dataclasses.replace(views[0], polls=2)
    cache.invalidate()
    assert not cache.prerender() and cache.renders == 2


async def test_the_exporter_renders_at_most_once_per_poll_under_many_scrapes() -> None:
    from tests.fakes.gpu_sources import FixedGpuSource, FixedProcSource

    from kvtop.demo.server import load_default_scenario

    source = CountingSource(StandinTransport(load_default_scenario(), 4).client())
    exporter = Exporter(
        [HostPoller(HOST, source, local=True, alerts={})],
        interval_s=0.1,
        gpu_source=FixedGpuSource(),
        proc_source=FixedProcSource(),
    )
    stop = asyncio.Event()
    task = asyncio.create_task(exporter.run(stop))
    scrapes = 0
    while source.samples < 6:
        await asyncio.to_thread(exporter.cache.body, None, None)
        scrapes += 1
        await asyncio.sleep(0.005)
    stop.set()
    await asyncio.wait_for(task, 5)
    assert scrapes > 3 * source.samples
    assert exporter.cache.renders <= source.samples + 1  # one per poll (and one before the first)
    assert exporter.cache.served == scrapes


def test_the_wsgi_app_serves_the_cache_and_filters_by_name_uncached() -> None:
    views: list[HostView] = []
    collector = KvtopCollector(lambda: views, lambda: None)
    cache = MetricsCache(collector)
    app = make_wsgi(make_registry(collector), cache)
    seen: list[Any] = []

    def get(query: str = "") -> bytes:
        environ = {"PATH_INFO": "/metrics", "REQUEST_METHOD": "GET", "QUERY_STRING": query}
        return b"".join(app(environ, lambda status, headers: seen.append((status, dict(headers)))))

    body = get()
    assert seen[-1][0] == "200 OK" and seen[-1][1]["Content-Length"] == str(len(body))
    assert b"kvtop_exporter_info{" in body and b"kvtop_exporter_scrapes_total 1.0" in body
    get("name[]=kvtop_exporter_info")  # prometheus-client's own (uncached) app answers filters
    assert seen[-1][0] == "200 OK"
    assert cache.served == 1


async def test_prerender_follows_the_scrape_period_not_the_poll_interval() -> None:
    state = await state_at(4)
    views = [HostView(url=HOST, local=False, log=False, state=state)]
    now = [0.0]
    cache = MetricsCache(KvtopCollector(lambda: views, lambda: None), clock=lambda: now[0])
    polls = 0
    for second in range(1, 121):  # a 1 s poll for two minutes, a scraper every 15 s
        now[0] = float(second)
        views[0] = dataclasses.replace(views[0], polls=second)
        cache.invalidate()
        cache.prerender(next_poll_in_s=1.0)
        polls += 1
        if second % 15 == 0:  # half a second after this poll
            now[0] += 0.5
            before = cache.renders
            cache.body(None, None)
            if second > 30:  # the period is known: the poll before the scrape rendered it
                assert cache.renders == before, second
    assert cache.served == 8
    assert cache.renders == cache.served < polls  # one per scrape, not one per poll


async def test_prerendering_stops_when_the_scraper_leaves() -> None:
    state = await state_at(4)
    views = [HostView(url=HOST, local=False, log=False, state=state)]
    now = [0.0]
    cache = MetricsCache(KvtopCollector(lambda: views, lambda: None), clock=lambda: now[0])
    for t in (0.0, 0.2, 0.4):  # a burst of scrapes, then none
        now[0] = t
        cache.body(None, None)
    renders = cache.renders
    for second in range(1, 60):
        now[0] = float(second)
        views[0] = dataclasses.replace(views[0], polls=second)
        cache.invalidate()
        cache.prerender(next_poll_in_s=1.0)
    assert cache.renders <= renders + 1  # the first poll after the burst, in case it goes on; then none


async def test_the_model_memo_changes_nothing_exported() -> None:
    from kvtop.export.metrics import ModelMemo, build_metrics

    state = await state_at(4)
    hv = HostView(url=HOST, local=False, log=False, state=state)

    def samples(fams: list[Any]) -> list[Any]:
        return [(f.name, list(f.samples)) for f in fams if f.name != "kvtop_exporter_collect_duration_seconds"]

    memo: ModelMemo = {}
    plain = samples(build_metrics([hv], None))
    assert samples(build_metrics([hv], None, memo=memo)) == plain
    assert len(memo) == 3
    reused = {k: v[1] for k, v in memo.items()}
    assert samples(build_metrics([hv], None, memo=memo)) == plain
    assert all(memo[k][1] is reused[k] for k in memo)  # equal views: their samples are reused
    first = state.models[0]
    changed = dataclasses.replace(
        state, models=(dataclasses.replace(first, size_bytes=(first.size_bytes or 0) + 1), state.models[1])
    )
    hv2 = HostView(url=HOST, local=False, log=False, state=changed)
    assert samples(build_metrics([hv2], None, memo=memo)) == samples(build_metrics([hv2], None))
    assert len(memo) == 2  # the unloaded model is forgotten
    assert memo[(HOST, first.name, first.digest)][1] is not reused[(HOST, first.name, first.digest)]


async def test_gzip_bodies_stay_whole_across_renders_that_reuse_the_stable_families() -> None:
    from prometheus_client import generate_latest

    state = await state_at(4)
    views = [HostView(url=HOST, local=False, log=False, state=state)]
    collector = KvtopCollector(lambda: views, lambda: None)
    cache = MetricsCache(collector)
    om = "application/openmetrics-text; version=1.0.0; charset=utf-8"
    for i in range(6):
        views[0] = dataclasses.replace(views[0], polls=i, poll_duration_s=0.01 * i)
        if i == 3:  # one model changes once: the stable run differs, then settles again
            first = state.models[0]
            views[0] = dataclasses.replace(
                views[0],
                state=dataclasses.replace(
                    state,
                    models=(dataclasses.replace(first, size_bytes=(first.size_bytes or 0) + 1), *state.models[1:]),
                ),
            )
        cache.invalidate()
        for accept in (None, om):
            body, _ = cache.body(accept, "gzip")
            text = gzip.decompress(body).decode()  # CRC and length checked
            fams = {f.name: f for f in (om_families(text) if accept else text_string_to_metric_families(text))}
            expected = _parse(generate_latest(make_registry(collector)))
            assert _samples(fams) == _samples(expected), i
    assert cache.renders == 6


# --------------------------------------------------------------------------------------------
# Startup: what only reading a log needs is not imported by the sources


def test_sources_and_the_load_grouping_import_no_line_grammar() -> None:
    import subprocess

    code = (
        "import sys, kvtop.logparse, kvtop.logparse.events, kvtop.logparse.loads, kvtop.sources.tail, "
        "kvtop.sources.ollama, kvtop.sources.slots, kvtop.sources.hosts; "
        "print(sorted(m for m in sys.modules if m.startswith('kvtop.logparse.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = set(eval(out))  # noqa: S307 - our own print of a sorted list of names
    assert not loaded & {
        "kvtop.logparse.parser",
        "kvtop.logparse.llamacpp_lines",
        "kvtop.logparse.ollama_lines",
        "kvtop.logparse.runner_lines",
    }, loaded
    from kvtop.sources import tail_base

    assert tail_base.keep_line('time=x level=WARN source=y.go:1 msg="z"') and len(tail_base.EVENT_MARKERS) > 20
