"""Application state and the one function that applies a snapshot to it.

``apply(state, snapshot)`` is pure: the same inputs give an equal ``AppState``, so an
unchanged poll repaints nothing. Everything the dashboard shows about a model is derived here
into a ``ModelView`` whose every number carries its source (``Known``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone, tzinfo
from typing import Any

from kvtop.model import kv
from kvtop.model.humanize import FOREVER_AFTER_S, go_round, until_text
from kvtop.logparse.events import LogEvent
from kvtop.logparse.loads import Load
from kvtop.model.alerts import DEFAULT_THRESHOLDS, Alert, Thresholds, evaluate
from kvtop.model.gpu import GpuSnapshot, ProcSnapshot
from kvtop.model.known import Known
from kvtop.model.logstate import LogState, Throughput, apply_log, throughput
from kvtop.model.slots import SlotsSnapshot, SlotUse, slot_use
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
    model_blob: str | None = None
    load: Load | None = None
    load_note: str = ""
    devices: Mapping[str, Mapping[str, int]] = dataclasses.field(default_factory=dict)
    findings: tuple[str, ...] = ()
    throughput: Throughput | None = None
    timings_note: str = ""
    slots: SlotUse | None = None
    """Busy / total slots and the prompt in progress (``model.slots.slot_use``), None for cloud models."""

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
    thresholds: Thresholds = DEFAULT_THRESHOLDS
    naive_tz: tzinfo = timezone.utc
    blob_names: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Weights blob → the model name ``/api/ps`` last showed for it (newest ``BLOB_NAMES_KEPT``),
    so a log line about a model that has since unloaded (an eviction) still names it."""

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


def initial_state(host_url: str, alert_settings: Mapping[str, Any], naive_tz: tzinfo) -> tuple[AppState, list[str]]:
    """The state before the first poll, with the configured alert thresholds.

    Args:
        host_url: The server watched.
        alert_settings: The ``[alerts]`` table of ``config.toml``.
        naive_tz: The zone of log timestamps that carry none (the local one for a local log).

    Returns:
        The state and one warning per unusable threshold (its default is kept).
    """
    thresholds, warnings = Thresholds.from_mapping(alert_settings)
    return AppState(host_url=host_url, thresholds=thresholds, naive_tz=naive_tz), warnings


def with_alerts(state: AppState) -> AppState:
    """The state with its alerts re-evaluated (``since`` carried over from the previous ones)."""
    alerts = evaluate(state, state.thresholds, state.alerts, naive_tz=state.naive_tz)
    return state if alerts == state.alerts else dataclasses.replace(state, alerts=alerts)


def apply(state: AppState, snap: OllamaSnapshot) -> AppState:
    """Return the state after ``snap``; failed polls keep the last known models (marked stale)."""
    if not snap.reachable:
        return with_alerts(dataclasses.replace(state, ollama=snap, failures=state.failures + 1))
    models = with_slot_use(tuple(model_view(m, snap, state.log) for m in snap.models), state.slots, state.log, snap)
    return with_alerts(dataclasses.replace(state, ollama=snap, last_ok=snap, models=models, failures=0,
                                           blob_names=_remember_names(state.blob_names, models)))


BLOB_NAMES_KEPT = 256


def _remember_names(known: Mapping[str, str], models: Sequence[ModelView]) -> Mapping[str, str]:
    """``known`` with the blobs of ``models`` named (the same object when nothing is new)."""
    new = {m.model_blob: m.name for m in models if m.model_blob and known.get(m.model_blob) != m.name}
    if not new:
        return known
    merged = {b: n for b, n in known.items() if b not in new}
    merged.update(new)
    return dict(list(merged.items())[-BLOB_NAMES_KEPT:])


def apply_gpu(state: AppState, gpu: GpuSnapshot, procs: ProcSnapshot) -> AppState:
    """Return the state after one GPU + process sample (joined with the models at render time)."""
    return with_alerts(dataclasses.replace(state, gpu=gpu, procs=procs))


