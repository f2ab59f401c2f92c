"""What num_ctx the traffic needs: the sizes of the requests a model served, the prompts cut for want of
context, and the smallest num_ctx × KV cache type × slots that holds the p99 request and fits.

Pure: no I/O, no clock. Computed once from the state (:func:`advice_for`) and rendered by every face:
``--once --json`` (``ctx_advice``), ``--once`` (a ``NUM_CTX`` line), ``kvtop plan MODEL --log FILE`` and
the what-if screen.

The recommendation:

* **Sizes** (:mod:`kvtop.model.ctx_served`): prompt + generated tokens per request, from the runner's timing
  lines, with cut and refused prompts at their uncut length. Percentiles are nearest-rank: the p-th of n
  sorted sizes is the ``ceil(p/100 × n)``-th, always a size that was served. Fewer than
  :data:`MIN_REQUESTS` sizes: no recommendation, the reason says so.
* **num_ctx**: the smallest multiple of :data:`CTX_STEP` (1024 tokens) at or above the p99 size, capped at the
  training context (Ollama clamps to it, docs/ollama-internals.md §3.4). Not a power of two: llama.cpp sizes
  the cache in cells padded to 256 (§2.4), so the KV cache grows linearly with num_ctx and nothing is gained at
  a power of two, while rounding up to one can cost up to twice the KV cache the traffic needs; a multiple of
  1024 stays a round number (``9k``) and leaves under 1024 tokens above the p99.
* **KV cache type × slots**: the model's own (as loaded) when that fits the GPU budget; else the more compact
  cache types (q8_0, then q4_0; only with flash attention, which a quantized cache needs, §3.2) at the same
  slots; else the most slots that fit (the largest whose ``plan.predict`` verdict is ``fits``). The budget is the what-if's: free GPU
  memory plus what the model holds now (``plan.gpu_budget``), so it fits beside the other loaded models.
  Memory from the planner (``plan.predict``): the KV cache exact, the rest estimated with its stated error.
* **Never applied**: the result carries the copyable ``PARAMETER num_ctx N`` / ``OLLAMA_CONTEXT_LENGTH=N``
  text; kvtop sends nothing.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

from kvtop.model import kv, plan
from kvtop.model.ctx_served import Cut, RequestSize, ServedRequests, served_requests
from kvtop.model.gpu import gpu_free_bytes
from kvtop.model.known import marked
from kvtop.model.slots import runner_for
from kvtop.model.views import AppState, ModelView

__all__ = [
    "CTX_STEP",
    "MIN_REQUESTS",
    "ROUNDING",
    "ROUNDING_WHY",
    "CtxAdvice",
    "Distribution",
    "Recommendation",
    "advice_for",
    "advice_json",
    "advice_line",
    "advise",
    "config_now",
    "distribution",
    "percentile",
    "round_num_ctx",
]

MIN_REQUESTS: Final = 20
"""Sized requests needed before a recommendation: with fewer, the p99 is the largest of a handful."""

CTX_STEP: Final = 1024
"""The recommended num_ctx is a multiple of this many tokens (module docstring: why not a power of two)."""

ROUNDING: Final = "multiple of 1024"
"""How the recommended num_ctx is rounded, as the faces say it."""

ROUNDING_WHY: Final = (
    "llama.cpp pads the cache to 256 cells and the KV cache grows linearly with num_ctx, "
    "so a power of two buys nothing and can cost up to twice the KV cache"
)


def percentile(sorted_sizes: Sequence[int], p: float) -> int:
    """The nearest-rank ``p``-th percentile (0 < p ≤ 100) of ascending sizes: the ``ceil(p/100 × n)``-th.

    Raises:
        ValueError: No sizes, or ``p`` outside (0, 100].
    """
    if not sorted_sizes:
        raise ValueError("no sizes")
    if not 0 < p <= 100:
        raise ValueError(f"percentile {p} outside (0, 100]")
    return sorted_sizes[max(1, math.ceil(p / 100 * len(sorted_sizes))) - 1]


def round_num_ctx(tokens: int) -> int:
    """The smallest multiple of :data:`CTX_STEP` at or above ``tokens`` (at least one step)."""
    return max(CTX_STEP, -(-tokens // CTX_STEP) * CTX_STEP)


@dataclass(frozen=True, slots=True)
class Distribution:
    """Request sizes (prompt + generated tokens).

    Attributes:
        requests: Sized requests.
        p50 / p95 / p99 / max: Nearest-rank percentiles and the largest, tokens.
        lower_bounds: Requests whose size is a lower bound (``RequestSize.lower_bound``).
        cut: Requests whose prompt was cut or refused (counted at the uncut size).
    """

    requests: int
    p50: int
    p95: int
    p99: int
    max: int
    lower_bounds: int = 0
    cut: int = 0


def distribution(requests: Sequence[RequestSize]) -> Distribution | None:
    """The distribution of ``requests``' sizes; None when there is none."""
    if not requests:
        return None
    sizes = sorted(r.tokens for r in requests)
    return Distribution(
        len(sizes),
        percentile(sizes, 50),
        percentile(sizes, 95),
        percentile(sizes, 99),
        sizes[-1],
        sum(1 for r in requests if r.lower_bound),
        sum(1 for r in requests if r.cut),
    )


