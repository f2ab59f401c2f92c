"""What the next load will do: Ollama's own decision for a model not loaded (or loaded at other
settings), given what is loaded now — the num_ctx × slots it launches with, the KV type and flash
attention it resolves, whether it fits beside the others, which loaded models the scheduler unloads
to make room, in which order, and whether the load has to wait for a model in use.

The rules are Ollama's scheduler's (``server/sched.go`` ``processPending``, ``findRunnerToUnload``,
``ByDurationAndName``, ``load``; ``envconfig/config.go``), version by version, as written down with
their citations in ``docs/ollama-scheduler.md``:

1. ``OLLAMA_MAX_LOADED_MODELS`` (0/unset = 3 per GPU, at least 3; 1 in v0.1.x before v0.2.0): at
   the limit one model is unloaded before anything else is looked at.
2. With nothing loaded the model loads whatever its size (spilling to the CPU if it must).
3. Beside loaded models it must fit: from v0.30.0 its predicted size must not exceed 80% of the free
   GPU memory (``predicted … > freeMemory*80/100``); before, all its layers must fit (full offload).
   Else one model is unloaded and the check runs again, one model at a time.
4. The one unloaded: loaded models sorted by keep-alive duration, shortest first (a negative
   keep-alive, "forever", sorts last), then (v0.6.6+) by weights blob path; the first one with no
   request in flight, else the first one, after its requests finish (the load waits for them).

Pure: no I/O, no clock (``now_s`` is given). Sizes are bytes; the need is kvtop's estimate
(``model.plan``), Ollama uses its own (``llm.PredictServerVRAM``), so a need within the estimate's
error of the threshold is reported as ``marginal``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from kvtop.model import kv, plan
from kvtop.model.known import Known
from kvtop.model.ladder import PARALLEL_FORCED_ONE
from kvtop.model.preflight import ServerDefaults
from kvtop.model.snapshots import PsModel, ShowInfo, parse_version

__all__ = [
    "DEFAULT_MODELS_PER_GPU",
    "Eviction",
    "Launch",
    "NextLoad",
    "Resident",
    "SchedulerRules",
    "eviction_order",
    "forecast",
    "launch_settings",
    "resident_from_ps",
    "scheduler_rules",
]

DEFAULT_MODELS_PER_GPU: Final = 3
"""``defaultModelsPerGPU`` (``server/sched.go``, v0.2.0 – v0.33.0): ``OLLAMA_MAX_LOADED_MODELS``
unset or 0 means 3 × the GPU count (3 without a GPU)."""

FIT_FRACTION_SINCE: Final = (0, 30, 0)
"""From v0.30.0 a model loads beside others when its predicted size is at most 80% of the free GPU
memory (``server/sched.go:load``, ``predictedForLoad > freeMemory*80/100``); before, when it fits fully."""

NAME_TIEBREAK_SINCE: Final = (0, 6, 6)
"""``ByDurationAndName`` (commit 42ecb9f13, v0.6.6): equal keep-alives are ordered by model path."""

AUTO_MAX_SINCE: Final = (0, 2, 0)
"""``OLLAMA_MAX_LOADED_MODELS`` 0 = 3 per GPU from v0.2.0; v0.1.33 – v0.1.48 defaulted to 1."""

SINGLE_SLOT_ARCHITECTURES: Final = PARALLEL_FORCED_ONE
"""Architectures ``server/sched.go:load`` (v0.33.0) gives one slot whatever ``OLLAMA_NUM_PARALLEL``
says (docs/ollama-internals.md §3.3): the source ladder's list (``model.ladder``)."""

FOREVER_S: Final = float("inf")
"""A negative keep-alive: ``time.Duration(math.MaxInt64)``, sorted last (``uint64``)."""

FOREVER_AFTER_S: Final = 100 * 365 * 86400.0
"""An ``expires_at`` further away than this is a forever keep-alive (Ollama writes now + 292 years)."""

DEFAULT_KEEP_ALIVE_S: Final = 300.0
"""``OLLAMA_KEEP_ALIVE`` unset: 5 minutes (``envconfig.KeepAlive``)."""

Verdict = Literal["fits", "marginal", "spills", "loaded", "fails", "unknown"]


