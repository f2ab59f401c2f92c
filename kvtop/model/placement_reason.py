"""Why a model load landed where it did (issue 27 §3): the free memory of each GPU when it was placed, the
layers and bytes each got, what overflowed to system memory, the reason it went to the CPU rather than to
another GPU, and the computed fix, sized in bytes.

Pure: a :class:`~kvtop.logparse.load_build.Load` (its scheduler estimate, llama.cpp's fit pass, the buffers per
device, ``using device … MiB free``), the server's settings (:func:`placement_settings`: the service environment,
else the log's ``server config`` line, else Ollama's default), optionally a GPU sample and the other loaded
models. Ollama's placement rules per era, with the source files and versions they come from, are in
``docs/placement.md``; :func:`placement_for` is the one join every face calls (the detail view, ``--once --json``),
``kvtop inspect-log`` calls :func:`placement_report` with the log's own settings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kvtop.logparse.load_build import Load, is_cpu_device
from kvtop.model.gpu_snapshots import GpuSnapshot
from kvtop.model.known import Known
from kvtop.model.placement_settings import (
    SETTING_NAMES,
    VISIBILITY_VARS,
    int_setting,
    placement_settings,
    spread_setting,
)
from kvtop.model.placement_fixes import PlacementFix, context_fixes, short_fix, spread_fix, unload_fixes

if TYPE_CHECKING:
    from kvtop.model.views import AppState, ModelView

__all__ = [
    "FIT_TARGET_DEFAULT_BYTES",
    "MINIMUM_MEMORY_BYTES",
    "SETTING_NAMES",
    "SINGLE_GPU_SHARE",
    "VISIBILITY_VARS",
    "DevicePlacement",
    "PlacementFix",
    "PlacementReport",
    "placement_for",
    "placement_json",
    "placement_report",
    "placement_settings",
]

MIB = 1024 * 1024
GIB = 1024 * MIB

MINIMUM_MEMORY_BYTES = 457 * MIB
"""What Ollama sets aside on every CUDA/ROCm GPU besides the model (``discover/gpu.go`` ``cudaMinimumMemory``
v0.1.3x–v0.11; ``ml/device.go`` ``MinimumMemory`` since; Metal 512 MiB; docs/placement.md §2)."""

FIT_TARGET_DEFAULT_BYTES = 1024 * MIB
"""The margin llama-server's fit pass keeps free on each device when ``LLAMA_ARG_FIT_TARGET`` is unset
(docs/placement.md §4; docs/ollama-internals.md §4.4)."""

SINGLE_GPU_SHARE = 0.8
"""Era C: with ``OLLAMA_SCHED_SPREAD`` off a model goes to one GPU alone when its predicted VRAM is at most 80%
of that GPU's free memory (``server/sched.go`` ``bestSingleGPUFit``, v0.33; docs/placement.md §4)."""

_LIBRARY_PREFIX = {"cuda": "CUDA", "rocm": "ROCm", "metal": "Metal", "vulkan": "Vulkan", "oneapi": "SYCL"}


@dataclass(frozen=True, slots=True)
class DevicePlacement:
    """One GPU as the load saw it.

    Attributes:
        name: The runner's device name (``CUDA0``, ``ROCm1``), or ``GPU 2`` for a GPU only the sample shows.
        free_bytes: Free memory when the load was placed: Ollama's ``memory.available`` (reported), llama.cpp's
            ``using device … MiB free`` / fit pass (runner), else the sample's free memory plus this model's own
            bytes on it (estimated), else the sample's free memory now (reported, noted).
        placed_bytes: This load's bytes on it: the buffers (allocated), the fit's projection (runner) or the
            scheduler's ``memory.required.allocations`` (estimated).
        layers: Layers placed on it (``layers.split`` or the fit's ``N layers``); None when the log does not say.
        overflowing: Of those, layers the fit pass let overflow to the next device or the CPU.
        used: False for a GPU the load put nothing on.
        note: Why a figure is shaped as it is, or why the GPU was not used.
    """

    name: str
    free_bytes: Known[int] = Known()
    placed_bytes: Known[int] = Known()
    layers: int | None = None
    overflowing: int | None = None
    used: bool = True
    note: str = ""


