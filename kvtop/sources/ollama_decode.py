"""Decoding the Ollama API's answers: ``/api/ps``, ``/api/show``, ``/api/tags`` JSON into the model's
snapshots (``kvtop.model.snapshots``), Go times, and server text made safe for one line.

Shapes follow ``api/types.go`` (docs/ollama-internals.md §1.1, §2.1); every field is optional on
the way in, because real servers differ by version. A valid JSON answer of another shape raises
:class:`ShapeError`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from types import MappingProxyType
from typing import Any


from kvtop.core.bounds import count_or_none
from kvtop.model.snapshots import ModelDetails, PsModel, ShowInfo, TagInfo


_RFC3339 = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(Z|z|[+-]\d{2}:?\d{2})?$")


MAX_MODEL_INFO_ARRAY = 65_536
"""``model_info`` arrays longer than this are dropped (kvtop reads per-layer arrays, a few hundred
long; the tokenizer's arrays are dropped by name already)."""


_BLOB_FROM = re.compile(r"(?m)^FROM\s+\S*?sha256[-:]([0-9a-f]{64})\s*$")
"""``FROM /…/blobs/sha256-<hex>`` in the Modelfile ``/api/show`` generates."""


class ShapeError(ValueError):
    """A response that is valid JSON but not the shape Ollama sends."""


def parse_go_time(text: Any) -> datetime | None:
    """Parse Go's RFC 3339 ``time.Time`` JSON (nanoseconds, ``Z`` or an offset).

    Years past 9999 (Go's "forever" keep-alive is about now + 292 years, still < 9999) and
    nanosecond fractions are handled; anything unparsable gives None.
    """
    if not isinstance(text, str):
        return None
    m = _RFC3339.match(text.strip())
    if not m:
        return None
    year, month, day, hour, minute, second, frac, zone = m.groups()
    try:
        micro = int((frac or "0")[:6].ljust(6, "0"))
        if zone is None or zone in ("Z", "z"):
            tz = timezone.utc
        else:
            sign = -1 if zone[0] == "-" else 1
            digits = zone[1:].replace(":", "")
            tz = timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:])))
        return datetime(int(year), int(month), int(day), int(hour), int(minute), int(second), micro, tzinfo=tz)
    except ValueError:
        return None


_int_or_none = count_or_none
"""A JSON integer that Go's int64 could have sent, else None: the one rule for sizes and counts
that the log parser applies too (``kvtop.core.bounds``)."""


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _str_or_none(value: Any) -> str | None:
    """A JSON string with control and bidi-override characters replaced by U+FFFD (server text
    is data: it must never reach a terminal as an escape sequence), else None."""
    return _CONTROL.sub("\ufffd", value) if isinstance(value, str) else None


def parse_details(obj: Any) -> ModelDetails:
    """Read a ``details`` object; a missing or malformed one gives empty details."""
    if not isinstance(obj, Mapping):
        return ModelDetails()
    families = obj.get("families")
    return ModelDetails(
        format=_str_or_none(obj.get("format")),
        family=_str_or_none(obj.get("family")),
        families=tuple(f for f in families if isinstance(f, str)) if isinstance(families, list) else (),
        parameter_size=_str_or_none(obj.get("parameter_size")),
        quantization_level=_str_or_none(obj.get("quantization_level")),
        parent_model=_str_or_none(obj.get("parent_model")),
    )


RUNNER_MAX_CHARS = 40
"""A runner name longer than this is cut (the names seen are ``llama.cpp`` and ``mlx``)."""


def parse_runner(value: Any) -> str | None:
    """The runner a ``/api/ps`` entry names (Ollama 0.40+: ``llama.cpp`` or ``mlx``), else None.

    A string is taken as sent (control characters replaced, cut at ``RUNNER_MAX_CHARS``); an
    object's ``name``, ``type`` or ``engine`` string is taken the same way, so a later richer
    shape still shows its name; anything else (absent before 0.40, null, a number) is None.
    The field's shape is not in the Ollama source this repo mirrors (v0.33.0-rc2): see
    docs/ollama-internals.md §7.2.
    """
    if isinstance(value, Mapping):
        value = next((value[k] for k in ("name", "type", "engine") if isinstance(value.get(k), str)), None)
    text = _str_or_none(value)
    if text is None or not text.strip():
        return None
    return text.strip()[:RUNNER_MAX_CHARS]