def apply_log_events(state: AppState, events: Sequence[LogEvent], **batch: Any) -> AppState:
    """Return the state after one batch of parsed log events (``batch``: ``logstate.apply_log``
    keywords); the model rows are re-derived when the loads changed."""
    log = apply_log(state.log, events, **batch)
    if state.last_ok is None:
        return with_alerts(dataclasses.replace(state, log=log))
    if log.loads is state.log.loads:  # per-request lines only: the slots may have changed
        models = with_slot_use(state.models, state.slots, log, state.last_ok)
    else:
        models = with_slot_use(tuple(model_view(m, state.last_ok, log) for m in state.last_ok.models), state.slots, log,
                               state.last_ok)
    return with_alerts(dataclasses.replace(state, log=log, models=models))


def apply_slots(state: AppState, snap: SlotsSnapshot) -> AppState:
    """Return the state after one ``/slots`` round (the rows' busy / total slots are re-derived, and a
    row whose slot count was only Ollama's default takes the count the runner reported)."""
    models = with_slot_use(state.models, snap, state.log, state.last_ok)
    if models == state.models and snap.runners == (state.slots.runners if state.slots is not None else ()):
        return state  # nothing a widget shows changed (the round's time alone does not repaint)
    new = dataclasses.replace(state, slots=snap, models=models)
    if any(a.parallel != b.parallel for a, b in zip(models, state.models, strict=False)):
        return with_alerts(new)  # the KV estimate covers another slot count: fixes change
    return new


def with_slot_use(models: tuple[ModelView, ...], slots: SlotsSnapshot | None, log: LogState,
                  snap: OllamaSnapshot | None = None) -> tuple[ModelView, ...]:
    """The rows with their ``slots`` re-derived from the ``/slots`` round and the log's slot lines.

    With ``snap`` (the snapshot the rows come from), a row whose slot count is only assumed
    (Ollama's default, or not known) while its runner's ``/slots`` lists its slots is derived
    again with that count as ``parallel`` (source ``reported``), so CONTEXT shows ``4096×2`` and
    the KV estimate covers every slot; a row is derived back when the runner stops answering.
    """
    era_c = sum(1 for v in models if v.load is not None and v.load.era == "C")
    rows = {(m.name, m.digest): m for m in snap.models} if snap is not None else {}
    out = []
    for v in models:
        use = slot_use(v, slots, log.recent, log.loads, era_c)
        m = rows.get((v.name, v.digest))
        if m is not None and snap is not None:
            wanted = _reported_parallel(v, use)
            if wanted != (v.parallel if v.parallel.source == "reported" else None):
                v = model_view(m, snap, log, reported_parallel=wanted)
                use = slot_use(v, slots, log.recent, log.loads, era_c)
        out.append(v if use == v.slots else dataclasses.replace(v, slots=use))
    return tuple(out)


def _reported_parallel(view: ModelView, use: SlotUse | None) -> Known[int] | None:
    """``parallel`` from the runner's ``/slots`` when the row's own count is only assumed, else None.

    A count the log allocated (``-np``, ``n_seq_max``) stays: it is the runner's own word too.
    """
    if use is None or use.source != "reported" or not use.total or view.cloud:
        return None
    if view.parallel.source not in ("default", "reported", None):
        return None
    return Known(use.total, "reported", f"{use.total} slots listed by {use.note}")


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


def _matching_load(m: PsModel, show: ShowInfo | None, log: LogState) -> tuple[Load | None, str]:
    """The log's newest load of this row's weights blob, if it describes this row's runner.

    The blob comes from ``/api/show``'s Modelfile ``FROM`` line and the runner's ``--model``
    (ollama-reference.md §1.6, §7). A load whose per-slot context differs from ``/api/ps``'s is
    an older runner of the same weights (the log started after the reload, or it was missed).
    """
    if not log.loads:
        return None, "no model load in the log read so far" if log.source else "no server log (--log)"
    blob = show.model_blob if show is not None else None
    if blob is None:
        return None, "the model's weights blob is not known (/api/show Modelfile has no FROM …/blobs/…)"
    load = log.latest_load(blob)
    if load is None:
        return None, f"the log read so far has no load of {blob[:19]}…"
    if m.context_length is not None and load.num_ctx_per_seq is not None and load.num_ctx_per_seq != m.context_length:
        return None, (f"the log's latest load of this model has num_ctx {load.num_ctx_per_seq}, /api/ps says"
                      f" {m.context_length}: that load is older than the running one")
    return load, f"runner log load #{load.index + 1} (line {load.first_line})"


