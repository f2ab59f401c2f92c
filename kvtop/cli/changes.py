"""``kvtop changes [--host URL] [--since VERSION|TIME] [--now] [--json]``: what changed on a server —
restarts, upgrades, setting changes and each model's load facts — from the timeline kvtop keeps in
its state folder whenever it watches the server (``engine.timeline``, ``sources.timeline_store``).

The first line is the story, in the order things happened (``since 0.40.2: flash attention off →
KV f16 → spill``), then one line per change with its time, source mark and where it was read.
``--now`` first takes one sample of the server (and, for a server on this machine, its log's
newest lines), as ``--once`` does, so changes since kvtop last ran are found and kept. ``--json``
prints ``{"host", "timeline", "since", "story", "changes", "warning"}`` (``changes[]`` as in
``--once --json``, docs/json.md). Exit 0; 2 for a ``--since`` that cannot be read or a version
that is not in the timeline, or a server address that cannot be used.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from datetime import datetime
from typing import Any

from kvtop.cli.exits import EXIT_OK, EXIT_UNREACHABLE
from kvtop.config.files import state_dir
from kvtop.model.changes import Change, changes_since, parse_since, start_label, story
from kvtop.sources.timeline_store import TimelineStore, timeline_folder
from kvtop.textsafe import emit, safe, safe_block, safe_json

__all__ = ["main_changes", "render_changes"]


def build_parser() -> argparse.ArgumentParser:
    from kvtop.cli.access import add_access_arguments

    p = argparse.ArgumentParser(
        prog="kvtop changes",
        description="What changed on an Ollama server (restarts, upgrades, settings, each model's loads), "
        "from the timeline kvtop keeps in its state folder while it watches the server.",
    )
    p.add_argument(
        "--host", metavar="URL", default=None, help="Ollama server (default: $OLLAMA_HOST, else http://127.0.0.1:11434)"
    )
    p.add_argument(
        "--since",
        metavar="VERSION|TIME",
        default=None,
        help="only what changed after the server became VERSION (0.40.2), or after TIME "
        "(2026-12-01T09:00, UTC unless it says; or 2h, 30m, 1d back from now)",
    )
    p.add_argument("--now", action="store_true", help="take one sample of the server first (as --once does)")
    p.add_argument("--json", action="store_true", help="print a JSON object instead of the report")
    add_access_arguments(p)
    return p


def _when(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")


def render_changes(host: str, changes: tuple[Change, ...], *, since_label: str | None, path: str) -> str:
    """The report: the host, the story, one line per change (oldest first)."""
    out = [f"kvtop changes: {safe(host)}  (timeline {safe(path)})"]
    if not changes:
        out.append(
            "  nothing changed" + (f" since {safe(since_label)}" if since_label else "") + " while kvtop watched"
        )
        return "\n".join(out) + "\n"
    label = since_label or start_label(changes) or _when(changes[0].at)
    out.append(safe(story(changes, since=label), 2000))
    for c in changes:
        out.append(f"  {_when(c.at)}  {safe(c.text(), 300)}  ({safe(c.source)}, {c.origin})")
    return "\n".join(out) + "\n"


async def _sample(host: str, access: Any) -> tuple[Change, ...]:
    """One engine step of ``host`` (its log's newest lines too when it is on this machine); the
    timeline after it."""
    from kvtop.cli.outputs import sample_engine
    from kvtop.config import Settings

    settings = Settings(host_url=host, log_spec="auto", access={host: access})
    engine = sample_engine(settings)
    try:
        await engine.step(backlog=True)
        return engine.timeline.timeline(host)
    finally:
        await engine.aclose()


def main_changes(argv: list[str]) -> int:
    """``kvtop changes``; returns the exit code."""
    from kvtop.plan_cli import PlanError, server_access

    args = build_parser().parse_args(argv)
    try:
        host, access = server_access(args.host, strict=args.host is not None, args=args)
    except PlanError as exc:
        emit(f"kvtop changes: {exc}")
        return EXIT_UNREACHABLE
    since = None
    if args.since is not None:
        try:
            since = parse_since(args.since, time.time())
        except ValueError as exc:
            emit(f"kvtop changes: {exc}")
            return EXIT_UNREACHABLE
    store = TimelineStore(timeline_folder(state_dir()), host)
    if args.now:
        timeline = asyncio.run(_sample(host, access))
        warning = None  # the engine said it on stderr
    else:
        found = store.read()
        timeline, warning = found.changes, found.warning
        if warning:
            emit(f"kvtop changes: {warning}")
    shown: tuple[Change, ...] | None = timeline if since is None else changes_since(timeline, since)
    if shown is None:
        emit(
            f"kvtop changes: version {safe(str(args.since))} is not in the timeline of {safe(host)} "
            "(kvtop saw no upgrade to or from it); try a time: --since 2h"
        )
        return EXIT_UNREACHABLE
    label = args.since if since is not None else None
    if args.json:
        doc = {
            "host": store.url,
            "timeline": str(store.path),
            "since": label,
            "story": story(shown, since=label or start_label(shown)) if shown else "",
            "changes": [c.to_json() for c in shown],
            "warning": warning,
        }
        sys.stdout.write(safe_json(doc) + "\n")
    else:
        from kvtop.core.glyphs import output_wants_ascii, to_ascii

        text = render_changes(store.url, shown, since_label=label, path=str(store.path))
        if output_wants_ascii(os.environ, getattr(sys.stdout, "encoding", None), sys.flags.utf8_mode, sys._xoptions):
            text = to_ascii(text, keep_cells=False)  # no UTF-8 locale: the plain-text stand-ins (-> for →)
        sys.stdout.write(safe_block(text))
    return EXIT_OK
