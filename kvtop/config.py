"""Settings: where kvtop looks and how often, resolved from flags and the environment.

The host is resolved exactly as Ollama's own client resolves ``OLLAMA_HOST`` so that kvtop
watches the server that ``ollama ps`` talks to.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

import httpx
import platformdirs

from kvtop.redact import register_secrets
from kvtop.sources.auth import API_KEY_ENV, HeaderError, SecretFileError, ServerAccess, UserinfoError, ca_context, \
    check_private, header_items, netrc_login, netrc_path, parse_header, read_password_file, redact_url, \
    secret_header, split_userinfo
from kvtop.sources.hosts import is_loopback_url

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

DEFAULT_HOST_URL = "http://127.0.0.1:11434"
"""Ollama's default address (``envconfig.Host()`` with ``OLLAMA_HOST`` unset)."""

MIN_INTERVAL_S = 0.25
MAX_INTERVAL_S = 60.0
DEFAULT_INTERVAL_S = 1.0


class HostError(ValueError):
    """An address that cannot name an Ollama server (e.g. a port outside 0–65535 given to --host)."""


def _env_var(value: str) -> str:
    """Trim like Ollama's ``envconfig.Var``: surrounding spaces, then surrounding quotes."""
    return value.strip().strip("\"'")


def _split_host_port(hostport: str) -> tuple[str, str] | None:
    """Go's ``net.SplitHostPort``: ``host:port`` or ``[v6]:port``; None when there is no port."""
    if hostport.startswith("["):
        end = hostport.find("]")
        if end < 0 or not hostport[end + 1 :].startswith(":"):
            return None
        return hostport[1:end], hostport[end + 2 :]
    if hostport.count(":") != 1:
        return None
    host, port = hostport.split(":")
    return host, port


def parse_ollama_host(raw: str | None, *, strict: bool = False) -> str:
    """Resolve an ``OLLAMA_HOST`` value to the base URL a client connects to.

    Follows Ollama's ``envconfig.Host()`` (``envconfig/config.go``): the scheme is optional
    (``http`` by default, default port 11434; an explicit ``http://`` defaults to port 80 and
    ``https://`` to 443), IPv6 addresses come in brackets, a path after the host is kept as a
    prefix, and an invalid port falls back to the default. ``0.0.0.0`` / ``::`` are listen
    addresses: a client reaches them on the loopback, so kvtop connects to ``127.0.0.1`` / ``::1``.

    Args:
        raw: The value of ``OLLAMA_HOST`` or ``--host``; None or empty means the default.
        strict: Refuse an invalid port instead of falling back to the default as Ollama does
            (used for ``--host``, which the user typed and would not want silently replaced).

    Returns:
        A base URL without a trailing slash, e.g. ``http://127.0.0.1:11434`` or
        ``https://[::1]:443/ollama``.

    Raises:
        HostError: The value cannot name a server (e.g. ``::1:8080``, unbracketed IPv6 with a
            port), or, with ``strict``, its port is not a number in 0–65535.
    """
    s = _env_var(raw or "")
    if not s:
        return DEFAULT_HOST_URL
    default_port = "11434"
    scheme, sep, hostport = s.partition("://")
    if not sep:
        scheme, hostport = "http", s
    else:
        scheme = scheme.lower()
        if scheme == "http":
            default_port = "80"
        elif scheme == "https":
            default_port = "443"
    hostport, _, path = hostport.partition("/")
    split = _split_host_port(hostport)
    if split is None:
        host, port = "127.0.0.1", default_port
        bare = hostport.strip("[]")
        if bare:
            host = bare
    else:
        host, port = split
        if not host:
            host = "127.0.0.1"
    try:
        port_n = int(port)
        if not 0 <= port_n <= 65535:
            raise ValueError(port)
    except ValueError:
        if strict:
            raise HostError(f"invalid port {port!r} in {s!r}: expected a number 0–65535") from None
        port = default_port
    host = _client_host(host)
    shown = f"[{host}]" if ":" in host else host
    url = f"{scheme}://{shown}:{port}"
    if path:
        url += "/" + path.strip("/")
    url = url.rstrip("/")
    if scheme not in ("http", "https"):
        raise HostError(f"unsupported scheme {scheme!r} in {s!r}: use http or https")
    try:
        parsed = httpx.URL(url)
        if not parsed.host:
            raise ValueError("no host")
    except (httpx.InvalidURL, ValueError) as exc:
        raise HostError(f"cannot use {s!r} as a server address: {exc}") from None
    return url


