"""Alert rules: what is wrong with the server's memory right now, why, and what would fix it.

``evaluate(state)`` turns an :class:`~kvtop.model.state.AppState` into a tuple of
:class:`Alert`, most severe first. It is pure: no I/O and no clock. "Now" is the latest
snapshot's ``taken_at``; a log event's time is the timestamp printed on its line.

Two kinds of rule:

* **State rules** hold while their condition holds and are re-derived from every state: a model
  spilled to system RAM, a KV cache type or flash attention that the running load did not get,
  a context above the training context, the server unreachable, the log source lost, a GPU
  nearly full or shared with foreign processes, swap in use while a model is spilled. While the
  server is unreachable the per-model state rules are not evaluated (the rows are stale).
* **Event rules** read the server log: truncated or rejected prompts, clamped contexts, OOMs, failed loads,
  refused quantized V caches, runner crashes, evictions and reload churn. An event counts only
  while it is recent: its time is within ``Thresholds.event_window_s`` (reload churn:
  ``churn_window_s``) before now. A line printed without a timestamp (llama.cpp's own lines)
  takes the time of the nearest timestamped line before it; one with no timestamped line
  before it has no time and never counts, except the incidents of a loaded model's current
  load. Journald and Go-logger stamps carry no zone: they are read in ``naive_tz`` (UTC
  unless the caller passes the server's zone). An event of a load that a newer load of the
  same weights has replaced does not count either: a model that reloaded fine after an OOM
  is not still out of memory.

Each alert has a stable ``key`` (kind and model) so that ``since`` survives from one evaluation
to the next: pass the previous result as ``previous``. Without one, ``since`` is the snapshot's
time (state rules) or the first recent event's time (event rules).

Fixes are computed, not suggested from a list. For a spill, the KV arithmetic of
:mod:`kvtop.model.kv` inverts the memory the model may use on the GPU into the largest num_ctx
at the current cache type, the q8_0/q4_0 alternatives and fewer slots. That budget is the
GPU's free memory plus what the model holds in VRAM now (``kvtop.model.plan.gpu_budget``) when
the GPU sample shows the model's runner on a GPU, otherwise the model's own ``size_vram``; the
alert says which. Everything but the KV cache (weights, compute buffers) is taken as unchanged
by a fix, which slightly understates what a smaller context or a quantized cache saves (the
compute buffer shrinks a little too), so a fix marked ``fits`` errs on the safe side.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timezone, tzinfo
from typing import TYPE_CHECKING, Any, Final, Literal

from kvtop.logparse.events import (
    ContextClamped,
    ContextOverTraining,
    Eviction,
    FlashAttentionForcedOff,
    KvTypeFallback,
    LoadFailed,
    LoadRequest,
    LogEvent,
    Oom,
    PromptRejected,
    RunnerStarted,
    ServerConfig,
    Truncation,
    UnknownWarning,
)
from kvtop.logparse.loads import Load
from kvtop.model import kv
from kvtop.model.gpu import GpuView, ModelGpu, ServiceEnv, gpu_views, model_gpu_usage
from kvtop.model.ladder import RunnerIndex, go_bool, setting_in_force

if TYPE_CHECKING:  # annotations only: state.py may import this module (AppState.alerts)
    from kvtop.model.state import AppState, ModelView

__all__ = [
    "DEFAULT_THRESHOLDS",
    "KINDS",
    "Alert",
    "Fix",
    "Severity",
    "Thresholds",
    "alert_json",
    "evaluate",
    "exit_code",
]

Severity = Literal["info", "warning", "critical"]
"""How bad an alert is: ``critical`` (requests are slow or failing now), ``warning`` (something
is off or about to be), ``info`` (worth knowing, nothing to do)."""

KINDS: Final[Mapping[str, tuple[Severity, str]]] = {
    "server_unreachable": ("critical", "the latest /api/ps poll failed"),
    "spill": ("critical", "part of a model is in system RAM (size_vram < size, layers or buffers on the CPU)"),
    "quantized_v_refused": ("critical", "llama.cpp refused a quantized V cache without flash attention: the load failed"),
    "oom": ("critical", "out of memory at load or run time"),
    "load_failed": ("critical", "a model load failed"),
    "runner_crash": ("critical", "a runner aborted (GGML_ASSERT, panic, segfault)"),
    "log_source_lost": ("warning", "the server log cannot be read"),
    "kv_type_not_applied": ("warning", "the KV cache type requested is not the one allocated"),
    "flash_attention_off": ("warning", "flash attention is off although requested or needed by a quantized cache"),
    "prompt_truncated": ("warning", "prompts longer than the context were cut"),
    "prompt_rejected": ("warning", "llama-server refused prompts longer than the context (HTTP 400)"),
    "reload_churn": ("warning", "the same weights were loaded again and again"),
    "eviction": ("warning", "the scheduler unloaded a model to make room"),
    "context_over_training": ("warning", "num_ctx is above the model's training context"),
    "foreign_vram": ("warning", "processes outside Ollama hold memory on a GPU Ollama uses"),
    "gpu_nearly_full": ("warning", "a GPU Ollama uses has less free memory than the headroom"),
    "swap_in_use": ("warning", "swap is in use while a model is partly in system RAM"),
    "context_clamped": ("info", "Ollama clamped a requested num_ctx to the training context"),
}
"""Every alert kind: its severity and what it means. The order is the display order within one
severity."""

_SEVERITY_RANK: Final[Mapping[str, int]] = {"critical": 0, "warning": 1, "info": 2}
_KIND_RANK: Final[Mapping[str, int]] = {k: i for i, k in enumerate(KINDS)}

_MIB: Final = 1024 * 1024
_GIB: Final = 1024 * _MIB
_INCIDENT_GAP_S: Final = 60.0
"""Lines of one kind less than this apart (and of one load) are one incident (as ``logparse.loads``)."""

_QUANTIZED_V_RE: Final = re.compile(
    r"V cache quantization requires flash_attn|quantized V cache (?:was requested|requires)", re.IGNORECASE)
_CRASH_RE: Final = re.compile(
    r"GGML_ASSERT|SIGSEGV|SIGABRT|segmentation fault|core dumped|panic:|runner process has terminated"
    r"|exception in thread|std::bad_alloc", re.IGNORECASE)
_FA_ON: Final = frozenset({"on", "true", "1", "enabled", "t", "yes"})
_FA_FORCED_RE: Final = re.compile(r"forcing off|not supported|not compatible|pre-Turing", re.IGNORECASE)
_UNQUANTIZED: Final = frozenset({"f16", "f32", "bf16"})
_BOOL_FALSE: Final = frozenset({"0", "f", "false"})


# --------------------------------------------------------------------------------------------
# Data types


@dataclass(frozen=True, slots=True)
class Fix:
    """One way out of an alert, with its numbers.

    Attributes:
        action: What to change, as the user would type it: ``num_ctx 16384``,
            ``OLLAMA_KV_CACHE_TYPE=q8_0``, ``OLLAMA_NUM_PARALLEL=1``, ``unload qwen3:8b``.
        detail: The arithmetic behind it: ``KV 2.0 GiB (−2.0 GiB)``.
        fits: True when the model would then be 100% on the GPU (or, for a larger context, still
            fit); False when even this is not enough; None when it cannot be computed.
        cost: What it takes away: truncated prompts, cache quality, concurrency, a restart.
    """

    action: str
    detail: str
    fits: bool | None
    cost: str


@dataclass(frozen=True, slots=True)
class Alert:
    """One problem, as the alert bar, the detail view, ``--once --json`` and ``--check`` show it.

    Attributes:
        kind: A key of :data:`KINDS`.
        severity: ``critical``, ``warning`` or ``info``.
        model: The model it is about (an ``/api/ps`` name), None for server- or GPU-wide alerts
            and for log events the log does not tie to a loaded model.
        since: Unix seconds: when the condition was first seen (carried over by ``key``).
        message: The cause in one line, with its numbers.
        fixes: Computed fixes, the ones that fit first.
        key: Stable identity (kind and model or device) for de-duplication and ``since``.
    """

    kind: str
    severity: Severity
    model: str | None
    since: float | None
    message: str
    fixes: tuple[Fix, ...] = ()
    key: str = ""


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Alert thresholds, from ``config.toml``'s ``[alerts]`` table (:meth:`from_mapping`).

    Attributes:
        gpu_headroom_bytes: ``gpu_nearly_full`` fires when a GPU Ollama uses has less free
            memory than this. 512 MiB: about one compute buffer; less and the next load or a
            longer context spills.
        foreign_vram_bytes: ``foreign_vram`` fires when processes outside Ollama hold more than
            this on a GPU Ollama uses. 1 GiB: more than a CUDA context (~300-500 MiB), so a
            desktop session or a stray notebook kernel shows, a compositor does not.
        churn_reloads: ``reload_churn`` fires when one weights blob was loaded at least this
            many times within ``churn_window_s``. 3: one reload is a changed setting, three
            are clients fighting over num_ctx (or a keep_alive too short).
        churn_window_s: See ``churn_reloads``. 600 s.
        event_window_s: A log event (truncation, OOM, failed load, eviction, clamp, crash)
            raises an alert while it is at most this old relative to the latest snapshot. 900 s
            (15 min): long enough to be seen on a dashboard refreshed every second, short
            enough that ``--check`` in a cron job does not report yesterday.
        swap_used_bytes: ``swap_in_use`` fires when more swap than this is used while a model is
            spilled. 256 MiB: a long-running Linux box keeps some pages in swap anyway.
        fix_reserve_bytes: GPU memory a spill fix leaves free on top of what it needs. 0: the
            budget is what Ollama itself gave the model (``size_vram``) or the free memory
            NVML reports, which is net of the driver's reserve already.
    """

    gpu_headroom_bytes: int = 512 * _MIB
    foreign_vram_bytes: int = 1 * _GIB
    churn_reloads: int = 3
    churn_window_s: float = 600.0
    event_window_s: float = 900.0
    swap_used_bytes: int = 256 * _MIB
    fix_reserve_bytes: int = 0

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any] | None) -> tuple[Thresholds, list[str]]:
        """Read thresholds from ``config.toml``'s ``[alerts]`` table; never raises.

        Keys are the attribute names (``gpu_headroom_bytes``), or the same without their unit
        suffix (``gpu_headroom``, ``churn_window``). Byte values are integers or strings with a
        unit (``"512MiB"``, ``"24GiB"``, ``"1GB"``; ``kvtop.model.plan.parse_bytes``); seconds
        are numbers or strings with ``s``, ``m`` or ``h`` (``"10m"``); ``churn_reloads`` is an
        integer of at least 2.

        Args:
            m: The ``[alerts]`` table (``Settings.alerts``), None or empty for the defaults.

        Returns:
            The thresholds and one warning per unknown key or unusable value (that value keeps
            its default).
        """
        from kvtop.model.plan import parse_bytes  # lazy: plan imports state

        defaults = cls()
        values: dict[str, Any] = {}
        warnings: list[str] = []
        names = {f.name for f in fields(cls)}
        aliases = {n.removesuffix("_bytes").removesuffix("_s"): n for n in names}
        for raw_key, value in (m or {}).items():
            key = str(raw_key).strip().lower().replace("-", "_")
            name = key if key in names else aliases.get(key)
            if name is None:
                warnings.append(f"[alerts] unknown key {raw_key!r} ignored (known: {', '.join(sorted(names))})")
                continue
            default = getattr(defaults, name)
            try:
                if name.endswith("_bytes"):
                    parsed: Any = _config_bytes(value, parse_bytes)
                elif name.endswith("_s"):
                    parsed = _config_seconds(value)
                else:
                    parsed = _config_count(value)
            except (TypeError, ValueError) as exc:
                shown = _ib(default) if name.endswith("_bytes") else f"{default:g}"
                warnings.append(f"[alerts] {name} = {value!r}: {exc} — the default {shown} is used")
                continue
            values[name] = parsed
        return replace(defaults, **values), warnings


