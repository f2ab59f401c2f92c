"""Pre-flight for every pulled model: "will it fit if I load it now?" (ollama/ollama #14116, #14073,
#14082, #9774).

For each model of ``/api/tags``: its KV cache and total at the num_ctx the server would give it
(the Modelfile's ``PARAMETER num_ctx``, else ``OLLAMA_CONTEXT_LENGTH``, else Ollama's default, which
from v0.15.5 is VRAM-tiered: docs/ollama-internals.md §3.4) × slots × KV cache type, from the planner
(``model.plan``: exact KV arithmetic, the weights from the ``/api/tags`` file size, an estimated
compute buffer); whether that fits in the GPU memory free now beside what is loaded (a loaded
model's own ``size_vram`` counts as available to it: it is given back on a reload); and the
largest num_ctx that stays 100% on the GPU.

A model loaded now has real figures, and they win over the estimate (the source ladder of
``model.known``): its compute buffers anchor the planner (``plan.Calibration``: allocated by the
runner per the log, else derived from the ``/api/ps`` size), and when it runs at the very
configuration the row is for, the row shows its KV cache and total as allocated (log) or its
``/api/ps`` size as reported, not the estimate.

Pure: no I/O. Inputs come from ``sources.pulled`` (``/api/tags`` + ``/api/show``, cached per
digest) and the state's GPU sample and service environment.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from kvtop.model import kv, plan
from kvtop.model.known import Known, setting_text
from kvtop.model.snapshots import PsModel, PulledSnapshot, ShowInfo, TagInfo, parse_version

GiB = 1024**3

VRAM_TIERS: tuple[tuple[int, int], ...] = ((47 * GiB, 262_144), (23 * GiB, 32_768), (0, 4_096))
"""v0.15.5+: total VRAM (all GPUs, minus ``OLLAMA_GPU_OVERHEAD``) at or above → default num_ctx
(``server/routes.go:Serve``, commit 0334ffa62; docs/ollama-internals.md §3.4)."""

TIERED_SINCE = (0, 15, 5)
"""The first release whose default num_ctx depends on the VRAM (§3.4)."""

Verdict = Literal["fits", "marginal", "spills", "unknown", "waiting", "error", "cloud"]


@dataclass(frozen=True, slots=True)
class ServerDefaults:
    """What a model loaded without options gets on this server.

    Attributes:
        num_ctx: Per-slot context: ``service`` (``OLLAMA_CONTEXT_LENGTH``), ``default`` (Ollama's,
            VRAM-tiered from v0.15.5), or ``estimated`` 4096 (the smallest tier) when the tier
            needs a VRAM total nobody read.
        cache_type: ``OLLAMA_KV_CACHE_TYPE`` (``service``), else f16 (``default``).
        parallel: ``OLLAMA_NUM_PARALLEL`` (``service``), else 1 (``default``, v0.10.0+).
        flash_attention: ``OLLAMA_FLASH_ATTENTION`` (``service``), else on (``default``: the runner's
            auto mode turns it on where the GPU and model support it, docs/ollama-internals.md §3.1).
    """

    num_ctx: Known[int]
    cache_type: Known[str]
    parallel: Known[int]
    flash_attention: Known[bool]


def _uint(text: str | None) -> int | None:
    try:
        value = int((text or "").strip().strip("\"'"))
    except ValueError:
        return None
    return value if value >= 0 else None


def vram_tier_num_ctx(total_vram_bytes: int, overhead_bytes: int = 0) -> int:
    """The default num_ctx v0.15.5+ picks for ``total_vram_bytes`` of GPU memory (``VRAM_TIERS``)."""
    usable = total_vram_bytes - max(0, overhead_bytes)
    return next(ctx for floor, ctx in VRAM_TIERS if usable >= floor)


def server_defaults(version: str | None, env: Mapping[str, str] | None, total_vram_bytes: int | None) -> ServerDefaults:
    """The defaults of a server of ``version`` whose environment is ``env`` (the service rung; None
    when not readable) on ``total_vram_bytes`` of GPU memory (None when not known).

    ``OLLAMA_CONTEXT_LENGTH`` 0 (or unset) means the VRAM tier from v0.15.5; before, unset means
    4096 (v0.6.7–v0.15.4) or 2048 (≤ v0.6.6) (§3.4). An unknown version is taken as current.
    """
    env = env or {}
    parsed = parse_version(version)
    ctx_env = _uint(env.get("OLLAMA_CONTEXT_LENGTH"))
    if ctx_env:
        num_ctx: Known[int] = Known(ctx_env, "service", "OLLAMA_CONTEXT_LENGTH")
    elif parsed is not None and parsed < (0, 6, 7):
        num_ctx = Known(2048, "default", "Ollama's default before v0.6.7")
    elif parsed is not None and parsed < TIERED_SINCE:
        num_ctx = Known(4096, "default", "Ollama's default v0.6.7–v0.15.4")
    elif total_vram_bytes is not None:
        overhead = _uint(env.get("OLLAMA_GPU_OVERHEAD")) or 0
        num_ctx = Known(
            vram_tier_num_ctx(total_vram_bytes, overhead), "default", "Ollama's VRAM-tiered default (v0.15.5+)"
        )
    else:
        num_ctx = Known(
            VRAM_TIERS[-1][1],
            "estimated",
            "the VRAM tier (v0.15.5+) needs the GPUs' total memory, not known: the smallest tier's",
        )
    cache = kv.normalize_cache_type(env.get("OLLAMA_KV_CACHE_TYPE")) if env.get("OLLAMA_KV_CACHE_TYPE") else None
    cache_type: Known[str] = Known(cache, "service", "OLLAMA_KV_CACHE_TYPE") if cache else Known("f16", "default")
    par = _uint(env.get("OLLAMA_NUM_PARALLEL"))
    parallel: Known[int] = Known(par, "service", "OLLAMA_NUM_PARALLEL") if par else Known(1, "default")
    fa_text = (env.get("OLLAMA_FLASH_ATTENTION") or "").strip().lower()
    if fa_text in ("1", "true", "t", "yes", "on"):
        fa: Known[bool] = Known(True, "service", "OLLAMA_FLASH_ATTENTION")
    elif fa_text in ("0", "false", "f", "no", "off"):
        fa = Known(False, "service", "OLLAMA_FLASH_ATTENTION")
    else:
        fa = Known(True, "default", "auto: on where the GPU and the model support it")
    return ServerDefaults(num_ctx, cache_type, parallel, fa)


@dataclass(frozen=True, slots=True)
class PreflightRow:
    """One pulled model's verdict.

    Attributes:
        name / digest: From ``/api/tags``.
        size_bytes: The model file's size (``/api/tags``), None when not listed.
        loaded_vram_bytes: Its ``size_vram`` when loaded now (counted as available to it), else None.
        num_ctx: The per-slot context it would get (clamped to its training context), with source.
        kv_bytes: KV cache at ``num_ctx`` × slots × cache type (exact arithmetic), None when unknown.
        total_bytes: weights + KV + recurrent state + compute (estimated), None when unknown.
        gpu_bytes: GPU memory for 100% offload, None when unknown.
        budget_bytes: Free GPU memory now (+ its own ``size_vram`` when loaded), None when not known.
        verdict: ``fits`` / ``marginal`` / ``spills`` against the budget; ``unknown`` without a
            budget or a total; ``waiting`` for ``/api/show``; ``error`` when it failed; ``cloud``.
        headroom_bytes: ``budget − need`` (negative: short by that much), None without a verdict.
        max_num_ctx: The largest num_ctx that stays 100% on the GPU, None when unknown.
        note: Why a figure is missing, or the spill in words.
        kv_source / total_source: ``estimated`` (kvtop's arithmetic: KV exact given its inputs, the
            weights from the tensor list or the file size, compute estimated), or, for a model loaded
            at this very configuration, ``allocated`` (runner log) / ``reported`` (``/api/ps`` size).
        calibration: Where the loaded model's real figures came from, "" when not loaded (or none).
    """

    name: str
    digest: str
    size_bytes: int | None
    loaded_vram_bytes: int | None
    num_ctx: Known[int]
    kv_bytes: int | None
    total_bytes: int | None
    gpu_bytes: int | None
    budget_bytes: int | None
    verdict: Verdict
    headroom_bytes: int | None
    max_num_ctx: int | None
    note: str = ""
    kv_source: str = "estimated"
    total_source: str = "estimated"
    calibration: str = ""
    max_num_ctx_bound: str | None = None
    """Which limit ``max_num_ctx`` is (``plan.num_ctx_bound``: memory, training context, cell limit)."""

    @property
    def max_num_ctx_text(self) -> str:
        """``24,576 (memory)`` / ``40,960 (training context)`` / ``?``: the one form on every face."""
        if self.max_num_ctx is None or self.max_num_ctx_bound is None:
            return "?"
        return f"{self.max_num_ctx:,} ({self.max_num_ctx_bound})"


def _parameter_num_ctx(parameters: str) -> int | None:
    for line in parameters.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "num_ctx":
            return _uint(parts[1])
    return None


def _empty(tag: TagInfo, loaded: int | None, verdict: Verdict, note: str, num_ctx: Known[int]) -> PreflightRow:
    return PreflightRow(
        tag.name, tag.digest, tag.size_bytes, loaded, num_ctx, None, None, None, None, verdict, None, None, note
    )


def loaded_calibration(
    spec: plan.ModelSpec,
    ps: PsModel,
    defaults: ServerDefaults,
    *,
    view: Any = None,
    engine: plan.Engine = "llama-server",
) -> plan.Calibration | None:
    """The real figures of a loaded model: its dashboard row's (``view``, a ``ModelView``: the
    runner log's allocations, else its ``/api/ps`` size at the settings the row knows), else its
    ``/api/ps`` size less the weights and the KV cache at ``ps.context_length`` and the
    ``defaults``' KV type and slots (``derived``). None when neither gives a compute figure."""
    if view is not None:
        cal = plan.calibration_from_view(view)
        if cal is not None:
            return cal
    if not ps.size_bytes or not ps.context_length or spec.weights_bytes is None:
        return None
    config = plan.PlanConfig(
        ps.context_length,
        defaults.cache_type.value or "f16",
        defaults.parallel.value or 1,
        bool(defaults.flash_attention.value),
    )
    try:
        base = plan.predict(spec, config, engine=engine)
    except ValueError:
        return None
    if base.kv_bytes is None:
        return None
    derived = ps.size_bytes - spec.weights_bytes - base.kv_bytes - (base.recurrent_bytes or 0)
    if derived < 0:  # the server runs another KV type or slot count than assumed: no anchor
        return None
    return plan.Calibration(
        base.config,
        derived,
        "derived",
        "/api/ps size − weights − KV",
        weights_bytes=spec.weights_bytes,
        kv_bytes=base.kv_bytes,
        total_bytes=ps.size_bytes,
    )


