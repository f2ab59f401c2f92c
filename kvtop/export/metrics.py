"""The exported metric families: their catalogue, what a scrape reads and how it is built.

Metrics (:data:`METRICS`) follow Prometheus conventions: base units in the name (``_bytes``,
``_seconds``, ``_ratio``, ``_celsius``, ``_watts``), ``_total`` counters, ``_info`` gauges of
value 1 carrying text as labels. Per-model series carry ``host``, ``model`` and ``digest`` and
exist only while the host's latest poll reached it (a dead server's last models are not
exported again as if current). Every label value passes :func:`label_value` (control, format and
bidi characters become U+FFFD, at most ``LABEL_MAX_CHARS``); prometheus-client escapes the rest.

A scrape reads one immutable :class:`HostView` per server and never triggers a poll;
:func:`build_metrics` turns the views into families (no I/O), :class:`KvtopCollector` serves
them to prometheus-client from a private registry (:func:`make_registry`).
"""

from __future__ import annotations

import functools
import threading
import time
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kvtop import __version__
from kvtop.export.log_counters import LogCounters
from kvtop.model.gpu_snapshots import GpuSnapshot
from kvtop.model.ledger import device_label, state_ledgers
from kvtop.model.snapshots import OllamaSnapshot
from kvtop.model.views import AppState, ModelView
from kvtop.redact import scrub_text

