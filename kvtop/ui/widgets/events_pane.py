"""Events pane (toggle ``l``): the active alerts with every fix, then the parsed log events,
newest first, warnings highlighted."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from rich.text import Text
from textual.widgets import DataTable

from kvtop.model.alerts import Alert

from kvtop.model.eventtext import describe
from kvtop.model.logstate import WARNING_KINDS, LogState
from kvtop.ui.format import safe

MAX_ROWS = 300


class EventsPane(DataTable[Text]):
    """Shows ``LogState.recent``; ``raw`` shows the log lines instead of the parsed fields."""

    DEFAULT_CSS = """
    EventsPane { height: 12; border-top: solid $primary; display: none; }
    EventsPane.-visible { display: block; }
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__(cursor_type="row", **kwargs)  # type: ignore[arg-type]
        self.raw = False
        self._shown: tuple[object, ...] | None = None

    def on_mount(self) -> None:
        self.add_column("TIME", width=8, key="time")
        self.add_column("EVENT", width=24, key="kind")
        self.add_column("DETAIL", key="detail")

    def show(self, log: LogState, needle: str = "", alerts: Sequence[Alert] = ()) -> None:
        """Render the active ``alerts`` (each with every fix), then the newest events; both
        filtered by ``needle`` (kind or text, case-insensitive). Alerts about the whole server
        (no model) are read here in full; the alert bar has room for one."""
        key = (log.recent[-1].line_no if log.recent else None, len(log.recent), log.lines, needle, self.raw,
               log.source, log.status, tuple(alerts))
        if key == self._shown:
            return
        self._shown = key
        self.clear()
        colors = self.app.theme_variables
        n = 0
        needle = needle.strip().lower()
        for alert in alerts:
            text = f"{alert.model + ': ' if alert.model else ''}{alert.message}"
            if needle and needle not in alert.kind and needle not in text.lower():
                continue
            style = f"bold {colors.get('kv-crit' if alert.severity == 'critical' else 'kv-warn', '')}"
            mark = {"critical": "✖", "warning": "▲"}.get(alert.severity, "ℹ")
            since = datetime.fromtimestamp(alert.since).strftime("%H:%M:%S") if alert.since else ""
            self.add_row(Text(since), Text(f"{mark} {alert.kind}", style=style), Text(safe(text, 400)))
            for fix in alert.fixes:
                verdict = {True: "fits", False: "does not fit", None: "fit not known"}[fix.fits]
                self.add_row(Text(""), Text("  fix", style=colors.get("kv-ok", "") if fix.fits else ""),
                             Text(safe(f"{fix.action} — {fix.detail} ({verdict}; {fix.cost})", 400)))
        if self.raw:  # every line as read, parsed or not, newest first
            for i, line in enumerate(reversed(log.raw)):
                if needle and needle not in line.lower():
                    continue
                self.add_row(Text(f"-{i}" if i else "last"), Text("raw"), Text(safe(line, 400)))
                n += 1
                if n >= MAX_ROWS:
                    break
            if n == 0:
                self.add_row(Text(""), Text("—"), Text("no raw lines yet"))
            return
        for event in reversed(log.recent):
            text = event.raw if self.raw else describe(event)
            if needle and needle not in event.kind and needle not in text.lower():
                continue
            warn = event.kind in WARNING_KINDS
            style = f"bold {colors.get('kv-warn', '')}" if warn else ""
            if event.kind in ("oom", "load_failed"):
                style = f"bold {colors.get('kv-crit', '')}"
            when = event.time.strftime("%H:%M:%S") if event.time else f"#{event.line_no}"
            self.add_row(Text(when), Text(event.kind, style=style), Text(safe(text, 400), style=style if warn else ""))
            n += 1
            if n >= MAX_ROWS:
                break
        if n == 0:
            what = safe(log.status or ("no events yet" if log.source else "no server log: start kvtop with --log"), 200)
            self.add_row(Text(""), Text("—"), Text(what))

    def event_count(self) -> int:
        """Rows shown (for tests)."""
        return self.row_count
