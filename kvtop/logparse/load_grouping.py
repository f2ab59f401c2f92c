"""Grouping a log's events into loads (:func:`group_loads`, and :class:`LoadGrouper` that does it
incrementally): which line starts a load, which joins the current one, and the per-incident
event list. The rules are listed in :mod:`kvtop.logparse.loads`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from kvtop.logparse.cmdline import era_of_version
from kvtop.logparse.events import (
    Allocation,
    ContextOverflow,
    ContextOverTraining,
    ContextParams,
    FlashAttention,
    FlashAttentionDecision,
    FlashAttentionForcedOff,
    KvSummary,
    KvTypeFallback,
    LoadDecision,
    LoadFailed,
    LoadRequest,
    LogEvent,
    ModelLoad,
    OffloadedLayers,
    Oom,
    RequestTiming,
    RunnerReady,
    RunnerStarted,
    SchedulerEstimate,
    ServerConfig,
    ServerListening,
    PromptRejected,
    Truncation,
)
from kvtop.logparse.fit_events import DeviceFree, FitOverflow, FitPlan
from kvtop.logparse.load_build import Load, SingleGpu, _Builder
from kvtop.logparse.memory_events import ContextCheckpoint, DraftModelLoad, ProjectorEstimate, PromptCacheState

REPORTED_KINDS = frozenset(
    {
        "truncation",
        "kv_type_fallback",
        "flash_attention_forced_off",
        "oom",
        "eviction",
        "load_failed",
        "unload",
        "request_timing",
        "prompt_rejected",
        "context_overflow",
    }
)
"""Event kinds listed in the document's ``events``."""

INCIDENT_KINDS = frozenset(
    {"oom", "load_failed", "eviction", "unload", "flash_attention_forced_off", "kv_type_fallback"}
)
"""Kinds whose consecutive lines (within one load) are one incident (but for ``Oom.allocation``)."""

INCIDENT_GAP_S = 60.0
"""Two lines of the same kind further apart than this are separate incidents."""

_FA_REQUEST = {
    "true": "enabled",
    "enabled": "enabled",
    "on": "enabled",
    "1": "enabled",
    "false": "disabled",
    "disabled": "disabled",
    "off": "disabled",
    "0": "disabled",
}

_GRAMMAR_ERA = {
    "sched_reserve": "C",
    "resolve_fused_ops": "C",
    "llama-server": "C",
    "llama_model_load_internal": "pre-A",
    "llama.cpp": "pre-A",
}


