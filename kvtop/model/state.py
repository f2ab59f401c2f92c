"""Application state and the one function that applies a snapshot to it.

``apply(state, snapshot)`` is pure: the same inputs give an equal ``AppState``, so an
unchanged poll repaints nothing. Everything the dashboard shows about a model is derived here
into a ``ModelView`` whose every number carries its source (``Known``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kvtop.model import kv
from kvtop.model.humanize import FOREVER_AFTER_S, go_round, until_text
from kvtop.model.known import Known
from kvtop.model.snapshots import OllamaSnapshot, PsModel, ShowInfo, TagInfo, detail_key

PARALLEL_DEFAULT_SINCE = (0, 10, 0)
"""``OLLAMA_NUM_PARALLEL`` defaults to 1 from v0.10.0 (§3.3, commit 20c3266e9); before it was auto."""


def parse_version(text: str | None) -> tuple[int, int, int] | None:
    """``"0.22.1"`` -> ``(0, 22, 1)``; pre-release suffixes ignored; None when unparsable."""
    if not text:
        return None
    m = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", text.strip())
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


@dataclass(frozen=True, slots=True)
class Memory:
    """Where a model's ``size`` goes: weights, KV cache and compute buffers, each with a source."""

    weights: Known[int]
    kv: Known[int]
    compute: Known[int]

    @property
    def source(self) -> str | None:
        """The weakest source among the parts: ``estimated`` if any part is estimated."""
        sources = [p.source for p in (self.weights, self.kv, self.compute) if p.source]
        if not sources:
            return None
        for s in ("estimated", "requested", "default", "reported", "allocated"):
            if s in sources:
                return s
        return sources[0]


@dataclass(frozen=True, slots=True)
class ModelView:
    """Everything the dashboard knows about one loaded model, derived from the snapshots.

    Attributes:
        size_bytes / size_vram_bytes: From ``/api/ps`` (reported).
        processor: ``ollama ps``'s PROCESSOR string (``kv.processor_string``).
        cpu_percent: The CPU share as ``ollama ps`` rounds it, None when unknown.
        context: Per-slot ``num_ctx``.
        parallel: Slots (``OLLAMA_NUM_PARALLEL``).
        memory: Weights / KV / compute split.
        kv_estimate: The KV arithmetic for the detail view, None when unavailable.
        kv_unavailable: Why there is no KV estimate.
        until: UNTIL text relative to the snapshot's time.
        expired: ``expires_at`` is in the past (busy or unloading; §1.4).
    """

    name: str
    digest: str
    short_id: str
    size_bytes: int | None
    size_vram_bytes: int | None
    processor: str
    cpu_percent: int | None
    context: Known[int]
    parallel: Known[int]
    kv_type: Known[str]
    flash_attention: Known[str]
    memory: Memory
    kv_bytes_per_token: int | None
    kv_estimate: kv.KVEstimate | None
    kv_unavailable: str | None
    context_train: int | None
    architecture: str | None
    parameter_size: str | None
    quantization_level: str | None
    expires_at: datetime | None
    until: str
    expired: bool
    forever: bool
    cloud: bool
    show_error: str | None

    @property
    def spilled(self) -> bool:
        """True when part of the model is in system RAM (``size_vram < size``)."""
        return (
            self.size_bytes is not None
            and self.size_vram_bytes is not None
            and 0 < self.size_bytes
            and self.size_vram_bytes < self.size_bytes
        )

    @property
    def total_ctx_cells(self) -> int | None:
        """``num_ctx × parallel`` when both are known."""
        if self.context.value is None or self.parallel.value is None:
            return None
        return self.context.value * self.parallel.value


@dataclass(frozen=True, slots=True)
class AppState:
    """The whole state the UI renders.

    Attributes:
        host_url: The server being watched.
        ollama: The latest snapshot, None before the first poll returns.
        last_ok: The latest reachable snapshot (its models stay on screen while the server is down).
        models: Derived rows for ``last_ok``'s models.
        failures: Consecutive failed polls.
    """

    host_url: str
    ollama: OllamaSnapshot | None = None
    last_ok: OllamaSnapshot | None = None
    models: tuple[ModelView, ...] = ()
    failures: int = 0

    @property
    def reachable(self) -> bool | None:
        """None before the first poll, then whether the last poll reached the server."""
        return None if self.ollama is None else self.ollama.reachable

    @property
    def stale_s(self) -> float | None:
        """Seconds between the last good poll and the latest failed one (None when current)."""
        if self.ollama is None or self.ollama.reachable or self.last_ok is None:
            return None
        return max(0.0, self.ollama.taken_at - self.last_ok.taken_at)


