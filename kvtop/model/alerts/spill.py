"""Spill rules and fixes: a model partly in system RAM, why, and the computed ways out.

For a spill, the KV arithmetic of :mod:`kvtop.model.kv` inverts the memory the model may use on
the GPU into the largest num_ctx at the current cache type, the q8_0/q4_0 alternatives and fewer
slots. That budget is the GPU's free memory plus what the model holds in VRAM now
(``kvtop.model.plan.gpu_budget``) when the GPU sample shows the model's runner on a GPU,
otherwise the model's own ``size_vram``; the alert says which. Everything but the KV cache
(weights, compute buffers) is taken as unchanged by a fix, which slightly understates what a
smaller context or a quantized cache saves (the compute buffer shrinks a little too), so a fix
marked ``fits`` errs on the safe side.

Room another model could give is found from figures computed once per evaluation
(``Ctx.others_by_kv``): a spilled model costs a bounded number of KV computations, whatever the
number of other models.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvtop.logparse.load_build import Load, is_cpu_device
from kvtop.model import kv
from kvtop.model.alerts.context import Ctx, current_types
from kvtop.model.alerts.fa import fa_forced
from kvtop.model.alerts.text import delta, ib, plural, slots
from kvtop.model.alerts.types import Alert, Fix
from kvtop.model.known import source_mark
from kvtop.model.ladder import setting_in_force

if TYPE_CHECKING:  # annotations only: the rules read the state, the state never imports the rules
    from kvtop.model.views import ModelView

__all__ = ["Budget", "fix_budget", "context_fix", "spill"]


def _load_on_gpu(load: Load | None) -> bool:
    """The runner saw a GPU: a buffer on a GPU device, an offloaded layer, a GPU's free memory."""
    if load is None:
        return False
    devices = [d for per in load.memory.values() for d in per]
    return (
        any(not is_cpu_device(d) for d in devices)
        or bool(load.layers_offloaded)
        or any(not is_cpu_device(d) for d in load.device_free)
    )


def _cpu_buffers(load: Load | None) -> dict[str, int]:
    """KV (and, with partial offload, weights) bytes the load put on CPU devices."""
    if load is None or not _load_on_gpu(load):
        return {}
    full = (
        load.layers_offloaded is not None
        and load.layers_total is not None
        and load.layers_offloaded >= load.layers_total
    )
    out: dict[str, int] = {}
    for component in ("kv", "weights"):
        if component == "weights" and (full or load.layers_offloaded is None):
            continue
        cpu = sum(b for d, b in load.memory.get(component, {}).items() if is_cpu_device(d) and b > 0)
        if cpu:
            out[component] = cpu
    return out


def _gpu_present(ctx: Ctx, view: ModelView) -> bool:
    """Whether the machine running this model has a GPU (for a 100% CPU model)."""
    if _load_on_gpu(view.load):
        return True
    usage = ctx.usage.get((view.name, view.digest))
    gpu = ctx.state.gpu
    return (
        usage is not None
        and bool(usage.runner_pids)
        and gpu is not None
        and gpu.ok
        and any(d.error is None and (d.memory_total_bytes or 0) > 0 for d in gpu.devices)
    )


@dataclass(frozen=True, slots=True)
class Budget:
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


def fix_budget(ctx: Ctx, view: ModelView, deficit: int) -> Budget:
    """The budget: free memory on the model's GPUs + its ``size_vram``, else its ``size_vram``."""
    held = max(0, view.size_vram_bytes or 0)
    reserve = ctx.th.fix_reserve_bytes
    # the planner only for a spilled model: loaded here, not at startup (kvtop.model.plan is large)
    from kvtop.model.plan import gpu_budget, kv_now

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
        text = f"fixes sized for {ib(budget)} of VRAM: {ib(free)} free on {where} + {ib(held)} it holds now"
    else:
        budget = max(0, held - reserve)
        text = f"fixes sized for the {ib(budget)} it holds in VRAM now (no GPU telemetry for its runner)"
    if reserve:
        text += f", {ib(reserve)} kept free"
    return Budget(budget=budget, need=held + deficit, free=free, kv_now=kv_now(view), text=text)


