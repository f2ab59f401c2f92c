"""Traffic aggregates from gin access lines: real corpus lines and generated bursts, p50/p95 against
an oracle (the nearest-rank method over a sorted list, written out independently here)."""

from __future__ import annotations

import math
import random
from datetime import datetime, timedelta
from pathlib import Path

from kvtop.logparse.events import GinRequest, ServerConfig
from kvtop.logparse.parser import parse_lines
from kvtop.model import traffic as tr
from kvtop.model.logstate import LogState, fold_events

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def _oracle(values: list[float], q: float) -> float:
    """Nearest rank: the smallest value with at least q% of the values at or below it."""
    s = sorted(values)
    for v in s:
        if sum(1 for x in s if x <= v) * 100 >= q * len(s):
            return v
    raise AssertionError("unreachable")


def _gin(t: datetime, status: int, latency_s: float, client: str, path: str, n: int = 1) -> GinRequest:
    raw = f'[GIN] {t:%Y/%m/%d - %H:%M:%S} | {status} | {latency_s}s | {client} | POST "{path}"'
    return GinRequest(n, t, raw, status, latency_s, "POST", path, client)


def test_corpus_lines() -> None:
    lines = (FIXTURES.parent / "gin" / "access-corpus.log").read_text().splitlines()
    events = parse_lines(lines, default_year=2025)
    gins = [e for e in events if isinstance(e, GinRequest)]
    assert len(gins) == 8
    t = tr.add_events(tr.Traffic(), events)
    assert t.requests == 8
    assert (t.client_errors, t.server_errors, t.busy) == (0, 1, 1)
    assert t.last_busy == datetime(2026, 3, 31, 19, 53, 57)
    assert t.newest == datetime(2026, 3, 31, 19, 53, 57)
    chat = t.endpoint("/api/chat")
    assert chat is not None and chat.requests == 4 and chat.server_errors == 1
    # 1h24m39s, 2m39s, 5m8s, 5.8114756s: sorted 5.81, 159, 308, 5079
    assert chat.latencies_s == (5079.0, 159.0, 308.0, 5.8114756)
    assert chat.p50_s == 159.0
    assert chat.p95_s == 5079.0
    assert abs(t.endpoint("/api/embeddings").p50_s - 0.444455595) < 1e-12  # type: ignore[union-attr,operator]
    assert t.endpoint("/v1/chat/completions").requests == 1  # type: ignore[union-attr]
    assert t.endpoint("/").requests == 1  # type: ignore[union-attr]
    assert t.busiest_clients(2) == (("192.0.2.105", 3), ("127.0.0.1", 3))
    assert t.requests_per_min() == 1  # only the 503 is in the minute up to the newest line
    assert t.requests_per_min(datetime(2026, 3, 31, 19, 54, 56)) == 1
    assert t.requests_per_min(datetime(2026, 3, 31, 19, 54, 57)) == 0


def test_corpus_file_with_server_busy_503() -> None:
    lines = (FIXTURES / "053-newengine-windows-low-ram-gpu-memory-503-busy-2026.log").read_text().splitlines()
    log = fold_events(
        LogState(), parse_lines(lines, default_year=2026), source="file", status=None, ok=True, lines=len(lines)
    )
    assert log.traffic.requests == 1 and log.traffic.busy == 1
    assert log.traffic.endpoint("/api/chat").latencies_s == (5.8114756,)  # type: ignore[union-attr]


def test_server_config_max_queue() -> None:
    lines = (FIXTURES / "018-server-config-docker-compose-prefix-0.1.41.log").read_text().splitlines()
    events = parse_lines(lines, default_year=2024)
    assert any(isinstance(e, ServerConfig) for e in events)
    assert tr.add_events(tr.Traffic(), events).max_queue == 25
    unset = ServerConfig(1, None, "raw", {"OLLAMA_MAX_QUEUE": ""})
    assert tr.add_events(tr.Traffic(), [unset]).max_queue == 512


