"""Immutable snapshots produced by the sources and folded by ``model.state.fold`` (the engine's apply step).

Sources fill a snapshot completely when they sample; nothing mutates one afterwards. A failed
sample is still a snapshot (``reachable=False`` with ``error`` saying what happened), so the
UI never sees an exception. All sizes are integer bytes; ``None`` means "not available".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any, Literal

ErrorKind = Literal["refused", "timeout", "http", "auth", "tls", "invalid_json", "invalid_shape", "connect", "other"]


@dataclass(frozen=True, slots=True)
class ModelDetails:
    """``details`` of a ``/api/ps`` or ``/api/tags`` entry (all optional: cloud and old servers omit some)."""

    format: str | None = None
    family: str | None = None
    families: tuple[str, ...] = ()
    parameter_size: str | None = None
    quantization_level: str | None = None
    parent_model: str | None = None


@dataclass(frozen=True, slots=True)
class PsModel:
    """One loaded model as ``GET /api/ps`` reports it (``api/types.go:ProcessModelResponse``).

    Attributes:
        name: Display name, e.g. ``llama3.2:latest``.
        digest: Manifest digest, 64 hex characters without ``sha256:`` (not the blob digest).
        size_bytes: Total memory of the loaded model (weights + KV + compute), reported.
        size_vram_bytes: The part of ``size_bytes`` in GPU memory, reported.
        context_length: Per-slot context (``num_ctx``); None before Ollama v0.10.0 (§1.3).
        expires_at: When the keep-alive runs out, timezone-aware; None if unparsable.
        expires_at_raw: The text as sent, for display when parsing failed.
        runner: Which runner serves the model as ``/api/ps`` names it (``llama.cpp`` or ``mlx``;
            Ollama 0.40+, docs/ollama-internals.md §7.2), None when the server does not say.
    """

    name: str
    model: str
    digest: str
    size_bytes: int | None
    size_vram_bytes: int | None
    context_length: int | None
    expires_at: datetime | None
    expires_at_raw: str | None
    details: ModelDetails = field(default_factory=ModelDetails)
    runner: str | None = None


def detail_key(m: PsModel) -> str:
    """The key of a model's cached ``/api/show`` answer: its manifest digest, or its name
    when a server sends no digest."""
    return m.digest or f"name:{m.name}"


@dataclass(frozen=True, slots=True)
class ShowInfo:
    """The parts of ``POST /api/show`` (``verbose: true``) kvtop uses, cached per manifest digest.

    Attributes:
        digest: Manifest digest of the model this answer belongs to.
        model_info: GGUF key/value map (tokenizer arrays dropped to save memory).
        parameters: The Modelfile ``parameters`` text (may set ``num_ctx``).
        capabilities: e.g. ``("completion", "tools")``.
        remote: True for a cloud/remote model (``remote_host``/``remote_model`` present).
        model_blob: ``sha256-<hex>`` of the weights blob, from the Modelfile's ``FROM`` line
            (the path the runner gets as ``--model``; docs/ollama-internals.md §1.6, §7).
        error: Why the answer is missing, when it is.
    """

    digest: str
    name: str
    model_info: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    parameters: str = ""
    capabilities: tuple[str, ...] = ()
    remote: bool = False
    model_blob: str | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class TagInfo:
    """One ``GET /api/tags`` entry: a model on disk and its file size (weights as stored)."""

    name: str
    digest: str
    size_bytes: int | None


@dataclass(frozen=True, slots=True)
class OllamaSnapshot:
    """One complete poll of an Ollama server.

    Attributes:
        host_url: Base URL that was polled.
        taken_at: Wall-clock time of the poll (Unix seconds), the only clock the model sees.
        reachable: False when ``/api/ps`` could not be read as valid data.
        error: One line saying what went wrong, or None.
        error_kind: Machine-readable class of ``error``.
        version: ``/api/version`` text, or None when unknown.
        latency_s: Round-trip time of ``/api/ps`` in seconds.
        models: Loaded models, in the server's order.
        shows: ``/api/show`` answers for the loaded models, by ``detail_key`` (cached).
        tags: ``/api/tags`` entries by digest, for models on disk.
    """

    host_url: str
    taken_at: float
    reachable: bool
    error: str | None = None
    error_kind: ErrorKind | None = None
    version: str | None = None
    latency_s: float | None = None
    models: tuple[PsModel, ...] = ()
    shows: Mapping[str, ShowInfo] = field(default_factory=lambda: MappingProxyType({}))
    tags: Mapping[str, TagInfo] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class PulledSnapshot:
    """What the server has pulled, as far as read (``sources.pulled.PulledSource``).

    Attributes:
        taken_at: Unix time of the read.
        tags: ``/api/tags`` by digest, None before it was read.
        shows: ``/api/show`` by digest for the models read so far (the rest are pending).
        error: Why ``/api/tags`` could not be read, None when it was.
    """

    taken_at: float
    tags: Mapping[str, TagInfo] | None = None
    shows: Mapping[str, ShowInfo] = field(default_factory=lambda: MappingProxyType({}))
    error: str | None = None


def parse_version(text: str | None) -> tuple[int, int, int] | None:
    """``"0.22.1"`` -> ``(0, 22, 1)``; pre-release suffixes ignored; None when unparsable."""
    if not text:
        return None
    m = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", text.strip())
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
