"""What a failed request to an Ollama server says: :class:`RequestFailed` and its one-line messages
(refused, TLS not verified, authentication asked, a redirect), credentials never in them.
"""

from __future__ import annotations

import ssl
from urllib.parse import urlsplit, urlunsplit


from kvtop.sources.auth import ServerAccess
from kvtop.model.snapshots import ErrorKind
from kvtop.sources.ollama_decode import _one_line
from kvtop.sources.ollama_limits import MiB


def _root_os_error(exc: BaseException) -> OSError | None:
    """The innermost ``OSError`` behind an httpx error (httpx hides ECONNREFUSED behind
    "All connection attempts failed")."""
    found: OSError | None = None
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, OSError):
            found = cur
        cur = cur.__cause__ or cur.__context__
    return found


def _safe_location(location: str) -> str:
    """A redirect's ``Location`` fit for a message: user:password@ dropped, one line, ≤ 120 chars."""
    try:
        parts = urlsplit(location)
        if parts.username is not None or parts.password is not None:
            location = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    except ValueError:
        pass
    return _one_line(location, 120) or "''"


def _mib(n_bytes: int) -> str:
    return f"{n_bytes / MiB:.0f} MiB" if n_bytes >= 10 * MiB else f"{n_bytes / MiB:.1f} MiB"


AUTH_FLAGS = (
    "OLLAMA_API_KEY (Bearer), --password-file FILE or --netrc (basic auth), or the config file's"
    ' [servers."URL"] headers'
)
"""The ways to give a server credentials, as the 401/403 messages name them: those that keep the
secret off the command line (where every local user sees it with ``ps``) first."""


def auth_message(status: int, access: ServerAccess) -> str:
    """The error of a 401 or 403 answer: what to set, and what kvtop sent (values masked).

    ``authentication required (401): set credentials with OLLAMA_API_KEY (Bearer), --password-file
    FILE or --netrc (basic auth), or the config file's [servers."URL"] headers (sent: no
    credentials)``; a 403 says
    ``authentication refused (403)``: the credentials sent are not allowed.
    """
    sent = access.sent_words()
    if status == 401:
        return f"authentication required (401): set credentials with {AUTH_FLAGS} (sent: {sent})"
    return f"authentication refused (403): these credentials are not allowed here (sent: {sent}); check {AUTH_FLAGS}"


_TLS_UNKNOWN_CA = frozenset({2, 18, 19, 20, 21})
"""OpenSSL verify codes of a certificate whose CA is not trusted here (unable to get the issuer,
self-signed, self-signed in the chain, no local issuer, cannot verify the first certificate)."""


_TLS_OTHER_NAME = frozenset({62, 63, 64})
"""OpenSSL verify codes of a certificate issued for other names than the one reached (host name,
e-mail, IP address mismatch): its CA may be right; the name is not."""


def _verify_error(cause: BaseException) -> BaseException:
    """The ``ssl.SSLCertVerificationError`` behind ``cause`` (its ``__cause__``/``__context__``
    chain, as httpx wraps it), else ``cause`` itself."""
    seen: set[int] = set()
    e: BaseException | None = cause
    while e is not None and id(e) not in seen:
        if isinstance(e, ssl.SSLCertVerificationError):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return cause


def tls_message(base_url: str, cause: BaseException) -> str:
    """The error of a TLS certificate that did not verify: why (one line) and what fixes that reason.

    Expired (or not yet valid): the certificate must be renewed (or this machine's clock is wrong);
    an unknown CA: ``--cacert FILE`` names it; another name: ``--host`` by the name it was issued
    for. ``--insecure`` is never offered as the fix (it is in ``--help`` for who needs it)."""
    err = _verify_error(cause)
    code = getattr(err, "verify_code", None)
    reason = getattr(err, "verify_message", None) or getattr(err, "reason", None) or str(err)
    text = str(reason)
    head = f"TLS certificate of {base_url} not verified ({_one_line(text, 80)})"
    if code == 10 or (code is None and "has expired" in text):
        return head + ": it has expired: renew the server's certificate"
    if code == 9 or (code is None and "not yet valid" in text):
        return head + ": it is not valid yet: check this machine's clock and the certificate's start date"
    if code in _TLS_OTHER_NAME or (code is None and "mismatch" in text.lower()):
        return head + ": it was issued for another name: reach the server by that name (--host)"
    if code in _TLS_UNKNOWN_CA or code is None:
        return head + ": name the CA that signed it with --cacert FILE (PEM)"
    return head + ": the server's certificate must be fixed"


class RequestFailed(Exception):
    """A request to the server that got no usable answer (raised by ``OllamaClient._request``).

    Attributes:
        kind: The ``ErrorKind`` (``refused``, ``timeout``, ``connect``, ``tls``, ``auth``, ``http``,
            ``invalid_json``, ``other``).
        message: One line for the user, credentials scrubbed; server text in it is data (render it
            through ``kvtop.textsafe``).
    """

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind
        self.message = message