@dataclass(frozen=True, slots=True)
class PlacementReport:
    """Where one load landed and why (docs/placement.md).

    Attributes:
        era: The runner era of the load (``B1``, ``B2``, ``C``…), which decides the rules that applied.
        devices: The GPUs, used ones first in the runner's order.
        layers_gpu / layers_total: Layers offloaded, of the model's.
        cpu_layers: Layers left to the CPU (None when not known).
        cpu_bytes: What overflowed to system memory (allocated: the host buffers; runner: the fit's shortfall;
            estimated: ``memory.required.full − partial``).
        reason: ``fits``, ``requested``, ``hidden``, ``single_gpu``, ``gpu_skipped``, ``gpu_overhead``,
            ``fit_margin``, ``not_enough`` or ``unknown``.
        reason_text: The reason in a sentence, with the figures.
        settings: The settings read, each with its source (service env, the log's config, Ollama's default).
        fixes: Computed fixes, never one asking for what is already set.
    """

    era: str | None
    devices: tuple[DevicePlacement, ...]
    layers_gpu: int | None
    layers_total: int | None
    cpu_layers: int | None
    cpu_bytes: Known[int]
    reason: str
    reason_text: str
    settings: Mapping[str, Known[str]] = field(default_factory=dict)
    fixes: tuple[PlacementFix, ...] = ()

    @property
    def spilled(self) -> bool:
        """True when part of the load is in system memory."""
        return self.reason not in ("fits",)

    def to_json(self) -> dict[str, Any]:
        """The report as the ``placement`` member of docs/json.md (bytes as integers, null when unknown)."""
        return {
            "era": self.era,
            "reason": self.reason,
            "reason_text": self.reason_text,
            "layers_gpu": self.layers_gpu,
            "layers_total": self.layers_total,
            "cpu_layers": self.cpu_layers,
            "cpu_bytes": self.cpu_bytes.value,
            "cpu_bytes_source": self.cpu_bytes.source,
            "cpu_bytes_note": self.cpu_bytes.note,
            "devices": [
                {
                    "name": d.name,
                    "used": d.used,
                    "free_bytes": d.free_bytes.value,
                    "free_source": d.free_bytes.source,
                    "placed_bytes": d.placed_bytes.value,
                    "placed_source": d.placed_bytes.source,
                    "layers": d.layers,
                    "overflowing": d.overflowing,
                    "note": d.note,
                }
                for d in self.devices
            ],
            "settings": {k: {"value": v.value, "source": v.source} for k, v in self.settings.items()},
            "fixes": [
                {"action": f.action, "detail": f.detail, "bytes": f.bytes, "enough": f.enough} for f in self.fixes
            ],
        }


# --------------------------------------------------------------------------------------------
# Devices


def _devices(load: Load) -> list[DevicePlacement]:
    """The GPUs the log names for ``load``, in the runner's order, with what the log says of each."""
    rows: dict[str, dict[str, Any]] = {}

    def row(name: str) -> dict[str, Any]:
        return rows.setdefault(name, {})

    est = load.estimate
    if est is not None and est.available_bytes and (est.library or "").lower() != "cpu":
        prefix = _LIBRARY_PREFIX.get((est.library or "").lower(), "GPU")
        for i, free in enumerate(est.available_bytes):
            r = row(f"{prefix}{i}")
            r["free"] = Known(free, "reported", "Ollama's offload line: memory.available")
            if i < len(est.layers_split):
                r["layers"] = est.layers_split[i]
            if i < len(est.allocations_bytes):
                r["placed"] = Known(est.allocations_bytes[i], "estimated", "memory.required.allocations")
    fit = load.fit
    if fit is not None:
        for name, facts in fit.devices.items():
            r = row(name)
            if "layers" in facts:
                r["layers"] = facts["layers"]
                r["overflowing"] = facts.get("overflowing")
            used, margin = facts.get("used_bytes"), facts.get("margin_bytes")
            if used is not None:
                r["placed"] = Known(used, "runner", "llama-server's fit projection")
            if used is not None and margin is not None and "layers" in facts:
                r["free"] = Known(used + margin, "runner", "the fit pass: used + free after it")
    for name, free in load.device_free.items():
        row(name)["free"] = Known(free, "runner", "llama.cpp: using device … MiB free")
    placed: dict[str, int] = {}
    for component in ("weights", "kv", "compute"):
        for device, nbytes in load.memory.get(component, {}).items():
            if not is_cpu_device(device):
                placed[device] = placed.get(device, 0) + nbytes
    for device, nbytes in placed.items():
        row(device)["placed"] = Known(nbytes, "allocated", "the runner's buffers (weights + KV + compute)")
    one = load.single_gpu
    if one is not None and len(rows) <= 1:  # the scheduler's one GPU: the runner's only device, or named by its id
        r = next(iter(rows.values())) if rows else row(one.gpu)
        if one.available_bytes is not None and "free" not in r:
            r["free"] = Known(one.available_bytes, "reported", "the scheduler's single-GPU line: available")
        if one.required_bytes is not None and "placed" not in r:
            r["placed"] = Known(one.required_bytes, "estimated", "the scheduler's single-GPU line: required")
    return [
        DevicePlacement(
            name=name,
            free_bytes=r.get("free", Known()),
            placed_bytes=r.get("placed", Known()),
            layers=r.get("layers"),
            overflowing=r.get("overflowing"),
            used=bool(r.get("layers")) or bool(r.get("placed") and r["placed"].value),
        )
        for name, r in rows.items()
    ]


