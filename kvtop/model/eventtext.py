"""One-line, plain descriptions of parsed log events for the events pane (pure).

Text that comes from the log (a warning's message, a path) is returned with every control character
replaced (``logparse.wrappers.sanitize``); the pane also passes it through ``ui.format.safe`` and
shows it as a ``rich.text.Text``, never as markup.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kvtop.logparse.events import LogEvent
from kvtop.logparse.wrappers import sanitize
from kvtop.model.known import exact_bytes

_SKIP = {"line_no", "time", "raw", "grammar", "complete", "message", "cmd", "env"}


def _mib(n: int) -> str:
    """A size in the units of every screen (``model.known.ibytes``), exact bytes beside it."""
    return exact_bytes(n)


def _value(name: str, value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and name.endswith("bytes") and value >= 0:
        return _mib(value)
    if isinstance(value, float):
        return f"{value:,.2f}"
    return str(value)


def describe(event: LogEvent) -> str:
    """``allocation``: ``kv CUDA0 448.00 MiB``; other kinds: their non-empty fields as ``k=v``."""
    kind = event.kind

    def get(name: str) -> Any:
        return getattr(event, name, None)

    if kind == "unknown_warning":
        # the line's own text is the description (``GGML_ASSERT: …ggml-cuda.cu:101: !"CUDA error"``, corpus 005)
        level, message, source = get("level"), get("message"), get("source")
        text = f"{level}: {message}" if level else str(message or "")
        if source:
            text += f" ({source})"
        return sanitize(text)
    if kind == "allocation":
        return f"{get('component')} {get('device')} {_mib(get('bytes'))}"
    if kind == "kv_summary":
        parts = [
            f"{_mib(get('size_bytes'))}" if get("size_bytes") is not None else "",
            f"{get('cells')} cells" if get("cells") else "",
            f"K {get('k_type')} V {get('v_type')}" if get("k_type") else "",
        ]
        return ("recurrent state " if get("recurrent") else "KV cache ") + ", ".join(p for p in parts if p)
    if kind == "request_timing":
        out = []
        if get("prompt_tokens") is not None:
            out.append(
                f"prefill {get('prompt_tokens')} tok"
                + (f" @ {get('prompt_tps'):,.1f} tok/s" if get("prompt_tps") else "")
            )
        if get("eval_tokens") is not None:
            out.append(
                f"decode {get('eval_tokens')} tok" + (f" @ {get('eval_tps'):,.1f} tok/s" if get("eval_tps") else "")
            )
        return ", ".join(out) or "timing"
    if kind == "truncation":
        return f"prompt {get('prompt')} tokens > limit {get('limit')}: kept {get('keep')}, new {get('new')}"
    if kind == "context_overflow":
        if get("form") == "messages":
            kept = get("messages_kept")
            return "chat history cut to fit the context" + (f": {kept} message(s) kept" if kept is not None else "")
        return sanitize(
            f"HTTP 400 on {get('path')} (Ollama's answer to a prompt over the context; the line does not say why)"
        )
    if kind == "fit_plan":
        parts = []
        if get("device") is not None and get("margin_bytes") is not None:
            m = get("margin_bytes")
            parts.append(f"{get('device')} {'surplus' if m >= 0 else 'deficit'} {_mib(abs(m))}")
        if get("projected_bytes") is not None:
            parts.append(
                f"projected {_mib(get('projected_bytes'))} of {_mib(get('free_bytes'))} free"
                if get("free_bytes") is not None
                else f"projected {_mib(get('projected_bytes'))}"
            )
        if get("left_bytes") is not None:
            parts.append(f"leaves {_mib(get('left_bytes'))} free")
        if get("shortfall_bytes") is not None:
            parts.append(f"must cut {_mib(get('shortfall_bytes'))}")
        if get("target_bytes") is not None:
            parts.append(f"margin {_mib(get('target_bytes'))}")
        return sanitize(f"llama.cpp fit ({get('memory')} memory): " + ", ".join(parts))
    if kind == "offloaded_layers":
        return f"{get('n')}/{get('total')} layers on the GPU"
    if kind == "server_config":
        env = get("env") or {}
        keys = ("OLLAMA_FLASH_ATTENTION", "OLLAMA_KV_CACHE_TYPE", "OLLAMA_NUM_PARALLEL", "OLLAMA_CONTEXT_LENGTH")
        return " ".join(f"{k.removeprefix('OLLAMA_')}={env[k]!s}" for k in keys if k in env) or f"{len(env)} settings"
    fields = []
    for f in dataclasses.fields(event):
        if f.name in _SKIP:
            continue
        value = getattr(event, f.name)
        if value in (None, "", (), {}, False):
            continue
        fields.append(f"{f.name}={_value(f.name, value)}")
    return sanitize(" ".join(fields))
