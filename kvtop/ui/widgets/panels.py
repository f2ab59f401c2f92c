"""The dashboard's optional panels besides the memory map: every alert with all its fixes (each fix
selectable, as in the events pane), and the VRAM and tok/s history (plotext, the history screen's plots).

Both are given data by the app's one repaint per apply step and redraw only when their input
changed; while hidden (``display: none``) the app gives them nothing, and the history panel does not
even import plotext until it is first shown.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.containers import Vertical
from textual.geometry import Region
from textual.widgets import Static

from kvtop.model.alerts import Alert, Fix
from kvtop.ui.actions import fix_operation
from kvtop.ui.alert_age import AGE_WIDEST, alert_age
from kvtop.ui.format import safe
from kvtop.ui.widgets.events_pane import EventsPane

if TYPE_CHECKING:
    from kvtop.model.history import History

HISTORY_WINDOW_S = 600.0
"""The history panel's window (the ``h`` screen offers the others)."""


FixRef = tuple[Fix, Alert]
"""One of an alert's fixes, with its alert (what ``EventsPane.FixChosen`` carries)."""


def alert_blocks(
    alerts: Sequence[Alert], colors: Mapping[str, str], now: float | None = None
) -> list[tuple[Text, FixRef | None]]:
    """The alerts panel's text as blocks, one per line it starts (an alert's heading, then each of
    its fixes), each with the fix it shows (None for a heading). Most severe first as the engine
    orders them, each with its age at ``now`` (Unix seconds, the state's clock:
    ``alert_age.state_clock``; no age when None), all its fixes (the ones that fit first) and what
    each fix costs."""
    if not alerts:
        return [
            (
                Text(
                    "No alerts: nothing spilled, truncated, fell back or ran out of memory.",
                    style=colors.get("kv-ok", ""),
                ),
                None,
            )
        ]
    out: list[tuple[Text, FixRef | None]] = []
    for a in alerts:
        out.extend(_one_alert_blocks(a, colors, alert_age(a, now)))
    return out


class AlertBlocks:
    """:func:`alert_blocks` and the lines they wrap to, remembered per alert (at 1,000
    models a poll that changes a few alerts draws and measures those, not all of them).

    Attributes:
        built: Alerts whose blocks were built (observer-cost tests count them).
        measured: Alerts whose lines were counted (wrapped) at some width.
    """

    def __init__(self) -> None:
        self._blocks: dict[Alert, list[tuple[Text, FixRef | None]]] = {}
        self._colors: tuple[tuple[str, str], ...] | None = None
        self._lines: dict[tuple[Alert, int], tuple[int, ...]] = {}
        self.built = 0
        self.measured = 0

    def blocks(
        self, alerts: Sequence[Alert], colors: Mapping[str, str], now: float | None = None
    ) -> list[tuple[Text, FixRef | None]]:
        """``alert_blocks(alerts, colors, now)``; an alert's blocks are built once per colours and
        age text (``3 min`` stays the same blocks for a minute)."""
        key = tuple(sorted(colors.items()))
        if key != self._colors:
            self._colors, self._blocks = key, {}
        if not alerts:
            return alert_blocks(alerts, colors)
        out: list[tuple[Text, FixRef | None]] = []
        for a in alerts:
            age = alert_age(a, now)
            got = self._blocks.get((a, age))
            if got is None:
                self.built += 1
                got = self._blocks[(a, age)] = _one_alert_blocks(a, colors, age)
            out.extend(got)
        if len(self._blocks) > 2 * len(alerts):
            live = {(a, alert_age(a, now)) for a in alerts}
            self._blocks = {k: b for k, b in self._blocks.items() if k in live}
        return out

    def heights(self, a: Alert, width: int, console: Console) -> tuple[int, ...]:
        """The lines each of ``a``'s blocks (its heading, then each fix) wraps to at ``width``
        cells, measured once per alert and width (styles change no wrapping). A heading with an
        age (``since`` known) is measured with the widest one (:data:`AGE_WIDEST`): its age
        changes every second, the rows it is given stay, and they hold it at any age."""
        got = self._lines.get((a, width))
        if got is None:
            self.measured += 1
            age = AGE_WIDEST if a.since is not None else None
            got = self._lines[(a, width)] = tuple(
                max(1, len(b.wrap(console, width))) for b, _ in _one_alert_blocks(a, {}, age)
            )
        return got

    def line_count(self, alerts: Sequence[Alert], width: int, console: Console) -> int:
        """The lines :func:`alerts_text` wraps to at ``width`` cells, each age as wide as
        :data:`AGE_WIDEST` (:meth:`heights`)."""
        if not alerts:
            return sum(len(b.wrap(console, width)) for b, _ in alert_blocks(alerts, {}))
        total = sum(sum(self.heights(a, width, console)) for a in alerts)
        if len(self._lines) > 2 * len(alerts):
            live = set(alerts)
            self._lines = {k: v for k, v in self._lines.items() if k[0] in live and k[1] == width}
        return total