@dataclass
class _Grouper:
    """Walks the events once, building loads and the per-incident event list."""

    loads: list[_Builder] = field(default_factory=list)
    cur: _Builder | None = None
    pending: list[LogEvent] = field(default_factory=list)
    incidents: list[list[Any]] = field(default_factory=list)
    """``[event, load index or None]`` per reported incident, in log order."""
    version: str | None = None
    config: Mapping[str, str] | None = None

    def new(self, event: LogEvent) -> _Builder:
        b = _Builder(len(self.loads), event)
        self.loads.append(b)
        self.cur = b
        pending, self.pending = self.pending, []
        for p in pending:
            if isinstance(p, FlashAttentionDecision):
                b.fa_weak = (p.state, p.reason)
            elif isinstance(p, FlashAttentionForcedOff):
                b.fa_weak = ("disabled", p.reason)
                b.fa_ollama_off = True
        return b

    def current_or_new(self, event: LogEvent) -> _Builder:
        cur = self.cur
        if cur is None or cur.ready:
            return self.new(event)
        return cur

    def feed(self, e: LogEvent) -> None:
        cur = self.cur
        if cur is not None and (cur.drafting or isinstance(e, DraftModelLoad)) and self.draft_line(cur, e):
            cur.last_line = max(cur.last_line, e.line_no)
            cur.touched += 1
            return
        b: _Builder | None = None
        target: int | None = None
        """Index of the load a reported event belongs to (``len(loads)``: the next one)."""
        if isinstance(e, RunnerStarted):
            if e.model_blob is None and e.cmd is not None and e.model_name is None:
                return  # GPU-discovery runner (no --model)
            if cur is not None and cur.pre_spawn() and cur.blob_ok(e.model_blob):
                b = cur
            else:
                b = self.new(e)
            self.spawn(b, e)
        elif isinstance(e, LoadRequest):
            if (
                cur is not None
                and not cur.ready
                and cur.era in (None, "B2")
                and (cur.has_spawn or cur.has_request or not cur.has_alloc)
            ):
                b = cur
            else:
                b = self.new(e)
            self.request(b, e)
        elif isinstance(e, SchedulerEstimate):
            if (
                cur is not None
                and not cur.ready
                and not cur.has_alloc
                and (cur.estimate is None or _same_estimate(cur.estimate, e))
            ):
                b = cur
            else:
                b = self.new(e)
            self.estimate(b, e)
        elif isinstance(e, LoadDecision):
            if cur is not None and not cur.ready and not cur.has_alloc and cur.blob_ok(e.model_blob):
                b = cur
            elif e.message == "loading model via llama-server":
                return
            else:
                b = self.new(e)
            b.set_blob(e.model_blob)
            b.put("parallel", e.parallel, 1)
            b.put("layers_total", e.layers_total, 1)
            if e.layers_requested is not None and e.layers_requested >= 0:
                b.put("layers_requested", e.layers_requested, 1)
            if e.gpu is not None:
                b.single_gpu = SingleGpu(e.gpu, e.available_bytes, e.required_bytes)
        elif isinstance(e, (ModelLoad, DeviceFree)):
            blob = e.model_blob if isinstance(e, ModelLoad) else None
            if cur is not None and not cur.has_alloc and not cur.ready and cur.blob_ok(blob):
                b = cur
            else:
                b = self.new(e)
            b.set_blob(blob)
            if isinstance(e, ModelLoad):
                b.set_era(_GRAMMAR_ERA.get(e.grammar), 1)
            else:
                b.device_free[e.device] = e.free_bytes
        elif isinstance(e, FlashAttentionForcedOff) and e.source == "ollama":
            # "flash attention enabled but not supported by model|gpu": Ollama does not ask the runner for
            # flash attention, so it is disabled for the load it is about to start (not unknown)
            if cur is not None and cur.pre_spawn():
                b = cur
                target = cur.index
                cur.fa_weak = ("disabled", e.reason)
                cur.fa_ollama_off = True
            else:
                target = len(self.loads)  # Ollama decides before it spawns the runner
                self.pending.append(e)
        elif isinstance(
            e,
            (
                Allocation,
                KvSummary,
                ContextParams,
                OffloadedLayers,
                FitOverflow,
                FitPlan,
                FlashAttention,
                FlashAttentionForcedOff,
                ContextOverTraining,
            ),
        ):
            b = self.current_or_new(e)
            self.runner_line(b, e)
            target = b.index
        elif isinstance(e, RunnerReady):
            if cur is not None:
                b = cur
                cur.ready = True
                cur.set_blob(e.model_blob)
        elif isinstance(e, FlashAttentionDecision):
            if cur is not None and cur.pre_spawn():
                b = cur
                cur.fa_weak = (e.state, e.reason)
            else:
                self.pending.append(e)
        elif isinstance(e, KvTypeFallback):
            if cur is not None and cur.pre_spawn():
                b = cur
                target = cur.index
            else:
                target = len(self.loads)  # Ollama warns before it spawns the runner
        elif isinstance(e, (Oom, LoadFailed)):
            if cur is not None:
                b = cur
                target = cur.index
                if isinstance(e, LoadFailed):
                    cur.set_blob(e.model_blob)
        elif isinstance(e, (PromptCacheState, ContextCheckpoint, ProjectorEstimate)):
            if cur is not None:  # the runner's own memory beyond its buffers (kvtop.model.ledger)
                b = cur
                if isinstance(e, PromptCacheState):
                    cur.prompt_cache = e
                elif isinstance(e, ContextCheckpoint):
                    cur.add_checkpoint(e)
                else:
                    cur.projector_bytes = e.size_bytes
        elif isinstance(e, (Truncation, ContextOverflow, PromptRejected, RequestTiming)):
            if cur is not None:
                target = cur.index
        elif isinstance(e, ServerListening):
            if e.version:
                self.version = e.version
        elif isinstance(e, ServerConfig):
            self.config = e.env
        if b is not None:
            b.last_line = max(b.last_line, e.line_no)
            b.touched += 1
        if e.kind in REPORTED_KINDS:
            self.incident(e, target)

    @staticmethod
    def draft_line(b: _Builder, e: LogEvent) -> bool:
        """A draft model's line of load ``b`` (``loading draft model`` and the model, buffer and context lines after
        it): its buffers go to ``b.draft_alloc``, its context and KV summaries are not the target's. False (and the
        draft's lines over) for any other event."""
        if isinstance(e, DraftModelLoad):
            b.drafting = True
            b.draft_blob = e.model_blob
            return True
        if isinstance(e, ModelLoad) and e.grammar != "llama-server":
            return True
        if isinstance(e, Allocation):
            per = b.draft_alloc.setdefault(e.component, {})
            per[e.device] = per.get(e.device, 0) + e.bytes
            return True
        if isinstance(e, (KvSummary, ContextParams, FlashAttention, OffloadedLayers, FitOverflow, FitPlan)):
            return True
        b.drafting = False
        return False

    def incident(self, e: LogEvent, load: int | None) -> None:
        """Record a reported event, unless it continues the previous incident of its kind."""
        if self.incidents and _continues(self.incidents[-1][0], self.incidents[-1][1], e, load):
            return
        self.incidents.append([e, load])

    def finish(self) -> None:
        """Attach each incident to its load (an incident announced for a load never started has none)."""
        for item in self.incidents:
            load = item[1]
            if load is not None and load >= len(self.loads):
                item[1] = None
            elif load is not None:
                self.loads[load].events.append(item[0])

    def spawn(self, b: _Builder, e: RunnerStarted) -> None:
        b.has_spawn = True
        b.set_blob(e.model_blob)
        if e.model_name is not None:
            b.model_name = e.model_name
        b.mmproj_blob = e.mmproj_blob or b.mmproj_blob
        b.port = e.port if e.port is not None else b.port
        b.pid = e.pid if e.pid is not None else b.pid
        b.set_era(e.era, 2)
        b.engine = e.engine or b.engine
        b.put("num_ctx_total", e.ctx_size, 1)
        b.put("parallel", e.parallel, 1)
        if e.n_gpu_layers is not None and e.n_gpu_layers >= 0:
            b.put("layers_requested", e.n_gpu_layers, 1)
        k = e.cache_type_k or e.kv_cache_type
        v = e.cache_type_v or e.kv_cache_type
        b.put("kv_type_k", k or None, 1)
        b.put("kv_type_v", v or None, 1)
        if e.flash_attn is not None:
            b.fa_requested = e.flash_attn
            state = _FA_REQUEST.get(e.flash_attn.lower())
            if state is not None:
                b.fa_weak = (state, f"--flash-attn {e.flash_attn}" if e.era == "C" else "--flash-attn")
        elif e.complete and e.era in ("A", "B1") and e.cmd is not None and not b.fa_ollama_off:
            b.fa_weak = ("disabled", "no --flash-attn on the runner command line")

    def request(self, b: _Builder, e: LoadRequest) -> None:
        b.has_request = True
        b.set_era("B2", 2)
        b.put("num_ctx_total", e.kv_size, 2)
        b.put("parallel", e.parallel, 2)
        if e.kv_cache_type:
            b.put("kv_type_k", e.kv_cache_type, 2)
            b.put("kv_type_v", e.kv_cache_type, 2)
        if e.flash_attention is not None:
            b.fa_requested = e.flash_attention
            state = _FA_REQUEST.get(e.flash_attention.lower())
            if state is not None:
                b.fa_weak = (state, f"load request FlashAttention:{e.flash_attention}")
        if e.gpu_layers is not None:
            b.put("layers_offloaded", e.gpu_layers, 1)

    @staticmethod
    def estimate(b: _Builder, e: SchedulerEstimate) -> None:
        b.estimate = e
        b.put("layers_total", e.layers_model, 1)
        b.put("layers_offloaded", e.layers_offload, 1)
        if e.layers_requested is not None and e.layers_requested >= 0:
            b.put("layers_requested", e.layers_requested, 1)

    @staticmethod
    def runner_line(b: _Builder, e: LogEvent) -> None:
        # a fit pass (``N layers (M overflowing)``) runs before the runner loads the model, so it does not
        # end the load's spawn phase: the ``llama_model_loader`` line that follows is the same load
        b.has_alloc = b.has_alloc or not isinstance(e, (FlashAttention, FlashAttentionForcedOff, FitOverflow, FitPlan))
        if isinstance(e, Allocation):
            b.add_alloc(e.component, e.device, e.bytes)
            b.set_era("B2" if e.grammar == "ollama" else _GRAMMAR_ERA.get(e.grammar), 1)
        elif isinstance(e, KvSummary):
            if e.recurrent and e.size_bytes is not None:
                b.recurrent_size = e.size_bytes  # a hybrid model's R/S state (not KV)
            if e.swa is not None:  # llama_kv_cache_iswa: creating [non-]SWA KV cache, size = N cells
                if not e.swa:
                    b.kv_ctx_set = False  # a new pair of caches: the non-SWA one gives the context
                b.kv_swa = e.swa
                b.set_era(_GRAMMAR_ERA.get(e.grammar), 1)
                return
            if e.size_bytes is not None and not e.recurrent:
                b.add_kv_size(e.size_bytes)  # an iSWA model's two caches add up
            # the context, slots and K/V types are the full-context cache's: an iSWA model's SWA cache has
            # far fewer cells (n_swa × slots + n_ubatch) and may keep f16 when the main cache is quantized
            if not e.recurrent and not b.kv_swa and not (b.kv_ctx_set and e.cells is not None):
                b.put("kv_type_k", e.k_type, 3)
                b.put("kv_type_v", e.v_type, 3)
                if e.cells is not None and e.streams is not None:
                    b.put("num_ctx_total", e.cells * e.streams, 3)
                elif e.cells is not None and e.size_bytes is None:
                    b.put("num_ctx_total", e.cells, 2)
                b.put("parallel", e.seqs, 3)
                if e.cells is not None:
                    b.kv_ctx_set = True
            b.set_era(_GRAMMAR_ERA.get(e.grammar), 1)
        elif isinstance(e, ContextParams):
            if e.flash_attn is not None and e.flash_attn.lower() == "auto":
                b.fa_requested = "auto"
            b.put("num_ctx_total", e.n_ctx, 3)
            b.put("num_ctx_per_seq", e.n_ctx_per_seq, 3)
            b.put("n_ctx_train", e.n_ctx_train, 3)
            b.put("parallel", e.n_seq_max, 3)
            b.set_era(_GRAMMAR_ERA.get(e.grammar), 1)
        elif isinstance(e, OffloadedLayers):
            b.put("layers_offloaded", e.n, 3)
            b.put("layers_total", e.total, 3)
        elif isinstance(e, (FitOverflow, FitPlan)):
            b.add_fit(e)
            b.set_era("C", 1)
        elif isinstance(e, ContextOverTraining):
            b.over_training = e
            b.put("num_ctx_per_seq", e.n_ctx_per_seq, 3)
            b.put("n_ctx_train", e.n_ctx_train, 3)
        elif isinstance(e, FlashAttention):
            b.fa_strong = (e.state, e.reason)
            if e.reason.startswith("resolve_fused_ops"):
                b.set_era("C", 1)
        elif isinstance(e, FlashAttentionForcedOff):
            b.fa_strong = ("disabled", e.reason)