def _device_index(name: str) -> int | None:
    digits = ""
    for ch in reversed(name):
        if not ch.isdigit():
            break
        digits = ch + digits
    return int(digits) if digits else None


def _with_sample(
    devices: list[DevicePlacement], gpus: GpuSnapshot | None, own: Mapping[int, int], hidden: bool
) -> list[DevicePlacement]:
    """``devices`` joined with a GPU sample: a GPU the log does not name is added as unused (its free memory now);
    a used GPU without a free figure from the log gets the sample's free memory plus this model's own bytes on it
    (``own``: GPU index → bytes). Joined by index (``CUDA1`` = GPU 1) only when no visibility variable renumbers
    the runner's devices (``hidden``)."""
    if gpus is None or not gpus.ok or not gpus.devices:
        return devices
    out = list(devices)
    by_index = {_device_index(d.name): i for i, d in enumerate(out)} if not hidden else {}
    for g in gpus.devices:
        if g.unified_memory:
            continue
        at = by_index.get(g.index)
        free_now = g.memory_free_bytes
        if at is None:
            if hidden:
                continue
            out.append(
                DevicePlacement(
                    name=f"GPU {g.index}",
                    free_bytes=Known(free_now, "reported", "the GPU sample now") if free_now is not None else Known(),
                    used=False,
                    note=f"{g.name or 'GPU'}: nothing of this model on it",
                )
            )
            continue
        d = out[at]
        if d.free_bytes.value is None and free_now is not None:
            mine = own.get(g.index)
            free = (
                Known(free_now + mine, "estimated", "the GPU sample's free memory + this model's bytes on it")
                if mine is not None
                else Known(free_now, "reported", "the GPU sample now (not at load time)")
            )
            out[at] = DevicePlacement(d.name, free, d.placed_bytes, d.layers, d.overflowing, d.used, d.note)
    return out


# --------------------------------------------------------------------------------------------
# What went to the CPU


def _cpu_share(load: Load) -> tuple[int | None, Known[int]]:
    """Layers and bytes left to the CPU."""
    cpu_layers: int | None = None
    full = False
    if load.layers_offloaded is not None and load.layers_total is not None:
        cpu_layers = max(0, load.layers_total - load.layers_offloaded)
        full = cpu_layers == 0
    fit = load.fit
    if fit is not None and fit.shortfall_bytes:
        return cpu_layers, Known(fit.shortfall_bytes, "runner", "llama-server's fit: memory it had to cut")
    host, parts = 0, []
    for component, label in (("weights", "weights"), ("kv", "KV cache")):
        if component == "weights" and (full or cpu_layers is None):
            continue  # with every layer offloaded, CPU weights are the mmap'ed file and the input embeddings
        on_cpu = sum(b for d, b in load.memory.get(component, {}).items() if is_cpu_device(d))
        if on_cpu:
            host += on_cpu
            parts.append(label)
    gpu_named = any(not is_cpu_device(d) for c in ("weights", "kv", "compute") for d in load.memory.get(c, {}))
    if host and gpu_named:
        return cpu_layers, Known(host, "allocated", f"the runner's host buffers: {' and '.join(parts)}")
    est = load.estimate
    if (
        est is not None
        and est.full_bytes is not None
        and est.partial_bytes is not None
        and est.layers_offload is not None
        and est.layers_model is not None
        and est.layers_offload < est.layers_model
    ):
        over = max(0, est.full_bytes - est.partial_bytes)
        return cpu_layers, Known(over, "estimated", "memory.required.full − partial")
    return cpu_layers, Known()


