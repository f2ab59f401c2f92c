"""The dashboard's one-line texts, built from a state (pure: no widget, no app): the alerts bar,
the server switcher's row, the log status line.

Text from the server or the log is data: every name and message goes through ``format.safe``
(``rich.text.Text`` content, never markup).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from rich.text import Text

from kvtop.model.logstate import LogState
from kvtop.model.views import AppState
from kvtop.ui.alert_age import alert_age, state_clock
from kvtop.ui.format import safe

__all__ = ["ServerOverview", "alert_bar", "log_line", "overview_key", "server_overview", "servers_bar"]


def alert_bar(state: AppState, colors: dict[str, str], width: int = 200, *, listed_below: bool = False) -> Text:
    """The most severe alert in one line with its age (``▲ prompt truncated qwen3:1.7b · 3 min: …``;
    the age on the state's clock, ``alert_age.state_clock``), its first fix that fits in a second
    line, and how many more; each line cut to ``width`` cells. ``listed_below``: the alerts panel or
    the events pane already lists every alert on screen, so a count without a fix says ``+N more
    below`` instead of sending the user to ``l`` (which would hide the events pane)."""
    text = Text()
    if not state.alerts:
        return text
    top = state.alerts[0]
    style = {"critical": "kv-crit", "warning": "kv-warn"}.get(top.severity, "kv-muted")
    text.append(
        f"{'✖' if top.severity == 'critical' else '▲' if top.severity == 'warning' else 'ℹ'} ",
        style=f"bold {colors.get(style, '')}",
    )
    text.append(f"{top.kind.replace('_', ' ')}", style=f"bold {colors.get(style, '')}")
    if top.model:
        text.append(f" {safe(top.model, 40)}", style="bold")
    age = alert_age(top, state_clock(state))
    if age is not None:
        text.append(f" · {age}")
    text.append(f": {safe(top.message, 200)}")
    text.truncate(max(10, width), overflow="ellipsis")
    fix = next((f for f in top.fixes if f.fits), None)
    more = len(state.alerts) - 1
    if fix is not None or more:
        second = Text()
        if more:
            second.append(
                # with a fix the line is the fix's (no pointer); else where the others are
                f"+{more} more{' · ' if fix is not None else ' below' if listed_below else ' (l: all alerts)'}",
                style=colors.get("kv-muted", ""),
            )
        if fix is not None:
            second.append(f"fix: {safe(fix.action, 60)} — {safe(fix.detail, 100)}", style=colors.get("kv-ok", ""))
        second.truncate(max(10, width), overflow="ellipsis")
        text = Text("\n").join([text, second])
    return text


@dataclasses.dataclass(frozen=True, slots=True)
class ServerOverview:
    """One server's compact row in the switcher: what an operator scans across boxes."""

    host: str
    selected: bool
    status: str
    """``up``, ``down``, ``error`` or ``connecting``."""
    models: int
    spilled: int
    critical: int
    warnings: int


def overview_key(state: AppState) -> tuple[object, ...]:
    """What the switcher's row of ``state`` is made of: the row is built again only when it changes."""
    snap = state.ollama
    return (
        None if snap is None else (snap.reachable, snap.error_kind),
        len(state.models),
        sum(1 for m in state.models if m.spilled),
        tuple((a.kind, a.severity) for a in state.alerts),
    )


def server_overview(state: AppState, selected: bool) -> ServerOverview:
    """The overview row of one server's state."""
    snap = state.ollama
    if snap is None:
        status = "connecting"
    elif snap.reachable:
        status = "up"
    else:
        status = "error" if snap.error_kind in ("http", "invalid_json", "invalid_shape", "other") else "down"
    return ServerOverview(
        host=state.host_url,
        selected=selected,
        status=status,
        models=len(state.models),
        spilled=sum(1 for m in state.models if m.spilled),
        critical=sum(1 for a in state.alerts if a.severity == "critical"),
        warnings=sum(1 for a in state.alerts if a.severity == "warning"),
    )


def servers_bar(rows: Sequence[ServerOverview], colors: Mapping[str, str], width: int = 200) -> Text:
    """The server switcher: one compact entry per server (number, host, state, models, alerts),
    the one on screen in reverse video. When the full entries do not fit in ``width`` cells a
    terse form is used (``3m`` models, ``⇣1`` spilled, hosts shortened to what tells them apart)."""
    from urllib.parse import urlsplit

    from kvtop.config.host import display_host

    def build(verbose: bool) -> Text:
        names = [display_host(r.host) for r in rows]
        if not verbose:
            parts = [urlsplit(r.host) for r in rows]
            if len({p.hostname for p in parts}) == 1 and len({p.port for p in parts}) == len(parts):
                names = [f":{p.port}" for p in parts]  # one machine, several ports
            elif len({p.hostname for p in parts}) == len(parts):
                names = [p.hostname or n for p, n in zip(parts, names)]
        text = Text(no_wrap=True, overflow="ellipsis")
        for i, (row, name) in enumerate(zip(rows, names), 1):
            if i > 1:
                text.append(" │ ", style=colors.get("kv-muted", ""))
            entry = Text()
            entry.append(f"{i} " if i <= 9 else "  ", style="bold")
            entry.append(safe(name, 40 if verbose else 20))
            mark = {"up": ("●", "kv-ok"), "connecting": ("…", "kv-muted")}.get(row.status, ("✖", "kv-crit"))
            entry.append(f" {mark[0]}", style=colors.get(mark[1], ""))
            if row.status == "up":
                entry.append(f" {row.models} model{'s' if row.models != 1 else ''}" if verbose else f"{row.models}m")
                if row.spilled:
                    entry.append(
                        f" {row.spilled} spilled" if verbose else f" ⇣{row.spilled}", style=colors.get("kv-crit", "")
                    )
            elif row.status != "connecting":
                entry.append(f" {row.status}", style=colors.get("kv-crit", ""))
            if row.critical:
                entry.append(f" ✖{row.critical}", style=f"bold {colors.get('kv-crit', '')}")
            if row.warnings:
                entry.append(f" ▲{row.warnings}", style=f"bold {colors.get('kv-warn', '')}")
            if row.selected:
                entry.stylize("reverse")
            text.append_text(entry)
        return text

    text = build(True)
    if text.cell_len > width:
        text = build(False)
    text.truncate(max(10, width), overflow="ellipsis")
    return text


def log_line(log: LogState, spec: str) -> Text:
    """The one-line log status under the table."""
    text = Text(no_wrap=True, overflow="ellipsis")
    if spec == "none" and log.source is None:
        text.append("Server log: off (--log none): no figure is allocated; each says its source")
        return text
    text.append(f"Server log: {safe(log.source or spec, 60)}")
    if log.status:
        text.append(f" — {safe(log.status, 160)}")
    else:
        text.append(
            f" · {log.lines:,} line{'s' if log.lines != 1 else ''} · {len(log.loads)} load{'s' if len(log.loads) != 1 else ''}"
            " · l: events"
        )
    if log.dropped_lines:  # history skipped at start, and noise shed under overload
        text.append(f" · {log.dropped_lines:,} dropped")
    return text
