"""Operator actions (docs/reference.md, "Keys"): unload (``u``), keep-alive (``a``), signal a foreign GPU process
(``k``), and an alert's fix offered from the events pane (Enter on a fix).

Every write asks first on a ``ConfirmWrite`` dialog (``kvtop.ui.screens.confirm``: Cancel focused;
only ``y`` or a click on the action writes, and only once the dialog has been shown for
``ConfirmWrite.ARM_S``: keys typed ahead are swallowed), is logged in the events pane with its
outcome (``OperatorEntry``), and does not exist with ``--readonly`` (no key, no footer entry, no
help line, no palette command: the app's ``check_action`` refuses ``WRITE_ACTIONS``). A signal to
another user's process (kvtop runs as root) names its owner and asks a second time. Writes to a
server go through the app's own polling client of that server (``OllamaClient.generate``), so its
headers and TLS settings apply.

Requests (docs/ollama-internals.md §1.4, §3.5 ``keep_alive``): unload is ``POST /api/generate
{"model": name, "keep_alive": 0}`` as ``ollama stop`` sends it; a keep-alive is an empty
generate with ``keep_alive`` (``"5m"``, ``"1h"``, ``-1`` forever, ``0`` release now) as
``ollama run --keepalive`` sends it. Signals: ``kvtop.sources.signals``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import signal as _signal
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from kvtop.model.alerts import Alert, Fix
from kvtop.model.gpu import GpuProcessView
from kvtop.model.views import ModelView
from kvtop.ui.format import exact_bytes, ibytes, safe
from kvtop.ui.screens.confirm import ConfirmWrite, OnceModal
from kvtop.ui.widgets.events_pane import EventsPane, OperatorEntry

if TYPE_CHECKING:
    from kvtop.sources.signals import SignalTarget

__all__ = ["KEEP_ALIVE_CHOICES", "UNLOAD_WATCH_POLLS", "WRITE_ACTIONS", "FixTextScreen", "KeepAliveScreen",
           "OperatorActions", "SignalScreen", "countdown_text", "fix_operation", "live_views",
           "signal_questions"]

WRITE_ACTIONS = frozenset({"unload", "keep_alive", "signal_process"})
"""The app's actions that write (none exists with ``--readonly``)."""

KEEP_ALIVE_CHOICES: tuple[tuple[str, str | int], ...] = (
    ("5 m", "5m"), ("1 h", "1h"), ("forever (-1)", -1), ("0 = release now", 0))
"""The keep-alive list (label, the ``keep_alive`` value sent)."""

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


def live_views(views: Sequence[ModelView], now_s: float,
               unloading: Iterable[tuple[str, str]] = ()) -> tuple[tuple[ModelView, ...], bool]:
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


def _keep_label(value: str | int) -> str:
    return next((label for label, v in KEEP_ALIVE_CHOICES if v == value), str(value))


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


class KeepAliveScreen(OnceModal[Any]):
    """Pick a keep-alive for a model (``KEEP_ALIVE_CHOICES``); Esc picks none. Picking does not
    write: the confirmation that follows does."""

    DEFAULT_CSS = """
    KeepAliveScreen { align: center middle; }
    KeepAliveScreen > Vertical { width: 60; max-width: 100%; height: auto; border: round $primary;
        background: $surface; padding: 0 1; }
    KeepAliveScreen OptionList { height: auto; }
    """
    BINDINGS = [Binding("escape", "dismiss_none", "Cancel")]

    def __init__(self, model: str, until: str) -> None:
        super().__init__()
        self.model = model
        self.until = until

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Text(f"Keep {safe(self.model, 60)} loaded (UNTIL now: {safe(self.until, 30)})"))
            yield OptionList(*(Option(label, id=str(i)) for i, (label, _) in enumerate(KEEP_ALIVE_CHOICES)))
            yield Static(Text("Enter picks (then asks); Esc cancels", style="dim"))

    @on(OptionList.OptionSelected)
    def _picked(self, event: OptionList.OptionSelected) -> None:
        self.answer(KEEP_ALIVE_CHOICES[int(event.option.id or 0)][1])

    def action_dismiss_none(self) -> None:
        self.answer(None)