def test_generated_burst_matches_oracle_across_batches() -> None:
    rng = random.Random(7)
    start = datetime(2026, 5, 1, 12, 0, 0)
    paths = ["/api/generate", "/api/chat", "/v1/chat/completions", "/api/embed"]
    events = []
    for i in range(3000):
        t = start + timedelta(seconds=i // 10)  # 10 requests a second for 300 s
        status = rng.choice([200] * 17 + [400, 404, 503])
        events.append(
            _gin(
                t, status, round(rng.lognormvariate(0, 1.5), 6), f"10.0.0.{rng.randrange(40)}", rng.choice(paths), i + 1
            )
        )
    t = tr.Traffic()
    for k in range(0, len(events), 137):  # batches of any size give the same result
        t = tr.add_events(t, events[k : k + 137])
    assert t.requests == 3000
    assert t.client_errors == sum(1 for e in events if 400 <= e.status < 500)
    assert t.server_errors == t.busy == sum(1 for e in events if e.status == 503)
    assert t.requests_per_min() == 600
    assert t.requests_per_min(start + timedelta(seconds=330)) == 290  # (270, 330]: seconds 271..299 of 10/s
    assert len(t.seconds) <= tr.SECONDS_KEPT
    for path in paths:
        mine = [e.latency_s for e in events if e.path == path]
        row = t.endpoint(path)
        assert row is not None and row.requests == len(mine)
        window = mine[-tr.LATENCY_WINDOW :]
        assert row.latencies_s == tuple(window)
        assert row.p50_s == _oracle(window, 50)
        assert row.p95_s == _oracle(window, 95)
    counts: dict[str, int] = {}
    for e in events:
        counts[e.client] = counts.get(e.client, 0) + 1
    top = sorted(counts.items(), key=lambda kv: -kv[1])[0]
    assert t.busiest_clients(1)[0][1] == top[1]


def test_bounded_endpoints_and_clients() -> None:
    start = datetime(2026, 5, 1, 12, 0, 0)
    events = [_gin(start, 404, 0.001, f"10.1.{i // 256}.{i % 256}", f"/probe/{i}", i) for i in range(1000)]
    events.append(_gin(start, 200, 0.5, "10.9.9.9", "/api/chat?x=1", 1001))
    t = tr.add_events(tr.Traffic(), events)
    assert len(t.endpoints) == tr.MAX_ENDPOINTS + 1  # 23 probes + (other) + the known /api/chat
    other = t.endpoint(tr.OTHER)
    assert other is not None and other.requests == 1000 - (tr.MAX_ENDPOINTS - 1)
    assert t.endpoint("/api/chat").requests == 1  # type: ignore[union-attr]  # known route, query dropped
    assert len(t.clients) == tr.MAX_CLIENTS
    assert t.other_clients == 1001 - tr.MAX_CLIENTS
    assert sum(n for _, n in t.clients) + t.other_clients == 1001


def test_percentile_nearest_rank() -> None:
    assert tr.percentile([], 50) is None
    assert tr.percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0
    values = [float(v) for v in range(1, 21)]
    assert tr.percentile(values, 95) == 19.0
    assert tr.percentile(values, 100) == 20.0
    for n in (1, 2, 7, 100, 513):
        vals = [random.Random(n).random() for _ in range(n)]
        assert tr.percentile(vals, 95) == sorted(vals)[math.ceil(0.95 * n) - 1] == _oracle(vals, 95)


def test_log_trim_keeps_traffic() -> None:
    start = datetime(2026, 5, 1, 12, 0, 0)
    log = LogState()
    for b in range(30):
        batch = [
            _gin(start + timedelta(seconds=b), 200, 0.01, "127.0.0.1", "/api/generate", b * 1000 + i)
            for i in range(1000)
        ]
        log = fold_events(log, batch, source="f", status=None, ok=True, lines=1000)
    assert len(log.load_events) < 30_000  # the per-request events were trimmed
    assert log.traffic.requests == 30_000


# A latency no Go program printed (a Go duration is an int64 of nanoseconds, at most about 292 years):
# the server view once showed ``1666666666666666638704h38m``.
_HUGE = '[GIN] 2026/03/31 - 19:53:57 | 200 | 1666666666666666638704h38m |       127.0.0.1 | POST     "/api/chat"'
_INF = "[GIN] 2026/03/31 - 19:53:58 | 200 | " + "9" * 400 + 's |       127.0.0.1 | POST     "/api/chat"'
_MAX = '[GIN] 2026/03/31 - 19:53:59 | 200 | 2562047h47m16.854775807s |       127.0.0.1 | POST     "/api/chat"'
_OVER = '[GIN] 2026/03/31 - 19:54:00 | 200 | 2562047h47m17s |       127.0.0.1 | POST     "/api/chat"'
_REAL = '[GIN] 2026/03/31 - 19:54:01 | 200 |    2.5s |       127.0.0.1 | POST     "/api/chat"'


def test_absurd_gin_latency_is_not_known_and_not_counted() -> None:
    events = parse_lines([_HUGE, _INF, _MAX, _OVER, _REAL], default_year=2026)
    gins = [e for e in events if isinstance(e, GinRequest)]
    assert [g.latency_s for g in gins] == [None, None, (2**63 - 1) / 1e9, None, 2.5]
    t = tr.add_events(tr.Traffic(), events)
    chat = t.endpoint("/api/chat")
    assert chat is not None and chat.requests == 5  # every request is counted ...
    assert chat.latencies_s == ((2**63 - 1) / 1e9, 2.5)  # ... only the latencies Go could print are kept


def test_absurd_latency_from_elsewhere_is_not_counted() -> None:
    """A GinRequest built with a latency out of range (a recording, another reader) is not counted either."""
    t0 = datetime(2026, 3, 31, 19, 53, 57)
    events = [
        _gin(t0, 200, 1e22, "127.0.0.1", "/api/chat"),
        _gin(t0, 200, float("inf"), "127.0.0.1", "/api/chat"),
        _gin(t0, 200, float("nan"), "127.0.0.1", "/api/chat"),
        _gin(t0, 200, -3.0, "127.0.0.1", "/api/chat"),
        _gin(t0, 200, 0.25, "127.0.0.1", "/api/chat"),
    ]
    t = tr.add_events(tr.Traffic(), events)
    chat = t.endpoint("/api/chat")
    assert chat is not None and chat.requests == 5 and chat.latencies_s == (0.25,)
    assert tr.traffic_json(t)["endpoints"][0]["latency_samples"] == 1  # type: ignore[index]


def test_server_view_never_renders_a_giant_latency() -> None:
    from kvtop.ui.screens.server_view import traffic_lines

    t = tr.add_events(tr.Traffic(), parse_lines([_HUGE, _INF, _OVER], default_year=2026))
    body = "\n".join(line.plain for line in traffic_lines(t, "file:server.log", None))
    row = next(line for line in body.splitlines() if "/api/chat" in line)
    assert row.split()[-2:] == ["?", "?"]  # p50 and p95 not known
    assert "1666666666666666638704" not in body
    # the longest Go duration reads in days, in the 9 columns of p50/p95
    t = tr.add_events(tr.Traffic(), parse_lines([_MAX], default_year=2026))
    row = next(line.plain for line in traffic_lines(t, "file:server.log", None) if "/api/chat" in line.plain)
    assert row.split()[-2:] == ["106751d", "106751d"]
    # ordinary ones keep their forms
    for latency, said in (("3h5m0s", "3h05m"), ("52h0m0s", "2d04h"), ("2m39s", "2m39s"), ("444.4ms", "444 ms")):
        line = _REAL.replace("   2.5s", latency)
        t = tr.add_events(tr.Traffic(), parse_lines([line], default_year=2026))
        row = next(x.plain for x in traffic_lines(t, "file:server.log", None) if "/api/chat" in x.plain)
        assert row.endswith(f" {said}"), (latency, row)


def test_status_polls_are_counted_apart_from_the_work() -> None:
    """A monitor's polling (kvtop's own GET /api/ps every interval among it) is not traffic: the
    corpus's HEAD / and POST /api/show (an `ollama run` reading the server) count as status polls,
    per minute and per client, beside the requests that did model work."""
    lines = (FIXTURES.parent / "gin" / "access-corpus.log").read_text().splitlines()
    t = tr.add_events(tr.Traffic(), parse_lines(lines, default_year=2025))
    assert dict(t.client_polls) == {"127.0.0.1": 2}  # HEAD "/" and POST "/api/show" of 2025-10-30
    assert dict(t.clients)["127.0.0.1"] == 3  # the 503 on /api/chat is work
    polls = tr.traffic_json(t)["busiest_clients"]
    assert {"address": "127.0.0.1", "requests": 3, "status_polls": 2} in polls  # type: ignore[operator]
    # a minute of kvtop polling /api/ps each second beside 4 chats: 4 requests of work, 60 polls
    start = datetime(2026, 12, 2, 6, 0, 0)
    burst = [
        GinRequest(i + 1, start + timedelta(seconds=i), "", 200, 0.001, "GET", "/api/ps", "127.0.0.1")
        for i in range(60)
    ]
    burst += [_gin(start + timedelta(seconds=10 * i), 200, 2.5, "10.0.0.7", "/api/chat", 100 + i) for i in range(4)]
    busy = tr.add_events(tr.Traffic(), burst)
    now = start + timedelta(seconds=59)
    assert busy.requests_per_min(now) == 64 and busy.polls_per_min(now) == 60
    assert tr.traffic_json(busy, now)["status_polls_last_min"] == 60