def spill(ctx: Ctx, view: ModelView) -> Alert | None:
    """The ``spill`` alert of a loaded model (part of it in system RAM, layers or buffers on the
    CPU although there is a GPU) with its computed fixes; None when it is all on the GPU."""
    size, vram = view.size_bytes, view.size_vram_bytes
    load = view.load
    cpu = _cpu_buffers(load)
    causes: list[str] = []
    deficit = 0
    if size and vram is not None and 0 < vram < size:
        deficit = size - vram
        causes.append(f"{view.cpu_percent}% of {ib(size)} in system RAM ({ib(deficit)})")
    elif size and vram == 0 and _gpu_present(ctx, view):
        deficit = size
        causes.append(f"all {ib(size)} in system RAM although the machine has a GPU")
    if (
        load is not None
        and load.layers_offloaded is not None
        and load.layers_total
        and _load_on_gpu(load)
        and load.layers_offloaded < load.layers_total
    ):
        causes.append(f"{load.layers_offloaded}/{load.layers_total} layers on the GPU")
    if load is not None and load.fit_overflowing:
        causes.append(f"{load.fit_overflowing} layers overflow the GPU (llama-server fit)")
    if "kv" in cpu:
        causes.append(f"KV cache {ib(cpu['kv'])} on the CPU")
    if not causes:
        return None
    if deficit == 0:
        deficit = sum(cpu.values())
    ctx_value, par = view.context.value, view.parallel.value
    type_k, type_v, _ = current_types(view)
    kv_value = view.memory.kv.value
    if kv_value is not None:
        source = source_mark(view.memory.kv.source)  # ~ estimated, as on every screen (model.known)
        shape = ""
        if ctx_value is not None and par is not None:
            shape = f" at num_ctx {ctx_value} × {slots(par)}"
        causes.append(f"KV cache {source}{ib(kv_value)}{shape}, {type_k if type_k == type_v else f'{type_k}/{type_v}'}")
    budget = fix_budget(ctx, view, deficit)
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
    quality = "quality close to f16" if cache_type == "q8_0" else "noticeably lower quality on long contexts"
    fa = view.flash_attention
    if fa.value == "enabled":
        state = f" (on now, {fa.source})"
    elif setting_in_force(view.local.env, "OLLAMA_FLASH_ATTENTION", "1"):
        state = " (OLLAMA_FLASH_ATTENTION is set)"
    elif fa.value == "auto":
        state = (
            " (auto now: llama.cpp decides at load, unknown without the log; OLLAMA_FLASH_ATTENTION=1 makes it sure)"
        )
    else:
        state = " (OLLAMA_FLASH_ATTENTION=1)"
    cost = f"{cache_type} cache: {quality}; needs flash attention{state}"
    if view.flash_attention.value == "disabled":
        reason = view.load.flash_attention_reason if view.load is not None else None
        cost += f", which is off now{f' ({reason})' if reason else ''}"
    return cost + "; server-wide, restart Ollama"


