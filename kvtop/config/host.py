"""The Ollama server's address: ``OLLAMA_HOST`` (or ``--host``) read exactly as Ollama's own client
reads it, so that kvtop watches the server that ``ollama ps`` talks to, and its short display form.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from urllib.parse import urlsplit

import httpx

DEFAULT_HOST_URL = "http://127.0.0.1:11434"
"""Ollama's default address (``envconfig.Host()`` with ``OLLAMA_HOST`` unset)."""


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


def _bracket_error(hostport: str) -> str | None:
    """What is wrong with the brackets of ``hostport`` (an IPv6 address is written ``[ADDR]`` or
    ``[ADDR]:PORT``), else None."""
    if hostport.startswith("["):
        end = hostport.find("]")
        if end < 0:
            return "no closing ']' (an IPv6 address is written [ADDR] or [ADDR]:PORT)"
        if "[" in hostport[1:end]:
            return "a '[' inside the host"
        after = hostport[end + 1 :]
        if after and (not after.startswith(":") or "[" in after or "]" in after):
            return "after ']' only ':PORT' may follow"
        return None
    if "]" in hostport:
        return "a ']' with no '[' before it"
    if "[" in hostport:
        return "a '[' inside the host"
    return None


def parse_ollama_host(raw: str | None, *, strict: bool = False) -> str:
    """Resolve an ``OLLAMA_HOST`` value to the base URL a client connects to.

    Follows Ollama's ``envconfig.Host()`` (docs/ollama-internals.md §3.5): the scheme is optional
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
            port; ``[::1]x:80``, a bracket out of place), or, with ``strict``, its port is not a
            number in 0–65535 or an IPv6 address's ``[`` is not closed (``http://[::1``).
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
    bracket = _bracket_error(hostport)
    if bracket is not None and (strict or split is not None or not _is_ip(hostport.strip("[]"))):
        # OLLAMA_HOST=[::1 reaches ::1 in Ollama (strings.Trim(hostport, "[]")): so here, but not
        # from --host; anything else with a bracket out of place names no server
        raise HostError(f"cannot use {s!r} as a server address: {bracket}")
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
        reason = str(exc).partition(": '")[0]  # httpx quotes kvtop's URL, not what was given
        raise HostError(f"cannot use {s!r} as a server address: {reason}") from None
    return url


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


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


def host_from_environment(env: Mapping[str, str] | None = None) -> str:
    """The base URL from ``OLLAMA_HOST`` in ``env`` (default: the process environment)."""
    env = os.environ if env is None else env
    return parse_ollama_host(env.get("OLLAMA_HOST"))
