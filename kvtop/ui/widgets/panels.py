"""The dashboard's optional panels besides the memory map: every alert with all its fixes, and the
VRAM and tok/s history (plotext, the history screen's plots).

Both are given data by the app's one repaint per apply step and redraw only when their input
changed; while hidden (``display: none``) the app gives them nothing, and the history panel does not
even import plotext until it is first shown.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual.containers import Vertical
from textual.widgets import Static

from kvtop.model.alerts import Alert
from kvtop.ui.format import safe

if TYPE_CHECKING:
    from kvtop.model.history import History

HISTORY_WINDOW_S = 600.0
"""The history panel's window (the ``h`` screen offers the others)."""


def alerts_text(alerts: Sequence[Alert], colors: Mapping[str, str]) -> Text:
    """Every alert, most severe first as the engine orders them, each with all its fixes (the ones
    that fit first) and what each fix costs; long lines wrap in the panel."""
    out = Text()
    if not alerts:
        out.append("No alerts: nothing spilled, truncated, fell back or ran out of memory.",
                   style=colors.get("kv-ok", ""))
        return out
    for i, a in enumerate(alerts):
        if i:
            out.append("\n")
        style = {"critical": "kv-crit", "warning": "kv-warn"}.get(a.severity, "kv-muted")
        glyph = "✖" if a.severity == "critical" else "▲" if a.severity == "warning" else "ℹ"
        out.append(f"{glyph} {a.kind.replace('_', ' ')}", style=f"bold {colors.get(style, '')}")
        if a.model:
            out.append(f" {safe(a.model, 60)}", style="bold")
        out.append(f": {safe(a.message, 400)}")
        for fix in a.fixes:
            fits = {True: " (fits)", False: " (not enough)", None: ""}[fix.fits]
            out.append("\n  fix: ", style=colors.get("kv-ok", "") if fix.fits else colors.get("kv-muted", ""))
            out.append(safe(fix.action, 120), style="bold")
            out.append(f" — {safe(fix.detail, 200)}{fits}")
            if fix.cost:
                out.append(f"; cost: {safe(fix.cost, 160)}", style=colors.get("kv-muted", ""))
    return out


class AlertsPanel(Static):
    """All active alerts with their full fixes (the alert bar has room for one)."""

    DEFAULT_CSS = """
    AlertsPanel { height: 1fr; padding: 0 1; border-top: solid $primary; overflow-y: auto; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._shown: tuple[object, ...] | None = None

    def show(self, alerts: Sequence[Alert], colors: Mapping[str, str]) -> None:
        """Set the alerts; nothing is redrawn when they and the colours did not change."""
        key = (tuple(alerts), tuple(sorted(colors.items())))
        if key == self._shown:
            return
        self._shown = key
        self.border_title = f"Alerts ({len(alerts)})" if alerts else "Alerts"
        self.update(alerts_text(alerts, colors))


class HistoryPanel(Vertical):
    """GPU memory and tok/s over the last ten minutes (``h`` opens the full history screen)."""

    DEFAULT_CSS = """
    HistoryPanel { height: 1fr; border-top: solid $primary; }
    HistoryPanel PlotView { padding: 0 1; height: 1fr; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._shown: tuple[object, ...] | None = None

    def show(self, history: History, interval_s: float, log_note: str, distinct: bool) -> None:
        """Plot ``history`` (rebuilt only when it, the size or the colour mode changed)."""
        from kvtop.ui.screens.history import gpu_spec, shown_span, tps_spec
        from kvtop.ui.widgets.plot import PlotView

        if not self.children:
            self.mount(PlotView(id="panel-plot-gpu"), PlotView(id="panel-plot-tps"))
            self.call_after_refresh(lambda: self.show(history, interval_s, log_note, distinct))
            return
        width = max(20, self.size.width or self.app.size.width)
        key = (history.version, width, distinct, log_note)
        if key == self._shown:
            return
        self._shown = key
        span = shown_span(history, HISTORY_WINDOW_S)
        slots = max(10, 2 * width)
        gap = max(3 * interval_s + 1, 2.5 * span / slots, 3 * history.bucket_s)
        self.query_one("#panel-plot-gpu", PlotView).show(gpu_spec(history, span, slots, gap, distinct))
        self.query_one("#panel-plot-tps", PlotView).show(tps_spec(history, span, slots, log_note, distinct))