DEFAULT_THRESHOLDS: Final = Thresholds()
"""The thresholds used when ``config.toml`` has no ``[alerts]`` table."""


_BYTES_HINT: Final = "not a byte count (e.g. 512MiB or 536870912)"
_SECONDS_HINT: Final = 'not a duration (e.g. 600 or "10m")'


def _config_bytes(value: Any, parse_bytes: Any) -> int:
    """A byte threshold: a non-negative integer, or a string with a unit. Raises TypeError/ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(_BYTES_HINT)
    if isinstance(value, str):
        result = parse_bytes(value.strip())
        if not isinstance(result, int):  # pragma: no cover - parse_bytes returns an int or raises
            raise TypeError(_BYTES_HINT)
        return result
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise ValueError(_BYTES_HINT)
    if value < 0:
        raise ValueError("must not be negative")
    return int(value)


def _config_seconds(value: Any) -> float:
    """A duration threshold: seconds, or a string with ``s``, ``m`` or ``h``. Raises TypeError/ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(_SECONDS_HINT)
    if isinstance(value, str):
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h)?\s*", value.lower())
        if m is None:
            raise ValueError(_SECONDS_HINT)
        seconds = float(m.group(1)) * {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}.get(m.group(2) or "s", 1)
    else:
        seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError("must be a positive number of seconds")
    return seconds


def _config_count(value: Any) -> int:
    """A count threshold (``churn_reloads``): an integer of at least 2. Raises TypeError/ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError("not a whole number")
    try:
        count = int(value)
    except ValueError:
        raise ValueError("not a whole number") from None
    if count < 2:
        raise ValueError("must be at least 2")
    return count


# --------------------------------------------------------------------------------------------
# Formatting (the model keeps bytes; alert messages are the one place it writes them)


def _ib(n: int | None) -> str:
    """``4.0 GiB``, ``448 MiB``, ``512 B``; ``?`` for None (binary units, as the dashboard)."""
    if n is None:
        return "?"
    value = float(abs(n))
    units = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
    unit = 0
    while value >= 1024 and unit < len(units) - 1:
        value /= 1024
        unit += 1
    sign = "−" if n < 0 else ""
    if unit == 0:
        return f"{sign}{int(value)} B"
    return f"{sign}{value:.0f} {units[unit]}" if value >= 100 else f"{sign}{value:.1f} {units[unit]}"


def _delta(n: int) -> str:
    """``+1.2 GiB`` / ``−2.0 GiB`` (a real minus sign)."""
    return ("+" if n >= 0 else "−") + _ib(abs(n))


def _slots(n: int) -> str:
    return f"{n} slot" if n == 1 else f"{n} slots"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"


def _short_blob(blob: str) -> str:
    return blob[:19] + "…" if len(blob) > 19 else blob


# --------------------------------------------------------------------------------------------
# The evaluation context


@dataclass(frozen=True, slots=True)
class _Timed:
    """A log event with its effective time (Unix seconds, None when no stamp precedes it)."""

    event: LogEvent
    ts: float | None


@dataclass(slots=True)
class _Ctx:
    """What every rule needs, computed once per :func:`evaluate`."""

    state: AppState
    th: Thresholds
    now: float | None
    naive_tz: tzinfo
    views: tuple[ModelView, ...]
    live: bool
    """False while the server is unreachable: the rows are stale, their state rules are not run."""
    loads: tuple[Load, ...]
    events: tuple[LogEvent, ...]
    usage: dict[tuple[str, str], ModelGpu] = field(default_factory=dict)
    gviews: tuple[GpuView, ...] = ()
    recent: list[_Timed] = field(default_factory=list)
    configs: list[tuple[int, Mapping[str, str]]] = field(default_factory=list)
    launches: list[RunnerStarted | LoadRequest] = field(default_factory=list)
    load_starts: list[int] = field(default_factory=list)
    load_ts: dict[int, float | None] = field(default_factory=dict)
    layouts: dict[str, kv.KVLayout | kv.KVUnavailable | None] = field(default_factory=dict)

    # -- time ------------------------------------------------------------------------------

    def ts(self, when: datetime | None) -> float | None:
        """Unix seconds of a log time; a naive time is read in ``naive_tz``."""
        if when is None:
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=self.naive_tz)
        try:
            return when.timestamp()
        except (OverflowError, OSError, ValueError):
            return None

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

    def superseded(self, load: Load | None) -> bool:
        """True when a newer load of the same weights exists (the old runner is gone)."""
        if load is None or load.model_blob is None:
            return False
        latest = self.state.log.latest_load(load.model_blob)
        return latest is not None and latest.index > load.index

    def load_time(self, load: Load) -> float | None:
        """A load's time: its first line's stamp, or the nearest stamp before it."""
        t = self.ts(load.time)
        return t if t is not None else self.load_ts.get(load.first_line)

    def view_for_blob(self, blob: str | None) -> ModelView | None:
        if blob is None:
            return None
        return next((v for v in self.views if v.model_blob == blob), None)

    def name_for_blob(self, blob: str | None) -> str | None:
        """The loaded model's name for a weights blob, else the name a runner was started with."""
        view = self.view_for_blob(blob)
        if view is not None:
            return view.name
        if blob is not None:
            for load in reversed(self.loads):
                if load.model_blob == blob and load.model_name:
                    return load.model_name
            return self.state.blob_names.get(blob)  # a model /api/ps showed earlier (since unloaded)
        return None

    def layout(self, view: ModelView) -> kv.KVLayout | None:
        """The model's KV layout from its ``/api/show`` answer, None when not derivable."""
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

    def config_before(self, line_no: int) -> Mapping[str, str] | None:
        """The ``server config`` env printed last before ``line_no``."""
        found: Mapping[str, str] | None = None
        for line, env in self.configs:
            if line > line_no:
                break
            found = env
        return found

    def launch_events(self, load: Load) -> list[RunnerStarted | LoadRequest]:
        return [e for e in self.launches if load.first_line <= e.line_no <= load.last_line]


