"""A stand-in Ollama HTTP server that plays a scenario.

``kvtop --demo`` starts it as a subprocess, and the integration tests start it as a real
process on 127.0.0.1. It speaks the parts of the Ollama API kvtop reads, with Ollama's real
response shapes (``docs/ollama-internals.md`` §1.1 and §2.1):

- ``GET /api/version``, ``GET /api/ps``, ``POST /api/show``, ``GET /api/tags``;
- ``GET /`` answers ``Ollama is running`` like the real server;
- anything else answers 404 ``{"error": "not found"}``.

Control endpoints (not part of Ollama):

- ``GET /_standin/state`` -> ``{"step": i, "label": ..., "steps": n, ...}``;
- ``POST /_standin/advance`` (``--manual`` only) -> next step, or ``{"to": i}`` to jump.
- ``GET /_standin/requests`` -> ``{"requests": [{"method": "POST", "path": "/api/generate"}, ...]}``:
  every request to the Ollama API so far, oldest first (the newest 10,000), so a test can tell
  that nothing was written.
- ``GET /_standin/machine`` -> ``{"ram_total": N, "ram_used": M}``: the scenario's machine (its
  ``machine`` object; 404 without one), with the system-RAM share (``size - size_vram``) of the
  models loaded now added to ``ram_used``, plus its simulated GPU and processes (``gpu``,
  ``processes``: ``kvtop.demo.gpusim.machine_doc``). ``kvtop --demo`` shows these, not the host's.
- ``POST /_standin/env`` ``{"OLLAMA_KV_CACHE_TYPE": "q8_0"}`` -> as if Ollama were restarted with
  that cache type: the current step's models are sized again with ``kvtop.model.kv`` (their KV
  cache at the new type, the rest unchanged) and placed in the VRAM budget; later
  ``/api/generate`` reloads use it too. Answers the state plus ``kv_cache_type`` and ``vram_bytes``.

``--vram-bytes N`` gives the stand-in a GPU of N bytes for Ollama: a ``POST /api/generate`` reload
(or an ``env`` restart) that no longer fits gets ``size_vram`` capped to what the step's other
models leave free, the rest in system RAM, as Ollama's scheduler does. Without it a model fully on
the GPU stays there.

Command line::

    python -m kvtop.demo.server [--host 127.0.0.1] [--port 0] [--scenario PATH] [--manual]
                                [--speed FLOAT] [--loop/--no-loop] [--verbose] [--vram-bytes N]
                                [--log-file PATH]

``--log-file PATH`` writes the server log the scenario implies as it plays (``kvtop.demo.logwriter``:
llama-server era lines, so ``/api/version`` then answers the scenario's ``log_version``), with gin's
access line for every Ollama API request it serves (not the ``/_standin/`` ones, nor those
``--require-basic``/``--require-bearer`` refuses: a proxy answers those, Ollama never sees them).

After binding it prints exactly one line, ``LISTENING http://<host>:<port>``, to stdout and
serves until SIGTERM or SIGINT, then exits 0.

Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone, tzinfo
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from kvtop.bundled import bundled_dir
from kvtop.demo.player import ScenarioPlayer
from kvtop.demo.scenario import CatalogModel, LoadedModel, Scenario, Step, load_scenario, model_blob

__all__ = [
    "DEFAULT_SCENARIO_NAME",
    "ScenarioPlayer",
    "StandinServer",
    "default_scenario_path",
    "format_go_time",
    "main",
    "serve",
]

DEFAULT_SCENARIO_NAME = "demo-scenario.json"
"""File name of the bundled scenario (package ``kvtop.snapshots``, repo ``snapshots/``)."""

MAX_DURATION_NS = 2**63 - 1
"""Go's ``time.Duration(math.MaxInt64)``: what an infinite keep-alive becomes (~292 years)."""

BUSY_ERROR = "server busy, please try again.  maximum pending requests exceeded"
"""Ollama's 503 message (``ErrMaxQueue``), used when a step sets ``status`` without ``error``."""

GARBAGE_BODY = b'{"models":[{"name":"qwen3:1.7b-q8_0","model":"qw'
"""What ``/api/ps`` answers in a ``garbage`` step: JSON cut off mid-string."""

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


# --------------------------------------------------------------------------------------------
# Time


def _local_tz() -> tzinfo:
    """Return the local time zone as a fixed offset (what Go's ``time.Local`` gives now)."""
    tz = datetime.now().astimezone().tzinfo
    return tz if tz is not None else timezone.utc