def _sum(devices: Mapping[str, int] | None) -> int | None:
    return sum(devices.values()) if devices else None


def model_view(m: PsModel, snap: OllamaSnapshot, log: LogState | None = None, *,
               reported_parallel: Known[int] | None = None) -> ModelView:
    """Derive a ``ModelView`` from one ``/api/ps`` row, the cached ``/api/show`` / ``/api/tags``
    and, when the server log has this model's load, the runner's own numbers (``allocated``).

    ``reported_parallel``: the slot count the runner's ``GET /slots`` listed (source ``reported``);
    it replaces Ollama's default, never a count the log allocated.
    """
    log = log if log is not None else LogState()
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

    load, load_note = (None, "cloud model") if cloud else _matching_load(m, show, log)
    if load is not None:
        where = load_note
        if load.num_ctx_per_seq is not None and context.source != "reported":
            context = Known(load.num_ctx_per_seq, "allocated", f"{where}: n_ctx per sequence")
        if load.parallel is not None:
            parallel = Known(load.parallel, "allocated", f"{where}: slots (-np / n_seq_max / Parallel)")
        if load.kv_type_k is not None:
            kt, vt = load.kv_type_k, load.kv_type_v or load.kv_type_k
            kv_type = Known(kt if kt == vt else f"{kt}/{vt}", "allocated", f"{where}: K ({kt}), V ({vt})")
        if load.flash_attention is not None:
            flash = Known(load.flash_attention, "allocated",
                          f"{where}: {load.flash_attention_reason or 'resolved by the runner'}")
        elif load.flash_attention_requested is not None:
            flash = Known(load.flash_attention_requested, "requested",
                          f"{where}: requested, the log does not say what the runner resolved")

    if reported_parallel is not None and not cloud and parallel.source in ("default", None):
        parallel = reported_parallel
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
                type_k = load.kv_type_k if load is not None and load.kv_type_k else "f16"
                type_v = load.kv_type_v if load is not None and load.kv_type_v else type_k
                fa = flash.value != "disabled"
                per_token = kv.bytes_per_token(layout, type_k, type_v)
                if context.value is not None and parallel.value is not None:
                    kv_estimate = kv.kv_allocation(layout, context.value, parallel.value, type_k, type_v,
                                                   flash_attention=fa)
                else:
                    kv_unavailable = "num_ctx or slot count unknown"
            except ValueError as exc:
                kv_unavailable = str(exc)

    devices: Mapping[str, Mapping[str, int]] = load.memory if load is not None else {}
    if load is not None and load.kv_bytes is not None:
        note = f"{load_note}: allocated"
        if kv_estimate is not None:
            diff = load.kv_bytes - kv_estimate.total_bytes
            note += f"; kvtop's formula gives {kv_estimate.total_bytes:,} B ({'+' if diff >= 0 else ''}{diff:,} B)"
        kv_mem: Known[int] = Known(load.kv_bytes, "allocated", note)
    elif kv_estimate is not None:
        kv_mem = Known(kv_estimate.total_bytes, "estimated", kv_estimate.formula)
    else:
        kv_mem = Known(None, None, kv_unavailable or "")
    log_weights = _sum(devices.get("weights"))
    log_compute = _sum(devices.get("compute"))
    if log_weights is not None:
        weights: Known[int] = Known(log_weights, "allocated", f"{load_note}: model buffers on every device")
    elif tag is not None and tag.size_bytes is not None and not cloud:
        weights = Known(tag.size_bytes, "reported", "model file size from /api/tags")
    elif cloud:
        weights = Known(None, None, "cloud model: the weights are on the remote service")
    else:
        weights = Known(None, None, "model file size not known yet (/api/tags)")
    compute: Known[int] = Known(None, None, "needs weights and KV")
    if log_compute is not None:
        compute = Known(log_compute, "allocated", f"{load_note}: compute buffers on every device")
    elif m.size_bytes is not None and weights.value is not None and kv_mem.value is not None:
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
        model_blob=show.model_blob if show else None,
        load=load,
        load_note=load_note,
        devices=devices,
        findings=tuple(load.findings()) if load is not None else (),
        throughput=throughput(log, load, snap.taken_at) if load is not None else None,
        timings_note=("" if load is None or load.era == "C" else
                      "no timings in this Ollama version's log (llama-server runners, v0.30+, print them)"),
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
