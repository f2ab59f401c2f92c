"""The ``kvtop export`` command line: ``prometheus`` serves ``/metrics``, ``textfile`` writes a file.

Usage::

    kvtop export prometheus [--listen HOST:PORT] [--host URL ...] [--interval S] [--timeout S]
                            [--log SPEC] [--config PATH]
    kvtop export textfile PATH [--once] [--host URL ...] [--interval S] [--timeout S] [--log SPEC]

Headless (no TUI). This module resolves the settings, builds the sources once
(``kvtop.engine.build_sources``) and runs the pieces beside it: the loop that polls and publishes
each host's view (``kvtop.export.exporter``), the metric families (``kvtop.export.metrics``), the
HTTP server (``kvtop.export.http_server``) or the textfile writer (``kvtop.export.textfile``).
The server log (``--log``; default ``none``) is the log of the first ``--host``; GPU and process
telemetry are sampled only when a host is on this machine (:func:`host_is_this_machine`).

Exit status: 0 after SIGTERM or SIGINT; 2 for bad arguments or an address it cannot listen on;
``textfile --once``: 0 once written, 2 when it cannot be written or a server's TLS certificate or
credentials were refused (written all the same, the error said on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import signal
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from kvtop.config import resolve_config
from kvtop.config.files import ConfigError
from kvtop.config.host import HostError, parse_ollama_host
from kvtop.config.server_access import parse_host_access, server_accesses
from kvtop.export.exporter import Exporter, HostPoller, say
from kvtop.export.http_server import MetricsServer
from kvtop.export.metrics import make_registry
from kvtop.export.textfile import TEXTFILE_FIRST_WAIT_S, write_textfile_forever
from kvtop.sources.hosts import host_is_this_machine, local_addresses

EXIT_OK = 0
EXIT_ERROR = 2

DEFAULT_LISTEN = "127.0.0.1:9877"
"""Where ``/metrics`` is served unless ``--listen`` says otherwise (loopback only)."""


# --------------------------------------------------------------------------------------------
# Command line


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` → ``(host, port)``: ``127.0.0.1:9877``, ``[::1]:9877``, ``:9877`` (every interface).

    Raises:
        ValueError: No port, a port outside 0–65535, or an IPv6 address without brackets.
    """
    s = text.strip()
    if s.startswith("["):
        end = s.find("]")
        if end < 0 or s[end + 1 : end + 2] != ":":
            raise ValueError(f"{text!r}: expected [IPV6]:PORT, e.g. [::1]:9877")
        host, port_text = s[1:end], s[end + 2 :]
        try:
            ipaddress.IPv6Address(host.split("%", 1)[0])
        except ValueError:
            raise ValueError(f"{text!r}: {host!r} is not an IPv6 address") from None
    else:
        host, sep, port_text = s.rpartition(":")
        if not sep:
            raise ValueError(f"{text!r}: expected HOST:PORT, e.g. 127.0.0.1:9877")
        if ":" in host:
            raise ValueError(f"{text!r}: an IPv6 address goes in brackets, e.g. [::1]:9877")
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"{text!r}: the port must be a number 0–65535")
    if any(c.isspace() for c in host):
        raise ValueError(f"{text!r}: the host has a space in it")
    return host or "0.0.0.0", int(port_text)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError("must be a positive number of seconds")
    return value


def build_parser() -> argparse.ArgumentParser:
    """Arguments of ``kvtop export``."""
    p = argparse.ArgumentParser(
        prog="kvtop export",
        description="Export kvtop's per-model memory figures (weights / KV / compute, spill, context, slots), "
        "headless: 'prometheus' serves /metrics (each server is polled once per interval, however "
        "many scrapers); 'textfile' writes the same metrics to PATH for node_exporter's textfile "
        "collector, atomically (temp file + rename), every interval or --once, and opens no port.",
        epilog="examples: kvtop export prometheus --listen 0.0.0.0:9877 --host http://gpu1:11434 --host "
        "http://gpu2:11434;  kvtop export textfile /var/lib/node_exporter/textfile/kvtop.prom --interval 15",
    )
    p.add_argument(
        "format",
        choices=("prometheus", "textfile"),
        help="what to export: prometheus (serve GET /metrics) or textfile (write PATH for "
        "node_exporter's textfile collector; no port is opened)",
    )
    p.add_argument(
        "path",
        nargs="?",
        default=None,
        metavar="PATH",
        help="textfile: the file to write, e.g. /var/lib/node_exporter/textfile/kvtop.prom",
    )
    p.add_argument(
        "--once",
        action="store_true",
        help="textfile: poll every server once, write PATH and exit (2 when a server's TLS certificate "
        "or credentials were refused: the file is written, the error said on stderr)",
    )
    p.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help=f"address to serve /metrics on (default {DEFAULT_LISTEN}; IPv6 as [::1]:9877; port 0: any free one)",
    )
    p.add_argument(
        "--host",
        action="append",
        metavar="URL",
        help="Ollama server, read like OLLAMA_HOST; repeat it for several "
        "(default: config/OLLAMA_HOST, else http://127.0.0.1:11434)",
    )
    p.add_argument(
        "--interval",
        "-n",
        type=_positive,
        default=None,
        metavar="SECONDS",
        help="seconds between polls of each server, 0.25–60 (default: config, else 1)",
    )
    p.add_argument(
        "--timeout",
        type=_positive,
        default=None,
        metavar="SECONDS",
        help="deadline of each API request (default: config, else 3)",
    )
    p.add_argument(
        "--log",
        default=None,
        metavar="SPEC",
        help="server log of the first --host: auto, journal[:UNIT], journal-user[:UNIT], file:PATH, "
        "docker:CONTAINER, - (stdin) or none (default: none)",
    )
    p.add_argument("--config", default=None, metavar="PATH", help="config file (default: <config dir>/config.toml)")
    from kvtop.cli.access import add_access_arguments

    add_access_arguments(p)  # --header, --password-file, --netrc, --cacert, --insecure: as the dashboard's
    return p