def format_go_time(unix_ns: int, tz: tzinfo | None = None) -> str:
    """Format a time the way Go's ``time.Time.MarshalJSON`` does (RFC 3339 with nanoseconds).

    Trailing zeros of the fraction are dropped (no fraction at all when it is zero), and the
    offset is ``Z`` for UTC and ``±hh:mm`` otherwise, e.g. ``2026-11-29T15:04:05.123456789Z``
    or ``2025-10-17T16:47:07.93355-07:00``.

    Args:
        unix_ns: Nanoseconds since the Unix epoch.
        tz: Time zone to print in; the local one when None.

    Returns:
        The timestamp text (without JSON quotes).
    """
    seconds, nanos = divmod(unix_ns, 1_000_000_000)
    moment = (_EPOCH + timedelta(seconds=seconds)).astimezone(tz or _local_tz())
    fraction = f"{nanos:09d}".rstrip("0")
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if fraction:
        text += "." + fraction
    offset = moment.utcoffset() or timedelta(0)
    if offset == timedelta(0):
        return text + "Z"
    total_min = int(offset.total_seconds()) // 60
    sign = "+" if total_min >= 0 else "-"
    hours, minutes = divmod(abs(total_min), 60)
    return f"{text}{sign}{hours:02d}:{minutes:02d}"


# --------------------------------------------------------------------------------------------
# Response bodies


def _normalise_name(name: str) -> str:
    """Turn a user-supplied model name into the catalog form (lower case, with a tag)."""
    name = name.strip().lower()
    for prefix in ("https://", "http://"):
        if name.startswith(prefix):
            name = name[len(prefix) :]
    for prefix in ("registry.ollama.ai/library/", "registry.ollama.ai/"):
        if name.startswith(prefix):
            name = name[len(prefix) :]
    if name.startswith("library/"):
        name = name[len("library/") :]
    if ":" not in name.rsplit("/", 1)[-1]:
        name += ":latest"
    return name


