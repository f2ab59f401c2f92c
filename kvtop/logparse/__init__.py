"""Ollama server log parsing: pure functions and a stateful line parser, no I/O.

- :class:`LogParser` / :func:`parse_lines`: physical lines -> :data:`LogEvent` (``events.py``);
- :func:`group_loads` / :func:`inspect_lines`: events -> model loads and the
  ``kvtop inspect-log --json`` document (``loads.py``).

Line grammars live in ``wrappers.py`` (collector prefixes), ``ollama_lines.py`` (slog, Go
logger, gin), ``llamacpp_lines.py`` (llama.cpp/ggml), ``runner_lines.py`` (Era A C++ server,
JSON runner, llama-server) and ``cmdline.py`` (runner argv per era). Section numbers in the
docstrings refer to ``docs/ollama-reference.md``.
"""

from __future__ import annotations

from kvtop.logparse.events import (
    EVENT_TYPES,
    Allocation,
    ContextClamped,
    ContextOverTraining,
    ContextParams,
    DeviceFree,
    Eviction,
    FitOverflow,
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
from kvtop.logparse.loads import Load, group_loads, inspect_events, inspect_lines
from kvtop.logparse.parser import LogParser, iter_events, parse_lines

__all__ = [
    "EVENT_TYPES",
    "Allocation",
    "ContextClamped",
    "ContextOverTraining",
    "ContextParams",
    "DeviceFree",
    "Eviction",
    "FitOverflow",
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
