"""The way forward when the server does not answer: the same words in the TUI, ``--once`` and ``--check``.

"Connection refused" alone leaves a new user stuck. kvtop says what to check (is ``ollama serve``
running, and reachable from here), how to name another server (``--host`` / ``OLLAMA_HOST``, and
where the address in use came from), and how to see kvtop without a server (``kvtop --demo``).
Pure text: no I/O.
"""

from __future__ import annotations

from urllib.parse import urlsplit

__all__ = ["host_origin_words", "unreachable_hints", "unreachable_hint_line"]

_LOOPBACK = {"127.0.0.1", "localhost", "::1", "0.0.0.0", "::"}
_NOT_OLLAMA = {"http", "invalid_json", "invalid_shape"}


def host_origin_words(origin: str | None) -> str:
    """Where the address came from, in words: ``--host``, ``OLLAMA_HOST``, the config file or the default."""
    if not origin:
        return ""
    if origin == "flag":
        return "from --host"
    if origin.startswith("env "):
        return "from " + origin.removeprefix("env ")
    if origin.startswith("file "):
        return "from the config file " + origin.removeprefix("file ")
    if origin == "default":
        return "the default: neither --host nor OLLAMA_HOST is set"
    return "from " + origin


def _host_name(host_url: str) -> str:
    try:
        return urlsplit(host_url).hostname or host_url
    except ValueError:
        return host_url


def unreachable_hints(
    host_url: str,
    origin: str | None = None,
    error_kind: str | None = None,
    *,
    demo: bool = False,
    error: str | None = None,
) -> tuple[str, ...]:
    """What to try when ``host_url`` does not answer, one sentence a line.

    Args:
        host_url: The server kvtop polls.
        origin: Where the address came from (``config.resolve_config``'s origin: ``flag``,
            ``env OLLAMA_HOST``, ``file PATH``, ``default``), or None when not known.
        error_kind: ``OllamaSnapshot.error_kind``: ``http``/``invalid_*`` mean something answered
            that is not Ollama.
        demo: kvtop is watching its own stand-in (``--demo``): no advice to start one.
        error: The error text (``OllamaSnapshot.error``): for ``tls``, an expired certificate is
            told to be renewed rather than given a CA.

    Returns:
        Two or three sentences: the server, the address, the demo.
    """
    name = _host_name(host_url)
    local = name in _LOOPBACK
    if error_kind in ("auth", "tls"):
        return _access_hints(host_url, error_kind, error or "")
    if error_kind in _NOT_OLLAMA:
        first = f"Something answered at {host_url}, but not as Ollama does: is this Ollama's address (port 11434)?"
    elif local:
        first = "Is Ollama running here? Start it: `ollama serve` (or `systemctl start ollama`, or the Ollama app)."
    else:
        first = (
            f"Is Ollama running on {name}, listening beyond its loopback "
            "(OLLAMA_HOST=0.0.0.0 in its environment), with the port open to this machine?"
        )
    where = host_origin_words(origin)
    second = "Another server: kvtop --host HOST:PORT, or set OLLAMA_HOST" + (
        f" (this address is {where})." if where else "."
    )
    lines = [first, second]
    if not demo:
        lines.append("No server at hand: kvtop --demo shows kvtop on a built-in stand-in.")
    return tuple(lines)


def _access_hints(host_url: str, error_kind: str, error: str = "") -> tuple[str, ...]:
    """The way forward when the server (or its proxy) answered but refused kvtop: credentials
    (401/403, ``auth``) or a certificate that did not verify (``tls``)."""
    if error_kind == "auth":
        return (
            f"{host_url} asks for credentials: OLLAMA_API_KEY=… (Authorization: Bearer), or basic auth with"
            " the user in the address and --password-file FILE (chmod 600) or --netrc (~/.netrc).",
            f'Per server, in the config file (chmod 600): [servers."{host_url}"] headers = '
            '{ Authorization = "…" } or password_file = "…".',
        )
    if "it has expired" in error or "not valid yet" in error:
        return (
            f"The TLS certificate of {host_url} is outside its validity dates: renew it on the server (or its"
            " proxy), or check this machine's clock; naming a CA does not change that.",
        )
    if "issued for another name" in error:
        return (
            f"The TLS certificate of {host_url} names another host: reach the server by a name the"
            " certificate was issued for (--host).",
        )
    if "must be fixed" in error:
        return (
            f"The TLS certificate of {host_url} is refused for a reason of its own (revoked, wrong purpose,"
            " malformed…): fix it on the server (or its proxy); naming a CA does not change that.",
        )
    return (
        f"The TLS certificate of {host_url} is not trusted here: --cacert FILE names the CA (PEM) that signed it.",
        f'Per server, in the config file: [servers."{host_url}"] cacert = "/path/ca.pem".',
    )


def unreachable_hint_line(
    width: int = 78, *, demo: bool = False, error_kind: str | None = None, error: str | None = None
) -> str:
    """The hints in one line for the dashboard's status line: the long form from 90 cells, else
    one that fits 78 (an 80-column terminal). ``error_kind`` ``auth``/``tls``: the flags that
    give credentials or trust instead; ``error`` (the snapshot's error text), when given, narrows
    a ``tls`` line to its reason, as :func:`unreachable_hints` does."""
    if error_kind == "auth":
        return (
            "Credentials: OLLAMA_API_KEY, --password-file FILE, --netrc, or the config file's headers"
            if width >= 90
            else "Credentials: OLLAMA_API_KEY, --password-file, --netrc, config"
        )
    if error_kind == "tls" and error:
        if "it has expired" in error or "not valid yet" in error:
            return (
                "TLS certificate outside its dates: renew it, or check this machine's clock"
                if width >= 90
                else "TLS certificate expired: renew it (or check the clock)"
            )
        if "issued for another name" in error:
            return (
                "TLS certificate issued for another name: --host with a name it holds"
                if width >= 90
                else "TLS cert for another name: --host with its name"
            )
        if "must be fixed" in error:
            return (
                "TLS certificate refused (revoked, malformed…): fix it on the server"
                if width >= 90
                else "TLS certificate refused: fix it on the server"
            )
        return (
            "TLS certificate not trusted here: --cacert FILE names the CA that signed it"
            if width >= 90
            else "TLS not trusted: --cacert FILE (the CA)"
        )
    if error_kind == "tls":
        return (
            "TLS certificate not verified: renew an expired one; a private CA: --cacert FILE"
            if width >= 90
            else "TLS not verified: renew if expired; private CA: --cacert"
        )
    if width >= 90:
        text = "Is `ollama serve` running? Another server: --host or OLLAMA_HOST"
        return text + (". No server at hand: kvtop --demo" if not demo else "")
    text = "Is `ollama serve` running? Other server: --host/OLLAMA_HOST"
    return text + (". Or: kvtop --demo" if not demo else "")
