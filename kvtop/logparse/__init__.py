"""Ollama server log parsing: pure functions and a stateful line parser, no I/O.

- :class:`LogParser` / :func:`parse_lines`: physical lines -> :data:`LogEvent` (``events.py``);
- :func:`group_loads` / :func:`inspect_lines`: events -> model loads and the
  ``kvtop inspect-log --json`` document (``loads.py``).

Line grammars live in ``wrappers.py`` (collector prefixes), ``ollama_lines.py`` (slog, Go
logger, gin), ``llamacpp_lines.py`` (llama.cpp/ggml), ``runner_lines.py`` (Era A C++ server,
JSON runner, llama-server) and ``cmdline.py`` (runner argv per era). Section numbers in the
docstrings refer to ``docs/ollama-internals.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvtop.logparse.events import (
        EVENT_TYPES,
        Allocation,
        ContextClamped,
        ContextOverflow,
        ContextOverTraining,
        ContextParams,
        Eviction,
        FlashAttention,
        FlashAttentionDecision,
        FlashAttentionForcedOff,
        GinRequest,
        KvSummary,
        KvTypeFallback,
        LoadDecision,
        LoadFailed,
        LoadRequest,
        LogEvent,
        ModelLoad,
        OffloadedLayers,
        Oom,
        PrefillProgress,
        PromptRejected,
        RequestTiming,
        RunnerReady,
        RunnerStarted,
        SchedulerEstimate,
        ServerConfig,
        ServerListening,
        SlotActivity,
        Truncation,
        UnknownWarning,
        Unload,
        event_to_dict,
    )
    from kvtop.logparse.fit_events import DeviceFree, FitOverflow, FitPlan
    from kvtop.logparse.inspect_doc import inspect_events, inspect_lines
    from kvtop.logparse.load_build import Load
    from kvtop.logparse.load_grouping import group_loads
    from kvtop.logparse.parser import LogParser, iter_events, parse_lines

_LAZY = {
    **dict.fromkeys(("Load", "group_loads", "inspect_events", "inspect_lines"), "kvtop.logparse.loads"),
    **dict.fromkeys(("LogParser", "iter_events", "parse_lines"), "kvtop.logparse.parser"),
    **dict.fromkeys(("DeviceFree", "FitOverflow", "FitPlan"), "kvtop.logparse.fit_events"),
}
"""Names re-exported from a submodule other than ``events`` (every other name is ``events``').

They are imported on first use (PEP 562), not with the package: importing one event class must
not compile every line grammar's regexes (``parser``) or the load grouping (``loads``), which
only following or inspecting a log needs (startup time)."""


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_LAZY.get(name, "kvtop.logparse.events")), name)
    globals()[name] = value
    return value


__all__ = [
    "EVENT_TYPES",
    "Allocation",
    "ContextClamped",
    "ContextOverflow",
    "ContextOverTraining",
    "ContextParams",
    "DeviceFree",
    "Eviction",
    "FitOverflow",
    "FitPlan",
    "FlashAttention",
    "FlashAttentionDecision",
    "FlashAttentionForcedOff",
    "GinRequest",
    "KvSummary",
    "KvTypeFallback",
    "Load",
    "LoadDecision",
    "LoadFailed",
    "LoadRequest",
    "LogEvent",
    "LogParser",
    "ModelLoad",
    "OffloadedLayers",
    "Oom",
    "PrefillProgress",
    "PromptRejected",
    "RequestTiming",
    "RunnerReady",
    "RunnerStarted",
    "SchedulerEstimate",
    "ServerConfig",
    "ServerListening",
    "SlotActivity",
    "Truncation",
    "UnknownWarning",
    "Unload",
    "event_to_dict",
    "group_loads",
    "inspect_events",
    "inspect_lines",
    "iter_events",
    "parse_lines",
]


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
