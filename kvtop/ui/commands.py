"""Which of the dashboard's actions exist where, why a key does nothing, and the command palette.

One rule decides for the keys, the footer and the palette (:func:`refusal`): an action is refused
with a reason (``--readonly`` has no writes, the demo's processes are simulated, a replay has no
live server, a dashboard action over another screen …) or allowed. ``KvtopApp.check_action`` asks
it about the screen in front; the palette (``Ctrl+P``) asks it about the screen it was opened over
(the palette is itself a screen: asked about the screen in front, every dashboard action would be
refused while the palette is open, and the palette would list none of them). A key that is bound
but refused says why in a notification (:func:`dead_key_reason`) instead of doing nothing silently;
so do the function keys of ``top`` and ``htop`` that kvtop leaves unbound (:data:`UNBOUND_KEYS`).

The palette lists every action of :data:`PALETTE` allowed over its screen, each with its key
(from ``kvtop.ui.keys.BINDINGS``); choosing one runs the action as its key would, after the
palette has closed (``App.run_action``: the same ``check_action``, the same confirmation for a
write).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from textual.app import SystemCommand
from textual.binding import Binding
from textual.screen import ModalScreen, Screen
from textual.widgets import Input

from kvtop.ui.actions import WRITE_ACTIONS
from kvtop.ui.keys import BINDINGS, LIVE_ACTIONS, MAIN_SCREEN_ACTIONS, REPLAY_ACTIONS, TYPING_HIDES

__all__ = ["PALETTE", "UNBOUND_KEYS", "PaletteEntry", "dead_key_reason", "key_text", "palette_commands", "refusal"]

SWITCHER_ACTIONS = frozenset({"next_server", "prev_server", "server"})
"""The server switcher's keys (``]``, ``[``, ``1``–``9``): they need two servers or more."""


def refusal(app: Any, action: str, *, over_dashboard: bool, typing: bool) -> str | None:
    """Why ``action`` does not exist now, in words for a notification, or None when it does.

    ``app`` is the ``KvtopApp`` (its ``settings``, ``replay``, ``hosts``, ``proc_source``);
    ``over_dashboard``: the dashboard is the screen the action would act on (no detail, help or
    planner screen in front of it); ``typing``: the focus is in a text box (the filter), where the
    plain keys are typed. The order is the order of importance: a write in a replay (which runs
    read-only) is refused because a replay is not live, one under ``--readonly`` for that reason,
    whatever the screen."""
    settings = app.settings
    if action in WRITE_ACTIONS and app.replay is not None:  # a replay runs read-only; --readonly was not asked
        return "a replay is not live: it plays a recording, so kvtop sends no unload, keep-alive, load or signal"
    if action in WRITE_ACTIONS and settings.readonly:
        return "read-only (--readonly): kvtop sends no unload, keep-alive, load or signal"
    if action == "signal_process" and settings.demo:
        return (
            "the demo's GPU processes are simulated: k signals only real processes of this machine"
            " (kvtop without --demo)"
        )
    if action in REPLAY_ACTIONS and app.replay is None:
        return "a --replay key (it plays a recording); live, p pauses the polling"
    if action in LIVE_ACTIONS and app.replay is not None:
        return "a replay has no live server: nothing is polled, planned or written (> and < set its speed)"
    if action == "signal_process" and app.proc_source is None:
        return "no process table of this machine is read here, so there is no GPU process to signal"
    if action in SWITCHER_ACTIONS and len(app.hosts) < 2:
        return "one server is watched (--host twice or more to switch between servers)"
    if action in MAIN_SCREEN_ACTIONS and not over_dashboard:
        return "it acts on the dashboard: Esc goes back to it first"
    if typing and action in TYPING_HIDES:
        return "typed into the filter box (Enter or Esc leaves it)"
    return None


def front_is_dashboard(app: Any, screen: Screen[Any] | None = None) -> bool:
    """Whether ``screen`` (by default the app's screen in front) is the dashboard, the bottom screen."""
    stack = app.screen_stack
    return bool(stack) and (screen if screen is not None else stack[-1]) is stack[0]


# -- keys -----------------------------------------------------------------------------------------

_KEY_NAMES = {
    "question_mark": "?",
    "plus": "+",
    "equals_sign": "=",
    "minus": "-",
    "slash": "/",
    "full_stop": ".",
    "greater_than_sign": ">",
    "less_than_sign": "<",
    "right_square_bracket": "]",
    "left_square_bracket": "[",
    "space": "space",
    "escape": "Esc",
    "enter": "Enter",
    "right": "→",
    "left": "←",
    "up": "↑",
    "down": "↓",
}