class FixTextScreen(OnceModal[None]):
    """A fix kvtop does not apply (a setting), shown as the exact text to copy; ``c`` copies it
    to the clipboard (``App.copy_to_clipboard``: OSC 52, where the terminal allows it)."""

    DEFAULT_CSS = """
    FixTextScreen { align: center middle; }
    FixTextScreen > Vertical { width: 80; max-width: 100%; height: auto; border: round $primary;
        background: $surface; padding: 1 2; }
    """
    BINDINGS = [Binding("c", "copy", "Copy"), Binding("escape,enter", "dismiss", "Close")]

    def __init__(self, fix: Fix, alert: Alert, note: str = "") -> None:
        super().__init__()
        self.fix = fix
        self.alert = alert
        self.note = note

    def compose(self) -> ComposeResult:
        body = Text()
        body.append(f"{safe(self.alert.kind)}{': ' + safe(self.alert.model, 60) if self.alert.model else ''}\n",
                    style="bold")
        body.append(self.note or "A setting: kvtop shows it, never applies it. Copy it:")
        body.append("\n\n")
        body.append(f"  {safe(self.fix.action, 200)}\n", style="bold reverse")
        body.append(f"\n{safe(self.fix.detail, 300)}\ncost: {safe(self.fix.cost, 300)}\n\n", style="dim")
        body.append("c copies it to the clipboard · Esc closes")
        with Vertical():
            yield Static(body, id="fix-text")

    def action_copy(self) -> None:
        self.app.copy_to_clipboard(self.fix.action)
        self.notify(f"copied: {safe(self.fix.action, 100)}", timeout=3, markup=False)


