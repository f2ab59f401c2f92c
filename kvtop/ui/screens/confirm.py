"""The one confirmation every write passes through (no write without a confirmation, none from keys typed ahead).

Unload (``u``), keep-alive (``a``), the what-if load (``a`` in ``w``), a signal (``k``) and an
alert's fix all ask on a :class:`ConfirmWrite` before anything is sent. It opens with Cancel
focused and the action button never takes the focus, so Enter, Space or a Tab typed ahead can
only cancel; and the action itself (``y``, or a click on its button) is armed only
``ConfirmWrite.ARM_S`` seconds after the dialog has been drawn: a key or a click that arrived
before then (typed ahead of the dialog: ``u y``, the word "buy" on the dashboard, ``w a y``,
``Enter y`` in the ``k`` screen) is swallowed, not queued, and any other key starts the wait
again (typing goes on: "fully" typed at 3 keys a second reached its ``y`` 0.9 s after the ``u``).
The button says so: it reads ``wait…`` (disabled) until it is armed.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import events
from textual._time import get_time
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen, ScreenResultType
from textual.widgets import Button, Static

__all__ = ["ConfirmWrite", "OnceModal"]


class OnceModal(ModalScreen[ScreenResultType]):
    """A modal screen answered at most once.

    Textual's ``dismiss`` pops whatever screen is on top and calls the result callback each time
    it is called. A burst of keys can answer twice (two Enters each post a ``Button.Pressed`` or
    ``OptionList.OptionSelected`` before the first is handled): the second answer would run the
    callback again and pop the screen below (the dashboard: a crash). ``answer`` dismisses only
    the first time, and only while this screen is on top.
    """

    answered: bool = False
    """True once answered."""

    def answer(self, result: ScreenResultType | None) -> None:
        """Dismiss with ``result`` unless already answered or not on top (then it does nothing)."""
        if not self.answered and self.is_current:
            self.answered = True
            self.dismiss(result)

    async def action_dismiss(self, result: ScreenResultType | None = None) -> None:
        """The ``dismiss`` action (a key binding), answered once like ``answer``."""
        self.answer(result)


class _ActionButton(Button):
    """The write button: never focused (Enter cannot reach it), disabled until its dialog is
    armed, and a click counts only when the mouse button also went down on it after the arming
    (Textual makes the ``Click`` at the release: a press begun on the disabled "wait…" button and
    released after the arming is swallowed)."""

    can_focus = False
    pressed_at: float | None = None
    """When the mouse button last went down on it while armed (Textual's clock); reset at arming."""

    # Textual calls the handler of every class in the MRO: these run before Button's and
    # Widget's own, and a swallowed click prevents theirs (prevent_default ends the walk).
    def _on_mouse_down(self, event: events.MouseDown) -> None:
        self.pressed_at = event.time

    def _on_click(self, event: events.Click) -> None:
        screen = self.screen
        if isinstance(screen, ConfirmWrite) and (self.pressed_at is None or not screen.accepts(self.pressed_at)):
            event.stop()
            event.prevent_default()
            screen.swallow("a click")


class ConfirmWrite(OnceModal[bool]):
    """Asks before kvtop sends a request that changes a server or signals a process.

    Args:
        text: What will be sent, in full (plain text: shown as is, never as markup).
        action_label: The write button's word (``Unload``, ``SIGTERM``, ``Load``…).

    The result is True only for ``y`` or a click on the action, pressed after the dialog was
    armed (``armed``); False for ``n``, Esc, Enter or a click on Cancel, which work at once.
    """

    DEFAULT_CSS = """
    ConfirmWrite { align: center middle; }
    ConfirmWrite > Vertical { width: 76; max-width: 100%; height: auto; border: round $warning;
        background: $surface; padding: 1 2; }
    ConfirmWrite Horizontal { height: auto; margin-top: 1; }
    ConfirmWrite Button { margin-right: 2; }
    ConfirmWrite #confirm-hint { height: auto; color: $text-muted; display: none; }
    """
    BINDINGS = [Binding("n,escape", "dismiss(False)", "No")]
    AUTO_FOCUS = "#no"

    ARM_S: ClassVar[float] = 0.6
    """Seconds from the dialog being drawn to its action being live. Keys and clicks that
    arrived before are swallowed. A class attribute: a test may wait on ``armed`` instead of time."""

    CONFIRM_KEY: ClassVar[str] = "y"

    def __init__(self, text: str, action_label: str = "Load") -> None:
        super().__init__()
        self.text = text
        self.action_label = action_label
        self.armed = False
        """True once the action is live (``ARM_S`` after the dialog was drawn)."""
        self.armed_at: float | None = None
        """When it was armed (Textual's monotonic clock, as ``events.Event.time``); None before."""
        self.swallowed = 0
        """Confirm keys and clicks swallowed because they came before the arming."""
        self._generation = 0

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Text(self.text), id="confirm-text")
            with Horizontal():
                yield Button("Cancel (n)", id="no")
                yield _ActionButton(self._label(), id="yes", variant="warning", disabled=True)
            yield Static(id="confirm-hint")

    def _label(self) -> Text:
        return Text(f"{self.action_label} ({self.CONFIRM_KEY})" if self.armed else f"wait… {self.action_label}")

    # -- arming -----------------------------------------------------------------------------

    def on_screen_resume(self) -> None:
        """Shown (pushed, or uncovered again): arm ``ARM_S`` after the next refresh has drawn it."""
        self._disarm()
        generation = self._generation
        self.call_after_refresh(self._drawn, generation)

    def on_screen_suspend(self) -> None:
        """Covered by another screen: keys typed meanwhile must not find it armed on return."""
        self._disarm()

    def _drawn(self, generation: int) -> None:
        if generation == self._generation:
            self.set_timer(self.ARM_S, lambda: self._arm(generation), name="confirm-arm")

    def _arm(self, generation: int) -> None:
        if generation != self._generation or not self.is_attached:
            return
        self.armed = True
        self.armed_at = get_time()
        self._show_state()

    def _disarm(self) -> None:
        self._generation += 1
        self.armed = False
        self.armed_at = None
        if self.is_mounted:
            self._show_state()

    def _show_state(self) -> None:
        button = self.query_one("#yes", _ActionButton)
        button.label = self._label()
        button.disabled = not self.armed
        button.pressed_at = None

    def accepts(self, at: float) -> bool:
        """Whether an input event created at ``at`` (Textual's clock) may confirm: only one that
        arrived after the dialog was armed."""
        return self.armed and self.armed_at is not None and at >= self.armed_at

    def swallow(self, what: str = "") -> None:
        """Count and say a confirm key or click (``what``: ``"a click"``; default the key) that
        came before the arming; it does nothing else."""
        self.swallowed += 1
        hint = self.query_one("#confirm-hint", Static)
        hint.display = True
        hint.update(
            Text(
                f"Ignored: {what or self.CONFIRM_KEY} came before this question was ready. Read it, then press "
                f"{self.CONFIRM_KEY} once the button reads {self.action_label} ({self.CONFIRM_KEY})."
            )
        )

    # -- answers ----------------------------------------------------------------------------

    def on_key(self, event: events.Key) -> None:
        if event.key != self.CONFIRM_KEY:
            # Typing goes on (a word typed into the wrong window: "fully", "luxury" at 3 keys a
            # second reach their y after the arming): the wait starts again from this key, so y
            # counts only after ARM_S with no other key.
            self._rearm()
            return
        event.stop()
        event.prevent_default()
        if self.accepts(event.time):
            self.answer(True)
        else:
            self.swallow()
            self._rearm()

    def _rearm(self) -> None:
        """Disarm, and arm again ``ARM_S`` from now (a key came while waiting, or after the arming)."""
        if self.answered or not self.is_current:
            return
        self._disarm()
        generation = self._generation
        self.set_timer(self.ARM_S, lambda: self._arm(generation), name="confirm-arm")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "yes":
            if self.armed:
                self.answer(True)
            return
        self.answer(False)

    def answer(self, result: bool | None) -> None:
        """True confirms, only once armed (else it is swallowed); False or None cancels at once."""
        if result and not self.armed:
            self.swallow()
            return
        super().answer(bool(result))