def _pretty(key: str) -> str:
    """``f10`` -> ``F10``, ``ctrl+right`` -> ``Ctrl+→``, ``question_mark`` -> ``?``."""
    parts = key.split("+")
    name = parts[-1]
    shown = _KEY_NAMES.get(name) or (name.upper() if len(name) > 1 and name[0] == "f" and name[1:].isdigit() else name)
    mods = [m.capitalize() for m in parts[:-1]]
    if mods and len(shown) == 1:
        shown = shown.upper()  # ctrl+c -> Ctrl+C, as the help writes it
    return "+".join([*mods, shown])


def key_text(action: str, bindings: Iterable[Binding | tuple[str, ...]] = BINDINGS) -> str:
    """Every key bound to ``action`` (``"cycle_sort"``, ``"replay_speed(2)"``), as the help writes
    them: ``s / F6``; ``""`` when no key is bound."""
    keys: list[str] = []
    for b in bindings:
        if not isinstance(b, Binding) or b.action != action:
            continue
        for i, key in enumerate(b.key.split(",")):
            shown = b.key_display if i == 0 and b.key_display else _pretty(key.strip())
            if shown not in keys:
                keys.append(shown)
    return " / ".join(keys)


def _key_actions(bindings: Iterable[Binding | tuple[str, ...]] = BINDINGS) -> dict[str, tuple[str, ...]]:
    """Each key (Textual's name: ``k``, ``f1``, ``question_mark``) and the app's actions bound to it."""
    out: dict[str, tuple[str, ...]] = {}
    for b in bindings:
        if isinstance(b, Binding):
            for key in b.key.split(","):
                out[key.strip()] = (*out.get(key.strip(), ()), b.action)
    return out


KEY_ACTIONS = _key_actions()
"""The app's bindings by key, read once (a key press looks its key up here)."""


UNBOUND_KEYS: dict[str, str] = {
    "f2": "F2: kvtop has no setup screen; its settings are options and the config file (kvtop --print-config)",
    "f3": "F3: / filters the models (search)",
    "f5": "F5: no process tree here; the table lists the loaded models (Enter: a model's details)",
    "f7": "F7: kvtop does not renice processes",
    "f8": "F8: kvtop does not renice processes",
}
"""Keys a ``top``/``htop`` user reaches for that kvtop does not bind, and what to do instead
(``htop``'s F2 setup, F3 search, F5 tree, F7/F8 nice; its F1, F4, F6, F9 and F10 are bound:
help, filter, sort, signal, quit)."""


def dead_key_reason(app: Any, key: str) -> str | None:
    """What to say when ``key`` (Textual's key name) is pressed and nothing will act on it, or
    None (an allowed binding or one of the screen or widget in front takes it, or the key is not
    one of kvtop's). Over a dialog (a ``ModalScreen`` other than the help) nothing is said: its
    keys are its own. Cheap for the keys that act: the bindings in front are looked at only once
    every app action of the key is refused."""
    actions = KEY_ACTIONS.get(key, ())
    if not actions and key not in UNBOUND_KEYS:
        return None
    screen = app.screen
    if isinstance(screen, ModalScreen) and type(screen).__name__ != "HelpScreen":
        return None
    over = front_is_dashboard(app)
    typing = isinstance(app.focused, Input)
    reasons = [refusal(app, a.partition("(")[0], over_dashboard=over, typing=typing) for a in actions]
    if any(r is None for r in reasons):
        return None  # allowed: it acts
    active = app.active_bindings.get(key)
    if active is not None and active.enabled:
        return None  # the screen or widget in front has a binding of its own for the key
    if not actions:
        return UNBOUND_KEYS[key]
    if typing:
        return None  # typed into the filter box
    return f"{key_text(actions[0]) or _pretty(key)}: {reasons[0]}"


# -- the command palette --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PaletteEntry:
    """One palette command: the ``action`` string run (as in ``BINDINGS``), its ``title`` (what
    typing matches) and ``help`` (what it does; the key is put in front of it)."""

    action: str
    title: str
    help: str