def _continues(prev: LogEvent, prev_load: int | None, e: LogEvent, load: int | None) -> bool:
    """``e`` is another line of the incident ``prev`` (same kind and load, close in time); an
    allocator's own failure line (``Oom.allocation``: one try of a fit/alloc loop) always starts one."""
    return (
        e.kind in INCIDENT_KINDS
        and prev.kind == e.kind
        and prev_load == load
        and not (type(e) is Oom and e.allocation)
        and not _far_apart(prev.time, e.time)
        and getattr(prev, "requested", None) == getattr(e, "requested", None)
    )


def _same_estimate(a: SchedulerEstimate, b: SchedulerEstimate) -> bool:
    return (a.layers_model, a.layers_offload, a.kv_bytes, a.full_bytes, a.partial_bytes) == (
        b.layers_model,
        b.layers_offload,
        b.kv_bytes,
        b.full_bytes,
        b.partial_bytes,
    )


def _far_apart(a: datetime | None, b: datetime | None) -> bool:
    if a is None or b is None or (a.tzinfo is None) != (b.tzinfo is None):
        return False
    return abs((b - a).total_seconds()) > INCIDENT_GAP_S


def _group(events: Iterable[LogEvent]) -> tuple[_Grouper, list[Load]]:
    g = _Grouper()
    for e in events:
        g.feed(e)
    g.finish()
    server_era = era_of_version(g.version)
    return g, [b.build(server_era) for b in g.loads]


