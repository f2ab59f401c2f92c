"""How each server is reached: a host's credentials (userinfo, password file, netrc, API key), its
extra headers and TLS trust, from the flags and ``config.toml``'s ``[servers."URL"]`` tables,
built into one ``sources.auth.ServerAccess`` per server.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

import httpx

from kvtop.redact import register_secrets
from kvtop.sources.auth import (
    API_KEY_ENV,
    HeaderError,
    SecretFileError,
    ServerAccess,
    UserinfoError,
    ca_context,
    check_private,
    header_items,
    netrc_login,
    netrc_path,
    parse_header,
    read_password_file,
    redact_url,
    secret_header,
    split_userinfo,
)
from kvtop.sources.hosts import is_loopback_url

from kvtop.config.files import ConfigError
from kvtop.config.host import HostError, parse_ollama_host

# --- how each server is reached: credentials, headers, TLS ------------------------------------

SERVER_KEYS: dict[str, str] = {
    "headers": 'extra request headers: a table (Name = "value") or a list of "Name: value"',
    "cacert": "PEM file of the CA(s) that signed the server's certificate (instead of the system's)",
    "insecure": "true: do not verify the server's TLS certificate",
    "api_key_env": f'variable whose value is sent as Authorization: Bearer (default {API_KEY_ENV}; "": none)',
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
            warnings.append(
                f"the value of --header {name} is visible to every user of this machine (ps): put it in"
                f' the config file instead ([servers."URL"] headers, chmod 600)'
                f"{' or OLLAMA_API_KEY' if name.lower() == 'authorization' else ''}"
            )
    if host_origin == "flag" and any(h[2] is not None for h in hosts):
        warnings.append(
            "the password in --host is visible to every user of this machine (ps): give it with"
            " --password-file FILE, --netrc (~/.netrc), OLLAMA_HOST in the environment, or the"
            " config file (chmod 600)"
        )
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
                    entry["password_file"] = (value.strip(), f"{where}: password_file")
            else:
                warnings.append(f"{where}: unknown key {name!r} ignored (known: {', '.join(SERVER_KEYS)})")
        per_host.setdefault(url, {}).update(entry)
    known = [h[0] for h in hosts]
    for url in per_host:
        if url not in known:
            warnings.append(
                f'{file_origin}: [servers."{url}"] names no server watched ({", ".join(known)}) — it applies to none'
            )
    out: dict[str, ServerAccess] = {}
    netrc_at = os.path.expanduser(netrc_file) if netrc_file else netrc_path(env) if netrc else None
    if password_file is not None and all(h[1] is None for h in hosts):
        raise ConfigError(
            "--password-file: no server address names its user; name it in the host value"
            " (https://<user>@host/), or use --netrc, whose entry names the login"
        )
    for url, user, password in hosts:
        entry = per_host.get(url, {})
        try:
            user, password = _password_for(url, user, password, password_file, entry.get("password_file"), netrc_at)
        except SecretFileError as exc:
            raise ConfigError(str(exc)) from None
        var = entry.get("api_key_env", API_KEY_ENV)
        key = env.get(var, "").strip() if var else ""
        access = ServerAccess(
            url,
            username=user,
            password=password,
            headers=tuple(entry.get("headers", ())) + tuple(flag_headers),
            api_key=key or None,
            api_key_env=var or None,
            cacert=cacert if cacert is not None else (None if insecure else entry.get("cacert")),
            insecure=insecure or (cacert is None and bool(entry.get("insecure"))),
        )
        if user is not None and not access.https and not is_loopback_url(url):
            warnings.append(
                f"the password for {url} goes over plain http (unencrypted): use https:// if its proxy offers it"
            )
        out[url] = access
        # no output of this process shows them (kvtop.redact); a plain header's value (X-Team: ml) is no secret
        register_secrets(
            dataclasses.replace(access, headers=tuple((n, v) for n, v in access.headers if secret_header(n))).secrets()
        )
    return out, warnings


def _password_for(
    url: str,
    user: str | None,
    password: str | None,
    password_file: str | None,
    table_file: tuple[str, str] | None,
    netrc_at: str | None,
) -> tuple[str | None, str | None]:
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
            raise SecretFileError(
                f"{origin}: the address {url} names no user; name it in the host value (https://<user>@host/)"
            )
        return user, read_password_file(path, origin)
    if netrc_at is not None:
        found = netrc_login(netrc_at, httpx.URL(url).host)
        if found is not None and (user is None or user == found[0]):
            return found
    return user, password


def _check_file_secrets(
    hosts: list[tuple[str, str | None, str | None]],
    servers: Mapping[str, Any] | None,
    host_origin: str | None,
    file_origin: str,
) -> None:
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