PALETTE: tuple[PaletteEntry, ...] = (
    PaletteEntry("cycle_sort", "Sort by the next column", "cycle the table's sort order"),
    PaletteEntry("reverse_sort", "Reverse the sort", "largest first / smallest first"),
    PaletteEntry("filter", "Filter models", "show only the models whose name contains the text"),
    PaletteEntry("clear_filter", "Clear the filter", "show every model again"),
    PaletteEntry("toggle_pause", "Pause / resume", "stop or restart polling (the screen keeps its figures)"),
    PaletteEntry("slower", "Refresh slower", "a longer poll interval"),
    PaletteEntry("faster", "Refresh faster", "a shorter poll interval"),
    PaletteEntry("toggle_events", "Panel: events (log)", "show or hide the events pane"),
    PaletteEntry("toggle_raw", "Raw log lines", "the events pane shows the log's own lines"),
    PaletteEntry("toggle_gpu", "Panel: GPU", "show or hide the GPU panel"),
    PaletteEntry("toggle_map", "Panel: memory map", "show or hide the memory map (saved)"),
    PaletteEntry("toggle_alerts", "Panel: alerts with fixes", "show or hide the alerts panel (saved)"),
    PaletteEntry("toggle_history_panel", "Panel: VRAM history", "show or hide the history panel (saved)"),
    PaletteEntry("history", "History plots", "VRAM, RAM and GPU over time"),
    PaletteEntry("changes", "What changed", "restarts, upgrades, settings and loads of the server, kept across runs"),
    PaletteEntry("server_view", "Server view", "traffic, health, pre-flight of pulled models"),
    PaletteEntry("what_if", "What-if planner", "the selected model's memory at another num_ctx, KV type"),
    PaletteEntry("unload", "Unload model", "unload the selected model (asks first)"),
    PaletteEntry("keep_alive", "Keep-alive", "set the selected model's keep-alive (asks first)"),
    PaletteEntry(
        "signal_process", "Signal GPU process", "SIGTERM / SIGKILL a process outside Ollama on the GPU (asks first)"
    ),
    PaletteEntry("next_server", "Next server", "put the next watched server on screen"),
    PaletteEntry("prev_server", "Previous server", "put the previous watched server on screen"),
    PaletteEntry("replay_pause", "Replay: play / pause", "pause or resume the recording"),
    PaletteEntry("replay_step", "Replay: one record", "apply one record (pauses first)"),
    PaletteEntry("replay_speed(2)", "Replay: faster", "double the playback speed"),
    PaletteEntry("replay_speed(0.5)", "Replay: slower", "halve the playback speed"),
    PaletteEntry("replay_jump('forward')", "Replay: 1 min ahead", "jump one minute forward"),
    PaletteEntry("replay_jump('back')", "Replay: 1 min back", "jump one minute back"),
    PaletteEntry("replay_jump('start')", "Replay: back to the start", "play the recording from its start"),
    PaletteEntry("cycle_theme", "Next theme", "kvtop's next colour theme (saved)"),
    PaletteEntry("help", "Help: keys and glyphs", "every key, column, mark and glyph explained"),
    PaletteEntry("quit", "Quit", "leave kvtop"),
)
"""Every kvtop action the palette offers, in the order listed when nothing is typed."""

TEXTUAL_REPLACED = frozenset({"Quit"})
"""Textual's own palette commands that kvtop's replace (its Theme picker, Keys panel and
Screenshot stay)."""


def palette_commands(app: Any, screen: Screen[Any]) -> Iterator[SystemCommand]:
    """The palette's kvtop commands over ``screen`` (the screen the palette was opened over, not
    the palette itself): each :data:`PALETTE` entry that :func:`refusal` allows there, its key
    in front of its help (``u · unload the selected model (asks first)``). Choosing one runs
    ``app.run_action`` once the palette has closed: the same check, the same confirmation."""
    over = front_is_dashboard(app, screen)
    for entry in PALETTE:  # not typing: a command chosen by name is not a key typed into the filter box
        if refusal(app, entry.action.partition("(")[0], over_dashboard=over, typing=False) is not None:
            continue
        keys = key_text(entry.action)
        help_text = f"{keys} · {entry.help}" if keys else entry.help
        yield SystemCommand(entry.title, help_text, partial(_run_chosen, app, entry.action))


async def _run_chosen(app: Any, action: str) -> None:
    """Run a command chosen in the palette, which has closed: the filter box, if it had the focus
    back, gives it up first (its keys are typed, not actions; a chosen command is neither)."""
    if isinstance(app.focused, Input):
        app.screen.set_focus(None)
    await app.run_action(action)
