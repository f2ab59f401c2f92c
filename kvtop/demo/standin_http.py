"""The stand-in's HTTP server: :class:`StandinServer` (the player, the reloads and keep-alives the
``POST /api/generate`` requests made, the auth a proxy would ask) and its request handler, which
routes the Ollama API and the ``/_standin/`` control endpoints (:mod:`kvtop.demo.server` lists them).
A generate for a model not loaded goes to the scheduler (:mod:`kvtop.demo.standin_sched`).
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from kvtop.demo.api_bodies import (
    BUSY_ERROR,
    GARBAGE_BODY,
    MAX_DURATION_NS,
    _keep_alive_ns,
    _normalise_name,
    _thaw,
    format_go_time,
    ps_body,
    show_body,
    tags_body,
)
from kvtop.demo.log_lines import runner_figures
from kvtop.demo.player import ScenarioPlayer
from kvtop.demo.standin_sched import load_route, merge_ps, ps_rows, sched_route
from kvtop.demo.scenario import LoadedModel, Step
from kvtop.demo.standin_serve import Slots, answer_body, prompt_tokens


# --------------------------------------------------------------------------------------------
# HTTP


class StandinServer(ThreadingHTTPServer):
    """The HTTP server; holds the player. Handler threads are daemons."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], player: ScenarioPlayer, *, verbose: bool = False) -> None:
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
        self.slots = Slots()
        """The runners' slots for requests with a prompt (``kvtop.demo.standin_serve``)."""
        self.log_writer: Any = None
        """``--log-file``: the ``kvtop.demo.logwriter.LogWriter`` writing the scenario's server log, or None."""
        from kvtop.demo.standin_sched import Sched

        self.sched = Sched(threading.Condition(self.reloads_lock))
        """The scheduler's state: models a generate loaded, busy counts, its environment (``kvtop.demo.standin_sched``)."""
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
            writer.access(self.status_sent, time.perf_counter() - started, str(self.client_address[0]), method, logged)

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
        elif path in ("/_standin/busy", "/_standin/sched"):
            sched_route(self, method, path)
        else:
            self._drain()
            self._error(404, "not found")

    def _machine(self) -> None:
        """``GET /_standin/machine``: the scenario's RAM plus what the loaded models hold in it, and its
        simulated GPU and processes (``kvtop.demo.gpusim.machine_doc``)."""
        from kvtop.demo.gpusim import machine_doc
        from kvtop.demo.log_lines import runner_argv, runner_pid

        player = self.server.player
        machine = player.scenario.machine
        if machine is None:
            self._error(404, "the scenario has no machine")
            return
        index, since_ns = player.current()
        with self.server.reloads_lock:
            reloads = {m: v for (i, m), v in self.server.reloads.items() if i == index}
        rows = ps_body(player.scenario, player.scenario.steps[index], since_ns, reloads=reloads)["models"]
        runners = [
            {
                "pid": runner_pid(player.scenario, r["name"]),
                "model": r["name"],
                "size": r["size"],
                "size_vram": r["size_vram"],
                "argv": runner_argv(player.scenario, r["name"], int(r.get("context_length") or 2048)),
            }
            for r in rows
        ]
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
        from kvtop.demo.standin_sched import SCHED_ENV

        unknown = sorted(set(body) - {"OLLAMA_KV_CACHE_TYPE", *SCHED_ENV})
        if unknown:
            self._error(
                400,
                f"the stand-in only simulates OLLAMA_KV_CACHE_TYPE and {', '.join(SCHED_ENV)}, not {', '.join(unknown)}",
            )
            return
        sched_env = {k: str(v) for k, v in body.items() if k in SCHED_ENV}
        if sched_env:  # the scheduler's variables: used by the next load (no restart)
            with self.server.reloads_lock:
                self.server.sched.env.update(sched_env)
            if "OLLAMA_KV_CACHE_TYPE" not in body:
                index, since_ns = self.server.player.current()
                self._json(200, self._state(index, since_ns) | {"env": dict(self.server.sched.env)})
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
                        size += ctx * (
                            kv.bytes_per_token(layout, new_type, new_type)
                            - kv.bytes_per_token(layout, server.kv_cache_type, server.kv_cache_type)
                        )
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
            ("POST", "/api/chat"),
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
                    extra = ps_rows(self.server, index)
                self._json(200, merge_ps(ps_body(scenario, step, since_ns, reloads=reloads, expiry=expiry), extra))
        elif path == "/api/tags":
            self._json(200, tags_body(scenario))
        elif path in ("/api/generate", "/api/chat"):
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
            if prompt_tokens(body):  # a request with a prompt: served in one of the runner's slots
                self._serve(index, row, body)
                return
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
            self._json(
                200,
                {
                    "model": name,
                    "created_at": format_go_time(time.time_ns()),
                    "response": "",
                    "done": True,
                    "done_reason": "unload",
                },
            )
            return
        unloaded = row is not None and self.server.expiry.get((index, row.model), 0) is None
        if self.server.sched.enabled and (row is None or (unloaded and num_ctx is None and "keep_alive" not in body)):
            load_route(self, index, step, name, options if isinstance(options, dict) else {}, keep_ns)
            return
        if row is None:
            self._error(404, f"model '{name}' is not loaded in this step of the stand-in's scenario")
            return
        if keep_ns is not None and num_ctx is None:  # a keep-alive alone: the model stays (or loads again)
            now = time.time_ns()
            with self.server.reloads_lock:
                self.server.expiry[(index, name)] = now + (MAX_DURATION_NS if keep_ns < 0 else keep_ns)
            self._json(
                200,
                {"model": name, "created_at": format_go_time(now), "response": "", "done": True, "done_reason": "load"},
            )
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
                others = sum(
                    self.server.reloads.get((index, r.model), (None, r.size, r.size_vram))[2]
                    for r in step.loaded
                    if r.model != name
                )
                new_vram = min(new_size, max(0, self.server.vram_bytes - others))
            self.server.reloads[(index, name)] = (ctx, new_size, new_vram)
            if keep_ns is not None:
                self.server.expiry[(index, name)] = time.time_ns() + (MAX_DURATION_NS if keep_ns < 0 else keep_ns)
            elif self.server.expiry.get((index, name), 0) is None:
                self.server.expiry.pop((index, name))  # loaded again after an unload
        self._json(
            200,
            {
                "model": name,
                "created_at": format_go_time(time.time_ns()),
                "response": "",
                "done": True,
                "done_reason": "load",
            },
        )

    def _serve(self, index: int, row: LoadedModel, body: dict[str, Any]) -> None:
        """Answer a request with a prompt once a slot of ``row``'s runner has served it (``standin_serve``)."""
        scenario = self.server.player.scenario
        writer = self.server.log_writer
        with self.server.reloads_lock:
            ctx = self.server.reloads.get((index, row.model), (row.context_length,))[0] or row.context_length or 2048
        started = time.time_ns()
        served = self.server.slots.serve(
            index,
            row.model,
            body,
            runner_figures(scenario, row.model) if scenario.models[row.model].runner is not None else {},
            ctx,
            writer.write_lines if writer is not None else None,
        )
        chat = urlsplit(self.path).path.rstrip("/") == "/api/chat"
        answer = answer_body(row.model, served, chat, format_go_time(time.time_ns()), time.time_ns() - started)
        self._json(200, answer)

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
