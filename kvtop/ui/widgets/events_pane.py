"""Events pane (toggle ``l``): the active alerts with every fix, then the past ones (about a model no
longer loaded, ``AppState.past_alerts``), then the parsed log events, newest first, warnings
highlighted; each alert with its age on the state's clock (``ui.alert_age``). Each row's detail wraps at whole words in the DETAIL column
(the row grows), so an alert and its fixes are read in full at any width."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from rich.text import Text
from textual.message import Message
from textual.widgets import DataTable

from kvtop.model.alerts import Alert, Fix
from kvtop.model.changes import Change, change_rows
from kvtop.model.eventtext import describe
from kvtop.model.logstate import WARNING_KINDS, LogState
from kvtop.model.traffic import is_status_poll
from kvtop.ui.alert_age import alert_age
from kvtop.ui.format import safe
from kvtop.ui.widgets.hanging import hang_wrap

MAX_ROWS = 300

CHANGE_ROWS = 4
"""The server's changes the pane lists at most (``model.changes.change_rows``: one row per model,
repeats folded; ``kvtop changes`` and the ``c`` screen: all), so the alerts and the log's events
keep the pane."""

KIND_WIDTH = 24
"""The widest EVENT column (longer kinds end in an ellipsis)."""

MIN_KIND_WIDTH = 5


@dataclass(frozen=True, slots=True)
class OperatorEntry:
    """One write kvtop sent (or was asked for and did not send), for the pane's top rows.

    Attributes:
        at: Unix seconds.
        what: What was asked (``unload qwen3:8b``, ``SIGTERM PID 4242 (python)``).
        outcome: ``sent``, ``cancelled: nothing sent``, ``failed: …``, ``done: …``.
        ok: False for a failure (drawn as a warning).
    """

    at: float
    what: str
    outcome: str
    ok: bool = True


class EventsPane(DataTable[Text]):
    """Shows ``LogState.recent``; ``raw`` shows the log lines instead of the parsed fields.

    Enter on a fix row posts ``FixChosen`` (the app offers the fix: an action kvtop can perform
    behind its confirmation, or the text of a setting ready to copy)."""

    class FixChosen(Message):
        """Enter on one of an alert's fixes."""

        def __init__(self, fix: Fix, alert: Alert) -> None:
            super().__init__()
            self.fix = fix
            self.alert = alert

    DEFAULT_CSS = """
    EventsPane { height: 12; border-top: solid $primary; display: none; }
    EventsPane.-visible { display: block; }
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__(cursor_type="row", **kwargs)  # type: ignore[arg-type]
        self.raw = False
        self._shown: tuple[object, ...] | None = None
        self._kind_width = KIND_WIDTH
        self._details: list[Text] = []
        self._fixes: list[tuple[Fix, Alert] | None] = []
        """Per row, the fix it shows (with its alert), None for other rows."""
        self._row_fixes: list[tuple[Fix, Alert] | None] = []

    def on_mount(self) -> None:
        self._add_columns()

    def _add_columns(self) -> None:
        self.add_column("TIME", width=8, key="time")
        self.add_column("EVENT", width=self._kind_width, key="kind")
        self.add_column("DETAIL", key="detail")

    def detail(self, row: int) -> str:
        """The full detail text of a row, as one line (the cell shows it wrapped)."""
        return self._details[row].plain

    def _width(self) -> int:
        """Columns the pane spans (the terminal's: the pane is as wide as the screen)."""
        try:
            return self.app.size.width
        except Exception:  # noqa: BLE001 - not running
            return 120

    def show(
        self,
        log: LogState,
        needle: str = "",
        alerts: Sequence[Alert] = (),
        actions: Sequence[OperatorEntry] = (),
        *,
        past: Sequence[Alert] = (),
        now: float | None = None,
        changes: Sequence[Change] = (),
    ) -> None:
        """Render kvtop's own writes (``actions``, newest first), the active ``alerts`` (each with
        every fix), the server's newest ``changes``, the ``past`` alerts (about a model no longer loaded: ``(no longer loaded)``,
        with every fix), then the newest events; filtered by ``needle`` (kind or text,
        case-insensitive). Each alert says its age at ``now`` (Unix seconds, the state's clock:
        ``alert_age.state_clock``; none when None). Alerts about the whole server (no model) are
        read here in full; the alert bar has room for one."""
        width = self._width()
        ages = tuple(alert_age(a, now) for a in (*alerts, *past))
        key = (
            log.recent[-1].line_no if log.recent else None,
            len(log.recent),
            log.lines,
            needle,
            self.raw,
            log.source,
            log.status,
            tuple(alerts),
            tuple(past),
            ages,
            width,
            tuple(actions),
            tuple(changes),
        )
        if key == self._shown:
            return
        self._shown = key
        rows: list[tuple[Text, Text, Text]] = []
        self._row_fixes = []
        self._collect_actions(rows, actions, needle)
        # the alerts with their fixes before the server's changes: at 80x24 the pane is where they
        # are read in full (issue 26: alerts with their fixes, then events)
        self._collect_alerts(rows, alerts, needle, now, past=False)
        self._collect_changes(rows, changes, needle)
        self._collect_alerts(rows, past, needle, now, past=True)
        self._collect(rows, log, needle)
        self._fixes = self._row_fixes + [None] * (len(rows) - len(self._row_fixes))
        # EVENT as wide as its widest cell (up to KIND_WIDTH); DETAIL takes the rest and its text
        # wraps there, whole words on each line, so an alert and its fixes are read in full
        kind_w = max(MIN_KIND_WIDTH, min(KIND_WIDTH, max((r[1].cell_len for r in rows), default=0)))
        if kind_w != self._kind_width:
            self._kind_width = kind_w
            self.clear(columns=True)
            self._add_columns()
        else:
            self.clear()
        detail_w = max(20, width - (8 + 2) - (kind_w + 2) - 2 - 2)  # cell padding, the vertical scrollbar
        self._details = []
        for when, kind, detail in rows:
            wrapped = hang_wrap(detail, detail_w)
            self._details.append(detail)
            kind.truncate(kind_w, overflow="ellipsis")
            self.add_row(when, kind, wrapped, height=len(wrapped.plain.split("\n")))

    def fix_at(self, row: int) -> tuple[Fix, Alert] | None:
        """The fix (and its alert) a row shows, None for other rows."""
        return self._fixes[row] if 0 <= row < len(self._fixes) else None

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Enter on a fix offers it (``FixChosen``); other rows do nothing."""
        chosen = self.fix_at(event.cursor_row)
        if chosen is not None:
            event.stop()
            self.post_message(self.FixChosen(*chosen))

    def _collect_actions(
        self, rows: list[tuple[Text, Text, Text]], actions: Sequence[OperatorEntry], needle: str
    ) -> None:
        colors = self.app.theme_variables
        needle = needle.strip().lower()
        for entry in reversed(actions):
            text = f"{entry.what}: {entry.outcome}"
            if needle and needle not in "kvtop action" and needle not in text.lower():
                continue
            style = "" if entry.ok else f"bold {colors.get('kv-warn', '')}"
            rows.append(
                (
                    Text(datetime.fromtimestamp(entry.at).strftime("%H:%M:%S")),
                    Text("kvtop action", style=style),
                    Text(safe(text, 400), style=style),
                )
            )
            self._row_fixes.append(None)

    def _collect_changes(self, rows: list[tuple[Text, Text, Text]], changes: Sequence[Change], needle: str) -> None:
        """The server's changes (``AppState.changes``: restarts, upgrades, settings, reloads at other
        settings) as :func:`model.changes.change_rows`, newest first, at most :data:`CHANGE_ROWS`:
        ``qwen3:8b runner: -c 4096 → 32768 (requested, runner argv) · 3 earlier since 09:38:39``;
        the ``c`` screen has them all."""
        colors = self.app.theme_variables
        needle = needle.strip().lower()
        shown = []
        for row in change_rows(changes, len(changes))[0]:
            kind = "restart" if row.restart else "changed"
            marks = "; ".join(f"{source}, {origin}" for source, origin in row.marks)
            text = f"{row.text} ({marks})"
            if row.earlier:
                since = datetime.fromtimestamp(row.since).strftime("%H:%M:%S")
                text += f" · {row.earlier} earlier since {since}"
            if needle and needle not in kind and needle not in text.lower():
                continue
            shown.append((row, kind, text))
        for row, kind, text in shown[:CHANGE_ROWS]:
            style = f"bold {colors.get('kv-warn', '')}" if row.restart else ""
            rows.append(
                (
                    Text(datetime.fromtimestamp(row.at).strftime("%H:%M:%S")),
                    Text(kind, style=style),
                    Text(safe(text, 400)),
                )
            )
            self._row_fixes.append(None)
        if len(shown) > CHANGE_ROWS:
            rest = len(shown) - CHANGE_ROWS
            rows.append((Text(""), Text("changed", style="dim"), Text(f"{rest} more (c: what changed)", style="dim")))
            self._row_fixes.append(None)

    def _collect_alerts(
        self,
        rows: list[tuple[Text, Text, Text]],
        alerts: Sequence[Alert],
        needle: str,
        now: float | None,
        *,
        past: bool,
    ) -> None:
        """One row per alert (``qwen3:1.7b · 3 min: …``; a past one ``qwen3:1.7b (no longer
        loaded) · 3 min: …``, muted), then a row per fix, filtered by ``needle``."""
        colors = self.app.theme_variables
        needle = needle.strip().lower()
        for alert in alerts:
            age = alert_age(alert, now)
            model = f"{alert.model}{' (no longer loaded)' if past else ''}" if alert.model else ""
            head = " · ".join(p for p in (model, age) if p)
            text = f"{head + ': ' if head else ''}{alert.message}"
            if needle and needle not in alert.kind and needle not in text.lower():
                continue
            tone = colors.get("kv-crit" if alert.severity == "critical" else "kv-warn", "")
            style = colors.get("kv-muted", "") if past else f"bold {tone}"
            mark = {"critical": "✖", "warning": "▲"}.get(alert.severity, "ℹ")
            since = datetime.fromtimestamp(alert.since).strftime("%H:%M:%S") if alert.since else ""
            rows.append(
                (
                    Text(since),
                    Text(f"{mark} {alert.kind}", style=style),
                    Text(safe(text, 400), style=colors.get("kv-muted", "") if past else ""),
                )
            )
            self._row_fixes.append(None)
            for fix in alert.fixes:
                verdict = {True: "fits", False: "does not fit", None: "fit not known"}[fix.fits]
                rows.append(
                    (
                        Text(""),
                        Text("  fix", style=colors.get("kv-ok", "") if fix.fits and not past else ""),
                        Text(safe(f"{fix.action} — {fix.detail} ({verdict}; {fix.cost})", 400)),
                    )
                )
                self._row_fixes.append((fix, alert))

    def _collect(self, rows: list[tuple[Text, Text, Text]], log: LogState, needle: str) -> None:
        """The pane's event rows (time, event, detail) before wrapping: the newest events (or raw
        lines), filtered by ``needle``."""
        colors = self.app.theme_variables
        n = 0
        needle = needle.strip().lower()
        if self.raw:  # every line as read, parsed or not, newest first
            for i, line in enumerate(reversed(log.raw)):
                if needle and needle not in line.lower():
                    continue
                rows.append((Text(f"-{i}" if i else "last"), Text("raw"), Text(safe(line, 400))))
                n += 1
                if n >= MAX_ROWS:
                    break
            if n == 0:
                rows.append((Text(""), Text("—"), Text("no raw lines yet")))
            return
        polls = 0
        for event in reversed(log.recent):
            if not needle and is_status_poll(event):
                polls += 1  # a monitor's polling (kvtop's own among it) is not news: / gin shows it
                continue
            text = event.raw if self.raw else describe(event)
            if needle and needle not in event.kind and needle not in text.lower():
                continue
            warn = event.kind in WARNING_KINDS
            style = f"bold {colors.get('kv-warn', '')}" if warn else ""
            if event.kind in ("oom", "load_failed"):
                style = f"bold {colors.get('kv-crit', '')}"
            when = event.time.strftime("%H:%M:%S") if event.time else f"#{event.line_no}"
            rows.append((Text(when), Text(event.kind, style=style), Text(safe(text, 400), style=style if warn else "")))
            n += 1
            if n >= MAX_ROWS:
                break
        if polls:
            rows.append(
                (
                    Text(""),
                    Text("—", style="dim"),
                    Text(
                        f"{polls:,} status poll{'s' if polls != 1 else ''} left out (GET /api/ps … from monitors, kvtop's own"
                        " among them): / gin shows them",
                        style="dim",
                    ),
                )
            )
        elif n == 0:
            what = safe(log.status or ("no events yet" if log.source else self._no_log()), 200)
            rows.append((Text(""), Text("—"), Text(what)))

    def _no_log(self) -> str:
        """Why there is no event, in the mode kvtop runs in (--log is no way forward in a demo or a replay,
        nor after --log none)."""
        if getattr(self.app, "replay", None) is not None:
            return "no server log lines in the recording up to here"
        if getattr(getattr(self.app, "settings", None), "demo", False):
            return (
                "no server log in this demo run (the dashboard demo follows its stand-in's log when no log is chosen)"
            )
        if getattr(getattr(self.app, "settings", None), "log_spec", None) == "none":
            return "server log: off (--log none)"  # the user's choice: not a fault to point at --log for
        return "no server log: start kvtop with --log"

    def event_count(self) -> int:
        """Rows shown (for tests)."""
        return self.row_count