def ps_body(scenario: Scenario, step: Step, since_ns: int, tz: tzinfo | None = None, *,
            reloads: dict[str, tuple[int | None, int, int]] | None = None,
            expiry: dict[str, int | None] | None = None) -> dict[str, Any]:
    """Build the ``/api/ps`` answer for a step, in Ollama's field order and row order.

    Args:
        scenario: The scenario (for digests and details).
        step: The current step.
        since_ns: Wall time (ns) at which the step became current; ``expires_at`` counts
            from it.
        tz: Time zone for ``expires_at``; the local one when None.
        reloads: ``POST /api/generate`` reloads in this step: model -> (num_ctx, size, size_vram).
        expiry: ``POST /api/generate`` keep-alives in this step: model -> its new ``expires_at``
            (Unix ns), or None when ``keep_alive: 0`` unloaded it (the row is left out).

    Returns:
        ``{"models": [...]}``, longest remaining ``expires_at`` first.
    """
    rows: list[tuple[int, dict[str, Any]]] = []
    for row in step.loaded:
        model = scenario.models[row.model]
        expires_ns = _expires_ns(row, since_ns)
        if expiry is not None and row.model in expiry:
            kept = expiry[row.model]
            if kept is None:
                continue  # unloaded (keep_alive 0)
            expires_ns = kept
        context, size, size_vram = (reloads or {}).get(row.model, (row.context_length, row.size, row.size_vram))
        entry: dict[str, Any] = {
            "name": model.name,
            "model": model.name,
            "size": size,
            "digest": model.digest,
            "details": model.details.to_json() | {"parent_model": ""},
            "expires_at": format_go_time(expires_ns, tz),
            "size_vram": size_vram,
        }
        if context is not None:
            entry["context_length"] = context
        rows.append((expires_ns // 1_000_000_000, entry))
    rows.sort(key=lambda item: -item[0])  # stable, like slices.SortStableFunc on Unix()
    return {"models": [entry for _, entry in rows]}


_GO_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_GO_DURATION_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "μs": 1_000, "ms": 1_000_000, "s": 1_000_000_000,
                   "m": 60_000_000_000, "h": 3_600_000_000_000}


def _keep_alive_ns(value: Any) -> int | None:
    """A request's ``keep_alive`` in ns as ``api.Duration.UnmarshalJSON`` reads it: a number is
    seconds, a string a Go duration (``"5m"``, ``"1h30m"``, ``"-1"`` is not one: a bare number
    string is rejected); any negative value means forever (returned as -1). None: invalid."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return -1 if value < 0 else int(value * 1_000_000_000)
    if not isinstance(value, str):
        return None
    text, sign = value.strip(), 1
    if text[:1] in "+-" and text:
        sign, text = (-1 if text[0] == "-" else 1), text[1:]
    if text == "0":
        return 0
    pos, total = 0, 0.0
    while pos < len(text):
        m = _GO_DURATION_PART.match(text, pos)
        if m is None:
            return None
        total += float(m.group(1)) * _GO_DURATION_NS[m.group(2)]
        pos = m.end()
    if pos == 0:
        return None
    return -1 if sign < 0 else int(total)


def _expires_ns(row: LoadedModel, since_ns: int) -> int:
    if row.expires_in_s is None:
        return since_ns + MAX_DURATION_NS
    return since_ns + int(row.expires_in_s * 1e9)


def _modelfile(model: CatalogModel) -> str:
    if model.modelfile:
        return model.modelfile
    lines = [
        '# Modelfile generated by "ollama show"',
        "# To build a new Modelfile based on this, replace FROM with:",
        f"# FROM {model.name}",
        "",
        f"FROM /usr/share/ollama/.ollama/models/blobs/{model_blob(model)}",
    ]
    if model.template:
        lines.append(f'TEMPLATE """{model.template}"""')
    if model.system:
        lines.append(f'SYSTEM """{model.system}"""')
    for line in model.parameters.splitlines():
        key, _, value = line.partition(" ")
        lines.append(f"PARAMETER {key} {value.strip()}")
    if model.license:
        lines.append(f'LICENSE """{model.license}"""')
    return "\n".join(lines) + "\n"


def show_body(model: CatalogModel, verbose: bool) -> dict[str, Any]:
    """Build the ``/api/show`` answer.

    Without ``verbose`` every non-empty array in ``model_info`` is JSON null, as Ollama has
    done since v0.6.7 (§2.2); scalars are unchanged.

    Args:
        model: The catalog model.
        verbose: The request's ``verbose`` flag.

    Returns:
        The JSON-ready answer.
    """
    info: dict[str, Any] = {}
    for key, value in model.model_info.items():
        if isinstance(value, list) and value and not verbose:
            info[key] = None
        else:
            info[key] = _thaw(value)
    body: dict[str, Any] = {
        "license": model.license,
        "modelfile": _modelfile(model),
        "parameters": model.parameters,
        "template": model.template,
    }
    if model.system:
        body["system"] = model.system
    body["details"] = model.details.to_json()
    body["model_info"] = info
    if model.tensors is not None:
        body["tensors"] = [_thaw(t) for t in model.tensors]
    body["capabilities"] = list(model.capabilities)
    body["modified_at"] = model.modified_at
    return body


def _thaw(value: Any) -> Any:
    if isinstance(value, list):
        return [_thaw(v) for v in value]
    if hasattr(value, "items"):
        return {k: _thaw(v) for k, v in value.items()}
    return value


def tags_body(scenario: Scenario) -> dict[str, Any]:
    """Build the ``/api/tags`` answer: every catalog model, newest ``modified_at`` first.

    Args:
        scenario: The scenario.

    Returns:
        ``{"models": [{name, model, modified_at, size, digest, details}, ...]}``.
    """
    models = sorted(
        scenario.models.values(), key=lambda m: _rfc3339_sort_key(m.modified_at), reverse=True
    )
    return {
        "models": [
            {
                "name": m.name,
                "model": m.name,
                "modified_at": m.modified_at,
                "size": m.file_size,
                "digest": m.digest,
                "details": m.details.to_json(),
            }
            for m in models
            if m.file_size is not None
        ]
    }


_RFC3339_PARTS = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|([+-])(\d{2}):(\d{2}))"
)


def _rfc3339_sort_key(text: str) -> float:
    """Seconds since the epoch for an RFC 3339 time (nanoseconds allowed); 0.0 if unparsable."""
    match = _RFC3339_PARTS.fullmatch(text)
    if not match:
        return 0.0
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    fraction = float("0." + match.group(7)) if match.group(7) else 0.0
    offset = timedelta(0)
    if match.group(8) != "Z":
        offset = timedelta(hours=int(match.group(10)), minutes=int(match.group(11)))
        if match.group(9) == "-":
            offset = -offset
    moment = datetime(year, month, day, hour, minute, second, tzinfo=timezone(offset))
    return moment.timestamp() + fraction


# --------------------------------------------------------------------------------------------
# HTTP


class StandinServer(ThreadingHTTPServer):
    """The HTTP server; holds the player. Handler threads are daemons."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        player: ScenarioPlayer,
        *,
        verbose: bool = False,
    ) -> None:
        """Bind (but do not start) the server.

        Args:
            address: ``(host, port)``; port 0 picks a free one.
            player: The scenario player.
            verbose: Log one stderr line per request.
        """
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.player = player
        self.verbose = verbose
        self.reloads: dict[tuple[int, str], tuple[int | None, int, int]] = {}
        """``POST /api/generate`` reloads: (step index, model) -> (num_ctx, size, size_vram)."""
        self.reloads_lock = threading.Lock()
        self.expiry: dict[tuple[int, str], int | None] = {}
        """``POST /api/generate`` keep-alives: (step index, model) -> new ``expires_at`` (Unix ns),
        None once ``keep_alive: 0`` unloaded it (guarded by ``reloads_lock``)."""
        self.vram_bytes: int | None = None
        """GPU memory Ollama may use (``--vram-bytes``); None: no budget."""
        self.kv_cache_type = "f16"
        """``OLLAMA_KV_CACHE_TYPE`` as last set through ``POST /_standin/env`` (the scenario's sizes are f16)."""
        self.require_basic: tuple[str, str] | None = None
        """``--require-basic USER:PASS``: every API request needs this basic auth, else 401."""
        self.require_bearer: str | None = None
        """``--require-bearer TOKEN``: every API request needs ``Authorization: Bearer TOKEN``, else 401."""
        self.scheme = "http"
        """``https`` once :meth:`use_tls` wrapped the socket."""
        self.requests: deque[tuple[str, str]] = deque(maxlen=10_000)
        """``(method, path)`` of every request outside ``/_standin/``, oldest first (``GET /_standin/requests``)."""
        self.log_writer: Any = None
        """``--log-file``: the ``kvtop.demo.logwriter.LogWriter`` writing the scenario's server log, or None."""
        super().__init__(address, _Handler)

    @property
    def url(self) -> str:
        """``http://host:port`` (``https://`` with TLS) of the bound socket."""
        host, port = self.server_address[:2]
        host_text = f"[{host!s}]" if ":" in str(host) else str(host)
        return f"{self.scheme}://{host_text}:{port}"

    def use_tls(self, cert_file: str, key_file: str) -> None:
        """Serve over TLS with this certificate chain and key (PEM); the handshake happens in the
        handler's thread, so a client that never completes it blocks no one else.

        Raises:
            OSError, ssl.SSLError: The files cannot be read or do not match.
        """
        import ssl

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert_file, key_file)
        self.socket = context.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)
        self.scheme = "https"

    def refuses(self, headers: Any) -> str | None:
        """Why a request with these headers is refused (``--require-basic``/``--require-bearer``),
        as a proxy in front of Ollama would: None when it may pass."""
        got = str(headers.get("Authorization") or "")
        if self.require_basic is not None:
            import base64

            user, password = self.require_basic
            want = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
            if got != want:
                return "basic"
        if self.require_bearer is not None and got != f"Bearer {self.require_bearer}":
            return "bearer"
        return None

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Stay quiet about dropped connections unless ``verbose``."""
        if self.verbose:
            super().handle_error(request, client_address)


class _BadRequest(Exception):
    """Raised while reading a request body; becomes a 400."""


class _Handler(BaseHTTPRequestHandler):
    server: StandinServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes; no 40 ms stalls
    server_version = "kvtop-standin"
    status_sent = 0
    """The status of the response being sent (for the ``--log-file`` access line); 0 before one."""

    def version_string(self) -> str:
        return self.server_version

    # -- plumbing ------------------------------------------------------------------------

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (stdlib signature)
        if self.server.verbose:
            sys.stderr.write(f"standin: {self.address_string()} {format % args}\n")

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, obj: Any) -> None:
        body = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        self._send(status, body, "application/json; charset=utf-8")

    def _error(self, status: int, message: str) -> None:
        self._json(status, {"error": message})

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks: list[bytes] = []
            while True:
                size_line = self.rfile.readline(65537)
                try:
                    size = int(size_line.split(b";")[0].strip() or b"0", 16)
                except ValueError as exc:
                    raise _BadRequest("bad chunked encoding") from exc
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline(3)
        length_text = self.headers.get("Content-Length")
        if not length_text:
            return b""
        try:
            length = int(length_text)
        except ValueError as exc:
            raise _BadRequest("bad Content-Length") from exc
        if length < 0 or length > 16 * 1024 * 1024:
            raise _BadRequest("bad Content-Length")
        return self.rfile.read(length)

    def _json_body(self, *, required: bool) -> dict[str, Any]:
        raw = self._read_body()
        if not raw.strip():
            if required:
                raise _BadRequest("missing request body")
            return {}
        try:
            obj = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise _BadRequest(f"invalid character in request body: {exc}") from exc
        if not isinstance(obj, dict):
            raise _BadRequest("json: cannot unmarshal into Go value of type object")
        return obj

    # -- dispatch ------------------------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802 (stdlib name)
        self._dispatch("GET")

    def do_HEAD(self) -> None:  # noqa: N802
        self._dispatch("HEAD")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")

    def do_PUT(self) -> None:  # noqa: N802
        self._dispatch("PUT")

    def do_DELETE(self) -> None:  # noqa: N802
        self._dispatch("DELETE")

    def send_response(self, code: int, message: str | None = None) -> None:
        self.status_sent = code  # for the access line
        super().send_response(code, message)

    def _dispatch(self, method: str) -> None:
        started = time.perf_counter()
        parts = urlsplit(self.path)
        path = parts.path
        if len(path) > 1:
            path = path.rstrip("/")
        if path.startswith("/_standin/"):
            self._route(method, path)
            return
        self.server.requests.append((method, path))  # deque.append is atomic across handler threads
        if self._refuse():
            return  # a proxy in front answered: Ollama never saw the request, so it logs nothing
        self.status_sent = 0
        self._route(method, path)
        writer = self.server.log_writer
        if writer is not None and self.status_sent:  # gin's line, once the response is sent (§4.9)
            logged = parts.path + (f"?{parts.query}" if parts.query else "")
            writer.access(self.status_sent, time.perf_counter() - started, str(self.client_address[0]), method,
                          logged)

    def _refuse(self) -> bool:
        """Answer 401 when ``--require-basic``/``--require-bearer`` refuses the request's headers."""
        refused = self.server.refuses(self.headers)
        if refused is not None:  # as nginx/Caddy in front of Ollama: 401 with a challenge
            self._drain()
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="ollama"' if refused == "basic" else "Bearer")
            body = b"401 Authorization Required"
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return True
        return False

    def _route(self, method: str, path: str) -> None:
        try:
            if path.startswith("/_standin/"):
                self._control(method, path)
            elif path == "/" and method in ("GET", "HEAD"):
                self._send(200, b"Ollama is running", "text/plain; charset=utf-8")
            elif path.startswith("/api/"):
                self._api(method, path)
            else:
                self._drain()
                self._error(404, "not found")
        except _BadRequest as exc:
            self._error(400, str(exc))
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # noqa: BLE001 - a bug here must not kill the connection silently
            sys.stderr.write(f"standin: internal error on {method} {path}: {exc!r}\n")
            self.close_connection = True
            try:
                self._error(500, f"stand-in internal error: {exc}")
            except OSError:
                pass

    def _drain(self) -> None:
        try:
            self._read_body()
        except _BadRequest:
            self.close_connection = True

    def _control(self, method: str, path: str) -> None:
        player = self.server.player
        steps = player.scenario.steps
        if path == "/_standin/state" and method == "GET":
            index, since_ns = player.current()
            self._json(200, self._state(index, since_ns))
        elif path == "/_standin/advance" and method == "POST":
            body = self._json_body(required=False)
            if not player.manual:
                self._error(409, "advance needs --manual")
                return
            to = body.get("to")
            if to is not None and (isinstance(to, bool) or not isinstance(to, int)):
                self._error(400, "'to' must be an integer step index")
                return
            try:
                index = player.advance(to)
            except IndexError:
                self._error(400, f"step {to} out of range 0..{len(steps) - 1}")
                return
            _, since_ns = player.current()
            self._json(200, self._state(index, since_ns))
        elif path == "/_standin/requests" and method == "GET":
            self._json(200, {"requests": [{"method": m, "path": p} for m, p in list(self.server.requests)]})
        elif path == "/_standin/machine" and method == "GET":
            self._machine()
        elif path == "/_standin/env" and method == "POST":
            self._env(self._json_body(required=True))
        else:
            self._drain()
            self._error(404, "not found")

    def _machine(self) -> None:
        """``GET /_standin/machine``: the scenario's RAM plus what the loaded models hold in it, and its
        simulated GPU and processes (``kvtop.demo.gpusim.machine_doc``)."""
        from kvtop.demo.gpusim import machine_doc
        from kvtop.demo.logwriter import runner_argv, runner_pid

        player = self.server.player
        machine = player.scenario.machine
        if machine is None:
            self._error(404, "the scenario has no machine")
            return
        index, since_ns = player.current()
        with self.server.reloads_lock:
            reloads = {m: v for (i, m), v in self.server.reloads.items() if i == index}
        rows = ps_body(player.scenario, player.scenario.steps[index], since_ns, reloads=reloads)["models"]
        runners = [{"pid": runner_pid(player.scenario, r["name"]), "model": r["name"], "size": r["size"],
                    "size_vram": r["size_vram"],
                    "argv": runner_argv(player.scenario, r["name"], int(r.get("context_length") or 2048))}
                   for r in rows]
        writer = self.server.log_writer
        busy = writer.busy() if writer is not None else False
        self._json(200, machine_doc(machine.ram_total, machine.ram_used, machine.gpu, runners, busy))

    def _state(self, index: int, since_ns: int) -> dict[str, Any]:
        player = self.server.player
        return {
            "step": index,
            "label": player.scenario.steps[index].label,
            "steps": len(player.scenario.steps),
            "manual": player.manual,
            "since": format_go_time(since_ns),
        }

    def _env(self, body: dict[str, Any]) -> None:
        """``POST /_standin/env``: restart with ``OLLAMA_KV_CACHE_TYPE``; the current step's models are
        re-sized (KV cache at the new type, ``kv.bytes_per_token × num_ctx``) and placed in the budget."""
        from kvtop.model import kv

        unknown = sorted(set(body) - {"OLLAMA_KV_CACHE_TYPE"})
        if unknown:
            self._error(400, f"the stand-in only simulates OLLAMA_KV_CACHE_TYPE, not {', '.join(unknown)}")
            return
        raw = body.get("OLLAMA_KV_CACHE_TYPE")
        new_type = kv.normalize_cache_type(raw if isinstance(raw, str) else None) if raw != "" else "f16"
        if new_type is None:
            self._error(400, f"unsupported OLLAMA_KV_CACHE_TYPE {raw!r}")
            return
        server = self.server
        index, since_ns = server.player.current()
        step = server.player.scenario.steps[index]
        with server.reloads_lock:
            sized: list[tuple[str, int | None, int]] = []
            for row in step.loaded:
                ctx, size, vram = server.reloads.get((index, row.model), (row.context_length, row.size, row.size_vram))
                layout = kv.layout_from_model_info(_thaw(server.player.scenario.models[row.model].model_info))
                if ctx is not None and isinstance(layout, kv.KVLayout):
                    try:
                        size += ctx * (kv.bytes_per_token(layout, new_type, new_type)
                                       - kv.bytes_per_token(layout, server.kv_cache_type, server.kv_cache_type))
                    except ValueError as exc:
                        self._error(400, f"{row.model}: {exc}")
                        return
                sized.append((row.model, ctx, max(0, size)))
            used = 0
            for (name, ctx, size), row in zip(sized, step.loaded):
                old = server.reloads.get((index, name), (row.context_length, row.size, row.size_vram))
                if server.vram_bytes is not None:
                    vram = min(size, max(0, server.vram_bytes - used))
                else:
                    vram = size if old[2] == old[1] else max(0, min(old[2], size))
                used += vram
                server.reloads[(index, name)] = (ctx, size, vram)
            server.kv_cache_type = new_type
        self._json(200, self._state(index, since_ns) | {"kv_cache_type": new_type, "vram_bytes": server.vram_bytes})

    def _api(self, method: str, path: str) -> None:
        player = self.server.player
        scenario = player.scenario
        routes = {
            ("GET", "/api/version"),
            ("HEAD", "/api/version"),
            ("GET", "/api/ps"),
            ("HEAD", "/api/ps"),
            ("GET", "/api/tags"),
            ("HEAD", "/api/tags"),
            ("POST", "/api/show"),
            ("POST", "/api/generate"),
        }
        if (method, path) not in routes:
            self._drain()
            self._error(404, "not found")
            return
        index, since_ns = player.current()
        step = scenario.steps[index]
        if step.status is not None and step.status != 200:
            self._drain()
            self._error(step.status, step.error or BUSY_ERROR)
            return
        if path == "/api/version":
            logged = self.server.log_writer is not None and scenario.log_version
            self._json(200, {"version": scenario.log_version if logged else scenario.version})
        elif path == "/api/ps":
            if step.garbage:
                self._send(200, GARBAGE_BODY, "application/json; charset=utf-8")
            else:
                with self.server.reloads_lock:
                    reloads = {m: v for (i, m), v in self.server.reloads.items() if i == index}
                    expiry = {m: v for (i, m), v in self.server.expiry.items() if i == index}
                self._json(200, ps_body(scenario, step, since_ns, reloads=reloads, expiry=expiry))
        elif path == "/api/tags":
            self._json(200, tags_body(scenario))
        elif path == "/api/generate":
            self._generate(index, step)
        else:
            self._show()

    def _generate(self, index: int, step: Step) -> None:
        """``POST /api/generate`` with an empty prompt: ``keep_alive`` and/or a reload at ``options.num_ctx``.

        ``keep_alive: 0`` unloads the model (its row leaves ``/api/ps`` until the step changes or
        another generate loads it again), as ``ollama stop`` does; another ``keep_alive`` (seconds,
        a Go duration string such as ``"5m"``, negative = forever) sets ``expires_at`` to now plus
        it, as Ollama does when a request ends (docs/ollama-internals.md §1.4).

        Reloads support what the what-if planner sends. The new size is the current one plus
        the KV cache difference (``kvtop.model.kv``, at the cache type ``/_standin/env`` set, f16
        by default); with ``--vram-bytes`` the model gets what the step's other models leave free
        and the rest is in system RAM, without it a model fully on the GPU stays there and a
        spilled one puts the difference in system RAM. The reload lasts until the step changes.
        """
        try:
            body = self._json_body(required=True)
        except _BadRequest as exc:
            self._error(400, str(exc))
            return
        name = _normalise_name(str(body.get("model") or ""))
        options = body.get("options") if isinstance(body.get("options"), dict) else {}
        num_ctx = options.get("num_ctx") if isinstance(options, dict) else None
        row = next((r for r in step.loaded if r.model.lower() == name), None)  # names match case-blind
        if row is not None:
            name = row.model
        keep_ns: int | None = None
        if "keep_alive" in body:
            keep_ns = _keep_alive_ns(body["keep_alive"])
            if keep_ns is None:
                self._error(400, f"time: invalid duration {json.dumps(body['keep_alive'])}")
                return
        if keep_ns == 0:  # unload, as `ollama stop` asks (a model not loaded: nothing to do)
            if row is not None:
                with self.server.reloads_lock:
                    self.server.expiry[(index, name)] = None
            self._json(200, {"model": name, "created_at": format_go_time(time.time_ns()), "response": "",
                             "done": True, "done_reason": "unload"})
            return
        if row is None:
            self._error(404, f"model '{name}' is not loaded in this step of the stand-in's scenario")
            return
        if keep_ns is not None and num_ctx is None:  # a keep-alive alone: the model stays (or loads again)
            now = time.time_ns()
            with self.server.reloads_lock:
                self.server.expiry[(index, name)] = now + (MAX_DURATION_NS if keep_ns < 0 else keep_ns)
            self._json(200, {"model": name, "created_at": format_go_time(now), "response": "",
                             "done": True, "done_reason": "load"})
            return
        if not isinstance(num_ctx, int) or isinstance(num_ctx, bool) or num_ctx < 1:
            self._error(400, "the stand-in only reloads with options.num_ctx (a positive integer)")
            return
        from kvtop.model import kv

        model = self.server.player.scenario.models[row.model]
        layout = kv.layout_from_model_info(_thaw(model.model_info))
        with self.server.reloads_lock:
            old_ctx, size, vram = self.server.reloads.get((index, name), (row.context_length, row.size, row.size_vram))
            if isinstance(layout, kv.KVUnavailable) or old_ctx is None:
                self._error(400, f"the stand-in cannot size {name} at another num_ctx")
                return
            ctx = min(num_ctx, layout.context_length_train or num_ctx)
            cache_type = self.server.kv_cache_type
            delta = kv.bytes_per_token(layout, cache_type, cache_type) * (ctx - old_ctx)
            new_size = max(0, size + delta)
            new_vram = new_size if vram == size else max(0, min(vram, new_size))
            if self.server.vram_bytes is not None:  # what the step's other models leave free on the GPU
                others = sum(self.server.reloads.get((index, r.model), (None, r.size, r.size_vram))[2]
                             for r in step.loaded if r.model != name)
                new_vram = min(new_size, max(0, self.server.vram_bytes - others))
            self.server.reloads[(index, name)] = (ctx, new_size, new_vram)
            if keep_ns is not None:
                self.server.expiry[(index, name)] = time.time_ns() + (MAX_DURATION_NS if keep_ns < 0 else keep_ns)
            elif self.server.expiry.get((index, name), 0) is None:
                self.server.expiry.pop((index, name))  # loaded again after an unload
        self._json(200, {"model": name, "created_at": format_go_time(time.time_ns()), "response": "",
                         "done": True, "done_reason": "load"})

    def _show(self) -> None:
        body = self._json_body(required=True)
        name = body.get("model") or body.get("name") or ""
        if not isinstance(name, str) or not name:
            self._error(400, "model is required")
            return
        verbose = body.get("verbose", False)
        models = self.server.player.scenario.models
        wanted = _normalise_name(name)
        model = next((m for n, m in models.items() if n.lower() == wanted), None)
        if model is None:
            self._error(404, f"model '{name}' not found")
            return
        self._json(200, show_body(model, bool(verbose)))