# --------------------------------------------------------------------------------------------
# Metric catalogue


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One exported metric family: its name (counters with ``_total``), type, help and labels."""

    name: str
    kind: Literal["gauge", "counter"]
    help: str
    labels: tuple[str, ...]


_HOST = ("host",)
_MODEL = ("host", "model", "digest")
_GPU = ("gpu", "name", "uuid")

METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("kvtop_exporter_info", "gauge", "kvtop's version (value 1)", ("version",)),
    MetricSpec("kvtop_exporter_scrapes_total", "counter", "Scrapes served since start", ()),
    MetricSpec(
        "kvtop_exporter_collect_duration_seconds",
        "gauge",
        "Time the served metrics took to build from the latest state (built once per poll and cached; "
        "no scrape makes a poll)",
        (),
    ),
    MetricSpec("kvtop_server_up", "gauge", "1 when the latest GET /api/ps answered with valid data, else 0", _HOST),
    MetricSpec("kvtop_server_info", "gauge", "The server's /api/version (value 1)", ("host", "version")),
    MetricSpec(
        "kvtop_server_tls_verified",
        "gauge",
        "https:// servers only: 1 when the server's certificate is checked (the system's CAs, or --cacert), "
        "0 when it is not checked (--insecure); a certificate that fails the check reads "
        "kvtop_server_up 0, with the reason on stderr",
        _HOST,
    ),
    MetricSpec("kvtop_server_polls_total", "counter", "Polls of GET /api/ps made (one per interval at most)", _HOST),
    MetricSpec(
        "kvtop_server_poll_failures_total",
        "counter",
        "Polls whose GET /api/ps failed (refused, timeout, HTTP error, invalid data)",
        _HOST,
    ),
    MetricSpec(
        "kvtop_server_poll_duration_seconds",
        "gauge",
        "Wall time of the latest poll (the first one also waits up to 1 s for /api/show)",
        _HOST,
    ),
    MetricSpec("kvtop_server_last_poll_timestamp_seconds", "gauge", "Unix time of the latest poll", _HOST),
    MetricSpec(
        "kvtop_server_last_success_timestamp_seconds",
        "gauge",
        "Unix time of the latest poll that reached the server",
        _HOST,
    ),
    MetricSpec("kvtop_model_size_bytes", "gauge", "Memory of the loaded model: /api/ps size (reported)", _MODEL),
    MetricSpec("kvtop_model_vram_bytes", "gauge", "Part of size in GPU memory: /api/ps size_vram (reported)", _MODEL),
    MetricSpec(
        "kvtop_model_memory_bytes",
        "gauge",
        "size split into weights, KV cache and compute buffers; source: allocated (server log), "
        "reported (API) or estimated (kvtop's KV arithmetic)",
        (*_MODEL, "part", "source"),
    ),
    MetricSpec(
        "kvtop_model_ledger_bytes",
        "gauge",
        "The model's memory ledger (kvtop/model/ledger.py): each part on each device as the runner log lists it "
        "(component: weights, kv, kv_swa, recurrent, compute, output, projector, draft, prompt_cache, checkpoints; "
        "device as llama.cpp names it, host, ? or other); source: allocated, estimated, reported",
        (*_MODEL, "component", "device", "source"),
    ),
    MetricSpec(
        "kvtop_model_ledger_measured_bytes",
        "gauge",
        "The model's runner memory NVML measures (reported): per paired log GPU device, and device=GPUs for all of "
        "its GPUs; absent when not measured",
        (*_MODEL, "device"),
    ),
    MetricSpec(
        "kvtop_model_ledger_unexplained_bytes",
        "gauge",
        "Measured minus listed (estimated) on the same device(s): memory the log does not explain, negative when it "
        "lists more than is measured; absent when not measured",
        (*_MODEL, "device"),
    ),
    MetricSpec(
        "kvtop_model_context_tokens",
        "gauge",
        "num_ctx per slot; source: allocated (log), runner (/props), reported (/api/ps), requested (command line, Modelfile) or service (environment)",
        (*_MODEL, "source"),
    ),
    MetricSpec(
        "kvtop_model_slots",
        "gauge",
        "Parallel slots; source: allocated (log), runner (/props, /slots), requested (-np), service (OLLAMA_NUM_PARALLEL) or default (1)",
        (*_MODEL, "source"),
    ),
    MetricSpec(
        "kvtop_model_slots_busy",
        "gauge",
        "Slots serving a request now; source: runner (/slots) or estimated (the runner log's slot lines); "
        "equal to kvtop_model_slots: a new request for the model waits",
        (*_MODEL, "source"),
    ),
    MetricSpec(
        "kvtop_model_cpu_ratio",
        "gauge",
        "(size - size_vram) / size: the share in system RAM, the figure ollama ps rounds to a percentage",
        _MODEL,
    ),
    MetricSpec("kvtop_model_spilled", "gauge", "1 when part of the model is in system RAM (size_vram < size)", _MODEL),
    MetricSpec(
        "kvtop_model_info",
        "gauge",
        "The model's settings as text (value 1); engine: the runner serving it (llama.cpp, ollama, mlx), as --once's RUNNER; *_source: allocated (log), requested (runner command line), service (server environment), reported (/api/ps), runner or default; '' = not known",
        (
            *_MODEL,
            "blob",
            "architecture",
            "parameter_size",
            "quantization",
            "processor",
            "kv_type",
            "kv_type_source",
            "flash_attention",
            "flash_attention_source",
            "engine",
            "engine_source",
        ),
    ),
    MetricSpec(
        "kvtop_model_expires_timestamp_seconds", "gauge", "Unix time of /api/ps expires_at (keep-alive end)", _MODEL
    ),
    MetricSpec(
        "kvtop_model_prefill_tokens_per_second",
        "gauge",
        "Prompt processing speed of the model's newest request (server log timing lines)",
        _MODEL,
    ),
    MetricSpec(
        "kvtop_model_decode_tokens_per_second",
        "gauge",
        "Generation speed of the model's newest request (server log timing lines)",
        _MODEL,
    ),
    MetricSpec(
        "kvtop_log_up", "gauge", "1 while the server log is being read, 0 while its source fails", ("host", "source")
    ),
    MetricSpec("kvtop_log_lines_total", "counter", "Server log lines read", _HOST),
    MetricSpec(
        "kvtop_prompt_truncations_total",
        "counter",
        "Prompts the runner truncated to fit the context, by the weights blob of the load that printed it "
        "('' when the log names none); join kvtop_model_info on blob for the model",
        ("host", "blob"),
    ),
    MetricSpec(
        "kvtop_model_reloads_total",
        "counter",
        "Loads of a weights blob the log had already shown loading (0 from its first load on)",
        ("host", "blob"),
    ),
    MetricSpec(
        "kvtop_requests_in_flight",
        "gauge",
        "TCP connections established to a local server's API port, kvtop's own left out (estimated: "
        "idle keep-alive connections count too)",
        _HOST,
    ),
    MetricSpec(
        "kvtop_requests_waiting",
        "gauge",
        "Requests waiting for a slot (estimated: connections beyond the busy slots while a model has every "
        "slot busy; 0 while every model has a free slot)",
        _HOST,
    ),
    MetricSpec(
        "kvtop_request_oldest_wait_seconds",
        "gauge",
        "How long the oldest waiting request has waited (estimated from when kvtop first saw its connection)",
        _HOST,
    ),
    MetricSpec(
        "kvtop_alerts",
        "gauge",
        "Active alerts (kvtop's alert rules), by kind, severity and model ('' = none)",
        ("host", "kind", "severity", "model"),
    ),
    MetricSpec(
        "kvtop_gpu_telemetry_up",
        "gauge",
        "1 when a GPU of this machine reported data (NVML, AMD or Intel sysfs, Apple ioreg), 0 otherwise",
        (),
    ),
    MetricSpec(
        "kvtop_gpu_unified_memory",
        "gauge",
        "1 when the GPU shares system RAM (Apple Silicon, NVIDIA GB10 / Jetson): its memory figures are the RAM's",
        _GPU,
    ),
    MetricSpec("kvtop_gpu_memory_total_bytes", "gauge", "GPU memory (reported by the driver)", _GPU),
    MetricSpec("kvtop_gpu_memory_used_bytes", "gauge", "GPU memory in use (reported by the driver)", _GPU),
    MetricSpec("kvtop_gpu_memory_free_bytes", "gauge", "Free GPU memory (reported by the driver)", _GPU),
    MetricSpec("kvtop_gpu_utilization_ratio", "gauge", "GPU utilization over the driver's sample period, 0–1", _GPU),
    MetricSpec("kvtop_gpu_temperature_celsius", "gauge", "GPU temperature", _GPU),
    MetricSpec("kvtop_gpu_power_watts", "gauge", "GPU power draw", _GPU),
    MetricSpec("kvtop_system_ram_total_bytes", "gauge", "RAM of this machine (a spilled model lives here)", ()),
    MetricSpec("kvtop_system_ram_available_bytes", "gauge", "RAM available on this machine", ()),
    MetricSpec("kvtop_system_swap_used_bytes", "gauge", "Swap in use on this machine", ()),
)
"""Every family the exporter serves, in output order (docs/metrics.md lists them)."""

_SPECS: Mapping[str, MetricSpec] = MappingProxyType({m.name: m for m in METRICS})

# --------------------------------------------------------------------------------------------
# What a scrape reads


@dataclass(frozen=True, slots=True)
class HostView:
    """Everything a scrape exports about one server: an immutable snapshot, replaced whole.

    Attributes:
        url: The server's base URL (the ``host`` label).
        local: The server runs on this machine (GPU telemetry is joined to it).
        log: Whether a server log is read for this host.
        state: The latest ``AppState`` (the engine's, after its latest apply step).
        polls / poll_failures: ``GET /api/ps`` polls made and failed.
        poll_duration_s: Wall time of the latest poll, None before the first.
        counters: Log-derived counters.
        tls_verified: For an ``https://`` server, whether its certificate is verified (False with
            ``--insecure``); None for plain ``http://``.
    """

    url: str
    local: bool
    log: bool
    state: AppState
    polls: int = 0
    poll_failures: int = 0
    poll_duration_s: float | None = None
    counters: LogCounters = LogCounters()
    tls_verified: bool | None = None


@functools.cache
def _templates() -> dict[str, Metric]:
    """One empty family per :data:`METRICS` entry, made once (prometheus-client validates the name
    in each constructor: ~60 µs a family, 40 families per render)."""
    out: dict[str, Metric] = {}
    for spec in METRICS:
        cls = CounterMetricFamily if spec.kind == "counter" else GaugeMetricFamily
        out[spec.name] = cls(spec.name, spec.help, labels=spec.labels)
    return out


def empty_family(name: str) -> Metric:
    """A new, empty family ``name``: a copy of its template with its own samples list."""
    template = _templates()[name]
    fam = object.__new__(type(template))
    fam.__dict__.update(template.__dict__)
    fam.samples = []
    return fam


def _families() -> dict[str, Metric]:
    return {name: empty_family(name) for name in _templates()}


LABEL_MAX_CHARS = 256
"""Longest label value exported; a longer one (a hostile server's) is cut, ending in ``…``."""

_LABEL_UNSAFE = frozenset(("Cc", "Cf", "Cs", "Co"))


@functools.lru_cache(maxsize=8192)
def label_value(text: str) -> str:
    """``text`` made safe as a label value: every control, format (bidi overrides, zero-width),
    surrogate and private-use character becomes U+FFFD; other printable text (any script, emoji)
    is kept; at most ``LABEL_MAX_CHARS`` characters. Label values come from the server
    (``/api/ps`` names, ``/api/show`` architecture…) and the log: a raw ESC must never reach a
    terminal that shows ``/metrics``. Secrets are masked first (``kvtop.redact.scrub_text``: a model
    name a server echoes with ``user:pass@`` or ``?token=``, the secrets this exporter was given)."""
    text = scrub_text(text)
    if not (text.isascii() and text.isprintable()):
        text = "".join("\ufffd" if unicodedata.category(c) in _LABEL_UNSAFE else c for c in text)
    if len(text) > LABEL_MAX_CHARS:
        text = text[: LABEL_MAX_CHARS - 1] + "…"
    return text


def _add(fams: Mapping[str, Metric], name: str, labels: Sequence[str], value: float | None) -> None:
    if value is None:
        return
    fam = fams[name]
    assert len(labels) == len(_SPECS[name].labels), name
    fam.add_metric([label_value(x) for x in labels], float(value))  # type: ignore[attr-defined]


def _model_metrics(fams: Mapping[str, Metric], host: str, v: ModelView) -> None:
    base = (host, v.name, v.digest)
    _add(fams, "kvtop_model_size_bytes", base, v.size_bytes)
    _add(fams, "kvtop_model_vram_bytes", base, v.size_vram_bytes)
    for part, known in (("weights", v.memory.weights), ("kv", v.memory.kv), ("compute", v.memory.compute)):
        _add(fams, "kvtop_model_memory_bytes", (*base, part, known.source or ""), known.value)
    _add(fams, "kvtop_model_context_tokens", (*base, v.context.source or ""), v.context.value)
    _add(fams, "kvtop_model_slots", (*base, v.parallel.source or ""), v.parallel.value)
    if v.slots is not None:
        _add(fams, "kvtop_model_slots_busy", (*base, v.slots.source or ""), v.slots.busy)
    if v.size_bytes and v.size_vram_bytes is not None and 0 <= v.size_vram_bytes <= v.size_bytes:
        _add(fams, "kvtop_model_cpu_ratio", base, (v.size_bytes - v.size_vram_bytes) / v.size_bytes)
    if v.size_bytes is not None and v.size_vram_bytes is not None:
        _add(fams, "kvtop_model_spilled", base, 1 if v.spilled else 0)
    _add(
        fams,
        "kvtop_model_info",
        (
            *base,
            v.model_blob or "",
            v.architecture or "",
            v.parameter_size or "",
            v.quantization_level or "",
            v.processor,
            v.kv_type.value or "",
            v.kv_type.source or "",
            v.flash_attention.value or "",
            v.flash_attention.source or "",
            v.engine.value or "",
            v.engine.source or "",
        ),
        1,
    )
    if v.expires_at is not None:
        try:
            _add(fams, "kvtop_model_expires_timestamp_seconds", base, v.expires_at.timestamp())
        except (OverflowError, OSError, ValueError):
            pass
    if v.throughput is not None:
        _add(fams, "kvtop_model_prefill_tokens_per_second", base, v.throughput.last_prefill_tps)
    _add(fams, "kvtop_model_decode_tokens_per_second", base, v.decode_tps.value)


ModelMemo = dict[tuple[str, str, str], tuple[ModelView, dict[str, list[Any]]]]
"""(host, model name, digest) -> (the model's view, its samples by family) of the previous build."""


class _Scratch(dict[str, Metric]):
    """Families made on first use: where one model's samples are collected for the memo."""

    def __missing__(self, name: str) -> Metric:
        fam = self[name] = empty_family(name)
        return fam


def _memo_model_metrics(fams: Mapping[str, Metric], host: str, v: ModelView, memo: ModelMemo, kept: ModelMemo) -> None:
    """``_model_metrics``, reusing the samples of the previous build when the model's view is
    equal (every figure the same: most models, poll after poll)."""
    key = (host, v.name, v.digest)
    old = memo.get(key)
    if old is not None and (old[0] is v or old[0] == v):
        by_family = old[1]
    else:
        scratch = _Scratch()
        _model_metrics(scratch, host, v)
        by_family = {name: fam.samples for name, fam in scratch.items()}
    kept[key] = (v, by_family)
    for name, samples in by_family.items():
        fams[name].samples.extend(samples)


def _ledger_metrics(fams: Mapping[str, Metric], host: str, state: AppState) -> None:
    """Every loaded model's memory ledger (``model.ledger.state_ledgers``: the GPU and process samples are in it, so
    not memoised with the model's view)."""
    for (name, digest), ledger in state_ledgers(state).items():
        base = (host, name, digest)
        for r in ledger.rows:
            _add(fams, "kvtop_model_ledger_bytes", (*base, r.component, device_label(r.device), r.source), r.bytes)
        for m in ledger.measures:
            if m.measured.value is None:
                continue
            device = device_label(m.scope)
            _add(fams, "kvtop_model_ledger_measured_bytes", (*base, device), m.measured.value)
            _add(fams, "kvtop_model_ledger_unexplained_bytes", (*base, device), m.remainder_bytes)


def _host_metrics(
    fams: Mapping[str, Metric], hv: HostView, memo: ModelMemo | None = None, kept: ModelMemo | None = None
) -> None:
    host, state = hv.url, hv.state
    snap: OllamaSnapshot | None = state.ollama
    _add(fams, "kvtop_server_up", (host,), 1 if state.reachable else 0)
    version = state.last_ok.version if state.last_ok is not None else None
    if version:
        _add(fams, "kvtop_server_info", (host, version), 1)
    if hv.tls_verified is not None:
        _add(fams, "kvtop_server_tls_verified", (host,), 1 if hv.tls_verified else 0)
    _add(fams, "kvtop_server_polls_total", (host,), hv.polls)
    _add(fams, "kvtop_server_poll_failures_total", (host,), hv.poll_failures)
    _add(fams, "kvtop_server_poll_duration_seconds", (host,), hv.poll_duration_s)
    if snap is not None:
        _add(fams, "kvtop_server_last_poll_timestamp_seconds", (host,), snap.taken_at)
    if state.last_ok is not None:
        _add(fams, "kvtop_server_last_success_timestamp_seconds", (host,), state.last_ok.taken_at)
    if state.reachable:
        for v in state.models:
            if memo is not None and kept is not None:
                _memo_model_metrics(fams, host, v, memo, kept)
            else:
                _model_metrics(fams, host, v)
        _ledger_metrics(fams, host, state)
    if hv.log:
        _add(fams, "kvtop_log_up", (host, state.log.source or ""), 1 if state.log.ok else 0)
        _add(fams, "kvtop_log_lines_total", (host,), state.log.lines)
        for blob, n in sorted(hv.counters.truncations.items()):
            _add(fams, "kvtop_prompt_truncations_total", (host, blob), n)
        for blob, n in sorted(hv.counters.reloads.items()):
            _add(fams, "kvtop_model_reloads_total", (host, blob), n)
    queue = state.queue
    if queue is not None and queue.error is None:
        _add(fams, "kvtop_requests_in_flight", (host,), queue.in_flight)
        _add(fams, "kvtop_requests_waiting", (host,), queue.waiting)
        if queue.waiting:
            _add(fams, "kvtop_request_oldest_wait_seconds", (host,), queue.oldest_wait_s)
    active: dict[tuple[str, str, str], int] = {}
    for a in (*state.alerts, *state.past_alerts):  # as --check counts them: every alert of the window
        key = (a.kind, a.severity, a.model or "")
        active[key] = active.get(key, 0) + 1
    for (kind, severity, model), n in sorted(active.items()):
        _add(fams, "kvtop_alerts", (host, kind, severity, model), n)


def _gpu_metrics(fams: Mapping[str, Metric], gpu: GpuSnapshot) -> None:
    _add(fams, "kvtop_gpu_telemetry_up", (), 1 if gpu.ok else 0)
    for d in gpu.devices:
        if d.error is not None:
            continue
        labels = (str(d.index), d.name or "", d.uuid or "")
        _add(fams, "kvtop_gpu_unified_memory", labels, 1 if d.unified_memory else 0)
        _add(fams, "kvtop_gpu_memory_total_bytes", labels, d.memory_total_bytes)
        _add(fams, "kvtop_gpu_memory_used_bytes", labels, d.memory_used_bytes)
        _add(fams, "kvtop_gpu_memory_free_bytes", labels, d.memory_free_bytes)
        _add(
            fams,
            "kvtop_gpu_utilization_ratio",
            labels,
            None if d.gpu_util_percent is None else d.gpu_util_percent / 100,
        )
        _add(fams, "kvtop_gpu_temperature_celsius", labels, d.temperature_c)
        _add(fams, "kvtop_gpu_power_watts", labels, None if d.power_draw_mw is None else d.power_draw_mw / 1000)
    if gpu.system is not None:
        _add(fams, "kvtop_system_ram_total_bytes", (), gpu.system.ram_total_bytes)
        _add(fams, "kvtop_system_ram_available_bytes", (), gpu.system.ram_available_bytes)
        _add(fams, "kvtop_system_swap_used_bytes", (), gpu.system.swap_used_bytes)


def build_metrics(
    hosts: Iterable[HostView], gpu: GpuSnapshot | None, *, scrapes: int | None = 0, memo: ModelMemo | None = None
) -> list[Metric]:
    """The metric families for one scrape, from the latest views only (no I/O, no poll).

    Args:
        hosts: One view per server, in ``--host`` order.
        gpu: This machine's latest GPU sample, None when none is taken (no host on this machine)
            or before the first one.
        scrapes: Scrapes served so far, this one included; None leaves
            ``kvtop_exporter_scrapes_total`` out (:class:`MetricsCache` adds it per scrape).
        memo: The per-model samples of the previous build (:class:`MetricsCache` keeps it): a
            model whose view is equal reuses them. It is replaced in place by this build's (the
            models exported now only). None builds every sample.

    Returns:
        The families of :data:`METRICS` that have samples, in that order (the same with or
        without ``memo``).
    """
    t0 = time.perf_counter()
    fams = _families()
    _add(fams, "kvtop_exporter_info", (__version__,), 1)
    _add(fams, "kvtop_exporter_scrapes_total", (), scrapes)
    kept: ModelMemo | None = {} if memo is not None else None
    for hv in hosts:
        _host_metrics(fams, hv, memo, kept)
    if memo is not None and kept is not None:
        memo.clear()
        memo.update(kept)
    if gpu is not None:
        _gpu_metrics(fams, gpu)
    _add(fams, "kvtop_exporter_collect_duration_seconds", (), time.perf_counter() - t0)
    return [f for f in fams.values() if f.samples]


class KvtopCollector(Collector):
    """A prometheus-client custom collector over the exporter's latest views.

    Register it in a private ``CollectorRegistry`` (:func:`make_registry`): the global default
    registry would add process metrics and be shared with anything else in the process.
    ``collect`` runs in the HTTP server's threads; it reads immutable views that the pollers
    replace whole, so it needs no lock and never waits for a poll.
    """

    def __init__(self, views: Callable[[], Sequence[HostView]], gpu: Callable[[], GpuSnapshot | None]) -> None:
        self._views = views
        self._gpu = gpu
        self._lock = threading.Lock()
        self._scrapes = 0

    def describe(self) -> Iterable[Metric]:
        """Nothing to pre-declare (the registry then never calls ``collect`` at registration)."""
        return ()

    def collect(self) -> Iterable[Metric]:
        """The families of one scrape (:func:`build_metrics`), built anew (uncached)."""
        return build_metrics(self._views(), self._gpu(), scrapes=self.count_scrape())

    def count_scrape(self) -> int:
        """Count one scrape served; returns the count, this one included (thread-safe)."""
        with self._lock:
            self._scrapes += 1
            return self._scrapes

    def latest(self) -> tuple[tuple[HostView, ...], GpuSnapshot | None]:
        """The views and GPU sample a scrape exports now."""
        return tuple(self._views()), self._gpu()


class FixedFamilies:
    """A prometheus-client "registry" that yields fixed families (what the encoders take)."""

    def __init__(self, families: Sequence[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return self._families


def make_registry(collector: KvtopCollector) -> CollectorRegistry:
    """A fresh registry holding only ``collector`` (no default process/platform collectors)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry
