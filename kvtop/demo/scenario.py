"""A scenario of the stand-in Ollama server, as data: its catalog of models and its timeline.

A scenario describes a catalog of models (what ``/api/tags`` and ``/api/show`` answer) and a
timeline of steps (what ``/api/ps`` answers while each step is current); the stand-in server
(:mod:`kvtop.demo.server`) plays it back. The types here are the parsed, frozen form; the JSON
file format, and the reader that checks every value of it, are in :mod:`kvtop.demo.scenario_file`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = [
    "FORMAT_VERSION",
    "RUNNER_KEYS",
    "STEP_LOG_KEYS",
    "CatalogModel",
    "LoadedModel",
    "ModelDetails",
    "Scenario",
    "Step",
    "model_blob",
]

FORMAT_VERSION = 1
"""The only scenario format :mod:`kvtop.demo.scenario_file` reads."""

RUNNER_KEYS = (
    "weights_bytes",
    "layers",
    "prefill_tps",
    "decode_tps",
    "spilled_prefill_tps",
    "spilled_decode_tps",
    "prompt_tokens",
    "eval_tokens",
    "request_every_s",
)
"""A scenario model's ``runner`` keys: weights bytes and layer count (required), token speeds
(tokens/s), a request's prompt and generated tokens, seconds between requests (the runner log
``demo.logwriter`` writes from them)."""

STEP_LOG_KEYS = ("evict", "truncate", "kv_fallback", "requests")
"""A scenario step's ``log`` keys: models evicted at its start, whether its first request is
truncated, ``{model: requested type}`` KV type fallbacks of its loads, whether it has requests."""


@dataclass(frozen=True)
class ModelDetails:
    """The ``details`` object Ollama copies from the manifest config.

    Attributes:
        format: ``gguf`` or ``safetensors``.
        family: Model family, e.g. ``qwen3``.
        families: All families, or None (Ollama sends JSON null for some cloud models).
        parameter_size: Human parameter count, e.g. ``2.0B``.
        quantization_level: Weight file type, e.g. ``Q8_0``.
        parent_model: Always ``""`` in ``/api/ps``; kept for ``/api/show``.
    """

    format: str
    family: str
    families: tuple[str, ...] | None
    parameter_size: str
    quantization_level: str
    parent_model: str = ""

    def to_json(self) -> dict[str, Any]:
        """Return the object exactly as Ollama serialises ``api.ModelDetails``.

        Returns:
            A JSON-ready dict with the six keys in Ollama's field order.
        """
        return {
            "parent_model": self.parent_model,
            "format": self.format,
            "family": self.family,
            "families": list(self.families) if self.families is not None else None,
            "parameter_size": self.parameter_size,
            "quantization_level": self.quantization_level,
        }


@dataclass(frozen=True)
class CatalogModel:
    """One model the stand-in server "has pulled".

    Attributes:
        name: Display name with tag, e.g. ``qwen3:1.7b-q8_0``.
        digest: Manifest digest, 64 lowercase hex characters.
        details: Manifest details.
        file_size: Size on disk in bytes (``/api/tags`` ``size``); None when no real figure is
            known, and the model is then left out of ``/api/tags``.
        model_info: GGUF key/values as ``/api/show`` with ``verbose: true`` returns them.
        capabilities: e.g. ``("completion", "tools")``.
        parameters: Ollama's rendered ``parameters`` text.
        template: Prompt template text.
        system: System prompt text ("" when none).
        license: License text ("" when none).
        modelfile: Rendered Modelfile, or "" to let the server generate one.
        modified_at: RFC 3339 timestamp.
        tensors: ``[{name, type, shape}]`` entries, or None to leave the key out.
        runner: The figures the demo's runner log prints for this model (weights bytes, layers,
            token speeds: :data:`RUNNER_KEYS`), None when it has none.
    """

    name: str
    digest: str
    details: ModelDetails
    file_size: int | None
    model_info: Mapping[str, Any]
    capabilities: tuple[str, ...]
    parameters: str = ""
    template: str = ""
    system: str = ""
    license: str = ""
    modelfile: str = ""
    modified_at: str = "2026-11-10T09:00:00+09:00"
    tensors: tuple[Mapping[str, Any], ...] | None = None
    runner: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class LoadedModel:
    """One row of ``/api/ps`` while a step is current.

    Attributes:
        model: Catalog name.
        context_length: Per-slot context, or None to leave the key out (pre-v0.10 servers).
        size: Total bytes (weights + KV + compute).
        size_vram: Bytes in GPU memory.
        expires_in_s: Seconds from the step's start to ``expires_at``; negative puts it in the
            past (a busy model); None means keep-alive forever (~292 years).
    """

    model: str
    context_length: int | None
    size: int
    size_vram: int
    expires_in_s: float | None


@dataclass(frozen=True)
class Step:
    """One state of the server.

    Attributes:
        at_s: Scenario seconds (before ``--speed``) at which the step becomes current.
        hold_s: How long the step stays after the next one would start; only the last
            step's value matters (it sets the loop period).
        label: Short description shown by ``/_standin/state``.
        loaded: The ``/api/ps`` rows.
        status: When set, every ``/api/*`` answer has this HTTP status and an error body.
        error: The error message used with ``status``.
        garbage: When true, ``/api/ps`` answers a body that is not JSON.
        log: What the demo's runner log adds in this step besides loads and requests (evictions,
            a truncation, a KV type fallback: :data:`STEP_LOG_KEYS`).
    """

    at_s: float
    hold_s: float
    label: str
    loaded: tuple[LoadedModel, ...]
    status: int | None = None
    error: str = ""
    garbage: bool = False
    log: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class Machine:
    """The scenario's own machine, so ``kvtop --demo`` shows its RAM, not the host's.

    Attributes:
        ram_total: Bytes of RAM.
        ram_used: Bytes in use with no model loaded; a model's share in system RAM
            (``size - size_vram``) adds to it while it is loaded.
        gpu: The simulated GPU (:data:`kvtop.demo.gpusim.GPU_KEYS`), None: the machine has none.
    """

    ram_total: int
    ram_used: int
    gpu: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Scenario:
    """A parsed scenario.

    Attributes:
        format: Always :data:`FORMAT_VERSION`.
        version: The Ollama version ``/api/version`` reports.
        description: Free text.
        sources: Citations for the numbers.
        models: Catalog by name.
        steps: Timeline, ordered by ``at_s``.
        machine: The machine's RAM (``GET /_standin/machine``), None when the scenario has none.
        log_version: What ``/api/version`` answers while the stand-in writes its runner log
            (that log is llama-server era, v0.30+); None: ``version`` then too.
    """

    format: int
    version: str
    description: str
    sources: tuple[str, ...]
    models: Mapping[str, CatalogModel]
    steps: tuple[Step, ...]
    machine: Machine | None = None
    log_version: str | None = None

    @property
    def period_s(self) -> float:
        """Length of one pass in scenario seconds: last step's ``at_s + hold_s``."""
        last = self.steps[-1]
        return last.at_s + last.hold_s


_FROM_BLOB = re.compile(r"(?m)^FROM\s+\S*?/blobs/(sha256-[0-9a-f]{64})\s*$")


def model_blob(model: CatalogModel) -> str:
    """The weights blob file name (``sha256-<hex>``) the stand-in reports for ``model``: in its
    Modelfile's ``FROM`` line, its runner's ``--model`` and its runner log's paths alike.

    A scenario's own ``modelfile`` names its blob (a real ``ollama show`` output); otherwise the
    scenario has no GGUF to hash, and the stand-in derives a stable blob from the name so the
    Modelfile's ``FROM`` line has Ollama's shape.
    """
    found = _FROM_BLOB.search(model.modelfile) if model.modelfile else None
    if found:
        return found.group(1)
    return "sha256-" + hashlib.sha256(f"blob:{model.name}".encode()).hexdigest()