@dataclass(frozen=True, slots=True)
class Recommendation:
    """The configuration the traffic needs, against the one the model runs now.

    Attributes:
        config: num_ctx per slot, KV cache type, slots, flash attention.
        holds_tokens: The size it is sized for (the p99 request), tokens.
        capped: True when the training context is below ``holds_tokens`` (num_ctx is then the training context).
        kv_bytes / kv_bytes_now: KV cache at ``config`` and at the configuration now, exact arithmetic
            (``kv.kv_allocation``); None when the layout is not known.
        gpu_bytes / gpu_bytes_now: GPU memory for 100% offload at each (estimated: compute buffers modelled).
        vram_delta_bytes: ``gpu_bytes − gpu_bytes_now``: negative frees, positive costs (estimated).
        verdict: ``fits`` / ``marginal`` / ``spills`` against ``budget_bytes``; None without a budget.
        budget_bytes: GPU memory the model may use (free + what it holds now), None when not known.
        cuts_avoided: Cut or refused prompts of known length it would have held (``prompt < num_ctx``).
        changes: The server-wide settings it changes besides num_ctx, in words (KV type, slots).
    """

    config: plan.PlanConfig
    holds_tokens: int
    capped: bool
    kv_bytes: int | None
    kv_bytes_now: int | None
    gpu_bytes: int | None
    gpu_bytes_now: int | None
    vram_delta_bytes: int | None
    verdict: str | None
    budget_bytes: int | None
    cuts_avoided: int
    changes: tuple[str, ...] = ()

    @property
    def modelfile(self) -> str:
        """``PARAMETER num_ctx N``: the Modelfile line (per model)."""
        return f"PARAMETER num_ctx {self.config.num_ctx}"

    @property
    def env(self) -> str:
        """``OLLAMA_CONTEXT_LENGTH=N``: the server's default for every model (read at server start)."""
        return f"OLLAMA_CONTEXT_LENGTH={self.config.num_ctx}"


@dataclass(frozen=True, slots=True)
class CtxAdvice:
    """One model's traffic and the num_ctx it needs.

    Attributes:
        model: Its name.
        num_ctx_now: Its context per slot now, None when not known.
        served: The requests and cuts (``model.ctx_served``).
        distribution: Their sizes, None without a sized request.
        recommendation: None when there are too few requests or nothing to plan; ``reason`` says why.
        reason: Why there is no recommendation, "" when there is one.
        notes: What the figures rest on.
        in_flight_tokens: The most tokens a busy slot of the model's runner holds now (``/slots`` ``n_tokens``:
            prompt and generated so far, a request not yet in the log), None when no runner answered or none is busy.
    """

    model: str
    num_ctx_now: int | None
    served: ServedRequests
    distribution: Distribution | None
    recommendation: Recommendation | None
    reason: str = ""
    notes: tuple[str, ...] = ()
    in_flight_tokens: int | None = None

    @property
    def cuts(self) -> tuple[Cut, ...]:
        """The prompts cut or refused."""
        return self.served.cuts


def config_now(view: ModelView) -> plan.PlanConfig | None:
    """The configuration ``view`` runs with (as the what-if screen starts from); None without a context."""
    if not view.context.value:
        return None
    kv_type = kv.normalize_cache_type((view.kv_type.value or "f16").split("/")[0]) or "f16"
    return plan.PlanConfig(
        num_ctx=view.context.value,
        cache_type=kv_type if kv_type in plan.PLAN_CACHE_TYPES else "f16",
        parallel=max(1, min(plan.MAX_SLOTS, view.parallel.value or 1)),
        flash_attention=view.flash_attention.value != "disabled",
    )


def _predict(
    spec: plan.ModelSpec | None,
    config: plan.PlanConfig,
    budget: int | None,
    calibration: plan.Calibration | None,
    engine: plan.Engine,
) -> plan.Prediction | None:
    if spec is None:
        return None
    try:
        return plan.predict(spec, config, budget_bytes=budget, calibration=calibration, engine=engine)
    except ValueError:
        return None


