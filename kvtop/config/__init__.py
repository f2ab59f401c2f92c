"""Settings: where kvtop looks and how often, resolved from flags and the environment.

The host is resolved exactly as Ollama's own client resolves ``OLLAMA_HOST`` so that kvtop
watches the server that ``ollama ps`` talks to.

This module resolves the settings (flag > environment > file > saved choice > default) into
:class:`Settings`; its parts are beside it, imported from there: the server's address
(``config.host``), kvtop's files (``config.files``), the choices the dashboard remembers
(``config.ui_state``) and how each server is reached (``config.server_access``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from kvtop.config.files import CONFIG_KEYS, ConfigError, config_path, read_config_file
from kvtop.config.host import DEFAULT_HOST_URL
from kvtop.sources.auth import ServerAccess, redact_url

MIN_INTERVAL_S = 0.25
MAX_INTERVAL_S = 60.0
DEFAULT_INTERVAL_S = 1.0


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything kvtop needs to know to run; built once by the CLI and passed down.

    Attributes:
        host_url: Base URL of the Ollama server (see ``parse_ollama_host``).
        interval_s: Seconds between the end of one poll and the start of the next.
        timeout_s: Bound on each HTTP request to Ollama (connect and read).
        demo: True when watching the embedded stand-in server (the header says DEMO).
        readonly: Never send anything that changes the server (disables the what-if load action).
        more_hosts: Further servers to watch beside ``host_url`` (each polled on its own).
        access: Base URL -> how to reach it (``sources.auth.ServerAccess``: credentials, extra
            headers, TLS trust), built by :func:`server_accesses`; a URL missing here gets none.
        log_spec: Where the server log is read (``sources.tail.parse_log_spec``); the CLI's
            default is ``auto``, the dataclass's ``none`` so that tests never read the machine's log.
    """

    host_url: str = DEFAULT_HOST_URL
    interval_s: float = DEFAULT_INTERVAL_S
    timeout_s: float = 3.0
    demo: bool = False
    readonly: bool = False
    show_timeout_s: float = 10.0
    log_spec: str = "none"
    theme: str = "kvtop-dark"
    alerts: Mapping[str, Any] = field(default_factory=dict)
    extra: Mapping[str, str] = field(default_factory=dict)
    more_hosts: tuple[str, ...] = ()
    access: Mapping[str, ServerAccess] = field(default_factory=dict)

    @property
    def host_urls(self) -> tuple[str, ...]:
        """Every server watched, ``host_url`` first (``--host`` repeated, or ``host = [...]``)."""
        return (self.host_url, *(h for h in self.more_hosts if h != self.host_url))

    def access_for(self, url: str) -> ServerAccess:
        """How to reach ``url`` (credentials, headers, TLS: :func:`server_accesses`); a server
        without settings of its own (the demo's stand-in) gets none."""
        return self.access.get(url) or ServerAccess(url)


def clamp_interval(interval_s: float) -> float:
    """Keep a refresh interval inside [0.25 s, 60 s]."""
    return min(MAX_INTERVAL_S, max(MIN_INTERVAL_S, interval_s))


ENV_KEYS: dict[str, str] = {
    "host": "OLLAMA_HOST",
    "interval": "KVTOP_INTERVAL",
    "timeout": "KVTOP_TIMEOUT",
    "log": "KVTOP_LOG",
    "theme": "KVTOP_THEME",
    "readonly": "KVTOP_READONLY",
}
"""Environment variables, one per setting (``OLLAMA_HOST`` is Ollama's own)."""

DEFAULTS: dict[str, Any] = {
    "host": None,
    "interval": DEFAULT_INTERVAL_S,
    "timeout": 3.0,
    "log": "auto",
    "theme": "kvtop-dark",
    "readonly": False,
}


def _coerce(key: str, value: Any, origin: str) -> Any:
    """Check and convert one setting's value; ConfigError names where it came from."""
    try:
        if key == "host":
            hosts = [value] if isinstance(value, str) else value
            if not isinstance(hosts, (list, tuple)) or not hosts or not all(isinstance(h, str) for h in hosts):
                raise ValueError("must be a string or a non-empty list of strings")
            return tuple(hosts)
        if key in ("interval", "timeout"):
            number = float(value)
            if not 0 < number < float("inf"):
                raise ValueError("must be a positive number of seconds")
            return clamp_interval(number) if key == "interval" else number
        if key == "readonly":
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off", ""):
                return False
            raise ValueError("must be true or false")
        if not isinstance(value, str):
            raise ValueError("must be a string")
        return value
    except (TypeError, ValueError) as exc:
        raise ConfigError(redact_url(f"{key} from {origin}: {value!r}: {exc}")) from None


@dataclass(frozen=True, slots=True)
class ResolvedConfig:
    """Every setting's effective value and where it came from (``--print-config``)."""

    values: Mapping[str, Any]
    origins: Mapping[str, str]
    warnings: tuple[str, ...]
    path: Path


def resolve_config(
    flags: Mapping[str, Any], env: Mapping[str, str] | None = None, *, saved_theme: str | None = None
) -> ResolvedConfig:
    """Combine settings: flag > environment > file > saved UI choice (theme) > default.

    ``values["host"]`` is a tuple of host strings (several servers) or None (the default);
    ``values["servers"]`` the config file's ``[servers."URL"]`` tables (:func:`server_accesses`).

    Args:
        flags: Only the settings the user typed on the command line.
        env: The environment (default: the process's).
        saved_theme: The theme last picked in the UI, if any.

    Raises:
        ConfigError: A flag or environment value is invalid (a bad file value is a warning:
            kvtop then starts with the default for it).
    """
    env = os.environ if env is None else env
    path = config_path(env)
    file_values, warnings = read_config_file(path)
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for key in CONFIG_KEYS:
        if key in flags and flags[key] is not None:
            values[key], origins[key] = _coerce(key, flags[key], "--" + key), "flag"
        elif env.get(ENV_KEYS[key], "").strip():
            var = ENV_KEYS[key]
            values[key], origins[key] = _coerce(key, env[var], var), f"env {var}"
        elif key in file_values:
            try:
                values[key], origins[key] = _coerce(key, file_values[key], str(path)), f"file {path}"
            except ConfigError as exc:
                warnings.append(f"{exc} — the default is used")
                values[key], origins[key] = DEFAULTS[key], "default"
        elif key == "theme" and saved_theme:
            values[key], origins[key] = saved_theme, "saved choice (t / palette)"
        elif key == "theme" and env.get("NO_COLOR", ""):
            values[key], origins[key] = "kvtop-mono", "NO_COLOR is set"
        else:
            values[key], origins[key] = DEFAULTS[key], "default"
    alerts = file_values.get("alerts")
    values["alerts"] = dict(alerts) if isinstance(alerts, dict) else {}
    servers = file_values.get("servers")
    values["servers"] = dict(servers) if isinstance(servers, dict) else {}
    return ResolvedConfig(MappingProxyType(values), MappingProxyType(origins), tuple(warnings), path)
