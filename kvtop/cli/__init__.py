"""Command line: ``kvtop [--host URL] [--interval S] [--once [--json]] [--stream [--count N]] [--demo]``.

``main()`` returns an exit code: 0 on success, 2 when the server is unreachable in ``--once``
mode or the arguments are wrong, 1 when the demo server cannot start.

This module is the parser, ``main`` (which dispatches the subcommands) and ``--print-config``;
the parts: the access options the exporter and the planner share (``cli.access``, which imports
neither), ``--once``/``--check``/``--stream`` (``cli.outputs``), the dashboard's runs
(``cli.dashboard``), ``--demo``'s stand-in (``cli.demo``), the exit codes (``cli.exits``); import
their names from those modules.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any
from types import MappingProxyType

from kvtop import __version__
from kvtop.cli.access import ACCESS_HELP, access_options, add_access_arguments
from kvtop.cli.dashboard import _replay, _run
from kvtop.cli.demo import _show_busiest_step, demo_server
from kvtop.cli.exits import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_UNREACHABLE
from kvtop.cli.outputs import _stream
from kvtop.core.glyphs import output_wants_ascii
from kvtop.model.known import use_si_units
from kvtop.config import ResolvedConfig, Settings, resolve_config
from kvtop.config.files import ConfigError
from kvtop.config.host import HostError, parse_ollama_host
from kvtop.config.server_access import access_report, parse_host_access, server_accesses
from kvtop.config.ui_state import saved_theme
from kvtop.textsafe import emit, safe_block


SUBCOMMANDS_HELP = """\
subcommands (each has its own --help):
  kvtop inspect-log PATH|- [--json]
      read a whole server log and report every model load
  kvtop changes [--since VERSION|TIME] [--now] [--json]
      what changed on the server (restarts, upgrades, settings, loads)
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
        description="top for an Ollama server's memory: weights vs KV cache vs compute per model.\n"
        "Sizes are binary: 1 GiB = 2^30 bytes, 1 MiB = 2^20 bytes (ollama ps prints\n"
        "decimal GB: its 6.1 GB is kvtop's 5.7 GiB).",
        epilog=SUBCOMMANDS_HELP + "\n" + ACCESS_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--host",
        metavar="URL",
        action="append",
        help="Ollama server, read like OLLAMA_HOST (default: $OLLAMA_HOST, else http://127.0.0.1:11434); "
        "repeat it to watch several servers. A password here is visible to every local user (ps): "
        "use --password-file or --netrc",
    )
    add_access_arguments(p)
    p.add_argument(
        "--interval",
        "-n",
        type=float,
        default=None,
        metavar="SECONDS",
        help="seconds between polls, 0.25–60 (default: 1)",
    )
    p.add_argument(
        "--timeout", type=float, default=None, metavar="SECONDS", help="bound on each API request (default: 3)"
    )
    p.add_argument(
        "--theme",
        default=None,
        metavar="NAME",
        help="kvtop-dark (default), kvtop-light, kvtop-high-contrast, kvtop-mono, or a user theme",
    )
    p.add_argument("--config", default=None, metavar="PATH", help="config file (default: <config dir>/config.toml)")
    p.add_argument(
        "--print-config", action="store_true", help="print the effective settings and where each came from, then exit"
    )
    p.add_argument(
        "--log",
        metavar="SPEC",
        default=None,
        help="server log: auto (default), journal[:UNIT], journal-user[:UNIT], file:PATH, "
        "docker:CONTAINER, - (stdin) or none",
    )
    p.add_argument("--once", action="store_true", help="print one sample as a plain table and exit")
    p.add_argument("--json", action="store_true", help="with --once or --check: print JSON instead")
    p.add_argument(
        "--stream",
        action="store_true",
        help="print one --once --json object per interval, one a line (NDJSON), until stopped",
    )
    p.add_argument("--count", type=int, default=None, metavar="N", help="with --stream: stop after N objects")
    p.add_argument(
        "--check",
        action="store_true",
        help="one sample, print the alerts, exit 0 (none), 1 (warnings) or 2 (critical or unreachable)",
    )
    p.add_argument(
        "--demo", action="store_true", help="start the embedded stand-in Ollama server on 127.0.0.1 and watch it"
    )
    p.add_argument("--demo-speed", type=float, default=1.0, metavar="X", help=argparse.SUPPRESS)
    p.add_argument(
        "--record",
        metavar="FILE",
        default=None,
        help="write every sample and log batch to FILE as JSON Lines (gzip when FILE ends in .gz)",
    )
    p.add_argument(
        "--replay",
        metavar="FILE",
        default=None,
        help="play a recording instead of polling (FILE, or a bundled one: demo, incident)",
    )
    p.add_argument(
        "--readonly",
        action="store_true",
        default=None,
        help="never send a request that changes the server (disables the what-if screen's load action)",
    )
    p.add_argument(
        "--ascii",
        action="store_true",
        help="draw with ASCII only (bars # %% + . -, x for the times sign; the marks ~ ^ = * ? unchanged); "
        "on by itself when the locale is not UTF-8 (LC_ALL/LC_CTYPE/LANG, e.g. LANG=C)",
    )
    p.add_argument(
        "--si",
        action="store_true",
        help="write sizes in decimal units, as ollama ps (6.1 GB; default binary: 5.7 GiB); "
        "the history plots keep GiB, and JSON is bytes either way",
    )
    p.add_argument("--version", action="version", version=f"kvtop {__version__}")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kvtop`` console script; returns the process exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["inspect-log"]:
        from kvtop.inspect_log import main_inspect_log

        return main_inspect_log(argv[1:])
    if argv[:1] == ["changes"]:
        from kvtop.cli.changes import main_changes

        return main_changes(argv[1:])
    if argv[:1] == ["plan"]:
        from kvtop.plan_cli import main_plan

        return main_plan(argv[1:])
    if argv[:1] == ["export"]:
        from kvtop.export.command import main_export

        return main_export(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    use_si_units(args.si)  # before anything is written: every face's sizes
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
            warnings.append(
                f"host from {origins['host']}: {exc} — "
                f"{'it is left out' if len(values['host']) > 1 else 'the default is used'}"
            )
            continue
        if url not in host_urls:
            host_urls.append(url)
    if not host_urls:
        host_urls.append(parse_ollama_host(None))
    host_url = host_urls[0]
    try:
        access, access_warnings = server_accesses(
            [(u, *credentials.get(u, (None, None))) for u in host_urls],
            **access_options(args),
            servers=values.get("servers"),
            env=env,
            file_origin=str(resolved.path),
            host_origin=origins["host"],
        )
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
        extra={
            "json": "1" if args.json else "0",
            "check": "1" if args.check else "0",
            "ascii": "1"
            if args.ascii
            or output_wants_ascii(os.environ, getattr(sys.stdout, "encoding", None), sys.flags.utf8_mode, sys._xoptions)
            else "0",
            "warnings": "\n".join(warnings),
            "log_origin": origins["log"],
            "host_origin": origins["host"],
        },
    )
    try:
        if args.demo:
            try:
                # the dashboard follows the server log the stand-in writes (kvtop.demo.logwriter)
                demo_log = origins["log"] == "default" and not (args.once or args.stream)
                with (
                    tempfile.TemporaryDirectory(prefix="kvtop-demo-") as tmp,
                    demo_server(
                        args.demo_speed,
                        manual=args.once,
                        extra=["--log-file", os.path.join(tmp, "server.log")] if demo_log else [],
                    ) as url,
                ):
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


def config_report(
    resolved: ResolvedConfig,
    host_url: str,
    log_spec: str,
    warnings: Sequence[str] = (),
    access: Mapping[str, Any] | None = None,
) -> str:
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

    from kvtop.config.files import config_dir
    from kvtop.ui.themes import load_themes_reporting

    themes, _ = load_themes_reporting(config_dir() / "themes")
    if name in themes or name in BUILTIN_THEMES:
        return None
    return (
        f"unknown theme {name!r}; themes: {', '.join(themes)}, or one of Textual's {len(BUILTIN_THEMES)}"
        f" (textual-dark, nord, ...); your own go in {config_dir() / 'themes'}"
    )