# --------------------------------------------------------------------------------------------
# The report


def placement_report(
    load: Load,
    *,
    settings: Mapping[str, Known[str]] | None = None,
    gpus: GpuSnapshot | None = None,
    own_bytes: Mapping[int, int] | None = None,
    others: Sequence[tuple[str, int]] = (),
) -> PlacementReport | None:
    """Where ``load`` landed and why; None when the log says nothing of its devices or layers.

    Args:
        load: One load of the log.
        settings: :func:`placement_settings`'s answer (empty: nothing read).
        gpus: A GPU sample of the machine (the live faces), None for a pasted log.
        own_bytes: This model's bytes per GPU index in that sample (``model.gpu.model_gpu_usage``).
        others: The other loaded models and their bytes in VRAM (``/api/ps`` ``size_vram``), for "unload X".
    """
    settings = dict(settings or {})
    hidden_var = _visibility(settings)
    devices = _with_sample(_devices(load), gpus, own_bytes or {}, hidden_var is not None)
    cpu_layers, cpu_bytes = _cpu_share(load)
    fit = load.fit
    overflow_layers = fit.overflowing_layers if fit is not None else None
    if not devices and cpu_layers is None and cpu_bytes.value is None:
        return None
    spilled = bool(cpu_layers) or bool(cpu_bytes.value) or bool(overflow_layers)
    used = [d for d in devices if d.used]
    unused = [d for d in devices if not d.used and (d.free_bytes.value or 0) > 0]
    if not spilled:
        reason, text, fixes = "fits", _fits_text(load, used, unused, settings), list[PlacementFix]()
    else:
        reason, text, fixes = _why(load, used, unused, cpu_bytes, cpu_layers, settings, hidden_var, gpus, others)
    return PlacementReport(
        era=load.era,
        devices=tuple(used + [d for d in devices if not d.used]),
        layers_gpu=load.layers_offloaded,
        layers_total=load.layers_total,
        cpu_layers=cpu_layers,
        cpu_bytes=cpu_bytes,
        reason=reason,
        reason_text=text,
        settings=settings,
        fixes=tuple(fixes),
    )


def _fits_text(
    load: Load, used: list[DevicePlacement], unused: list[DevicePlacement], settings: Mapping[str, Known[str]]
) -> str:
    layers = f"all {load.layers_total} layers" if load.layers_total else "every layer"
    where = ", ".join(d.name for d in used) or "the GPU"
    text = f"{layers} on {where}: nothing overflowed to system memory"
    one = load.single_gpu
    if one is not None and one.available_bytes and one.required_bytes:
        return text + (
            f"; the scheduler gave it one GPU because it fits there (~{_size(one.required_bytes)} of"
            f" {_size(one.available_bytes)} free): with OLLAMA_SCHED_SPREAD off Ollama tries each GPU alone first"
        )
    if len(used) == 1 and unused and spread_setting(settings) is not True:
        text += (
            f"; one GPU because it fits there: with OLLAMA_SCHED_SPREAD off Ollama keeps a model on the fewest GPUs"
            f" that hold it ({', '.join(d.name for d in unused)} left free)"
        )
    return text


def _visibility(settings: Mapping[str, Known[str]]) -> tuple[str, str] | None:
    """The first GPU visibility variable set to something, as ``(name, value)``."""
    for name in VISIBILITY_VARS:
        k = settings.get(name)
        if k is not None and k.value:
            return name, k.value
    return None


