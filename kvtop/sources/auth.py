"""How kvtop reaches one Ollama server behind a proxy: credentials, extra headers, TLS trust.

One :class:`ServerAccess` per watched server is built once by the CLI (``config.server_accesses``)
from ``OLLAMA_API_KEY``, the config file's ``[servers."URL"]`` tables, ``--password-file`` /
``--netrc`` (:func:`read_password_file`, :func:`netrc_login`: private files only,
:func:`check_private`), the host value's userinfo (``https://user:pass@host/``, visible in ``ps``
when typed as ``--host``), repeatable ``--header 'Name: value'``, ``--cacert FILE`` and
``--insecure``. Every client that talks to that server (the dashboard's poller and its writes, ``--once``/``--check``,
``kvtop plan``, the exporter, the what-if screen) takes its options from it
(:meth:`ServerAccess.client_options`), so they all authenticate and verify alike.

Secrets never leave this object as text: the base URL it carries has no userinfo, ``repr`` leaves
out the password, the token and the header values, :func:`redact_url` drops the userinfo of any
URL in a message, and :meth:`ServerAccess.scrub` replaces the secrets themselves in text that came
back from the server (a proxy may echo the ``Authorization`` header in its error page).
"""

from __future__ import annotations

import base64
import functools
import os
import re
import ssl
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import httpx

from kvtop.redact import drop_userinfo, is_secret_name
from kvtop.sources.hosts import httpx_verify, is_loopback_url

__all__ = [
    "API_KEY_ENV",
    "HeaderError",
    "SecretFileError",
    "ServerAccess",
    "UserinfoError",
    "ca_context",
    "check_private",
    "netrc_login",
    "parse_header",
    "read_password_file",
    "redact_url",
    "secret_header",
    "split_userinfo",
]

API_KEY_ENV = "OLLAMA_API_KEY"
"""The variable whose value is sent as ``Authorization: Bearer …``, as Ollama's Python client
(``ollama/_client.py``, ``BaseClient.__init__``) does for every host when no ``Authorization``
header is given. (Ollama's Go client signs requests with the user's ed25519 key instead, only for
``ollama.com`` or with ``OLLAMA_AUTH``; kvtop does not sign.)"""

BASE_HEADERS: Mapping[str, str] = {"User-Agent": "kvtop", "Accept-Encoding": "gzip, deflate"}
"""Headers every kvtop request to a server carries: only encodings the bounded decoder reads
(httpx would add br/zstd when installed)."""

RESERVED_HEADERS = frozenset(
    {"accept-encoding", "content-length", "transfer-encoding", "connection", "te", "upgrade", "content-type"}
)
"""Header names ``--header`` may not set: they belong to the HTTP framing or to kvtop's bounded
body reader."""

_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
"""An HTTP field name (RFC 9110 ``token``)."""


class HeaderError(ValueError):
    """A ``--header`` or config header that cannot be sent; the message never holds its value."""


def redact_url(text: str) -> str:
    """``text`` with the userinfo of every URL in it dropped: ``https://alice:pw@gpu-box/`` becomes
    ``https://gpu-box/`` (a password holding an unencoded ``/``, ``?`` or ``#`` too:
    ``kvtop.redact``). The one form kvtop shows a URL in (screen, JSON, ``/metrics``, logs,
    recordings, messages); a base URL kvtop polls never has userinfo in the first place."""
    return drop_userinfo(text)


class UserinfoError(ValueError):
    """A host value whose user name or password cannot be told from the address (an unencoded
    ``/``, ``?`` or ``#`` in them); the message never holds either."""


