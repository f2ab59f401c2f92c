"""Secrets kept out of everything kvtop writes: one set of masking rules for every face.

A secret reaches kvtop three ways: the user gives it (a ``--host`` password, a header value, an
API key: :class:`~kvtop.sources.auth.ServerAccess` holds them), the machine shows it (a GPU
process's command line ``--api-key SECRET``, the service environment's ``OLLAMA_PASS``), or a
server echoes it (a model name holding ``user:pass@`` or ``?token=``). Whatever leaves the
process — ``--once``/``--check`` text, ``--json``/``--stream``, ``/metrics`` labels, recordings,
stderr messages — passes :func:`scrub_text` (free text) or :func:`mask_argv` (a command line)
first; ``textsafe.safe_block`` / ``textsafe.safe_json`` call them at the boundary.

The rules:

* **Known secrets**: every secret of the accesses this process was given
  (:func:`register_secrets`, called by ``config.server_accesses``) is replaced by ``***``
  wherever it appears.
* **URL userinfo**: ``scheme://user:pass@host`` becomes ``scheme://host`` (a password holding an
  unencoded ``/``, ``?`` or ``#`` included: everything up to the ``@`` after a ``user:``).
* **Query parameters** whose name says secret (``?token=``, ``&api_key=``, ``?sig=`` …): the value
  becomes ``***``.
* **Authorization values** (``Authorization: Bearer abc``, ``Bearer abc``, ``Basic abc``): masked.
* In a command line only (:func:`mask_argv`): the value of a flag whose name says secret
  (``--api-key SECRET``, ``--password=…``, ``-hf-token X``) and of an assignment
  ``TOKEN=… cmd`` whose name says secret.

A name "says secret" when it holds ``KEY``, ``TOKEN``, ``SECRET``, ``PASS``, ``AUTH``,
``CREDENTIAL``, ``COOKIE`` or ``SIGNATURE`` (any case): :func:`is_secret_name`. Masking a harmless
value that matches is accepted; letting a secret through is not.

Pure string functions, no I/O; never raises.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

__all__ = [
    "MASK",
    "drop_userinfo",
    "is_secret_name",
    "json_text_ok",
    "known_secrets",
    "mask_argv",
    "mask_query",
    "on_register",
    "register_secrets",
    "scrub_json_text",
    "scrub_obj",
    "scrub_text",
]

MASK = "***"
"""What a masked value becomes."""

_SECRET_WORDS = r"key|token|secret|pass|auth|credential|cookie|signature"
_SECRET_NAME = re.compile(_SECRET_WORDS, re.IGNORECASE)

_USERINFO_TAIL = re.compile(
    r"(?:(?:[^\s/?#@'\"<>]*@)+"  # userinfo without a delimiter (RFC 3986); an unencoded '@' in it too
    r"|[^\s:/?#@'\"<>]*:(?!\d*[/?#])[^\s'\"<>]*@)"  # user:password holding '/', '?' or '#' (not host:port/)
)
"""The userinfo after a ``scheme://`` in free text (up to its ``@``)."""

_SCHEME_END = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")
"""Characters a URL scheme ends with (the one before ``://``)."""

_QUERY = re.compile(r"(?i)([?&;][\w.-]*(?:" + _SECRET_WORDS + r"|sig|pw|pwd)[\w.-]*=)[^&;#\s'\"<>]+")
"""A query parameter whose name says secret, and its value."""

_AUTH_VALUE = re.compile(
    r"(?i)\b((?:proxy-)?authorization\s*[:=]\s*(?:(?:bearer|basic|token|digest)\s+)?|"
    r"bearer\s+)([A-Za-z0-9._~+/=-]{8,})"
)
"""An ``Authorization`` header's value (8 characters or more), or ``Bearer <token>`` anywhere."""

_FLAG = re.compile(r"(--?[A-Za-z0-9][\w.-]*)(=|\s+)(?!-)(\S+)")
"""``--flag=value`` or ``--flag value`` inside one string (a process title rewritten as one)."""

