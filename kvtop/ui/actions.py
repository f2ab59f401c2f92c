"""Operator actions (docs/reference.md, "Keys"): unload (``u``), keep-alive (``a``), signal a foreign GPU process
(``k``), and an alert's fix offered from the events pane (Enter on a fix).

Every write asks first on a ``ConfirmWrite`` dialog (``kvtop.ui.screens.confirm``: Cancel focused;
only ``y`` or a click on the action writes, and only once the dialog has been shown for
``ConfirmWrite.ARM_S``: keys typed ahead are swallowed), is logged in the events pane with its
outcome (``OperatorEntry``), and does not exist with ``--readonly`` (no key, no footer entry, no
help line, no palette command: ``kvtop.ui.commands.refusal`` refuses ``WRITE_ACTIONS``). A signal to
another user's process (kvtop runs as root) names its owner and asks a second time. Writes to a
server go through the app's own polling client of that server (``OllamaClient.generate``), so its
headers and TLS settings apply.

Requests (docs/ollama-internals.md §1.4, §3.5 ``keep_alive``): unload is ``POST /api/generate
{"model": name, "keep_alive": 0}`` as ``ollama stop`` sends it; a keep-alive is an empty
generate with ``keep_alive`` (``"5m"``, ``"1h"``, ``-1`` forever, ``0`` release now) as
``ollama run --keepalive`` sends it. Signals: ``kvtop.sources.signals``.

``OperatorActions`` is a part the app owns (``app.operator``); its dialogs (keep-alive choice, a
fix's text, the GPU processes to signal) are in ``kvtop.ui.screens.write_dialogs``, imported when
the first of them opens.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from kvtop.model.alerts import Alert, Fix
from kvtop.model.gpu import GpuProcessView
from kvtop.model.views import ModelView
from kvtop.ui.format import exact_bytes, ibytes, safe
from kvtop.ui.widgets.events_pane import OperatorEntry

if TYPE_CHECKING:
    from kvtop.ui.host import OperatorHost

__all__ = ["UNLOAD_WATCH_POLLS", "WRITE_ACTIONS", "OperatorActions", "countdown_text", "fix_operation", "live_views"]

WRITE_ACTIONS = frozenset({"unload", "keep_alive", "signal_process"})
"""The app's actions that write (none exists with ``--readonly``)."""

UNLOAD_WATCH_POLLS = 3
"""Polls of ``/api/ps`` after an unload before kvtop says the model is still listed."""

LAST_MINUTE_S = 60.0
"""UNTIL counts seconds (``42s``) when the keep-alive ends within this many seconds."""

MAX_LOG = 50
"""Operator entries kept for the events pane (newest)."""

_UNLOAD = re.compile(r"^unload (.+)$")
_STOP_PID = re.compile(r"^stop PID (\d+)$")


def fix_operation(fix: Fix, loaded: Iterable[str]) -> tuple[str, tuple[str, ...] | int] | None:
    """What kvtop can perform for ``fix``: ``("unload", names)`` when every model it names is in
    ``loaded``, ``("signal", pid)`` for ``stop PID N``; None for a setting (env vars, num_ctx in
    a client), which is only shown as text to copy."""
    m = _UNLOAD.match(fix.action.strip())
    if m:
        names = tuple(n.strip() for n in m.group(1).split(","))
        have = set(loaded)
        if names and all(n in have for n in names):
            return "unload", names
        return None
    m = _STOP_PID.match(fix.action.strip())
    if m:
        return "signal", int(m.group(1))
    return None


def countdown_text(view: ModelView, now_s: float) -> str | None:
    """``42s`` when ``view``'s keep-alive ends within ``LAST_MINUTE_S`` of ``now_s`` (whole seconds
    left, rounded down, as ``ollama ps`` truncates), None otherwise (past, forever, unknown)."""
    if view.expires_at is None or view.forever or view.expired or view.expires_at.year == 1:
        return None
    left = view.expires_at.timestamp() - now_s
    if not 0 <= left < LAST_MINUTE_S:
        return None
    return f"{int(left)}s"