def preflight_row(
    tag: TagInfo,
    show: ShowInfo | None,
    defaults: ServerDefaults,
    *,
    free_bytes: int | None,
    loaded_vram_bytes: int | None = None,
    engine: plan.Engine = "llama-server",
    model_info: Mapping[str, Any] | None = None,
    loaded: PsModel | None = None,
    view: Any = None,
    running: ServerDefaults | None = None,
) -> PreflightRow:
    """One model's pre-flight (see the module doc). ``model_info`` overrides ``show.model_info``;
    ``loaded``: its ``/api/ps`` row when loaded now, ``view``: its dashboard row (``ModelView``,
    with the log's allocations) — their real figures replace the estimate (module doc).
    ``running``: the settings the server really runs with, to read a loaded model's ``/api/ps``
    size by (default ``defaults``; ``kvtop plan --all --kv q8_0`` asks about other settings than
    the server's)."""
    if loaded is not None and loaded_vram_bytes is None:
        loaded_vram_bytes = loaded.size_vram_bytes
    if show is None and model_info is None:
        return _empty(tag, loaded_vram_bytes, "waiting", "waiting for /api/show", defaults.num_ctx)
    if show is not None and show.error:
        return _empty(tag, loaded_vram_bytes, "error", show.error, defaults.num_ctx)
    if show is not None and show.remote:
        return _empty(tag, loaded_vram_bytes, "cloud", "runs on the remote service", defaults.num_ctx)
    info = model_info if model_info is not None else (show.model_info if show is not None else {})
    num_ctx = defaults.num_ctx
    own = _parameter_num_ctx(show.parameters) if show is not None else None
    if own:
        num_ctx = Known(own, "requested", "the Modelfile's PARAMETER num_ctx")
    if num_ctx.value is None:
        return _empty(tag, loaded_vram_bytes, "unknown", num_ctx.note, num_ctx)
    spec = plan.model_spec(tag.name, info, file_size=tag.size_bytes)
    budget = plan.gpu_budget(free_bytes, loaded_vram_bytes)
    config = plan.PlanConfig(
        num_ctx.value,
        defaults.cache_type.value or "f16",
        defaults.parallel.value or 1,
        bool(defaults.flash_attention.value),
    )
    cal = (
        loaded_calibration(spec, loaded, running or defaults, view=view, engine=engine) if loaded is not None else None
    )
    try:
        p = plan.predict(spec, config, budget_bytes=budget, calibration=cal, engine=engine)
        best = plan.max_num_ctx_on_gpu(spec, config, budget, calibration=cal, engine=engine)
    except ValueError as exc:
        return _empty(tag, loaded_vram_bytes, "error", str(exc), num_ctx)
    kv_bytes, total_bytes, gpu_bytes = p.kv_bytes, p.total_bytes, p.gpu_bytes
    kv_source = total_source = "estimated"
    calibration = ""
    if cal is not None:
        c = cal.config
        if cal.source == "allocated":
            calibration = f"runs at {c.label()}, compute allocated (runner log)"
        else:
            calibration = (
                f"runs at num_ctx {c.num_ctx} (/api/ps), compute derived from its size assuming "
                f"{c.cache_type}, {c.parallel} slot{'' if c.parallel == 1 else 's'}, "
                f"FA {'on' if c.flash_attention else 'off'}"
            )
        if cal.config == p.config:  # loaded at this very configuration: its real figures
            real = "allocated" if cal.source == "allocated" else "reported"
            if cal.source == "allocated" and cal.kv_bytes is not None:
                kv_bytes, kv_source = cal.kv_bytes, "allocated"
            if cal.total_bytes is not None:
                total_bytes, total_source = cal.total_bytes, real
                if gpu_bytes is not None and p.total_bytes is not None:
                    gpu_bytes = max(0, gpu_bytes + cal.total_bytes - p.total_bytes)
    if p.config.num_ctx != num_ctx.value:
        num_ctx = Known(p.config.num_ctx, "estimated", f"{num_ctx.value} lowered to the training context")
    if p.fit is not None:
        verdict: Verdict = p.fit.verdict
        note = "" if verdict == "fits" else p.fit.text()
        headroom: int | None = p.fit.headroom_bytes
    else:
        verdict, headroom = "unknown", None
        note = (
            (p.kv_problem or spec.kv_reason or "weights not known")
            if p.total_bytes is None
            else "free GPU memory not known"
        )
    return PreflightRow(
        tag.name,
        tag.digest,
        tag.size_bytes,
        loaded_vram_bytes,
        num_ctx,
        kv_bytes,
        total_bytes,
        gpu_bytes,
        budget,
        verdict,
        headroom,
        best,
        note,
        kv_source,
        total_source,
        calibration,
        plan.num_ctx_bound(spec, config, best),
    )