def _hosts(
    args: argparse.Namespace,
    resolved_host: Any,
    origin: str,
    fail: Callable[[str], NoReturn],
    credentials: dict[str, tuple[str | None, str | None]] | None = None,
) -> tuple[list[str], list[str]]:
    """The servers to poll (deduplicated, typed order first) and warnings about dropped ones.
    ``credentials`` receives each URL's ``(user, password)`` taken out of it (``config.parse_host_access``)."""
    warnings: list[str] = []
    urls: list[str] = []
    creds = credentials if credentials is not None else {}
    if args.host:
        for raw in args.host:
            try:
                url, user, password = parse_host_access(raw, strict=True)
            except HostError as exc:
                fail(f"--host: {exc}")
            creds.setdefault(url, (user, password))
            if url not in urls:
                urls.append(url)
        return urls, warnings
    raws: Sequence[str | None] = (
        (resolved_host,) if resolved_host is None or isinstance(resolved_host, str) else tuple(resolved_host)
    )
    for raw in raws:
        try:
            url, user, password = parse_host_access(raw, strict=origin != "env OLLAMA_HOST")
        except HostError as exc:
            warnings.append(f"host from {origin}: {exc} — it is left out")
            continue
        creds.setdefault(url, (user, password))
        if url not in urls:
            urls.append(url)
    return (urls or [parse_ollama_host(None)]), warnings


