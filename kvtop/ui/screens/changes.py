"""What changed (``c``): the server's timeline — restarts, upgrades, setting changes, each model's
load facts — newest first, under the story of what followed what (``version 0.33.0 → flash
attention off → KV f16 → spill``). The changes are the engine's (``engine.timeline``: this run's
and the ones kept in the state folder from earlier runs; ``kvtop changes`` prints the same). Also
:func:`with_change_markers`, which puts each change on the history plots (``h``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime
from itertools import groupby

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from kvtop.model.changes import Change, start_label, story
from kvtop.ui.format import safe
from kvtop.ui.widgets.plot import PlotMarker, PlotSpec

__all__ = ["ChangesScreen", "changes_text", "with_change_markers"]

MAX_LISTED = 500


def changes_text(host: str, changes: Sequence[Change], colors: dict[str, str] | None = None) -> Text:
    """The screen's body: a title, the story, then one line per change, newest first
    (time, ``restart``/``changed``, the change, its source mark and where it was read)."""
    colors = colors or {}
    out = Text()
    out.append(f"What changed · {safe(host, 80)}\n", style="bold")
    if not changes:
        out.append(
            "nothing changed while kvtop watched this server (restarts, upgrades, settings and loads "
            "are kept in the state folder across runs)\n",
            style=colors.get("kv-muted", ""),
        )
        return out
    first = start_label(changes) or datetime.fromtimestamp(changes[0].at).strftime("%Y-%m-%d %H:%M")
    out.append(safe(story(changes, since=first), 2000) + "\n\n")
    for c in list(reversed(changes))[:MAX_LISTED]:
        when = datetime.fromtimestamp(c.at).strftime("%Y-%m-%d %H:%M:%S")
        kind = "restart" if c.restart else "changed"
        out.append(f"{when}  ")
        out.append(f"{kind:<8}", style=f"bold {colors.get('kv-warn', '')}" if c.restart else "")
        out.append(f" {safe(c.text(), 300)}")
        out.append(f"  ({c.source}, {c.origin})\n", style=colors.get("kv-muted", ""))
    return out


def with_change_markers(spec: PlotSpec, changes: Sequence[Change], end_s: float | None) -> PlotSpec:
    """``spec`` with a marker at each second something changed within its window (the story of that
    second as its legend text: ``restart → KV f16``); the same spec when none falls in it."""
    if end_s is None or spec.empty is not None or not changes:
        return spec
    start_s = end_s - spec.span_s
    inside = [c for c in changes if start_s <= c.at <= end_s]
    if not inside:
        return spec
    marks = tuple(
        PlotMarker(
            group[0].at - end_s, story(group), "kv-warn" if any(c.restart for c in group) else "primary", "heavy"
        )
        for group in (list(g) for _, g in groupby(inside, key=lambda c: int(c.at)))
    )
    return dataclasses.replace(spec, markers=(*spec.markers, *marks))


class ChangesScreen(Screen[None]):
    """The server's timeline (all its changes kept, newest first); Esc or q closes."""

    DEFAULT_CSS = """
    ChangesScreen VerticalScroll { padding: 0 1; }
    """
    BINDINGS = [Binding("escape,q,c", "close", "Back")]

    def __init__(self, host: str, timeline: Sequence[Change]) -> None:
        super().__init__()
        self.host = host
        self.timeline = tuple(timeline)

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(id="changes-body")
        yield Footer()

    def on_mount(self) -> None:
        self.watch(self.app, "state", lambda _state: self.refresh_changes(), init=False)
        self.refresh_changes()

    def refresh_changes(self) -> None:
        """Show the timeline given, joined by the newer changes of the state on screen."""
        state = getattr(self.app, "state", None)
        recent = tuple(state.changes) if state is not None and state.host_url == self.host else ()
        newer = tuple(c for c in recent if c not in self.timeline)
        if newer:
            self.timeline = (*self.timeline, *newer)
        body = changes_text(self.host, self.timeline, dict(self.app.theme_variables))
        self.query_one("#changes-body", Static).update(body)

    def action_close(self) -> None:
        self.dismiss()