def _fits(
    spec: plan.ModelSpec,
    config: plan.PlanConfig,
    budget: int,
    calibration: plan.Calibration | None,
    engine: plan.Engine,
) -> bool:
    p = _predict(spec, config, budget, calibration, engine)
    return p is not None and p.fit is not None and p.fit.verdict == "fits"


def _most_slots(
    spec: plan.ModelSpec,
    config: plan.PlanConfig,
    budget: int,
    calibration: plan.Calibration | None,
    engine: plan.Engine,
) -> int:
    """The most slots below ``config.parallel`` whose verdict is ``fits`` (binary search: memory grows with
    slots), 0 when not even one fits."""
    lo, hi = 0, config.parallel - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _fits(spec, dataclasses.replace(config, parallel=mid), budget, calibration, engine):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _candidates(
    spec: plan.ModelSpec | None,
    base: plan.PlanConfig,
    budget: int | None,
    calibration: plan.Calibration | None,
    engine: plan.Engine,
) -> Iterator[plan.PlanConfig]:
    """Configurations in the order of preference (module docstring): the model's own, compact cache types at
    the same slots, then the most slots that fit at each cache type (searched only when asked for)."""
    types = list(plan.PLAN_CACHE_TYPES)
    start = types.index(base.cache_type) if base.cache_type in types else 0
    kinds = [base.cache_type] + (types[start + 1 :] if base.flash_attention else [])
    for t in kinds:
        yield dataclasses.replace(base, cache_type=t)
    if spec is not None and budget is not None and base.parallel > 1:
        for t in kinds:
            cfg = dataclasses.replace(base, cache_type=t)
            most = _most_slots(spec, cfg, budget, calibration, engine)
            if most >= 1:
                yield dataclasses.replace(cfg, parallel=most)


def _changes(config: plan.PlanConfig, now: plan.PlanConfig) -> tuple[str, ...]:
    out: list[str] = []
    if config.cache_type != now.cache_type:
        out.append(f"KV cache type {config.cache_type} (server-wide: OLLAMA_KV_CACHE_TYPE={config.cache_type})")
    if config.parallel != now.parallel:
        out.append(
            f"{config.parallel} slot{'s' if config.parallel != 1 else ''} "
            f"(server-wide: OLLAMA_NUM_PARALLEL={config.parallel})"
        )
    return tuple(out)


def advise(
    model: str,
    served: ServedRequests,
    now: plan.PlanConfig | None,
    *,
    spec: plan.ModelSpec | None,
    budget_bytes: int | None,
    calibration: plan.Calibration | None = None,
    engine: plan.Engine = "llama-server",
    context_train: int | None = None,
    notes: Sequence[str] = (),
) -> CtxAdvice:
    """The advice for one model from what it served (pure given its inputs).

    Args:
        model: Its name.
        served: Its requests and cuts (:func:`kvtop.model.ctx_served.served_requests`).
        now: The configuration it runs with (:func:`config_now`), None when not loaded or not known: the
            recommendation then starts from f16, one slot, flash attention on, and has no "now" figures.
        spec: The model for the planner (``plan.model_spec``), None when ``/api/show`` is not read: the
            recommendation then has no memory figures.
        budget_bytes: GPU memory available to it (``plan.gpu_budget``), None when not known.
        calibration: Real figures of the loaded model (``plan.calibration_from_view``).
        engine: The runner (``plan.engine_for_version``).
        context_train: The training context (caps num_ctx), tokens; defaults to ``spec.context_train``.
        notes: Extra notes to carry.

    Returns:
        The advice; ``recommendation`` None (with ``reason``) below :data:`MIN_REQUESTS` sized requests.
    """
    dist = distribution(served.requests)
    all_notes = tuple(dict.fromkeys([*served.notes, *notes]))
    num_ctx_now = now.num_ctx if now is not None else None
    n = dist.requests if dist is not None else 0
    if n < MIN_REQUESTS:
        reason = f"{n} sized request{'s' if n != 1 else ''} in the log: too few to recommend (at least {MIN_REQUESTS})"
        return CtxAdvice(model, num_ctx_now, served, dist, None, reason, all_notes)
    assert dist is not None
    train = context_train if context_train is not None else (spec.context_train if spec is not None else None)
    target = round_num_ctx(dist.p99)
    capped = bool(train) and target > (train or 0)
    if capped and train:
        target = train
    base = now if now is not None else plan.PlanConfig(target)
    base = dataclasses.replace(base, num_ctx=target)
    tried: list[tuple[plan.PlanConfig, plan.Prediction | None, str | None]] = []
    for c in _candidates(spec, base, budget_bytes, calibration, engine):
        pred = _predict(spec, c, budget_bytes, calibration, engine)
        tried.append((c, pred, pred.fit.verdict if pred is not None and pred.fit is not None else None))
        if tried[-1][2] in ("fits", None):
            break  # fits, or no verdict to improve on (no budget, no memory figures)
    # the first that fits; else the first within the stated error; else the model's own settings
    pick = next((i for want in ("fits", "marginal") for i, t in enumerate(tried) if t[2] == want), 0)
    cfg, p, _ = tried[pick]
    p_now = _predict(spec, now, None, calibration, engine) if now is not None else None
    gpu = p.gpu_bytes if p is not None else None
    gpu_now = p_now.gpu_bytes if p_now is not None else None
    avoided = sum(1 for c in served.cuts if c.prompt_tokens is not None and c.prompt_tokens < cfg.num_ctx)
    rec = Recommendation(
        config=cfg,
        holds_tokens=dist.p99,
        capped=capped,
        kv_bytes=p.kv_bytes if p is not None else None,
        kv_bytes_now=p_now.kv_bytes if p_now is not None else None,
        gpu_bytes=gpu,
        gpu_bytes_now=gpu_now,
        vram_delta_bytes=gpu - gpu_now if gpu is not None and gpu_now is not None else None,
        verdict=p.fit.verdict if p is not None and p.fit is not None else None,
        budget_bytes=budget_bytes,
        cuts_avoided=avoided,
        changes=_changes(cfg, now) if now is not None else (),
    )
    extra: list[str] = []
    if capped:
        extra.append(
            f"the p99 request ({dist.p99:,} tokens) is longer than the training context ({train:,}): "
            "num_ctx is capped there, the longest prompts stay cut"
        )
    if rec.verdict == "spills":
        extra.append("does not fit beside the loaded models at any KV cache type or slot count tried: it would spill")
    elif rec.verdict == "marginal":
        extra.append("fits only within the stated error of the compute estimate: it may spill")
    return CtxAdvice(model, num_ctx_now, served, dist, rec, "", tuple(dict.fromkeys([*all_notes, *extra])))