def split_userinfo(raw: str) -> tuple[str, str | None, str | None]:
    """Take the credentials out of a host value (``--host``, ``OLLAMA_HOST``, the config's ``host``).

    ``https://alice:s%40cret@gpu-box/ollama`` gives ``("https://gpu-box/ollama", "alice", "s@cret")``:
    user and password percent-decoded, as in a URL. The authority ends at the first ``/``, ``?``
    or ``#`` (RFC 3986 §3.2); its last ``@`` ends the userinfo, so an unencoded ``@`` or ``:`` in a
    password still works. A ``user:password`` whose password holds an unencoded ``/``, ``?`` or
    ``#`` is refused: what precedes that first ``/``, ``?`` or ``#`` (``alice:pa`` of
    ``alice:pa/ss@gpu-box``) is no ``host:port``, and reading it as one would send the password,
    in the path, to the wrong host. So is any ``@`` after the first ``/``, ``?`` or ``#`` of an
    address without userinfo: ``al/ice@gpu-box`` (a user name holding a ``/``, no password) and
    ``al:1234/x@gpu-box`` (a password starting with digits) read as a host and a path as well as
    ``gpu-box:11434/a@b`` does, so none is guessed: an ``@`` in a path is written ``%40``. A value
    without userinfo comes back unchanged with ``(None, None)``. Ollama's own ``envconfig.Host()``
    has no userinfo: the rest is then read as Ollama reads it (``config.parse_ollama_host``).

    Returns:
        ``(value without userinfo, user or None, password or None)``; the password is None when
        the userinfo has no ``:``.

    Raises:
        UserinfoError: A ``user:password`` with an unencoded ``/``, ``?`` or ``#``, or an ``@``
            after the authority of an address without userinfo; the message
            shows the value with everything before its last ``@`` left out.
    """
    text = raw.strip().strip("\"'")
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "", text
    ends = [i for i in (rest.find(ch) for ch in "/?#") if i >= 0]
    cut = min(ends) if ends else len(rest)
    authority, tail = rest[:cut], rest[cut:]
    if "@" in tail and "@" not in authority:
        shown = (f"{scheme}://" if sep else "") + "…@" + rest.rpartition("@")[2]
        raise UserinfoError(
            f"cannot tell the user name and password from the server address in {shown!r}: a '/', '?' or '#'"
            " in them must be percent-encoded (%2F, %3F, %23), and an '@' after the host written %40;"
            " better, keep the password off the command line: --password-file FILE or --netrc"
        )
    if "@" not in authority:
        return raw, None, None
    userinfo, _, hostport = authority.rpartition("@")
    user, colon, password = userinfo.partition(":")
    clean = (f"{scheme}://" if sep else "") + hostport + tail
    return clean, unquote(user), (unquote(password) if colon else None)


MAX_SECRET_FILE_BYTES = 64 * 1024
"""A password file larger than this is refused (a password is a line)."""


class SecretFileError(ValueError):
    """A password or netrc file kvtop will not use: unreadable, empty, or readable by other users."""


def check_private(path: str, what: str) -> None:
    """Refuse a file holding a secret that the group or other users can read, as ssh refuses a
    private key: ``mode & 0o077`` must be 0 (POSIX only; Windows has no such mode bits).

    Raises:
        SecretFileError: The file is readable or writable by others; the message names
            ``chmod 600 PATH``. OSError: It cannot be looked at.
    """
    if os.name != "posix":
        return
    mode = os.stat(path).st_mode
    if mode & 0o077:
        raise SecretFileError(
            f"{what} {path} holds a secret and other users of this machine can read or write it"
            f" (mode {stat.S_IMODE(mode):04o}); kvtop will not use it: chmod 600 {path}"
        )