# --------------------------------------------------------------------------------------------
# Entry points


def default_scenario_path() -> Path:
    """Locate the bundled scenario (``snapshots/demo-scenario.json``, see ``kvtop.bundled``)."""
    return Path(str(bundled_dir("snapshots") / DEFAULT_SCENARIO_NAME))


def load_default_scenario() -> Scenario:
    """Load the bundled scenario.

    Raises:
        ValueError: When it cannot be found or is invalid.
    """
    try:
        text = (bundled_dir("snapshots") / DEFAULT_SCENARIO_NAME).read_text(encoding="utf-8")
    except (FileNotFoundError, OSError) as exc:
        raise ValueError(f"the bundled scenario cannot be read: {exc}") from None
    return load_scenario(text)


def serve(
    scenario: Scenario,
    host: str = "127.0.0.1",
    port: int = 0,
    manual: bool = False,
    speed: float = 1.0,
    loop: bool = True,
    *,
    verbose: bool = False,
) -> StandinServer:
    """Bind a stand-in server for ``scenario``; the caller starts it.

    Call ``serve_forever()`` (e.g. in a thread), then ``shutdown()`` and ``server_close()``.
    The timeline clock starts now.

    Args:
        scenario: What to play.
        host: Address to bind; loopback by default.
        port: Port; 0 picks a free one (read it from ``server_address``).
        manual: Time stands still; ``POST /_standin/advance`` moves on.
        speed: Timeline speed factor (> 0).
        loop: Restart after the last step.
        verbose: Log one stderr line per request.

    Returns:
        The bound, not yet serving, :class:`StandinServer`.
    """
    player = ScenarioPlayer(scenario, manual=manual, speed=speed, loop=loop)
    return StandinServer((host, port), player, verbose=verbose)


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m kvtop.demo.server",
        description="Stand-in Ollama server that plays a scenario (for kvtop --demo and tests).",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port (default 0: any free port)")
    parser.add_argument(
        "--scenario", type=Path, default=None, help="scenario JSON (default: the bundled demo)"
    )
    parser.add_argument(
        "--manual", action="store_true", help="time stands still; POST /_standin/advance moves on"
    )
    parser.add_argument("--speed", type=float, default=1.0, help="timeline speed factor (> 0)")
    parser.add_argument(
        "--loop",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="restart after the last step (default: on)",
    )
    parser.add_argument("--verbose", action="store_true", help="log every request to stderr")
    parser.add_argument(
        "--vram-bytes", type=int, default=None, metavar="N",
        help="GPU memory Ollama may use: a reload that no longer fits spills to system RAM (default: no budget)",
    )
    parser.add_argument("--require-basic", metavar="USER:PASS", default=None,
                        help="answer API requests 401 unless they carry this basic auth (as a proxy would)")
    parser.add_argument("--require-bearer", metavar="TOKEN", default=None,
                        help="answer API requests 401 unless they carry Authorization: Bearer TOKEN")
    parser.add_argument("--tls-cert", metavar="FILE", default=None, help="serve https with this certificate (PEM)")
    parser.add_argument("--tls-key", metavar="FILE", default=None, help="the --tls-cert's private key (PEM)")
    parser.add_argument(
        "--log-file", type=Path, default=None, metavar="PATH",
        help="write the scenario's server log to PATH as it plays (llama-server era lines, kvtop.demo.logwriter);"
             " /api/version then answers the scenario's log_version",
    )
    parser.add_argument(
        "--exit-with-parent",
        action="store_true",
        help="stop when the process that started this one goes away (kvtop --demo uses it)",
    )
    return parser


