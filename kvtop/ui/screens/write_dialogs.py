"""The operator's dialogs (pushed by ``kvtop.ui.actions.OperatorActions``): pick a keep-alive
(``a``), read a fix kvtop does not apply (Enter on a setting's fix), and signal a GPU process that
is not Ollama's (``k``), each write behind ``ConfirmWrite`` (``kvtop.ui.screens.confirm``).

Imported when the first of them opens, not with the dashboard (``benchmarks/startup.py``).
"""

from __future__ import annotations

import asyncio
import signal as _signal
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from kvtop.model.alerts import Alert, Fix
from kvtop.model.gpu import GpuProcessView
from kvtop.ui.format import ibytes, safe
from kvtop.ui.screens.confirm import ConfirmWrite, OnceModal

if TYPE_CHECKING:
    from kvtop.sources.signals import SignalTarget

__all__ = [
    "KEEP_ALIVE_CHOICES",
    "FixTextScreen",
    "KeepAliveScreen",
    "SignalScreen",
    "keep_label",
    "sig_name",
    "signal_questions",
]

KEEP_ALIVE_CHOICES: tuple[tuple[str, str | int], ...] = (
    ("5 m", "5m"),
    ("1 h", "1h"),
    ("forever (-1)", -1),
    ("0 = release now", 0),
)
"""The keep-alive list (label, the ``keep_alive`` value sent)."""


def keep_label(value: str | int) -> str:
    """The label of a ``keep_alive`` value in :data:`KEEP_ALIVE_CHOICES` (``forever (-1)``), or the value."""
    return next((label for label, v in KEEP_ALIVE_CHOICES if v == value), str(value))


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
        body.append(
            f"{safe(self.alert.kind)}{': ' + safe(self.alert.model, 60) if self.alert.model else ''}\n", style="bold"
        )
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
    BINDINGS = [
        Binding("enter", "term", "SIGTERM", priority=True),
        Binding("9", "kill", "SIGKILL"),
        Binding("escape", "dismiss", "Close"),
    ]

    def __init__(self, processes: Sequence[GpuProcessView], only_pid: int | None = None) -> None:
        super().__init__()
        self.processes = tuple(p for p in processes if only_pid is None or p.pid == only_pid)
        self.targets: dict[int, SignalTarget] = {}
        self.status = "reading who owns each process…"

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(
                Text("Signal a GPU process that is not Ollama's (Ollama's runners: unload with u)", style="bold")
            )
            yield OptionList(id="procs")
            yield Static(id="signal-status")

    def on_mount(self) -> None:
        self._fill()
        self._read_targets()

    @work(group="signal-targets", exclusive=True, exit_on_error=False)
    async def _read_targets(self) -> None:
        from kvtop.sources.signals import signal_targets

        self.targets = await asyncio.to_thread(signal_targets, [p.pid for p in self.processes])
        self.status = (
            "Enter: SIGTERM (asks first) · 9: SIGKILL (asks twice) · Esc: close"
            if self.processes
            else "no foreign process on the GPUs"
        )
        self._fill()

    def _line(self, p: GpuProcessView) -> Text:
        t = self.targets.get(p.pid)
        text = Text()
        text.append(f"PID {p.pid:<8}", style="bold")
        mem = ibytes(p.gpu_memory_bytes) if p.gpu_memory_bytes is not None else "?"
        text.append(
            f" {mem:>9}  {safe((t.user if t else None) or p.user or '?', 16):<16} "
            f"{safe(p.command or p.name or (t.name if t else None) or '?', 40)}"
        )
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
                app.operator.log_action(what, None, cancelled=True)
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
            app.operator.log_action(what, error)
            self._say(f"{what}: {error}")
            return
        gone = await asyncio.to_thread(wait_gone, target, 2.0)
        outcome = "sent; the process exited" if gone else "sent; still running after 2 s (9: SIGKILL)"
        app.operator.log_action(what, None, outcome=outcome)
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
    questions = [
        (
            f"Send {sig_name(sig)} to PID {target.pid} ({name}), owned by {owner}"
            f"{'' if target.mine else ' (another user)'}?\n\n"
            + (
                "It asks the process to exit; it may clean up first."
                if sig == _signal.SIGTERM
                else "SIGKILL ends it at once: it cannot save anything or clean up."
            ),
            sig_name(sig),
        )
    ]
    if not target.mine:
        questions.append(
            (
                f"PID {target.pid} ({name}) is {whose}. kvtop runs as root, so the kernel lets it "
                f"signal any user's process: {owner} may lose work.\n\n"
                f"Really send {sig_name(sig)} to {owner}'s process?",
                f"{sig_name(sig)} anyway",
            )
        )
    if sig == _signal.SIGKILL:
        questions.append((f"Really SIGKILL PID {target.pid} ({name}, {whose})? This is the last question.", "SIGKILL"))
    return questions