def _size(n: int) -> str:
    """A size for the reason's sentence (binary units, one decimal)."""
    if n >= GIB:
        return f"{n / GIB:.1f} GiB"
    return f"{n / MIB:.0f} MiB"


def _why(
    load: Load,
    used: list[DevicePlacement],
    unused: list[DevicePlacement],
    cpu_bytes: Known[int],
    cpu_layers: int | None,
    settings: Mapping[str, Known[str]],
    hidden_var: tuple[str, str] | None,
    gpus: GpuSnapshot | None,
    others: Sequence[tuple[str, int]],
) -> tuple[str, str, list[PlacementFix]]:
    over = cpu_bytes.value
    over_text = f"~{_size(over)}" if over else "part of the model"
    layers_text = f" ({cpu_layers} of {load.layers_total} layers)" if cpu_layers and load.layers_total else ""
    what = f"{over_text}{layers_text} went to system memory"
    # the user's num_gpu: Ollama's layers.requested (-1: none); --n-gpu-layers is Ollama's own estimate
    requested = load.estimate.layers_requested if load.estimate is not None else None
    if requested is not None and load.layers_total is not None and 0 <= requested < load.layers_total:
        return (
            "requested",
            f"{what} because num_gpu asked for {requested} of {load.layers_total} layers on the GPU",
            [
                PlacementFix(
                    f"remove num_gpu {requested}",
                    "the model's PARAMETER num_gpu or the request's options.num_gpu: Ollama then offloads every"
                    " layer that fits",
                )
            ],
        )
    if hidden_var is not None:
        name, value = hidden_var
        present = len(gpus.devices) if gpus is not None and gpus.ok else None
        listed = [v for v in value.split(",") if v.strip()]
        if value.strip() == "-1" or (present is not None and present > len(listed)):
            spare = sum(g.memory_free_bytes or 0 for g in (gpus.devices if gpus else ()) if str(g.index) not in listed)
            detail = f"{name}={value} hides " + (
                f"{present - len(listed) if value.strip() != '-1' else present} of {present} GPUs"
                if present is not None
                else "every GPU"
            )
            fix_detail = (
                f"the hidden GPUs have {_size(spare)} free, the overflow needs {over_text}"
                if spare
                else "set it to every GPU's index (or unset it) in the server's environment"
            )
            return (
                "hidden",
                f"{what}: {detail} from Ollama",
                [PlacementFix(f"unset {name}", fix_detail, spare or None, (spare >= over) if spare and over else None)],
            )
    spread = spread_setting(settings)
    if unused:
        if load.era == "C" and spread is not True and len(used) <= 1:
            return (
                "single_gpu",
                f"{what} although {', '.join(f'{d.name} had {_size(d.free_bytes.value or 0)} free' for d in unused)}:"
                f" with OLLAMA_SCHED_SPREAD off Ollama gives a model one GPU when its predicted size is within"
                f" {SINGLE_GPU_SHARE:.0%} of that GPU's free memory, and llama-server's fit then overflowed"
                " there",
                [spread_fix(over, [(d.name, d.free_bytes.value or 0) for d in unused])],
            )
        floor = MINIMUM_MEMORY_BYTES + (int_setting(settings, "OLLAMA_GPU_OVERHEAD") or 0)
        return (
            "gpu_skipped",
            f"{what} although {', '.join(f'{d.name} had {_size(d.free_bytes.value or 0)} free' for d in unused)}:"
            f" Ollama places layers on a GPU only with room for its reserve ({_size(floor)}: 457 MiB minimum +"
            " OLLAMA_GPU_OVERHEAD), the compute graph and two layers, and uses one GPU library at a time",
            [*unload_fixes(over, others), *context_fixes(load, over, settings)],
        )
    overhead = load.estimate.gpu_overhead_bytes if load.estimate is not None else None
    if overhead is None:
        overhead = int_setting(settings, "OLLAMA_GPU_OVERHEAD")
    n = max(1, len(used))
    if load.era != "C" and overhead and over and overhead * n >= over:
        keep = max(0, overhead - -(-over // n)) // MIB * MIB
        return (
            "gpu_overhead",
            f"{what}: OLLAMA_GPU_OVERHEAD={overhead} reserves {_size(overhead)} on each of {n} GPU(s),"
            f" {_size(overhead * n)} in all — more than what overflowed",
            [
                PlacementFix(
                    f"OLLAMA_GPU_OVERHEAD={keep}",
                    f"frees {_size(overhead * n - keep * n)} over {n} GPU(s) for {over_text}",
                    overhead * n - keep * n,
                    True,
                )
            ],
        )
    fit = load.fit
    if load.era == "C" and fit is not None and fit.shortfall_bytes and fit.target_bytes:
        margin = fit.target_bytes * n
        if fit.shortfall_bytes <= margin:
            target_mib = max(0, (fit.target_bytes - -(-fit.shortfall_bytes // n)) // MIB)
            now = int_setting(settings, "LLAMA_ARG_FIT_TARGET")
            fixes = [*context_fixes(load, fit.shortfall_bytes, settings), *unload_fixes(fit.shortfall_bytes, others)]
            if now is None or now > target_mib:
                fixes.append(
                    PlacementFix(
                        f"LLAMA_ARG_FIT_TARGET={target_mib}",
                        f"a margin of {target_mib} MiB per device instead of {fit.target_bytes // MIB} MiB fits the"
                        f" {_size(fit.shortfall_bytes)}; a thinner margin risks an out-of-memory error later",
                        fit.shortfall_bytes,
                        True,
                    )
                )
            return (
                "fit_margin",
                f"{what}: llama-server keeps {fit.target_bytes // MIB} MiB free on each device (its fit margin) and"
                f" was {_size(fit.shortfall_bytes)} short of it — the model itself would fit",
                fixes,
            )
    free_total = sum(d.free_bytes.value or 0 for d in used)
    every_gpu = (load.estimate is not None and bool(load.estimate.available_bytes)) or (gpus is not None and gpus.ok)
    names = ", ".join(d.name for d in used)
    if free_total:
        gpus_text = f"{names} had {_size(free_total)} free" + (" together" if n > 1 else "")
    else:
        placed = sum(d.placed_bytes.value or 0 for d in used)
        gpus_text = f"{names or 'the GPUs'} were full" + (f" with {_size(placed)} of this load" if placed else "")
        if load.era != "C":
            gpus_text += (
                " (before llama-server, Ollama spreads a model that one GPU cannot hold over every GPU of its"
                " library before it leaves layers to the CPU; the log gives no free memory per GPU)"
            )
    spread_note = " — already spread over every GPU" if n > 1 and every_gpu else ""
    fixes = [*context_fixes(load, over, settings), *unload_fixes(over, others)]
    if free_total or (load.estimate is not None and load.estimate.full_bytes):
        fixes += short_fix(over, fixes)
    return (
        "not_enough",
        f"{what}: {gpus_text}{spread_note}"
        + (
            f", less than the ~{_size(load.estimate.full_bytes)} it needs fully offloaded"
            if load.estimate is not None and load.estimate.full_bytes
            else ""
        ),
        fixes,
    )


# --------------------------------------------------------------------------------------------
# The join every live face calls


def placement_for(state: AppState, view: ModelView) -> PlacementReport | None:
    """The placement report of a loaded model of ``state``: its log load, the server's settings (the service
    environment the runner's server has, else the log's ``server config`` line), the GPU sample with this
    model's own bytes per GPU, and the other models' VRAM. None for a cloud model or a model without a load in
    the log. Every face calls this with the same state, so they show the same report."""
    from kvtop.model.gpu import model_gpu_usage

    load = view.load
    if view.cloud or load is None:
        return None
    grouper = state.log.grouper
    config = grouper.config if grouper is not None else None
    settings = placement_settings(view.local.env, config)
    usage = model_gpu_usage(state.gpu, state.procs, state.models).get((view.name, view.digest)) if state.procs else None
    own = {i: b for i, b in usage.by_gpu if b is not None} if usage is not None else {}
    others = [(v.name, v.size_vram_bytes or 0) for v in state.models if v is not view and not v.cloud]
    return placement_report(load, settings=settings, gpus=state.gpu, own_bytes=own, others=others)


def placement_json(report: PlacementReport | None) -> dict[str, Any] | None:
    """``report.to_json()``, or None."""
    return report.to_json() if report is not None else None
