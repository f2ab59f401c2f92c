"""The stand-in's Ollama API answers: ``/api/ps``, ``/api/show`` and ``/api/tags`` bodies built from a
scenario step, in Ollama's real shapes (``docs/ollama-internals.md`` §1.1 and §2.1), and the Go time
and duration formats they use. The HTTP server (:mod:`kvtop.demo.standin_http`) sends them.

Standard library only.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any

from kvtop.demo.scenario import CatalogModel, LoadedModel, Scenario, Step, model_blob


MAX_DURATION_NS = 2**63 - 1
"""Go's ``time.Duration(math.MaxInt64)``: what an infinite keep-alive becomes (~292 years)."""

BUSY_ERROR = "server busy, please try again.  maximum pending requests exceeded"
"""Ollama's 503 message (``ErrMaxQueue``), used when a step sets ``status`` without ``error``."""

GARBAGE_BODY = b'{"models":[{"name":"qwen3:1.7b-q8_0","model":"qw'
"""What ``/api/ps`` answers in a ``garbage`` step: JSON cut off mid-string."""

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


# --------------------------------------------------------------------------------------------
# Time


def _local_tz() -> tzinfo:
    """Return the local time zone as a fixed offset (what Go's ``time.Local`` gives now)."""
    tz = datetime.now().astimezone().tzinfo
    return tz if tz is not None else timezone.utc


def format_go_time(unix_ns: int, tz: tzinfo | None = None) -> str:
    """Format a time the way Go's ``time.Time.MarshalJSON`` does (RFC 3339 with nanoseconds).

    Trailing zeros of the fraction are dropped (no fraction at all when it is zero), and the
    offset is ``Z`` for UTC and ``±hh:mm`` otherwise, e.g. ``2026-11-29T15:04:05.123456789Z``
    or ``2025-10-17T16:47:07.93355-07:00``.

    Args:
        unix_ns: Nanoseconds since the Unix epoch.
        tz: Time zone to print in; the local one when None.

    Returns:
        The timestamp text (without JSON quotes).
    """
    seconds, nanos = divmod(unix_ns, 1_000_000_000)
    moment = (_EPOCH + timedelta(seconds=seconds)).astimezone(tz or _local_tz())
    fraction = f"{nanos:09d}".rstrip("0")
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if fraction:
        text += "." + fraction
    offset = moment.utcoffset() or timedelta(0)
    if offset == timedelta(0):
        return text + "Z"
    total_min = int(offset.total_seconds()) // 60
    sign = "+" if total_min >= 0 else "-"
    hours, minutes = divmod(abs(total_min), 60)
    return f"{text}{sign}{hours:02d}:{minutes:02d}"


# --------------------------------------------------------------------------------------------
# Response bodies


def _normalise_name(name: str) -> str:
    """Turn a user-supplied model name into the catalog form (lower case, with a tag)."""
    name = name.strip().lower()
    for prefix in ("https://", "http://"):
        if name.startswith(prefix):
            name = name[len(prefix) :]
    for prefix in ("registry.ollama.ai/library/", "registry.ollama.ai/"):
        if name.startswith(prefix):
            name = name[len(prefix) :]
    if name.startswith("library/"):
        name = name[len("library/") :]
    if ":" not in name.rsplit("/", 1)[-1]:
        name += ":latest"
    return name