def apply(state: AppState, snap: OllamaSnapshot) -> AppState:
    """Return the state after ``snap``; failed polls keep the last known models (marked stale)."""
    if not snap.reachable:
        return dataclasses.replace(state, ollama=snap, failures=state.failures + 1)
    models = tuple(model_view(m, snap) for m in snap.models)
    return dataclasses.replace(state, ollama=snap, last_ok=snap, models=models, failures=0)


def _parameter_num_ctx(parameters: str) -> int | None:
    """``num_ctx`` from the Modelfile ``parameters`` text of ``/api/show`` (``num_ctx 16384``)."""
    m = re.search(r"(?m)^\s*num_ctx\s+(\d+)\s*$", parameters)
    return int(m.group(1)) if m else None


def _arch_int(info: Mapping[str, Any], key: str) -> int | None:
    arch = info.get("general.architecture")
    value = info.get(f"{arch}.{key}") if isinstance(arch, str) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _is_cloud(m: PsModel, show: ShowInfo | None) -> bool:
    if show is not None and show.remote:
        return True
    return m.name.endswith("-cloud") or m.name.endswith(":cloud")


def model_view(m: PsModel, snap: OllamaSnapshot) -> ModelView:
    """Derive a ``ModelView`` from one ``/api/ps`` row and the cached ``/api/show`` / ``/api/tags``."""
    show = snap.shows.get(detail_key(m))
    tag: TagInfo | None = snap.tags.get(m.digest)
    info: Mapping[str, Any] = show.model_info if show is not None else {}
    cloud = _is_cloud(m, show)
    version = parse_version(snap.version)

    if m.context_length is not None:
        context: Known[int] = Known(m.context_length, "reported", "/api/ps context_length (per slot)")
    elif cloud:
        context = Known(None, None, "cloud model: /api/ps gives no context for it")
    else:
        requested = _parameter_num_ctx(show.parameters) if show else None
        if requested is not None:
            context = Known(requested, "requested", "Modelfile PARAMETER num_ctx (/api/ps has no context_length before v0.10.0)")
        else:
            context = Known(None, None, "/api/ps has no context_length before v0.10.0; the server log gives n_ctx")

    # /api/ps has context_length since v0.10.0, the release that made 1 slot the default (§1.3, §3.3)
    modern = (version is not None and version >= PARALLEL_DEFAULT_SINCE) or (version is None and m.context_length is not None)
    if cloud:
        parallel: Known[int] = Known(None, None, "cloud model: slots are the remote service's")
        kv_type: Known[str] = Known(None, None, "cloud model: the KV cache is the remote service's")
    else:
        if modern:
            parallel = Known(1, "default", "OLLAMA_NUM_PARALLEL default 1 (v0.10.0+); the server log gives the real value")
        elif version is None:
            parallel = Known(None, None, "server version not known yet (/api/version)")
        else:
            parallel = Known(None, None, "OLLAMA_NUM_PARALLEL was auto (4 or 1) before v0.10.0; the server log gives the real value")
        kv_type = Known("f16", "default", "OLLAMA_KV_CACHE_TYPE unset means f16; the server log gives what the runner allocated")
    flash: Known[str] = Known(None, None, "only the server log tells the resolved state (OLLAMA_FLASH_ATTENTION is misreported when unset)")

    kv_estimate: kv.KVEstimate | None = None
    kv_unavailable: str | None = None
    per_token: int | None = None
    if cloud:
        kv_unavailable = "cloud model: runs remotely, no local memory"
    elif show is None:
        kv_unavailable = "waiting for /api/show"
    elif show.error:
        kv_unavailable = f"/api/show failed: {show.error}"
    else:
        layout = kv.layout_from_model_info(info)
        if isinstance(layout, kv.KVUnavailable):
            kv_unavailable = layout.reason
        else:
            try:
                per_token = kv.bytes_per_token(layout, kv_type.value or "f16")
                if context.value is not None and parallel.value is not None:
                    kv_estimate = kv.kv_allocation(layout, context.value, parallel.value, kv_type.value or "f16")
                else:
                    kv_unavailable = "num_ctx or slot count unknown"
            except ValueError as exc:
                kv_unavailable = str(exc)

    if kv_estimate is not None:
        kv_mem: Known[int] = Known(kv_estimate.total_bytes, "estimated", kv_estimate.formula)
    else:
        kv_mem = Known(None, None, kv_unavailable or "")
    if tag is not None and tag.size_bytes is not None and not cloud:
        weights: Known[int] = Known(tag.size_bytes, "reported", "model file size from /api/tags")
    elif cloud:
        weights = Known(None, None, "cloud model: the weights are on the remote service")
    else:
        weights = Known(None, None, "model file size not known yet (/api/tags)")
    compute: Known[int] = Known(None, None, "needs weights and KV")
    if m.size_bytes is not None and weights.value is not None and kv_mem.value is not None:
        rest = m.size_bytes - weights.value - kv_mem.value
        if rest >= 0:
            compute = Known(rest, "estimated", "size − weights − KV (compute buffers and overhead)")
        else:
            compute = Known(None, None, f"size is {-rest:,} B below weights + KV estimate: KV type or slots differ from the assumption")

    expires = m.expires_at
    delta = None if expires is None else expires.timestamp() - snap.taken_at
    cpu_percent: int | None = None
    if m.size_bytes and m.size_vram_bytes is not None and 0 <= m.size_vram_bytes <= m.size_bytes:
        cpu_percent = int(go_round((m.size_bytes - m.size_vram_bytes) / m.size_bytes * 100))

    return ModelView(
        name=m.name,
        digest=m.digest,
        short_id=m.digest[:12],
        size_bytes=m.size_bytes,
        size_vram_bytes=m.size_vram_bytes,
        processor=kv.processor_string(m.size_bytes, m.size_vram_bytes),
        cpu_percent=cpu_percent,
        context=context,
        parallel=parallel,
        kv_type=kv_type,
        flash_attention=flash,
        memory=Memory(weights=weights, kv=kv_mem, compute=compute),
        kv_bytes_per_token=per_token,
        kv_estimate=kv_estimate,
        kv_unavailable=kv_unavailable,
        context_train=_arch_int(info, "context_length"),
        architecture=info.get("general.architecture") if isinstance(info.get("general.architecture"), str) else m.details.family,
        parameter_size=m.details.parameter_size,
        quantization_level=m.details.quantization_level,
        expires_at=expires,
        until=until_text(expires, snap.taken_at),
        expired=delta is not None and delta < 0,
        forever=delta is not None and delta > FOREVER_AFTER_S,
        cloud=cloud,
        show_error=show.error if show else None,
    )


