"""The evaluation context: what every rule needs, computed once per evaluation.

:func:`build` turns a state into a :class:`Ctx`. Everything a rule asks more than once is
answered from an index made once per evaluation (a model by weights blob, a load's time, the
newest load of a blob, the GPUs of a model, each model's KV layout keyed by digest), so the
cost of an evaluation grows linearly with the models, loads and log events.

The one pass over the server log (:class:`LogScan`: effective times, recent events, server
configs, runner launches) depends only on the events and the zone of unstamped times, so it is
kept for the events tuple it scanned and extended, not repeated, when the next state's tuple
only adds events at the end (``logstate.apply_log`` appends). Its columns only grow and are shared
with the scan that extends it (each scan sees its own prefix), so a batch costs its new events,
never a copy of the log kept. That memo is the only state this package keeps between
evaluations; it never changes a result.
"""

from __future__ import annotations

import bisect
import math
import threading
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import TYPE_CHECKING, Final

from kvtop.logparse.events import ContextOverTraining, LoadRequest, LogEvent, RunnerStarted, ServerConfig
from kvtop.logparse.load_build import Load
from kvtop.model import kv
from kvtop.model.alerts.types import Thresholds
from kvtop.model.gpu import GpuView, ModelGpu, ServiceEnv, gpu_views, model_gpu_usage
from kvtop.model.ladder import RunnerIndex
from kvtop.model.logstate import Prefix

if TYPE_CHECKING:  # annotations only: the rules read the state, the state never imports the rules
    from kvtop.model.views import AppState, ModelView

__all__ = [
    "RECENT_KINDS",
    "Ctx",
    "LogScan",
    "OtherKv",
    "Prefix",
    "Timed",
    "build",
    "current_types",
    "log_events",
    "other_kv",
    "reference_time",
    "scan_log",
    "service_env",
]


@dataclass(frozen=True, slots=True)
class Timed:
    """A log event with its effective time (Unix seconds, None when no stamp precedes it)."""

    event: LogEvent
    ts: float | None


RECENT_KINDS: Final = frozenset({
    "truncation", "oom", "load_failed", "eviction", "unknown_warning", "flash_attention_forced_off",
    "kv_type_fallback", "context_clamped", "context_over_training", "prompt_rejected", "context_overflow",
})
"""Event kinds the event rules read (kept with their effective time by :func:`scan_log`)."""


# --------------------------------------------------------------------------------------------
# The log scan