def main_export(argv: Sequence[str]) -> int:
    """``kvtop export prometheus ...`` / ``kvtop export textfile PATH ...``; returns the exit code
    (0 after SIGTERM/SIGINT or a ``--once`` write, 2 on bad input or a PATH that cannot be written)."""
    parser = build_parser()
    args = parser.parse_args(list(argv))

    def fail(message: str) -> NoReturn:
        parser.exit(EXIT_ERROR, f"kvtop export: {message}\n")

    if args.format == "textfile" and not args.path:
        fail("textfile needs the PATH to write, e.g. kvtop export textfile /var/lib/node_exporter/textfile/kvtop.prom")
    if args.format == "prometheus" and (args.path or args.once):
        fail("prometheus serves /metrics: leave out PATH and --once (those are for textfile)")
    if args.format == "textfile" and args.listen != DEFAULT_LISTEN:
        fail("textfile opens no port: leave out --listen")

    try:
        listen_host, listen_port = parse_listen(args.listen)
    except ValueError as exc:
        fail(f"--listen {exc}")
    env = dict(os.environ)
    if args.config:
        env["KVTOP_CONFIG"] = args.config
    try:
        resolved = resolve_config({"interval": args.interval, "timeout": args.timeout}, env)
    except ConfigError as exc:
        fail(str(exc))
    values, origins = resolved.values, resolved.origins
    credentials: dict[str, tuple[str | None, str | None]] = {}
    hosts, warnings = _hosts(args, values["host"], origins["host"], fail, credentials)
    try:
        from kvtop.cli.access import access_options

        access, access_warnings = server_accesses(
            [(u, *credentials.get(u, (None, None))) for u in hosts],
            **access_options(args),
            servers=values.get("servers"),
            env=env,
            file_origin=str(resolved.path),
            host_origin="flag" if args.host else origins["host"],
        )
    except ConfigError as exc:
        fail(str(exc))
    warnings = list(resolved.warnings) + warnings + access_warnings
    warnings += [f"{url}: {a.tls_note}" for url, a in access.items() if a.tls_note]  # --insecure / --cacert in use
    log_spec = args.log if args.log is not None else "none"
    from kvtop.sources.tail import parse_log_spec

    try:
        spec = parse_log_spec(log_spec)
    except ValueError as exc:
        fail(f"--log: {exc}")
    interval_s = float(values["interval"])
    timeout_s = max(0.1, float(values["timeout"]))

    from kvtop.config import Settings
    from kvtop.engine import build_sources

    addresses = local_addresses()
    local_urls = [url for url in hosts if host_is_this_machine(url, addresses=addresses)]
    settings = Settings(
        host_url=hosts[0],
        more_hosts=tuple(hosts[1:]),
        interval_s=interval_s,
        timeout_s=timeout_s,
        show_timeout_s=max(timeout_s, 10.0),
        alerts=values["alerts"],
        access=access,
        log_spec=log_spec,
    )
    # the one factory (kvtop.engine): each server's client with its access options, the log, and
    # this machine's GPU, processes and /slots only when a host is on this machine
    sources = build_sources(settings, machine=bool(local_urls))
    pollers = [
        HostPoller(
            url,
            sources.servers[url],
            local=url in local_urls,
            alerts=values["alerts"],
            log=(i == 0 and spec.kind != "none"),
            tls_verified=(not access[url].insecure) if access[url].https else None,
        )
        for i, url in enumerate(hosts)
    ]
    warnings.extend(pollers[0].warnings)  # each starts with "[alerts]"
    if spec.kind in ("auto", "journal", "docker") and not pollers[0].view.local:
        warnings.append(
            f"--log {log_spec} reads this machine's log, but {hosts[0]} is not on this machine: "
            "its figures may be another server's"
        )
    exporter = Exporter(
        pollers,
        interval_s=interval_s,
        gpu_source=sources.gpu,
        proc_source=sources.procs,
        log_source=sources.log,
        slots_source=sources.slots,
        conns_source=sources.conns,
    )
    if args.format == "textfile":
        return _main_textfile(
            exporter,
            args.path,
            once=args.once,
            warnings=warnings,
            fail=fail,
            log=str(spec),
            hosts=hosts,
            timeout_s=timeout_s,
        )
    registry = make_registry(exporter.collector)

    try:
        httpd = MetricsServer(registry, listen_host, listen_port, cache=exporter.cache)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        fail(f"cannot listen on {_url_host(listen_host)}:{listen_port}: {reason}")
    httpd.start()
    for warning in warnings:
        say(warning)
    port = httpd.port
    local = [p.url for p in pollers if p.view.local]
    say(
        f"serving Prometheus metrics on http://{_url_host(listen_host)}:{port}/metrics — "
        f"polling {', '.join(hosts)} every {interval_s:g} s; log: {spec}; "
        f"GPU telemetry: {'joined to ' + ', '.join(local) if local else 'off (no host on this machine)'}"
    )
    try:
        asyncio.run(_serve(exporter))
    except KeyboardInterrupt:  # Ctrl+C before the loop's own handler was installed
        pass
    finally:
        httpd.close()
    return EXIT_OK


async def _serve(exporter: Exporter) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # a closed terminal, too
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError, ValueError):  # pragma: no cover - Windows
            pass
    await exporter.run(stop)


def _main_textfile(
    exporter: Exporter,
    path: str,
    *,
    once: bool,
    warnings: Sequence[str],
    fail: Callable[[str], NoReturn],
    log: str,
    hosts: Sequence[str],
    timeout_s: float,
) -> int:
    """``kvtop export textfile PATH``: poll as the HTTP exporter does, write PATH instead of serving."""
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        fail(f"textfile: {path} is a directory: name a file in it, e.g. {os.path.join(path, 'kvtop.prom')}")
    if not os.path.isdir(directory):
        fail(f"textfile: the directory {directory} does not exist")
    if not os.access(directory, os.W_OK | os.X_OK):
        fail(f"textfile: cannot write in {directory} (permission denied)")
    for warning in warnings:
        say(warning)
    if not path.endswith(".prom"):
        say(f"{path} does not end in .prom: node_exporter's textfile collector reads *.prom files only")
    local = [p.url for p in exporter.pollers if p.view.local]
    say(
        f"writing Prometheus metrics to {path} "
        f"{'once' if once else f'every {exporter.interval_s:g} s'} — polling {', '.join(hosts)}; log: {log}; "
        f"GPU telemetry: {'joined to ' + ', '.join(local) if local else 'off (no host on this machine)'}"
    )
    problem: list[str | None] = [None]

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            try:
                loop.add_signal_handler(sig, stop.set)
            except (NotImplementedError, RuntimeError, ValueError):  # pragma: no cover - Windows
                pass
        polling = asyncio.create_task(exporter.run(stop))
        try:
            problem[0] = await write_textfile_forever(
                exporter, path, stop, once=once, first_wait_s=2 * timeout_s + TEXTFILE_FIRST_WAIT_S
            )
        finally:
            stop.set()
            await polling

    try:
        asyncio.run(run())
    except KeyboardInterrupt:  # Ctrl+C before the loop's own handler was installed
        pass
    if problem[0] is not None:
        say(problem[0])
        return EXIT_ERROR
    if once and any(p.access_error() is not None for p in exporter.pollers):
        return EXIT_ERROR  # written (kvtop_server_up 0), but a certificate or credentials need fixing: said above
    return EXIT_OK