@dataclass(frozen=True, slots=True)
class SchedulerRules:
    """The scheduler rules of one server.

    Attributes:
        version: The server's version, None when not known (taken as current).
        max_loaded: ``OLLAMA_MAX_LOADED_MODELS`` (``service``), else the default (3 × GPUs).
        fit_fraction: The share of free GPU memory a model may take beside others (0.8 from v0.30.0, 1.0 before).
        name_tiebreak: Equal keep-alives are ordered by weights path (v0.6.6+); before, the order is
            Go's map order (not predictable).
        keep_alive_s: ``OLLAMA_KEEP_ALIVE`` in seconds (``inf`` forever), with source.
        gpu_count: GPUs the server sees (None: not known, 1 assumed for the default).
    """

    version: str | None
    max_loaded: Known[int]
    fit_fraction: float
    name_tiebreak: bool
    keep_alive_s: Known[float]
    gpu_count: int | None


def _go_duration_s(text: str) -> float | None:
    """``OLLAMA_KEEP_ALIVE``: a Go duration (``5m``, ``1h30m``, ``-1m``) or whole seconds; negative = forever."""
    import re

    text = text.strip().strip("\"'")
    if not text:
        return None
    try:
        n = int(text)
        return FOREVER_S if n < 0 else float(n)
    except ValueError:
        pass
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    units = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    parts = re.findall(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)", body)
    if not parts or "".join(a + b for a, b in parts) != body:
        return None
    total = sum(float(a) * units[b] for a, b in parts) * sign
    return FOREVER_S if total < 0 else total


def scheduler_rules(version: str | None, env: Mapping[str, str] | None, gpu_count: int | None) -> SchedulerRules:
    """The rules of a server of ``version`` whose environment is ``env`` (None: not readable) with
    ``gpu_count`` GPUs (None: not known; 1 assumed, marked estimated). See docs/ollama-scheduler.md §2."""
    env = env or {}
    parsed = parse_version(version)
    raw = (env.get("OLLAMA_MAX_LOADED_MODELS") or "").strip().strip("\"'")
    explicit = int(raw) if raw.isdigit() else 0
    if explicit > 0:
        max_loaded: Known[int] = Known(explicit, "service", "OLLAMA_MAX_LOADED_MODELS")
    elif parsed is not None and parsed < AUTO_MAX_SINCE:
        max_loaded = Known(1, "default", "Ollama's default before v0.2.0")
    elif gpu_count is None:
        max_loaded = Known(DEFAULT_MODELS_PER_GPU, "estimated", "3 per GPU; the GPU count is not known: 1 assumed")
    else:
        max_loaded = Known(
            DEFAULT_MODELS_PER_GPU * max(gpu_count, 1),
            "default",
            f"3 per GPU × {max(gpu_count, 1)} (defaultModelsPerGPU)",
        )
    keep_text = env.get("OLLAMA_KEEP_ALIVE")
    keep = _go_duration_s(keep_text) if keep_text else None
    keep_alive: Known[float] = (
        Known(keep, "service", "OLLAMA_KEEP_ALIVE")
        if keep is not None
        else Known(DEFAULT_KEEP_ALIVE_S, "default", "5m")
    )
    return SchedulerRules(
        version,
        max_loaded,
        0.8 if parsed is None or parsed >= FIT_FRACTION_SINCE else 1.0,
        parsed is None or parsed >= NAME_TIEBREAK_SINCE,
        keep_alive,
        gpu_count,
    )


@dataclass(frozen=True, slots=True)
class Resident:
    """A loaded model as the scheduler sees it.

    Attributes:
        name: ``/api/ps`` name.
        path: The sort key of equal keep-alives: the weights blob (``sha256-<hex>``, the end of the
            model path; every blob sits in one folder), else ``name:<name>`` (not the server's key).
        vram_bytes: ``size_vram`` (reported), given back when it unloads.
        keep_alive_s: Its keep-alive duration (``inf`` forever) with source: ``estimated`` from
            ``expires_at`` (the API does not say it), ``requested`` when the caller knows it.
        in_use: Requests in flight (``refCount > 0``): ``runner``/``estimated`` from the slots, or
            ``default`` False (idle assumed: the API does not say).
        context_length: Its per-slot num_ctx (``/api/ps``), None when not known.
        blob_known: False when ``path`` is the name fallback (the order among equal keep-alives is then a guess).
    """

    name: str
    path: str
    vram_bytes: int
    keep_alive_s: Known[float]
    in_use: Known[bool]
    context_length: int | None = None
    blob_known: bool = True

    @property
    def sort_key(self) -> tuple[float, str]:
        """``ByDurationAndName``: duration (forever last), then path."""
        value = self.keep_alive_s.value
        return (FOREVER_S if value is None else value, self.path)