def read_password_file(path: str, what: str = "--password-file") -> str:
    """The password in ``path``: its first line, without the line break (``--password-file``, a
    ``[servers."URL"]`` table's ``password_file``). The file must be private (:func:`check_private`).

    Raises:
        SecretFileError: It cannot be read, is readable by others, is larger than
            :data:`MAX_SECRET_FILE_BYTES` or its first line is empty. The message names the file,
            never its content.
    """
    path = os.path.expanduser(path)
    try:
        check_private(path, what)
        with open(path, "rb") as fh:
            data = fh.read(MAX_SECRET_FILE_BYTES + 1)
    except FileNotFoundError:
        raise SecretFileError(f"{what} {path}: no such file") from None
    except OSError as exc:
        raise SecretFileError(f"{what} {path}: cannot read it ({exc.strerror or exc.__class__.__name__})") from None
    if len(data) > MAX_SECRET_FILE_BYTES:
        raise SecretFileError(f"{what} {path}: larger than {MAX_SECRET_FILE_BYTES:,} bytes; expected one line")
    password = data.decode("utf-8", "replace").splitlines()[0] if data else ""
    if not password:
        raise SecretFileError(f"{what} {path}: the first line is empty; expected the password")
    return password


def netrc_path(env: Mapping[str, str]) -> str:
    """The netrc file ``--netrc`` reads: ``$NETRC`` (as curl and Python's ``netrc`` read it), else ``~/.netrc``."""
    return os.path.expanduser(env.get("NETRC") or "~/.netrc")


def netrc_login(path: str, host: str) -> tuple[str, str] | None:
    """``(login, password)`` of the netrc ``machine`` entry for ``host`` (else its ``default``
    entry), or None when it has none (curl's ``--netrc``). The file must be private (:func:`check_private`).

    Raises:
        SecretFileError: The file cannot be read, is readable by others, or cannot be parsed
            (the message names the file and line, never a password).
    """
    import netrc

    try:
        check_private(path, "netrc file")
        with open(path, "rb") as fh:
            if len(fh.read(MAX_SECRET_FILE_BYTES + 1)) > MAX_SECRET_FILE_BYTES:
                raise SecretFileError(f"netrc file {path}: larger than {MAX_SECRET_FILE_BYTES:,} bytes")
        entry = netrc.netrc(path).authenticators(host)
    except FileNotFoundError:
        raise SecretFileError(f"netrc file {path}: no such file") from None
    except netrc.NetrcParseError as exc:
        raise SecretFileError(f"netrc file {path}: cannot parse it (line {exc.lineno})") from None
    except OSError as exc:
        raise SecretFileError(f"netrc file {path}: cannot read it ({exc.strerror or exc.__class__.__name__})") from None
    if entry is None:
        return None
    login, _, password = entry
    return (login or "", password or "") if password else None


def secret_header(name: str) -> bool:
    """Whether a header's value is a credential (``Authorization``, ``Cookie``, ``X-Api-Key`` …):
    one given on the command line is warned about."""
    return name.lower() in ("authorization", "proxy-authorization", "cookie") or is_secret_name(name)


def parse_header(text: str, origin: str = "--header") -> tuple[str, str]:
    """``'Name: value'`` as ``(name, value)``, both stripped.

    Raises:
        HeaderError: No ``:``, a name that is not an HTTP token, a reserved name
            (:data:`RESERVED_HEADERS`), or a value with a line break or another control
            character. The message names ``origin`` and the header, never the value.
    """
    name, colon, value = text.partition(":")
    name, value = name.strip(), value.strip()
    if not colon:  # nothing of it is shown: it may be all secret ("Authorization Bearer …")
        raise HeaderError(f"{origin}: expected 'Name: value', got no ':' (e.g. --header 'Authorization: Bearer …')")
    if not _TOKEN.fullmatch(name):
        raise HeaderError(
            f"{origin}: expected 'Name: value', got no header name before ':' (a name is letters, "
            "digits and -, without spaces)"
        )
    return name, _check_value(name, value, origin)


def _check_value(name: str, value: str, origin: str) -> str:
    if not _TOKEN.fullmatch(name):
        raise HeaderError(f"{origin}: {name!r} is not a header name")
    if name.lower() in RESERVED_HEADERS:
        raise HeaderError(f"{origin}: {name} is set by kvtop itself and cannot be replaced")
    if any(ord(ch) < 32 and ch != "\t" or ord(ch) == 127 for ch in value):
        raise HeaderError(f"{origin}: the value of {name} holds a line break or a control character")
    return value


