"""A hostile stand-in Ollama server on 127.0.0.1, for tests and benchmarks.

It is a real HTTP/1.1 server (``http.server.ThreadingHTTPServer`` in a daemon thread) that
answers every path with an ``Attack``: an object that writes one whole HTTP response. By default
it behaves like a small healthy Ollama (one model loaded); each path can be switched, at any
time, to an attack::

    from tests.hostile import HugeBody, GzipBomb, hostile_server

    with hostile_server({"/api/ps": HugeBody(200 * MiB)}) as server:
        run_something_against(server.url)          # http://127.0.0.1:<port>
        server.set("/api/ps", GzipBomb())          # the next request gets the bomb
        server.set("/api/ps", JsonBody(ps_body())) # ... and then good data again
        assert server.hits["/api/ps"] >= 2

Attacks (each documents what it sends):

- ``JsonBody``: a normal JSON answer (optionally after a delay);
- ``HugeBody``: a body of N bytes, chunked (no length, so it must be counted) or with its length,
  generated while it is sent, never held in memory;
- ``GzipBomb``: ``Content-Encoding: gzip``, a few MB on the wire that inflate to GBs;
- ``Trickle``: a valid body sent one byte at a time, slowly;
- ``Redirect``: a 3xx with a ``Location``;
- ``ErrorBody``: an HTTP error whose text carries terminal escapes (OSC 52 clipboard write,
  CSI 2J clear screen);
- ``ManyModels``: ``/api/ps`` with N models; pair it with ``JsonBody(show_body(), delay_s=...)``
  on ``/api/show`` for a slow show;
- ``NestedJson``: a deeply nested JSON value;
- ``Custom``: any function of the request handler.

``run_measured`` runs a command (e.g. ``kvtop --once``) and samples its peak RSS with psutil.

Standard library plus psutil (test extra). Nothing here is imported by kvtop itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

KiB = 1024
MiB = 1024 * KiB

ESCAPES = "\x1b]52;c;aGFja2Vk\x07\x1b[2J\x1b[31m"
"""Terminal escapes a hostile server puts in its text: an OSC 52 clipboard write ("hacked"),
CSI 2J (clear the screen) and an SGR colour."""

DIGEST = "a2af6cc3eb7fa8be8504abaf9b04e88f17a119ec3f04a3addf55f92841195f5a"
"""Manifest digest of the default model (64 hex)."""


# --- bodies of a healthy server ------------------------------------------------------------------


def ps_entry(
    name: str = "llama3.2:latest", digest: str = DIGEST, *, size_bytes: int = 3_000_000_000, context_length: int = 4096
) -> dict[str, Any]:
    """One ``/api/ps`` model entry, fully on the GPU, with Ollama's real field names."""
    return {
        "name": name,
        "model": name,
        "size": size_bytes,
        "digest": digest,
        "details": {
            "parent_model": "",
            "format": "gguf",
            "family": "llama",
            "families": ["llama"],
            "parameter_size": "3.2B",
            "quantization_level": "Q4_K_M",
        },
        "expires_at": "2099-01-01T00:00:00Z",
        "size_vram": size_bytes,
        "context_length": context_length,
    }


def ps_body(n: int = 1) -> dict[str, Any]:
    """A ``/api/ps`` body with ``n`` distinct models (names ``m0000:latest``…, digests distinct)."""
    if n == 1:
        return {"models": [ps_entry()]}
    return {"models": [ps_entry(f"m{i:04d}:latest", f"{i:064x}") for i in range(n)]}


def show_body(architecture: str = "llama") -> dict[str, Any]:
    """A verbose ``/api/show`` body with the GGUF keys kvtop's KV math needs (a 3B llama)."""
    a = architecture
    return {
        "modelfile": "FROM /root/.ollama/models/blobs/sha256-" + "ab" * 32 + "\n",
        "parameters": "",
        "template": "{{ .Prompt }}",
        "capabilities": ["completion"],
        "details": {"format": "gguf", "family": a},
        "model_info": {
            "general.architecture": a,
            f"{a}.block_count": 28,
            f"{a}.context_length": 131072,
            f"{a}.embedding_length": 3072,
            f"{a}.attention.head_count": 24,
            f"{a}.attention.head_count_kv": 8,
            f"{a}.attention.key_length": 128,
            f"{a}.attention.value_length": 128,
        },
    }


def tags_body(n: int = 1) -> dict[str, Any]:
    """A ``/api/tags`` body matching ``ps_body(n)``."""
    return {
        "models": [
            {"name": m["name"], "model": m["name"], "digest": m["digest"], "size": 2_000_000_000}
            for m in ps_body(n)["models"]
        ]
    }