def parse_ps(obj: Any) -> tuple[PsModel, ...]:
    """Turn a ``GET /api/ps`` body into ``PsModel`` rows.

    Args:
        obj: The decoded JSON body.

    Returns:
        One ``PsModel`` per entry of ``models`` that has a name, in the server's order.

    Raises:
        ShapeError: The body is not an object with a ``models`` list (``null`` counts as empty:
            Go encodes an empty slice that way in some versions).
    """
    if not isinstance(obj, Mapping):
        raise ShapeError(f"expected a JSON object, got {type(obj).__name__}")
    models = obj.get("models")
    if models is None:
        return ()
    if not isinstance(models, list):
        raise ShapeError(f"'models' is {type(models).__name__}, expected a list")
    rows: list[PsModel] = []
    seen: set[tuple[str, str]] = set()
    for entry in models:
        if not isinstance(entry, Mapping):
            continue
        name = _str_or_none(entry.get("name")) or _str_or_none(entry.get("model"))
        if not name:
            continue
        raw_expires = _str_or_none(entry.get("expires_at"))
        digest = (_str_or_none(entry.get("digest")) or "").removeprefix("sha256:")
        if (name, digest) in seen:
            continue  # the same model listed twice: show it once
        seen.add((name, digest))
        rows.append(
            PsModel(
                name=name,
                model=_str_or_none(entry.get("model")) or name,
                digest=digest,
                size_bytes=_int_or_none(entry.get("size")),
                size_vram_bytes=_int_or_none(entry.get("size_vram")),
                context_length=_int_or_none(entry.get("context_length")) or None,
                expires_at=parse_go_time(raw_expires),
                expires_at_raw=raw_expires,
                details=parse_details(entry.get("details")),
                runner=parse_runner(entry.get("runner")),
            )
        )
    return tuple(rows)


def parse_show(obj: Any, *, digest: str, name: str) -> ShowInfo:
    """Turn a ``POST /api/show`` body into a ``ShowInfo`` (tokenizer arrays dropped).

    Raises:
        ShapeError: The body is not a JSON object.
    """
    if not isinstance(obj, Mapping):
        raise ShapeError(f"expected a JSON object, got {type(obj).__name__}")
    info = obj.get("model_info")
    model_info = (
        {k: v for k, v in info.items() if isinstance(k, str) and not k.startswith("tokenizer.") and _kept_info(v)}
        if isinstance(info, Mapping)
        else {}
    )
    caps = obj.get("capabilities")
    blob = _BLOB_FROM.search(_str_or_none(obj.get("modelfile")) or "")
    return ShowInfo(
        digest=digest,
        name=name,
        model_info=MappingProxyType(model_info),
        parameters=_str_or_none(obj.get("parameters")) or "",
        capabilities=tuple(c for c in caps if isinstance(c, str)) if isinstance(caps, list) else (),
        remote=bool(obj.get("remote_host") or obj.get("remote_model")),
        model_blob=f"sha256-{blob.group(1)}" if blob else None,
    )


def _kept_info(value: Any) -> bool:
    """A ``model_info`` value worth keeping: a scalar, or a flat array of scalars of at most
    ``MAX_MODEL_INFO_ARRAY`` (GGUF metadata holds nothing else; anything nested is not GGUF's)."""
    if isinstance(value, list):
        return len(value) <= MAX_MODEL_INFO_ARRAY and all(not isinstance(x, (list, dict)) for x in value)
    return not isinstance(value, dict)


def parse_tags(obj: Any) -> dict[str, TagInfo]:
    """Turn a ``GET /api/tags`` body into ``{digest: TagInfo}`` (entries without a digest skipped)."""
    if not isinstance(obj, Mapping):
        raise ShapeError(f"expected a JSON object, got {type(obj).__name__}")
    out: dict[str, TagInfo] = {}
    models = obj.get("models")
    if models is None:
        return out
    if not isinstance(models, list):
        raise ShapeError(f"'models' is {type(models).__name__}, expected a list")
    for entry in models:
        if not isinstance(entry, Mapping):
            continue
        digest = (_str_or_none(entry.get("digest")) or "").removeprefix("sha256:")
        name = _str_or_none(entry.get("name")) or _str_or_none(entry.get("model")) or ""
        if digest:
            out[digest] = TagInfo(name=name, digest=digest, size_bytes=_int_or_none(entry.get("size")))
    return out


def _one_line(text: str, limit: int = 160) -> str:
    """``text`` on one line, at most ``limit`` characters, control characters replaced (it is
    server text: it must never reach a terminal as an escape sequence)."""
    text = " ".join(_CONTROL.sub("\ufffd", text[: limit * 4]).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
