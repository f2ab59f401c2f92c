"""The dashboard's themes at start: kvtop's and the user's (``<config dir>/themes``, read by
``themes.load_themes_reporting``) registered on the app, the order ``t`` cycles through, and the
theme to start with."""

from __future__ import annotations

from typing import Any

from textual.app import App

from kvtop.config.files import config_dir
from kvtop.ui.themes import DEFAULT_THEME, KVTOP_THEMES, load_themes_reporting

__all__ = ["register_themes"]


def register_themes(app: App[Any], wanted: str) -> tuple[tuple[str, ...], str, list[str]]:
    """Register every theme on ``app``; returns the names ``t`` cycles through (kvtop's first, then
    the user's), the theme to use (``wanted``, or ``DEFAULT_THEME`` when no theme has that name)
    and the problems to tell the user (a theme file that could not be read, an unknown name)."""
    themes, problems = load_themes_reporting(config_dir() / "themes")
    for theme in themes.values():
        app.register_theme(theme)
    order = tuple(n for n in KVTOP_THEMES if n in themes) + tuple(n for n in themes if n not in KVTOP_THEMES)
    if wanted not in app.available_themes:
        problems.append(f"unknown theme {wanted!r}: using {DEFAULT_THEME} (themes: {', '.join(themes)})")
        wanted = DEFAULT_THEME
    return order, wanted, problems