def group_loads(events: Iterable[LogEvent]) -> list[Load]:
    """The model loads in ``events``, in log order (see the module docstring for the rules)."""
    return _group(events)[1]


class LoadGrouper(_Grouper):
    """:func:`group_loads`, incrementally: :meth:`extend` with events in log order, then
    :meth:`loads_now` is ``group_loads(every event so far)`` (``tests/unit/test_logstate.py``
    checks this on real logs), at a cost that grows with the new events, not with the history.

    An incident is attached to its load as soon as that load exists (``group_loads`` attaches
    them all at the end: the same lists, in the same order); a load is built again only when an
    event changed it (``_Builder.touched``) or the server's version changed the era.
    """

    def __init__(self) -> None:
        super().__init__()
        self._waiting: list[tuple[LogEvent, int]] = []
        """Incidents announced for a load not started yet, in log order."""
        self._built: list[tuple[tuple[int, int, str | None], Load, bool]] = []
        """Per load: ``(key, load, own_era)``, ``key`` = ``(touched, incidents, server era)`` when it was
        built, ``own_era`` whether its own lines gave its era (else the server's version does)."""
        self.mark: object = None
        """Set by the owner after each use (``model.logstate.fold_events``) to tell whether it moved on."""

    def extend(self, events: Iterable[LogEvent]) -> None:
        """Group ``events`` (the next ones in log order)."""
        for e in events:
            self.feed(e)

    def new(self, event: LogEvent) -> _Builder:
        b = super().new(event)
        if self._waiting:
            waiting, self._waiting = self._waiting, []
            for e, load in waiting:
                self._attach(e, load)
        return b

    def _attach(self, e: LogEvent, load: int) -> None:
        if load < len(self.loads):
            b = self.loads[load]
            if b is None:  # (never: an incident names the newest load or the next one, see loads_now)
                return
            b.events.append(e)
            b.touched += 1
        else:
            self._waiting.append((e, load))

    def incident(self, e: LogEvent, load: int | None) -> None:
        if self.incidents and _continues(self.incidents[-1][0], self.incidents[-1][1], e, load):
            return
        self.incidents = [[e, load]]  # only the last one is ever looked at again (``_continues``)
        if load is not None:
            self._attach(e, load)

    def finish(self) -> None:
        """Nothing to do: incidents are attached as their loads start."""

    def loads_now(self) -> list[Load]:
        """The loads so far, in log order (the same objects as last time for loads that did not move).

        Every event changes the newest load or starts the next one (an incident names one of the
        two; :class:`LoadStream` relies on the same), so a load that is not the newest is final: once
        built, its builder is released and only its :class:`Load` kept; only a new server version
        can still change it (its era, when its own lines gave none).
        """
        era = era_of_version(self.version)
        out: list[Load] = []
        builders: list[_Builder | None] = self.loads  # type: ignore[assignment]
        newest = len(builders) - 1
        built = self._built
        for i, b in enumerate(builders):
            if b is None:  # final: released
                key, load, own_era = built[i]
                if key[2] != era:
                    if not own_era:
                        load = replace(load, era=era)
                    built[i] = ((key[0], key[1], era), load, own_era)
                out.append(load)
                continue
            key = (b.touched, len(b.events), era)
            if i < len(built) and built[i][0] == key:
                load = built[i][1]
            else:
                load = b.build(era)
                entry = (key, load, b.era is not None)
                if i < len(built):
                    built[i] = entry
                else:
                    built.append(entry)
            if i < newest:
                builders[i] = None
            out.append(load)
        return out
