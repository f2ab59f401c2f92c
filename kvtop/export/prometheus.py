"""``kvtop export prometheus``: serve kvtop's per-model memory figures on ``/metrics``.

Usage::

    kvtop export prometheus [--listen HOST:PORT] [--host URL ...] [--interval S] [--timeout S]
                            [--log SPEC] [--config PATH]

Headless (no TUI). The dashboard's own engine (``kvtop.engine.Engine``) polls every ``--host``,
sleeping ``--interval`` after each sample, and folds each interval's samples in one apply step
(one alert evaluation per host); each step is published to the hosts' views, so a server is
polled at most once per interval whatever the number of scrapers: a scrape only reads the
latest state of each host (:class:`HostView`) and never triggers a poll. Every host has its own
task, and every request a hard deadline, so a slow or dead server delays no other.

GPU and process telemetry (``sources.gpu.GpuSource`` + ``sources.procs.ProcSource``) describe
the machine kvtop runs on: they are sampled only when a host is on this
machine (:func:`host_is_this_machine`) and joined to those hosts only. The server log
(``--log``; default ``none``) is the log of the first ``--host``: its events give the
``allocated`` figures, the tokens-per-second gauges and the truncation and reload counters.

Metrics (:data:`METRICS`) follow Prometheus conventions: base units in the name (``_bytes``,
``_seconds``, ``_ratio``, ``_celsius``, ``_watts``), ``_total`` counters, ``_info`` gauges of
value 1 carrying text as labels. Per-model series carry ``host``, ``model`` and ``digest`` and
exist only while the host's latest poll reached it (a dead server's last models are not
re-exported as if current). Every label value passes :func:`label_value` (control, format and
bidi characters become U+FFFD, at most ``LABEL_MAX_CHARS``); prometheus-client escapes the rest.

HTTP (:class:`MetricsServer`): prometheus-client's WSGI app behind waitress: connections are
handled by one I/O thread (select/poll), requests by a fixed pool of ``SERVER_THREADS`` workers;
listen backlog ``SERVER_BACKLOG``; a connection idle for ``CHANNEL_TIMEOUT_S`` is closed, and
so is one whose request has not arrived whole ``REQUEST_DEADLINE_S`` after its first byte (a
slowloris client trickling a byte at a time) or whose answer is not read ``RESPONSE_DEADLINE_S``
after it was ready; one client address may keep at most ``PER_CLIENT_PENDING`` connections
stalled so; at most
``CONNECTION_LIMIT`` connections are open at once, and at the limit a new one evicts a stalled
one (of the address holding the most first), else the one idle longest (``kvtop.export.httpguard``). ``GET /metrics`` (and ``/``, as
prometheus-client's own server did) serve the metrics, ``HEAD`` too; other paths answer 404,
other methods 405.

Exit status: 0 after SIGTERM or SIGINT; 2 for bad arguments or an address it cannot listen on;
``textfile --once``: 0 once written, 2 when it cannot be written or a server's TLS certificate or
credentials were refused (written all the same, the error said on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import functools
import ipaddress
import os
import signal
import sys
import threading
import time
import unicodedata
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, NoReturn

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kvtop import __version__
from kvtop.config import ConfigError, HostError, parse_host_access, parse_ollama_host, resolve_config, server_accesses
from kvtop.logparse.events import LogEvent, Truncation
from kvtop.logparse.loads import Load
from kvtop.model.gpu import GpuSnapshot
from kvtop.redact import scrub_text
from kvtop.model.snapshots import OllamaSnapshot
from kvtop.sources.hosts import host_is_this_machine, local_addresses
from kvtop.sources.protocols import GpuSourceLike, OllamaSource, ProcSourceLike, SlotsSourceLike
from kvtop.model.state import AppState, ModelView, initial_state

if TYPE_CHECKING:

    from kvtop.engine import Notice, Step
    from kvtop.sources.tail import LogSource

EXIT_OK = 0
EXIT_ERROR = 2

DEFAULT_LISTEN = "127.0.0.1:9877"
"""Where ``/metrics`` is served unless ``--listen`` says otherwise (loopback only)."""



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
    MetricSpec("kvtop_exporter_collect_duration_seconds", "gauge",
               "Time the served metrics took to build from the latest state (built once per poll and cached; "
               "no scrape makes a poll)", ()),
    MetricSpec("kvtop_server_up", "gauge", "1 when the latest GET /api/ps answered with valid data, else 0", _HOST),
    MetricSpec("kvtop_server_info", "gauge", "The server's /api/version (value 1)", ("host", "version")),
    MetricSpec("kvtop_server_tls_verified", "gauge",
               "https:// servers only: 1 when the server's certificate is checked (the system's CAs, or --cacert), "
               "0 when it is not checked (--insecure); a certificate that fails the check reads "
               "kvtop_server_up 0, with the reason on stderr", _HOST),
    MetricSpec("kvtop_server_polls_total", "counter", "Polls of GET /api/ps made (one per interval at most)", _HOST),
    MetricSpec("kvtop_server_poll_failures_total", "counter",
               "Polls whose GET /api/ps failed (refused, timeout, HTTP error, invalid data)", _HOST),
    MetricSpec("kvtop_server_poll_duration_seconds", "gauge",
               "Wall time of the latest poll (the first one also waits up to 1 s for /api/show)", _HOST),
    MetricSpec("kvtop_server_last_poll_timestamp_seconds", "gauge", "Unix time of the latest poll", _HOST),
    MetricSpec("kvtop_server_last_success_timestamp_seconds", "gauge",
               "Unix time of the latest poll that reached the server", _HOST),
    MetricSpec("kvtop_model_size_bytes", "gauge", "Memory of the loaded model: /api/ps size (reported)", _MODEL),
    MetricSpec("kvtop_model_vram_bytes", "gauge", "Part of size in GPU memory: /api/ps size_vram (reported)", _MODEL),
    MetricSpec("kvtop_model_memory_bytes", "gauge",
               "size split into weights, KV cache and compute buffers; source: allocated (server log), "
               "reported (API) or estimated (kvtop's KV arithmetic)", (*_MODEL, "part", "source")),
    MetricSpec("kvtop_model_context_tokens", "gauge",
               "num_ctx per slot; source: allocated (log), runner (/props), reported (/api/ps), requested (command line, Modelfile) or service (environment)",
               (*_MODEL, "source")),
    MetricSpec("kvtop_model_slots", "gauge",
               "Parallel slots; source: allocated (log), runner (/props, /slots), requested (-np), service (OLLAMA_NUM_PARALLEL) or default (1)",
               (*_MODEL, "source")),
    MetricSpec("kvtop_model_cpu_ratio", "gauge",
               "(size - size_vram) / size: the share in system RAM, the figure ollama ps rounds to a percentage",
               _MODEL),
    MetricSpec("kvtop_model_spilled", "gauge", "1 when part of the model is in system RAM (size_vram < size)", _MODEL),
    MetricSpec("kvtop_model_info", "gauge",
               "The model's settings as text (value 1); *_source: allocated (log), requested (runner command line), service (server environment) or default; '' = not known",
               (*_MODEL, "blob", "architecture", "parameter_size", "quantization", "processor", "kv_type",
                "kv_type_source", "flash_attention", "flash_attention_source")),
    MetricSpec("kvtop_model_expires_timestamp_seconds", "gauge", "Unix time of /api/ps expires_at (keep-alive end)",
               _MODEL),
    MetricSpec("kvtop_model_prefill_tokens_per_second", "gauge",
               "Prompt processing speed of the model's newest request (server log timing lines)", _MODEL),
    MetricSpec("kvtop_model_decode_tokens_per_second", "gauge",
               "Generation speed of the model's newest request (server log timing lines)", _MODEL),
    MetricSpec("kvtop_log_up", "gauge", "1 while the server log is being read, 0 while its source fails",
               ("host", "source")),
    MetricSpec("kvtop_log_lines_total", "counter", "Server log lines read", _HOST),
    MetricSpec("kvtop_prompt_truncations_total", "counter",
               "Prompts the runner truncated to fit the context, by the weights blob of the load that printed it "
               "('' when the log names none); join kvtop_model_info on blob for the model", ("host", "blob")),
    MetricSpec("kvtop_model_reloads_total", "counter",
               "Loads of a weights blob the log had already shown loading (0 from its first load on)",
               ("host", "blob")),
    MetricSpec("kvtop_alerts", "gauge", "Active alerts (kvtop's alert rules), by kind, severity and model ('' = none)",
               ("host", "kind", "severity", "model")),
    MetricSpec("kvtop_gpu_telemetry_up", "gauge",
               "1 when a GPU of this machine reported data (NVML, AMD or Intel sysfs, Apple ioreg), 0 otherwise", ()),
    MetricSpec("kvtop_gpu_unified_memory", "gauge",
               "1 when the GPU shares system RAM (Apple Silicon, NVIDIA GB10 / Jetson): its memory figures are the RAM's",
               _GPU),
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
# Log-derived counters (pure)


@dataclass(frozen=True, slots=True)
class LogCounters:
    """Counters derived from the server log, kept by the exporter so they only ever grow.

    ``LogState`` keeps a bounded window of events; these counts are taken from each batch as
    it arrives, so trimming the window never lowers them.

    Attributes:
        truncations: ``kvtop_prompt_truncations_total`` by weights blob (``""`` = unknown); 0 from a
            blob's first load, so the series exists before its first truncation and PromQL's
            ``increase()`` counts that one (a series that appears at 1 shows no increase).
        reloads: ``kvtop_model_reloads_total`` by weights blob; 0 after a blob's first load.
        counted_loads: First log line of every load already counted (loads in the window only).
    """

    truncations: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    reloads: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    counted_loads: frozenset[int] = frozenset()


def count_log(counters: LogCounters, events: Sequence[LogEvent], loads: Sequence[Load]) -> LogCounters:
    """Return the counters after one batch of parsed events.

    Args:
        counters: The counts so far.
        events: The batch's events (a ``Truncation`` counts once, for the load that was
            running when its line was printed: the newest load that began at or before it).
        loads: The log state's loads after the batch (``LogState.loads``, log order). A load
            counts once its weights blob is known: as the first load of that blob, or as a
            reload when an earlier load of the same blob was seen.

    Returns:
        ``counters`` itself when nothing changed, else new counters.
    """
    truncations = dict(counters.truncations)
    starts = [ld.first_line for ld in loads]
    for e in events:
        if isinstance(e, Truncation):
            i = bisect.bisect_right(starts, e.line_no) - 1
            blob = (loads[i].model_blob or "") if i >= 0 else ""
            truncations[blob] = truncations.get(blob, 0) + 1
    reloads = dict(counters.reloads)
    counted = set(counters.counted_loads)
    for load in loads:
        if load.model_blob is None or load.first_line in counted:
            continue
        counted.add(load.first_line)
        if load.model_blob in reloads:
            reloads[load.model_blob] += 1
        else:
            reloads[load.model_blob] = 0
        truncations.setdefault(load.model_blob, 0)
    if starts:  # loads dropped from the window never come back: forget their lines
        counted = {n for n in counted if n >= starts[0]}
    if truncations == counters.truncations and reloads == counters.reloads and counted == counters.counted_loads:
        return counters
    return LogCounters(MappingProxyType(truncations), MappingProxyType(reloads), frozenset(counted))


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


def _family(name: str) -> Metric:
    """A new, empty family ``name``: a copy of its template with its own samples list."""
    template = _templates()[name]
    fam = object.__new__(type(template))
    fam.__dict__.update(template.__dict__)
    fam.samples = []
    return fam


def _families() -> dict[str, Metric]:
    return {name: _family(name) for name in _templates()}


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
    if v.size_bytes and v.size_vram_bytes is not None and 0 <= v.size_vram_bytes <= v.size_bytes:
        _add(fams, "kvtop_model_cpu_ratio", base, (v.size_bytes - v.size_vram_bytes) / v.size_bytes)
    if v.size_bytes is not None and v.size_vram_bytes is not None:
        _add(fams, "kvtop_model_spilled", base, 1 if v.spilled else 0)
    _add(fams, "kvtop_model_info", (
        *base, v.model_blob or "", v.architecture or "", v.parameter_size or "", v.quantization_level or "",
        v.processor, v.kv_type.value or "", v.kv_type.source or "", v.flash_attention.value or "",
        v.flash_attention.source or "",
    ), 1)
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
        fam = self[name] = _family(name)
        return fam


def _memo_model_metrics(fams: Mapping[str, Metric], host: str, v: ModelView, memo: ModelMemo,
                        kept: ModelMemo) -> None:
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


def _host_metrics(fams: Mapping[str, Metric], hv: HostView, memo: ModelMemo | None = None,
                  kept: ModelMemo | None = None) -> None:
    host, state = hv.url, hv.state
    snap: OllamaSnapshot | None = state.ollama
    _add(fams, "kvtop_server_up", (host,), 1 if state.reachable else 0)
    version = (state.last_ok.version if state.last_ok is not None else None)
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
    if hv.log:
        _add(fams, "kvtop_log_up", (host, state.log.source or ""), 1 if state.log.ok else 0)
        _add(fams, "kvtop_log_lines_total", (host,), state.log.lines)
        for blob, n in sorted(hv.counters.truncations.items()):
            _add(fams, "kvtop_prompt_truncations_total", (host, blob), n)
        for blob, n in sorted(hv.counters.reloads.items()):
            _add(fams, "kvtop_model_reloads_total", (host, blob), n)
    active: dict[tuple[str, str, str], int] = {}
    for a in state.alerts:
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
        _add(fams, "kvtop_gpu_utilization_ratio", labels,
             None if d.gpu_util_percent is None else d.gpu_util_percent / 100)
        _add(fams, "kvtop_gpu_temperature_celsius", labels, d.temperature_c)
        _add(fams, "kvtop_gpu_power_watts", labels, None if d.power_draw_mw is None else d.power_draw_mw / 1000)
    if gpu.system is not None:
        _add(fams, "kvtop_system_ram_total_bytes", (), gpu.system.ram_total_bytes)
        _add(fams, "kvtop_system_ram_available_bytes", (), gpu.system.ram_available_bytes)
        _add(fams, "kvtop_system_swap_used_bytes", (), gpu.system.swap_used_bytes)


def build_metrics(hosts: Iterable[HostView], gpu: GpuSnapshot | None, *, scrapes: int | None = 0,
                  memo: ModelMemo | None = None) -> list[Metric]:
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


class _Families:
    """A prometheus-client "registry" that yields fixed families (what the encoders take)."""

    def __init__(self, families: Sequence[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return self._families


_OPENMETRICS_EOF = b"# EOF\n"

SCRAPED_RECENTLY_S = 300.0
"""A scrape within this many seconds makes the exporter render ``/metrics`` after the poll that
precedes the next expected scrape (:meth:`MetricsCache.prerender`), so scrapes are served from
cache; with no scraper it renders nothing until one comes."""

CACHED_FORMATS = 4
"""Encodings (text, OpenMetrics, their versions) kept rendered at once; a scraper asking for yet
another one evicts the oldest."""


@dataclass
class _Rendered:
    """One encoding of the cached families: its encoder, whether it is OpenMetrics (its body ends
    in ``# EOF``, added per scrape after the counter), the body without the per-scrape counter, and
    (once a scraper asked for gzip) the gzip stream of that prefix with the compressor's state,
    copied per scrape to append the tail."""

    encoder: Callable[[Any], bytes]
    prefix: bytes = b""
    openmetrics: bool = False
    gzip: bool = False
    gzip_head: bytes = b""
    gzip_state: Any = None
    stable: tuple[str, ...] = ()
    """Names of the families that were unchanged at the previous render (they lead the body)."""
    stable_head: bytes = b""
    stable_state: Any = None
    """The gzip output and compressor state after the ``stable`` families: when the same families
    are unchanged again (the steady state: only poll counters and timestamps move), only the
    changed ones are compressed."""
    families: dict[str, tuple[list[Any], bytes]] = field(default_factory=dict)
    """Family name -> (its samples, its encoded text) of the previous render: a family whose
    samples did not change since (most of them, poll after poll) is not encoded again."""


class MetricsCache:
    """The ``/metrics`` body, rendered once per change of the exported state and served from cache.

    A render (:func:`build_metrics` plus prometheus-client's encoder: about 15 ms of CPU at 100
    models) happens only when a poll published a new state since the last one (:meth:`invalidate`),
    and then at most once: right after the poll when the next scrape is due before the next poll
    (:meth:`prerender`: the scrape period is learnt from the last scrapes, so a Prometheus
    scraping every 15 s of a 1 s poll costs one render per scrape, not fifteen), else on the
    first scrape that finds the cache stale. Every other scrape copies the cached bytes and
    appends the one per-scrape sample, ``kvtop_exporter_scrapes_total``. The GPU telemetry in
    the body is as of the latest render (at most one interval old). Thread-safe: scrapes run in
    the HTTP workers, :meth:`invalidate` and :meth:`prerender` on the event loop.

    Attributes:
        renders: Renders of the families so far (each one :func:`build_metrics` call).
        encodes: Encodings of rendered families (one per render per format scrapers asked for, at
            most ``CACHED_FORMATS``; a prerender encodes them all, so the scrape only copies).
        served: Scrapes answered from this cache.
    """

    def __init__(self, collector: KvtopCollector, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._collector = collector
        self._clock = clock
        self._lock = threading.Lock()
        self._families: list[Metric] | None = None
        self._key: tuple[Any, ...] = ()
        self._dirty = True
        self._formats: dict[str, _Rendered] = {}
        self._memo: ModelMemo = {}
        self._last_scrape: float | None = None
        self._scrape_period: float | None = None
        self.renders = 0
        self.encodes = 0
        self.served = 0

    def invalidate(self) -> None:
        """Say that a poll published a new state: the next scrape or :meth:`prerender` renders."""
        self._dirty = True

    @property
    def scraped_recently(self) -> bool:
        """Whether a scrape came within ``SCRAPED_RECENTLY_S``."""
        last = self._last_scrape
        return last is not None and self._clock() - last < SCRAPED_RECENTLY_S

    def prerender(self, next_poll_in_s: float | None = None) -> bool:
        """Render now if the state changed, a scraper came recently and (when ``next_poll_in_s``
        is given) the next scrape is expected before the next poll: within ``next_poll_in_s``
        seconds, give or take a quarter of that (or a tenth of the scrape period, if less). The
        scrape period is learnt from the scrapes; until two came, or once two expected scrapes
        did not come, nothing is prerendered.

        Returns:
            True when it rendered.
        """
        if not (self._dirty and self.scraped_recently):
            return False
        last, period = self._last_scrape, self._scrape_period
        if next_poll_in_s is not None:
            if last is None or period is None:
                return False
            spare = min(0.1 * period, 0.25 * next_poll_in_s)
            now = self._clock()
            if now + next_poll_in_s + spare < last + period:
                return False  # another poll comes before the next scrape: it renders then
            if now > last + 2 * period + next_poll_in_s:
                return False  # two scrapes missed: the scraper left (the next one renders, if any)
        with self._lock:
            return self._refresh_locked()

    def _refresh_locked(self) -> bool:
        """Render the families again if the views changed, and every encoding scrapers asked for."""
        views, gpu = self._collector.latest()
        key = (*views, gpu)
        fresh = self._families is not None and len(key) == len(self._key) and all(
            a is b for a, b in zip(key, self._key))
        self._dirty = False
        if fresh:
            return False
        self._families = build_metrics(views, gpu, scrapes=None, memo=self._memo)
        self._key = key
        self.renders += 1
        for rendered in self._formats.values():
            self._encode(rendered)
        return True

    def _encode(self, rendered: _Rendered) -> None:
        """Encode the families for ``rendered``'s format, reusing the text of unchanged families.

        The families unchanged since the previous render come first (in catalogue order), then
        the changed ones: the body's order of families carries no meaning in either format, and
        this way the gzip stream of an unchanged leading run is reused too.
        """
        assert self._families is not None
        stable: list[tuple[str, bytes]] = []
        changed: list[tuple[str, bytes]] = []
        kept: dict[str, tuple[list[Any], bytes]] = {}
        for fam in self._families:
            key = fam.samples  # Sample tuples (name, labels, value, ...): compared in C
            old = rendered.families.get(fam.name)
            if old is not None and old[0] == key:
                stable.append((fam.name, old[1]))
                text = old[1]
            else:
                text = rendered.encoder(_Families([fam]))
                if rendered.openmetrics and text.endswith(_OPENMETRICS_EOF):
                    text = text[: -len(_OPENMETRICS_EOF)]
                changed.append((fam.name, text))
            kept[fam.name] = (key, text)
        rendered.families = kept
        stable_names = tuple(name for name, _ in stable)
        stable_text = b"".join(text for _, text in stable)
        changed_text = b"".join(text for _, text in changed)
        rendered.prefix = stable_text + changed_text
        if rendered.gzip:
            if stable_names and stable_names == rendered.stable and rendered.stable_state is not None:
                comp = rendered.stable_state.copy()
                head = rendered.stable_head
            else:
                comp = zlib.compressobj(1, zlib.DEFLATED, 31)  # wbits 31: a gzip member; level 1: 3x faster than 6
                head = comp.compress(stable_text)
                rendered.stable, rendered.stable_head, rendered.stable_state = stable_names, head, comp.copy()
            rendered.gzip_head = head + comp.compress(changed_text)
            rendered.gzip_state = comp
        self.encodes += 1

    def body(self, accept: str | None, accept_encoding: str | None) -> tuple[bytes, list[tuple[str, str]]]:
        """One scrape's body and headers (``Content-Type``, and ``Content-Encoding: gzip`` when
        the scraper accepts it), as prometheus-client's WSGI app would answer ``accept``."""
        from prometheus_client.exposition import choose_encoder, gzip_accepted

        encoder, content_type = choose_encoder(accept or "")
        gzip_wanted = gzip_accepted(accept_encoding or "")
        scrapes = self._collector.count_scrape()
        with self._lock:
            now = self._clock()
            if self._last_scrape is not None:
                gap = now - self._last_scrape
                self._scrape_period = gap if self._scrape_period is None else 0.5 * (self._scrape_period + gap)
            self._last_scrape = now
            self.served += 1
            if self._dirty or self._families is None:
                self._refresh_locked()
            rendered = self._formats.get(content_type)
            if rendered is None or (gzip_wanted and not rendered.gzip):
                if rendered is None:
                    while len(self._formats) >= CACHED_FORMATS:
                        del self._formats[next(iter(self._formats))]
                    rendered = self._formats[content_type] = _Rendered(
                        encoder, openmetrics=encoder(_Families(())) == _OPENMETRICS_EOF)
                rendered.gzip = rendered.gzip or gzip_wanted
                self._encode(rendered)
            prefix, openmetrics, head = rendered.prefix, rendered.openmetrics, rendered.gzip_head
            comp = rendered.gzip_state.copy() if gzip_wanted else None
        tail = encoder(_Families([_scrapes_family(scrapes)]))
        if not openmetrics and tail.endswith(_OPENMETRICS_EOF):
            tail = tail[: -len(_OPENMETRICS_EOF)]
        headers = [("Content-Type", content_type)]
        if comp is not None:
            headers.append(("Content-Encoding", "gzip"))
            return head + comp.compress(tail) + comp.flush(), headers
        return prefix + tail, headers