def resident_from_ps(
    row: PsModel, *, now_s: float, rules: SchedulerRules, blob: str | None = None, busy: Known[bool] | None = None
) -> Resident:
    """A ``/api/ps`` row as a :class:`Resident`. Its keep-alive is not in the API: ``expires_at``
    beyond a century is forever; otherwise the server's keep-alive is assumed, or the time left
    when that is longer (a request set a longer one). ``blob``: its weights blob (``/api/show``
    Modelfile ``FROM``); ``busy``: whether requests are in flight (idle assumed when None)."""
    keep: Known[float]
    server_keep = rules.keep_alive_s.value if rules.keep_alive_s.value is not None else DEFAULT_KEEP_ALIVE_S
    if row.expires_at is None:
        keep = Known(server_keep, "estimated", "expires_at not readable: the server's keep-alive assumed")
    else:
        left = row.expires_at.timestamp() - now_s
        if left > FOREVER_AFTER_S:
            keep = Known(FOREVER_S, "estimated", "expires_at centuries away: keep_alive forever")
        elif left > server_keep + 1:
            keep = Known(left, "estimated", "at least the time left to expires_at (longer than the server's)")
        else:
            keep = Known(server_keep, "estimated", "the server's keep-alive assumed")
    return Resident(
        row.name,
        blob or f"name:{row.name}",
        row.size_vram_bytes or 0,
        keep,
        busy if busy is not None else Known(False, "default", "idle assumed: the API does not say"),
        row.context_length,
        blob is not None,
    )


def eviction_order(residents: Sequence[Resident], rules: SchedulerRules) -> list[Resident]:
    """``findRunnerToUnload``'s order: ``ByDurationAndName`` (without the name tiebreak before v0.6.6:
    then equal durations keep the given order, Go's map order being unpredictable)."""
    if rules.name_tiebreak:
        return sorted(residents, key=lambda r: r.sort_key)
    return sorted(residents, key=lambda r: r.sort_key[0])


def pick_victim(residents: Sequence[Resident], rules: SchedulerRules) -> Resident | None:
    """The model ``findRunnerToUnload`` picks: the first idle one in :func:`eviction_order`, else the
    first (the load waits for its requests); None when nothing is loaded."""
    ordered = eviction_order(residents, rules)
    if not ordered:
        return None
    return next((r for r in ordered if not r.in_use.value), ordered[0])


@dataclass(frozen=True, slots=True)
class Launch:
    """The settings the model loads with (each with its source).

    Attributes:
        num_ctx: Per slot: the Modelfile's ``num_ctx`` (``requested``), ``OLLAMA_CONTEXT_LENGTH``
            (``service``) or the VRAM tier (``default``); clamped to the training context (``estimated``).
        parallel: ``OLLAMA_NUM_PARALLEL``, 1 for embedding models and the single-slot architectures.
        cache_type / flash_attention: As the runner resolves them for this version.
        problem: Why the load fails as configured (a quantized V cache with flash attention off, v0.30+).
    """

    num_ctx: Known[int]
    parallel: Known[int]
    cache_type: Known[str]
    flash_attention: Known[bool]
    problem: str | None = None
    auto_ctx: bool = False
    """num_ctx is Ollama's automatic one (no request, Modelfile or ``OLLAMA_CONTEXT_LENGTH`` value:
    ``routes.go:usesAutomaticNumCtx``); a runner loaded automatically is then reused whatever its num_ctx."""

    @property
    def runner_ctx(self) -> int | None:
        """num_ctx × slots: the runner's ``-c`` (docs/ollama-internals.md §3.3)."""
        if self.num_ctx.value is None or self.parallel.value is None:
            return None
        return self.num_ctx.value * self.parallel.value


def _parameter_num_ctx(parameters: str) -> int | None:
    for line in parameters.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "num_ctx" and parts[1].isdigit() and int(parts[1]) > 0:
            return int(parts[1])
    return None