_LOOPBACK = {"127.0.0.1", "::1", "localhost"}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the stand-in server until SIGTERM/SIGINT.

    Args:
        argv: Arguments without the program name; ``sys.argv[1:]`` when None.

    Returns:
        0 after a clean shutdown, 2 on bad arguments or an invalid scenario, 1 when the
        address cannot be bound.
    """
    parser = _build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    stop = threading.Event()
    previous = _install_signal_handlers(stop)
    try:
        return _run(parser, args, stop)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _install_signal_handlers(stop: threading.Event) -> dict[int, Any]:
    """Make SIGTERM, SIGINT (and SIGHUP) set ``stop`` instead of raising.

    Args:
        stop: The event to set.

    Returns:
        The previous handlers, to restore later.
    """

    def _on_signal(signum: int, frame: Any) -> None:
        stop.set()

    previous: dict[int, Any] = {}
    if threading.current_thread() is not threading.main_thread():
        return previous
    for name in ("SIGTERM", "SIGINT", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is not None:
            previous[sig] = signal.signal(sig, _on_signal)
    return previous


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace, stop: threading.Event) -> int:
    """Body of :func:`main` once signals are handled."""
    if not args.speed > 0 or args.speed == float("inf"):
        parser.error(f"--speed must be a positive number, got {args.speed}")
    if not 0 <= args.port <= 65535:
        parser.error(f"--port must be 0..65535, got {args.port}")
    if args.vram_bytes is not None and args.vram_bytes < 0:
        parser.error(f"--vram-bytes must not be negative, got {args.vram_bytes}")
    try:
        scenario = load_scenario(args.scenario) if args.scenario else load_default_scenario()
    except ValueError as exc:
        print(f"kvtop.demo.server: {exc}", file=sys.stderr)
        return 2
    if args.host not in _LOOPBACK:
        print(
            f"kvtop.demo.server: warning: binding {args.host}, not loopback", file=sys.stderr
        )
    try:
        server = serve(
            scenario,
            host=args.host,
            port=args.port,
            manual=args.manual,
            speed=args.speed,
            loop=args.loop,
            verbose=args.verbose,
        )
    except OSError as exc:
        print(f"kvtop.demo.server: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    server.vram_bytes = args.vram_bytes
    if args.require_basic is not None:
        user, colon, password = args.require_basic.partition(":")
        if not colon:
            parser.error("--require-basic takes USER:PASS")
        server.require_basic = (user, password)
    server.require_bearer = args.require_bearer
    if (args.tls_cert is None) != (args.tls_key is None):
        parser.error("--tls-cert and --tls-key go together")
    if args.tls_cert is not None:
        try:
            server.use_tls(args.tls_cert, args.tls_key)
        except OSError as exc:
            server.server_close()
            print(f"kvtop.demo.server: cannot serve TLS with {args.tls_cert}: {exc}", file=sys.stderr)
            return 2

    if args.log_file is not None:
        from kvtop.demo.logwriter import LogWriter

        try:
            server.log_writer = LogWriter(args.log_file, server.player)
            server.log_writer.start()
        except (OSError, ValueError) as exc:
            server.server_close()
            print(f"kvtop.demo.server: cannot write the log {args.log_file}: {exc}", file=sys.stderr)
            return 2

    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1})
    thread.daemon = True
    parent = os.getppid()
    try:
        thread.start()
        sys.stdout.write(f"LISTENING {server.url}\n")
        sys.stdout.flush()
        while not stop.wait(0.5):
            if args.exit_with_parent and os.getppid() != parent:
                break  # the parent died (even by SIGKILL): never linger as an orphan
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=2)
        if server.log_writer is not None:
            server.log_writer.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