def header_items(value: Any, origin: str) -> list[tuple[str, str]]:
    """A config file's ``headers``: a table ``{Name = "value"}`` or a list of ``"Name: value"``.

    Raises:
        HeaderError: Another shape, or a header :func:`parse_header` refuses.
    """
    if isinstance(value, Mapping):
        out = []
        for name, val in value.items():
            if not isinstance(val, str):
                raise HeaderError(f"{origin}: headers.{name} must be a string")
            out.append((str(name).strip(), _check_value(str(name).strip(), val.strip(), origin)))
        return out
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [parse_header(v, origin) for v in value]
    raise HeaderError(f'{origin}: headers must be a table (Name = "value") or a list of "Name: value"')


@functools.lru_cache(maxsize=16)
def ca_context(path: str) -> ssl.SSLContext:
    """A TLS client context that trusts only the CA certificates in the PEM file ``path``
    (``--cacert``, as curl's: the system's CAs are not added). Built once per path.

    Raises:
        OSError: The file cannot be read.
        ssl.SSLError: It holds no PEM certificate.
    """
    return ssl.create_default_context(cafile=path)


@dataclass(frozen=True, slots=True)
class ServerAccess:
    """What a client sends and trusts to reach one server.

    Attributes:
        base_url: The server's base URL without userinfo (``config.parse_ollama_host``).
        username: Basic-auth user (from the URL's userinfo, percent-decoded), or None.
        password: Basic-auth password; not in ``repr``.
        headers: Extra headers, ``--header`` and the config file's, in order; not in ``repr``.
        api_key: A bearer token (``OLLAMA_API_KEY`` or the config's ``api_key_env``); not in ``repr``.
        api_key_env: The variable ``api_key`` was read from, for messages.
        cacert: A PEM file of the CA(s) to trust instead of the system's (``--cacert``), or None.
        insecure: Do not verify the server's TLS certificate (``--insecure``).
        origins: Where each of the TLS settings came from (``"cacert": "--cacert"`` …), for messages.
    """

    base_url: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    api_key: str | None = field(default=None, repr=False)
    api_key_env: str | None = None
    cacert: str | None = None
    insecure: bool = False

    @property
    def https(self) -> bool:
        """Whether the server is reached over TLS (an ``https://`` base URL)."""
        return self.base_url.lower().startswith("https://")

    @property
    def auth(self) -> httpx.BasicAuth | None:
        """``httpx.BasicAuth`` for the URL's credentials, None without them."""
        if self.username is None:
            return None
        return httpx.BasicAuth(self.username, self.password or "")

    def _has_header(self, name: str) -> bool:
        return any(n.lower() == name.lower() for n, _ in self.headers)

    @property
    def sends_bearer(self) -> bool:
        """Whether ``api_key`` goes out as ``Authorization: Bearer``: when no ``Authorization``
        header is given and the URL has no credentials (basic auth would replace it)."""
        return bool(self.api_key) and self.username is None and not self._has_header("Authorization")

    def request_headers(self) -> dict[str, str]:
        """Every header a client for this server sends: :data:`BASE_HEADERS`, then the extra ones
        (a repeated name: the last wins), then the bearer token (:attr:`sends_bearer`)."""
        out = dict(BASE_HEADERS)
        for name, value in self.headers:
            for old in [k for k in out if k.lower() == name.lower()]:
                del out[old]
            out[name] = value
        if self.sends_bearer:
            out["Authorization"] = f"Bearer {self.api_key}"
        return out

    def verify(self, *, trust_env: bool) -> ssl.SSLContext | bool:
        """``verify=`` for an httpx client of this server: False with ``--insecure``, the CA file's
        context with ``--cacert``, else ``hosts.httpx_verify`` (no CA bundle read for plain http).

        Raises:
            OSError, ssl.SSLError: The ``--cacert`` file cannot be used (``config.server_accesses``
                checks it once at start, so a client never sees this).
        """
        if self.insecure:
            return False
        if self.cacert is not None:
            return ca_context(self.cacert)
        return httpx_verify(self.base_url, trust_env=trust_env)

    def client_options(self, **overrides: Any) -> dict[str, Any]:
        """Keyword arguments for ``httpx.Client`` / ``httpx.AsyncClient``: ``base_url``, ``auth``,
        ``headers``, ``verify`` and ``trust_env`` (False for a loopback server: no proxy may sit in
        between); ``overrides`` (``timeout``, ``transport`` …) are added last."""
        trust_env = bool(overrides.pop("trust_env", not is_loopback_url(self.base_url)))
        options: dict[str, Any] = {
            "base_url": self.base_url,
            "auth": self.auth,
            "headers": self.request_headers(),
            "verify": self.verify(trust_env=trust_env),
            "trust_env": trust_env,
            "follow_redirects": False,
        }
        options.update(overrides)
        return options

    def secrets(self) -> tuple[str, ...]:
        """Every secret this access holds, as it could appear in text (longest first)."""
        found: list[str] = []
        if self.password:
            found.append(self.password)
            raw = f"{self.username or ''}:{self.password}".encode()
            found.append(base64.b64encode(raw).decode("ascii"))
        if self.api_key:
            found.append(self.api_key)
        found.extend(v for _, v in self.headers if v)
        for value in list(found):
            scheme, _, token = value.partition(" ")
            if token and scheme.isalpha() and len(token) >= 4:
                found.append(token)  # "Bearer abc…": the token alone too
        return tuple(sorted({s for s in found if len(s) >= 3}, key=len, reverse=True))

    def scrub(self, text: str) -> str:
        """``text`` with every secret of this access replaced by ``***`` and URL userinfo dropped
        (:func:`redact_url`): for text the server or its proxy sent back."""
        for secret in self.secrets():
            text = text.replace(secret, "***")
        return redact_url(text)

    @property
    def tls_note(self) -> str | None:
        """How TLS trust differs from the default, in words (``--once``, ``--check``, the exporters'
        stderr), or None (also for a plain ``http://`` server, where nothing is verified either way).
        It says the setting, not an outcome: a certificate that then fails says so itself."""
        if not self.https:
            return None
        if self.insecure:
            return "TLS certificate not verified (--insecure)"
        if self.cacert is not None:  # a setting, said before any answer: not "verified"
            return f"TLS certificate checked against the CA in {self.cacert} (--cacert)"
        return None

    @property
    def tls_flag(self) -> str | None:
        """The dashboard header's short flag: ``TLS UNVERIFIED`` or ``CA <file name>``, or None."""
        if not self.https:
            return None
        if self.insecure:
            return "TLS UNVERIFIED"
        if self.cacert is not None:
            name = self.cacert.replace("\\", "/").rsplit("/", 1)[-1]
            return f"CA {name if len(name) <= 24 else name[:23] + '…'}"
        return None

    def sent_words(self) -> str:
        """What credentials go out, in words, values masked: ``basic auth as alice``,
        ``Authorization: Bearer from OLLAMA_API_KEY``, ``header X-Token``; ``no credentials``."""
        words: list[str] = []
        if self.username is not None:
            words.append(f"basic auth as {self.username}")
        if self.sends_bearer:
            words.append(f"Authorization: Bearer from {self.api_key_env or API_KEY_ENV}")
        words.extend(f"header {name}" for name, _ in self.headers)
        return ", ".join(words) if words else "no credentials"

    def tls_json(self) -> dict[str, Any] | None:
        """``--once --json``'s ``tls`` member: ``{"verify": bool, "cacert": path|null}`` when
        ``--insecure`` or ``--cacert`` is in use for an ``https://`` server, else None (left out)."""
        if not self.https or (not self.insecure and self.cacert is None):
            return None
        return {"verify": not self.insecure, "cacert": self.cacert}
