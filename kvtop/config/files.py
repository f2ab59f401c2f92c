"""kvtop's files: where the config and state folders are, and reading ``config.toml`` within bounds
(size, nesting), never raising for a bad file: its problems become warnings.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import platformdirs

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

APP_NAME = "kvtop"

CONFIG_KEYS: dict[str, str] = {
    "host": "Ollama server, OLLAMA_HOST syntax, or a list of them (several servers)",
    "interval": "seconds between polls (0.25–60)",
    "timeout": "deadline of each API request, seconds",
    "log": "server log spec: auto, journal[:UNIT], journal-user[:UNIT], file:PATH, docker:NAME, -, none",
    "theme": "theme name (kvtop-dark, kvtop-light, kvtop-high-contrast, kvtop-mono, or a user theme)",
    "readonly": "true: never send a request that changes the server",
}
"""Top-level keys of ``config.toml`` (an ``[alerts]`` table is accepted for alert thresholds)."""


class ConfigError(ValueError):
    """A config file, environment variable or flag value that cannot be used."""


def config_dir(env: Mapping[str, str] | None = None) -> Path:
    """The platform's config folder for kvtop (``~/.config/kvtop`` on Linux; XDG respected)."""
    env = os.environ if env is None else env
    if env.get("XDG_CONFIG_HOME"):
        return Path(env["XDG_CONFIG_HOME"]) / APP_NAME
    return Path(platformdirs.user_config_dir(APP_NAME))


def state_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where kvtop keeps choices made in the UI (the theme picked with ``t``)."""
    env = os.environ if env is None else env
    if env.get("XDG_STATE_HOME"):
        return Path(env["XDG_STATE_HOME"]) / APP_NAME
    return Path(platformdirs.user_state_dir(APP_NAME))


def config_path(env: Mapping[str, str] | None = None) -> Path:
    """``$KVTOP_CONFIG`` or ``<config_dir>/config.toml``."""
    env = os.environ if env is None else env
    return Path(env["KVTOP_CONFIG"]).expanduser() if env.get("KVTOP_CONFIG") else config_dir(env) / "config.toml"


MAX_TOML_BYTES = 1024 * 1024
"""A config, state or theme file larger than this is not read (a real one is a few hundred bytes)."""

MAX_TOML_NESTING = 32
"""Arrays and inline tables nested deeper than this are refused before ``tomllib`` sees them:
it recurses once per level and a few hundred levels exhaust Python's stack (a hostile-input case)."""


def _nesting_line(text: str, limit: int = MAX_TOML_NESTING) -> int | None:
    """The 1-based line where ``[``/``{`` nesting first exceeds ``limit``, or None.

    Brackets inside strings (basic, literal, multi-line) and comments are not counted; a table
    header (``[a]``, ``[[a]]``) opens and closes on its line, so it never comes near the limit.
    """
    if text.count("[") + text.count("{") <= limit:
        return None
    depth = 0
    line = 1
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\n":
            line += 1
        elif ch == "#":
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        elif ch == '"' or ch == "'":
            quote = ch * 3 if text.startswith(ch * 3, i) else ch
            j = i + len(quote)
            while j < n and not text.startswith(quote, j):
                if ch == '"' and text[j] == "\\":
                    j += 1
                elif text[j] == "\n":
                    if len(quote) == 1:
                        break  # an unclosed one-line string: tomllib reports it
                    line += 1
                j += 1
            i = j + len(quote)
            continue
        elif ch == "[" or ch == "{":
            depth += 1
            if depth > limit:
                return line
        elif ch == "]" or ch == "}":
            depth = max(0, depth - 1)
        i += 1
    return None


def toml_loads(text: str) -> dict[str, Any]:
    """``tomllib.loads`` that cannot be made to crash by a hostile file.

    Raises:
        tomllib.TOMLDecodeError: The text is not TOML, is larger than :data:`MAX_TOML_BYTES`, or
            nests arrays/inline tables deeper than :data:`MAX_TOML_NESTING` (the message names
            the line). Never ``RecursionError``.
    """
    if len(text) > MAX_TOML_BYTES:
        raise tomllib.TOMLDecodeError(f"{len(text):,} characters, more than the {MAX_TOML_BYTES:,} read")
    deep = _nesting_line(text)
    if deep is not None:
        raise tomllib.TOMLDecodeError(f"arrays or tables nested more than {MAX_TOML_NESTING} deep (at line {deep})")
    try:
        data: dict[str, Any] = tomllib.loads(text)  # typed here: on 3.10 tomllib is tomli, unchecked
        return data
    except RecursionError:  # not expected after the check above; kept so no traceback can escape
        raise tomllib.TOMLDecodeError("nested too deeply to read") from None


def read_toml_file(path: Path) -> dict[str, Any]:
    """Read and parse a TOML file, at most :data:`MAX_TOML_BYTES` of it (``/dev/zero`` or a huge
    file is refused, not read to the end).

    Raises:
        OSError: It cannot be opened or read.
        UnicodeDecodeError: It is not UTF-8.
        tomllib.TOMLDecodeError: As :func:`toml_loads` (a syntax error, too large, nested too deeply).
    """
    with open(path, "rb") as fh:
        raw = fh.read(MAX_TOML_BYTES + 1)
    if len(raw) > MAX_TOML_BYTES:
        raise tomllib.TOMLDecodeError(f"larger than the {MAX_TOML_BYTES:,} bytes read")
    return toml_loads(raw.decode("utf-8"))


def read_config_file(path: Path) -> tuple[dict[str, Any], list[str]]:
    """Read ``config.toml``; never raises.

    Returns:
        The settings found (unknown keys and an ``alerts`` that is not a table dropped) and
        warnings, one line each, naming the file and line of a syntax error (then no setting
        of the file is used: also for a file nested too deeply or over :data:`MAX_TOML_BYTES`),
        the unknown keys or a mistyped ``alerts``.
    """
    if not path.exists():
        return {}, []
    try:
        data = read_toml_file(path)
    except tomllib.TOMLDecodeError as exc:
        return {}, [f"{path}: {exc} — the file is ignored, defaults are used"]
    except (OSError, UnicodeDecodeError) as exc:
        return {}, [f"{path}: cannot read it ({exc}) — defaults are used"]
    out: dict[str, Any] = {}
    warnings: list[str] = []
    for key, value in data.items():
        if key == "alerts" and not isinstance(value, dict):
            warnings.append(
                f"{path}: alerts = {value!r}: must be a table ([alerts] with one threshold a line)"
                " — ignored, the default thresholds are used"
            )
        elif key == "servers" and not isinstance(value, dict):
            warnings.append(
                f'{path}: servers must be a table ([servers."URL"] with that server\'s headers,'
                " cacert, insecure, api_key_env) — ignored"
            )
        elif key in CONFIG_KEYS or key in ("alerts", "servers"):
            out[key] = value
        else:
            warnings.append(
                f'{path}: unknown key {key!r} ignored (known: {", ".join(CONFIG_KEYS)}, [alerts], [servers."URL"])'
            )
    return out, warnings