_ASSIGN = re.compile(r"(?<![\w-])([A-Za-z_][A-Za-z0-9_.-]*)=(\S*)")
"""``NAME=value`` inside one string of a command line."""

_lock = threading.Lock()
_known: tuple[str, ...] = ()

MIN_SECRET_CHARS = 3
"""A known secret shorter than this is not searched for (it would mask common text)."""


def is_secret_name(name: str) -> bool:
    """Whether a variable, flag, header or parameter name says its value is a secret
    (``OLLAMA_PASS``, ``--api-key``, ``HF_TOKEN``, ``X-Auth``, ``access_token`` …)."""
    return bool(_SECRET_NAME.search(name))


_JSON_STRUCTURE = frozenset('0123456789.eE+-truefalsn:,[]{} \n\t"\\')
"""Characters JSON text has outside its strings (numbers, literals, punctuation, white space)."""

_text_ok = True


def register_secrets(secrets: Iterable[str]) -> None:
    """Add secrets this process was given (passwords, tokens, header values) to those every
    :func:`scrub_text` replaces; values shorter than :data:`MIN_SECRET_CHARS` are ignored."""
    global _known, _text_ok
    with _lock:
        merged = set(_known) | {s for s in secrets if isinstance(s, str) and len(s) >= MIN_SECRET_CHARS}
        _known = tuple(sorted(merged, key=len, reverse=True))
        _text_ok = not any(set(s) <= _JSON_STRUCTURE for s in _known)
    for clear in _on_register:
        clear()


_on_register: list[Callable[[], None]] = []
"""Called after :func:`register_secrets` changed the known secrets: caches of scrubbed text
(``textsafe``'s) are cleared, so none keeps an unmasked copy. (The exporter's cached label values
are first computed after ``config.server_accesses`` registered its secrets.)"""


def on_register(clear: Callable[[], None]) -> None:
    """Have ``clear`` called whenever the known secrets change (a cache of :func:`scrub_text` results)."""
    _on_register.append(clear)


def known_secrets() -> tuple[str, ...]:
    """The secrets :func:`register_secrets` was given, longest first."""
    return _known


def scrub_text(text: str, secrets: Sequence[str] = ()) -> str:
    """``text`` with every secret masked: the known ones (:func:`register_secrets`) and
    ``secrets``, URL userinfo, secret query parameters and ``Authorization`` values (the module's
    rules). Each rule first looks for what it needs with plain ``in`` (``://`` and ``@``, ``=``,
    ``earer``/``uthorization``), so text without any is returned at the cost of those look-ups.

    Args:
        text: Free text: a message, a model name, a log line, a label value.
        secrets: More secrets to replace (an access's own), longest first preferred.

    Returns:
        The masked text (``***`` in place of each secret; userinfo dropped).
    """
    if not isinstance(text, str) or not text:
        return text
    for secret in (*secrets, *_known):
        if secret and secret in text:
            text = text.replace(secret, MASK)
    text = drop_userinfo(text)
    if "=" in text:
        text = _QUERY.sub(lambda m: m.group(1) + MASK, text)
    if "earer" in text or "EARER" in text or "uthorization" in text or "UTHORIZATION" in text:
        text = _AUTH_VALUE.sub(lambda m: m.group(1) + MASK, text)
    return text


def json_text_ok() -> bool:
    """Whether :func:`scrub_json_text` may be used: no known secret could also be JSON outside a
    string (a password ``2048`` or ``true`` would be replaced in a number or a literal). When
    False, scrub the object instead (:func:`scrub_obj`)."""
    return _text_ok


def scrub_json_text(text: str) -> str:
    """A serialized JSON document (``json.dumps``) with :func:`scrub_text`'s rules applied to its
    text at once: the known secrets in their JSON-escaped form too; the generic rules' patterns
    never cross a ``"``, so a match stays inside one JSON string. What a recording pays per record
    (one pass over one line, not one call per string: ``benchmarks/json_output_cost.py``).

    Returns:
        The text, still valid JSON (every replacement is plain ASCII inside a string) as long as
        :func:`json_text_ok`.
    """
    escaped = [json.dumps(s, ensure_ascii=False)[1:-1] for s in _known]
    return scrub_text(text, [e for e, s in zip(escaped, _known) if e != s])


