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

  The same endpoint also takes ``OLLAMA_CONTEXT_LENGTH``, ``OLLAMA_NUM_PARALLEL``,
  ``OLLAMA_MAX_LOADED_MODELS`` and ``OLLAMA_KEEP_ALIVE``: the scheduler's settings for later loads.
- After ``POST /_standin/sched`` ``{"enabled": true}`` (else such a generate answers 404 as before),
  ``POST /api/generate`` for a pulled model that is not loaded loads it by Ollama's scheduler rules
  (``kvtop.demo.standin_sched``, docs/ollama-scheduler.md): models unloaded to make room or at
  ``OLLAMA_MAX_LOADED_MODELS``, shortest keep-alive first, idle before in use, the load waiting
  for a busy one. ``POST /_standin/busy`` ``{"model": NAME, "requests": N}`` sets a model's requests
  in flight; ``GET /_standin/sched`` -> ``{"loads": [{"model", "unloaded", "num_ctx", ...}],
  "env", "waiting"}``.

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

This module is the command line and :func:`serve`; the API answers are built in
:mod:`kvtop.demo.api_bodies`, the HTTP server and its routes are :mod:`kvtop.demo.standin_http`.

Standard library only.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kvtop.bundled import bundled_dir
from kvtop.demo.player import ScenarioPlayer
from kvtop.demo.scenario import Scenario
from kvtop.demo.scenario_file import load_scenario
from kvtop.demo.standin_http import StandinServer

__all__ = ["DEFAULT_SCENARIO_NAME", "default_scenario_path", "main", "serve"]

DEFAULT_SCENARIO_NAME = "demo-scenario.json"
"""File name of the bundled scenario (package ``kvtop.snapshots``, repo ``snapshots/``)."""


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
    parser.add_argument("--scenario", type=Path, default=None, help="scenario JSON (default: the bundled demo)")
    parser.add_argument("--manual", action="store_true", help="time stands still; POST /_standin/advance moves on")
    parser.add_argument("--speed", type=float, default=1.0, help="timeline speed factor (> 0)")
    parser.add_argument(
        "--loop", action=argparse.BooleanOptionalAction, default=True, help="restart after the last step (default: on)"
    )
    parser.add_argument("--verbose", action="store_true", help="log every request to stderr")
    parser.add_argument(
        "--vram-bytes",
        type=int,
        default=None,
        metavar="N",
        help="GPU memory Ollama may use: a reload that no longer fits spills to system RAM (default: no budget)",
    )
    parser.add_argument(
        "--require-basic",
        metavar="USER:PASS",
        default=None,
        help="answer API requests 401 unless they carry this basic auth (as a proxy would)",
    )
    parser.add_argument(
        "--require-bearer",
        metavar="TOKEN",
        default=None,
        help="answer API requests 401 unless they carry Authorization: Bearer TOKEN",
    )
    parser.add_argument("--tls-cert", metavar="FILE", default=None, help="serve https with this certificate (PEM)")
    parser.add_argument("--tls-key", metavar="FILE", default=None, help="the --tls-cert's private key (PEM)")
    parser.add_argument(
        "--log-file",
        type=Path,
        default=None,
        metavar="PATH",
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
        print(f"kvtop.demo.server: warning: binding {args.host}, not loopback", file=sys.stderr)
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
