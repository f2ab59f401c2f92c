"""What a user would read on the terminal: the current screen as plain text lines (for Pilot tests)."""

from __future__ import annotations

from textual.app import App


def screen_lines(app: App[object]) -> list[str]:
    """The screen in front, as rendered, one string per terminal row (trailing spaces kept)."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


def screen_text(app: App[object]) -> str:
    """``screen_lines`` joined with newlines."""
    return "\n".join(screen_lines(app))