def _one_alert_blocks(a: Alert, colors: Mapping[str, str], age: str | None = None) -> list[tuple[Text, FixRef | None]]:
    """One alert's blocks (:func:`alert_blocks`): its heading (with ``age``, ``3 min``, when
    given), then each of its fixes."""
    out: list[tuple[Text, FixRef | None]] = []
    head = Text()
    style = {"critical": "kv-crit", "warning": "kv-warn"}.get(a.severity, "kv-muted")
    glyph = "✖" if a.severity == "critical" else "▲" if a.severity == "warning" else "ℹ"
    head.append(f"{glyph} {a.kind.replace('_', ' ')}", style=f"bold {colors.get(style, '')}")
    if a.model:
        head.append(f" {safe(a.model, 60)}", style="bold")
    if age is not None:
        head.append(f" · {age}")
    head.append(f": {safe(a.message, 400)}")
    out.append((head, None))
    for fix in a.fixes:
        line = Text()
        fits = {True: " (fits)", False: " (does not fit)", None: ""}[fix.fits]
        line.append("  fix: ", style=colors.get("kv-ok", "") if fix.fits else colors.get("kv-muted", ""))
        line.append(safe(fix.action, 120), style="bold")
        line.append(f" — {safe(fix.detail, 200)}{fits}")
        if fix.cost:
            line.append(f"; cost: {safe(fix.cost, 160)}", style=colors.get("kv-muted", ""))
        out.append((line, (fix, a)))
    return out


def alerts_text(alerts: Sequence[Alert], colors: Mapping[str, str], now: float | None = None) -> Text:
    """Every alert with its age at ``now`` and all its fixes (:func:`alert_blocks`, one per line);
    long lines wrap in the panel."""
    return Text("\n").join(block for block, _ in alert_blocks(alerts, colors, now))


def enter_does(fix: Fix, loaded: Sequence[str], *, readonly: bool, replay: bool, demo: bool) -> tuple[str, str]:
    """What Enter on ``fix`` does, as ``OperatorActions.fix_chosen`` decides it: ``("act", hint)``
    when kvtop performs it behind its confirmation (``unload qwen3:8b (asks first)``, ``stop PID
    4242 (asks first)``), else ``("text", hint)``: the fix shown as text to copy (a setting; any fix
    with ``--readonly``, in a replay, and the demo's simulated processes: ``read-only: show it as
    text to copy``). The hint is short: the panel's title holds it beside the selected fix's ``▶``.

    Args:
        fix: The selected fix.
        loaded: The names of the models loaded now (an unload of another one is only text).
        readonly: ``--readonly``.
        replay: A recording is playing.
        demo: ``--demo`` (its GPU processes are simulated: no signal).

    Returns:
        The kind (``act`` or ``text``) and the hint in words, without the key.
    """
    op = fix_operation(fix, loaded)
    if op is not None and not (readonly or replay or (demo and op[0] == "signal")):
        what = f"unload {', '.join(op[1])}" if op[0] == "unload" and isinstance(op[1], tuple) else f"stop PID {op[1]}"
        return "act", f"{safe(what, 80)} (asks first)"
    why = "" if op is None else ("read-only: " if readonly else "a recording: " if replay else "simulated process: ")
    return "text", f"{why}show it as text to copy"