def live_views(
    views: Sequence[ModelView], now_s: float, unloading: Iterable[tuple[str, str]] = ()
) -> tuple[tuple[ModelView, ...], bool]:
    """The table's rows with UNTIL as of ``now_s``: ``unloading…`` for a model kvtop asked to
    unload (``(name, digest)`` in ``unloading``), ``42s`` in a keep-alive's last minute. The flag
    says whether some row counts down (the app repaints each second only then)."""
    marked = set(unloading)
    out: list[ModelView] = []
    ticking = False
    for v in views:
        if (v.name, v.digest) in marked:
            out.append(dataclasses.replace(v, until="unloading…"))
            continue
        left = countdown_text(v, now_s)
        if left is not None:
            ticking = True
            out.append(dataclasses.replace(v, until=left))
        else:
            out.append(v)
    return tuple(out), ticking


def _vram_line(view: ModelView) -> str:
    """What an unload frees, as the table shows it (``/api/ps`` size_vram: reported), as a verb
    phrase: ``frees 5.7 GiB (… B) of VRAM (reported: /api/ps size_vram) and 1.2 GiB of system RAM``."""
    if view.size_vram_bytes is None:
        return "frees VRAM not known (? /api/ps gave no size_vram)"
    ram = (view.size_bytes or 0) - view.size_vram_bytes
    text = f"frees {exact_bytes(view.size_vram_bytes)} of VRAM (reported: /api/ps size_vram)"
    if ram > 0:
        text += f" and {ibytes(ram)} of system RAM"
    return text


