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
from typing import Any
from contextlib import contextmanager

from kvtop import __version__
from kvtop.config import (
    ConfigError,
    HostError,
    ResolvedConfig,
    Settings,
    parse_ollama_host,
    resolve_config,
    saved_theme,
)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_UNREACHABLE = 2
EXIT_INTERRUPTED = 130


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (every flag is documented in README.md)."""
    p = argparse.ArgumentParser(
        prog="kvtop",
        description="top for an Ollama server's memory: weights vs KV cache vs compute per model.",
        epilog="kvtop inspect-log PATH|- [--json]: read a whole server log and report every model load.  "
               "kvtop plan MODEL [--ctx N ...] [--kv TYPE ...] [--parallel P] [--gpu-free BYTES|auto] [--json]: "
               "memory and fit at another num_ctx, cache type or slot count.",
    )
    p.add_argument("--host", metavar="URL",
                   help="Ollama server, read like OLLAMA_HOST (default: $OLLAMA_HOST, else http://127.0.0.1:11434)")
    p.add_argument("--interval", "-n", type=float, default=None, metavar="SECONDS",
                   help="seconds between polls, 0.25–60 (default: 1)")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="bound on each API request (default: 3)")
    p.add_argument("--theme", default=None, metavar="NAME",
                   help="kvtop-dark (default), kvtop-light, kvtop-high-contrast, kvtop-mono, or a user theme")
    p.add_argument("--config", default=None, metavar="PATH", help="config file (default: <config dir>/config.toml)")
    p.add_argument("--print-config", action="store_true",
                   help="print the effective settings and where each came from, then exit")
    p.add_argument("--log", metavar="SPEC", default=None,
                   help="server log: auto (default), journal[:UNIT], journal-user[:UNIT], file:PATH, "
                        "docker:CONTAINER, - (stdin) or none")
    p.add_argument("--once", action="store_true", help="print one sample as a plain table and exit")
    p.add_argument("--json", action="store_true", help="with --once or --check: print JSON instead")
    p.add_argument("--check", action="store_true",
                   help="one sample, print the alerts, exit 0 (none), 1 (warnings) or 2 (critical or unreachable)")
    p.add_argument("--demo", action="store_true",
                   help="start the embedded stand-in Ollama server on 127.0.0.1 and watch it")
    p.add_argument("--demo-speed", type=float, default=1.0, metavar="X", help=argparse.SUPPRESS)
    p.add_argument("--readonly", action="store_true", default=None,
                   help="never send a request that changes the server (disables the what-if screen's load action)")
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
    from datetime import datetime, timezone

    from kvtop.model.state import apply, apply_gpu, initial_state
    from kvtop.report import state_json, state_text
    from kvtop.sources.gpu import GpuSource
    from kvtop.sources.ollama import OllamaClient
    from kvtop.sources.procs import ProcSource

    client = OllamaClient(settings.host_url, timeout_s=settings.timeout_s, show_timeout_s=settings.show_timeout_s)
    gpu_source = GpuSource()
    try:
        snap, gpu = await asyncio.gather(client.sample(wait_details=True), gpu_source.sample())
        procs = await ProcSource().sample(gpu.pids)
    finally:
        await client.aclose()
        await gpu_source.aclose()
    first, warnings = initial_state(settings.host_url, settings.alerts,
                                    datetime.now().astimezone().tzinfo or timezone.utc)
    for warning in warnings:
        print(f"kvtop: [alerts] {warning}", file=sys.stderr)
    state = apply_gpu(apply(first, snap), gpu, procs)
    if settings.extra.get("check") == "1":
        from kvtop.model.alerts import alert_json, exit_code
        from kvtop.report import alert_lines

        if settings.extra.get("json") == "1":
            sys.stdout.write(json.dumps({"reachable": bool(snap.reachable), "error": snap.error,
                                         "alerts": [alert_json(a) for a in state.alerts]}, indent=2) + "\n")
        else:
            lines = alert_lines(state) or ["kvtop: no alerts"]
            if not snap.reachable:
                lines.insert(0, f"kvtop: {settings.host_url}: unreachable: {snap.error}")
            sys.stdout.write("\n".join(lines) + "\n")
        return exit_code(state.alerts, bool(snap.reachable))
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
    if argv[:1] == ["plan"]:
        from kvtop.plan_cli import main_plan

        return main_plan(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    for stream in (sys.stdout, sys.stderr):  # a terminal without UTF-8 gets "?" instead of a traceback
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="replace")
    if args.json and not (args.once or args.check):
        parser.error("--json needs --once or --check")
    if args.check:
        args.once = True
    if args.demo and args.host is not None:
        parser.error("--demo watches its own stand-in server; leave out --host")
    for flag in ("interval", "timeout"):
        value = getattr(args, flag)
        if value is not None and not (0 < value < float("inf")):
            parser.error(f"--{flag} must be a positive number of seconds")
    env = dict(os.environ)
    if args.config:
        env["KVTOP_CONFIG"] = args.config
    flags = {k: getattr(args, k) for k in ("host", "interval", "timeout", "log", "theme", "readonly")}
    try:
        resolved = resolve_config(flags, env, saved_theme=saved_theme(env))
    except ConfigError as exc:
        parser.exit(EXIT_UNREACHABLE, f"kvtop: {exc}\n")
    values, origins = resolved.values, resolved.origins
    warnings = list(resolved.warnings)
    try:
        host_url = parse_ollama_host(values["host"], strict=origins["host"] != "env OLLAMA_HOST")
    except HostError as exc:
        if origins["host"] == "flag":
            parser.exit(EXIT_UNREACHABLE, f"kvtop: {exc}\n")
        warnings.append(f"host from {origins['host']}: {exc} — the default is used")
        host_url = parse_ollama_host(None)
    log_spec = values["log"]
    if origins["log"] == "default" and (args.demo or args.once):
        log_spec = "none"
    try:
        from kvtop.sources.tail import parse_log_spec

        parse_log_spec(log_spec)
    except ValueError as exc:
        if origins["log"] in ("flag",) or origins["log"].startswith("env"):
            parser.exit(EXIT_UNREACHABLE, f"kvtop: --log: {exc}\n")
        warnings.append(f"log from {origins['log']}: {exc} — no log is read")
        log_spec = "none"
    if args.once and origins["log"] != "default" and log_spec != "none":
        warnings.append(f"--once/--check read no server log: {log_spec} is ignored (the sample is /api/ps and NVML)")
    if args.print_config:
        print(config_report(resolved, host_url, log_spec, warnings), end="")
        return EXIT_OK
    for warning in warnings:
        print(f"kvtop: {warning}", file=sys.stderr)
    settings = Settings(
        host_url=host_url,
        interval_s=float(values["interval"]),
        timeout_s=max(0.1, float(values["timeout"])),
        demo=args.demo,
        readonly=bool(values["readonly"]),
        log_spec=log_spec,
        theme=str(values["theme"]),
        alerts=values["alerts"],
        extra={"json": "1" if args.json else "0", "check": "1" if args.check else "0",
               "warnings": "\n".join(warnings)},
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


def config_report(resolved: ResolvedConfig, host_url: str, log_spec: str, warnings: Sequence[str] = ()) -> str:
    """``--print-config``: every setting, its effective value and where it came from."""
    shown = dict(resolved.values)
    shown["host"] = host_url
    shown["log"] = log_spec
    lines = [f"config file: {resolved.path}{'' if resolved.path.exists() else ' (not present)'}"]
    for key in ("host", "interval", "timeout", "log", "theme", "readonly"):
        lines.append(f"{key:<9} {shown[key]!s:<40} {resolved.origins[key]}")
    if resolved.values.get("alerts"):
        lines.append(f"alerts    {dict(resolved.values['alerts'])}")
    for warning in warnings or resolved.warnings:
        lines.append(f"warning: {warning}")
    return "\n".join(lines) + "\n"


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

    log_source = None
    if settings.log_spec == "-":
        try:
            log_source = _stdin_log_with_keys_from_tty()
        except OSError as exc:
            print(f"kvtop: --log -: {exc}", file=sys.stderr)
            return EXIT_UNREACHABLE
    app = make_app(settings, log_source=log_source)
    app.run()
    return app.return_code or EXIT_OK


def _stdin_log_with_keys_from_tty() -> Any:
    """``ollama serve 2>&1 | kvtop --log -``: the pipe is the log, the keys come from the terminal.

    Textual reads keys from file descriptor 0, so the pipe is moved to a new descriptor for the
    log reader and the controlling terminal (``/dev/tty``) takes its place.

    Raises:
        OSError: stdin is a terminal (nothing is piped in), or there is no terminal for the keys.
    """
    from kvtop.sources.tail import StdinTail

    if os.isatty(0):
        raise OSError("nothing is piped into kvtop (stdin is the terminal); "
                      "use e.g. `ollama serve 2>&1 | kvtop --log -`, or --log file:PATH")
    log_fd = os.dup(0)
    tty_fd = os.open("/dev/tty", os.O_RDWR)
    os.dup2(tty_fd, 0)
    os.close(tty_fd)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's stdin, kept for its lifetime
    return StdinTail(log_fd)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
