"""The choices the dashboard remembers between runs in ``state.toml`` (the theme, each panel's
on/off/auto), written atomically, other choices in the file kept.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from kvtop.config.files import read_toml_file, state_dir


def saved_theme(env: Mapping[str, str] | None = None) -> str | None:
    """The theme last picked in the UI, or None."""
    try:
        data = read_toml_file(state_dir(env) / "state.toml")
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return None
    theme = data.get("theme")
    return theme if isinstance(theme, str) else None


def save_theme(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """Remember the theme picked in the UI (the state file's other choices are kept); returns an
    error sentence instead of raising."""
    return _update_state({"theme": name}, "the theme choice", env)


PANELS = ("map", "alerts", "history", "events")
"""The dashboard's optional panels, in the order they are added as the terminal grows."""

PANEL_CHOICES = ("auto", "on", "off")
"""``auto``: shown when the terminal is large enough; ``on``/``off``: what the user chose (a key)."""


def saved_panels(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The panel choices saved in the state file (``[panels]``), every panel in :data:`PANELS`
    (``auto`` when nothing valid is saved); a missing or unreadable file gives all ``auto``."""
    out = dict.fromkeys(PANELS, "auto")
    try:
        data = read_toml_file(state_dir(env) / "state.toml")
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return out
    panels = data.get("panels")
    if isinstance(panels, dict):
        for name in PANELS:
            if panels.get(name) in PANEL_CHOICES:
                out[name] = panels[name]
    return out


def save_panels(choices: Mapping[str, str], env: Mapping[str, str] | None = None) -> str | None:
    """Remember the panel choices (``[panels]`` of the state file, which keeps the theme); returns
    an error sentence instead of raising. Only names of :data:`PANELS` with a value of
    :data:`PANEL_CHOICES` are written."""
    panels = {k: v for k, v in choices.items() if k in PANELS and v in PANEL_CHOICES}
    return _update_state({"panels": panels}, "the panel choice", env)


def _toml_value(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    return None


def _update_state(updates: Mapping[str, Any], what: str, env: Mapping[str, str] | None) -> str | None:
    """Merge ``updates`` into ``<state_dir>/state.toml`` and write it atomically (a temporary file
    in the same folder, then ``os.replace``): a crash leaves the old file or the new one, never half
    of one. Keys kvtop did not write (scalars and tables of scalars) are kept; a file that cannot be
    parsed is replaced."""
    folder = state_dir(env)
    path = folder / "state.toml"
    try:
        data = read_toml_file(path)
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        data = {}
    for key, value in updates.items():
        if isinstance(value, Mapping) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    lines: list[str] = []
    tables: list[str] = []
    for key, value in data.items():
        if isinstance(value, Mapping):
            body = [
                f"{json.dumps(str(k))} = {v}"
                for k, v in ((k, _toml_value(v)) for k, v in value.items())
                if v is not None
            ]
            tables.append(f"\n[{json.dumps(str(key))}]\n" + "".join(line + "\n" for line in body))
        elif (text := _toml_value(value)) is not None:
            lines.append(f"{json.dumps(str(key))} = {text}\n")
    tmp = folder / f".state.toml.{os.getpid()}.tmp"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp.write_text("".join(lines) + "".join(tables), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        return f"cannot save {what} in {folder}: {exc}"
    return None