class OperatorActions:
    """The app's write actions, a part the app owns (``app.operator``): the app's ``u``, ``a``,
    ``k`` and fix actions hand over to it. It sees the app through ``kvtop.ui.host.OperatorHost``
    and asks for a repaint of the dashboard with ``repaint`` (its log shows in the events pane)."""

    def __init__(self, app: OperatorHost, repaint: Callable[[], None]) -> None:
        self.app = app
        self.repaint = repaint
        self.log: list[OperatorEntry] = []
        """The writes and their outcomes, newest last (at most ``MAX_LOG``; the events pane shows them)."""
        self.unloading: dict[tuple[str, str, str], int] = {}
        """(host, name, digest) -> polls of that host seen since the unload was sent."""
        self._until_timer: asyncio.TimerHandle | None = None

    # -- the log ----------------------------------------------------------------------------

    def log_action(self, what: str, error: str | None, *, cancelled: bool = False, outcome: str | None = None) -> None:
        """Log one write (or its cancellation) in the events pane; failures are notified too."""
        if cancelled:
            entry = OperatorEntry(time.time(), what, "cancelled: nothing sent")
        elif error is not None:
            entry = OperatorEntry(time.time(), what, f"failed: {error}", ok=False)
            self.app.notify(safe(f"{what}: {error}", 300), severity="error", timeout=8, markup=False)
        else:
            entry = OperatorEntry(time.time(), what, outcome or "sent")
        self.log.append(entry)
        del self.log[:-MAX_LOG]
        self.repaint()

    # -- unload / keep-alive ----------------------------------------------------------------

    def _writer(self) -> Any:
        source = self.app.sources.get(self.app.current_host)
        return source if hasattr(source, "generate") else None

    def _selected(self) -> ModelView | None:
        view = self.app.dashboard.selected_view
        if view is None or view.cloud:
            self.app.notify("select a local model first", markup=False)
            return None
        return view

    def unload_selected(self) -> None:
        """``u``: unload the selected model (asks first)."""
        view = self._selected()
        if view is not None:
            self.offer_unload([view])

    def offer_unload(self, views: Sequence[ModelView]) -> None:
        """Ask, then send ``keep_alive: 0`` for each of ``views`` (an alert's fix may name several)."""
        app = self.app
        if app.settings.readonly or not views:
            return
        if self._writer() is None:
            app.notify("this server's source cannot send requests", severity="warning", markup=False)
            return
        from kvtop.ui.screens.confirm import ConfirmWrite

        names = ", ".join(v.name for v in views)
        lines = [f"Unload {safe(names, 200)} now?", ""]
        for v in views:
            lines.append(f"{safe(v.name, 60)} {_vram_line(v)}.")
        each = " for each" if len(views) > 1 else ""
        lines += [
            "",
            f"kvtop sends POST {safe(app.current_host, 80)}/api/generate "
            f'{{"model": <name>, "keep_alive": 0}}{each} (as `ollama stop` does).',
            "It loads again on its next request." if len(views) == 1 else "Each loads again on its next request.",
        ]
        host = app.current_host
        app.push_screen(
            ConfirmWrite("\n".join(lines), "Unload"), lambda yes: self._unload_confirmed(bool(yes), host, tuple(views))
        )

    def _unload_confirmed(self, yes: bool, host: str, views: tuple[ModelView, ...]) -> None:
        if not yes:
            for v in views:
                self.log_action(f"unload {v.name}", None, cancelled=True)
            return
        for v in views:
            self._send_keep_alive(host, v, 0)

    def keep_alive_selected(self) -> None:
        """``a``: pick a keep-alive for the selected model, then confirm it."""
        view = self._selected()
        app = self.app
        if view is None or app.settings.readonly:
            return
        if self._writer() is None:
            app.notify("this server's source cannot send requests", severity="warning", markup=False)
            return
        from kvtop.ui.screens.write_dialogs import KeepAliveScreen

        host = app.current_host
        app.push_screen(KeepAliveScreen(view.name, view.until), lambda value: self._keep_picked(value, host, view))

    def _keep_picked(self, value: str | int | None, host: str, view: ModelView) -> None:
        if value is None:
            return
        from kvtop.ui.screens.confirm import ConfirmWrite
        from kvtop.ui.screens.write_dialogs import keep_label

        label = keep_label(value)
        effect = (
            "unloads it now (the row leaves /api/ps)"
            if value == 0
            else "keeps it loaded until Ollama is restarted or it is unloaded"
            if value == -1
            else f"keeps it loaded {label} from now (UNTIL shows it on the next poll)"
        )
        text = (
            f"Set the keep-alive of {safe(view.name, 80)} to {label}?\n\n"
            f"kvtop sends POST {safe(host, 80)}/api/generate with an empty prompt and keep_alive "
            f"{value if isinstance(value, int) else repr(value)} (as `ollama run --keepalive` does): it {effect}."
        )
        if value == 0:
            text += f"\nIt {_vram_line(view)}; it loads again on its next request."
        self.app.push_screen(
            ConfirmWrite(text, "Release" if value == 0 else "Keep"),
            lambda yes: self._keep_confirmed(bool(yes), host, view, value),
        )

    def _keep_confirmed(self, yes: bool, host: str, view: ModelView, value: str | int) -> None:
        from kvtop.ui.screens.write_dialogs import keep_label

        what = f"keep-alive {keep_label(value)} for {view.name}"
        if not yes:
            self.log_action(what, None, cancelled=True)
            return
        state = self.app.states.get(host)
        if (
            value != 0
            and state is not None
            and all((m.name, m.digest) != (view.name, view.digest) for m in state.models)
        ):
            # an empty generate loads a model that is not loaded: it left while the dialog was open
            self.log_action(what, f"not sent: /api/ps no longer lists {view.name} (a keep-alive would load it again)")
            return
        self._send_keep_alive(host, view, value)

    def _send_keep_alive(self, host: str, view: ModelView, value: str | int) -> None:
        if value == 0:
            what = f"unload {view.name}"
        else:
            from kvtop.ui.screens.write_dialogs import keep_label

            what = f"keep-alive {keep_label(value)} for {view.name}"
        source = self.app.sources.get(host)

        async def send() -> None:
            if source is None or not hasattr(source, "generate"):
                self.log_action(what, "no client for this server")
                return
            error = await source.generate(view.name, keep_alive=value)
            if error is None and value == 0:
                self.unloading[(host, view.name, view.digest)] = 0
                self.log_action(what, None, outcome="sent; unloading… (the row leaves when /api/ps no longer lists it)")
            elif error is None:
                self.log_action(what, None, outcome="sent; UNTIL shows the new expiry on the next poll")
            else:
                self.log_action(what, error)

        self.app.run_worker(send(), group=f"write-{host}-{view.name}", exit_on_error=False)

    def watch_unloads(self, host: str) -> None:
        """After each applied poll of ``host``: a model asked to unload that ``/api/ps`` no longer
        lists is logged as gone; one still listed after ``UNLOAD_WATCH_POLLS`` polls is said once."""
        if not self.unloading:
            return
        state = self.app.states.get(host)
        if state is None or state.ollama is None or not state.ollama.reachable:
            return
        listed = {(m.name, m.digest) for m in state.models}
        for key in [k for k in self.unloading if k[0] == host]:
            _, name, digest = key
            if (name, digest) not in listed:
                del self.unloading[key]
                self.log_action(f"unload {name}", None, outcome="done: /api/ps no longer lists it")
                continue
            self.unloading[key] += 1
            if self.unloading[key] == UNLOAD_WATCH_POLLS:
                self.log_action(
                    f"unload {name}",
                    f"still listed by /api/ps after {UNLOAD_WATCH_POLLS} polls"
                    " (a request in flight keeps it; Ollama unloads it when that ends)",
                )

    def unloading_keys(self, host: str) -> set[tuple[str, str]]:
        """``(name, digest)`` of the models of ``host`` kvtop asked to unload that are still listed."""
        return {(n, d) for h, n, d in self.unloading if h == host}

    def schedule_until_tick(self, ticking: bool) -> None:
        """Repaint the table at the next whole second while a row counts down (``live_views``);
        nothing is scheduled otherwise (no per-second repaint of an idle dashboard)."""
        if not ticking or self._until_timer is not None:
            return
        delay = 1.0 - (time.time() % 1.0) + 0.01

        def tick() -> None:
            self._until_timer = None
            if self.app.is_running:
                self.repaint()

        self._until_timer = asyncio.get_running_loop().call_later(delay, tick)

    # -- signals ----------------------------------------------------------------------------

    def foreign_processes(self) -> list[GpuProcessView]:
        """The GPU processes that are not Ollama's, on this machine's GPUs (local server only)."""
        state = self.app.states.get(self.app.local_host)
        if state is None or state.gpu is None:
            return []
        from kvtop.model.gpu import gpu_views

        seen: dict[int, GpuProcessView] = {}
        for v in gpu_views(state.gpu, state.procs, state.models):
            for p in v.others:
                seen.setdefault(p.pid, p)
        return list(seen.values())

    def signal_process(self, only_pid: int | None = None) -> None:
        """``k``: the GPU's foreign processes, to signal one (asks first). Never in ``--demo``: its
        processes are simulated, and a PID of theirs may be a real process of this machine."""
        app = self.app
        if app.settings.readonly or app.settings.demo:
            return
        procs = self.foreign_processes()
        if not procs or (only_pid is not None and all(p.pid != only_pid for p in procs)):
            app.notify(
                "no process outside Ollama on this machine's GPUs"
                if only_pid is None
                else f"PID {only_pid} is no longer on the GPU",
                markup=False,
            )
            return
        from kvtop.ui.screens.write_dialogs import SignalScreen

        app.push_screen(SignalScreen(procs, only_pid))

    # -- fixes ------------------------------------------------------------------------------

    def fix_chosen(self, fix: Fix, alert: Alert) -> None:
        """Enter on an alert's fix: an action kvtop can perform is offered behind its confirmation;
        a setting (or any fix with ``--readonly``) is shown as text to copy."""
        app = self.app
        state = app.state
        models = state.models if state is not None else ()
        op = fix_operation(fix, (v.name for v in models))
        demo_signal = op is not None and op[0] == "signal" and app.settings.demo
        if op is None or app.settings.readonly or app.replay is not None or demo_signal:
            note = ""
            if op is not None:
                note = (  # a replay runs read-only: say the true reason, not --readonly
                    "a recording: nothing to act on. The fix:"
                    if app.replay is not None
                    else "read-only (--readonly): kvtop sends nothing. The command to run yourself:"
                    if app.settings.readonly
                    else "the demo's GPU processes are simulated (their PIDs are not this machine's): kvtop"
                    " signals nothing. The fix:"
                )
            from kvtop.ui.screens.write_dialogs import FixTextScreen

            app.push_screen(FixTextScreen(fix, alert, note))
            return
        kind, arg = op
        if kind == "unload":
            assert isinstance(arg, tuple)
            self.offer_unload([v for v in models if v.name in arg])
        else:
            assert isinstance(arg, int)
            self.signal_process(arg)
