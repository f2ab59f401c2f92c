"""The dashboard's keys: every binding of the app, and which actions each situation leaves out
(``KvtopApp.check_action``: over a pushed screen, while typing a filter, in ``--replay``, live only).
``docs/reference.md`` ("Keys") and the help screen describe them. The function keys are
``htop``'s (F1 help, F4 filter, F6 sort, F9 signal, F10 quit); ``j`` moves the selection down as
in ``less`` and vi, but ``k`` stays ``signal`` as in ``top`` and ``htop`` (↑ moves up)."""

from __future__ import annotations

from textual.binding import Binding

from kvtop.ui.actions import WRITE_ACTIONS

__all__ = ["BINDINGS", "INTERVAL_STEPS_S", "LIVE_ACTIONS", "MAIN_SCREEN_ACTIONS", "REPLAY_ACTIONS", "TYPING_HIDES"]

INTERVAL_STEPS_S = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
"""The poll intervals ``+`` and ``-`` step through, in seconds."""

BINDINGS: list[Binding | tuple[str, str] | tuple[str, str, str]] = [
    Binding("q", "quit", "Quit"),
    Binding("f10", "quit", "Quit", show=False),  # htop's; shown apart it doubled "q Quit" beside a screen's own q
    Binding("ctrl+c", "interrupt", "Quit", show=False, priority=True),
    Binding("question_mark", "help", "Help", key_display="?"),
    Binding("f1", "help", "Help", show=False),
    Binding("p", "toggle_pause", "Pause"),
    Binding("plus,equals_sign", "slower", "Slower", key_display="+", show=False),
    Binding("minus", "faster", "Faster", key_display="-", show=False),
    Binding("s", "cycle_sort", "Sort"),
    Binding("f6", "cycle_sort", "Sort", show=False),
    Binding("S", "reverse_sort", "Reverse sort", show=False),
    Binding("t", "cycle_theme", "Theme", show=False),
    Binding("slash", "filter", "Filter", key_display="/"),
    Binding("f4", "filter", "Filter", show=False),
    Binding("l", "toggle_events", "Log"),
    Binding("g", "toggle_gpu", "GPU"),
    Binding("m", "toggle_map", "Map"),
    Binding("f", "toggle_alerts", "Fixes", show=False),
    Binding("v", "toggle_history_panel", "VRAM history", show=False),
    Binding("w", "what_if", "What if"),
    Binding("i", "server_view", "Server"),
    Binding("u", "unload", "Unload"),
    Binding("a", "keep_alive", "Keep-alive"),
    Binding("k,f9", "signal_process", "Signal", key_display="k", show=False),
    Binding("j", "cursor_down", "Down", show=False),
    Binding("h", "history", "History", show=False),
    Binding("c", "changes", "Changes", show=False),
    Binding("r", "toggle_raw", "Raw lines", show=False),
    Binding("escape", "clear_filter", "Clear filter", show=False),
    Binding("space", "replay_pause", "Play/pause", key_display="space"),
    Binding("full_stop", "replay_step", "Step", key_display=".", show=False),
    Binding("greater_than_sign", "replay_speed(2)", "Faster", key_display=">"),
    Binding("less_than_sign", "replay_speed(0.5)", "Slower", key_display="<", show=False),
    Binding("J,ctrl+right", "replay_jump('forward')", "+1 min", key_display="J"),
    Binding("K,ctrl+left", "replay_jump('back')", "-1 min", key_display="K", show=False),
    Binding("B", "replay_jump('start')", "Start", show=False),
    Binding("right_square_bracket", "next_server", "Next server", key_display="]"),
    Binding("left_square_bracket", "prev_server", "Prev server", key_display="[", show=False),
    *(Binding(str(n), f"server({n})", f"Server {n}", show=False) for n in range(1, 10)),
]
MAIN_SCREEN_ACTIONS = frozenset(
    {
        "cycle_sort",
        "filter",
        "clear_filter",
        "help",
        "toggle_events",
        "toggle_raw",
        "server_view",
        "what_if",
        "toggle_gpu",
        "next_server",
        "prev_server",
        "server",
        "history",
        "changes",
        "toggle_map",
        "toggle_alerts",
        "toggle_history_panel",
        *WRITE_ACTIONS,
    }
)
"""Actions that only make sense on the dashboard itself (not over the detail view)."""
TYPING_HIDES = frozenset(
    {
        "quit",
        "help",
        "toggle_pause",
        "slower",
        "faster",
        "cycle_sort",
        "reverse_sort",
        "server_view",
        "filter",
        "toggle_events",
        "toggle_raw",
        "cycle_theme",
        "what_if",
        "toggle_gpu",
        "next_server",
        "prev_server",
        "server",
        "history",
        "changes",
        "toggle_map",
        "toggle_alerts",
        "toggle_history_panel",
        "cursor_down",
        *WRITE_ACTIONS,
    }
)
"""Actions whose keys are plain characters, hidden from the footer while the filter box has focus."""
REPLAY_ACTIONS = frozenset({"replay_pause", "replay_step", "replay_speed", "replay_jump"})
"""Actions of ``--replay`` only."""
LIVE_ACTIONS = frozenset({"slower", "faster", "what_if", *WRITE_ACTIONS})
"""Actions that need a live server (hidden in ``--replay``)."""
