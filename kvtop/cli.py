"""Command line: ``kvtop [--host URL] [--interval S] [--once [--json]] [--stream [--count N]] [--demo]``.

``main()`` returns an exit code: 0 on success, 2 when the server is unreachable in ``--once``
mode or the arguments are wrong, 1 when the demo server cannot start.
"""

from __future__ import annotations

import argparse
import dataclasses
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any
from contextlib import contextmanager
from types import MappingProxyType

from kvtop import __version__
from kvtop.config import (
    ConfigError,
    HostError,
    ResolvedConfig,
    Settings,
    access_report,
    parse_host_access,
    parse_ollama_host,
    resolve_config,
    server_accesses,
    saved_theme,
)
from kvtop.textsafe import emit, safe_block, safe_json

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_UNREACHABLE = 2
EXIT_INTERRUPTED = 130


SUBCOMMANDS_HELP = """\
subcommands (each has its own --help):
  kvtop inspect-log PATH|- [--json]
      read a whole server log and report every model load
  kvtop plan MODEL [--ctx N]... [--kv TYPE]... [--gpu-free BYTES|auto] [--json]
      one model's memory and fit at other num_ctx, KV cache types or slot counts
  kvtop plan --all [--ctx N] [--kv TYPE] [--gpu-free BYTES|auto] [--json]
      the pre-flight: would each pulled model fit if loaded now; largest num_ctx
  kvtop export prometheus [--listen HOST:PORT] [--interval S]
      serve /metrics for Prometheus, headless
  kvtop export textfile PATH [--interval S] [--once]
      the same metrics written to PATH for node_exporter's textfile collector
      (atomically: temp file + rename; no port opened)

for other tools:
  kvtop --once --json          one sample as a JSON object (docs/json.md)
  kvtop --stream [--count N]   one such object per interval, one a line (NDJSON)
  kvtop --check [--json]       the alerts; exit 0 none, 1 warnings, 2 critical
"""
"""The ``kvtop --help`` epilog: every subcommand and machine-readable mode, one usage line each."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (every flag is documented in docs/reference.md)."""
    p = argparse.ArgumentParser(
        prog="kvtop",
        description="top for an Ollama server's memory: weights vs KV cache vs compute per model.",
        epilog=SUBCOMMANDS_HELP + "\n" + ACCESS_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--host", metavar="URL", action="append",
                   help="Ollama server, read like OLLAMA_HOST (default: $OLLAMA_HOST, else http://127.0.0.1:11434); "
                        "repeat it to watch several servers. A password here is visible to every local user (ps): "
                        "use --password-file or --netrc")
    add_access_arguments(p)
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
    p.add_argument("--stream", action="store_true",
                   help="print one --once --json object per interval, one a line (NDJSON), until stopped")
    p.add_argument("--count", type=int, default=None, metavar="N", help="with --stream: stop after N objects")
    p.add_argument("--check", action="store_true",
                   help="one sample, print the alerts, exit 0 (none), 1 (warnings) or 2 (critical or unreachable)")
    p.add_argument("--demo", action="store_true",
                   help="start the embedded stand-in Ollama server on 127.0.0.1 and watch it")
    p.add_argument("--demo-speed", type=float, default=1.0, metavar="X", help=argparse.SUPPRESS)
    p.add_argument("--record", metavar="FILE", default=None,
                   help="write every sample and log batch to FILE as JSON Lines (gzip when FILE ends in .gz)")
    p.add_argument("--replay", metavar="FILE", default=None,
                   help="play a recording instead of polling (FILE, or a bundled one: demo, incident)")
    p.add_argument("--readonly", action="store_true", default=None,
                   help="never send a request that changes the server (disables the what-if screen's load action)")
    p.add_argument("--version", action="version", version=f"kvtop {__version__}")
    return p


ACCESS_HELP = """\
credentials, kept off the command line (where every local user sees them, ps):
  OLLAMA_API_KEY=… kvtop             sent as Authorization: Bearer
  kvtop --host https://alice@gpu-box/ --password-file FILE
                                     basic auth; FILE's first line (chmod 600)
  kvtop --host https://gpu-box/ --netrc
                                     the machine entry of $NETRC or ~/.netrc
  config file [servers."URL"]        headers = { Authorization = "…" } or
                                     password_file = "…" (file chmod 600)
"""
"""How to give credentials, for the ``--help`` of every command that reaches a server."""


