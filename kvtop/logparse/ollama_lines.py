"""Ollama's own lines: slog text records, Go standard-logger records and gin access lines.

These are printed by the server (all eras) and by the Go runners (B1/B2). Formats:

- slog text (v0.1.32+, docs/ollama-internals.md §4.0): ``time=… level=INFO source=server.go:130 msg=… k=v``.
  ``time=`` may be missing (``docker compose logs | grep``, corpus 032) and may have no zone
  (corpus 030).
- Go's standard logger (§3.6; v0.1.x–v0.6.8 server config, 2023 runners): ``2024/06/02
  18:43:45 routes.go:1007: INFO server config env="map[…]"`` (corpus 018, 019, 033, 038).
- gin (§4.9): ``[GIN] 2024/07/10 - 17:33:55 | 200 | 22.25s | 127.0.0.1 | POST "/api/generate"``.

Each message is dispatched on its ``msg`` text through a dict, so a line that no event
models costs one lookup. The handlers of the server's own lines (config, listening, truncation,
context clamp, gin) are here; those of the scheduler and load lines are in ``ollama_load_lines.py``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime

from kvtop.logparse.events import (
    ContextClamped,
    ContextOverflow,
    GinRequest,
    LogEvent,
    ServerConfig,
    ServerListening,
    Truncation,
    UnknownWarning,
)
from kvtop.logparse.ollama_load_lines import (
    decision,
    device_memory,
    estimate,
    eviction,
    fa_decision,
    fa_forced_off,
    kv_fallback,
    load_failed,
    load_request,
    offloaded,
    oom,
    ready,
    retry_evict,
    spawn,
    unload,
)
from kvtop.logparse.values import go_duration_s, quoted_end, quoted_value, slog_get, to_count, unescape
from kvtop.logparse.wrappers import go_log_time, parse_iso, sanitize, strip_ansi

Handler = Callable[[str, str, str, int, "datetime | None", str], "list[LogEvent] | None"]
"""``(msg, rest, level, line_no, time, raw) -> events``; None means "not this grammar after all"."""

_GOLOG_RE = re.compile(
    r"(\d{4}/\d\d/\d\d) (\d\d:\d\d:\d\d)(?:\.\d+)? (?:([\w.-]+\.go:\d+): )?(?:(INFO|WARN|WARNING|ERROR|DEBUG) )?(.*)"
)
_GOLOG_SPLIT_RE = re.compile(r"\s(?=[\w.]+=)")
_GIN_RE = re.compile(
    r"\[GIN\] (\d{4}/\d\d/\d\d) - (\d\d:\d\d:\d\d) \|\s*(\d{3})\s*\|\s*(\S+)\s*\|\s*(\S*)\s*\|\s*([A-Z]+)\s+\"(.*)\""
)
_LISTEN_RE = re.compile(r"Listening on (\S+)(?: \(version ([^)]*)\))?")
_VERSION_RE = re.compile(r"\(version ([^)]*)\)")


# --------------------------------------------------------------------------------------------
# Handlers, one per message (or message family): the server, config and request lines


def _server_config(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
    """§3.6: ``env="map[K:V K:[a b] …]"``, keys sorted, values unquoted, lists keep their brackets."""
    i = rest.find("env=")
    if i < 0:
        return None
    if rest[i + 4 : i + 5] == '"':
        value, closed = quoted_value(rest, i + 4)
    else:
        value, closed = rest[i + 4 :], True
    env, complete = parse_env_map(value)
    return [ServerConfig(n, t, raw, env, complete and closed)]


def parse_env_map(text: str) -> tuple[dict[str, str], bool]:
    """The Go map ``map[K:V K:[a b] …]`` of the server config line (§3.6).

    A value runs from ``KEY:`` to the next `` KEY:``; a value starting with ``[`` runs to its
    closing ``]`` (lists contain spaces and colons, ``app://*``). A hard wrap glued back
    without a space (``…:[ollama.com]OLLAMA_SCHED_SPREAD:false``, corpus 021) is read as two
    keys. Returns the map and whether its closing ``]`` was seen; when it was not, the last
    key (possibly cut) is dropped.
    """
    text = text.removeprefix("map[")
    complete = text.endswith("]")
    end = len(text) - 1 if complete else len(text)
    items = _ENV_ITEM_RE.findall(text, 0, end)
    if "  " in text or text[end - 1 : end] == " ":
        out = {k: v.rstrip(" ") for k, v in items}
    else:  # a value can end in spaces only before a run of two or more, or at the end
        out = dict(items)
    if not complete and out:
        del out[next(reversed(out))]
    return out, complete


_ENV_ITEM_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*):(\[[^\]]*\]|[^ ]*(?: +(?![A-Za-z_][A-Za-z0-9_]*:)[^ ]*)*) *")
"""``KEY:value``: a bracketed list, or text up to the spaces before the next ``KEY:`` (unrolled so that runs
of non-spaces are matched in one step: the same matches as ``(?:[^ ]| +(?!KEY:))*``)."""


def _listening(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
    """§4.1: ``Listening on 127.0.0.1:11434 (version 0.33.0)``."""
    m = _LISTEN_RE.match(msg)
    if m is None:
        return None
    version = m.group(2)
    if version is None:
        vm = _VERSION_RE.search(rest)
        version = vm.group(1) if vm else None
    return [ServerListening(n, t, raw, m.group(1), version)]


def _truncation(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
    """§4.7: ``truncating input prompt limit=… prompt=… keep=… new=…`` (v0.4.0: ``numKeep``)."""
    keep = slog_get(rest, "keep")
    if keep is None:
        keep = slog_get(rest, "numKeep")
    return [
        Truncation(
            n,
            t,
            raw,
            to_count(slog_get(rest, "limit")),
            to_count(slog_get(rest, "prompt")),
            to_count(keep),
            to_count(slog_get(rest, "new")),
        )
    ]


def _messages_truncated(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
    """§4.7: DEBUG ``truncating input messages which exceed context length truncated=N`` (N messages kept)."""
    return [ContextOverflow(n, t, raw, "messages", None, to_count(slog_get(rest, "truncated")))]


def _clamped(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
    """§3.4, §4.4: ``requested context size too large for model num_ctx=… n_ctx_train=…`` (v0.15.5+)."""
    return [ContextClamped(n, t, raw, to_count(slog_get(rest, "num_ctx")), to_count(slog_get(rest, "n_ctx_train")))]


_PROMPT_PATHS = ("/api/chat", "/api/generate", "/v1/")
"""Paths whose HTTP 400 counts as a prompt over the context (``ContextOverflow`` ``http_400``, §4.7)."""


def _gin(body: str, n: int, raw: str) -> list[LogEvent]:
    """§4.9 gin access line (colours removed; latency as a Go duration)."""
    m = _GIN_RE.match(strip_ansi(body) if "\x1b" in body else body)
    if m is None:
        return []
    date, hms, status, latency, client, method, path = m.groups()
    when = go_log_time(date, hms)
    code = int(status)
    gin = GinRequest(n, when, raw, code, go_duration_s(latency), method, path, client)
    if code == 400 and path.startswith(_PROMPT_PATHS):
        return [gin, ContextOverflow(n, when, raw, "http_400", path.partition("?")[0])]
    return [gin]


EXACT: dict[str, Handler] = {
    "server config": _server_config,
    "starting llama server": spawn,
    "starting runner": spawn,
    "starting llama-server": spawn,
    "starting llama runner": spawn,
    "starting mlx runner subprocess": spawn,
    "load": load_request,
    "offload": estimate,
    "model weights": device_memory,
    "kv cache": device_memory,
    "compute graph": device_memory,
    "loading first model": decision,
    "loading model": decision,
    "loading model via llama-server": decision,
    "finished setting up runner": ready,
    "enabling flash attention": fa_decision,
    "model wants flash attention": fa_decision,
    "kv cache type not supported by model": kv_fallback,
    "quantized kv cache requested but flash attention disabled": kv_fallback,
    "OLLAMA_FLASH_ATTENTION must be enabled to use a quantized OLLAMA_KV_CACHE_TYPE": kv_fallback,
    "unsupported OLLAMA_KV_CACHE_TYPE": kv_fallback,
    "truncating input prompt": _truncation,
    "truncating input messages which exceed context length": _messages_truncated,
    "requested context size too large for model": _clamped,
    "changing loaded model": unload,
    "gpu VRAM usage didn't recover within timeout": unload,
    "timer expired, expiring to unload": unload,
    "runner expired event received": unload,
    "got lock to unload expired event": unload,
    "sending an unloaded event": unload,
    "stopping llama-server": unload,
    "runner terminated and removed from list, blocking for VRAM recovery": unload,
    "max runners achieved, unloading one to make room": eviction,
    "found an idle runner to unload": eviction,
    "resetting model to expire immediately to make room": eviction,
    "waiting for pending requests to complete and unload to occur": eviction,
    "evicting all other loaded models for OOM retry": eviction,
    "model request too large for system": oom,
    "model is too large for system memory": oom,
    "runtime OOM detected; expiring loaded models to clear memory before next request": oom,
    "error starting llama server": load_failed,
    "error loading llama server": load_failed,
    "Load failed": load_failed,
    "failed to create server": load_failed,
    "llama-server terminated": load_failed,
    "memory layout cannot be allocated": load_failed,
    "failed to commit memory for model": load_failed,
    "llama-server startup failed with projector GPU offload; retrying with projector CPU offload": load_failed,
    "llama-server load failed; evicting all other models and retrying once": retry_evict,
}
"""Handlers by exact ``msg``."""

PREFIXED: tuple[tuple[str, Handler], ...] = (
    ("Listening on ", _listening),
    ("offload to ", estimate),
    ("offloaded ", offloaded),
    ("llama runner started in ", ready),
    ("llama-server started in ", ready),
    ("new model will fit in available VRAM", decision),
    ("model requires more ", eviction),
    ("llama-server model predicted to exceed available memory", eviction),
    ("flash attention enabled but not supported by ", fa_forced_off),
    ("disabling flash attention", fa_forced_off),
    ("model only supports non-quantized cache types", kv_fallback),
)
"""Handlers by ``msg`` prefix (messages with numbers or names inside)."""

_PREFIXES = tuple(p for p, _ in PREFIXED)


def _handler(msg: str) -> Handler | None:
    """The handler for ``msg``; None when no event models it (WARN/ERROR then fall back to UnknownWarning)."""
    handler = EXACT.get(msg)
    if handler is None and msg.startswith(_PREFIXES):
        for prefix, h in PREFIXED:
            if msg.startswith(prefix):
                return h
    return handler


def _dispatch(
    handler: Handler | None, msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str, src: str | None
) -> list[LogEvent]:
    if handler is not None:
        events = handler(msg, rest, level, n, t, raw)
        if events is not None:
            return events
    if level == "WARN" or level == "ERROR" or level == "WARNING":
        return [UnknownWarning(n, t, raw, "WARN" if level == "WARNING" else level, msg, src)]
    return []


_WARN_LEVELS = frozenset(("WARN", "ERROR", "WARNING"))
_SLOG_HEAD_RE = re.compile(
    r'(?:time=([^ =]*+) )?level=([^ =]*+) (?:source=([^ =]*+) )?msg=(?:"([^"]*+)"(?<!\\")|(?!")([^ ]*+))'
)
"""The usual head of a slog record, read as :func:`parse_slog`'s general path reads it: the values before
``msg=`` hold no ``=`` (so this ``msg=`` is the first one), and a quoted message ends at the next quote,
which has no backslash before it (the general path then takes the text between the quotes as it is)."""


def parse_slog(body: str, n: int, text: str, fallback_time: Callable[[], datetime | None]) -> list[LogEvent]:
    """One slog text record (``time=… level=… source=… msg=… k=v…``).

    Args:
        body: The record without collector prefixes.
        n: Line number of the record.
        text: The whole logical line (becomes ``raw``).
        fallback_time: The wrapper's time, for records without ``time=``.
    """
    m = _SLOG_HEAD_RE.match(body)
    if m is not None:  # fast path: the usual head "time=… level=… source=… msg=…", read as below
        stamp, level, src, msg, bare = m.groups()
        if msg is None:
            msg = bare
        rest = body[m.end() :]
        handler = EXACT.get(msg)
        if handler is None and msg.startswith(_PREFIXES):
            handler = _handler(msg)
        if handler is None and level not in _WARN_LEVELS:
            return []
        t = parse_iso(stamp) if stamp is not None else fallback_time()
        raw = text if text.isprintable() else sanitize(text)
        if handler is not None:
            events = handler(msg, rest, "", n, t, raw)
            if events is not None:
                return events
        return _dispatch(None, msg, rest, level, n, t, raw, src)
    k = body.find("msg=")
    if k < 0:
        return []
    if body[k + 4 : k + 5] == '"':
        q = body.find('"', k + 5)
        if q > 0 and body[q - 1] != "\\":
            msg, rest = body[k + 5 : q], body[q + 1 :]
        else:
            e = quoted_end(body, k + 4)
            if e < 0:
                msg = unescape(body[k + 5 :])
                rest = ""
            else:
                msg = unescape(body[k + 5 : e - 1])
                rest = body[e:]
    else:
        e = body.find(" ", k + 4)
        if e < 0:
            msg, rest = body[k + 4 :], ""
        else:
            msg, rest = body[k + 4 : e], body[e:]
    handler = EXACT.get(msg)
    if handler is None and msg.startswith(_PREFIXES):
        handler = _handler(msg)
    if handler is None:
        level = _level(body, k)
        if level not in _WARN_LEVELS:
            return []
    if body.startswith("time="):
        te = body.find(" ")
        t = parse_iso(body[5:te] if te > 0 else body[5:])
    else:
        t = fallback_time()
    raw = sanitize(text)
    if handler is not None:
        events = handler(msg, rest, "", n, t, raw)
        if events is not None:
            return events
        level = _level(body, k)
    src = None
    si = body.find("source=", 0, k)
    if si >= 0:
        se = body.find(" ", si)
        src = body[si + 7 : se] if se > 0 else None
    return _dispatch(None, msg, rest, level, n, t, raw, src)


def _level(body: str, end: int) -> str:
    """The ``level=`` value of a slog record (searched before ``end``, the ``msg=`` position)."""
    li = body.find("level=", 0, end)
    if li < 0:
        return ""
    le = body.find(" ", li)
    return body[li + 6 : le] if le > 0 else body[li + 6 :]


def parse_go_log(body: str, n: int, text: str) -> list[LogEvent] | None:
    """One Go standard-logger record ``2024/06/02 18:43:45 routes.go:1007: INFO server config env=…``.

    Returns None when ``body`` is not such a record.
    """
    m = _GOLOG_RE.match(body)
    if m is None:
        return None
    level = m.group(4) or ""
    message = m.group(5)
    split = _GOLOG_SPLIT_RE.search(message)
    if split is not None:
        msg, rest = message[: split.start()], message[split.start() :]
    else:
        msg, rest = message, ""
    msg = msg.strip()
    handler = _handler(msg)
    if handler is None and level not in _WARN_LEVELS:
        return []
    return _dispatch(handler, msg, rest, level, n, go_log_time(m.group(1), m.group(2)), sanitize(text), m.group(3))


def parse_gin(body: str, n: int, text: str) -> list[LogEvent]:
    """One gin access line."""
    return _gin(body, n, text if text.isprintable() else sanitize(text))