def advice_for(state: AppState, view: ModelView) -> CtxAdvice | None:
    """The advice for a loaded model of ``state`` (its log, ``/api/show``, GPU sample); None for a cloud model.

    Every face calls this with the same state, so they show the same value.
    """
    if view.cloud:
        return None
    local = [v for v in state.models if not v.cloud]
    log = state.log
    blob = view.model_blob or (view.load.model_blob if view.load is not None else None)
    served = served_requests(
        log.load_events,
        log.loads,
        model_blob=blob,
        load=view.load,
        only_model=len(local) == 1,
        models_serving=len(local),
    )
    snap = state.last_ok
    spec: plan.ModelSpec | None = None
    engine: plan.Engine = "llama-server"
    if snap is not None:
        engine = plan.engine_for_version(snap.version)
        show = snap.shows.get(view.digest) or snap.shows.get(f"name:{view.name}")
        tag = snap.tags.get(view.digest)
        if show is not None and not show.error and show.model_info:
            spec = plan.derive_weights(
                plan.model_spec(view.name, show.model_info, file_size=tag.size_bytes if tag else None),
                view,
                engine=engine,
            )
    budget = plan.gpu_budget(gpu_free_bytes(state.gpu), view.size_vram_bytes)
    notes = [] if budget is not None else ["free GPU memory not known: no fit verdict"]
    runner = runner_for(view, state.slots)
    busy = [s.n_tokens for s in runner.slots if s.is_processing and s.n_tokens is not None] if runner else []
    in_flight = max(busy, default=None)
    advice = advise(
        view.name,
        served,
        config_now(view),
        spec=spec,
        budget_bytes=budget,
        calibration=plan.calibration_from_view(view),
        engine=engine,
        context_train=view.context_train,
        notes=notes,
    )
    if in_flight is None:
        return advice
    more: tuple[str, ...] = ()
    rec = advice.recommendation
    if rec is not None and in_flight > rec.config.num_ctx:
        more = (
            f"a request in flight now already holds {in_flight:,} tokens of its slot (/slots), more than "
            f"num_ctx {rec.config.num_ctx}",
        )
    return dataclasses.replace(advice, in_flight_tokens=in_flight, notes=advice.notes + more)


# --------------------------------------------------------------------------------------------
# Renderings (the one text and the one JSON every face uses)


def _cut_counts(cuts: Sequence[Cut]) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in cuts:
        out[c.form] = out.get(c.form, 0) + 1
    return out