# --- attacks -------------------------------------------------------------------------------------


class Attack:
    """Writes one whole HTTP response for a request (override ``serve``).

    ``serve`` runs in the server's handler thread; it may block (use ``stop.wait(s)`` instead of
    ``time.sleep`` so the server shuts down promptly). A client that hangs up raises
    ``BrokenPipeError``/``ConnectionResetError``, which the server swallows.
    """

    def serve(self, h: BaseHTTPRequestHandler, stop: threading.Event) -> None:
        raise NotImplementedError


def _head(h: BaseHTTPRequestHandler, status: int, headers: Mapping[str, str]) -> None:
    """Status line and headers; values are sent as UTF-8 (a hostile server is not bound to
    latin-1: escapes and bidi overrides in a ``Location`` are part of the attack)."""
    h.send_response(status)
    for k, v in headers.items():
        h._headers_buffer.append(f"{k}: {v}\r\n".encode("utf-8", "surrogateescape"))  # type: ignore[attr-defined]
    h.end_headers()


@dataclass
class JsonBody(Attack):
    """A JSON answer ``obj`` with ``status``, after ``delay_s`` seconds (a slow ``/api/show``)."""

    obj: Any
    status: int = 200
    delay_s: float = 0.0

    def serve(self, h: BaseHTTPRequestHandler, stop: threading.Event) -> None:
        if self.delay_s and stop.wait(self.delay_s):
            return
        data = json.dumps(self.obj).encode()
        _head(h, self.status, {"Content-Type": "application/json; charset=utf-8", "Content-Length": str(len(data))})
        h.wfile.write(data)


@dataclass
class HugeBody(Attack):
    """``{"models":[`` followed by spaces, ``total_bytes`` in all, written in 64 KiB pieces.

    With ``declare_length=False`` (the default) it is sent chunked, so only counting the bytes
    stops a client; with True it carries ``Content-Length`` (a client may refuse it up front).
    The body is never complete JSON. ``sent_bytes`` says how much the client took.
    """

    total_bytes: int = 200 * MiB
    declare_length: bool = False
    sent_bytes: int = 0

    def serve(self, h: BaseHTTPRequestHandler, stop: threading.Event) -> None:
        headers = {"Content-Type": "application/json"}
        if self.declare_length:
            headers["Content-Length"] = str(self.total_bytes)
        else:
            headers["Transfer-Encoding"] = "chunked"
        _head(h, 200, headers)
        self.sent_bytes = 0
        piece = b" " * (64 * KiB)
        first = b'{"models":['
        left = self.total_bytes
        while left > 0 and not stop.is_set():
            data = (first + piece)[: min(len(piece), left)] if left == self.total_bytes else piece[:left]
            h.wfile.write(data if self.declare_length else b"%x\r\n%s\r\n" % (len(data), data))
            left -= len(data)
            self.sent_bytes += len(data)
        if not self.declare_length:
            h.wfile.write(b"0\r\n\r\n")