def preflight(
    pulled: PulledSnapshot | None,
    defaults: ServerDefaults,
    *,
    free_bytes: int | None,
    loaded: Sequence[PsModel] = (),
    engine: plan.Engine = "llama-server",
    views: Sequence[Any] = (),
    running: ServerDefaults | None = None,
) -> tuple[PreflightRow, ...]:
    """Every pulled model's row, in ``/api/tags`` order; empty before ``/api/tags`` was read.
    ``loaded``: ``/api/ps``; ``views``: the dashboard's ``ModelView`` rows (the log's figures),
    matched by digest; ``running``: as for :func:`preflight_row`."""
    if pulled is None or pulled.tags is None:
        return ()
    ps = {m.digest: m for m in loaded}
    rows = {getattr(v, "digest", None): v for v in views if not getattr(v, "cloud", False)}
    return tuple(
        preflight_row(
            tag,
            pulled.shows.get(digest),
            defaults,
            free_bytes=free_bytes,
            engine=engine,
            loaded=ps.get(digest),
            view=rows.get(digest),
            running=running,
        )
        for digest, tag in pulled.tags.items()
    )


def unread(rows: Sequence[PreflightRow], not_asked: str = "waiting for /api/show") -> tuple[tuple[str, str], ...]:
    """``(name, reason)`` of each row whose ``/api/show`` was not read, in row order: an ``error``
    row's reason is its error (``/api/show: no answer within 10 s``, an HTTP error); a ``waiting``
    row (never asked, or asked too late) gets ``not_asked``. Empty when every answer is in."""
    return tuple(
        (r.name, r.note or "error") if r.verdict == "error" else (r.name, not_asked)
        for r in rows
        if r.verdict in ("error", "waiting")
    )