def access_options(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of ``config.server_accesses`` that come from :func:`add_access_arguments`'s
    flags (``headers``, ``cacert``, ``insecure``, ``password_file``, ``netrc``, ``netrc_file``)."""
    return {"headers": list(getattr(args, "header", None) or []), "cacert": getattr(args, "cacert", None),
            "insecure": bool(getattr(args, "insecure", False)), "password_file": getattr(args, "password_file", None),
            "netrc": bool(getattr(args, "netrc", False)), "netrc_file": getattr(args, "netrc_file", None)}


def add_access_arguments(p: argparse.ArgumentParser) -> None:
    """``--header``, ``--password-file``, ``--netrc``, ``--netrc-file``, ``--cacert`` and ``--insecure``:
    how to reach a server behind a proxy (the dashboard, ``kvtop plan`` and ``kvtop export`` take the
    same ones; :func:`access_options`, ``config.server_accesses``)."""
    p.add_argument("--password-file", metavar="FILE", default=None,
                   help="basic-auth password: the first line of FILE (chmod 600), for the user named in the URL "
                        "(--host https://alice@gpu-box/); keeps the password out of ps")
    p.add_argument("--netrc", action="store_true",
                   help="read the host's login and password from $NETRC or ~/.netrc (chmod 600), as curl -n")
    p.add_argument("--netrc-file", metavar="FILE", default=None, help="like --netrc, from FILE")
    p.add_argument("--header", action="append", default=[], metavar="'NAME: VALUE'",
                   help="send this header to the server (repeatable); a credential here is visible to every "
                        "local user (ps): prefer OLLAMA_API_KEY or the config file's [servers.\"URL\"] headers")
    tls = p.add_mutually_exclusive_group()
    tls.add_argument("--cacert", metavar="FILE", default=None,
                     help="trust the CA certificate(s) in this PEM file (instead of the system's) for https servers")
    tls.add_argument("--insecure", action="store_true",
                     help="do not verify the server's TLS certificate (said on screen while in use)")


@contextmanager
def demo_server(speed: float = 1.0, *, manual: bool = False, extra: Sequence[str] = ()) -> Iterator[str]:
    """Run the stand-in Ollama server (``kvtop.demo.server``) on a free loopback port.

    The server exits by itself if kvtop dies without stopping it (``--exit-with-parent``).
    ``extra``: more of its arguments (e.g. ``--scenario PATH --no-loop``).

    Yields:
        Its base URL, e.g. ``http://127.0.0.1:40321``.

    Raises:
        RuntimeError: The server did not announce ``LISTENING`` within 10 s.
    """
    cmd = [sys.executable, "-m", "kvtop.demo.server", "--port", "0", "--speed", str(speed), "--exit-with-parent"]
    proc = subprocess.Popen(
        cmd + (["--manual"] if manual else []) + list(extra),
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


def sample_engine(settings: Settings) -> Any:
    """The engine of ``--once``/``--check``/``--stream`` (``kvtop.engine``): every server, this
    machine (the demo's simulated one with ``--demo``), its runners' ``/slots``, the local server's
    health and pulled models. What it must say (a source that failed, what was read of the log)
    goes to stderr, as do the ``[alerts]`` threshold warnings; stdout stays the report.

    The GPU sample and the server log join the state of ``sources.hosts.local_host(settings.host_urls)``
    only: they describe the machine kvtop runs on. Each :meth:`~kvtop.engine.Engine.step` is one
    sample of everything with one apply step (one alert evaluation per server), so the log's
    event alerts (truncation, OOM, KV type not applied, …) count too; the states carry over
    between steps (``--stream``: history, rates and the decode speed from ``/slots`` are real).
    """
    from kvtop.engine import Engine, build_sources

    demo = _machine_sources(settings)
    sources = build_sources(settings, gpu=demo[0] if demo else None, procs=demo[1] if demo else None,
                            read_slots=True, server_info=True)
    engine = Engine(settings, sources)
    engine.on_notice(lambda notice: emit(f"kvtop: {notice.text}"))
    for warning in engine.warnings:
        emit(f"kvtop: {warning}")  # the warning starts with "[alerts]"
    return engine


async def _sample_states(settings: Settings) -> list[Any]:
    """One sample of every server and of this machine's GPUs, as ``AppState``s: one engine step
    that also reads the log's newest lines once (the dashboard's start bound, ``sources.tail_backlog``)."""
    engine = sample_engine(settings)
    try:
        return await engine.step(backlog=True)
    finally:
        await engine.aclose()


async def _sample_once(settings: Settings) -> int:
    """``--once`` / ``--check``: print one sample of every server; returns the exit code.

    With one server the output is unchanged from a single-host kvtop; with several, ``--json``
    wraps one object per server in ``{"hosts": [...]}`` and the text blocks follow each other.
    ``--once`` exits 2 when any server is unreachable; ``--check`` exits with the worst code.
    """
    from kvtop.report import state_text

    states = await _sample_states(settings)
    several = len(states) > 1
    if settings.extra.get("check") == "1":
        from kvtop.model.alerts import alert_json, exit_code
        from kvtop.report import alert_lines

        codes = [exit_code(st.alerts, bool(st.reachable)) for st in states]
        if settings.extra.get("json") == "1":
            objs = [{"host": st.host_url, "reachable": bool(st.reachable),
                     "error": st.ollama.error if st.ollama else "no poll made",
                     "hints": list(_hints(st, settings)),
                     "alerts": [alert_json(a) for a in st.alerts],
                     **({"tls": tls} if (tls := settings.access_for(st.host_url).tls_json()) is not None else {}),
                     "log": ({"source": st.log.source, "lines": st.log.lines, "ok": st.log.ok, "status": st.log.status}
                             if st.log.source is not None else None)} for st in states]
            out: Any = {"hosts": objs, "exit_code": max(codes)} if several else {
                k: v for k, v in objs[0].items() if k != "host"}
            sys.stdout.write(safe_json(out) + "\n")
        else:
            lines: list[str] = []
            for st in states:
                block = alert_lines(st) or ["kvtop: no alerts"]
                if not st.reachable:
                    block[:0] = [f"kvtop: {st.host_url}: unreachable: {st.ollama.error if st.ollama else ''}",
                                 *(f"  {hint}" for hint in _hints(st, settings))]
                tls_note = settings.access_for(st.host_url).tls_note  # --insecure / --cacert, said whenever in use
                if tls_note:
                    block.insert(0, f"kvtop: {st.host_url}: {tls_note}")
                if several:
                    block = [f"== {st.host_url}"] + [f"  {line}" for line in block]
                lines.extend(block)
            sys.stdout.write(safe_block("\n".join(lines) + "\n"))
        return max(codes)
    reachable = all(st.reachable for st in states)
    if settings.extra.get("json") == "1":
        sys.stdout.write(safe_json(once_json(states, settings)) + "\n")
    else:
        for i, st in enumerate(states):
            if i:
                sys.stdout.write("\n")
            out_stream = sys.stdout if st.reachable else sys.stderr
            tls = settings.access_for(st.host_url).tls_note  # --insecure / --cacert, said whenever in use
            if tls:
                out_stream.write(safe_block(f"kvtop: {st.host_url}: {tls}\n"))
            out_stream.write(safe_block(state_text(st, hints=_hints(st, settings))))
    return EXIT_OK if reachable else EXIT_UNREACHABLE


def once_json(states: Sequence[Any], settings: Settings) -> dict[str, Any]:
    """The ``--once --json`` object of one sample (docs/json.md): one server's object
    (``report.state_json`` and its ``hints``), or ``{"hosts": [...]}`` with several."""
    from kvtop.report import state_json

    docs = [{**state_json(st), "hints": list(_hints(st, settings))} for st in states]
    for doc, st in zip(docs, states):
        tls = settings.access_for(st.host_url).tls_json()  # {"verify": false} with --insecure, the CA file
        if tls is not None:
            doc["tls"] = tls
    return {"hosts": docs} if len(docs) > 1 else docs[0]


async def _stream(settings: Settings, count: int | None) -> int:
    """``--stream [--count N]``: one ``--once --json`` object per line (NDJSON) per interval.

    Each line is the whole ``--once --json`` object (:func:`once_json`, same schema) of one
    sample, written and flushed at once, so a reader sees whole lines as they come. Samples start
    every ``settings.interval_s`` seconds (a slow sample delays the next one, never doubles up);
    the states carry over (one engine, :func:`sample_engine`, one step per line), so rates and histories are real. A server that does
    not answer gives its object with ``reachable: false`` and the error, and the stream goes on.
    Stops after ``count`` objects, or on SIGINT/SIGTERM/SIGHUP (exit 0); a reader that goes away
    (``| head -3``) raises ``BrokenPipeError``, which ``main`` turns into exit 0.
    """
    import signal

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError, ValueError):  # pragma: no cover - Windows
            pass
    engine = sample_engine(settings)
    engine.follow_log()  # each step applies the lines read since the previous one
    written = 0
    next_at = loop.time()
    try:
        while not stop.is_set() and (count is None or written < count):
            sample = asyncio.ensure_future(engine.step())
            stopper = asyncio.ensure_future(stop.wait())
            await asyncio.wait((sample, stopper), return_when=asyncio.FIRST_COMPLETED)
            stopper.cancel()
            if not sample.done():
                sample.cancel()
                await asyncio.gather(sample, return_exceptions=True)
                break
            states = sample.result()
            sys.stdout.write(safe_json(once_json(states, settings), indent=None) + "\n")
            sys.stdout.flush()
            written += 1
            if count is not None and written >= count:
                break
            next_at = max(next_at + settings.interval_s, loop.time())
            try:
                await asyncio.wait_for(stop.wait(), timeout=max(0.0, next_at - loop.time()))
            except asyncio.TimeoutError:
                pass
    finally:
        await engine.aclose()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            try:
                loop.remove_signal_handler(sig)
            except (NotImplementedError, RuntimeError, ValueError):  # pragma: no cover
                pass
    return EXIT_OK


def _hints(state: Any, settings: Settings) -> tuple[str, ...]:
    """The way forward for an unreachable server (``model.hints``); empty when it answered."""
    from kvtop.model.hints import unreachable_hints

    if state.reachable:
        return ()
    snap = state.ollama
    return unreachable_hints(state.host_url, settings.extra.get("host_origin"),
                             snap.error_kind if snap is not None else None, demo=settings.demo,
                             error=snap.error if snap is not None else None)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kvtop`` console script; returns the process exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["inspect-log"]:
        from kvtop.inspect_log import main_inspect_log

        return main_inspect_log(argv[1:])
    if argv[:1] == ["plan"]:
        from kvtop.plan_cli import main_plan

        return main_plan(argv[1:])
    if argv[:1] == ["export"]:
        from kvtop.export.prometheus import main_export

        return main_export(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    for stream in (sys.stdout, sys.stderr):  # a terminal without UTF-8 gets "?" instead of a traceback
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="replace")
    if args.record and args.replay:
        parser.error("--record and --replay exclude each other")
    if args.record and (args.once or args.check):
        parser.error("--record records the dashboard; leave out --once/--check")
    if args.replay and (args.once or args.check or args.demo or args.host is not None or args.log is not None):
        parser.error("--replay plays a recording; leave out --host, --log, --demo, --once and --check")
    if args.stream and (args.once or args.check or args.record or args.replay):
        parser.error("--stream prints a sample per interval; leave out --once, --check, --record and --replay")
    if args.count is not None and not args.stream:
        parser.error("--count needs --stream")
    if args.count is not None and args.count < 1:
        parser.error("--count must be 1 or more")
    if args.json and not (args.once or args.check or args.stream):
        parser.error("--json needs --once, --check or --stream")
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
        parser.exit(EXIT_UNREACHABLE, safe_block(f"kvtop: {exc}\n"))
    values, origins = resolved.values, resolved.origins
    warnings = list(resolved.warnings)
    theme_problem = _unknown_theme(str(values["theme"]))
    if theme_problem and (origins["theme"] == "flag" or origins["theme"].startswith("env")):
        flag = "--theme" if origins["theme"] == "flag" else origins["theme"].removeprefix("env ")
        parser.exit(EXIT_UNREACHABLE, safe_block(f"kvtop: {flag}: {theme_problem}\n"))
    if theme_problem:  # from the config file or the saved choice: reported, the default is used
        warnings.append(f"theme from {origins['theme']}: {theme_problem} — kvtop-dark is used")
        resolved = dataclasses.replace(resolved, values=MappingProxyType({**values, "theme": "kvtop-dark"}))
        values = resolved.values
    host_urls: list[str] = []
    credentials: dict[str, tuple[str | None, str | None]] = {}
    for raw in values["host"] or (None,):
        try:
            url, user, password = parse_host_access(raw, strict=origins["host"] != "env OLLAMA_HOST")
            credentials.setdefault(url, (user, password))
        except HostError as exc:
            if origins["host"] == "flag":
                parser.exit(EXIT_UNREACHABLE, safe_block(f"kvtop: {exc}\n"))
            warnings.append(f"host from {origins['host']}: {exc} — "
                            f"{'it is left out' if len(values['host']) > 1 else 'the default is used'}")
            continue
        if url not in host_urls:
            host_urls.append(url)
    if not host_urls:
        host_urls.append(parse_ollama_host(None))
    host_url = host_urls[0]
    try:
        access, access_warnings = server_accesses(
            [(u, *credentials.get(u, (None, None))) for u in host_urls], **access_options(args),
            servers=values.get("servers"), env=env, file_origin=str(resolved.path), host_origin=origins["host"])
    except ConfigError as exc:
        parser.exit(EXIT_UNREACHABLE, safe_block(f"kvtop: {exc}\n"))
    warnings.extend(access_warnings)
    log_spec = values["log"]
    if origins["log"] == "default" and (args.demo or args.stream or (args.once and not args.check)):
        log_spec = "none"  # --check reads the log auto finds: a health check should see its events
    try:
        from kvtop.sources.tail import parse_log_spec

        parse_log_spec(log_spec)
    except ValueError as exc:
        if origins["log"] in ("flag",) or origins["log"].startswith("env"):
            parser.exit(EXIT_UNREACHABLE, safe_block(f"kvtop: --log: {exc}\n"))
        warnings.append(f"log from {origins['log']}: {exc} — no log is read")
        log_spec = "none"
    if args.print_config:
        sys.stdout.write(safe_block(config_report(resolved, ", ".join(host_urls), log_spec, warnings, access)))
        return EXIT_OK
    for warning in warnings:
        emit(f"kvtop: {warning}")
    settings = Settings(
        host_url=host_url,
        interval_s=float(values["interval"]),
        timeout_s=max(0.1, float(values["timeout"])),
        demo=args.demo,
        readonly=bool(values["readonly"]),
        log_spec=log_spec,
        theme=str(values["theme"]),
        alerts=values["alerts"],
        more_hosts=tuple(host_urls[1:]),
        access=access,
        extra={"json": "1" if args.json else "0", "check": "1" if args.check else "0",
               "warnings": "\n".join(warnings), "log_origin": origins["log"], "host_origin": origins["host"]},
    )
    try:
        if args.demo:
            try:
                # the dashboard follows the server log the stand-in writes (kvtop.demo.logwriter)
                demo_log = origins["log"] == "default" and not (args.once or args.stream)
                with tempfile.TemporaryDirectory(prefix="kvtop-demo-") as tmp, \
                        demo_server(args.demo_speed, manual=args.once,
                                    extra=["--log-file", os.path.join(tmp, "server.log")] if demo_log else []) as url:
                    settings = dataclasses.replace(settings, host_url=url)
                    if demo_log:
                        settings = dataclasses.replace(settings, log_spec=f"file:{os.path.join(tmp, 'server.log')}")
                    if args.once:
                        _show_busiest_step(url)
                    if args.stream:
                        return asyncio.run(_stream(settings, args.count))
                    return _run(settings, once=args.once, record=args.record)
            except RuntimeError as exc:
                emit(f"kvtop: {exc}")
                return EXIT_FAILED
        if args.replay:
            return _replay(settings, args.replay)
        if args.stream:
            return asyncio.run(_stream(settings, args.count))
        return _run(settings, once=args.once, record=args.record)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `kvtop --once | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except OSError as exc:  # e.g. stdout is /dev/full
        emit(f"kvtop: cannot write the output: {exc}")
        return EXIT_FAILED


def config_report(resolved: ResolvedConfig, host_url: str, log_spec: str, warnings: Sequence[str] = (),
                  access: Mapping[str, Any] | None = None) -> str:
    """``--print-config``: every setting, its effective value and where it came from; per server,
    what credentials are sent and how TLS is checked, every secret masked (``config.access_report``)."""
    shown = dict(resolved.values)
    shown["host"] = host_url
    shown["log"] = log_spec
    lines = [f"config file: {resolved.path}{'' if resolved.path.exists() else ' (not present)'}"]
    for key in ("host", "interval", "timeout", "log", "theme", "readonly"):
        lines.append(f"{key:<9} {shown[key]!s:<40} {resolved.origins[key]}")
    for url, server in (access or {}).items():
        lines.append(f"server    {url}: {access_report(server)}")
    if resolved.values.get("alerts"):
        lines.append(f"alerts    {dict(resolved.values['alerts'])}")
    from kvtop.model.alerts import Thresholds

    for warning in [*(warnings or resolved.warnings), *Thresholds.from_mapping(resolved.values.get("alerts"))[1]]:
        lines.append(f"warning: {warning}")
    return "\n".join(lines) + "\n"


def _unknown_theme(name: str) -> str | None:
    """None when ``name`` is a theme the dashboard can show (bundled, the user's own in
    ``<config dir>/themes``, or one of Textual's), else the sentence saying which exist."""
    if name in ("kvtop-dark", "kvtop-mono"):  # the default and the NO_COLOR choice: no theme files read
        return None
    from textual.theme import BUILTIN_THEMES

    from kvtop.config import config_dir
    from kvtop.ui.themes import load_themes_reporting

    themes, _ = load_themes_reporting(config_dir() / "themes")
    if name in themes or name in BUILTIN_THEMES:
        return None
    return (f"unknown theme {name!r}; themes: {', '.join(themes)}, or one of Textual's {len(BUILTIN_THEMES)}"
            f" (textual-dark, nord, ...); your own go in {config_dir() / 'themes'}")


def _show_busiest_step(url: str) -> None:
    """For ``--demo --once``: jump the stand-in to the step with the most models loaded."""
    import httpx

    from kvtop.demo.server import load_default_scenario

    steps = load_default_scenario().steps
    busiest = max(range(len(steps)), key=lambda i: len(steps[i].loaded))
    httpx.post(f"{url}/_standin/advance", json={"to": busiest}, timeout=5, trust_env=False)


def _replay(settings: Settings, name: str) -> int:
    """``--replay FILE|NAME``: the dashboard over a recording; exit 2 when it cannot be read."""
    from kvtop.sources.replay import RecordingError, open_recording, resolve_recording
    from kvtop.ui.app import make_app

    try:
        recording = open_recording(resolve_recording(name))  # streamed: records are read as they play
    except RecordingError as exc:
        emit(f"kvtop: --replay: {exc}")
        return EXIT_UNREACHABLE
    header = recording.header
    log_spec = header.sources.get("log")
    settings = dataclasses.replace(
        settings, host_url=header.host_url, demo=False, readonly=True,
        log_spec=log_spec if isinstance(log_spec, str) else "none")
    app = make_app(settings, replay=recording)
    app.run()
    return app.return_code or EXIT_OK


def _attach_recorder(app: Any, path: str) -> str | None:
    """``--record FILE``: create FILE with its header and hand it to ``app``; the error text, or None."""
    from kvtop.sources.replay import Recorder, recording_header

    header = recording_header(
        hosts=app.hosts, log_spec=app.settings.log_spec, gpu=app.gpu_source is not None, demo=app.settings.demo,
        naive_tz=app.state.naive_tz, thresholds=app.state.thresholds, started_at=time.time())
    try:
        app.recorder = Recorder.create(path, header)
    except FileExistsError:
        if os.path.isdir(path):
            return f"--record: {path} is a directory: name a file in it, e.g. {os.path.join(path, 'kvtop.jsonl.gz')}"
        return f"--record: {path} exists: kvtop never overwrites a recording; pick another name"
    except OSError as exc:
        return f"--record: cannot write {path}: {exc.strerror or exc}"
    return None


def _run(settings: Settings, *, once: bool, record: str | None = None) -> int:
    if once:
        return asyncio.run(_sample_once(settings))
    from kvtop.ui.app import make_app

    log_source = None
    if settings.log_spec == "-":
        try:
            log_source = _stdin_log_with_keys_from_tty()
        except OSError as exc:
            emit(f"kvtop: --log -: {exc}")
            return EXIT_UNREACHABLE
    demo = _machine_sources(settings)
    app = make_app(settings, log_source=log_source, gpu_source=demo[0] if demo else None,
                   proc_source=demo[1] if demo else None)
    if record:
        problem = _attach_recorder(app, record)
        if problem:
            emit(f"kvtop: {problem}")
            return EXIT_UNREACHABLE
    app.run()
    return app.return_code or EXIT_OK


def _machine_sources(settings: Settings) -> tuple[Any, Any] | None:
    """``--demo``: the scenario's machine (its simulated GPU, RAM and processes; nothing of this host),
    else None (this machine's GPU and process sources)."""
    if not settings.demo:
        return None
    from kvtop.demo.machine import DemoMachineSource

    machine = DemoMachineSource(settings.host_url)
    return machine, machine.procs_source()


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