class SignalScreen(OnceModal[None]):
    """The GPU's foreign processes (not Ollama's); Enter sends SIGTERM after a confirmation,
    ``9`` SIGKILL after two; another user's process (kvtop runs as root) is asked about once
    more (``signal_questions``). A process this user may not signal is listed with why, without
    the action. Esc closes."""

    DEFAULT_CSS = """
    SignalScreen { align: center middle; }
    SignalScreen > Vertical { width: 100; max-width: 100%; height: auto; max-height: 90%;
        border: round $warning; background: $surface; padding: 0 1; }
    SignalScreen OptionList { height: auto; max-height: 16; }
    """
    BINDINGS = [Binding("enter", "term", "SIGTERM", priority=True), Binding("9", "kill", "SIGKILL"),
                Binding("escape", "dismiss", "Close")]

    def __init__(self, processes: Sequence[GpuProcessView], only_pid: int | None = None) -> None:
        super().__init__()
        self.processes = tuple(p for p in processes if only_pid is None or p.pid == only_pid)
        self.targets: dict[int, SignalTarget] = {}
        self.status = "reading who owns each process…"

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Text("Signal a GPU process that is not Ollama's (Ollama's runners: unload with u)",
                              style="bold"))
            yield OptionList(id="procs")
            yield Static(id="signal-status")

    def on_mount(self) -> None:
        self._fill()
        self._read_targets()

    @work(group="signal-targets", exclusive=True, exit_on_error=False)
    async def _read_targets(self) -> None:
        from kvtop.sources.signals import signal_targets

        self.targets = await asyncio.to_thread(signal_targets, [p.pid for p in self.processes])
        self.status = ("Enter: SIGTERM (asks first) · 9: SIGKILL (asks twice) · Esc: close" if self.processes
                       else "no foreign process on the GPUs")
        self._fill()

    def _line(self, p: GpuProcessView) -> Text:
        t = self.targets.get(p.pid)
        text = Text()
        text.append(f"PID {p.pid:<8}", style="bold")
        mem = ibytes(p.gpu_memory_bytes) if p.gpu_memory_bytes is not None else "?"
        text.append(f" {mem:>9}  {safe((t.user if t else None) or p.user or '?', 16):<16} "
                    f"{safe(p.command or p.name or (t.name if t else None) or '?', 40)}")
        if t is None:
            text.append("  …", style="dim")
        elif not t.allowed:
            text.append(f"  cannot signal: {safe(t.reason, 80)}", style="dim")
        elif not t.mine:
            text.append(f"  owned by {safe(t.owner, 32)}, not you (asks twice)", style="bold")
        return text

    def _fill(self) -> None:
        options = self.query_one("#procs", OptionList)
        highlighted = options.highlighted
        options.clear_options()
        options.add_options([Option(self._line(p), id=str(p.pid)) for p in self.processes])
        if self.processes:
            options.highlighted = min(highlighted or 0, len(self.processes) - 1)
        self.query_one("#signal-status", Static).update(Text(self.status))

    def selected(self) -> SignalTarget | None:
        options = self.query_one("#procs", OptionList)
        if options.highlighted is None or not self.processes:
            return None
        return self.targets.get(self.processes[options.highlighted].pid)

    def _say(self, text: str) -> None:
        self.status = text
        self._fill()

    def action_term(self) -> None:
        self._ask(_signal.SIGTERM)

    def action_kill(self) -> None:
        self._ask(_signal.SIGKILL)

    def _ask(self, sig: int) -> None:
        target = self.selected()
        if target is None:
            self._say("wait for the owners to be read, or pick a process")
            return
        if not target.allowed:
            self._say(f"PID {target.pid}: {target.reason}")
            return
        self._ask_all(signal_questions(target, sig), target, sig)

    def _ask_all(self, questions: Sequence[tuple[str, str]], target: SignalTarget, sig: int) -> None:
        """Ask ``questions`` (text, button word) one after another; the signal is sent only when
        every one was confirmed, and the first No logs the cancellation."""
        name = safe(target.name or "?", 40)
        what = f"{sig_name(sig)} PID {target.pid} ({name})"
        app: Any = self.app

        def answer(yes: bool | None, rest: Sequence[tuple[str, str]]) -> None:
            if not yes:
                app.log_operator_action(what, None, cancelled=True)
                self._say(f"{what}: cancelled, nothing sent")
            elif rest:
                ask(rest)
            else:
                self._send(target, sig, what)

        def ask(left: Sequence[tuple[str, str]]) -> None:
            text, label = left[0]
            app.push_screen(ConfirmWrite(text, label), lambda yes: answer(yes, left[1:]))

        ask(questions)

    @work(group="signal-send", exit_on_error=False)
    async def _send(self, target: SignalTarget, sig: int, what: str) -> None:
        from kvtop.sources.signals import send_signal, wait_gone

        error = await asyncio.to_thread(send_signal, target, sig)
        app: Any = self.app
        if error is not None:
            app.log_operator_action(what, error)
            self._say(f"{what}: {error}")
            return
        gone = await asyncio.to_thread(wait_gone, target, 2.0)
        outcome = "sent; the process exited" if gone else "sent; still running after 2 s (9: SIGKILL)"
        app.log_operator_action(what, None, outcome=outcome)
        self._say(f"{what}: {outcome}")


def sig_name(sig: int) -> str:
    """``SIGTERM`` / ``SIGKILL``."""
    return _signal.Signals(sig).name