def _reference_time(state: AppState, events: Sequence[LogEvent], naive_tz: tzinfo) -> float | None:
    if state.ollama is not None:
        return state.ollama.taken_at
    times = [s.taken_at for s in (state.gpu, state.procs) if s is not None]
    if times:
        return max(times)
    for e in reversed(events):
        if e.time is not None:
            t = e.time if e.time.tzinfo is not None else e.time.replace(tzinfo=naive_tz)
            try:
                return t.timestamp()
            except (OverflowError, OSError, ValueError):
                return None
    return None


_RECENT_KINDS: Final = frozenset({
    "truncation", "oom", "load_failed", "eviction", "unknown_warning", "flash_attention_forced_off",
    "kv_type_fallback", "context_clamped", "context_over_training", "prompt_rejected",
})


def _scan(ctx: _Ctx) -> None:
    """One pass over the log: effective times, recent events, server configs, launches."""
    cutoff = None if ctx.now is None else ctx.now - max(ctx.th.event_window_s, ctx.th.churn_window_s)
    starts = set(ctx.load_starts)
    last_dt: datetime | None = None
    last_ts: float | None = None
    for e in ctx.events:
        if e.time is not None and e.time is not last_dt:
            last_dt = e.time
            last_ts = ctx.ts(e.time)
        kind = e.kind
        if e.line_no in starts and e.line_no not in ctx.load_ts:
            ctx.load_ts[e.line_no] = last_ts
        if kind in _RECENT_KINDS:
            if last_ts is None or cutoff is None or last_ts >= cutoff:
                ctx.recent.append(_Timed(e, last_ts))
        elif isinstance(e, ServerConfig):
            ctx.configs.append((e.line_no, e.env))
        elif isinstance(e, (RunnerStarted, LoadRequest)):
            ctx.launches.append(e)


def _log_events(state: AppState) -> tuple[LogEvent, ...]:
    """The longest history the log state keeps (``load_events``, else the events pane's ``recent``)."""
    log = state.log
    return log.load_events if len(log.load_events) >= len(log.recent) else log.recent


# --------------------------------------------------------------------------------------------
# Public API


def evaluate(
    state: AppState,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    previous: Sequence[Alert] = (),
    *,
    naive_tz: tzinfo = timezone.utc,
) -> tuple[Alert, ...]:
    """Every alert the state raises, most severe first.

    Args:
        state: The application state (snapshots, derived model rows, the log so far).
        thresholds: Alert thresholds (:meth:`Thresholds.from_mapping`).
        previous: The previous result: an alert with the same ``key`` keeps its ``since``.
        naive_tz: The zone of log timestamps printed without one (journald short stamps, Go's
            standard logger). The app passes the server's local zone when it reads a local log.

    Returns:
        Alerts ordered by severity, then by kind (:data:`KINDS` order), model and key; at most
        one alert per key.
    """
    events = _log_events(state)
    loads = state.log.loads
    ctx = _Ctx(
        state=state, th=thresholds, now=_reference_time(state, events, naive_tz), naive_tz=naive_tz,
        views=tuple(v for v in state.models if not v.cloud), live=state.reachable is not False, loads=loads,
        events=events,
        load_starts=[load.first_line for load in loads],
    )
    if state.gpu is not None:
        ctx.usage = model_gpu_usage(state.gpu, state.procs, state.models)
        ctx.gviews = gpu_views(state.gpu, state.procs, state.models)
    _scan(ctx)

    found: list[Alert] = []
    found.extend(_server_alerts(ctx))
    current: dict[int, ModelView] = {}
    if ctx.live:
        for view in ctx.views:
            if view.load is not None:
                current[id(view.load)] = view
            for rule in (_spill, _context_over_training):
                alert = rule(ctx, view)
                if alert is not None:
                    found.append(alert)
    found.extend(_load_alerts(ctx, current))
    found.extend(_truncation_alerts(ctx))
    found.extend(_rejection_alerts(ctx))
    found.extend(_clamp_alerts(ctx))
    found.extend(_runner_over_training_alerts(ctx, current))
    found.extend(_incident_alerts(ctx, current))
    found.extend(_churn_alerts(ctx))
    found.extend(_gpu_alerts(ctx))

    env = _service_env(state)
    before = {a.key: a for a in previous}
    out: dict[str, Alert] = {}
    for a in found:
        if a.key in out:
            continue  # the first rule to claim a key wins (state rules run before event rules)
        if env is not None and a.fixes:
            kept = tuple(f for f in a.fixes if not _in_force(env, f.action))
            if kept != a.fixes:
                a = replace(a, fixes=kept)
        prev = before.get(a.key)
        if prev is not None and prev.since is not None:
            a = replace(a, since=prev.since)
        out[a.key] = a
    return tuple(sorted(out.values(), key=_order))


_SETTING_RE = re.compile(r"(OLLAMA_[A-Z_]+)=(\S+)")


def _service_env(state: AppState) -> ServiceEnv | None:
    """The environment of the ``ollama serve`` that serves this state's host (found by its listen
    port), else of the server whose runner a model of this state runs on; None when neither is
    known or readable (the service rung)."""
    env = RunnerIndex(state.procs, None, state.host_url).host_env
    if env is None:
        envs = {id(v.local.env): v.local.env for v in state.models if v.local.env is not None}
        env = next(iter(envs.values())) if len(envs) == 1 else None
    return env if env is not None and env.readable else None


def _in_force(env: ServiceEnv, action: str) -> bool:
    """True when a fix's action is only a setting (``OLLAMA_X=v``) that the server already has:
    a fix never asks for what is already set (the source ladder's service rung)."""
    m = _SETTING_RE.fullmatch(action.strip())
    return m is not None and setting_in_force(env, m.group(1), m.group(2))


def _order(a: Alert) -> tuple[int, int, str, str]:
    return (_SEVERITY_RANK.get(a.severity, 3), _KIND_RANK.get(a.kind, len(_KIND_RANK)), a.model or "", a.key)


def alert_json(a: Alert) -> dict[str, Any]:
    """One alert as JSON-ready data: ``{kind, severity, model, since, message, fixes}``.

    ``since`` is ISO 8601 in UTC (``2026-11-18T09:46:40+00:00``) or null; each fix is
    ``{action, detail, fits, cost}`` with ``fits`` true, false or null.
    """
    since = None
    if a.since is not None:
        try:
            since = datetime.fromtimestamp(a.since, tz=timezone.utc).isoformat()
        except (OverflowError, OSError, ValueError):
            since = None
    return {
        "kind": a.kind,
        "severity": a.severity,
        "model": a.model,
        "since": since,
        "message": a.message,
        "fixes": [{"action": f.action, "detail": f.detail, "fits": f.fits, "cost": f.cost} for f in a.fixes],
    }


def exit_code(alerts: Iterable[Alert], reachable: bool | None) -> int:
    """The ``kvtop --check`` exit status.

    Args:
        alerts: The alerts of the state checked.
        reachable: Whether the server answered (None: no poll made, counted as unreachable).

    Returns:
        2 when any alert is critical or the server is not reachable, 1 when any is a warning,
        else 0 (``info`` alerts do not count).
    """
    severities = {a.severity for a in alerts}
    if reachable is not True or "critical" in severities:
        return 2
    return 1 if "warning" in severities else 0


# --------------------------------------------------------------------------------------------
# Server and log source


def _server_alerts(ctx: _Ctx) -> list[Alert]:
    out: list[Alert] = []
    state = ctx.state
    snap = state.ollama
    if snap is not None and not snap.reachable:
        text = f"Ollama at {state.host_url} does not answer: {snap.error or 'no reason given'}"
        if state.last_ok is not None:
            text += f"; last good poll {max(0.0, snap.taken_at - state.last_ok.taken_at):.0f} s earlier"
        if state.failures > 1:
            text += f" ({state.failures} failed polls in a row)"
        out.append(Alert("server_unreachable", "critical", None, snap.taken_at, text, (), "server_unreachable"))
    log = state.log
    if not log.ok:
        text = f"server log {log.source or '(no source)'}: {log.status or 'cannot be read'}"
        text += "; log-based alerts (truncation, OOM, KV type) are blind until it is back"
        out.append(Alert("log_source_lost", "warning", None, ctx.now, text, (), "log_source_lost"))
    return out