def ps_body(
    scenario: Scenario,
    step: Step,
    since_ns: int,
    tz: tzinfo | None = None,
    *,
    reloads: dict[str, tuple[int | None, int, int]] | None = None,
    expiry: dict[str, int | None] | None = None,
) -> dict[str, Any]:
    """Build the ``/api/ps`` answer for a step, in Ollama's field order and row order.

    Args:
        scenario: The scenario (for digests and details).
        step: The current step.
        since_ns: Wall time (ns) at which the step became current; ``expires_at`` counts
            from it.
        tz: Time zone for ``expires_at``; the local one when None.
        reloads: ``POST /api/generate`` reloads in this step: model -> (num_ctx, size, size_vram).
        expiry: ``POST /api/generate`` keep-alives in this step: model -> its new ``expires_at``
            (Unix ns), or None when ``keep_alive: 0`` unloaded it (the row is left out).

    Returns:
        ``{"models": [...]}``, longest remaining ``expires_at`` first.
    """
    rows: list[tuple[int, dict[str, Any]]] = []
    for row in step.loaded:
        model = scenario.models[row.model]
        expires_ns = _expires_ns(row, since_ns)
        if expiry is not None and row.model in expiry:
            kept = expiry[row.model]
            if kept is None:
                continue  # unloaded (keep_alive 0)
            expires_ns = kept
        context, size, size_vram = (reloads or {}).get(row.model, (row.context_length, row.size, row.size_vram))
        entry: dict[str, Any] = {
            "name": model.name,
            "model": model.name,
            "size": size,
            "digest": model.digest,
            "details": model.details.to_json() | {"parent_model": ""},
            "expires_at": format_go_time(expires_ns, tz),
            "size_vram": size_vram,
        }
        if context is not None:
            entry["context_length"] = context
        rows.append((expires_ns // 1_000_000_000, entry))
    rows.sort(key=lambda item: -item[0])  # stable, like slices.SortStableFunc on Unix()
    return {"models": [entry for _, entry in rows]}


_GO_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_GO_DURATION_NS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "μs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}


def _keep_alive_ns(value: Any) -> int | None:
    """A request's ``keep_alive`` in ns as ``api.Duration.UnmarshalJSON`` reads it: a number is
    seconds, a string a Go duration (``"5m"``, ``"1h30m"``, ``"-1"`` is not one: a bare number
    string is rejected); any negative value means forever (returned as -1). None: invalid."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return -1 if value < 0 else int(value * 1_000_000_000)
    if not isinstance(value, str):
        return None
    text, sign = value.strip(), 1
    if text[:1] in "+-" and text:
        sign, text = (-1 if text[0] == "-" else 1), text[1:]
    if text == "0":
        return 0
    pos, total = 0, 0.0
    while pos < len(text):
        m = _GO_DURATION_PART.match(text, pos)
        if m is None:
            return None
        total += float(m.group(1)) * _GO_DURATION_NS[m.group(2)]
        pos = m.end()
    if pos == 0:
        return None
    return -1 if sign < 0 else int(total)


def _expires_ns(row: LoadedModel, since_ns: int) -> int:
    if row.expires_in_s is None:
        return since_ns + MAX_DURATION_NS
    return since_ns + int(row.expires_in_s * 1e9)


def _modelfile(model: CatalogModel) -> str:
    if model.modelfile:
        return model.modelfile
    lines = [
        '# Modelfile generated by "ollama show"',
        "# To build a new Modelfile based on this, replace FROM with:",
        f"# FROM {model.name}",
        "",
        f"FROM /usr/share/ollama/.ollama/models/blobs/{model_blob(model)}",
    ]
    if model.template:
        lines.append(f'TEMPLATE """{model.template}"""')
    if model.system:
        lines.append(f'SYSTEM """{model.system}"""')
    for line in model.parameters.splitlines():
        key, _, value = line.partition(" ")
        lines.append(f"PARAMETER {key} {value.strip()}")
    if model.license:
        lines.append(f'LICENSE """{model.license}"""')
    return "\n".join(lines) + "\n"


def show_body(model: CatalogModel, verbose: bool) -> dict[str, Any]:
    """Build the ``/api/show`` answer.

    Without ``verbose`` every non-empty array in ``model_info`` is JSON null, as Ollama has
    done since v0.6.7 (§2.2); scalars are unchanged.

    Args:
        model: The catalog model.
        verbose: The request's ``verbose`` flag.

    Returns:
        The JSON-ready answer.
    """
    info: dict[str, Any] = {}
    for key, value in model.model_info.items():
        if isinstance(value, list) and value and not verbose:
            info[key] = None
        else:
            info[key] = _thaw(value)
    body: dict[str, Any] = {
        "license": model.license,
        "modelfile": _modelfile(model),
        "parameters": model.parameters,
        "template": model.template,
    }
    if model.system:
        body["system"] = model.system
    body["details"] = model.details.to_json()
    body["model_info"] = info
    if model.tensors is not None:
        body["tensors"] = [_thaw(t) for t in model.tensors]
    body["capabilities"] = list(model.capabilities)
    body["modified_at"] = model.modified_at
    return body


def _thaw(value: Any) -> Any:
    if isinstance(value, list):
        return [_thaw(v) for v in value]
    if hasattr(value, "items"):
        return {k: _thaw(v) for k, v in value.items()}
    return value


def tags_body(scenario: Scenario) -> dict[str, Any]:
    """Build the ``/api/tags`` answer: every catalog model, newest ``modified_at`` first.

    Args:
        scenario: The scenario.

    Returns:
        ``{"models": [{name, model, modified_at, size, digest, details}, ...]}``.
    """
    models = sorted(scenario.models.values(), key=lambda m: _rfc3339_sort_key(m.modified_at), reverse=True)
    return {
        "models": [
            {
                "name": m.name,
                "model": m.name,
                "modified_at": m.modified_at,
                "size": m.file_size,
                "digest": m.digest,
                "details": m.details.to_json(),
            }
            for m in models
            if m.file_size is not None
        ]
    }


_RFC3339_PARTS = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|([+-])(\d{2}):(\d{2}))")


def _rfc3339_sort_key(text: str) -> float:
    """Seconds since the epoch for an RFC 3339 time (nanoseconds allowed); 0.0 if unparsable."""
    match = _RFC3339_PARTS.fullmatch(text)
    if not match:
        return 0.0
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    fraction = float("0." + match.group(7)) if match.group(7) else 0.0
    offset = timedelta(0)
    if match.group(8) != "Z":
        offset = timedelta(hours=int(match.group(10)), minutes=int(match.group(11)))
        if match.group(9) == "-":
            offset = -offset
    moment = datetime(year, month, day, hour, minute, second, tzinfo=timezone(offset))
    return moment.timestamp() + fraction