def launch_settings(
    defaults: ServerDefaults,
    version: str | None,
    *,
    architecture: str | None,
    context_train: int | None,
    show: ShowInfo | None = None,
    num_ctx: Known[int] | None = None,
) -> Launch:
    """What a load of this model without options resolves to (docs/ollama-scheduler.md §1):
    ``num_ctx`` (a request's, e.g. ``--ctx``) wins over the Modelfile's (``show.parameters``), which
    wins over the server's default; the slots; the KV type and flash attention of ``version``."""
    parsed = parse_version(version) or (99, 0, 0)
    ctx = num_ctx if num_ctx is not None else defaults.num_ctx
    own = _parameter_num_ctx(show.parameters) if show is not None and num_ctx is None else None
    if own:
        ctx = Known(own, "requested", "the Modelfile's PARAMETER num_ctx")
    auto = ctx.source in ("default", "estimated")
    if ctx.value is not None and context_train and ctx.value > context_train:
        ctx = Known(context_train, "estimated", f"{ctx.value} clamped to the training context")
    elif ctx.value is not None and ctx.value < 4:
        ctx = Known(4, "estimated", "at least 4 (getRunner)")
    if show is not None and "vision" in show.capabilities and ctx.value is not None and ctx.value < 2048:
        ctx = Known(2048, "estimated", "vision models get at least 2048 (getRunner)")
    parallel = defaults.parallel
    if show is not None and show.capabilities and "completion" not in show.capabilities:
        parallel = Known(1, "default", "embedding models load with one slot")
    elif architecture in SINGLE_SLOT_ARCHITECTURES and (parallel.value or 1) != 1:
        parallel = Known(1, "default", f"{architecture} loads with one slot (sched.go:load)")
    cache, fa, problem = defaults.cache_type, defaults.flash_attention, None
    quantized = (kv.normalize_cache_type(cache.value) or "f16") not in ("f16", "f32", "bf16")
    if quantized:
        if parsed >= (0, 30, 0):
            if fa.value is False:
                problem = (
                    "a quantized V cache needs flash attention, set off: llama.cpp refuses the context (no fallback)"
                )
        elif parsed >= (0, 13, 4):
            if fa.source != "service" or not fa.value:
                cache = Known("f16", "default", "a quantized type needs OLLAMA_FLASH_ATTENTION=1 (v0.13.4–v0.24.0)")
        elif parsed >= (0, 5, 0) and fa.value is False:
            cache = Known("f16", "default", "a quantized type needs flash attention")
    return Launch(ctx, parallel, cache, fa, problem, auto)


@dataclass(frozen=True, slots=True)
class Eviction:
    """One model the scheduler unloads.

    Attributes:
        name: Its name.
        reason: ``max_loaded`` (at ``OLLAMA_MAX_LOADED_MODELS``), ``memory`` (the new model does not
            fit beside it) or ``reload`` (the model itself, loaded at other settings).
        waits: It has requests in flight: the load waits until they finish.
        vram_bytes: The GPU memory it gives back (reported ``size_vram``).
    """

    name: str
    reason: Literal["max_loaded", "memory", "reload"]
    waits: bool
    vram_bytes: int


@dataclass(frozen=True, slots=True)
class NextLoad:
    """The forecast of one load (see the module doc).

    Attributes:
        model: The model asked for.
        launch: The settings it loads with.
        need_bytes: GPU memory for 100% offload (kvtop's estimate), None when not known.
        need_error_bytes: The estimate's stated error.
        free_bytes: Free GPU memory now (reported), None when not known.
        free_after_bytes: Free before the load, after the evictions (free + what they give back).
        threshold_bytes: What the model may take beside others (``fit_fraction`` × free after), None
            when nothing stays loaded (no threshold: it loads anyway).
        evicted: In order.
        stays: The models that stay loaded.
        verdict: ``fits`` 100% on the GPU; ``marginal`` within the estimate's error; ``spills`` to the
            CPU (only when nothing else stays loaded); ``loaded`` already at these settings; ``fails``
            (``launch.problem``); ``unknown`` without a need or a free figure.
        fit: The layer fit in the memory left, when known (``plan.Fit``).
        notes: Assumptions and caveats, in words.
    """

    model: str
    launch: Launch
    need_bytes: int | None
    need_error_bytes: int
    free_bytes: int | None
    free_after_bytes: int | None
    threshold_bytes: int | None
    evicted: tuple[Eviction, ...]
    stays: tuple[str, ...]
    verdict: Verdict
    rules: SchedulerRules
    fit: plan.Fit | None = None
    notes: tuple[str, ...] = ()

    @property
    def waits_for(self) -> tuple[str, ...]:
        """The evicted models whose requests the load waits for."""
        return tuple(e.name for e in self.evicted if e.waits)