def _scrapes_family(scrapes: int) -> Metric:
    fam = _family("kvtop_exporter_scrapes_total")
    fam.add_metric([], float(scrapes))  # type: ignore[attr-defined]
    return fam


def make_registry(collector: KvtopCollector) -> CollectorRegistry:
    """A fresh registry holding only ``collector`` (no default process/platform collectors)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


# --------------------------------------------------------------------------------------------
# Which hosts are on this machine


# --------------------------------------------------------------------------------------------
# Pollers


def _say(text: str) -> None:
    print(f"kvtop export: {text}", file=sys.stderr, flush=True)


class HostPoller:
    """One server's published view: the engine's state of it, its poll counts and log counters.

    The engine (:class:`Exporter`'s ``engine``) polls; :meth:`on_step` publishes each apply step.
    All mutation happens on the event loop's thread; :attr:`view` is replaced whole, so the
    HTTP threads always read a consistent snapshot.
    """

    def __init__(self, url: str, source: OllamaSource, *, local: bool, alerts: Mapping[str, Any],
                 log: bool = False, tls_verified: bool | None = None) -> None:
        self.url = url
        self.source = source
        self.alerts = alerts
        state, self.warnings = initial_state(url, alerts, datetime.now().astimezone().tzinfo or timezone.utc)
        self.view = HostView(url=url, local=local, log=log, state=state, tls_verified=tls_verified)
        self.said_error: str | None = None
        """The TLS or auth error last said on stderr (said once, again when it changes)."""

    def _publish(self, **changes: Any) -> None:
        self.view = replace(self.view, **changes)

    def on_step(self, step: Step) -> bool:
        """Publish this server's part of one apply step (its state, polls and log counters);
        True when the view changed."""
        hv = self.view
        state = step.states.get(self.url, hv.state)
        polls = step.polls.get(self.url, ())
        changes: dict[str, Any] = {}
        if state is not hv.state:
            changes["state"] = state
        if polls:
            changes.update(polls=hv.polls + len(polls),
                           poll_failures=hv.poll_failures + sum(1 for p in polls if not p.snapshot.reachable),
                           poll_duration_s=polls[-1].duration_s)
        if hv.log and step.log_events:
            counters = count_log(hv.counters, step.log_events, state.log.loads)
            if counters is not hv.counters:
                changes["counters"] = counters
        if changes:
            self._publish(**changes)
        for poll in polls:
            self._say_access_error(poll.snapshot)
        return bool(changes)

    def _say_access_error(self, snap: OllamaSnapshot) -> None:
        """A certificate that does not verify or credentials refused (configuration, not an outage)
        are said on stderr once, and when they change or clear; other failures are metrics only."""
        from kvtop.textsafe import safe

        error = snap.error if snap.error_kind in ("tls", "auth") else None
        if error != self.said_error:
            if error is not None:
                _say(safe(f"{self.url}: {error}"))  # the error may quote the server: data, not escapes
            elif self.said_error is not None:
                _say(f"{self.url}: reached again")
            self.said_error = error

    def access_error(self) -> str | None:
        """The TLS or auth error of the latest poll, None when it had none."""
        snap = self.view.state.ollama
        return snap.error if snap is not None and snap.error_kind in ("tls", "auth") else None


class Exporter:
    """The headless loop: the engine (``kvtop.engine``) polls every host, this machine and the log;
    each apply step is published to the hosts' views and ``/metrics`` is rendered once.

    Args:
        pollers: One per server, first one gets the log.
        interval_s: Seconds slept after each sample.
        gpu_source / proc_source: This machine's telemetry; None when no host is local. The GPU
            sample joins every host on this machine.
        log_source: The first host's server log, or None.
    """

    def __init__(self, pollers: Sequence[HostPoller], *, interval_s: float,
                 gpu_source: GpuSourceLike | None = None, proc_source: ProcSourceLike | None = None,
                 log_source: LogSource | None = None, slots_source: SlotsSourceLike | None = None) -> None:
        from kvtop.config import Settings
        from kvtop.engine import Engine, EngineSources

        self.slots_source = slots_source
        self.pollers = tuple(pollers)
        self.interval_s = interval_s
        self.gpu_source = gpu_source
        self.proc_source = proc_source
        self.log_source = log_source
        urls = [p.url for p in self.pollers]
        settings = Settings(host_url=urls[0] if urls else "http://127.0.0.1:11434", more_hosts=tuple(urls[1:]),
                            interval_s=interval_s, log_spec="none")
        self.engine = Engine(
            settings, EngineSources(servers={p.url: p.source for p in self.pollers}, log=log_source,
                                    gpu=gpu_source, procs=proc_source, slots=slots_source),
            hosts=urls or None, alerts=self.pollers[0].alerts if self.pollers else {},
            gpu_hosts=[p.url for p in self.pollers if p.view.local], log_host=urls[0] if urls else None)
        """Polls, stages and applies (one alert evaluation per host and step)."""
        self.engine.subscribe(self._on_step)
        self.engine.on_notice(self._on_notice)
        self.collector = KvtopCollector(lambda: [p.view for p in self.pollers], lambda: self.gpu)
        self.cache = MetricsCache(self.collector)
        """``/metrics`` rendered once per apply step (``MetricsServer(cache=...)``)."""

    @property
    def gpu(self) -> GpuSnapshot | None:
        """This machine's latest GPU sample (read by scrapes)."""
        return self.engine.gpu

    def _on_step(self, step: Step) -> None:
        """After an apply step: publish each host's view; the cached body is stale: render it now
        if a scrape is due before the next poll."""
        changed = [p.on_step(step) for p in self.pollers]
        if any(changed):
            self._polled()

    def _on_notice(self, notice: Notice) -> None:
        _say(notice.text if notice.host is None else f"{notice.host}: {notice.text}")

    def _polled(self) -> None:
        self.cache.invalidate()
        took = max((p.view.poll_duration_s or 0.0 for p in self.pollers), default=0.0)
        self.cache.prerender(self.interval_s + took)  # a poll sleeps the interval after its sample

    async def run(self, stop: asyncio.Event) -> None:
        """Poll until ``stop`` is set, then stop the engine and close every source."""
        engine = asyncio.create_task(self.engine.run(), name="engine")
        waiter = asyncio.create_task(stop.wait())
        try:
            done, _ = await asyncio.wait({engine, waiter}, return_when=asyncio.FIRST_COMPLETED)
            if engine in done and not engine.cancelled() and engine.exception() is not None:
                exc = engine.exception()
                _say(f"engine stopped: {type(exc).__name__}: {exc}")
            await stop.wait()
        finally:
            for t in (engine, waiter):
                t.cancel()
            await asyncio.gather(engine, waiter, return_exceptions=True)
            await self.engine.aclose()


# --------------------------------------------------------------------------------------------
# Command line


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` → ``(host, port)``: ``127.0.0.1:9877``, ``[::1]:9877``, ``:9877`` (every interface).

    Raises:
        ValueError: No port, a port outside 0–65535, or an IPv6 address without brackets.
    """
    s = text.strip()
    if s.startswith("["):
        end = s.find("]")
        if end < 0 or s[end + 1:end + 2] != ":":
            raise ValueError(f"{text!r}: expected [IPV6]:PORT, e.g. [::1]:9877")
        host, port_text = s[1:end], s[end + 2:]
        try:
            ipaddress.IPv6Address(host.split("%", 1)[0])
        except ValueError:
            raise ValueError(f"{text!r}: {host!r} is not an IPv6 address") from None
    else:
        host, sep, port_text = s.rpartition(":")
        if not sep:
            raise ValueError(f"{text!r}: expected HOST:PORT, e.g. 127.0.0.1:9877")
        if ":" in host:
            raise ValueError(f"{text!r}: an IPv6 address goes in brackets, e.g. [::1]:9877")
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"{text!r}: the port must be a number 0–65535")
    if any(c.isspace() for c in host):
        raise ValueError(f"{text!r}: the host has a space in it")
    return host or "0.0.0.0", int(port_text)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError("must be a positive number of seconds")
    return value


def build_parser() -> argparse.ArgumentParser:
    """Arguments of ``kvtop export``."""
    p = argparse.ArgumentParser(
        prog="kvtop export",
        description="Export kvtop's per-model memory figures (weights / KV / compute, spill, context, slots), "
                    "headless: 'prometheus' serves /metrics (each server is polled once per interval, however "
                    "many scrapers); 'textfile' writes the same metrics to PATH for node_exporter's textfile "
                    "collector, atomically (temp file + rename), every interval or --once, and opens no port.",
        epilog="examples: kvtop export prometheus --listen 0.0.0.0:9877 --host http://gpu1:11434 --host "
               "http://gpu2:11434;  kvtop export textfile /var/lib/node_exporter/textfile/kvtop.prom --interval 15",
    )
    p.add_argument("format", choices=("prometheus", "textfile"),
                   help="what to export: prometheus (serve GET /metrics) or textfile (write PATH for "
                        "node_exporter's textfile collector; no port is opened)")
    p.add_argument("path", nargs="?", default=None, metavar="PATH",
                   help="textfile: the file to write, e.g. /var/lib/node_exporter/textfile/kvtop.prom")
    p.add_argument("--once", action="store_true",
                   help="textfile: poll every server once, write PATH and exit (2 when a server's TLS certificate "
                        "or credentials were refused: the file is written, the error said on stderr)")
    p.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                   help=f"address to serve /metrics on (default {DEFAULT_LISTEN}; IPv6 as [::1]:9877; port 0: any free one)")
    p.add_argument("--host", action="append", metavar="URL",
                   help="Ollama server, read like OLLAMA_HOST; repeat it for several "
                        "(default: config/OLLAMA_HOST, else http://127.0.0.1:11434)")
    p.add_argument("--interval", "-n", type=_positive, default=None, metavar="SECONDS",
                   help="seconds between polls of each server, 0.25–60 (default: config, else 1)")
    p.add_argument("--timeout", type=_positive, default=None, metavar="SECONDS",
                   help="deadline of each API request (default: config, else 3)")
    p.add_argument("--log", default=None, metavar="SPEC",
                   help="server log of the first --host: auto, journal[:UNIT], journal-user[:UNIT], file:PATH, "
                        "docker:CONTAINER, - (stdin) or none (default: none)")
    p.add_argument("--config", default=None, metavar="PATH", help="config file (default: <config dir>/config.toml)")
    from kvtop.cli.access import add_access_arguments

    add_access_arguments(p)  # --header, --password-file, --netrc, --cacert, --insecure: as the dashboard's
    return p


def _hosts(args: argparse.Namespace, resolved_host: Any, origin: str,
           fail: Callable[[str], NoReturn],
           credentials: dict[str, tuple[str | None, str | None]] | None = None) -> tuple[list[str], list[str]]:
    """The servers to poll (deduplicated, typed order first) and warnings about dropped ones.
    ``credentials`` receives each URL's ``(user, password)`` taken out of it (``config.parse_host_access``)."""
    warnings: list[str] = []
    urls: list[str] = []
    creds = credentials if credentials is not None else {}
    if args.host:
        for raw in args.host:
            try:
                url, user, password = parse_host_access(raw, strict=True)
            except HostError as exc:
                fail(f"--host: {exc}")
            creds.setdefault(url, (user, password))
            if url not in urls:
                urls.append(url)
        return urls, warnings
    raws: Sequence[str | None] = (resolved_host,) if resolved_host is None or isinstance(resolved_host, str) \
        else tuple(resolved_host)
    for raw in raws:
        try:
            url, user, password = parse_host_access(raw, strict=origin != "env OLLAMA_HOST")
        except HostError as exc:
            warnings.append(f"host from {origin}: {exc} — it is left out")
            continue
        creds.setdefault(url, (user, password))
        if url not in urls:
            urls.append(url)
    return (urls or [parse_ollama_host(None)]), warnings


SERVER_THREADS = 8
"""Worker threads answering requests (a scrape costs about a millisecond of one of them)."""

SERVER_BACKLOG = 1024
"""Listen backlog: connections the kernel queues while the workers are busy."""

CHANNEL_TIMEOUT_S = 10
"""A connection with no activity for this long is closed (forgotten keep-alives, silent clients)."""

REQUEST_DEADLINE_S = 10.0
"""A request's head (and body) must arrive whole within this many seconds of its first byte (a
new connection's: of its accept); a client trickling bytes is closed then, however often it sends."""

RESPONSE_DEADLINE_S = 30.0
"""An answer must be read by its client within this many seconds of being ready (a client that
reads a byte at a time holds its connection as a trickling sender does)."""

PER_CLIENT_PENDING = 16
"""Connections one client address may keep stalled (on an incomplete request or an unread answer)
for more than ``PENDING_GRACE_S``; its longest-stalled ones past that are closed."""

PENDING_GRACE_S = 1.0
"""An incomplete request younger than this is not yet counted against ``PER_CLIENT_PENDING``
(a burst of honest scrapes from one address sends each request whole at once)."""

CLEANUP_INTERVAL_S = 1
"""How often idle and slow connections are looked for."""

CONNECTION_LIMIT = 512
"""Connections open at once; at the limit a new one evicts a stalled connection (the oldest of the
address holding the most), else the one idle longest between requests (closed at once only when
every connection is being answered)."""

MAX_REQUEST_HEADER_BYTES = 16 * 1024
"""Longest request head accepted (a scrape's is a few hundred bytes)."""

MAX_REQUEST_BODY_BYTES = 64 * 1024
"""Longest request body accepted (a scrape has none; larger ones are answered 413)."""

_NOT_FOUND = b"not found: kvtop serves its metrics on /metrics\n"


def make_wsgi(registry: CollectorRegistry, cache: MetricsCache | None = None) -> Callable[..., Iterable[bytes]]:
    """The exporter's WSGI app: ``/metrics`` and ``/`` → the metrics (text format, OpenMetrics or
    gzip when the scraper asks); ``GET``/``HEAD`` only (else 405); any other path → 404 with a
    one-line plain-text body.

    With ``cache``, bodies come from :class:`MetricsCache` (rendered once per poll); a request
    filtering by ``name[]`` and every request without a cache go to prometheus-client's own
    metrics app over ``registry`` (rendered per request)."""
    from prometheus_client import make_wsgi_app

    uncached = make_wsgi_app(registry)

    def metrics(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if cache is None or "name" in environ.get("QUERY_STRING", ""):
            return uncached(environ, start_response)  # type: ignore[no-any-return]
        body, headers = cache.body(environ.get("HTTP_ACCEPT"), environ.get("HTTP_ACCEPT_ENCODING"))
        start_response("200 OK", [*headers, ("Content-Length", str(len(body)))])
        return [body]

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO") or "/"
        if path not in ("/metrics", "/"):
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8"),
                                             ("Content-Length", str(len(_NOT_FOUND)))])
            return [_NOT_FOUND]
        if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            body = b"only GET and HEAD\n"
            start_response("405 Method Not Allowed", [("Allow", "GET, HEAD"), ("Content-Type", "text/plain; charset=utf-8"),
                                                      ("Content-Length", str(len(body)))])
            return [body]
        if environ["REQUEST_METHOD"] == "HEAD":  # prometheus-client answers GET only: same headers, no body
            for chunk in metrics({**environ, "REQUEST_METHOD": "GET"}, start_response):
                pass
            return []
        return metrics(environ, start_response)

    return app


class MetricsServer:
    """The HTTP side of the exporter: ``make_wsgi(registry)`` served by waitress in one daemon
    thread (its I/O loop) plus ``threads`` workers.

    Args:
        registry: What ``/metrics`` serves.
        cache: Serve ``/metrics`` from this cache (:func:`make_wsgi`); None renders every request.
        host: Address to bind (an IP address or a name; a name binds its first address, as
            ``getaddrinfo`` orders them).
        port: Port; 0 picks a free one (see :attr:`port`).
        request_deadline_s / response_deadline_s / per_client_pending / pending_grace_s /
            connection_limit: the slow client rules (``REQUEST_DEADLINE_S`` …, ``kvtop.export.httpguard``).

    Raises:
        OSError: The address cannot be bound (in use, not this machine's, permission denied) or
            the name does not resolve (``socket.gaierror``).
    """

    def __init__(self, registry: CollectorRegistry, host: str, port: int, *, threads: int = SERVER_THREADS,
                 backlog: int = SERVER_BACKLOG, channel_timeout_s: int = CHANNEL_TIMEOUT_S,
                 connection_limit: int = CONNECTION_LIMIT, cache: MetricsCache | None = None,
                 request_deadline_s: float = REQUEST_DEADLINE_S, response_deadline_s: float = RESPONSE_DEADLINE_S,
                 per_client_pending: int = PER_CLIENT_PENDING, pending_grace_s: float = PENDING_GRACE_S) -> None:
        import logging
        import socket

        from kvtop.export.httpguard import create_guarded_server

        family, _, _, _, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                       flags=socket.AI_PASSIVE)[0]
        ip = sockaddr[0]
        listen = f"[{ip}]:{port}" if family == socket.AF_INET6 else f"{ip}:{port}"
        logging.getLogger("waitress.queue").setLevel(logging.ERROR)  # "task queue depth" under load is expected
        try:
            self._server = create_guarded_server(
                make_wsgi(registry, cache), listen=listen, threads=threads, backlog=backlog,
                channel_timeout=channel_timeout_s, cleanup_interval=CLEANUP_INTERVAL_S,
                connection_limit=connection_limit, max_request_header_size=MAX_REQUEST_HEADER_BYTES,
                max_request_body_size=MAX_REQUEST_BODY_BYTES, asyncore_use_poll=True, ident="kvtop",
                expose_tracebacks=False, request_deadline_s=request_deadline_s,
                response_deadline_s=response_deadline_s, per_client_pending=per_client_pending,
                pending_grace_s=pending_grace_s,
            )
        except ValueError as exc:  # waitress: "Invalid host/port specified."
            raise OSError(str(exc)) from None
        self.host: str = ip
        self.port: int = int(self._server.effective_port)
        """The bound port (the free one chosen for port 0)."""
        self._thread = threading.Thread(target=self._server.run, name="kvtop-http", daemon=True)

    def start(self) -> None:
        """Start serving (returns at once)."""
        self._thread.start()

    @property
    def closed_stalled(self) -> int:
        """Connections closed so far for being stalled (the slow-client rules of ``httpguard``)."""
        return int(self._server.closed_slow)

    def close(self, timeout_s: float = 2.0) -> None:
        """Stop accepting, close every connection and the workers; waits up to ``timeout_s``."""
        from waitress import wasyncore

        server = self._server
        try:
            wasyncore.close_all(server._map)  # the listening socket and every open connection
        except Exception:  # noqa: BLE001, S110 - closing must never block exiting
            pass
        server.task_dispatcher.shutdown(cancel_pending=True, timeout=timeout_s)
        if self._thread.is_alive():
            self._thread.join(timeout_s)


def main_export(argv: Sequence[str]) -> int:
    """``kvtop export prometheus ...`` / ``kvtop export textfile PATH ...``; returns the exit code
    (0 after SIGTERM/SIGINT or a ``--once`` write, 2 on bad input or a PATH that cannot be written)."""
    parser = build_parser()
    args = parser.parse_args(list(argv))

    def fail(message: str) -> NoReturn:
        parser.exit(EXIT_ERROR, f"kvtop export: {message}\n")

    if args.format == "textfile" and not args.path:
        fail("textfile needs the PATH to write, e.g. kvtop export textfile /var/lib/node_exporter/textfile/kvtop.prom")
    if args.format == "prometheus" and (args.path or args.once):
        fail("prometheus serves /metrics: leave out PATH and --once (those are for textfile)")
    if args.format == "textfile" and args.listen != DEFAULT_LISTEN:
        fail("textfile opens no port: leave out --listen")

    try:
        listen_host, listen_port = parse_listen(args.listen)
    except ValueError as exc:
        fail(f"--listen {exc}")
    env = dict(os.environ)
    if args.config:
        env["KVTOP_CONFIG"] = args.config
    try:
        resolved = resolve_config({"interval": args.interval, "timeout": args.timeout}, env)
    except ConfigError as exc:
        fail(str(exc))
    values, origins = resolved.values, resolved.origins
    credentials: dict[str, tuple[str | None, str | None]] = {}
    hosts, warnings = _hosts(args, values["host"], origins["host"], fail, credentials)
    try:
        from kvtop.cli.access import access_options

        access, access_warnings = server_accesses(
            [(u, *credentials.get(u, (None, None))) for u in hosts], **access_options(args),
            servers=values.get("servers"), env=env, file_origin=str(resolved.path),
            host_origin="flag" if args.host else origins["host"])
    except ConfigError as exc:
        fail(str(exc))
    warnings = list(resolved.warnings) + warnings + access_warnings
    warnings += [f"{url}: {a.tls_note}" for url, a in access.items() if a.tls_note]  # --insecure / --cacert in use
    log_spec = args.log if args.log is not None else "none"
    from kvtop.sources.tail import parse_log_spec

    try:
        spec = parse_log_spec(log_spec)
    except ValueError as exc:
        fail(f"--log: {exc}")
    interval_s = float(values["interval"])
    timeout_s = max(0.1, float(values["timeout"]))

    from kvtop.config import Settings
    from kvtop.engine import build_sources

    addresses = local_addresses()
    local_urls = [url for url in hosts if host_is_this_machine(url, addresses=addresses)]
    settings = Settings(host_url=hosts[0], more_hosts=tuple(hosts[1:]), interval_s=interval_s, timeout_s=timeout_s,
                        show_timeout_s=max(timeout_s, 10.0), alerts=values["alerts"], access=access, log_spec=log_spec)
    # the one factory (kvtop.engine): each server's client with its access options, the log, and
    # this machine's GPU, processes and /slots only when a host is on this machine
    sources = build_sources(settings, machine=bool(local_urls))
    pollers = [
        HostPoller(url, sources.servers[url], local=url in local_urls, alerts=values["alerts"],
                   log=(i == 0 and spec.kind != "none"),
                   tls_verified=(not access[url].insecure) if access[url].https else None)
        for i, url in enumerate(hosts)
    ]
    warnings.extend(pollers[0].warnings)  # each starts with "[alerts]"
    if spec.kind in ("auto", "journal", "docker") and not pollers[0].view.local:
        warnings.append(f"--log {log_spec} reads this machine's log, but {hosts[0]} is not on this machine: "
                        "its figures may be another server's")
    exporter = Exporter(pollers, interval_s=interval_s, gpu_source=sources.gpu, proc_source=sources.procs,
                        log_source=sources.log, slots_source=sources.slots)
    if args.format == "textfile":
        return _main_textfile(exporter, args.path, once=args.once, warnings=warnings, fail=fail,
                              log=str(spec), hosts=hosts, timeout_s=timeout_s)
    registry = make_registry(exporter.collector)

    try:
        httpd = MetricsServer(registry, listen_host, listen_port, cache=exporter.cache)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        fail(f"cannot listen on {_url_host(listen_host)}:{listen_port}: {reason}")
    httpd.start()
    for warning in warnings:
        _say(warning)
    port = httpd.port
    local = [p.url for p in pollers if p.view.local]
    _say(f"serving Prometheus metrics on http://{_url_host(listen_host)}:{port}/metrics — "
         f"polling {', '.join(hosts)} every {interval_s:g} s; log: {spec}; "
         f"GPU telemetry: {'joined to ' + ', '.join(local) if local else 'off (no host on this machine)'}")
    try:
        asyncio.run(_serve(exporter))
    except KeyboardInterrupt:  # Ctrl+C before the loop's own handler was installed
        pass
    finally:
        httpd.close()
    return EXIT_OK


async def _serve(exporter: Exporter) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # a closed terminal, too
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError, ValueError):  # pragma: no cover - Windows
            pass
    await exporter.run(stop)



# --------------------------------------------------------------------------------------------
# Textfile (node_exporter's textfile collector)


def textfile_body(hosts: Iterable[HostView], gpu: GpuSnapshot | None) -> bytes:
    """The textfile's content: the families :func:`build_metrics` gives ``/metrics`` (without
    ``kvtop_exporter_scrapes_total``: nothing scrapes kvtop), in the Prometheus text format 0.0.4
    that node_exporter's textfile collector reads."""
    from prometheus_client.exposition import generate_latest

    return generate_latest(_Families(build_metrics(hosts, gpu, scrapes=None)))  # type: ignore[arg-type]


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomically(path: str | os.PathLike[str], body: bytes, *, mode: int | None = None) -> None:
    """Replace ``path`` with ``body`` so that a reader sees the old file or the new one, whole.

    A temporary file in the same directory (``.<name>.<random>.tmp``: node_exporter reads only
    ``*.prom``) is written, flushed and ``fsync``-ed, given ``mode`` (default ``0o666`` less the
    umask: ``mkstemp``'s ``0o600`` would hide it from a node_exporter running as another user),
    then renamed over ``path`` with ``os.replace`` (atomic on POSIX); the directory is ``fsync``-ed
    so the rename survives a crash. On any error the temporary file is removed.

    Raises:
        OSError: The directory does not exist or cannot be written, the disk is full, …
    """
    import tempfile

    target = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(target))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode if mode is not None else 0o666 & ~_umask())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:
        dir_fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


TEXTFILE_FIRST_WAIT_S = 1.0
"""Beyond the request timeout, how long the first write waits for every host's first poll."""


async def write_textfile_forever(exporter: Exporter, path: str, stop: asyncio.Event, *, once: bool = False,
                                 first_wait_s: float) -> str | None:
    """Write ``path`` (:func:`write_atomically`) every ``exporter.interval_s`` until ``stop``.

    The first write waits until every host was polled once and, when this machine is sampled, its
    GPUs were (at most ``first_wait_s``), so the file never starts empty. A write that fails is
    said once on stderr (and again when the error changes or clears) and tried again next
    interval.

    Returns:
        With ``once``: None after one write, else the error text. Without: None when stopped.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + first_wait_s
    while loop.time() < deadline and not stop.is_set():
        polled = all(p.view.polls > 0 for p in exporter.pollers)
        if polled and (exporter.gpu_source is None or exporter.gpu is not None):
            break
        await asyncio.sleep(0.02)
    said: str | None = None
    while not stop.is_set():
        views, gpu = exporter.collector.latest()
        try:
            body = textfile_body(views, gpu)
            await asyncio.to_thread(write_atomically, path, body)
        except OSError as exc:
            problem = f"cannot write {path}: {exc.strerror or exc}"
            if once:
                return problem
            if problem != said:
                _say(f"{problem}; trying again every {exporter.interval_s:g} s")
                said = problem
        else:
            if said is not None:
                _say(f"writing {path} again")
                said = None
            if once:
                return None
        try:
            await asyncio.wait_for(stop.wait(), timeout=exporter.interval_s)
        except asyncio.TimeoutError:
            pass
    return None


def _main_textfile(exporter: Exporter, path: str, *, once: bool, warnings: Sequence[str],
                   fail: Callable[[str], NoReturn], log: str, hosts: Sequence[str], timeout_s: float) -> int:
    """``kvtop export textfile PATH``: poll as the HTTP exporter does, write PATH instead of serving."""
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        fail(f"textfile: {path} is a directory: name a file in it, e.g. {os.path.join(path, 'kvtop.prom')}")
    if not os.path.isdir(directory):
        fail(f"textfile: the directory {directory} does not exist")
    if not os.access(directory, os.W_OK | os.X_OK):
        fail(f"textfile: cannot write in {directory} (permission denied)")
    for warning in warnings:
        _say(warning)
    if not path.endswith(".prom"):
        _say(f"{path} does not end in .prom: node_exporter's textfile collector reads *.prom files only")
    local = [p.url for p in exporter.pollers if p.view.local]
    _say(f"writing Prometheus metrics to {path} "
         f"{'once' if once else f'every {exporter.interval_s:g} s'} — polling {', '.join(hosts)}; log: {log}; "
         f"GPU telemetry: {'joined to ' + ', '.join(local) if local else 'off (no host on this machine)'}")
    problem: list[str | None] = [None]

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            try:
                loop.add_signal_handler(sig, stop.set)
            except (NotImplementedError, RuntimeError, ValueError):  # pragma: no cover - Windows
                pass
        polling = asyncio.create_task(exporter.run(stop))
        try:
            problem[0] = await write_textfile_forever(
                exporter, path, stop, once=once, first_wait_s=2 * timeout_s + TEXTFILE_FIRST_WAIT_S)
        finally:
            stop.set()
            await polling

    try:
        asyncio.run(run())
    except KeyboardInterrupt:  # Ctrl+C before the loop's own handler was installed
        pass
    if problem[0] is not None:
        _say(problem[0])
        return EXIT_ERROR
    if once and any(p.access_error() is not None for p in exporter.pollers):
        return EXIT_ERROR  # written (kvtop_server_up 0), but a certificate or credentials need fixing: said above
    return EXIT_OK