SORT_KEYS: tuple[str, ...] = ("server", "size", "name", "cpu", "context", "kv")
"""Sort orders cycled by ``s``: the server's own order (longest keep-alive first), then by size,
name, CPU share (spilled first), per-slot context and KV bytes."""


def sort_views(views: tuple[ModelView, ...], key: str) -> tuple[ModelView, ...]:
    """Order rows for display; unknown values sort last. Raises ValueError for an unknown key."""
    if key == "server":
        return views
    if key == "name":
        return tuple(sorted(views, key=lambda v: v.name.lower()))
    getters: dict[str, Callable[[ModelView], int | None]] = {
        "size": lambda v: v.size_bytes,
        "cpu": lambda v: v.cpu_percent,
        "context": lambda v: v.context.value,
        "kv": lambda v: v.memory.kv.value,
    }
    if key not in getters:
        raise ValueError(f"unknown sort key {key!r}; expected one of {', '.join(SORT_KEYS)}")
    get = getters[key]
    known = sorted((v for v in views if get(v) is not None), key=lambda v: (-(get(v) or 0), v.name))
    return tuple(known) + tuple(v for v in views if get(v) is None)


def filter_views(views: tuple[ModelView, ...], text: str) -> tuple[ModelView, ...]:
    """Keep rows whose name, ID, family or processor contain ``text`` (case-insensitive)."""
    needle = text.strip().lower()
    if not needle:
        return views
    return tuple(
        v for v in views
        if needle in v.name.lower() or v.short_id.startswith(needle)
        or needle in (v.architecture or "").lower() or needle in v.processor.lower()
    )