@lru_cache(maxsize=4)
def gzip_bomb_bytes(compressed_bytes: int = 4 * MiB) -> bytes:
    """A gzip member of about ``compressed_bytes`` that inflates about 1,000-fold:
    ``{"models":[`` and then MiBs of spaces (valid JSON so far, so a client that does not count
    decompressed bytes keeps inflating). Built in ~10 ms from one repeated full-flush block;
    the gzip trailer is left out (a decoder emits its output long before it would check one)."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    head = c.compress(b'{"models":[' + b" " * (MiB - 11)) + c.flush(zlib.Z_FULL_FLUSH)
    block = c.compress(b" " * MiB) + c.flush(zlib.Z_FULL_FLUSH)  # identical for every further MiB
    return head + block * max(1, (compressed_bytes - len(head)) // len(block))


@dataclass
class GzipBomb(Attack):
    """``Content-Encoding: gzip`` with ``gzip_bomb_bytes(compressed_bytes)`` (4 MiB → ~4 GiB)."""

    compressed_bytes: int = 4 * MiB

    def serve(self, h: BaseHTTPRequestHandler, stop: threading.Event) -> None:
        data = gzip_bomb_bytes(self.compressed_bytes)
        _head(
            h, 200, {"Content-Type": "application/json", "Content-Encoding": "gzip", "Content-Length": str(len(data))}
        )
        for i in range(0, len(data), 64 * KiB):
            if stop.is_set():
                return
            h.wfile.write(data[i : i + 64 * KiB])


@dataclass
class Trickle(Attack):
    """A valid JSON body (``Content-Length`` declared) sent ``step_bytes`` every ``interval_s``."""

    obj: Any = field(default_factory=ps_body)
    interval_s: float = 0.2
    step_bytes: int = 1

    def serve(self, h: BaseHTTPRequestHandler, stop: threading.Event) -> None:
        data = json.dumps(self.obj).encode()
        _head(h, 200, {"Content-Type": "application/json", "Content-Length": str(len(data))})
        for i in range(0, len(data), self.step_bytes):
            h.wfile.write(data[i : i + self.step_bytes])
            h.wfile.flush()
            if stop.wait(self.interval_s):
                return


@dataclass
class Redirect(Attack):
    """A ``status`` redirect to ``location`` with an empty body (what a login proxy sends)."""

    location: str = "http://evil.example/login"
    status: int = 302

    def serve(self, h: BaseHTTPRequestHandler, stop: threading.Event) -> None:
        _head(h, self.status, {"Location": self.location, "Content-Length": "0"})


@dataclass
class ErrorBody(Attack):
    """An HTTP ``status`` whose body carries ``text`` (default: ``ESCAPES``), as Ollama's
    ``{"error": text}`` JSON or, with ``as_json=False``, as plain text."""

    status: int = 500
    text: str = f"model failed {ESCAPES}to load"
    as_json: bool = True

    def serve(self, h: BaseHTTPRequestHandler, stop: threading.Event) -> None:
        data = json.dumps({"error": self.text}).encode() if self.as_json else self.text.encode()
        _head(
            h,
            self.status,
            {"Content-Type": "application/json" if self.as_json else "text/plain", "Content-Length": str(len(data))},
        )
        h.wfile.write(data)


def ManyModels(n: int = 1000) -> JsonBody:  # noqa: N802 - reads as an attack class
    """``/api/ps`` with ``n`` distinct models (``ps_body(n)``)."""
    return JsonBody(ps_body(n))


@dataclass
class NestedJson(Attack):
    """``{"models": [[[[…]]]]}`` nested ``depth`` deep (deeper than Python's recursion limit)."""

    depth: int = 100_000

    def serve(self, h: BaseHTTPRequestHandler, stop: threading.Event) -> None:
        data = b'{"models":' + b"[" * self.depth + b"]" * self.depth + b"}"
        _head(h, 200, {"Content-Type": "application/json", "Content-Length": str(len(data))})
        h.wfile.write(data)


@dataclass
class Custom(Attack):
    """Any ``fn(handler, stop)`` (it must write a whole response)."""

    fn: Callable[[BaseHTTPRequestHandler, threading.Event], None]

    def serve(self, h: BaseHTTPRequestHandler, stop: threading.Event) -> None:
        self.fn(h, stop)


def healthy_routes(n_models: int = 1) -> dict[str, Attack]:
    """The default answers: a healthy Ollama 0.12.6 with ``n_models`` loaded."""
    return {
        "/api/version": JsonBody({"version": "0.12.6"}),
        "/api/ps": JsonBody(ps_body(n_models)),
        "/api/show": JsonBody(show_body()),
        "/api/tags": JsonBody(tags_body(n_models)),
        "/": Custom(lambda h, stop: _plain(h, 200, "Ollama is running")),
    }


def _plain(h: BaseHTTPRequestHandler, status: int, text: str) -> None:
    data = text.encode()
    _head(h, status, {"Content-Type": "text/plain", "Content-Length": str(len(data))})
    h.wfile.write(data)


# --- the server ----------------------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # 1,000 concurrent /api/show must not be refused by the backlog
    owner: HostileServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return  # a client hanging up on an attack is the expected end, not a test failure
        super().handle_error(request, client_address)


class _OnFirstWrite:
    """A handler's ``wfile`` that calls ``first()`` once, before the first byte is written."""

    def __init__(self, raw: Any, first: Callable[[], None]) -> None:
        self._raw = raw
        self._first: Callable[[], None] | None = first

    def write(self, data: bytes) -> int:
        if self._first is not None:
            first, self._first = self._first, None
            first()
        return int(self._raw.write(data))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # as Go's net/http: no 40 ms delayed-ACK stall between head and body
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        return

    def _dispatch(self) -> None:
        owner = self.server.owner
        path = self.path.split("?", 1)[0]
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.request_body = body  # for an attack that answers by the request (Custom)
        with owner.lock:
            if owner.first_request_at is None:
                owner.first_request_at = time.perf_counter()
            owner.hits[path] += 1
            owner.requests.append((self.command, path, body))
            attack = owner.routes.get(path)
            owner.in_flight[path] += 1
            owner.most_in_flight[path] = max(owner.most_in_flight[path], owner.in_flight[path])
        counted = [True]

        def answering() -> None:  # the answer starts: the client no longer waits for this request
            with owner.lock:
                if counted[0]:
                    owner.in_flight[path] -= 1
                    counted[0] = False

        raw = self.wfile
        # counted until the first byte of the answer, not until this thread returns: a client without
        # keep-alive connections sends its next request on a new connection while this one still runs
        self.wfile = _OnFirstWrite(raw, answering)  # type: ignore[assignment]
        try:
            if attack is None:
                JsonBody({"error": "not found"}, status=404).serve(self, owner.stop)
            else:
                attack.serve(self, owner.stop)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            self.close_connection = True
        finally:
            self.wfile = raw
            answering()

    do_GET = _dispatch
    do_POST = _dispatch


@dataclass
class HostileServer:
    """A running hostile server (from ``hostile_server``).

    Attributes:
        url: Base URL, ``http://127.0.0.1:<port>``.
        routes: Path → ``Attack`` now served (change with ``set``).
        hits: Requests received per path.
        in_flight: Requests being answered now, per path.
        most_in_flight: The most requests answered at once so far, per path (a client's concurrency).
        requests: ``(method, path, body bytes)`` of every request, in order.
        stop: Set when the server shuts down (attacks that wait watch it).
        first_request_at: ``time.perf_counter()`` when the first request came (None before).
    """

    url: str = ""
    routes: dict[str, Attack] = field(default_factory=dict)
    hits: Counter[str] = field(default_factory=Counter)
    in_flight: Counter[str] = field(default_factory=Counter)
    most_in_flight: Counter[str] = field(default_factory=Counter)
    requests: list[tuple[str, str, bytes]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    first_request_at: float | None = None

    def set(self, path: str, attack: Attack) -> None:
        """Serve ``attack`` on ``path`` from the next request on."""
        with self.lock:
            self.routes[path] = attack


@contextmanager
def hostile_server(routes: Mapping[str, Attack] | None = None, *, n_models: int = 1) -> Iterator[HostileServer]:
    """Start a hostile server on 127.0.0.1 (a free port) and stop it on exit.

    Args:
        routes: Attacks by path; they replace the healthy defaults (``healthy_routes(n_models)``)
            on those paths only.
        n_models: Models the healthy ``/api/ps`` and ``/api/tags`` list.

    Yields:
        The running ``HostileServer``; its ``url`` is ready to be polled.
    """
    owner = HostileServer(routes={**healthy_routes(n_models), **(routes or {})})
    server = _Server(("127.0.0.1", 0), _Handler)
    server.owner = owner
    owner.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield owner
    finally:
        owner.stop.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


# --- measuring a process -------------------------------------------------------------------------


@dataclass
class Measured:
    """What ``run_measured`` saw: exit code (None when killed at the limit), output, wall time in
    seconds, the peak resident set size in bytes (sampled every ``sample_s``) and
    ``time.perf_counter()`` when the process was seen ended."""

    rc: int | None
    stdout: str
    stderr: str
    wall_s: float
    peak_rss_bytes: int
    ended_at: float = 0.0


def kvtop_command(*args: str) -> list[str]:
    """``python -m kvtop <args>`` with this interpreter."""
    return [sys.executable, "-m", "kvtop", *args]


def run_measured(
    cmd: Sequence[str], *, limit_s: float, sample_s: float = 0.02, env: Mapping[str, str] | None = None
) -> Measured:
    """Run ``cmd`` to its end (killed after ``limit_s``), sampling its RSS (and its children's) with psutil.

    The output goes to temporary files, so a chatty process never blocks on a full pipe.
    """
    import tempfile

    import psutil

    full_env = {**os.environ, "NO_COLOR": "1", **(env or {})}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(list(cmd), stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=full_env)
        peak = 0
        ps = psutil.Process(proc.pid)
        rc: int | None = None
        while True:
            try:
                rss = ps.memory_info().rss
                for child in ps.children(recursive=True):
                    rss += child.memory_info().rss
                peak = max(peak, rss)
            except psutil.Error:
                pass
            rc = proc.poll()
            if rc is not None:
                break
            if time.perf_counter() - t0 > limit_s:
                proc.kill()
                proc.wait()
                rc = None
                break
            time.sleep(sample_s)
        ended_at = time.perf_counter()
        wall_s = ended_at - t0
        out.seek(0)
        err.seek(0)
        return Measured(
            rc, out.read().decode("utf-8", "replace"), err.read().decode("utf-8", "replace"), wall_s, peak, ended_at
        )