def marked(k: Known[Any]) -> str:
    """A setting with its source mark after it: ``4096*`` (Ollama default), ``q8_0=`` (server env),
    ``8192^`` (requested), ``40960~`` (lowered to the training context); ``?`` when not known
    (``model.known.setting_text``, the one renderer of every face)."""
    return setting_text(k)


def preflight_json(row: PreflightRow) -> dict[str, Any]:
    """One row of ``server.preflight`` (``--once --json``) and of ``kvtop plan --all --json``."""
    return {
        "name": row.name,
        "digest": row.digest,
        "size": row.size_bytes,
        "loaded_vram": row.loaded_vram_bytes,
        "num_ctx": row.num_ctx.value,
        "num_ctx_source": row.num_ctx.source,
        "kv": row.kv_bytes,
        "total": row.total_bytes,
        "gpu_need": row.gpu_bytes,
        "budget": row.budget_bytes,
        "verdict": row.verdict,
        "headroom": row.headroom_bytes,
        "max_num_ctx": row.max_num_ctx,
        "max_num_ctx_bound": row.max_num_ctx_bound,
        "note": row.note or None,
        "kv_source": row.kv_source,
        "total_source": row.total_source,
        "calibration": row.calibration or None,
    }


def defaults_json(d: ServerDefaults) -> dict[str, Any]:
    """The settings every pre-flight row assumed, each with its source."""
    return {
        "num_ctx": d.num_ctx.value,
        "num_ctx_source": d.num_ctx.source,
        "kv_type": d.cache_type.value,
        "kv_type_source": d.cache_type.source,
        "parallel": d.parallel.value,
        "parallel_source": d.parallel.source,
        "flash_attention": d.flash_attention.value,
        "flash_attention_source": d.flash_attention.source,
    }