def _spill_fixes(ctx: Ctx, view: ModelView, b: Budget) -> tuple[Fix, ...]:
    """A smaller num_ctx, a quantized cache, fewer slots, or room from other models; the ones
    that fit first."""
    layout = ctx.layout(view)
    ctx_value, par = view.context.value, view.parallel.value
    kv_budget = b.kv_budget
    fixes: list[Fix] = []
    if layout is None or ctx_value is None or par is None or kv_budget is None or b.kv_now is None:
        why = view.kv_unavailable or "num_ctx, slots or the KV size is not known"
        fixes.append(
            Fix(
                "lower num_ctx", f"KV arithmetic unavailable: {why}", None, "prompts over the new num_ctx are truncated"
            )
        )
        fixes.extend(_other_model_fixes(ctx, view, b))
        return _sorted_fixes(fixes)
    type_k, type_v, fa = current_types(view)
    kv_now = b.kv_now
    if b.need <= b.budget:
        fixes.append(
            Fix(
                f"reload {view.name}",
                f"needs {ib(b.need)}, {ib(b.budget)} available now",
                True,
                "one slow request while it reloads; nothing else changes",
            )
        )
    try:
        best = kv.max_num_ctx(layout, kv_budget, par, type_k, type_v, flash_attention=fa)
    except ValueError:
        best = None
    if best is not None and b.need > b.budget:
        if 0 < best < ctx_value:
            new = kv.kv_allocation(layout, best, par, type_k, type_v, flash_attention=fa).total_bytes
            fixes.append(
                Fix(
                    f"num_ctx {best}",
                    f"KV ~{ib(new)} (~{delta(new - kv_now)})",
                    True,
                    f"prompts over {best} tokens are truncated (now {ctx_value})",
                )
            )
        elif best == 0:
            from kvtop.model.plan import beside_kv  # the what-if derives the weights the same way

            fixes.append(
                Fix(
                    "lower num_ctx",
                    f"weights and compute alone need {ib(beside_kv(view, b.need))} of {ib(b.budget)}: no num_ctx fits",
                    False,
                    "the context is not what overflows",
                )
            )
    current_bpe = _bytes_per_element(type_k) + _bytes_per_element(type_v)
    # a quantized cache needs flash attention (docs/ollama-internals.md §3.2): never offered for a
    # model whose runner turned it off because the model or GPU cannot use it
    fa_impossible = view.load is not None and fa_forced(view.load)
    for cache_type in ("q8_0", "q4_0"):
        if fa_impossible or 2 * _bytes_per_element(cache_type) >= current_bpe or b.need <= b.budget:
            continue
        if setting_in_force(view.local.env, "OLLAMA_KV_CACHE_TYPE", cache_type):
            continue  # already set and still not in effect: the kv_type_not_applied alert says why
        try:
            new = kv.kv_allocation(layout, ctx_value, par, cache_type, flash_attention=True).total_bytes
        except ValueError as exc:
            fixes.append(Fix(f"OLLAMA_KV_CACHE_TYPE={cache_type}", f"llama.cpp refuses it here: {exc}", False, ""))
            continue
        if new <= kv_budget:
            fixes.append(
                Fix(
                    f"OLLAMA_KV_CACHE_TYPE={cache_type}",
                    f"KV ~{ib(new)} (~{delta(new - kv_now)})",
                    True,
                    _fa_cost(view, cache_type),
                )
            )
            continue
        n = kv.max_num_ctx(layout, kv_budget, par, cache_type, flash_attention=True)
        if n > (best or 0):
            new = kv.kv_allocation(layout, n, par, cache_type, flash_attention=True).total_bytes
            fixes.append(
                Fix(
                    f"OLLAMA_KV_CACHE_TYPE={cache_type} and num_ctx {n}",
                    f"KV ~{ib(new)} (~{delta(new - kv_now)})",
                    True,
                    f"prompts over {n} tokens are truncated (now {ctx_value}); " + _fa_cost(view, cache_type),
                )
            )
    if par > 1 and b.need > b.budget:
        slots_fix: Fix | None = None
        for p in range(par - 1, 0, -1):
            new = kv.kv_allocation(layout, ctx_value, p, type_k, type_v, flash_attention=fa).total_bytes
            if new <= kv_budget or p == 1:
                slots_fix = Fix(
                    f"OLLAMA_NUM_PARALLEL={p}",
                    f"KV ~{ib(new)} (~{delta(new - kv_now)})",
                    new <= kv_budget,
                    f"{plural(par - p, 'fewer concurrent request')} ({slots(p)} of num_ctx {ctx_value});"
                    " server-wide, restart Ollama",
                )
                break
        if slots_fix is not None:
            fixes.append(slots_fix)
    if b.need > b.budget:
        fixes.extend(_other_model_fixes(ctx, view, b))
    return _sorted_fixes(fixes)


