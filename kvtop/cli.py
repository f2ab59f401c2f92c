"""Command line: ``kvtop [--host URL] [--interval S] [--once [--json]] [--demo]``.

``main()`` returns an exit code: 0 on success, 2 when the server is unreachable in ``--once``
mode or the arguments are wrong, 1 when the demo server cannot start.
"""

from __future__ import annotations

import argparse
import dataclasses
import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from kvtop import __version__
from kvtop.config import DEFAULT_INTERVAL_S, HostError, Settings, clamp_interval, host_from_environment, parse_ollama_host

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_UNREACHABLE = 2
EXIT_INTERRUPTED = 130


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (every flag is documented in README.md)."""
    p = argparse.ArgumentParser(
        prog="kvtop",
        description="top for an Ollama server's memory: weights vs KV cache vs compute per model.",
        epilog="kvtop inspect-log PATH|- [--json]: read a whole server log and report every model load.",
    )
    p.add_argument("--host", metavar="URL",
                   help="Ollama server, read like OLLAMA_HOST (default: $OLLAMA_HOST, else http://127.0.0.1:11434)")
    p.add_argument("--interval", "-n", type=float, default=DEFAULT_INTERVAL_S, metavar="SECONDS",
                   help="seconds between polls, 0.25–60 (default: 1)")
    p.add_argument("--timeout", type=float, default=3.0, metavar="SECONDS",
                   help="bound on each API request (default: 3)")
    p.add_argument("--log", metavar="SPEC", default=None,
                   help="server log: auto (default), journal[:UNIT], journal-user[:UNIT], file:PATH, "
                        "docker:CONTAINER, - (stdin) or none")
    p.add_argument("--once", action="store_true", help="print one sample as a plain table and exit")
    p.add_argument("--json", action="store_true", help="with --once: print one JSON object instead")
    p.add_argument("--demo", action="store_true",
                   help="start the embedded stand-in Ollama server on 127.0.0.1 and watch it")
    p.add_argument("--demo-speed", type=float, default=1.0, metavar="X", help=argparse.SUPPRESS)
    p.add_argument("--readonly", action="store_true",
                   help="never send a request that changes the server (kvtop sends none today; kept for scripts)")
    p.add_argument("--version", action="version", version=f"kvtop {__version__}")
    return p


@contextmanager
def demo_server(speed: float = 1.0, *, manual: bool = False) -> Iterator[str]:
    """Run the stand-in Ollama server (``kvtop.demo.server``) on a free loopback port.

    The server exits by itself if kvtop dies without stopping it (``--exit-with-parent``).

    Yields:
        Its base URL, e.g. ``http://127.0.0.1:40321``.

    Raises:
        RuntimeError: The server did not announce ``LISTENING`` within 10 s.
    """
    cmd = [sys.executable, "-m", "kvtop.demo.server", "--port", "0", "--speed", str(speed), "--exit-with-parent"]
    proc = subprocess.Popen(
        cmd + (["--manual"] if manual else []),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 10
        url = None
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            if line.startswith("LISTENING "):
                url = line.split(None, 1)[1].strip()
                break
        if url is None:
            err = proc.stderr.read() if proc.stderr and proc.poll() is not None else ""
            raise RuntimeError(f"the demo server did not start{': ' + err.strip()[-300:] if err else ''}")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def _sample_once(settings: Settings) -> int:
    from kvtop.model.state import AppState, apply
    from kvtop.report import state_json, state_text
    from kvtop.sources.ollama import OllamaClient

    client = OllamaClient(settings.host_url, timeout_s=settings.timeout_s, show_timeout_s=settings.show_timeout_s)
    try:
        snap = await client.sample(wait_details=True)
    finally:
        await client.aclose()
    state = apply(AppState(host_url=settings.host_url), snap)
    if settings.extra.get("json") == "1":
        sys.stdout.write(json.dumps(state_json(state), indent=2, ensure_ascii=False) + "\n")
    else:
        out = state_text(state)
        (sys.stdout if snap.reachable else sys.stderr).write(out)
    return EXIT_OK if snap.reachable else EXIT_UNREACHABLE


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kvtop`` console script; returns the process exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["inspect-log"]:
        from kvtop.inspect_log import main_inspect_log

        return main_inspect_log(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    for stream in (sys.stdout, sys.stderr):  # a terminal without UTF-8 gets "?" instead of a traceback
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="replace")
    if args.json and not args.once:
        parser.error("--json needs --once")
    if args.demo and args.host is not None:
        parser.error("--demo watches its own stand-in server; leave out --host")
    if not (0 < args.interval < float("inf")):
        parser.error("--interval must be a positive number of seconds")
    if not (0 < args.timeout < float("inf")):
        parser.error("--timeout must be a positive number of seconds")
    try:
        host_url = parse_ollama_host(args.host, strict=True) if args.host is not None else host_from_environment()
    except HostError as exc:
        parser.exit(EXIT_UNREACHABLE, f"kvtop: {exc}\n")
    log_spec = args.log if args.log is not None else ("none" if args.demo or args.once else "auto")
    try:
        from kvtop.sources.tail import parse_log_spec

        parse_log_spec(log_spec)
    except ValueError as exc:
        parser.exit(EXIT_UNREACHABLE, f"kvtop: --log: {exc}\n")
    settings = Settings(
        host_url=host_url,
        interval_s=clamp_interval(args.interval),
        timeout_s=max(0.1, args.timeout),
        demo=args.demo,
        readonly=args.readonly,
        log_spec=log_spec,
        extra={"json": "1" if args.json else "0"},
    )
    try:
        if args.demo:
            try:
                with demo_server(args.demo_speed, manual=args.once) as url:
                    if args.once:
                        _show_busiest_step(url)
                    return _run(dataclasses.replace(settings, host_url=url), once=args.once)
            except RuntimeError as exc:
                print(f"kvtop: {exc}", file=sys.stderr)
                return EXIT_FAILED
        return _run(settings, once=args.once)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `kvtop --once | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except OSError as exc:  # e.g. stdout is /dev/full
        print(f"kvtop: cannot write the output: {exc}", file=sys.stderr)
        return EXIT_FAILED


def _show_busiest_step(url: str) -> None:
    """For ``--demo --once``: jump the stand-in to the step with the most models loaded."""
    import httpx

    from kvtop.demo.server import load_default_scenario

    steps = load_default_scenario().steps
    busiest = max(range(len(steps)), key=lambda i: len(steps[i].loaded))
    httpx.post(f"{url}/_standin/advance", json={"to": busiest}, timeout=5, trust_env=False)


def _run(settings: Settings, *, once: bool) -> int:
    if once:
        return asyncio.run(_sample_once(settings))
    from kvtop.ui.app import make_app

    app = make_app(settings)
    app.run()
    return app.return_code or EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