def forecast(
    model: str,
    launch: Launch,
    residents: Sequence[Resident],
    rules: SchedulerRules,
    *,
    free_bytes: int | None,
    spec: plan.ModelSpec | None = None,
    engine: plan.Engine = "llama-server",
    need_bytes: int | None = None,
    need_error_bytes: int = 0,
) -> NextLoad:
    """Replay ``processPending`` for a load of ``model`` with ``launch``, beside ``residents``.

    The need is ``need_bytes`` when given, else ``plan.predict(spec, …)``'s GPU need. ``free_bytes``
    is the free GPU memory now (all GPUs); each eviction gives back its ``size_vram``. A resident
    named ``model`` at the same num_ctx means no load (``loaded``); at another num_ctx it is unloaded
    first (``reload``).
    """
    notes: list[str] = []
    config: plan.PlanConfig | None = None
    prediction: plan.Prediction | None = None
    if spec is not None and launch.num_ctx.value is not None and launch.parallel.value is not None:
        config = plan.PlanConfig(
            launch.num_ctx.value,
            launch.cache_type.value or "f16",
            launch.parallel.value,
            bool(launch.flash_attention.value),
        )
        try:
            prediction = plan.predict(spec, config, engine=engine)
        except ValueError as exc:
            notes.append(str(exc))
        if prediction is not None and need_bytes is None:
            need_bytes, need_error_bytes = prediction.gpu_bytes, prediction.compute_error_bytes
    loaded = list(residents)
    evicted: list[Eviction] = []
    free = free_bytes
    same = next((r for r in loaded if _same(r.name, model)), None)
    if same is not None:
        if same.context_length is None or same.context_length == launch.num_ctx.value or launch.auto_ctx:
            why = "loaded: a request without options is served by it, nothing loads"
            if launch.auto_ctx and same.context_length not in (None, launch.num_ctx.value):
                why += (
                    f" (if its load at num_ctx {same.context_length} asked for that num_ctx, a request "
                    f"without options reloads it at {launch.num_ctx.value}: needsReload)"
                )
            return NextLoad(
                model, launch, need_bytes, need_error_bytes, free_bytes, free_bytes, None, (),
                tuple(r.name for r in loaded), "loaded", rules, None, (why,),
            )  # fmt: skip
        loaded.remove(same)
        evicted.append(Eviction(same.name, "reload", bool(same.in_use.value), same.vram_bytes))
        free = None if free is None else free + same.vram_bytes
    max_loaded = rules.max_loaded.value or DEFAULT_MODELS_PER_GPU
    threshold: int | None = None
    verdict: Verdict = "unknown"
    while True:
        if len(loaded) >= max_loaded:
            victim, reason = pick_victim(loaded, rules), "max_loaded"
        elif not loaded or rules.gpu_count == 0:  # nothing loaded, or no GPU: no fit check (sched.go:load)
            threshold = None
            break
        else:
            if need_bytes is None or free is None:
                if loaded:
                    notes.append(
                        "the need or the free GPU memory is not known: whether others are unloaded is not known"
                    )
                threshold = None if free is None else int(free * rules.fit_fraction)
                break
            threshold = int(free * rules.fit_fraction)
            if need_bytes <= threshold:
                break
            victim, reason = pick_victim(loaded, rules), "memory"
        if victim is None:
            break
        loaded.remove(victim)
        evicted.append(Eviction(victim.name, reason, bool(victim.in_use.value), victim.vram_bytes))  # type: ignore[arg-type]
        free = None if free is None else free + victim.vram_bytes
    fit: plan.Fit | None = None
    if spec is not None and config is not None and free is not None:
        try:
            fit = plan.predict(spec, config, budget_bytes=free, engine=engine).fit
        except ValueError:
            fit = None
    if launch.problem:
        verdict = "fails"
    elif need_bytes is None or free is None:
        verdict = "unknown"
    elif loaded:
        margin = need_error_bytes
        verdict = "marginal" if threshold is not None and need_bytes > threshold - margin else "fits"
    elif fit is not None:
        verdict = fit.verdict
    else:
        verdict = "fits" if need_bytes <= free else "spills"
    if any(not r.blob_known for r in residents) and len(evicted) and rules.name_tiebreak:
        notes.append("a loaded model's weights blob is not known: the order among equal keep-alives is a guess")
    if any(r.keep_alive_s.source == "estimated" for r in residents) and evicted:
        notes.append("keep-alive durations are estimated from expires_at (the API does not give them)")
    if any(r.in_use.source == "default" for r in residents) and evicted:
        notes.append("models are taken as idle: whether requests are in flight is not known")
    if not rules.name_tiebreak and len(evicted) and len(residents) > 1:
        notes.append("before v0.6.6 equal keep-alives are unloaded in Go's map order: not predictable")
    return NextLoad(
        model, launch, need_bytes, need_error_bytes, free_bytes, free, threshold, tuple(evicted),
        tuple(r.name for r in loaded), verdict, rules, fit, tuple(notes),
    )  # fmt: skip


def _same(a: str, b: str) -> bool:
    def full(name: str) -> str:
        name = name.strip().lower()
        return name if ":" in name.rsplit("/", 1)[-1] else name + ":latest"

    return full(a) == full(b)
