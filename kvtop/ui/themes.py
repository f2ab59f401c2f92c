"""Load kvtop's themes from the TOML files shipped in ``kvtop.themes`` (top-level ``themes/``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from textual.color import Color, ColorParseError
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
    variables = {str(k): str(v) for k, v in data.get("variables", {}).items()}
    for key, value in list(colors.items()) + list(variables.items()):
        try:  # a bad colour must be reported at load time, never crash the app when applied
            Color.parse(value)
        except ColorParseError as exc:
            raise ValueError(f"{key} = {value!r} is not a colour ({exc})") from None
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
        variables=variables,
    )


def _read_theme(entry: Any) -> dict[str, Any]:
    """A theme file parsed by ``config.toml_loads`` (size- and nesting-bounded: a hostile file is a
    TOMLDecodeError, never a RecursionError); ``entry`` is a Path or a bundled resource."""
    from kvtop.config.files import read_toml_file, toml_loads

    if isinstance(entry, Path):
        return read_toml_file(entry)
    return toml_loads(entry.read_text(encoding="utf-8"))


KVTOP_THEMES = ("kvtop-dark", "kvtop-light", "kvtop-high-contrast", "kvtop-mono")
"""The bundled themes, in the order ``t`` cycles them (user themes follow)."""


def load_themes(user_dir: Path | None = None) -> dict[str, Theme]:
    """Every ``*.toml`` theme bundled with kvtop, then the user's from ``user_dir`` (a user theme
    may not replace a bundled one). A broken file is skipped; see ``load_themes_reporting``."""
    return load_themes_reporting(user_dir)[0]


def load_themes_reporting(user_dir: Path | None = None) -> tuple[dict[str, Theme], list[str]]:
    """Like ``load_themes``, also returning one line per theme file that could not be used."""
    themes: dict[str, Theme] = {}
    problems: list[str] = []
    sources: list[Any] = sorted(bundled_dir("themes").iterdir(), key=lambda e: e.name)
    if user_dir is not None and user_dir.is_dir():
        sources += sorted(user_dir.glob("*.toml"))
    for entry in sources:
        if not entry.name.endswith(".toml"):
            continue
        try:
            theme = theme_from_toml(_read_theme(entry))
        except (KeyError, ValueError, TypeError, OSError, tomllib.TOMLDecodeError) as exc:
            problems.append(f"theme file {entry}: {type(exc).__name__}: {exc}")
            continue
        if theme.name in themes and theme.name in KVTOP_THEMES:
            problems.append(f"theme file {entry}: {theme.name!r} is a bundled theme's name; rename it")
            continue
        themes[theme.name] = theme
    return themes, problems


def default_variables() -> dict[str, str]:
    """kvtop's semantic variables from the default theme (fallbacks for any other theme)."""
    theme = load_themes().get(DEFAULT_THEME)
    return dict(theme.variables) if theme else {}