# --------------------------------------------------------------------------------------------
# Spill


def _is_cpu_device(device: str) -> bool:
    d = device.upper()
    return d == "CPU" or d.startswith("CPU_") or d.endswith("_HOST") or d == "BLAS"


def _load_on_gpu(load: Load | None) -> bool:
    """The runner saw a GPU: a buffer on a GPU device, an offloaded layer, a GPU's free memory."""
    if load is None:
        return False
    devices = [d for per in load.memory.values() for d in per]
    return (any(not _is_cpu_device(d) for d in devices) or bool(load.layers_offloaded)
            or any(not _is_cpu_device(d) for d in load.device_free))


def _cpu_buffers(load: Load | None) -> dict[str, int]:
    """KV (and, with partial offload, weights) bytes the load put on CPU devices."""
    if load is None or not _load_on_gpu(load):
        return {}
    full = (load.layers_offloaded is not None and load.layers_total is not None
            and load.layers_offloaded >= load.layers_total)
    out: dict[str, int] = {}
    for component in ("kv", "weights"):
        if component == "weights" and (full or load.layers_offloaded is None):
            continue
        cpu = sum(b for d, b in load.memory.get(component, {}).items() if _is_cpu_device(d) and b > 0)
        if cpu:
            out[component] = cpu
    return out


def _gpu_present(ctx: _Ctx, view: ModelView) -> bool:
    """Whether the machine running this model has a GPU (for a 100% CPU model)."""
    if _load_on_gpu(view.load):
        return True
    usage = ctx.usage.get((view.name, view.digest))
    gpu = ctx.state.gpu
    return (usage is not None and bool(usage.runner_pids) and gpu is not None and gpu.ok
            and any(d.error is None and (d.memory_total_bytes or 0) > 0 for d in gpu.devices))


@dataclass(frozen=True, slots=True)
class _Budget:
    """GPU memory a model may use, and what that leaves for its KV cache."""

    budget: int
    need: int
    free: int | None
    kv_now: int | None
    text: str

    @property
    def kv_budget(self) -> int | None:
        """KV bytes that keep the model 100% on the GPU, other buffers unchanged."""
        return None if self.kv_now is None else self.kv_now - (self.need - self.budget)


def _budget(ctx: _Ctx, view: ModelView, deficit: int) -> _Budget:
    """The budget: free memory on the model's GPUs + its ``size_vram``, else its ``size_vram``."""
    from kvtop.model.plan import gpu_budget  # lazy: plan imports state

    held = max(0, view.size_vram_bytes or 0)
    reserve = ctx.th.fix_reserve_bytes
    free: int | None = None
    where = ""
    usage = ctx.usage.get((view.name, view.digest))
    gpu = ctx.state.gpu
    if usage is not None and gpu is not None and gpu.ok:
        devices = {d.index: d for d in gpu.devices if d.error is None}
        indices = sorted({i for i, _ in usage.by_gpu if i in devices})
        if not indices and usage.runner_pids:
            indices = sorted(devices)  # the runner is local but on no GPU (100% CPU): any GPU
        frees = [devices[i].memory_free_bytes for i in indices]
        if indices and all(f is not None for f in frees):
            free = sum(f or 0 for f in frees)
            where = "GPU " + ", ".join(str(i) for i in indices)
    if free is not None:
        budget = gpu_budget(free, held, reserve) or 0
        text = f"fixes sized for {_ib(budget)} of VRAM: {_ib(free)} free on {where} + {_ib(held)} it holds now"
    else:
        budget = max(0, held - reserve)
        text = f"fixes sized for the {_ib(budget)} it holds in VRAM now (no GPU telemetry for its runner)"
    if reserve:
        text += f", {_ib(reserve)} kept free"
    kv_now = view.memory.kv.value
    if kv_now is None and view.kv_estimate is not None:
        kv_now = view.kv_estimate.total_bytes
    return _Budget(budget=budget, need=held + deficit, free=free, kv_now=kv_now, text=text)


def _current_types(view: ModelView) -> tuple[str, str, bool]:
    """The cache types and flash attention the model runs with, from the source ladder (log,
    runner command line, server environment, else Ollama's defaults)."""
    raw_k, _, raw_v = (view.kv_type.value or "f16").partition("/")
    k = kv.normalize_cache_type(raw_k) or "f16"
    v = kv.normalize_cache_type(raw_v) if raw_v else None
    return k, v or k, view.flash_attention.value != "disabled"


def _spill(ctx: _Ctx, view: ModelView) -> Alert | None:
    size, vram = view.size_bytes, view.size_vram_bytes
    load = view.load
    cpu = _cpu_buffers(load)
    causes: list[str] = []
    deficit = 0
    if size and vram is not None and 0 < vram < size:
        deficit = size - vram
        causes.append(f"{view.cpu_percent}% of {_ib(size)} in system RAM ({_ib(deficit)})")
    elif size and vram == 0 and _gpu_present(ctx, view):
        deficit = size
        causes.append(f"all {_ib(size)} in system RAM although the machine has a GPU")
    if load is not None and load.layers_offloaded is not None and load.layers_total and _load_on_gpu(load) \
            and load.layers_offloaded < load.layers_total:
        causes.append(f"{load.layers_offloaded}/{load.layers_total} layers on the GPU")
    if load is not None and load.fit_overflowing:
        causes.append(f"{load.fit_overflowing} layers overflow the GPU (llama-server fit)")
    if "kv" in cpu:
        causes.append(f"KV cache {_ib(cpu['kv'])} on the CPU")
    if not causes:
        return None
    if deficit == 0:
        deficit = sum(cpu.values())
    ctx_value, par = view.context.value, view.parallel.value
    type_k, type_v, _ = _current_types(view)
    kv_value = view.memory.kv.value
    if kv_value is not None:
        source = "" if view.memory.kv.source == "allocated" else f" ({view.memory.kv.source})"
        shape = ""
        if ctx_value is not None and par is not None:
            shape = f" at num_ctx {ctx_value} × {_slots(par)}"
        causes.append(f"KV cache {_ib(kv_value)}{source}{shape}, {type_k if type_k == type_v else f'{type_k}/{type_v}'}")
    budget = _budget(ctx, view, deficit)
    fixes = _spill_fixes(ctx, view, budget)
    message = "; ".join(causes)
    if fixes:
        message += f"; {budget.text}"
    return Alert("spill", "critical", view.name, ctx.now, message, fixes, f"spill:{view.name}")


def _sorted_fixes(fixes: Iterable[Fix]) -> tuple[Fix, ...]:
    rank = {True: 0, None: 1, False: 2}
    return tuple(sorted(fixes, key=lambda f: rank[f.fits]))  # stable: logical order within a rank


def _bytes_per_element(cache_type: str) -> float:
    size, block = kv.CACHE_TYPES[cache_type]
    return size / block


def _fa_cost(view: ModelView, cache_type: str) -> str:
    quality = ("quality close to f16" if cache_type == "q8_0" else "noticeably lower quality on long contexts")
    fa = view.flash_attention
    if fa.value == "enabled":
        state = f" (on now, {fa.source})"
    elif setting_in_force(view.local.env, "OLLAMA_FLASH_ATTENTION", "1"):
        state = " (OLLAMA_FLASH_ATTENTION is set)"
    elif fa.value == "auto":
        state = " (auto now: llama.cpp decides at load, unknown without the log; OLLAMA_FLASH_ATTENTION=1 makes it sure)"
    else:
        state = " (OLLAMA_FLASH_ATTENTION=1)"
    cost = f"{cache_type} cache: {quality}; needs flash attention{state}"
    if view.flash_attention.value == "disabled":
        reason = view.load.flash_attention_reason if view.load is not None else None
        cost += f", which is off now{f' ({reason})' if reason else ''}"
    return cost + "; server-wide, restart Ollama"


