"""Load kvtop's themes from the TOML files shipped in ``kvtop.themes`` (top-level ``themes/``)."""

from __future__ import annotations

import sys
from typing import Any

from textual.theme import Theme

from kvtop.bundled import bundled_dir

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

DEFAULT_THEME = "kvtop-dark"


def theme_from_toml(data: dict[str, Any]) -> Theme:
    """Build a Textual ``Theme`` from a parsed theme file.

    Raises:
        KeyError / ValueError: The file lacks ``name`` or ``colors.primary``.
    """
    colors = {str(k): str(v) for k, v in dict(data.get("colors", {})).items()}
    return Theme(
        name=str(data["name"]),
        primary=colors["primary"],
        secondary=colors.get("secondary"),
        warning=colors.get("warning"),
        error=colors.get("error"),
        success=colors.get("success"),
        accent=colors.get("accent"),
        foreground=colors.get("foreground"),
        background=colors.get("background"),
        surface=colors.get("surface"),
        panel=colors.get("panel"),
        boost=colors.get("boost"),
        dark=bool(data.get("dark", True)),
        variables={str(k): str(v) for k, v in data.get("variables", {}).items()},
    )


def load_themes() -> dict[str, Theme]:
    """Every ``*.toml`` theme bundled with kvtop, by name (a broken file is skipped)."""
    themes: dict[str, Theme] = {}
    for entry in bundled_dir("themes").iterdir():
        if not entry.name.endswith(".toml"):
            continue
        try:
            theme = theme_from_toml(tomllib.loads(entry.read_text(encoding="utf-8")))
        except (KeyError, ValueError, TypeError):
            continue
        themes[theme.name] = theme
    return themes


def default_variables() -> dict[str, str]:
    """kvtop's semantic variables from the default theme (fallbacks for any other theme)."""
    theme = load_themes().get(DEFAULT_THEME)
    return dict(theme.variables) if theme else {}