def signal_questions(target: SignalTarget, sig: int) -> list[tuple[str, str]]:
    """The confirmations before ``sig`` goes to ``target``, in order, as (text, button word):
    the first names the process and its owner; a process of another user (kvtop runs as root)
    is asked about a second time, saying whose it is; SIGKILL asks once more, last."""
    name = safe(target.name or "?", 40)
    owner = safe(target.owner, 32)
    whose = "yours" if target.mine else f"owned by {owner}, not you"
    questions = [(f"Send {sig_name(sig)} to PID {target.pid} ({name}), owned by {owner}"
                  f"{'' if target.mine else ' (another user)'}?\n\n"
                  + ("It asks the process to exit; it may clean up first." if sig == _signal.SIGTERM else
                     "SIGKILL ends it at once: it cannot save anything or clean up."), sig_name(sig))]
    if not target.mine:
        questions.append((f"PID {target.pid} ({name}) is {whose}. kvtop runs as root, so the kernel lets it "
                          f"signal any user's process: {owner} may lose work.\n\n"
                          f"Really send {sig_name(sig)} to {owner}'s process?", f"{sig_name(sig)} anyway"))
    if sig == _signal.SIGKILL:
        questions.append((f"Really SIGKILL PID {target.pid} ({name}, {whose})? This is the last question.",
                          "SIGKILL"))
    return questions