def _spill_fixes(ctx: _Ctx, view: ModelView, b: _Budget) -> tuple[Fix, ...]:
    layout = ctx.layout(view)
    ctx_value, par = view.context.value, view.parallel.value
    kv_budget = b.kv_budget
    fixes: list[Fix] = []
    if layout is None or ctx_value is None or par is None or kv_budget is None or b.kv_now is None:
        why = view.kv_unavailable or "num_ctx, slots or the KV size is not known"
        fixes.append(Fix("lower num_ctx", f"KV arithmetic unavailable: {why}", None,
                         "prompts over the new num_ctx are truncated"))
        fixes.extend(_other_model_fixes(ctx, view, b))
        return _sorted_fixes(fixes)
    type_k, type_v, fa = _current_types(view)
    kv_now = b.kv_now
    if b.need <= b.budget:
        fixes.append(Fix(f"reload {view.name}", f"needs {_ib(b.need)}, {_ib(b.budget)} available now", True,
                         "one slow request while it reloads; nothing else changes"))
    try:
        best = kv.max_num_ctx(layout, kv_budget, par, type_k, type_v, flash_attention=fa)
    except ValueError:
        best = None
    if best is not None and b.need > b.budget:
        if 0 < best < ctx_value:
            new = kv.kv_allocation(layout, best, par, type_k, type_v, flash_attention=fa).total_bytes
            fixes.append(Fix(f"num_ctx {best}", f"KV {_ib(new)} ({_delta(new - kv_now)})", True,
                             f"prompts over {best} tokens are truncated (now {ctx_value})"))
        elif best == 0:
            fixes.append(Fix("lower num_ctx", f"not enough: weights and compute alone need "
                             f"{_ib(b.need - kv_now)} of {_ib(b.budget)}", False,
                             "the context is not what overflows"))
    current_bpe = _bytes_per_element(type_k) + _bytes_per_element(type_v)
    for cache_type in ("q8_0", "q4_0"):
        if 2 * _bytes_per_element(cache_type) >= current_bpe or b.need <= b.budget:
            continue
        if setting_in_force(view.local.env, "OLLAMA_KV_CACHE_TYPE", cache_type):
            continue  # already set and still not in effect: the kv_type_not_applied alert says why
        try:
            new = kv.kv_allocation(layout, ctx_value, par, cache_type, flash_attention=True).total_bytes
        except ValueError as exc:
            fixes.append(Fix(f"OLLAMA_KV_CACHE_TYPE={cache_type}", f"llama.cpp refuses it here: {exc}", False, ""))
            continue
        if new <= kv_budget:
            fixes.append(Fix(f"OLLAMA_KV_CACHE_TYPE={cache_type}", f"KV {_ib(new)} ({_delta(new - kv_now)})", True,
                             _fa_cost(view, cache_type)))
            continue
        n = kv.max_num_ctx(layout, kv_budget, par, cache_type, flash_attention=True)
        if n > (best or 0):
            new = kv.kv_allocation(layout, n, par, cache_type, flash_attention=True).total_bytes
            fixes.append(Fix(f"OLLAMA_KV_CACHE_TYPE={cache_type} and num_ctx {n}",
                             f"KV {_ib(new)} ({_delta(new - kv_now)})", True,
                             f"prompts over {n} tokens are truncated (now {ctx_value}); " + _fa_cost(view, cache_type)))
    if par > 1 and b.need > b.budget:
        slots_fix: Fix | None = None
        for p in range(par - 1, 0, -1):
            new = kv.kv_allocation(layout, ctx_value, p, type_k, type_v, flash_attention=fa).total_bytes
            if new <= kv_budget or p == 1:
                slots_fix = Fix(f"OLLAMA_NUM_PARALLEL={p}", f"KV {_ib(new)} ({_delta(new - kv_now)})",
                                new <= kv_budget,
                                f"{_plural(par - p, 'fewer concurrent request')} ({_slots(p)} of num_ctx {ctx_value});"
                                " server-wide, restart Ollama")
                break
        if slots_fix is not None:
            fixes.append(slots_fix)
    if b.need > b.budget:
        fixes.extend(_other_model_fixes(ctx, view, b))
    return _sorted_fixes(fixes)


def _gpus_of(ctx: _Ctx, view: ModelView) -> set[int] | None:
    usage = ctx.usage.get((view.name, view.digest))
    if usage is None or not usage.by_gpu:
        return None
    return {i for i, _ in usage.by_gpu}


def _other_model_fixes(ctx: _Ctx, view: ModelView, b: _Budget) -> list[Fix]:
    """Room another loaded model could give: a smaller context for it, or unloading it."""
    short = b.need - b.budget
    if short <= 0:
        return []
    mine = _gpus_of(ctx, view)
    others: list[ModelView] = []
    for o in ctx.views:
        if o is view or not o.size_vram_bytes:
            continue
        theirs = _gpus_of(ctx, o)
        if mine is not None and theirs is not None and not mine & theirs:
            continue  # measured on other GPUs: unloading it frees nothing here
        others.append(o)
    if not others:
        return []
    shared = "" if mine is not None else " (if it shares the GPU)"
    fixes: list[Fix] = []
    # a smaller context for the other model with the largest KV cache
    best_ctx: Fix | None = None
    for o in sorted(others, key=lambda m: -(m.memory.kv.value or 0)):
        layout = ctx.layout(o)
        o_ctx, o_par, o_kv = o.context.value, o.parallel.value, o.memory.kv.value
        if layout is None or o_ctx is None or o_par is None or o_kv is None or o.spilled:
            continue
        k, v, fa = _current_types(o)
        try:
            n = kv.max_num_ctx(layout, o_kv - short, o_par, k, v, flash_attention=fa)
        except ValueError:
            continue
        if 0 < n < o_ctx:
            new = kv.kv_allocation(layout, n, o_par, k, v, flash_attention=fa).total_bytes
            best_ctx = Fix(f"num_ctx {n} for {o.name}", f"frees {_ib(o_kv - new)} of VRAM{shared}", True,
                           f"{o.name}: prompts over {n} tokens are truncated (now {o_ctx}); it reloads")
            break
    if best_ctx is not None:
        fixes.append(best_ctx)
    enough = sorted((o for o in others if (o.size_vram_bytes or 0) >= short), key=lambda m: m.size_vram_bytes or 0)
    if enough:
        o = enough[0]
        fixes.append(Fix(f"unload {o.name}", f"frees {_ib(o.size_vram_bytes)} of VRAM{shared}", True,
                         f"{o.name} reloads on its next request (ollama stop {o.name})"))
    else:
        total = sum(o.size_vram_bytes or 0 for o in others)
        names = ", ".join(o.name for o in others)
        fixes.append(Fix(f"unload {names}", f"frees {_ib(total)} of VRAM{shared}, {_ib(short)} needed",
                         total >= short, "they reload on their next request"))
    return fixes


# --------------------------------------------------------------------------------------------
# Context