def _client_host(host: str) -> str:
    """Map a listen-everywhere address to the loopback a local client would reach."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host
    if ip.is_unspecified:
        return "127.0.0.1" if ip.version == 4 else "::1"
    return str(ip)


def display_host(url: str) -> str:
    """Short form of a base URL for the header: ``127.0.0.1:11434`` (scheme shown only for https)."""
    parts = urlsplit(url)
    text = parts.netloc + parts.path
    return text if parts.scheme == "http" else f"{parts.scheme}://{text}"


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


def host_from_environment(env: Mapping[str, str] | None = None) -> str:
    """The base URL from ``OLLAMA_HOST`` in ``env`` (default: the process environment)."""
    env = os.environ if env is None else env
    return parse_ollama_host(env.get("OLLAMA_HOST"))


# --- config file and precedence ---------------------------------------------------------------

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
        return tomllib.loads(text)
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
            warnings.append(f"{path}: alerts = {value!r}: must be a table ([alerts] with one threshold a line)"
                            " — ignored, the default thresholds are used")
        elif key == "servers" and not isinstance(value, dict):
            warnings.append(f"{path}: servers must be a table ([servers.\"URL\"] with that server's headers,"
                            " cacert, insecure, api_key_env) — ignored")
        elif key in CONFIG_KEYS or key in ("alerts", "servers"):
            out[key] = value
        else:
            warnings.append(f"{path}: unknown key {key!r} ignored (known: {', '.join(CONFIG_KEYS)}, [alerts],"
                            " [servers.\"URL\"])")
    return out, warnings


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
    flags: Mapping[str, Any],
    env: Mapping[str, str] | None = None,
    *,
    saved_theme: str | None = None,
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
            body = [f"{json.dumps(str(k))} = {v}" for k, v in ((k, _toml_value(v)) for k, v in value.items())
                    if v is not None]
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


# --- how each server is reached: credentials, headers, TLS ------------------------------------

SERVER_KEYS: dict[str, str] = {
    "headers": 'extra request headers: a table (Name = "value") or a list of "Name: value"',
    "cacert": "PEM file of the CA(s) that signed the server's certificate (instead of the system's)",
    "insecure": "true: do not verify the server's TLS certificate",
    "api_key_env": f"variable whose value is sent as Authorization: Bearer (default {API_KEY_ENV}; \"\": none)",
    "password_file": "file whose first line is the basic-auth password of the user named in the URL (chmod 600)",
}
"""Keys of a ``[servers."URL"]`` table in ``config.toml``."""


def parse_host_access(raw: str | None, *, strict: bool = False) -> tuple[str, str | None, str | None]:
    """A host value with credentials: ``(base URL, user, password)``.

    The userinfo (``https://user:pass@gpu-box/``) is taken out first (``sources.auth.split_userinfo``,
    percent-decoded), the rest is read as :func:`parse_ollama_host` reads it, so the base URL, and
    every message about the value, never holds the credentials.

    Raises:
        HostError: As :func:`parse_ollama_host` (its message quotes the value without userinfo),
            or a userinfo that cannot be told from the address (``sources.auth.UserinfoError``:
            an unencoded ``/``, ``?`` or ``#`` in it; the message holds neither user nor password).
    """
    if raw is None:
        return parse_ollama_host(None, strict=strict), None, None
    try:
        clean, user, password = split_userinfo(raw)
    except UserinfoError as exc:
        raise HostError(str(exc)) from None
    return parse_ollama_host(clean, strict=strict), user, password


def server_accesses(
    hosts: list[tuple[str, str | None, str | None]],
    *,
    headers: list[str] | tuple[str, ...] = (),
    cacert: str | None = None,
    insecure: bool = False,
    servers: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    file_origin: str = "the config file",
    password_file: str | None = None,
    netrc: bool = False,
    netrc_file: str | None = None,
    host_origin: str | None = None,
) -> tuple[dict[str, ServerAccess], list[str]]:
    """How to reach each server: one ``sources.auth.ServerAccess`` per base URL.

    Flags (``--header``, ``--cacert``, ``--insecure``) apply to every server; a ``[servers."URL"]``
    table of the config file applies to the server whose base URL it names (read like ``--host``).
    Its headers come first and ``--header`` after (a repeated name: the flag's wins); ``--cacert``
    / ``--insecure`` override its ``cacert`` / ``insecure``. The bearer token is the value of
    ``OLLAMA_API_KEY`` (or of the table's ``api_key_env``), as Ollama's Python client sends it
    (``sources.auth.API_KEY_ENV``).

    A basic-auth password comes, first found: from the host value's userinfo, from
    ``--password-file`` (for each URL that names its user: ``https://alice@gpu-box/``), from the
    table's ``password_file``, from the netrc file (``--netrc``: ``$NETRC`` or ``~/.netrc``;
    ``--netrc-file``; its ``login`` is the user when the URL names none). A password file, a netrc
    file, and a config file holding a secret (a header value, a password in ``host``) must not be
    readable by other users (``sources.auth.check_private``). Every secret found is registered
    with ``kvtop.redact.register_secrets``, so no output of this process shows it.

    Args:
        hosts: ``(base URL, user, password)`` per server (:func:`parse_host_access`).
        headers: ``--header`` values, ``'Name: value'`` each.
        cacert: ``--cacert`` (checked here: it must be a readable PEM file).
        insecure: ``--insecure``.
        servers: The config file's ``servers`` table (``resolve_config(...).values["servers"]``).
        env: The environment (default: the process's).
        file_origin: The config file's path, for warnings.
        password_file: ``--password-file``.
        netrc: ``--netrc``; ``netrc_file``: ``--netrc-file`` (implies it).
        host_origin: Where the host values came from (``flag``, ``env OLLAMA_HOST``,
            ``file PATH``), None when not known: a password in a ``--host`` flag is warned about.

    Returns:
        The accesses by base URL, and warnings about the config file's tables (an unusable
        entry is left out, the rest applies), about a password sent over plain ``http://``
        to another machine, and about a password or credential header given on the command line
        (every local user sees it with ``ps``). No warning holds a secret.

    Raises:
        ConfigError: A ``--header`` that cannot be sent, a ``--cacert`` file that cannot be used,
            a password or netrc file that cannot be used (unreadable, readable by others: the
            message says ``chmod 600 FILE``), ``--password-file`` for a URL without a user, or a
            config file holding a secret that other users can read.
    """
    env = os.environ if env is None else env
    warnings: list[str] = []
    flag_headers: list[tuple[str, str]] = []
    for text in headers:
        try:
            flag_headers.append(parse_header(text))
        except HeaderError as exc:
            raise ConfigError(str(exc)) from None
    for name, _ in flag_headers:
        if secret_header(name):
            warnings.append(f"the value of --header {name} is visible to every user of this machine (ps): put it in"
                            f' the config file instead ([servers."URL"] headers, chmod 600)'
                            f"{' or OLLAMA_API_KEY' if name.lower() == 'authorization' else ''}")
    if host_origin == "flag" and any(h[2] is not None for h in hosts):
        warnings.append("the password in --host is visible to every user of this machine (ps): give it with"
                        " --password-file FILE, --netrc (~/.netrc), OLLAMA_HOST in the environment, or the"
                        " config file (chmod 600)")
    _check_file_secrets(hosts, servers, host_origin, file_origin)
    if cacert is not None:
        problem = _cacert_problem(cacert)
        if problem:
            raise ConfigError(f"--cacert {cacert}: {problem}")
    per_host: dict[str, dict[str, Any]] = {}
    for key, table in (servers or {}).items():
        where = f'{file_origin}: [servers."{redact_url(str(key))}"]'
        try:
            url, _, _ = parse_host_access(str(key), strict=True)
        except HostError as exc:
            warnings.append(f"{where}: {exc} — ignored")
            continue
        if not isinstance(table, Mapping):
            warnings.append(f"{where}: must be a table of {', '.join(SERVER_KEYS)} — ignored")
            continue
        entry: dict[str, Any] = {}
        for name, value in table.items():
            if name == "headers":
                try:
                    entry["headers"] = header_items(value, where)
                except HeaderError as exc:
                    warnings.append(f"{exc} — its headers are not sent")
            elif name == "cacert":
                problem = _cacert_problem(value) if isinstance(value, str) else "must be a file path"
                if problem:
                    warnings.append(f"{where}: cacert {value!s}: {problem} — the system's CAs are used")
                else:
                    entry["cacert"] = value
            elif name == "insecure":
                if isinstance(value, bool):
                    entry["insecure"] = value
                else:
                    warnings.append(f"{where}: insecure must be true or false — certificates are verified")
            elif name == "api_key_env":
                if isinstance(value, str):
                    entry["api_key_env"] = value.strip()
                else:
                    warnings.append(f"{where}: api_key_env must be a variable name — {API_KEY_ENV} is used")
            elif name == "password_file":
                if not isinstance(value, str) or not value.strip():
                    warnings.append(f"{where}: password_file must be a file path — no password is read")
                else:
                    entry["password_file"] = (value.strip(), f'{where}: password_file')
            else:
                warnings.append(f"{where}: unknown key {name!r} ignored (known: {', '.join(SERVER_KEYS)})")
        per_host.setdefault(url, {}).update(entry)
    known = [h[0] for h in hosts]
    for url in per_host:
        if url not in known:
            warnings.append(f'{file_origin}: [servers."{url}"] names no server watched ({", ".join(known)})'
                            " — it applies to none")
    out: dict[str, ServerAccess] = {}
    netrc_at = os.path.expanduser(netrc_file) if netrc_file else netrc_path(env) if netrc else None
    if password_file is not None and all(h[1] is None for h in hosts):
        raise ConfigError("--password-file: no server address names its user; name it in the host value"
                          " (https://<user>@host/), or use --netrc, whose entry names the login")
    for url, user, password in hosts:
        entry = per_host.get(url, {})
        try:
            user, password = _password_for(url, user, password, password_file, entry.get("password_file"), netrc_at)
        except SecretFileError as exc:
            raise ConfigError(str(exc)) from None
        var = entry.get("api_key_env", API_KEY_ENV)
        key = env.get(var, "").strip() if var else ""
        access = ServerAccess(
            url, username=user, password=password,
            headers=tuple(entry.get("headers", ())) + tuple(flag_headers),
            api_key=key or None, api_key_env=var or None,
            cacert=cacert if cacert is not None else (None if insecure else entry.get("cacert")),
            insecure=insecure or (cacert is None and bool(entry.get("insecure"))),
        )
        if user is not None and not access.https and not is_loopback_url(url):
            warnings.append(f"the password for {url} goes over plain http (unencrypted): use https:// if its"
                            " proxy offers it")
        out[url] = access
        # no output of this process shows them (kvtop.redact); a plain header's value (X-Team: ml) is no secret
        register_secrets(dataclasses.replace(access, headers=tuple(
            (n, v) for n, v in access.headers if secret_header(n))).secrets())
    return out, warnings


def _password_for(url: str, user: str | None, password: str | None, password_file: str | None,
                  table_file: tuple[str, str] | None, netrc_at: str | None) -> tuple[str | None, str | None]:
    """``(user, password)`` for ``url``: the URL's own, else ``--password-file``, the table's
    ``password_file``, the netrc entry (see :func:`server_accesses`).

    Raises:
        SecretFileError: A file that cannot be used, or a table's ``password_file`` for an address
            that names no user.
    """
    if password is not None:
        return user, password
    if password_file is not None and user is not None:
        return user, read_password_file(password_file)
    if table_file is not None:
        path, origin = table_file
        if user is None:
            raise SecretFileError(f"{origin}: the address {url} names no user; name it in the host value"
                                  " (https://<user>@host/)")
        return user, read_password_file(path, origin)
    if netrc_at is not None:
        found = netrc_login(netrc_at, httpx.URL(url).host)
        if found is not None and (user is None or user == found[0]):
            return found
    return user, password


def _check_file_secrets(hosts: list[tuple[str, str | None, str | None]], servers: Mapping[str, Any] | None,
                        host_origin: str | None, file_origin: str) -> None:
    """Refuse a config file that holds a secret (a header value in a ``[servers."URL"]`` table, a
    password in ``host``) and that other users can read (``sources.auth.check_private``).

    Raises:
        ConfigError: The file is readable by others; the message says ``chmod 600``.
    """
    holds = bool(host_origin and host_origin.startswith("file")) and any(h[2] is not None for h in hosts)
    for key, table in (servers or {}).items():
        if isinstance(table, Mapping) and table.get("headers"):
            holds = True
        try:
            if split_userinfo(str(key))[2] is not None:
                holds = True
        except UserinfoError:
            holds = True
    if not holds or not os.path.exists(file_origin):
        return
    try:
        check_private(file_origin, "the config file")
    except SecretFileError as exc:
        raise ConfigError(str(exc)) from None
    except OSError:
        return


def _cacert_problem(path: str) -> str | None:
    """None when ``path`` is a PEM file of CA certificates kvtop can use, else why not."""
    import ssl

    try:
        ca_context(path)
    except FileNotFoundError:
        return "no such file"
    except ssl.SSLError:  # an OSError too: first
        return "holds no PEM certificate"
    except OSError as exc:
        return f"cannot read it ({exc.strerror or exc})"
    return None


def access_report(access: ServerAccess) -> str:
    """One line for ``--print-config``: what credentials are sent (values masked) and how TLS is checked."""
    tls = access.tls_note or ("TLS verified with the system's CAs" if access.https else "plain http")
    return f"{access.sent_words()}; {tls}"