class OperatorActions:
    """The app's write actions (mixed into ``KvtopApp``; uses its state, sources and screens)."""

    operator_log: list[OperatorEntry]
    unloading: dict[tuple[str, str, str], int]
    """(host, name, digest) -> polls of that host seen since the unload was sent."""

    def _init_operator(self) -> None:
        self.operator_log = []
        self.unloading = {}
        self._until_timer: asyncio.TimerHandle | None = None

    # -- the log ----------------------------------------------------------------------------

    def log_operator_action(self, what: str, error: str | None, *, cancelled: bool = False,
                            outcome: str | None = None) -> None:
        """Log one write (or its cancellation) in the events pane; failures are notified too."""
        app: Any = self
        if cancelled:
            entry = OperatorEntry(time.time(), what, "cancelled: nothing sent")
        elif error is not None:
            entry = OperatorEntry(time.time(), what, f"failed: {error}", ok=False)
            app.notify(safe(f"{what}: {error}", 300), severity="error", timeout=8, markup=False)
        else:
            entry = OperatorEntry(time.time(), what, outcome or "sent")
        self.operator_log.append(entry)
        del self.operator_log[:-MAX_LOG]
        app.refresh_dashboard()

    # -- unload / keep-alive ----------------------------------------------------------------

    def _writer(self) -> Any:
        app: Any = self
        source = app.sources.get(app.current_host)
        return source if hasattr(source, "generate") else None

    def _selected(self) -> ModelView | None:
        from kvtop.ui.widgets.models_table import ModelsTable

        app: Any = self
        view = app.dashboard.query_one(ModelsTable).selected_view
        if view is None or view.cloud:
            app.notify("select a local model first", markup=False)
            return None
        return view

    def action_unload(self) -> None:
        """``u``: unload the selected model (asks first)."""
        view = self._selected()
        if view is not None:
            self.offer_unload([view])

    def offer_unload(self, views: Sequence[ModelView]) -> None:
        """Ask, then send ``keep_alive: 0`` for each of ``views`` (an alert's fix may name several)."""
        app: Any = self
        if app.settings.readonly or not views:
            return
        if self._writer() is None:
            app.notify("this server's source cannot send requests", severity="warning", markup=False)
            return
        names = ", ".join(v.name for v in views)
        lines = [f"Unload {safe(names, 200)} now?", ""]
        for v in views:
            lines.append(f"{safe(v.name, 60)} {_vram_line(v)}.")
        each = " for each" if len(views) > 1 else ""
        lines += ["", f"kvtop sends POST {safe(app.current_host, 80)}/api/generate "
                      f'{{"model": <name>, "keep_alive": 0}}{each} (as `ollama stop` does).',
                  "It loads again on its next request." if len(views) == 1 else
                  "Each loads again on its next request."]
        host = app.current_host
        app.push_screen(ConfirmWrite("\n".join(lines), "Unload"),
                        lambda yes: self._unload_confirmed(bool(yes), host, tuple(views)))

    def _unload_confirmed(self, yes: bool, host: str, views: tuple[ModelView, ...]) -> None:
        if not yes:
            for v in views:
                self.log_operator_action(f"unload {v.name}", None, cancelled=True)
            return
        for v in views:
            self._send_keep_alive(host, v, 0)

    def action_keep_alive(self) -> None:
        """``a``: pick a keep-alive for the selected model, then confirm it."""
        view = self._selected()
        app: Any = self
        if view is None or app.settings.readonly:
            return
        if self._writer() is None:
            app.notify("this server's source cannot send requests", severity="warning", markup=False)
            return
        host = app.current_host
        app.push_screen(KeepAliveScreen(view.name, view.until), lambda value: self._keep_picked(value, host, view))

    def _keep_picked(self, value: str | int | None, host: str, view: ModelView) -> None:
        if value is None:
            return
        app: Any = self
        label = _keep_label(value)
        effect = ("unloads it now (the row leaves /api/ps)" if value == 0 else
                  "keeps it loaded until Ollama is restarted or it is unloaded" if value == -1 else
                  f"keeps it loaded {label} from now (UNTIL shows it on the next poll)")
        text = (f"Set the keep-alive of {safe(view.name, 80)} to {label}?\n\n"
                f"kvtop sends POST {safe(host, 80)}/api/generate with an empty prompt and keep_alive "
                f"{value if isinstance(value, int) else repr(value)} (as `ollama run --keepalive` does): it {effect}.")
        if value == 0:
            text += f"\nIt {_vram_line(view)}; it loads again on its next request."
        app.push_screen(ConfirmWrite(text, "Release" if value == 0 else "Keep"),
                        lambda yes: self._keep_confirmed(bool(yes), host, view, value))

    def _keep_confirmed(self, yes: bool, host: str, view: ModelView, value: str | int) -> None:
        what = f"keep-alive {_keep_label(value)} for {view.name}"
        if not yes:
            self.log_operator_action(what, None, cancelled=True)
            return
        app: Any = self
        state = app.states.get(host)
        if value != 0 and state is not None and all((m.name, m.digest) != (view.name, view.digest)
                                                     for m in state.models):
            # an empty generate loads a model that is not loaded: it left while the dialog was open
            self.log_operator_action(what, f"not sent: /api/ps no longer lists {view.name} (a keep-alive would load"
                                           " it again)")
            return
        self._send_keep_alive(host, view, value)

    def _send_keep_alive(self, host: str, view: ModelView, value: str | int) -> None:
        app: Any = self
        what = f"unload {view.name}" if value == 0 else f"keep-alive {_keep_label(value)} for {view.name}"
        source = app.sources.get(host)

        async def send() -> None:
            if source is None or not hasattr(source, "generate"):
                self.log_operator_action(what, "no client for this server")
                return
            error = await source.generate(view.name, keep_alive=value)
            if error is None and value == 0:
                self.unloading[(host, view.name, view.digest)] = 0
                self.log_operator_action(what, None, outcome="sent; unloading… (the row leaves when /api/ps no longer lists it)")
            elif error is None:
                self.log_operator_action(what, None, outcome="sent; UNTIL shows the new expiry on the next poll")
            else:
                self.log_operator_action(what, error)

        app.run_worker(send(), group=f"write-{host}-{view.name}", exit_on_error=False)

    def watch_unloads(self, host: str) -> None:
        """After each applied poll of ``host``: a model asked to unload that ``/api/ps`` no longer
        lists is logged as gone; one still listed after ``UNLOAD_WATCH_POLLS`` polls is said once."""
        app: Any = self
        if not self.unloading:
            return
        state = app.states.get(host)
        if state is None or state.ollama is None or not state.ollama.reachable:
            return
        listed = {(m.name, m.digest) for m in state.models}
        for key in [k for k in self.unloading if k[0] == host]:
            _, name, digest = key
            if (name, digest) not in listed:
                del self.unloading[key]
                self.log_operator_action(f"unload {name}", None, outcome="done: /api/ps no longer lists it")
                continue
            self.unloading[key] += 1
            if self.unloading[key] == UNLOAD_WATCH_POLLS:
                self.log_operator_action(f"unload {name}", f"still listed by /api/ps after {UNLOAD_WATCH_POLLS} polls"
                                         " (a request in flight keeps it; Ollama unloads it when that ends)")

    def unloading_keys(self, host: str) -> set[tuple[str, str]]:
        """``(name, digest)`` of the models of ``host`` kvtop asked to unload that are still listed."""
        return {(n, d) for h, n, d in self.unloading if h == host}

    def schedule_until_tick(self, ticking: bool) -> None:
        """Repaint the table at the next whole second while a row counts down (``live_views``);
        nothing is scheduled otherwise (no per-second repaint of an idle dashboard)."""
        if not ticking or self._until_timer is not None:
            return
        app: Any = self
        delay = 1.0 - (time.time() % 1.0) + 0.01

        def tick() -> None:
            self._until_timer = None
            if app.is_running:
                app.refresh_dashboard()

        self._until_timer = asyncio.get_running_loop().call_later(delay, tick)

    # -- signals ----------------------------------------------------------------------------

    def foreign_processes(self) -> list[GpuProcessView]:
        """The GPU processes that are not Ollama's, on this machine's GPUs (local server only)."""
        app: Any = self
        state = app.states.get(app.local_host)
        if state is None or state.gpu is None:
            return []
        from kvtop.model.gpu import gpu_views

        seen: dict[int, GpuProcessView] = {}
        for v in gpu_views(state.gpu, state.procs, state.models):
            for p in v.others:
                seen.setdefault(p.pid, p)
        return list(seen.values())

    def action_signal_process(self, only_pid: int | None = None) -> None:
        """``k``: the GPU's foreign processes, to signal one (asks first). Never in ``--demo``: its
        processes are simulated, and a PID of theirs may be a real process of this machine."""
        app: Any = self
        if app.settings.readonly or app.settings.demo:
            return
        procs = self.foreign_processes()
        if not procs or (only_pid is not None and all(p.pid != only_pid for p in procs)):
            app.notify("no process outside Ollama on this machine's GPUs" if only_pid is None else
                       f"PID {only_pid} is no longer on the GPU", markup=False)
            return
        app.push_screen(SignalScreen(procs, only_pid))

    # -- fixes ------------------------------------------------------------------------------

    def on_events_pane_fix_chosen(self, event: EventsPane.FixChosen) -> None:
        """Enter on an alert's fix: an action kvtop can perform is offered behind its confirmation;
        a setting (or any fix with ``--readonly``) is shown as text to copy."""
        app: Any = self
        state = app.state
        models = state.models if state is not None else ()
        op = fix_operation(event.fix, (v.name for v in models))
        demo_signal = op is not None and op[0] == "signal" and app.settings.demo
        if op is None or app.settings.readonly or app.replay is not None or demo_signal:
            note = ""
            if op is not None:
                note = ("read-only (--readonly): kvtop sends nothing. The command to run yourself:"
                        if app.settings.readonly else "a recording: nothing to act on. The fix:"
                        if app.replay is not None else
                        "the demo's GPU processes are simulated (their PIDs are not this machine's): kvtop"
                        " signals nothing. The fix:")
            app.push_screen(FixTextScreen(event.fix, event.alert, note))
            return
        kind, arg = op
        if kind == "unload":
            assert isinstance(arg, tuple)
            self.offer_unload([v for v in models if v.name in arg])
        else:
            assert isinstance(arg, int)
            self.action_signal_process(arg)

    def operator_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """The command palette's write commands (none with ``--readonly`` or in a replay)."""
        app: Any = self
        if app.settings.readonly or app.replay is not None or len(app.screen_stack) > 1:
            return
        yield SystemCommand("Unload model", "Unload the selected model (u; asks first)", self.action_unload)
        yield SystemCommand("Keep-alive", "Set the selected model's keep-alive (a; asks first)", self.action_keep_alive)
        if not app.settings.demo:  # the demo's processes are simulated
            yield SystemCommand("Signal GPU process", "SIGTERM / SIGKILL a process outside Ollama on the GPU (k)",
                                self.action_signal_process)