CURSOR_GLYPH = "▶"
"""The selected fix's mark in the focused alerts panel (``>`` in ASCII mode, ``core.glyphs``)."""


class AlertsPanel(Static, can_focus=True):
    """All active alerts with their full fixes (the alert bar has room for one).

    Focused (Tab), ↑/↓ move a cursor over the fixes (the selected one marked ``▶`` and in reverse
    video) and Enter (or a click on a fix) posts ``EventsPane.FixChosen``, as Enter on a fix row of
    the events pane does: the app offers an action kvtop can perform behind its confirmation, or
    shows a setting as text to copy (and with ``--readonly`` only ever the text). The title says
    which (:func:`enter_does`), and so does the footer's Enter key. Unfocused, the panel shows no
    cursor."""

    DEFAULT_CSS = """
    AlertsPanel { height: 1fr; padding: 0 1; border-top: solid $primary; overflow-y: auto; }
    AlertsPanel:focus { border-top: thick $accent; }
    """
    BINDINGS = [
        Binding("up", "cursor(-1)", "Prev fix", show=False),
        Binding("down", "cursor(1)", "Next fix", show=False),
        # one key, two descriptions: check_action leaves the one that says what Enter does now
        Binding("enter", "choose('act')", "Perform fix (asks first)"),
        Binding("enter", "choose('text')", "Show fix as text"),
    ]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._shown: tuple[object, ...] | None = None
        self._blocks: list[tuple[Text, FixRef | None]] = []
        self._alerts: tuple[Alert, ...] = ()
        self._count = 0
        self.memo = AlertBlocks()
        """Each alert's blocks, built once (a poll that changes a few alerts builds those)."""
        self.cursor = 0
        """Index of the highlighted fix among :attr:`fixes` (shown only while focused)."""

    @property
    def fixes(self) -> list[FixRef]:
        """Every fix shown, in order (the cursor's range)."""
        return [ref for _, ref in self._blocks if ref is not None]

    def show(self, alerts: Sequence[Alert], colors: Mapping[str, str], now: float | None = None) -> None:
        """Set the alerts, each with its age at ``now`` (Unix seconds, the state's clock:
        ``alert_age.state_clock``); nothing is redrawn when they, their ages and the colours did
        not change. The cursor stays on the same fix (alert key and action) while it is still
        offered."""
        key = (tuple(alerts), tuple(alert_age(a, now) for a in alerts), tuple(sorted(colors.items())))
        if key == self._shown:
            return
        self._shown = key
        before = self.fixes[self.cursor] if 0 <= self.cursor < len(self.fixes) else None
        self._blocks = self.memo.blocks(alerts, colors, now)
        self._alerts = tuple(alerts)
        self._count = len(alerts)
        fixes = self.fixes
        if before is not None:
            same = [i for i, (f, a) in enumerate(fixes) if a.key == before[1].key and f.action == before[0].action]
            self.cursor = same[0] if same else min(self.cursor, max(0, len(fixes) - 1))
        self._draw()
        if bool(fixes) != bool(before):
            self.refresh_bindings()  # Enter in the footer only while there is a fix to offer

    def selected(self) -> FixRef | None:
        """The fix under the cursor (with its alert), None when no fix is shown."""
        fixes = self.fixes
        return fixes[self.cursor] if 0 <= self.cursor < len(fixes) else None

    def enter_hint(self) -> tuple[str, str] | None:
        """What Enter does on the selected fix (:func:`enter_does`, with this run's ``--readonly``,
        replay, demo and loaded models), None when no fix is shown."""
        chosen = self.selected()
        if chosen is None:
            return None
        app = self.app
        settings = getattr(app, "settings", None)
        state = getattr(app, "state", None)
        loaded = [v.name for v in state.models] if state is not None else []
        return enter_does(
            chosen[0],
            loaded,
            readonly=bool(getattr(settings, "readonly", False)),
            replay=getattr(app, "replay", None) is not None,
            demo=bool(getattr(settings, "demo", False)),
        )

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The cursor keys and Enter exist only while a fix is shown; of Enter's two bindings only
        the one that names what it does for the selected fix (:meth:`enter_hint`)."""
        if action == "cursor":
            return bool(self.fixes)
        if action == "choose":
            hint = self.enter_hint()
            return hint is not None and (not parameters or parameters[0] == hint[0])
        return True

    def _draw(self) -> None:
        cursor = self.cursor if self.has_focus and self.fixes else None
        parts: list[Text] = []
        n = -1
        for block, ref in self._blocks:
            if ref is not None:
                n += 1
                if n == cursor:  # "▶ fix: …", the fix in reverse video (its two leading cells hold the mark)
                    marked = Text(CURSOR_GLYPH + " ", style="bold")
                    rest = block[2:] if block.plain.startswith("  ") else block.copy()
                    rest.stylize("reverse")
                    block = marked + rest
            parts.append(block)
        title = f"Alerts ({self._count})" if self._count else "Alerts"
        hint = self.enter_hint() if cursor is not None else None
        if hint is not None:
            title += f" · fix {cursor + 1}/{len(self.fixes)} · Enter: {hint[1]}"
        self.border_title = title
        self.update(Text("\n").join(parts))

    def _fix_lines(self) -> list[tuple[int, int]]:
        """Per fix, the first line it is drawn on and its height (wrapped at the panel's width;
        each alert measured once per width, :meth:`AlertBlocks.heights`)."""
        width = max(1, self.scrollable_content_region.width or self.size.width or 80)
        out: list[tuple[int, int]] = []
        y = 0
        for a in self._alerts:
            heading, *fixes = self.memo.heights(a, width, self.app.console)
            y += heading
            for height in fixes:
                out.append((y, height))
                y += height
        return out

    def on_focus(self) -> None:
        self._draw()

    def on_blur(self) -> None:
        self._draw()

    def action_cursor(self, step: int) -> None:
        """Move the cursor ``step`` fixes (clamped) and scroll it into view."""
        if not self.fixes:
            return
        self.cursor = max(0, min(len(self.fixes) - 1, self.cursor + step))
        self._draw()
        self.refresh_bindings()  # the footer's Enter says what it does for this fix
        lines = self._fix_lines()
        if self.cursor < len(lines):
            y, height = lines[self.cursor]
            # after the redraw: the region is measured against the content as it is then drawn
            self.call_after_refresh(self.scroll_to_region, Region(0, y, 1, height), animate=False)

    def action_choose(self, kind: str = "") -> None:
        """Offer the highlighted fix (``EventsPane.FixChosen``); ``kind`` names the binding that
        ran (``act`` or ``text``: the app decides what to do, the same way)."""
        fixes = self.fixes
        if 0 <= self.cursor < len(fixes):
            self.post_message(EventsPane.FixChosen(*fixes[self.cursor]))

    def on_click(self, event: events.Click) -> None:
        """A click on a fix highlights it and offers it; elsewhere it only focuses the panel."""
        offset = event.get_content_offset(self)
        if offset is None:
            return
        y = offset.y + self.scroll_offset.y
        for i, (top, height) in enumerate(self._fix_lines()):
            if top <= y < top + height:
                self.cursor = i
                self.focus()
                self._draw()
                self.action_choose()
                return


PANEL_MAX_MODELS = 8
"""The history panel plots at most this many models, the most recent (its title says how many there
are; ``h`` plots them all): a hundred lines in a panel are unreadable, and drawing them was half of
kvtop's idle CPU at 100 models, 160x48 (py-spy, benchmarks/cpu_idle.py)."""


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
        self.query_one("#panel-plot-gpu", PlotView).show(
            gpu_spec(history, span, slots, gap, distinct, max_models=PANEL_MAX_MODELS)
        )
        self.query_one("#panel-plot-tps", PlotView).show(
            tps_spec(history, span, slots, log_note, distinct, max_models=PANEL_MAX_MODELS)
        )
