"""The views every face renders: ``AppState`` (one server's whole state) and its ``ModelView`` rows.

Frozen data only, below everything that reads it: the folds that build them (``model.state``),
the joins (``model.gpu``, ``model.slots``), the planner, the alerts
and the faces. Their parts are data modules below this one (``gpu_snapshots``, ``slot_snapshots``,
``server_info``, ``logstate``, ``alerts.types``, ``snapshots``). No I/O, no clock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone, tzinfo

from kvtop.logparse.load_build import Load
from kvtop.model import kv
from kvtop.model.alerts.types import DEFAULT_THRESHOLDS, Alert, Thresholds
from kvtop.model.changes import Change
from kvtop.model.gpu_snapshots import GpuSnapshot, ProcSnapshot
from kvtop.model.known import Known
from kvtop.model.ladder import LocalRunner
from kvtop.model.logstate import LogState, Throughput
from kvtop.model.server_health import ServerInfo
from kvtop.model.queue_snapshots import QueueView
from kvtop.model.slot_snapshots import DecodeRate, SlotsSnapshot, SlotUse
from kvtop.model.snapshots import OllamaSnapshot

__all__ = ["AppState", "Memory", "ModelView"]


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
        for s in ("estimated", "default", "service", "requested", "reported", "runner", "allocated"):
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
    model_blob: str | None = None
    load: Load | None = None
    load_note: str = ""
    devices: Mapping[str, Mapping[str, int]] = dataclasses.field(default_factory=dict)
    findings: tuple[str, ...] = ()
    throughput: Throughput | None = None
    timings_note: str = ""
    slots: SlotUse | None = None
    """Busy / total slots and the prompt in progress (``model.slots.slot_use``), None for cloud models."""
    decode_tps: Known[float] = Known()
    """Generation speed: the newest request's from the runner log (allocated), else measured from
    the runner's ``/slots`` ``n_decoded`` between two rounds (runner); tokens per second."""
    local: LocalRunner = LocalRunner()
    """The runner process, its endpoints and the server environment this machine can read."""
    differences: tuple[str, ...] = ()
    """Lower rungs that disagree with a shown figure (``model.ladder.difference_lines``)."""
    engine: Known[str] = Known()
    """Which runner serves the model: ``/api/ps``'s ``runner`` (reported, Ollama 0.40+), else the
    runner's command line (runner: ``llama.cpp``, ``ollama`` or ``mlx``); unknown otherwise."""

    @property
    def spilled(self) -> bool:
        """True when part of the model is in system RAM (``size_vram < size``)."""
        return (
            self.size_bytes is not None
            and self.size_vram_bytes is not None
            and self.size_bytes > 0
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
        gpu: The latest GPU sample (``sources.gpu.GpuSource``), None before the first one.
        procs: The process sample taken right after it (``sources.procs.ProcSource``).
        slots: The latest ``/slots`` round over the local runners (``sources.slots.SlotsSource``).
    """

    host_url: str
    ollama: OllamaSnapshot | None = None
    last_ok: OllamaSnapshot | None = None
    models: tuple[ModelView, ...] = ()
    failures: int = 0
    log: LogState = LogState()
    gpu: GpuSnapshot | None = None
    procs: ProcSnapshot | None = None
    slots: SlotsSnapshot | None = None
    alerts: tuple[Alert, ...] = ()
    past_alerts: tuple[Alert, ...] = ()
    """Alerts about a model that is no longer loaded (``model.alerts.current``): still within
    their window, kept out of ``alerts`` so the banner shows what is true now; the events pane,
    ``--once``, JSON and ``--check`` still report them, with their age."""
    thresholds: Thresholds = DEFAULT_THRESHOLDS
    naive_tz: tzinfo = timezone.utc
    queue: QueueView | None = None
    """Requests in flight and waiting for a slot (``model.queue``): a local server only, None
    until its connections are read."""
    slot_rates: Mapping[int, DecodeRate] = dataclasses.field(default_factory=dict)
    """Decode speed per runner PID from consecutive ``/slots`` rounds (``model.slots.decode_rates``)."""
    blob_names: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Weights blob → the model name ``/api/ps`` last showed for it (newest ``model.state.BLOB_NAMES_KEPT``),
    so a log line about a model that has since unloaded (an eviction) still names it."""
    latencies_s: tuple[float, ...] = dataclasses.field(default=(), compare=False)
    """Round-trip times of the last ``model.state.LATENCY_WINDOW`` answered polls, oldest first (display
    only: not part of the state's equality, so an unchanged poll still gives an equal state)."""
    server: ServerInfo = ServerInfo()
    """The server view's health and pulled models (``model.server_view``; traffic is in ``log``)."""
    changes: tuple[Change, ...] = ()
    """The server's newest changes (restarts, upgrades, settings, each model's load facts),
    oldest first: ``model.changes``, kept across kvtop runs by the engine (``engine.timeline``)."""
    latency_s: float | None = dataclasses.field(default=None, compare=False)
    """The latency the header shows: the median of ``latencies_s``, moved only when the median
    moves by more than ``model.state.LATENCY_STEADY`` (a quarter, at least 2 ms), so jitter of a
    millisecond neither changes the figure nor repaints the header every second."""

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
