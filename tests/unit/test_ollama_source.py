"""OllamaClient and the /api parsers on every corpus API file, through httpx.MockTransport."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

import httpx
import pytest

from kvtop.model.humanize import human_bytes_decimal
from kvtop.sources.ollama import OllamaClient
from kvtop.sources.ollama_decode import ShapeError, parse_go_time, parse_ps, parse_show
from tests.conftest import FIXTURES, load_json

API = FIXTURES / "api"


# --- /api/ps JSON corpus files, against their expected facts -------------------------------------


@pytest.mark.parametrize(
    "stem", ["001-api-ps-gemma3-full-gpu", "011-api-ps-docs-example-gemma4-partial-vram-context_length"]
)
def test_parse_ps_corpus_json(stem: str) -> None:
    from kvtop.model.kv import processor_string

    rows = parse_ps(load_json(f"api/{stem}.json"))
    expected = load_json(f"api/expected/{stem}.json")["models"]
    assert len(rows) == len(expected)
    for row, exp in zip(rows, expected):
        assert row.name == exp["name"]
        assert row.size_bytes == exp["size"]
        assert row.size_vram_bytes == exp["size_vram"]
        assert row.context_length == exp["context_length"]
        assert processor_string(row.size_bytes, row.size_vram_bytes) == exp["processor"]
        assert row.expires_at is not None and row.expires_at.tzinfo is not None
        assert len(row.digest) == 64


def test_parse_ps_expires_at_with_nanoseconds_and_offset() -> None:
    row = parse_ps(load_json("api/001-api-ps-gemma3-full-gpu.json"))[0]
    assert row.expires_at == datetime(2025, 8, 8, 0, 7, 26, 817827, tzinfo=timezone(timedelta(hours=2)))
    assert row.details.family == "gemma3" and row.details.quantization_level == "Q4_K_M"


# --- `ollama ps` text captures: the PROCESSOR and SIZE strings kvtop reproduces -----------------


def _ps_text_rows(text: str) -> list[dict[str, str]]:
    """Rows of `ollama ps` tables in a pasted capture (prompts, comments and output skipped)."""
    rows: list[dict[str, str]] = []
    header: list[str] | None = None
    for raw in text.splitlines():
        line = raw.removeprefix("# ").rstrip()
        if line.startswith("NAME ") and "PROCESSOR" in line:
            header = re.split(r"\s{2,}", line.strip())
            continue
        if header is None or not line.strip():
            header = None if not line.strip() else header
            continue
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) == len(header):
            rows.append(dict(zip(header, cells)))
        else:
            header = None
    return rows


PS_TEXT = sorted(p.name for p in API.glob("*ollama-ps*.txt"))


@pytest.mark.parametrize("name", PS_TEXT)
def test_ollama_ps_text_corpus(name: str) -> None:
    from kvtop.model.kv import processor_string

    rows = _ps_text_rows((API / name).read_text(encoding="utf-8"))
    expected = load_json(f"api/expected/{name.removesuffix('.txt')}.json")["rows"]
    assert [r["NAME"] for r in rows] == [e["NAME"] for e in expected]
    for row, exp in zip(rows, expected):
        assert row["PROCESSOR"] == exp["PROCESSOR"]
        # kvtop's processor_string reproduces the printed split for a size pair with that split
        m = re.fullmatch(r"(\d+)%/(\d+)% CPU/GPU", row["PROCESSOR"])
        size = 70_000_000_000
        if m:
            cpu = int(m.group(1))
            assert cpu + int(m.group(2)) == 100
            vram = size - size * cpu // 100
            assert processor_string(size, vram) == row["PROCESSOR"]
        elif row["PROCESSOR"] == "100% GPU":
            assert processor_string(size, size) == "100% GPU"
        # SIZE is Go's decimal HumanBytes: the printed value parses back and re-formats identically
        value, unit = row["SIZE"].split()
        mult = {"KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}[unit]
        assert human_bytes_decimal(round(float(value) * mult) + 12345) == row["SIZE"]  # a real size is never round


# --- /api/show -----------------------------------------------------------------------------------


def test_parse_show_cloud_stub() -> None:
    info = parse_show(load_json("api/007-api-show-deepseek-v4-flash-cloud-compact.json"), digest="d", name="x")
    exp = load_json("api/expected/007-api-show-deepseek-v4-flash-cloud-compact.json")
    assert info.model_info["general.architecture"] == exp["architecture"]
    assert info.model_info["deepseek4.context_length"] == exp["context_length"]
    assert info.capabilities == tuple(exp["capabilities"])
    assert info.parameters == ""


def test_parse_show_drops_tokenizer_arrays() -> None:
    body = {
        "model_info": {"general.architecture": "llama", "tokenizer.ggml.tokens": ["a"] * 10, "llama.block_count": 32}
    }
    info = parse_show(body, digest="d", name="n")
    assert dict(info.model_info) == {"general.architecture": "llama", "llama.block_count": 32}


@pytest.mark.parametrize("body", [[], "x", 3, None])
def test_parse_show_rejects_non_objects(body: Any) -> None:
    with pytest.raises(ShapeError):
        parse_show(body, digest="d", name="n")


# --- tolerant /api/ps shapes ----------------------------------------------------------------------


def test_parse_ps_tolerates_every_shape() -> None:
    body = {
        "models": [
            {
                "name": "old:latest",
                "size": 10,
                "size_vram": 10,
                "digest": "ab" * 32,
                "details": {},
                "expires_at": "2024-06-01T10:00:00Z",
            },
            {
                "name": "cloud:cloud",
                "model": "cloud:cloud",
                "size": 0,
                "size_vram": 0,
                "digest": "cd" * 32,
                "details": {"format": "", "families": None},
                "expires_at": "0001-01-01T00:00:00Z",
                "remote_host": "x",
            },
            {
                "name": "new",
                "size": 5,
                "size_vram": 3,
                "digest": "sha256:" + "ef" * 32,
                "context_length": 4096,
                "expires_at": "2318-04-11T23:47:16.854775807+01:00",
                "unknown_field": {"nested": [1, 2]},
            },
            {"no_name": True},
            "garbage",
        ],
        "extra_top_level": 1,
    }
    rows = parse_ps(body)
    assert [r.name for r in rows] == ["old:latest", "cloud:cloud", "new"]
    assert rows[0].context_length is None and rows[0].details.family is None
    assert rows[1].size_bytes == 0
    assert rows[2].digest == "ef" * 32  # a sha256: prefix is dropped
    assert rows[2].expires_at is not None and rows[2].expires_at.year == 2318
    assert parse_ps({"models": None}) == ()
    assert parse_ps({}) == ()


@pytest.mark.parametrize("body", [[], "models", {"models": "x"}, {"models": 3}])
def test_parse_ps_rejects_wrong_shapes(body: Any) -> None:
    with pytest.raises(ShapeError):
        parse_ps(body)


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("2025-10-17T16:47:07.93355-07:00", True),
        ("2026-01-01T00:00:00Z", True),
        ("not a time", False),
        (None, False),
        (3, False),
    ],
)
def test_parse_go_time(text: Any, ok: bool) -> None:
    assert (parse_go_time(text) is not None) is ok


# --- OllamaClient through MockTransport -----------------------------------------------------------

PS_BODY = load_json("api/011-api-ps-docs-example-gemma4-partial-vram-context_length.json")
DIGEST = PS_BODY["models"][0]["digest"]


def _client(handler: Callable[[httpx.Request], httpx.Response], **kw: Any) -> OllamaClient:
    return OllamaClient("http://127.0.0.1:11434", transport=httpx.MockTransport(handler), clock=lambda: 1000.0, **kw)


def _server(calls: list[str], ps: Any = PS_BODY, show_status: int = 200) -> Callable[[httpx.Request], httpx.Response]:
    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(f"{request.method} {request.url.path}")
        if request.url.path == "/api/ps":
            return httpx.Response(200, json=ps)
        if request.url.path == "/api/version":
            return httpx.Response(200, json={"version": "0.12.6"})
        if request.url.path == "/api/show":
            body = json.loads(request.content)
            assert body["verbose"] is True
            if show_status != 200:
                return httpx.Response(show_status, json={"error": "boom"})
            return httpx.Response(
                200, json={"model_info": {"general.architecture": "gemma4"}, "capabilities": ["completion"]}
            )
        if request.url.path == "/api/tags":
            return httpx.Response(200, json={"models": [{"name": "gemma4", "digest": DIGEST, "size": 9608350718}]})
        return httpx.Response(404, json={"error": "not found"})

    return handler


async def test_client_sample_and_show_cache() -> None:
    calls: list[str] = []
    client = _client(_server(calls))
    snap = await client.sample()
    assert snap.reachable and snap.error is None and snap.version == "0.12.6"
    assert snap.models[0].size_vram_bytes == 5333539264
    assert snap.shows[DIGEST].model_info["general.architecture"] == "gemma4"
    assert snap.tags[DIGEST].size_bytes == 9608350718
    assert snap.latency_s is not None and snap.latency_s >= 0
    calls.clear()
    await client.sample()
    assert calls == ["GET /api/ps"]  # show, tags and version are cached
    await client.aclose()


async def test_client_refetches_show_when_digest_changes() -> None:
    calls: list[str] = []
    ps = json.loads(json.dumps(PS_BODY))
    client = _client(_server(calls, ps=ps))
    await client.sample()
    ps["models"][0]["digest"] = "0" * 64
    calls.clear()
    snap = await client.sample(wait_details=True)
    assert "POST /api/show" in calls
    assert set(snap.shows) == {"0" * 64}
    await client.aclose()


async def test_show_failure_is_kept_per_model_and_retried_later() -> None:
    calls: list[str] = []
    now = [1000.0]
    client = OllamaClient(
        "http://x:1", transport=httpx.MockTransport(_server(calls, show_status=500)), clock=lambda: now[0]
    )
    snap = await client.sample()
    assert snap.reachable
    assert snap.shows[DIGEST].error == "/api/show: HTTP 500 Internal Server Error: boom"
    calls.clear()
    await client.sample(wait_details=True)
    assert "POST /api/show" not in calls  # not hammered every poll
    now[0] += 16
    calls.clear()
    await client.sample(wait_details=True)
    assert "POST /api/show" in calls
    await client.aclose()


def _raiser(exc: Exception) -> Callable[[httpx.Request], httpx.Response]:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc

    return handler


@pytest.mark.parametrize(
    ("handler", "kind", "message"),
    [
        (
            _raiser(httpx.ConnectError("[Errno 111] Connection refused")),
            "refused",
            "connection refused (http://127.0.0.1:11434)",
        ),
        (_raiser(httpx.ReadTimeout("timed out")), "timeout", "/api/ps: no answer within 3 s"),
        (_raiser(httpx.ConnectTimeout("timed out")), "timeout", "/api/ps: connect timed out after 3 s"),
        (
            lambda r: httpx.Response(503, json={"error": "server busy"}),
            "http",
            "/api/ps: HTTP 503 Service Unavailable: server busy",
        ),
        (
            lambda r: httpx.Response(502, text="<html>bad gateway</html>"),
            "http",
            "/api/ps: HTTP 502 Bad Gateway: <html>bad gateway</html>",
        ),
        (
            lambda r: httpx.Response(200, text="<html>proxy login</html>"),
            "invalid_json",
            "/api/ps: invalid JSON ('<html>proxy login</html>')",
        ),
        (
            lambda r: httpx.Response(200, json=["not", "an", "object"]),
            "invalid_shape",
            "/api/ps: unexpected shape: expected a JSON object, got list",
        ),
    ],
)
async def test_client_failures_become_snapshots(
    handler: Callable[[httpx.Request], httpx.Response], kind: str, message: str
) -> None:
    client = _client(handler)
    snap = await client.sample()
    assert not snap.reachable
    assert snap.error_kind == kind
    assert snap.error == message
    assert snap.taken_at == 1000.0
    await client.aclose()


async def test_slow_show_does_not_delay_the_poll() -> None:
    import asyncio
    import time

    release = asyncio.Event()

    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/show":
            await release.wait()
            return httpx.Response(200, json={"model_info": {"general.architecture": "gemma4"}})
        if request.url.path == "/api/ps":
            return httpx.Response(200, json=PS_BODY)
        if request.url.path == "/api/version":
            return httpx.Response(200, json={"version": "0.12.6"})
        return httpx.Response(200, json={"models": []})

    client = OllamaClient("http://x:1", transport=httpx.MockTransport(handler), show_timeout_s=30)
    t0 = time.perf_counter()
    first = await client.sample()  # the first sample waits at most FIRST_DETAILS_WAIT_S (1 s)
    second = await client.sample()
    assert time.perf_counter() - t0 < 2.5
    assert first.reachable and second.reachable and second.version == "0.12.6"
    assert DIGEST not in second.shows  # still pending, not blocking
    release.set()
    await asyncio.sleep(0.05)
    third = await client.sample()
    assert third.shows[DIGEST].model_info["general.architecture"] == "gemma4"
    await client.aclose()


async def test_a_trickling_server_hits_the_deadline() -> None:
    import asyncio

    async def handler(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(5)
        return httpx.Response(200, json={"models": []})

    client = OllamaClient("http://x:1", transport=httpx.MockTransport(handler), timeout_s=0.2)
    snap = await client.sample()
    assert snap.error_kind == "timeout" and snap.error == "/api/ps: no answer within 0.2 s"
    await client.aclose()


async def test_garbage_tags_and_internal_errors_never_kill_the_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/tags":
            return httpx.Response(200, json={"models": 5})
        return _server([])(request)

    client = _client(handler)
    snap = await client.sample(wait_details=True)
    assert snap.reachable and snap.tags == {}

    import kvtop.sources.ollama as mod

    def boom(obj: Any) -> Any:
        raise KeyError("surprise")

    monkeypatch.setattr(mod, "parse_ps", boom)
    snap = await client.sample()
    assert not snap.reachable and snap.error_kind == "other"
    assert snap.error == "internal error while polling: KeyError: 'surprise'"
    await client.aclose()


@pytest.mark.parametrize("size", [10**400, -5, 2**63, 1.5, True, "12"])
def test_sizes_outside_int64_are_not_known(size: Any) -> None:
    row = parse_ps({"models": [{"name": "m", "size": size, "size_vram": 1}]})[0]
    assert row.size_bytes is None


def test_duplicate_rows_are_shown_once() -> None:
    entry = PS_BODY["models"][0]
    assert len(parse_ps({"models": [entry, entry]})) == 1


def test_show_reads_the_weights_blob_from_the_modelfile() -> None:
    # `ollama show --modelfile` / /api/show "modelfile": FROM names the blob the runner gets as --model
    modelfile = (
        '# Modelfile generated by "ollama show"\n# FROM llama3.2:latest\n\n'
        "FROM /usr/share/ollama/.ollama/models/blobs/sha256-" + "ab" * 32 + "\nPARAMETER num_ctx 4096\n"
    )
    info = parse_show({"modelfile": modelfile, "model_info": {}}, digest="d", name="n")
    assert info.model_blob == "sha256-" + "ab" * 32
    assert parse_show({"modelfile": "FROM llama3.2\n"}, digest="d", name="n").model_blob is None


# --- bounded bodies, redirects, hostile text, many models -----------------------------------------


class _Chunks(httpx.AsyncByteStream):
    """A response body streamed piece by piece (not built in memory), counting the pieces taken."""

    def __init__(self, piece: bytes, count: int, first: bytes = b"") -> None:
        self.piece, self.count, self.first, self.taken = piece, count, first, 0

    async def __aiter__(self):  # type: ignore[override]
        for i in range(self.count):
            self.taken += 1
            yield (self.first + self.piece) if i == 0 else self.piece


def _ps_only(response: Callable[[], httpx.Response]) -> Callable[[httpx.Request], httpx.Response]:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/ps":
            return response()
        return _server([])(request)

    return handler


async def test_an_endless_body_is_cut_at_the_limit_and_not_read_further() -> None:
    from kvtop.sources.ollama_limits import BODY_LIMIT_BYTES

    body = _Chunks(b" " * 65536, count=3200, first=b'{"models":[')  # 200 MiB, no Content-Length
    client = _client(_ps_only(lambda: httpx.Response(200, stream=body)))
    snap = await client.sample()
    assert not snap.reachable and snap.error_kind == "other"
    assert snap.error == "/api/ps: response too large (over 16 MiB)"
    assert BODY_LIMIT_BYTES["/api/ps"] == 16 * 2**20
    assert body.taken == 16 * 16  # 11 bytes past 16 MiB after 256 pieces of 64 KiB: not 3,200
    await client.aclose()


async def test_a_declared_length_over_the_limit_is_refused_before_reading() -> None:
    body = _Chunks(b" " * 65536, count=3200)
    client = _client(_ps_only(lambda: httpx.Response(200, stream=body, headers={"Content-Length": str(200 * 2**20)})))
    snap = await client.sample()
    assert snap.error == "/api/ps: response too large (200 MiB, limit 16 MiB)"
    assert body.taken == 0
    await client.aclose()


def test_the_bounded_decoder_inflates_a_bomb_only_as_far_as_asked() -> None:
    from kvtop.sources.ollama_limits import _BoundedDecoder
    from tests.hostile import gzip_bomb_bytes

    bomb = gzip_bomb_bytes(64 * 1024)  # about 64 MiB once inflated
    decoder = _BoundedDecoder("gzip")
    out = decoder.decode(bomb, 1000)
    assert out == b'{"models":[' + b" " * 989
    assert len(decoder.decode(b"", 5000)) == 5000  # the rest stays in zlib, inflated on demand
    import zlib

    assert len(zlib.decompressobj(31).decompress(bomb)) > 60 * 2**20  # the bomb is real


async def test_a_gzip_bomb_is_stopped_at_the_limit_of_decompressed_bytes() -> None:
    from tests.hostile import gzip_bomb_bytes

    bomb = gzip_bomb_bytes(4 * 2**20)  # about 4 GiB inflated
    body = _Chunks(b"", 0)
    pieces = [bomb[i : i + 65536] for i in range(0, len(bomb), 65536)]

    class Stream(httpx.AsyncByteStream):
        async def __aiter__(self):  # type: ignore[override]
            for p in pieces:
                body.taken += 1
                yield p

    client = _client(_ps_only(lambda: httpx.Response(200, stream=Stream(), headers={"Content-Encoding": "gzip"})))
    snap = await client.sample()
    assert snap.error == "/api/ps: response too large (over 16 MiB)"
    assert body.taken <= 2  # 64 KiB of this bomb inflates to ~64 MiB: the first piece is enough
    await client.aclose()


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "deflate-raw", "identity"])
async def test_compressed_answers_within_the_limit_are_read(encoding: str) -> None:
    import gzip
    import zlib

    raw = json.dumps(PS_BODY).encode()
    data = {
        "gzip": gzip.compress(raw),
        "deflate": zlib.compress(raw),
        "identity": raw,
        "deflate-raw": zlib.compress(raw)[2:-4],
    }[encoding]
    header = "deflate" if encoding == "deflate-raw" else encoding
    client = _client(
        _ps_only(lambda: httpx.Response(200, stream=_Chunks(data, 1), headers={"Content-Encoding": header}))
    )
    snap = await client.sample()
    assert snap.reachable and snap.models[0].size_vram_bytes == 5333539264
    await client.aclose()


@pytest.mark.parametrize(
    ("encoding", "message"),
    [
        ("br", "/api/ps: cannot decode the body: unsupported Content-Encoding 'br'"),
        ("gzip", "/api/ps: cannot decode the body: Error -3 while decompressing data: incorrect header check"),
    ],
)
async def test_bodies_that_cannot_be_decoded_are_reported(encoding: str, message: str) -> None:
    client = _client(
        _ps_only(
            lambda: httpx.Response(200, stream=_Chunks(b"not compressed", 1), headers={"Content-Encoding": encoding})
        )
    )
    snap = await client.sample()
    assert not snap.reachable and snap.error == message
    await client.aclose()


@pytest.mark.parametrize(
    ("status", "location", "message"),
    [
        (
            302,
            "http://proxy.example/login",
            "/api/ps: HTTP 302 Found: redirect to http://proxy.example/login, not followed",
        ),
        (
            301,
            "http://user:secret@proxy.example/x",
            "/api/ps: HTTP 301 Moved Permanently: redirect to http://proxy.example/x, not followed",
        ),
        (
            307,
            "/api/ps/\u202eevil".encode(),
            "/api/ps: HTTP 307 Temporary Redirect: redirect to /api/ps/\ufffdevil, not followed",
        ),
        (302, None, "/api/ps: HTTP 302 Found: redirect without a Location, not followed"),
    ],
)
async def test_a_redirect_is_named_not_followed(status: int, location: str | bytes | None, message: str) -> None:
    headers = [(b"Location", location if isinstance(location, bytes) else location.encode())] if location else []
    client = _client(_ps_only(lambda: httpx.Response(status, headers=headers)))
    snap = await client.sample()
    assert not snap.reachable and snap.error_kind == "http"
    assert snap.error == message
    await client.aclose()


@pytest.mark.parametrize("as_json", [True, False])
async def test_error_text_with_escapes_is_made_inert_and_cut(as_json: bool) -> None:
    text = "boom \x1b]52;c;aGFja2Vk\x07\x1b[2J done"
    data = json.dumps({"error": text}).encode() if as_json else text.encode()
    body = _Chunks(b" " * 65536, count=1000, first=data)  # followed by 64 MB of padding
    client = _client(_ps_only(lambda: httpx.Response(500, stream=body)))
    snap = await client.sample()
    assert snap.error_kind == "http"
    assert snap.error is not None and "\x1b" not in snap.error and "\x07" not in snap.error
    # 64 KiB of it is read (the JSON and then spaces, still valid JSON)
    assert snap.error == "/api/ps: HTTP 500 Internal Server Error: boom \ufffd]52;c;aGFja2Vk\ufffd\ufffd[2J done"
    assert body.taken <= 2
    await client.aclose()


def test_duplicates_among_many_models_are_dropped_in_order() -> None:
    entries = [{"name": f"m{i}", "digest": f"{i:064x}"} for i in range(20_000)]
    rows = parse_ps({"models": entries + entries[::-1] + [{"name": "m5", "digest": f"{6:064x}"}]})
    assert len(rows) == 20_001
    assert [r.name for r in rows[:3]] == ["m0", "m1", "m2"]
    assert (rows[-1].name, rows[-1].digest) == ("m5", f"{6:064x}")  # same name, other digest: kept


async def test_show_requests_run_a_bounded_number_at_a_time_in_server_order() -> None:
    import asyncio

    from kvtop.sources.ollama import SHOW_CONCURRENCY

    ps = {"models": [{"name": f"m{i}", "digest": f"{i:064x}", "size": 1} for i in range(40)]}
    in_flight, most, order = [0], [0], []

    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/show":
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])
            order.append(json.loads(request.content)["model"])
            await asyncio.sleep(0.01)
            in_flight[0] -= 1
            return httpx.Response(200, json={"model_info": {"general.architecture": "llama"}})
        if request.url.path == "/api/ps":
            return httpx.Response(200, json=ps)
        return httpx.Response(200, json={"version": "0.12.6", "models": []})

    client = OllamaClient("http://x:1", transport=httpx.MockTransport(handler))
    snap = await asyncio.wait_for(client.sample(wait_details=True), 20)
    assert SHOW_CONCURRENCY == 6 and most[0] == SHOW_CONCURRENCY
    assert order == [f"m{i}" for i in range(40)]
    assert len(snap.shows) == 40 and all(s.error is None for s in snap.shows.values())
    await client.aclose()


async def test_waiting_for_details_is_bounded_and_unanswered_models_stay_listed() -> None:
    import asyncio

    ps = {"models": [{"name": f"m{i}", "digest": f"{i:064x}", "size": 1} for i in range(30)]}
    never = asyncio.Event()

    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/show":
            name = json.loads(request.content)["model"]
            if name != "m0":
                await never.wait()  # only the first model's details ever come
            return httpx.Response(200, json={"model_info": {"general.architecture": "llama"}})
        if request.url.path == "/api/ps":
            return httpx.Response(200, json=ps)
        return httpx.Response(200, json={"version": "0.12.6", "models": []})

    client = OllamaClient("http://x:1", transport=httpx.MockTransport(handler), timeout_s=0.2, show_timeout_s=0.3)
    assert client.details_budget_s == 0.3
    snap = await asyncio.wait_for(client.sample(wait_details=True), 5)
    assert snap.reachable and len(snap.models) == 30
    assert set(snap.shows) == {f"{0:064x}"} | {f"{i:064x}" for i in range(1, 30) if f"{i:064x}" in snap.shows}
    assert snap.shows[f"{0:064x}"].error is None
    waiting = [m for m in snap.models if m.digest not in snap.shows]
    assert len(waiting) >= 30 - 1 - 6  # at most one round of timed-out shows came back in the budget
    await client.aclose()


async def test_queued_shows_of_unloaded_models_are_dropped() -> None:
    import asyncio

    ps: dict[str, Any] = {"models": [{"name": f"m{i}", "digest": f"{i:064x}", "size": 1} for i in range(20)]}
    asked: list[str] = []
    gate = asyncio.Event()

    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/show":
            asked.append(json.loads(request.content)["model"])
            await gate.wait()
            return httpx.Response(200, json={"model_info": {}})
        if request.url.path == "/api/ps":
            return httpx.Response(200, json=ps)
        return httpx.Response(200, json={"version": "0.12.6", "models": []})

    client = OllamaClient("http://x:1", transport=httpx.MockTransport(handler), show_timeout_s=30)
    await client.sample()  # 6 shows in flight, 14 queued
    ps["models"] = ps["models"][:1]  # all but m0 unloaded
    await client.sample()
    gate.set()
    snap = await asyncio.wait_for(client.sample(wait_details=True), 5)
    assert sorted(asked) == sorted(f"m{i}" for i in range(6))  # the queued 14 never went out
    assert set(snap.shows) == {f"{0:064x}"}
    await client.aclose()


async def test_show_cache_keeps_the_loaded_models_and_a_bounded_number_of_others() -> None:
    """A server that loads ever new models (a new digest each poll) does not grow the client's cache."""
    from kvtop.sources.ollama import SHOW_CACHE_SPARE

    calls: list[str] = []
    ps = json.loads(json.dumps(PS_BODY))
    client = _client(_server(calls, ps=ps))
    for i in range(SHOW_CACHE_SPARE + 30):
        ps["models"][0]["digest"] = f"{i:064x}"
        snap = await client.sample(wait_details=True)
        assert set(snap.shows) == {f"{i:064x}"}
    assert len(client._shows) == SHOW_CACHE_SPARE + 1  # the loaded one and the newest spares
    assert f"{SHOW_CACHE_SPARE + 29:064x}" in client._shows and f"{0:064x}" not in client._shows
    calls.clear()
    ps["models"][0]["digest"] = f"{SHOW_CACHE_SPARE + 28:064x}"  # a recent one comes back: not asked again
    await client.sample(wait_details=True)
    assert "POST /api/show" not in calls
    await client.aclose()


