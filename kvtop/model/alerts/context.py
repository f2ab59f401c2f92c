"""The evaluation context: what every rule needs, computed once per evaluation.

:func:`build` turns a state into a :class:`Ctx`. Everything a rule asks more than once is
answered from an index made once per evaluation (a model by weights blob, a load's time, the
newest load of a blob, the GPUs of a model, each model's KV layout keyed by digest), so the
cost of an evaluation grows linearly with the models, loads and log events. The one pass over
the server log it starts from (:class:`~kvtop.model.alerts.log_scan.LogScan`, kept between
evaluations) is :mod:`kvtop.model.alerts.log_scan`.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import TYPE_CHECKING

from kvtop.logparse.events import ContextOverTraining, LoadRequest, LogEvent, RunnerStarted
from kvtop.logparse.load_build import Load
from kvtop.model import kv
from kvtop.model.alerts.log_scan import LogScan, Timed, log_events, reference_time, scan_log, service_env, unix_seconds
from kvtop.model.alerts.types import Thresholds
from kvtop.model.gpu import GpuView, ModelGpu, gpu_views, model_gpu_usage
from kvtop.model.gpu_snapshots import ServiceEnv

if TYPE_CHECKING:  # annotations only: the rules read the state, the state never imports the rules
    from kvtop.model.views import AppState, ModelView

__all__ = ["Ctx", "OtherKv", "build", "current_types", "other_kv"]


# --------------------------------------------------------------------------------------------
# The context


@dataclass(frozen=True, slots=True)
class OtherKv:
    """What a loaded model could give back with a smaller context: the figures that decide, for
    any shortfall, whether ``kv.max_num_ctx`` would find it a smaller num_ctx (computed once per
    evaluation; see ``spill.other_model_fixes``).

    Attributes:
        view: The model.
        layout: Its KV layout.
        kv_bytes: Its KV cache now (``memory.kv``).
        min_kv: KV bytes at 256 tokens per slot (the least ``max_num_ctx`` can return).
        full_kv: KV bytes at its num_ctx rounded up to 256, None when that is past the cap
            ``max_num_ctx`` searches under (then any answer is smaller than num_ctx).
    """

    view: ModelView
    layout: kv.KVLayout
    kv_bytes: int
    min_kv: int
    full_kv: int | None

    def shrinks_for(self, short: int) -> bool:
        """True exactly when ``0 < kv.max_num_ctx(layout, kv_bytes - short, ...) < num_ctx``."""
        budget = self.kv_bytes - short
        return budget >= self.min_kv and (self.full_kv is None or budget < self.full_kv)


def current_types(view: ModelView) -> tuple[str, str, bool]:
    """The K and V cache types and flash attention the model runs with, from the source ladder
    (log, runner command line, server environment, else Ollama's defaults)."""
    raw_k, _, raw_v = (view.kv_type.value or "f16").partition("/")
    k = kv.normalize_cache_type(raw_k) or "f16"
    v = kv.normalize_cache_type(raw_v) if raw_v else None
    return k, v or k, view.flash_attention.value != "disabled"


def other_kv(view: ModelView, layout: kv.KVLayout, kv_bytes: int) -> OtherKv | None:
    """The :class:`OtherKv` figures of a loaded model at its context, slots and cache types (two
    ``kv.kv_allocation`` calls), None when its num_ctx or slots are not known, when
    ``kv.max_num_ctx`` can return no context for it (the KV arithmetic refuses its cache types,
    or not one 256-token step fits under its training context)."""
    num_ctx, par = view.context.value, view.parallel.value
    if num_ctx is None or par is None or num_ctx < 1 or par < 1:
        return None
    k, v, fa = current_types(view)
    step = kv.CELL_PADDING
    hi = kv.MAX_CONTEXT_CELLS // par // step  # kv.max_num_ctx's search cap, in steps
    if layout.context_length_train:
        hi = min(hi, layout.context_length_train // step)
    try:
        min_kv = kv.kv_allocation(layout, step, par, k, v, flash_attention=fa).total_bytes
        if hi < 1:
            return None
        at = -(-num_ctx // step)  # the first step at or above num_ctx
        full_kv = kv.kv_allocation(layout, at * step, par, k, v, flash_attention=fa).total_bytes if at <= hi else None
    except ValueError:
        return None
    return OtherKv(view, layout, kv_bytes, min_kv, full_kv)


@dataclass(slots=True)
class Ctx:
    """What every rule needs, computed once per evaluation (:func:`build`).

    The fields are the inputs; the methods answer from indexes built on first use, so one
    evaluation costs linearly in the models, loads and events.
    """

    state: AppState
    th: Thresholds
    now: float | None
    naive_tz: tzinfo
    views: tuple[ModelView, ...]
    live: bool
    """False while the server is unreachable: the rows are stale, their state rules are not run."""
    loads: tuple[Load, ...]
    events: Sequence[LogEvent]
    scan: LogScan
    load_starts: list[int]
    recent: list[Timed] = field(default_factory=list)
    usage: dict[tuple[str, str], ModelGpu] = field(default_factory=dict)
    gviews: tuple[GpuView, ...] = ()
    layouts: dict[str, kv.KVLayout | kv.KVUnavailable | None] = field(default_factory=dict)
    _view_by_blob: dict[str, ModelView] | None = None
    _view_by_load: dict[int, ModelView] | None = None
    _view_by_name: dict[str, ModelView] | None = None
    _name_by_blob: dict[str, str] | None = None
    _latest_by_blob: dict[str, Load] | None = None
    _load_ts: dict[int, float | None] = field(default_factory=dict)
    _gpus: dict[int, frozenset[int] | None] = field(default_factory=dict)
    _service_env: tuple[ServiceEnv | None] | None = None
    _over_training: dict[int, ContextOverTraining] | None = None
    _others_by_kv: list[ModelView] | None = None
    _other_kv: dict[int, OtherKv | None] = field(default_factory=dict)
    _others_by_vram: list[tuple[int, int, ModelView]] | None = None

    # -- time ------------------------------------------------------------------------------

    def ts(self, when: datetime | None) -> float | None:
        """Unix seconds of a log time; a naive time is read in ``naive_tz``."""
        return None if when is None else unix_seconds(when, self.naive_tz)

    def recent_enough(self, ts: float | None, window_s: float) -> bool:
        """Whether a time is within ``window_s`` before now (a later time counts too)."""
        return ts is not None and self.now is not None and ts >= self.now - window_s

    # -- loads and models ------------------------------------------------------------------

    def owner(self, line_no: int) -> Load | None:
        """The load that was starting or running when ``line_no`` was printed (the latest one
        that began at or before it)."""
        i = bisect.bisect_right(self.load_starts, line_no) - 1
        return self.loads[i] if i >= 0 else None

    def strict_owner(self, line_no: int) -> Load | None:
        """The load whose lines include ``line_no`` (the grouper attached the line to it)."""
        load = self.owner(line_no)
        return load if load is not None and load.first_line <= line_no <= load.last_line else None

    def next_load(self, line_no: int) -> Load | None:
        """The first load that begins after ``line_no`` (Ollama warns before it spawns)."""
        i = bisect.bisect_right(self.load_starts, line_no)
        return self.loads[i] if i < len(self.loads) else None

    def latest_load(self, blob: str | None) -> Load | None:
        """The newest load of the weights blob (``LogState.latest_load``), from an index."""
        if self._latest_by_blob is None:
            self._latest_by_blob = {load.model_blob: load for load in self.loads if load.model_blob}
        return self._latest_by_blob.get(blob) if blob else None

    def superseded(self, load: Load | None) -> bool:
        """True when a newer load of the same weights exists (the old runner is gone)."""
        if load is None or load.model_blob is None:
            return False
        latest = self.latest_load(load.model_blob)
        return latest is not None and latest.index > load.index

    def load_time(self, load: Load) -> float | None:
        """A load's time: its first line's stamp, or the nearest stamp before it."""
        t = self.ts(load.time)
        if t is not None:
            return t
        key = load.first_line
        if key not in self._load_ts:
            self._load_ts[key] = self.scan.time_of_line(key)
        return self._load_ts[key]

    def view_for_blob(self, blob: str | None) -> ModelView | None:
        """The (first) loaded model with these weights."""
        if blob is None:
            return None
        if self._view_by_blob is None:
            index: dict[str, ModelView] = {}
            for v in self.views:
                if v.model_blob is not None:
                    index.setdefault(v.model_blob, v)
            self._view_by_blob = index
        return self._view_by_blob.get(blob)

    def view_for_load(self, load: Load | None) -> ModelView | None:
        """The (first) loaded model whose current load is ``load``."""
        if load is None:
            return None
        if self._view_by_load is None:
            index: dict[int, ModelView] = {}
            for v in self.views:
                if v.load is not None:
                    index.setdefault(id(v.load), v)
            self._view_by_load = index
        return self._view_by_load.get(id(load))

    def view_named(self, name: str | None) -> ModelView | None:
        """The (first) loaded model of that name."""
        if name is None:
            return None
        if self._view_by_name is None:
            index: dict[str, ModelView] = {}
            for v in self.views:
                index.setdefault(v.name, v)
            self._view_by_name = index
        return self._view_by_name.get(name)

    def name_for_blob(self, blob: str | None) -> str | None:
        """The loaded model's name for a weights blob, else the name a runner was started with."""
        view = self.view_for_blob(blob)
        if view is not None:
            return view.name
        if blob is not None:
            if self._name_by_blob is None:
                self._name_by_blob = {
                    load.model_blob: load.model_name
                    for load in self.loads
                    if load.model_blob is not None and load.model_name
                }
            name = self._name_by_blob.get(blob)
            if name:
                return name
            return self.state.blob_names.get(blob)  # a model /api/ps showed earlier (since unloaded)
        return None

    def layout(self, view: ModelView) -> kv.KVLayout | None:
        """The model's KV layout from its ``/api/show`` answer (once per digest per evaluation),
        None when not derivable."""
        if view.digest in self.layouts:
            found = self.layouts[view.digest]
            return found if isinstance(found, kv.KVLayout) else None
        snap = self.state.last_ok
        show = None
        if snap is not None:
            show = snap.shows.get(view.digest or f"name:{view.name}") or snap.shows.get(f"name:{view.name}")
        result: kv.KVLayout | kv.KVUnavailable | None = None
        if show is not None and not show.error and show.model_info:
            result = kv.layout_from_model_info(show.model_info)
        self.layouts[view.digest] = result
        return result if isinstance(result, kv.KVLayout) else None

    def gpus_of(self, view: ModelView) -> frozenset[int] | None:
        """The GPUs the model's runner holds memory on, None when the GPU sample does not say."""
        key = id(view)
        if key not in self._gpus:
            usage = self.usage.get((view.name, view.digest))
            self._gpus[key] = frozenset(i for i, _ in usage.by_gpu) if usage is not None and usage.by_gpu else None
        return self._gpus[key]

    def service_env(self) -> ServiceEnv | None:
        """:func:`service_env` of the state, computed once."""
        if self._service_env is None:
            self._service_env = (service_env(self.state),)
        return self._service_env[0]

    # -- the log ---------------------------------------------------------------------------

    def config_before(self, line_no: int) -> Mapping[str, str] | None:
        """The ``server config`` env printed last before ``line_no``."""
        configs, n = self.scan.buf.configs, self.scan.n_configs
        if self.scan.ordered:
            i = bisect.bisect_right(configs, line_no, 0, n, key=lambda c: c[0])
            return configs[i - 1][1] if i > 0 else None
        found: Mapping[str, str] | None = None
        for line, env in self.scan.configs:
            if line > line_no:
                break
            found = env
        return found

    def launch_events(self, load: Load) -> list[RunnerStarted | LoadRequest]:
        """The runner spawns and load requests printed among the load's lines."""
        launches, n = self.scan.buf.launches, self.scan.n_launches
        if self.scan.ordered:
            lo = bisect.bisect_left(launches, load.first_line, 0, n, key=lambda e: e.line_no)
            hi = bisect.bisect_right(launches, load.last_line, lo, n, key=lambda e: e.line_no)
            return launches[lo:hi]
        return [e for e in self.scan.launches if load.first_line <= e.line_no <= load.last_line]

    def over_training_line(self, load: Load | None) -> ContextOverTraining | None:
        """The runner's own ``n_ctx_per_seq (N) > n_ctx_train (M)`` line of ``load`` (the last
        one it printed), None when it printed none."""
        if load is None:
            return None
        if self._over_training is None:
            index: dict[int, ContextOverTraining] = {}
            for e in self.scan.over_training:
                owner = self.owner(e.line_no)
                if owner is not None:
                    index[id(owner)] = e
            self._over_training = index
        return self._over_training.get(id(load))

    # -- other models (spill fixes) --------------------------------------------------------

    def others_by_kv(self) -> list[ModelView]:
        """Every loaded model that could take a smaller context (VRAM and its KV cache known, not
        spilled), largest KV cache first (ties in row order)."""
        if self._others_by_kv is None:
            found = [o for o in self.views if o.size_vram_bytes and o.memory.kv.value is not None and not o.spilled]
            found.sort(key=lambda o: -(o.memory.kv.value or 0))  # stable: row order within one size
            self._others_by_kv = found
        return self._others_by_kv

    def other_kv(self, view: ModelView) -> OtherKv | None:
        """:func:`other_kv` of a model, computed at most once per evaluation (two KV
        computations); None when its layout is not known or the arithmetic gives it no context."""
        key = id(view)
        if key not in self._other_kv:
            layout = self.layout(view)
            kv_bytes = view.memory.kv.value
            self._other_kv[key] = (
                other_kv(view, layout, kv_bytes) if layout is not None and kv_bytes is not None else None
            )
        return self._other_kv[key]

    def others_by_vram(self) -> list[tuple[int, int, ModelView]]:
        """``(size_vram, row, view)`` of every loaded model with VRAM, smallest first (ties in
        row order)."""
        if self._others_by_vram is None:
            self._others_by_vram = sorted(
                ((o.size_vram_bytes, i, o) for i, o in enumerate(self.views) if o.size_vram_bytes),
                key=lambda x: (x[0], x[1]),
            )
        return self._others_by_vram


def build(state: AppState, thresholds: Thresholds, naive_tz: tzinfo) -> Ctx:
    """The context of one evaluation of ``state``.

    Args:
        state: The application state.
        thresholds: The alert thresholds.
        naive_tz: The zone of log stamps printed without one.

    Returns:
        The context: the log scanned (:func:`scan_log`), the events within the longest window
        selected, the GPU sample joined with the models once.
    """
    events = log_events(state)
    loads = state.log.loads
    now = reference_time(state, events, naive_tz)
    scan = scan_log(events, naive_tz)
    ctx = Ctx(
        state=state,
        th=thresholds,
        now=now,
        naive_tz=naive_tz,
        views=tuple(v for v in state.models if not v.cloud),
        live=state.reachable is not False,
        loads=loads,
        events=events,
        scan=scan,
        load_starts=[load.first_line for load in loads],
    )
    cutoff = None if now is None else now - max(thresholds.event_window_s, thresholds.churn_window_s)
    ctx.recent = scan.timed_since(cutoff)
    if state.gpu is not None:
        ctx.gviews = gpu_views(state.gpu, state.procs, state.models)
        ctx.usage = model_gpu_usage(state.gpu, state.procs, state.models, views=ctx.gviews)
    return ctx