def _stamp(when: datetime, naive_tz: tzinfo) -> float | None:
    """Unix seconds of a log time; a naive time is read in ``naive_tz``; None when out of range."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=naive_tz)
    try:
        return when.timestamp()
    except (OverflowError, OSError, ValueError):
        return None


class _Buffers:
    """The append-only columns of a log scan, shared by a scan and the scans that extend it.

    ``end`` is how many events the newest scan using them has claimed: a scan whose ``n`` equals it
    may append (under ``_scans_lock`` it claims the new end first); any other (an older state
    extended a second time) copies its prefix instead, so a column is never written twice.
    """

    __slots__ = ("configs", "end", "launches", "line_nos", "over", "timed", "times")

    def __init__(self) -> None:
        self.line_nos: array[int] = array("q")
        self.times: array[float] = array("d")
        self.timed: list[Timed] = []
        self.configs: list[tuple[int, Mapping[str, str]]] = []
        self.launches: list[RunnerStarted | LoadRequest] = []
        self.over: list[ContextOverTraining] = []
        self.end = 0

    def prefix_of(self, scan: LogScan) -> _Buffers:
        """New buffers holding what ``scan`` sees (a copy: the rare branch of an older state)."""
        out = _Buffers()
        out.line_nos = self.line_nos[:scan.n]
        out.times = self.times[:scan.n]
        out.timed = self.timed[:scan.n_timed]
        out.configs = self.configs[:scan.n_configs]
        out.launches = self.launches[:scan.n_launches]
        out.over = self.over[:scan.n_over]
        out.end = scan.n
        return out


@dataclass(frozen=True, slots=True)
class LogScan:
    """One pass over a tuple of log events: every event's effective time and the events the
    rules read, in log order.

    A line printed without a timestamp (llama.cpp's own lines) takes the time of the nearest
    timestamped line before it, None when no stamped line precedes it.

    The columns live in buffers that only grow, shared with the scan of the next state (which
    appends the new events' entries): extending a scan costs the new events only, and the memo's
    scans of one log share one copy of them. The attributes below are read-only views.

    Attributes:
        events: The events scanned (held, so that its ``id`` is never reused while cached).
        naive_tz: The zone naive stamps were read in.
        n: ``len(events)``.
        timed: Every event of :data:`RECENT_KINDS` with its effective time.
        configs: ``(line_no, env)`` of every ``server config`` line.
        launches: Runner spawns and load requests.
        over_training: The runner's ``n_ctx_per_seq > n_ctx_train`` lines.
        line_nos: Each event's line number, one per event.
        times: Each event's effective time in Unix seconds, NaN for None, one per event.
        ordered: True when ``line_nos`` never decreases (line lookups bisect; else they search).
        ts_sorted: True when the stamped ``timed`` times never decrease and every unstamped one
            comes first (``untimed_head`` of them): :meth:`timed_since` then bisects.
        last_time: The last stamp object seen, and ``last_ts`` its seconds: where a scan of
            events appended later resumes.
    """

    events: Sequence[LogEvent]
    naive_tz: tzinfo
    buf: _Buffers = field(repr=False, compare=False)
    n: int
    n_timed: int
    n_configs: int
    n_launches: int
    n_over: int
    ordered: bool
    ts_sorted: bool
    untimed_head: int
    last_timed_ts: float | None
    last_time: datetime | None
    last_ts: float | None

    @property
    def timed(self) -> Prefix[Timed]:
        return Prefix(self.buf.timed, self.n_timed)

    @property
    def configs(self) -> Prefix[tuple[int, Mapping[str, str]]]:
        return Prefix(self.buf.configs, self.n_configs)

    @property
    def launches(self) -> Prefix[RunnerStarted | LoadRequest]:
        return Prefix(self.buf.launches, self.n_launches)

    @property
    def over_training(self) -> Prefix[ContextOverTraining]:
        return Prefix(self.buf.over, self.n_over)

    @property
    def line_nos(self) -> Prefix[int]:
        return Prefix(self.buf.line_nos, self.n)

    @property
    def times(self) -> Prefix[float]:
        return Prefix(self.buf.times, self.n)

    def time_of_line(self, line_no: int) -> float | None:
        """The effective time of the first event printed on ``line_no``; None when no event has
        that line number or no stamp precedes it."""
        lines, n = self.buf.line_nos, self.n
        if self.ordered:
            i = bisect.bisect_left(lines, line_no, 0, n)
            if i >= n or lines[i] != line_no:
                return None
        else:
            try:
                i = lines.index(line_no, 0, n)
            except ValueError:
                return None
        t = self.buf.times[i]
        return None if math.isnan(t) else t

    def timed_since(self, cutoff: float | None) -> list[Timed]:
        """The ``timed`` events with no time or a time at or after ``cutoff`` (all when None), in
        log order: a bisection when ``ts_sorted`` (the cost grows with the events returned, not
        with the log kept), else one pass."""
        timed, n = self.buf.timed, self.n_timed
        if cutoff is None:
            return timed[:n]
        if self.ts_sorted:
            head = self.untimed_head
            i = bisect.bisect_left(timed, cutoff, head, n, key=_ts_of)
            return timed[:head] + timed[i:n]
        return [t for t in timed[:n] if t.ts is None or t.ts >= cutoff]


def _ts_of(t: Timed) -> float:
    return t.ts  # type: ignore[return-value]  # (only called on stamped entries)


def _scan(events: Sequence[LogEvent], start: int, naive_tz: tzinfo, base: LogScan | None,
          whole: Sequence[LogEvent], buf: _Buffers) -> LogScan:
    """Scan ``events[start:]`` into ``buf``, continuing ``base`` (the scan of ``events[:start]``)
    when given."""
    if base is not None:
        ordered, last_dt, last_ts = base.ordered, base.last_time, base.last_ts
        ts_sorted, head, last_timed_ts = base.ts_sorted, base.untimed_head, base.last_timed_ts
    else:
        ordered, last_dt, last_ts = True, None, None
        ts_sorted, head, last_timed_ts = True, 0, None
    line_nos, times, timed = buf.line_nos, buf.times, buf.timed
    configs, launches, over = buf.configs, buf.launches, buf.over
    prev_line = line_nos[start - 1] if start else None
    nan = math.nan
    recent_kinds = RECENT_KINDS
    for e in events[start:]:
        when = e.time
        if when is not None and when is not last_dt:
            last_dt = when
            last_ts = _stamp(when, naive_tz)
        line = e.line_no
        if prev_line is not None and line < prev_line:
            ordered = False
        prev_line = line
        line_nos.append(line)
        times.append(nan if last_ts is None else last_ts)
        if e.kind in recent_kinds:
            timed.append(Timed(e, last_ts))
            if last_ts is None:
                if last_timed_ts is None:
                    head += 1
                else:
                    ts_sorted = False
            else:
                if last_timed_ts is not None and last_ts < last_timed_ts:
                    ts_sorted = False
                last_timed_ts = last_ts
            if isinstance(e, ContextOverTraining):
                over.append(e)
        elif isinstance(e, ServerConfig):
            configs.append((e.line_no, e.env))
        elif isinstance(e, (RunnerStarted, LoadRequest)):
            launches.append(e)
        elif isinstance(e, ContextOverTraining):  # pragma: no cover - its kind is a recent kind
            over.append(e)
    return LogScan(
        events=whole, naive_tz=naive_tz, buf=buf, n=len(events), n_timed=len(timed), n_configs=len(configs),
        n_launches=len(launches), n_over=len(over), ordered=ordered, ts_sorted=ts_sorted, untimed_head=head,
        last_timed_ts=last_timed_ts, last_time=last_dt, last_ts=last_ts,
    )


_SCANS_KEPT: Final = 4
"""Scans kept (one per log followed). A scan is dropped when a newer one extends it, or when the log
it scanned was trimmed at its cap (the full pass over the trimmed tuple finds the old one's last
event in it), so the memo holds one scan per log, not old copies of it."""
_scans: dict[int, LogScan] = {}
_scans_lock = threading.Lock()


def _extends(new: Sequence[LogEvent], old: Sequence[LogEvent]) -> bool:
    """Whether ``new`` is ``old`` with events appended (checked by identity at both ends of
    ``old``: ``logstate.apply_log`` only appends, or trims the oldest, which this rejects)."""
    n = len(old)
    return 0 < n < len(new) and new[0] is old[0] and new[n - 1] is old[n - 1]


def _holds_end_of(scan: LogScan, old: Sequence[LogEvent]) -> bool:
    """Whether ``old``'s last event (the same object) is among ``scan``'s events: ``old`` is the log
    ``scan`` scanned before its oldest events were trimmed. Found by bisection on the line numbers
    of an ordered scan; an unordered one answers False (the memo's bound then drops the old one)."""
    if not old or not scan.ordered or old is scan.events:
        return False
    last = old[-1]
    lines, n, events = scan.buf.line_nos, scan.n, scan.events
    i = bisect.bisect_left(lines, last.line_no, 0, n)
    while i < n and lines[i] == last.line_no:
        if events[i] is last:
            return True
        i += 1
    return False


def scan_log(events: Sequence[LogEvent], naive_tz: tzinfo) -> LogScan:
    """The scan of ``events`` (see :class:`LogScan`): from the memo when this tuple was scanned,
    extended from the scan of a tuple it appends to (only the new events are scanned, their
    entries appended to the columns that scan shares), else a full pass.

    Args:
        events: The log events, oldest first (``LogState.load_events`` or ``recent``).
        naive_tz: The zone of stamps printed without one.

    Returns:
        The scan; equal to a full pass over ``events`` in every case.
    """
    with _scans_lock:
        hit = _scans.get(id(events))
        if hit is not None and hit.events is events and hit.naive_tz == naive_tz:
            return hit
        base = next((s for s in reversed(_scans.values()) if s.naive_tz == naive_tz and _extends(events, s.events)),
                    None)
        if base is None:
            buf = _Buffers()
        elif base.buf.end == base.n:
            buf = base.buf  # the newest scan of these columns: append to them
        else:
            buf = base.buf.prefix_of(base)  # an older state extended again: its own copy
        buf.end = len(events)
    result = _scan(events, base.n if base is not None else 0, naive_tz, base, events, buf)
    if not events:
        return result  # nothing to keep: an empty log (a remote host's) must not push a real one out
    with _scans_lock:
        if base is not None and _scans.get(id(base.events)) is base:
            del _scans[id(base.events)]  # the new scan covers its log
        elif base is None:
            for key in [k for k, s in _scans.items() if _holds_end_of(result, s.events)]:
                del _scans[key]  # the same log before it was trimmed
        _scans.pop(id(events), None)
        _scans[id(events)] = result
        while len(_scans) > _SCANS_KEPT:
            _scans.pop(next(iter(_scans)))
    return result


def log_events(state: AppState) -> Sequence[LogEvent]:
    """The longest history the log state keeps (``load_events``, else the events pane's ``recent``)."""
    log = state.log
    return log.load_events if len(log.load_events) >= len(log.recent) else log.recent


def reference_time(state: AppState, events: Sequence[LogEvent], naive_tz: tzinfo) -> float | None:
    """"Now" for the rules: the latest ``/api/ps`` poll's time, else the latest GPU or process
    sample's, else the newest log stamp; None when there is none."""
    if state.ollama is not None:
        return state.ollama.taken_at
    times = [s.taken_at for s in (state.gpu, state.procs) if s is not None]
    if times:
        return max(times)
    for e in reversed(events):
        if e.time is not None:
            return _stamp(e.time, naive_tz)
    return None


def service_env(state: AppState) -> ServiceEnv | None:
    """The environment of the ``ollama serve`` that serves this state's host (found by its listen
    port), else of the server whose runner a model of this state runs on; None when neither is
    known or readable (the service rung)."""
    env = RunnerIndex(state.procs, None, state.host_url).host_env
    if env is None:
        envs = {id(v.local.env): v.local.env for v in state.models if v.local.env is not None}
        env = next(iter(envs.values())) if len(envs) == 1 else None
    return env if env is not None and env.readable else None


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
        return None if when is None else _stamp(when, self.naive_tz)

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
                self._name_by_blob = {load.model_blob: load.model_name for load in self.loads
                                      if load.model_blob is not None and load.model_name}
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
            self._other_kv[key] = other_kv(view, layout, kv_bytes) if layout is not None and kv_bytes is not None else None
        return self._other_kv[key]

    def others_by_vram(self) -> list[tuple[int, int, ModelView]]:
        """``(size_vram, row, view)`` of every loaded model with VRAM, smallest first (ties in
        row order)."""
        if self._others_by_vram is None:
            self._others_by_vram = sorted(
                ((o.size_vram_bytes, i, o) for i, o in enumerate(self.views) if o.size_vram_bytes),
                key=lambda x: (x[0], x[1]))
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
        state=state, th=thresholds, now=now, naive_tz=naive_tz,
        views=tuple(v for v in state.models if not v.cloud), live=state.reachable is not False, loads=loads,
        events=events, scan=scan, load_starts=[load.first_line for load in loads],
    )
    cutoff = None if now is None else now - max(thresholds.event_window_s, thresholds.churn_window_s)
    ctx.recent = scan.timed_since(cutoff)
    if state.gpu is not None:
        ctx.gviews = gpu_views(state.gpu, state.procs, state.models)
        ctx.usage = model_gpu_usage(state.gpu, state.procs, state.models, views=ctx.gviews)
    return ctx