def advice_json(a: CtxAdvice | None) -> dict[str, Any] | None:
    """The ``ctx_advice`` object of ``--once --json`` and ``plan --json`` (tokens and bytes as integers)."""
    if a is None:
        return None
    d = a.distribution
    r = a.recommendation
    sized = [c.prompt_tokens for c in a.cuts if c.prompt_tokens is not None]
    return {
        "num_ctx_now": a.num_ctx_now,
        "requests": d.requests if d is not None else 0,
        "request_tokens": None if d is None else {"p50": d.p50, "p95": d.p95, "p99": d.p99, "max": d.max},
        "lower_bound_requests": d.lower_bounds if d is not None else 0,
        "unsized_requests": a.served.unsized,
        "cuts": {
            "total": len(a.cuts),
            "by_form": _cut_counts(a.cuts),
            "sized": len(sized),
            "longest_prompt_tokens": max(sized, default=None),
            "limits": sorted({c.limit for c in a.cuts if c.limit is not None}),
        },
        "in_flight_tokens": a.in_flight_tokens,
        "min_requests": MIN_REQUESTS,
        "recommendation": None
        if r is None
        else {
            "num_ctx": r.config.num_ctx,
            "rounding": ROUNDING,
            "rounding_why": ROUNDING_WHY,
            "holds_tokens": r.holds_tokens,
            "capped_at_training_context": r.capped,
            "kv_type": r.config.cache_type,
            "parallel": r.config.parallel,
            "flash_attention": r.config.flash_attention,
            "kv_bytes": r.kv_bytes,
            "kv_bytes_now": r.kv_bytes_now,
            "gpu_bytes": r.gpu_bytes,
            "gpu_bytes_now": r.gpu_bytes_now,
            "vram_delta_bytes": r.vram_delta_bytes,
            "source": "estimated",
            "fit": r.verdict,
            "budget_bytes": r.budget_bytes,
            "cuts_avoided": r.cuts_avoided,
            "changes": list(r.changes),
            "modelfile": r.modelfile,
            "env": r.env,
            "applied": False,
        },
        "reason": a.reason or None,
        "notes": list(a.notes),
    }


def _delta(n: int | None, num_ctx_now: int) -> str:
    """``frees ~1.2 GiB of VRAM`` / ``costs ~448 MiB more VRAM`` than now (estimated)."""
    if n is None:
        return f"VRAM change vs now (num_ctx {num_ctx_now}) not known"
    if n <= 0:
        return f"frees {marked(-n, 'estimated', size=True)} of VRAM vs now (num_ctx {num_ctx_now})"
    return f"costs {marked(n, 'estimated', size=True)} more VRAM than now (num_ctx {num_ctx_now})"


def advice_line(a: CtxAdvice) -> str:
    """One line: the sizes, the cuts and the recommendation (or why none), sizes marked ``~`` (estimated)::

    40 requests, tokens p50 812 · p95 3,100 · p99 3,900 · max 4,010; 3 cut → num_ctx 4096 (multiple of 1024)
    × f16 × 1 slot: KV ~448 MiB, frees ~1.2 GiB of VRAM vs now (num_ctx 8192), fits; would have held 3 of 3 cut;
    Modelfile PARAMETER num_ctx 4096 or OLLAMA_CONTEXT_LENGTH=4096 (not applied)
    """
    d = a.distribution
    parts = []
    if d is None:
        parts.append("no sized request in the log")
    else:
        parts.append(
            f"{d.requests} request{'s' if d.requests != 1 else ''}, tokens p50 {d.p50:,} · p95 {d.p95:,} · "
            f"p99 {d.p99:,} · max {d.max:,}"
        )
    cuts = a.cuts
    if cuts:
        parts[-1] += f"; {len(cuts)} cut or refused"
    r = a.recommendation
    if r is None:
        return f"{parts[0]}: {a.reason}" if a.reason else parts[0]
    c = r.config
    slots = f"{c.parallel} slot{'s' if c.parallel != 1 else ''}"
    text = (
        f"{parts[0]} → num_ctx {c.num_ctx} ({ROUNDING}) × {c.cache_type} × {slots}: "
        f"KV {marked(r.kv_bytes, 'estimated', size=True)}"
    )
    if a.num_ctx_now is not None:
        text += f", {_delta(r.vram_delta_bytes, a.num_ctx_now)}"
    text += f", {r.verdict or 'fit not known'}"
    if r.changes:
        text += "; changes " + ", ".join(r.changes)
    if cuts:
        text += f"; would have held {r.cuts_avoided} of {len(cuts)} cut"
    return text + f"; Modelfile {r.modelfile} or {r.env} (not applied)"