def scrub_obj(obj: Any) -> Any:
    """``obj`` (a JSON-shaped value: dicts, lists, strings, numbers) with :func:`scrub_text`
    applied to every string, values and keys, at any depth (a copy; tuples become lists).
    For recordings, whose strings come from servers and logs."""
    if isinstance(obj, str):
        return scrub_text(obj)
    if isinstance(obj, dict):
        return {(scrub_text(k) if isinstance(k, str) else k): scrub_obj(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [scrub_obj(v) for v in obj]
    return obj


def drop_userinfo(text: str) -> str:
    """``text`` with the userinfo of every URL in it dropped (``https://alice:pw@gpu-box/`` ->
    ``https://gpu-box/``; a password with an unencoded ``/``, ``?`` or ``#`` included)."""
    if "@" not in text or "://" not in text:
        return text
    pieces: list[str] = []
    last = 0
    at = text.find("://")
    while at >= 0:
        start = at + 3
        if at > 0 and text[at - 1] in _SCHEME_END:
            m = _USERINFO_TAIL.match(text, start)
            if m is not None:
                pieces.append(text[last:start])
                last = m.end()
        at = text.find("://", start)
    if not pieces:
        return text
    pieces.append(text[last:])
    return "".join(pieces)


def mask_query(text: str, mask: str = MASK) -> str:
    """``text`` with the value of every query parameter whose name says secret (``?token=``,
    ``&api_key=``, ``?sig=`` …) replaced by ``mask``; the rest unchanged."""
    return _QUERY.sub(lambda m: m.group(1) + mask, text) if "=" in text else text


def _mask_word(word: str) -> str:
    """One argv word: ``--secret-flag=value`` and ``SECRET_NAME=value`` masked, then :func:`scrub_text`."""
    if word.startswith("-") and "=" in word:
        name, _, value = word.partition("=")
        if is_secret_name(name) and value:
            return f"{name}={MASK}"
    elif "=" in word and not word.startswith("-"):
        m = _ASSIGN.fullmatch(word)
        if m and is_secret_name(m.group(1)) and m.group(2):
            return f"{m.group(1)}={MASK}"
    if " " in word:  # a title rewritten into one string: "llama-server --api-key X --port 1"
        word = _FLAG.sub(lambda m: m.group(1) + m.group(2) + MASK if is_secret_name(m.group(1)) else m.group(0), word)
        word = _ASSIGN.sub(
            lambda m: f"{m.group(1)}={MASK}" if is_secret_name(m.group(1)) and m.group(2) else m.group(0), word
        )
    return scrub_text(word)


def mask_argv(argv: Sequence[str] | None) -> tuple[str, ...] | None:
    """A process's command line with every secret masked, for anything shown or written.

    The value of a flag whose name says secret (:func:`is_secret_name`: ``--api-key X``,
    ``--api-key=X``, ``--password X``, ``-hf-token X``; a following word that starts with ``-``
    is the next flag and is kept), of an assignment ``TOKEN=X`` (``env HF_TOKEN=X cmd``), and
    everything :func:`scrub_text` masks (URL userinfo, ``?token=``, known secrets) becomes ``***``.

    Args:
        argv: The command line as the process table gives it; None when it could not be read.

    Returns:
        The masked words (as many as given), or None for None.
    """
    if argv is None:
        return None
    out: list[str] = []
    mask_next = False
    for word in argv:
        word = str(word)
        if mask_next and word and not word.startswith("-"):
            out.append(MASK)
            mask_next = False
            continue
        mask_next = word.startswith("-") and "=" not in word and is_secret_name(word)
        out.append(_mask_word(word))
    return tuple(out)