def _next_power_of_two(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _context_fix(ctx: _Ctx, view: ModelView, num_ctx: int, cost: str) -> Fix:
    """``num_ctx N`` for ``view`` with its KV change and whether it fits (budget as for spills)."""
    layout = ctx.layout(view)
    par = view.parallel.value
    if layout is None or par is None:
        return Fix(f"num_ctx {num_ctx}", "KV arithmetic unavailable for this model", None, cost)
    k, v, fa = _current_types(view)
    try:
        new = kv.kv_allocation(layout, num_ctx, par, k, v, flash_attention=fa).total_bytes
    except ValueError as exc:
        return Fix(f"num_ctx {num_ctx}", f"KV arithmetic refused: {exc}", None, cost)
    size, vram = view.size_bytes, view.size_vram_bytes
    deficit = size - vram if size and vram is not None and vram < size else 0
    b = _budget(ctx, view, deficit)
    kv_budget = b.kv_budget
    if b.kv_now is None or kv_budget is None:
        return Fix(f"num_ctx {num_ctx}", f"KV {_ib(new)}", None, cost)
    fits: bool | None = new <= kv_budget
    if new > b.kv_now and b.free is None:
        fits = None  # a larger cache needs free memory that only GPU telemetry shows
    return Fix(f"num_ctx {num_ctx}", f"KV {_ib(new)} ({_delta(new - b.kv_now)})", fits, cost)


def _runner_over_training(ctx: _Ctx, load: Load | None) -> ContextOverTraining | None:
    """The runner's own ``n_ctx_per_seq (N) > n_ctx_train (M)`` line of ``load``, if it printed one."""
    if load is None:
        return None
    found = None
    for e in ctx.events:
        if isinstance(e, ContextOverTraining) and ctx.owner(e.line_no) is load:
            found = e
    return found


def _context_over_training(ctx: _Ctx, view: ModelView) -> Alert | None:
    num_ctx, train = view.context.value, view.context_train
    where = ""
    if not train:  # /api/show did not give <arch>.context_length: the runner's line may
        line = _runner_over_training(ctx, view.load)
        if line is not None:
            train, where = line.n_ctx_train, f"; the runner said so (log line {line.line_no})"
    if num_ctx is None or not train or num_ctx <= train:
        return None
    text = (f"num_ctx {num_ctx} is above the training context {train} ({view.context.source}): past {train} tokens"
            f" the model degrades, and the extra cache is allocated anyway{where}")
    fix = _context_fix(ctx, view, train, f"none: the model was trained on {train} tokens")
    return Alert("context_over_training", "warning", view.name, ctx.now, text, (fix,),
                 f"context_over_training:{view.name}")


def _single_model(ctx: _Ctx) -> ModelView | None:
    return ctx.views[0] if len(ctx.views) == 1 else None


def _truncation_alerts(ctx: _Ctx) -> list[Alert]:
    window = ctx.th.event_window_s
    groups: dict[str | None, list[_Timed]] = {}
    for t in ctx.recent:
        e = t.event
        if not isinstance(e, Truncation):
            continue
        owner = ctx.owner(e.line_no)
        current = owner is not None and ctx.live and any(v.load is owner for v in ctx.views)
        if not (ctx.recent_enough(t.ts, window) or (t.ts is None and current)) or ctx.superseded(owner):
            continue
        single = _single_model(ctx)
        model = None
        if single is not None and (owner is None or owner.model_blob in (None, single.model_blob)):
            if e.prompt is not None and single.context.value is not None and single.context.value >= e.prompt:
                continue  # the running context holds that prompt now: from an earlier, smaller load
            if (owner is None and e.limit is not None and single.context.value is not None
                    and e.limit not in (single.context.value, single.total_ctx_cells)):
                model = None  # a line that names no model, with another context: not this runner's
            else:
                model = single.name
        groups.setdefault(model, []).append(t)
    out: list[Alert] = []
    for model, items in groups.items():
        last = items[-1].event
        assert isinstance(last, Truncation)
        cut = f"a {last.prompt}-token prompt cut to {last.new}, " if last.prompt is not None else ""
        text = (f"{_plural(len(items), 'prompt')} truncated in the last {_minutes(window)} (latest: {cut}limit"
                f" {last.limit}, keep {last.keep}): the replies ignored the start of the prompt")
        fixes: tuple[Fix, ...] = ()
        view = next((v for v in ctx.views if v.name == model), None)
        longest = max((i.event.prompt for i in items if isinstance(i.event, Truncation) and i.event.prompt), default=None)
        if longest is not None:
            target = _next_power_of_two(longest)
            cap = view.context_train if view is not None else None
            if cap:
                target = min(target, cap)
            cost = "more KV cache memory" + (f"; capped at the training context {cap}" if cap and target == cap else "")
            if view is not None:
                fixes = (_context_fix(ctx, view, target, cost),)
            else:
                fixes = (Fix(f"num_ctx {target}", f"holds the longest prompt seen ({longest} tokens)", None, cost),)
        elif last.limit:
            fixes = (Fix(f"num_ctx {2 * last.limit}", "the log does not print the prompt length: twice the limit",
                         None, "more KV cache memory"),)
        since = next((i.ts for i in items if i.ts is not None), None)
        out.append(Alert("prompt_truncated", "warning", model, since, text, fixes, f"prompt_truncated:{model or '-'}"))
    return out


def _rejection_alerts(ctx: _Ctx) -> list[Alert]:
    """``prompt_rejected`` from llama-server's ``request (N tokens) exceeds the available context size
    (M tokens)``: the model is the load the line belongs to (the newest begun before it), else the
    only loaded model; the fix is the num_ctx that holds the longest prompt, sized by the KV math."""
    window = ctx.th.event_window_s
    groups: dict[str | None, list[tuple[_Timed, PromptRejected]]] = {}
    for t in ctx.recent:
        e = t.event
        if not isinstance(e, PromptRejected):
            continue
        owner = ctx.owner(e.line_no)
        view = next((v for v in ctx.views if owner is not None and v.load is owner), None) if ctx.live else None
        if view is None and owner is not None and owner.model_blob is not None:
            view = ctx.view_for_blob(owner.model_blob) if ctx.live else None
        if view is None and (owner is None or owner.model_blob is None) and ctx.live:
            view = _single_model(ctx)
        current = view is not None and owner is not None and view.load is owner
        if not (ctx.recent_enough(t.ts, window) or (t.ts is None and current)) or ctx.superseded(owner):
            continue
        if view is not None and view.context.value is not None and view.context.value >= e.n_prompt_tokens:
            continue  # the running context holds that prompt now: from an earlier, smaller load
        model = view.name if view is not None else ctx.name_for_blob(owner.model_blob if owner is not None else None)
        groups.setdefault(model, []).append((t, e))
    out: list[Alert] = []
    for model, items in groups.items():
        last = items[-1][1]
        longest = max(e.n_prompt_tokens for _, e in items)
        view = next((v for v in ctx.views if v.name == model), None)
        target = _next_power_of_two(longest)
        cap = view.context_train if view is not None else None
        if cap and target > cap:
            target = cap
        holds = target >= longest
        head = (f"prompt rejected: {last.n_prompt_tokens} tokens > num_ctx {last.n_ctx}" if len(items) == 1 else
                f"{len(items)} prompts rejected in the last {_minutes(window)} (latest: {last.n_prompt_tokens} tokens"
                f" > num_ctx {last.n_ctx})")
        if holds:
            tail = f"; num_ctx {target} would hold {'it' if len(items) == 1 else f'the longest ({longest} tokens)'}"
        else:
            tail = f"; even the training context {cap} is shorter than {longest} tokens: the client must send less"
        text = head + tail + " (llama-server answered HTTP 400, nothing was generated)"
        cost = "more KV cache memory" + (f"; capped at the training context {cap}" if cap and target == cap else "")
        fix: Fix | None = None
        if holds and view is not None:
            fix = _context_fix(ctx, view, target, cost)
        elif holds:
            fix = Fix(f"num_ctx {target}", f"holds the longest prompt seen ({longest} tokens)", None, cost)
        since = next((t.ts for t, _ in items if t.ts is not None), ctx.now)
        out.append(Alert("prompt_rejected", "warning", model, since, text, (fix,) if fix is not None else (),
                         f"prompt_rejected:{model or '-'}"))
    return out


def _clamp_alerts(ctx: _Ctx) -> list[Alert]:
    """``context_clamped`` from Ollama's clamp warning (before the spawn: the next load is the model)."""
    found: dict[str | None, tuple[_Timed, int | None, int | None]] = {}
    first: dict[str | None, float | None] = {}
    for t in ctx.recent:
        e = t.event
        if not isinstance(e, ContextClamped):
            continue
        if not ctx.recent_enough(t.ts, ctx.th.event_window_s):
            continue
        load = ctx.next_load(e.line_no)
        model = ctx.name_for_blob(load.model_blob) if load is not None else None
        found[model] = (t, e.requested, e.n_ctx_train)
        first.setdefault(model, t.ts)
    out: list[Alert] = []
    for model, (t, asked, train) in found.items():
        text = (f"num_ctx {asked if asked is not None else '?'} was requested; Ollama clamped it to the training context"
                f" {train if train is not None else '?'}: longer prompts are truncated")
        out.append(Alert("context_clamped", "info", model, first.get(model), text, (), f"context_clamped:{model or '-'}"))
    return out


def _runner_over_training_alerts(ctx: _Ctx, current: Mapping[int, ModelView]) -> list[Alert]:
    """``context_over_training`` from the runner's line, for loads no loaded row covers (the state
    rule handles the loaded ones): a recent load, or one with no timestamps that is still current."""
    found: dict[str | None, tuple[_Timed, ContextOverTraining]] = {}
    for t in ctx.recent:
        e = t.event
        if not isinstance(e, ContextOverTraining):
            continue
        owner = ctx.owner(e.line_no)
        if owner is not None and id(owner) in current:
            continue  # a loaded model's load: the state rule has the row's numbers
        if not ctx.recent_enough(t.ts, ctx.th.event_window_s) or ctx.superseded(owner):
            continue
        model = ctx.name_for_blob(owner.model_blob) if owner is not None else None
        found[model or (owner.model_blob if owner is not None else None)] = (t, e)
    out: list[Alert] = []
    for ident, (t, e) in found.items():
        owner = ctx.owner(e.line_no)
        model = ctx.name_for_blob(owner.model_blob) if owner is not None else None
        name = model or (_short_blob(ident) if ident else None)
        text = (f"{name + ': ' if name else ''}the runner ran num_ctx {e.n_ctx_per_seq} per slot, above the training"
                f" context {e.n_ctx_train} (log line {e.line_no}): past {e.n_ctx_train} tokens the model degrades")
        fix = Fix(f"num_ctx {e.n_ctx_train}", "the training context: nothing past it is of use", None,
                  f"none: the model was trained on {e.n_ctx_train} tokens")
        out.append(Alert("context_over_training", "warning", model, t.ts, text, (fix,),
                         f"context_over_training:{ident or '-'}"))
    return out


# --------------------------------------------------------------------------------------------
# Per-load settings: KV cache type and flash attention


def _requested_kv(ctx: _Ctx, load: Load) -> tuple[str | None, str]:
    """The KV cache type asked for this load, and where that is written."""
    for e in load.events:
        if isinstance(e, KvTypeFallback) and e.requested:
            return e.requested, "Ollama's warning"
    for e in ctx.launch_events(load):
        if isinstance(e, RunnerStarted):
            value = e.cache_type_k or e.kv_cache_type
            if value:
                return value, f"runner command line --cache-type-k {value}" if e.cache_type_k else \
                    f"runner command line --kv-cache-type {value}"
        elif e.kv_cache_type:
            return e.kv_cache_type, f"load request KvCacheType:{e.kv_cache_type}"
    env = ctx.config_before(load.first_line)
    value = env.get("OLLAMA_KV_CACHE_TYPE", "").strip().strip("\"'") if env is not None else ""
    if value:
        return value, f"OLLAMA_KV_CACHE_TYPE={value} (server config)"
    return None, ""


def _allocated_kv(ctx: _Ctx, load: Load) -> str | None:
    if load.kv_type_k:
        return kv.normalize_cache_type(load.kv_type_k) or load.kv_type_k
    if any(isinstance(e, KvTypeFallback) for e in load.events):
        return "f16"
    for e in ctx.launch_events(load):
        if isinstance(e, LoadRequest) and e.kv_cache_type == "":
            return "f16"  # B2: an empty KvCacheType is the f16 default (Ref §3.2)
        if (isinstance(e, RunnerStarted) and e.complete and e.cmd is not None and e.era in ("A", "B1", "C")
                and not (e.cache_type_k or e.kv_cache_type)):
            return "f16"  # a complete command line without a cache type flag: the runner's default
    return None


def _fa_requested(ctx: _Ctx, load: Load) -> str | None:
    """Why flash attention was expected on for this load, or None."""
    if any(isinstance(e, FlashAttentionForcedOff) for e in load.events):
        return "it was enabled and then forced off"
    if load.flash_attention_requested and load.flash_attention_requested.strip().lower() in _FA_ON:
        return f"requested ({load.flash_attention_requested})"
    env = ctx.config_before(load.first_line)
    value = env.get("OLLAMA_FLASH_ATTENTION", "").strip().strip("\"'") if env is not None else ""
    # "false" is also what the server config prints when the variable is unset (Ref §3.1)
    if value and value.lower() not in _BOOL_FALSE:
        return f"OLLAMA_FLASH_ATTENTION={value} (server config)"
    service = _service_env(ctx.state)
    if service is not None and go_bool(service.get("OLLAMA_FLASH_ATTENTION")):
        return f"OLLAMA_FLASH_ATTENTION={service.get('OLLAMA_FLASH_ATTENTION')} ({service.source})"
    return None


def _fa_forced(load: Load) -> bool:
    """The runner or Ollama turned flash attention off because the model or GPU cannot use it."""
    return (any(isinstance(e, FlashAttentionForcedOff) for e in load.events)
            or _FA_FORCED_RE.search(load.flash_attention_reason or "") is not None)


def _fa_fix(ctx: _Ctx, load: Load, needs: str | None) -> Fix | None:
    """What turns flash attention on for ``load`` (None when nothing in the environment can)."""
    if _fa_forced(load):
        if needs is None:
            return None
        return Fix("OLLAMA_KV_CACHE_TYPE=f16", "the model or GPU cannot use flash attention, and a quantized cache"
                   " needs it", None, "f16 cache: about twice the KV memory of q8_0; server-wide, restart Ollama")
    if _fa_requested(ctx, load) is not None:
        return None  # already asked for and still off: the runner decided (GPU or model support)
    raw = (load.flash_attention_requested or "").strip()
    if raw.lower() in ("off", "false", "0", "disabled"):
        detail = f"it is off on purpose now ({raw})"
    elif needs:
        detail = "unset means auto, which a quantized cache does not count as enabled (v0.13.4+)"
    else:
        detail = "unset means auto: the runner decides"
    return Fix("OLLAMA_FLASH_ATTENTION=1", detail, None, "server-wide, restart Ollama")


def _load_alerts(ctx: _Ctx, current: Mapping[int, ModelView]) -> list[Alert]:
    """KV type and flash attention of the current loads (state) and of recent other loads."""
    live = ctx.views if ctx.live else ()
    candidates: list[tuple[Load, ModelView | None]] = [(v.load, v) for v in live if v.load is not None]
    seen_blobs = {v.model_blob for v in live if v.load is not None}
    for load in ctx.loads:
        if id(load) in current or ctx.superseded(load) or (load.model_blob is not None and load.model_blob in seen_blobs):
            continue
        if ctx.recent_enough(ctx.load_time(load), ctx.th.event_window_s):
            candidates.append((load, None))
    out: list[Alert] = []
    for load, view in candidates:
        model = view.name if view is not None else ctx.name_for_blob(load.model_blob)
        who = model or (_short_blob(load.model_blob) if load.model_blob else f"a load (log line {load.first_line})")
        key = model or load.model_blob or f"line{load.first_line}"
        since = ctx.now if view is not None else ctx.load_time(load)
        requested, where = _requested_kv(ctx, load)
        req_norm = kv.normalize_cache_type(requested) if requested is not None else None
        needs = req_norm if req_norm is not None and req_norm not in _UNQUANTIZED else None
        allocated = _allocated_kv(ctx, load)
        if requested is not None and allocated is not None and req_norm != allocated:
            fallback = next((e for e in load.events if isinstance(e, KvTypeFallback)), None)
            if fallback is not None:
                reason = fallback.reason
            elif req_norm is None:
                reason = f"{requested!r} is not a cache type llama.cpp accepts"
            elif load.flash_attention == "disabled" and needs:
                reason = f"flash attention is off ({load.flash_attention_reason or 'resolved off'})"
            else:
                reason = "the log gives no reason"
            text = f"{who}: KV cache {allocated} allocated, {requested} requested ({where}): {reason}"
            fixes: list[Fix] = []
            fa_fix = _fa_fix(ctx, load, needs) if needs and load.flash_attention == "disabled" else None
            if fa_fix is not None:
                fixes.append(fa_fix)
            if view is not None and req_norm is not None:
                fixes.extend(_type_saving(ctx, view, req_norm))
            out.append(Alert("kv_type_not_applied", "warning", model, since, text, tuple(fixes),
                             f"kv_type_not_applied:{key}"))
        if load.flash_attention == "disabled":
            why = _fa_requested(ctx, load)
            if why is not None or needs:
                parts = [why] if why else []
                if needs:
                    parts.append(f"the {needs} cache needs it")
                text = (f"{who}: flash attention is off although {' and '.join(parts)}:"
                        f" {load.flash_attention_reason or 'resolved off'}")
                fa_fix = _fa_fix(ctx, load, needs)
                out.append(Alert("flash_attention_off", "warning", model, since, text,
                                 (fa_fix,) if fa_fix is not None else (), f"flash_attention_off:{key}"))
    return out


def _type_saving(ctx: _Ctx, view: ModelView, cache_type: str) -> list[Fix]:
    """What ``cache_type`` would change in the model's KV cache (formula against formula)."""
    lay = ctx.layout(view)
    c, p = view.context.value, view.parallel.value
    if lay is None or c is None or p is None:
        return []
    k, v, fa = _current_types(view)
    try:
        now = kv.kv_allocation(lay, c, p, k, v, flash_attention=fa).total_bytes
        new = kv.kv_allocation(lay, c, p, cache_type, flash_attention=True).total_bytes
    except ValueError as exc:
        return [Fix(f"OLLAMA_KV_CACHE_TYPE={cache_type}", f"llama.cpp refuses it for this model: {exc}", False, "")]
    return [Fix(f"OLLAMA_KV_CACHE_TYPE={cache_type} once it applies", f"KV {_ib(new)} ({_delta(new - now)})", None,
                "what the requested type would change")]


# --------------------------------------------------------------------------------------------
# Incidents: OOM, failed loads, refused quantized V caches, crashes, evictions


@dataclass(slots=True)
class _Incidents:
    kind: str
    model: str | None
    blob: str | None = None
    load: Load | None = None
    items: list[_Timed] = field(default_factory=list)

    def count(self) -> int:
        """Incidents: lines of one kind within ``_INCIDENT_GAP_S`` of each other are one."""
        n = 0
        last: float | None = None
        for t in self.items:
            if last is None or t.ts is None or t.ts - last > _INCIDENT_GAP_S:
                n += 1
            last = t.ts if t.ts is not None else last
        return max(1, n)

    def latest_first(self) -> _Timed:
        """The first line of the latest incident (its most specific reason)."""
        first = self.items[-1]
        for t in reversed(self.items[:-1]):
            nxt = first.ts
            if t.ts is not None and nxt is not None and nxt - t.ts > _INCIDENT_GAP_S:
                break
            first = t
        return first


def _reason(e: LogEvent) -> str:
    if isinstance(e, UnknownWarning):
        return e.message
    reason = getattr(e, "reason", "")
    return reason if isinstance(reason, str) else ""


def _incident_alerts(ctx: _Ctx, current: Mapping[int, ModelView]) -> list[Alert]:
    window = ctx.th.event_window_s
    groups: dict[tuple[str, str | None], _Incidents] = {}
    refused_loads: set[int] = set()
    failed: list[tuple[_Timed, Load | None]] = []

    def add(kind: str, t: _Timed, blob: str | None, owner: Load | None) -> None:
        model = ctx.name_for_blob(blob)
        group = groups.setdefault((kind, model or blob), _Incidents(kind, model, blob))
        group.load = owner or group.load
        group.items.append(t)

    for t in ctx.recent:
        e = t.event
        owner = ctx.strict_owner(e.line_no)
        counts = ctx.recent_enough(t.ts, window) or (t.ts is None and owner is not None and id(owner) in current)
        if not counts or ctx.superseded(owner):
            continue
        # the model: the one the line names, else the load being started when it was printed
        blob = getattr(e, "model_blob", None) or (owner.model_blob if owner is not None else None)
        if isinstance(e, Oom):
            add("oom", t, blob, owner)
        elif isinstance(e, LoadFailed):
            if _QUANTIZED_V_RE.search(e.reason):
                refused_loads.add(owner.index if owner is not None else -e.line_no)
                add("quantized_v_refused", t, blob, owner)
            else:
                failed.append((t, owner))
        elif isinstance(e, Eviction):
            add("eviction", t, e.model_blob, None)  # about the model evicted, not the one loading
        elif (isinstance(e, UnknownWarning) and e.level.upper() in ("ERROR", "FATAL", "PANIC", "ERR")
              and _CRASH_RE.search(e.message)):
            add("runner_crash", t, blob, owner)
    for t, owner in failed:  # failures of a load whose quantized V was refused are that incident
        if owner is not None and owner.index in refused_loads:
            continue
        blob = getattr(t.event, "model_blob", None) or (owner.model_blob if owner is not None else None)
        add("load_failed", t, blob, owner)
    out: list[Alert] = []
    for (kind, ident), inc in groups.items():
        model = inc.model
        inc.items.sort(key=lambda t: (t.ts is None, t.ts or 0.0, t.event.line_no))
        last = inc.latest_first().event
        n = inc.count()
        severity, _ = KINDS[kind]
        reason = _reason(last)
        when = f"in the last {_minutes(window)}"
        name = model or (_short_blob(inc.blob) if inc.blob else None)
        who = f"{name}: " if name else ""
        fixes: tuple[Fix, ...] = ()
        if kind == "oom":
            text = f"{who}{_plural(n, 'out-of-memory incident')} {when}: {reason}"
        elif kind == "load_failed":
            text = f"{who}{_plural(n, 'failed load')} {when}: {reason}"
        elif kind == "quantized_v_refused":
            text = f"{who}the load failed: a quantized V cache needs flash attention, which is off ({reason})"
            forced = inc.load is not None and _fa_forced(inc.load)
            fixes = (
                Fix("OLLAMA_KV_CACHE_TYPE=f16", "the load then succeeds without flash attention", None,
                    "f16 cache: about twice the KV memory of q8_0; server-wide, restart Ollama"),
                Fix("OLLAMA_FLASH_ATTENTION=1", "the model or GPU cannot use flash attention" if forced
                    else "lets llama.cpp use the quantized V cache", False if forced else None,
                    "server-wide, restart Ollama"),
            )
        elif kind == "runner_crash":
            text = f"{who}a runner aborted {when}: {reason}"
        else:
            text = (f"{_plural(n, 'eviction')} {when}" + (f": {name} unloaded to make room" if name else "")
                    + f" ({reason})")
        since = next((i.ts for i in inc.items if i.ts is not None), ctx.now)
        out.append(Alert(kind, severity, model, since, text, fixes, f"{kind}:{ident or '-'}"))
    return out


# --------------------------------------------------------------------------------------------
# Reload churn


def _churn_alerts(ctx: _Ctx) -> list[Alert]:
    by_blob: dict[str, list[tuple[float, Load]]] = {}
    for load in ctx.loads:
        if load.model_blob is None:
            continue
        t = ctx.load_time(load)
        if ctx.recent_enough(t, ctx.th.churn_window_s) and t is not None:
            by_blob.setdefault(load.model_blob, []).append((t, load))
    out: list[Alert] = []
    for blob, items in by_blob.items():
        if len(items) < ctx.th.churn_reloads:
            continue
        items.sort(key=lambda x: x[0])
        loads = [load for _, load in items]
        model = ctx.name_for_blob(blob)
        changes: list[str] = []
        fixes: list[Fix] = []
        for label, attr in (("num_ctx", "num_ctx_per_seq"), ("parallel", "parallel"), ("KV type", "kv_type_k"),
                            ("flash attention", "flash_attention")):
            values: list[object] = [getattr(x, attr) for x in loads]
            if len({v for v in values if v is not None}) > 1:
                changes.append(f"{label} " + " → ".join("?" if v is None else str(v) for v in values))
        span = items[-1][0] - items[0][0]
        text = (f"{model or _short_blob(blob)} loaded {len(items)} times in {_minutes(max(span, 1.0))}"
                + (f": {'; '.join(changes)}" if changes else ": the same settings each time (keep_alive or eviction)"))
        if any(c.startswith("num_ctx") for c in changes):
            fixes.append(Fix("one num_ctx for every client", "PARAMETER num_ctx in a Modelfile, or OLLAMA_CONTEXT_LENGTH"
                             " and no options.num_ctx in requests", None,
                             "clients that asked for more are truncated"))
        elif not changes:
            fixes.append(Fix("keep_alive -1 (or OLLAMA_KEEP_ALIVE)", "keeps the model loaded between requests", None,
                             "holds its memory while idle"))
        out.append(Alert("reload_churn", "warning", model, items[0][0], text, tuple(fixes),
                         f"reload_churn:{model or blob}"))
    return out


# --------------------------------------------------------------------------------------------
# GPUs and swap


def _gpu_name(v: GpuView) -> str:
    d = v.device
    return f"GPU {d.index}" + (f" ({d.name})" if d.name else "")


def _gpu_alerts(ctx: _Ctx) -> list[Alert]:
    out: list[Alert] = []
    th = ctx.th
    for v in ctx.gviews:
        d = v.device
        if d.error is not None or not (v.models or v.ollama_bytes):
            continue  # a GPU Ollama does not use (or its processes are unknown)
        foreign = [p for p in v.others if p.gpu_memory_bytes]
        held = sum(p.gpu_memory_bytes or 0 for p in foreign)
        if held > th.foreign_vram_bytes:
            top = sorted(foreign, key=lambda p: -(p.gpu_memory_bytes or 0))
            who = ", ".join(
                f"{p.name or 'PID'} (PID {p.pid}{', ' + p.user if p.user else ''}) {_ib(p.gpu_memory_bytes)}" for p in top[:3])
            more = f" and {len(top) - 3} more" if len(top) > 3 else ""
            text = f"{_gpu_name(v)}: {_ib(held)} held by processes outside Ollama: {who}{more}"
            fixes = tuple(Fix(f"stop PID {p.pid}", f"frees {_ib(p.gpu_memory_bytes)}", None,
                              f"{p.user or 'its owner'}'s {p.name or 'process'} stops") for p in top[:1])
            out.append(Alert("foreign_vram", "warning", None, ctx.now, text, fixes, f"foreign_vram:gpu{d.index}"))
        free = d.memory_free_bytes
        if free is not None and free < th.gpu_headroom_bytes:
            of = f" of {_ib(d.memory_total_bytes)}" if d.memory_total_bytes else ""
            text = (f"{_gpu_name(v)}: {_ib(free)} free{of}, under the {_ib(th.gpu_headroom_bytes)} headroom:"
                    " the next model or a longer context spills to system RAM")
            out.append(Alert("gpu_nearly_full", "warning", None, ctx.now, text, (), f"gpu_nearly_full:gpu{d.index}"))
    gpu = ctx.state.gpu
    system = gpu.system if gpu is not None else None
    spilled = [v for v in ctx.views if v.spilled] if ctx.live else []
    if system is not None and spilled and (system.swap_used_bytes or 0) > th.swap_used_bytes:
        names = ", ".join(v.name for v in spilled)
        total = f" of {_ib(system.swap_total_bytes)}" if system.swap_total_bytes else ""
        avail = f"; {_ib(system.ram_available_bytes)} RAM available" if system.ram_available_bytes is not None else ""
        text = (f"{_ib(system.swap_used_bytes)} swap in use{total} while {names} runs partly in system RAM{avail}:"
                " swapped layers make every token wait on the disk")
        out.append(Alert("swap_in_use", "warning", None, ctx.now, text, (), "swap_in_use"))
    return out
