"""The bounds on what an Ollama answer may cost: body size per path, JSON values per answer, and the
streaming reader that decodes ``Content-Encoding`` without ever holding more than the limit.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import httpx

from kvtop.sources.ollama_decode import _one_line

LARGE_BODY_BYTES = 256 * 1024
"""Bodies larger than this are decoded in a thread so the UI never stalls."""

MiB = 1024 * 1024

BODY_LIMIT_BYTES: Mapping[str, int] = MappingProxyType(
    {"/api/ps": 16 * MiB, "/api/tags": 16 * MiB, "/api/show": 24 * MiB, "/api/version": 1 * MiB}
)
"""Most bytes of a successful answer kvtop reads per endpoint, counted after decompression.

Generous on purpose: an ``/api/ps`` or ``/api/tags`` entry is about 0.5 KB, so 16 MiB is some
30,000 models; a verbose ``/api/show`` carries the tokenizer (a 262k-token vocabulary with its
scores and types is about 10 MB), so it gets 24 MiB (six are read at once: ``SHOW_CONCURRENCY``). A larger answer is not read further: the
request fails with "response too large" and the last good data stays. Other paths get
``DEFAULT_BODY_LIMIT_BYTES``."""

DEFAULT_BODY_LIMIT_BYTES = 16 * MiB
"""Body limit of a path missing from ``BODY_LIMIT_BYTES``."""

JSON_VALUE_LIMIT: Mapping[str, int] = MappingProxyType(
    {"/api/ps": 500_000, "/api/tags": 500_000, "/api/show": 2_000_000}
)
"""Most JSON values (an upper bound: ``,``, ``{`` and ``[`` counted, ``json_values_upper_bound``) an
answer may hold before it is decoded. A byte cap alone does not bound memory: 16 MiB of ``{},``
decode to 5 million dicts (hundreds of MB). A real verbose ``/api/show`` of a 262k-token model holds
about 800k values (tokens, scores, types, merges); an ``/api/ps`` entry about 20."""

DEFAULT_JSON_VALUE_LIMIT = 500_000
"""Value limit of a path missing from ``JSON_VALUE_LIMIT``."""


def json_values_upper_bound(content: bytes) -> int:
    """An upper bound of the values a JSON text holds, counted at C speed before it is decoded:
    every value but the first follows a ``,`` or opens a container (separators inside strings
    are counted too, so the bound is conservative)."""
    return content.count(b",") + content.count(b"{") + content.count(b"[") + 1


ERROR_BODY_LIMIT_BYTES = 64 * 1024
"""Most bytes of an HTTP error (>= 400) body read to find its message; the rest is not read."""


class _TooLarge(Exception):
    """A body over its limit: ``size_bytes`` declared by Content-Length, or None when counted."""

    def __init__(self, size_bytes: int | None) -> None:
        super().__init__(size_bytes)
        self.size_bytes = size_bytes


class _Undecodable(Exception):
    """A body kvtop cannot decode: an encoding it did not ask for, or a corrupt compressed stream."""


class _BoundedDecoder:
    """Decodes a body's ``Content-Encoding`` (identity, gzip, deflate) and never yields more than
    asked: zlib's ``max_length`` stops a gzip bomb at the limit. (httpx's own decoder inflates
    each 64 KiB network read whole: one read of a bomb becomes a 66 MB chunk before any count.)

    Raises:
        _Undecodable: An encoding kvtop did not ask for (br, zstd, stacked encodings).
    """

    def __init__(self, encoding: str) -> None:
        enc = encoding.strip().lower()
        self._zlib: Any = None
        self._deflate = False
        if enc in ("gzip", "x-gzip"):
            self._zlib = zlib.decompressobj(zlib.MAX_WBITS | 16)
        elif enc == "deflate":
            self._zlib = zlib.decompressobj()
            self._deflate = True  # zlib-wrapped by the RFC, raw deflate by some servers
        elif enc not in ("", "identity"):
            raise _Undecodable(f"unsupported Content-Encoding {_one_line(enc, 40)!r}")
        self._first = True

    def decode(self, data: bytes, room: int) -> bytes:
        """At most ``room`` decoded bytes of ``data`` and of the input held back by earlier calls.

        Raises:
            zlib.error: A corrupt compressed stream.
        """
        if room <= 0:
            return b""  # zlib reads max_length 0 as "no limit"
        if self._zlib is None:
            return data[:room]
        data = self._zlib.unconsumed_tail + data  # what an earlier call left when its room was full
        if self._first and self._deflate:
            try:
                out = self._zlib.decompress(data, room)
            except zlib.error:
                self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)
                out = self._zlib.decompress(data, room)
        else:
            out = self._zlib.decompress(data, room)
        self._first = False
        chunks = [out]
        got = len(out)
        while self._zlib.unconsumed_tail and got < room:
            more = self._zlib.decompress(self._zlib.unconsumed_tail, room - got)
            if not more:
                break
            chunks.append(more)
            got += len(more)
        return b"".join(chunks)


async def _read_capped(resp: httpx.Response, limit_bytes: int, *, truncate: bool) -> bytes:
    """Read ``resp``'s body as a stream, decoded, up to ``limit_bytes``.

    Raises:
        _TooLarge: More than ``limit_bytes`` decoded bytes (unless ``truncate``: then the first
            ``limit_bytes`` are returned and the rest is not read).
        _Undecodable: An unsupported Content-Encoding, or a corrupt compressed body.
    """
    if resp.is_stream_consumed:  # built whole in memory (httpx.MockTransport): already decoded
        if len(resp.content) > limit_bytes and not truncate:
            raise _TooLarge(None)
        return resp.content[:limit_bytes]
    decoder = _BoundedDecoder(resp.headers.get("content-encoding", ""))
    buf = bytearray()
    async for raw in resp.aiter_raw():
        try:
            buf += decoder.decode(raw, limit_bytes + 1 - len(buf))
        except zlib.error as exc:
            raise _Undecodable(str(exc)) from None
        if len(buf) > limit_bytes:
            if truncate:
                return bytes(buf[:limit_bytes])
            raise _TooLarge(None)
    return bytes(buf)