def _other_model_fixes(ctx: Ctx, view: ModelView, b: Budget) -> list[Fix]:
    """Room another loaded model could give: a smaller context for the one with the largest KV
    cache that can give it, or unloading the smallest that is enough (else all of them).

    Another model counts unless the GPU sample shows it on other GPUs only. Both searches walk
    indexes built once per evaluation (``Ctx.others_by_kv``, ``Ctx.others_by_vram``) and stop
    at the first model that fits. Whether a model can give ``short`` bytes is decided from its
    figures (``Ctx.other_kv``: two KV computations per model per evaluation, whatever the number
    of spills); the only KV computation per spill is the chosen model's ``kv.max_num_ctx``.
    """
    short = b.need - b.budget
    if short <= 0:
        return []
    mine = ctx.gpus_of(view)

    def here(o: ModelView) -> bool:
        if o is view:
            return False
        theirs = ctx.gpus_of(o)
        return mine is None or theirs is None or bool(mine & theirs)  # else measured on other GPUs only

    shared = "" if mine is not None else " (if it shares the GPU)"
    fixes: list[Fix] = []
    # a smaller context for the other model with the largest KV cache
    for o in ctx.others_by_kv():
        if (o.memory.kv.value or 0) < short:
            break  # sorted by KV: no later one holds enough cache to give
        if not here(o):
            continue
        other = ctx.other_kv(o)
        if other is None or not other.shrinks_for(short):
            continue
        o_ctx, o_par, o_kv = o.context.value, o.parallel.value, other.kv_bytes
        if o_ctx is None or o_par is None:  # pragma: no cover - other_kv keeps only models with both
            continue
        k, v, fa = current_types(o)
        n = kv.max_num_ctx(other.layout, o_kv - short, o_par, k, v, flash_attention=fa)
        if not 0 < n < o_ctx:  # pragma: no cover - shrinks_for says exactly when it is
            continue
        new = kv.kv_allocation(other.layout, n, o_par, k, v, flash_attention=fa).total_bytes
        fixes.append(
            Fix(
                f"num_ctx {n} for {o.name}",
                f"frees {ib(o_kv - new)} of VRAM{shared}",
                True,
                f"{o.name}: prompts over {n} tokens are truncated (now {o_ctx}); it reloads",
            )
        )
        break
    by_vram = ctx.others_by_vram()
    start = bisect.bisect_left(by_vram, short, key=lambda x: x[0])
    enough = next((o for _, _, o in itertools.islice(by_vram, start, None) if here(o)), None)
    if enough is not None:
        o = enough
        fixes.append(
            Fix(
                f"unload {o.name}",
                f"frees {ib(o.size_vram_bytes)} of VRAM{shared}",
                True,
                f"{o.name} reloads on its next request (ollama stop {o.name})",
            )
        )
    else:
        others = [o for o in ctx.views if o.size_vram_bytes and here(o)]  # none is enough alone: all of them
        if not others:
            return []
        total = sum(o.size_vram_bytes or 0 for o in others)
        names = ", ".join(o.name for o in others)
        fixes.append(
            Fix(
                f"unload {names}",
                f"frees {ib(total)} of VRAM{shared}, {ib(short)} needed",
                total >= short,
                "they reload on their next request",
            )
        )
    return fixes


def context_fix(ctx: Ctx, view: ModelView, num_ctx: int, cost: str) -> Fix:
    """``num_ctx N`` for ``view`` with its KV change and whether it fits (budget as for spills)."""
    layout = ctx.layout(view)
    par = view.parallel.value
    if layout is None or par is None:
        return Fix(f"num_ctx {num_ctx}", "KV arithmetic unavailable for this model", None, cost)
    k, v, fa = current_types(view)
    try:
        new = kv.kv_allocation(layout, num_ctx, par, k, v, flash_attention=fa).total_bytes
    except ValueError as exc:
        return Fix(f"num_ctx {num_ctx}", f"KV arithmetic refused: {exc}", None, cost)
    size, vram = view.size_bytes, view.size_vram_bytes
    deficit = size - vram if size and vram is not None and vram < size else 0
    b = fix_budget(ctx, view, deficit)
    kv_budget = b.kv_budget
    if b.kv_now is None or kv_budget is None:
        return Fix(f"num_ctx {num_ctx}", f"KV ~{ib(new)}", None, cost)
    fits: bool | None = new <= kv_budget
    if new > b.kv_now and b.free is None:
        fits = None  # a larger cache needs free memory that only GPU telemetry shows
    return Fix(f"num_ctx {num_ctx}", f"KV ~{ib(new)} (~{delta(new - b.kv_now)})", fits, cost)