def test_json_values_are_bounded_before_decoding() -> None:
    """A small body of many tiny values (``{},{},…``) is refused before it becomes millions of
    Python objects; a real verbose /api/show's arrays stay under the bound."""
    from kvtop.sources.ollama_limits import JSON_VALUE_LIMIT, json_values_upper_bound

    bomb = b'{"models":[' + b"{}," * 1_000_000 + b"{}]}"
    assert json_values_upper_bound(bomb) > JSON_VALUE_LIMIT["/api/ps"]
    real = json.dumps(
        {
            "model_info": {
                "tokenizer.ggml.tokens": ["a"] * 262_144,
                "tokenizer.ggml.scores": [0.0] * 262_144,
                "tokenizer.ggml.token_type": [1] * 262_144,
            }
        }
    ).encode()
    assert json_values_upper_bound(real) < JSON_VALUE_LIMIT["/api/show"]


async def test_an_object_bomb_is_refused_with_a_message_and_bounded_memory() -> None:
    import tracemalloc

    from kvtop.sources.ollama import OllamaClient

    bomb = b'{"models":[' + b"{}," * 2_000_000 + b"{}]}"  # 6 MB: under the byte cap, 2M values

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=bomb if request.url.path == "/api/ps" else b"{}")

    client = OllamaClient("http://127.0.0.1:11434", transport=httpx.MockTransport(handler))
    tracemalloc.start()
    try:
        snap = await client.sample()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        await client.aclose()
    assert not snap.reachable and snap.error is not None and "too many JSON values" in snap.error
    assert peak < 64 * 1024 * 1024  # the 6 MB body and no decoded dicts (decoding would take ~150 MB)


def test_model_info_keeps_scalars_and_flat_arrays_only() -> None:
    from kvtop.sources.ollama_decode import MAX_MODEL_INFO_ARRAY, parse_show

    show = parse_show(
        {
            "model_info": {
                "general.architecture": "llama",
                "llama.block_count": 4,
                "llama.attention.sliding_window_pattern": [True, False] * 2,
                "x.nested": [{}, {}],
                "x.huge": [0] * (MAX_MODEL_INFO_ARRAY + 1),
                "x.obj": {"a": 1},
            }
        },
        digest="d",
        name="m",
    )
    assert set(show.model_info) == {
        "general.architecture",
        "llama.block_count",
        "llama.attention.sliding_window_pattern",
    }
