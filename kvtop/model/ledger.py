"""A model's complete memory ledger (pure): every part the runner's log lists, per device, with its source, the
runner's measured use and the unexplained remainder, measured − listed, never hidden.

``ollama ps`` under-reports: it drops the second KV pool of sliding-window and hybrid models and does not count the
projector or the runner's host prompt cache (issue 25). The ledger lists, per device as the log names it:

* ``weights``, ``kv`` (the full-context pool, or the only one), ``kv_swa`` (an interleaved-SWA model's sliding-window
  pool: ``creating SWA KV cache`` and its buffers; fixture ``ollama-16480-…``, ``gemma3-iswa-…``), ``recurrent`` (a
  hybrid model's ``RS`` buffers, or ``llama_memory_recurrent: size = …`` when no buffer line gives the device; corpus
  043), ``compute`` and ``output`` (llama.cpp's output buffer), all ``allocated`` (the runner's log);
* ``projector``: llama-server's ``[mtmd] estimated worst-case memory usage of mmproj`` or the scheduler's
  ``projector.weights`` + ``projector.graph`` (corpus 012), both ``estimated``, device not known;
* ``prompt_cache`` and ``checkpoints``: llama-server's host prompt cache (``cache state: N prompts, X MiB``) and its
  slots' live context checkpoints (``created context checkpoint … size = X MiB``), in host RAM (``allocated``;
  fixture ``llama-server-gemma4-mmproj-checkpoints-prompt-cache.log``);
* ``draft``: a draft model's buffers on each device (weights, KV, compute of the load lines after llama-server's
  ``loading draft model``; fixture ``llama-server-runs/draft-gemma3-iswa-np1.log``), ``allocated``: kept apart, not
  taken for the target's figures (Ollama passes no ``--model-draft``; a llama-server run by hand may).

Without a log load the parts are the row's ``Memory`` (``/api/ps`` and kvtop's formulas), device not known.

The runner's measured use is NVML's per-process memory (``model.gpu.ModelGpu``, reported): per GPU when the log's
devices pair with the runner's GPUs (:func:`pair_devices`: by index order, else by size; never by the number in
``CUDA0``, see ``model.memmap``), and over all GPUs always. ``remainder = measured − listed`` (estimated: a
difference), negative when the log lists more than NVML measures. Host memory is not measured per process here.

No I/O, no clock. Sizes in bytes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvtop.model.known import Known, Source

if TYPE_CHECKING:
    from kvtop.model.gpu import ModelGpu
    from kvtop.model.views import AppState, ModelView

COMPONENTS = (
    "weights",
    "kv",
    "kv_swa",
    "recurrent",
    "compute",
    "output",
    "projector",
    "draft",
    "prompt_cache",
    "checkpoints",
)
"""Every component a ledger row can have, in listing order (a bounded set: ``/metrics`` labels)."""

COMPONENT_WORDS = {
    "weights": "weights",
    "kv": "KV cache",
    "kv_swa": "KV SWA pool",
    "recurrent": "recurrent (RS)",
    "compute": "compute",
    "output": "output buffer",
    "projector": "projector",
    "draft": "draft model",
    "prompt_cache": "prompt cache",
    "checkpoints": "checkpoints",
}
"""Each component in words, 16 characters at most (the detail view, ``--once``)."""

HOST = "host"
"""The device of the runner's host-RAM parts that no buffer line names (prompt cache, checkpoints)."""

UNKNOWN_DEVICE = "?"
"""The device of a part whose line names none (a KV/recurrent summary, the projector's estimate, ``/api/ps``)."""

DEVICE_WORDS = {HOST: "host RAM, runner-held", UNKNOWN_DEVICE: "device not known"}
"""The synthetic devices in words."""

_GPU_DEVICE = re.compile(r"^(CUDA|ROCm|HIP|Vulkan|SYCL|MUSA|CANN|Metal|MTL)(\d*)$", re.IGNORECASE)
_SLACK_BYTES = 64 * 1024 * 1024
"""How far a log device's parts may exceed the runner's measured bytes on a GPU and still pair."""
_BUFFER_PARTS = ("weights", "kv", "recurrent", "compute", "output")


_LABEL_DEVICE = re.compile(
    r"^(?:(?:CUDA|ROCm|HIP|Vulkan|SYCL|MUSA|CANN|Metal|MTL)\d{0,3}(?:_Host)?|CPU(?:_Mapped|_REPACK|_AARCH64)?|BLAS|GPUs|host|\?)$",
    re.IGNORECASE,
)


def device_label(device: str) -> str:
    """``device`` as a ``/metrics`` label value: the device names llama.cpp prints (``CUDA0``, ``ROCm_Host``,
    ``CPU_Mapped``…), ``GPUs``, ``host`` and ``?`` as they are; any other text of the log ``other`` (a bounded set)."""
    return device if _LABEL_DEVICE.match(device) else "other"


def gpu_device_index(name: str) -> int | None:
    """The number in a llama.cpp/ggml device name (``CUDA0`` -> 0, ``Metal`` -> 0); None for a CPU-side buffer
    (``CPU``, ``CPU_Mapped``, ``CUDA_Host``) or an unknown name. The runner's number, not the physical GPU's."""
    m = _GPU_DEVICE.match(name)
    if m is None:
        return None
    return int(m.group(2) or 0)


@dataclass(frozen=True, slots=True)
class LedgerRow:
    """One part on one device: ``component`` (:data:`COMPONENTS`), ``device`` (as the log names it, :data:`HOST`
    or :data:`UNKNOWN_DEVICE`), ``bytes``, ``source`` and how it was found (``note``)."""

    component: str
    device: str
    bytes: int
    source: Source
    note: str = ""


@dataclass(frozen=True, slots=True)
class Measure:
    """The runner's measured memory against the parts listed in the same place.

    Attributes:
        scope: A log device (``CUDA0``), ``GPUs`` (every GPU of the runner) or :data:`HOST`.
        listed_bytes: The ledger's rows there.
        measured: NVML's per-process memory (reported); ``Known()`` with a note when not measured.
        remainder_bytes: ``measured − listed`` (may be negative or zero); None when not measured.
    """

    scope: str
    listed_bytes: int
    measured: Known[int]
    remainder_bytes: int | None

    @property
    def remainder(self) -> Known[int]:
        """The remainder with its source (estimated: a difference) and what it is."""
        if self.remainder_bytes is None:
            return Known(None, None, self.measured.note or "not measured")
        return Known(self.remainder_bytes, "estimated", f"{self.scope}: measured − listed")


@dataclass(frozen=True, slots=True)
class Ledger:
    """One model's ledger.

    Attributes:
        name / digest: The model, as the table keys it.
        rows: Every listed part, in :data:`COMPONENTS` order, then by device.
        measures: Per paired GPU device, then ``GPUs`` (all of the runner's GPUs), then :data:`HOST`.
        pairing: NVML GPU index -> the log device it holds, when the pairing is known.
        from_log: The rows come from the runner's log (else from ``/api/ps`` and kvtop's formulas).
        absent: Parts the runner has but no line gave a size for (``projector`` of an ``--mmproj`` runner).
    """

    name: str
    digest: str
    rows: tuple[LedgerRow, ...] = ()
    measures: tuple[Measure, ...] = ()
    pairing: Mapping[int, str] | None = None
    from_log: bool = False
    absent: tuple[str, ...] = ()

    @property
    def listed_bytes(self) -> int:
        """Every row's bytes."""
        return sum(r.bytes for r in self.rows)

    def devices(self) -> tuple[str, ...]:
        """The devices of the rows, GPUs first (in the runner's order), then host-side ones, then not known."""
        names = {r.device for r in self.rows}
        return tuple(sorted(names, key=_device_order))

    def on(self, device: str) -> tuple[LedgerRow, ...]:
        """The rows of one device."""
        return tuple(r for r in self.rows if r.device == device)

    def measure(self, scope: str) -> Measure | None:
        """The measure of ``scope`` (a device, ``GPUs`` or ``host``), None when there is none."""
        return next((m for m in self.measures if m.scope == scope), None)


def _device_order(device: str) -> tuple[int, int, str]:
    index = gpu_device_index(device)
    if index is not None:
        return (0, index, device)
    if device == UNKNOWN_DEVICE:
        return (3, 0, device)
    if device == HOST:
        return (2, 0, device)
    return (1, 0, device)


def is_gpu_device(device: str) -> bool:
    """True for a GPU device name of the log (``CUDA0``, ``ROCm1``, ``Metal``)."""
    return gpu_device_index(device) is not None


def pair_devices(
    devices: Mapping[str, Mapping[str, int]], on_gpus: Sequence[tuple[int, int | None]], parts: Sequence[str]
) -> dict[int, str] | None:
    """NVML GPU index -> the log GPU device whose ``parts`` (component -> device -> bytes) it holds; None when the
    counts differ or, for several GPUs, neither index order nor size order fits the measured bytes (``_SLACK_BYTES``
    allowed). One GPU and one log GPU device always pair."""
    names = sorted(
        {d for p in parts for d in devices.get(p, {}) if gpu_device_index(d) is not None},
        key=lambda d: (gpu_device_index(d) or 0, d),
    )
    if not names or len(names) != len(on_gpus):
        return None
    if len(names) == 1:  # one GPU under the runner, one in its log: certain, whatever the sizes say
        return {on_gpus[0][0]: names[0]}
    sums = {d: sum(devices.get(p, {}).get(d, 0) for p in parts) for d in names}

    def fits(pairs: list[tuple[tuple[int, int | None], str]]) -> bool:
        return all(b is not None and sums[d] <= b + _SLACK_BYTES for (_, b), d in pairs)

    by_index = list(zip(sorted(on_gpus), names))
    if fits(by_index):
        return {i: d for (i, _), d in by_index}
    by_size = list(zip(sorted(on_gpus, key=lambda g: g[1] or 0), sorted(names, key=lambda d: sums[d])))
    if fits(by_size):
        return {i: d for (i, _), d in by_size}
    return None


def _log_rows(view: ModelView) -> tuple[list[LedgerRow], list[str]]:
    load = view.load
    rows: list[LedgerRow] = []
    mem = view.devices
    swa = load.kv_swa if load is not None else {}
    for device, nbytes in mem.get("weights", {}).items():
        rows.append(LedgerRow("weights", device, nbytes, "allocated", f"{device} model buffers"))
    kv = mem.get("kv", {})
    for device, nbytes in kv.items():
        pool = swa.get(device, 0)
        if nbytes - pool:
            note = f"{device} KV buffers" + (" of the full-context (non-SWA) cache" if swa else "")
            rows.append(LedgerRow("kv", device, nbytes - pool, "allocated", note))
        if pool:
            rows.append(LedgerRow("kv_swa", device, pool, "allocated", f"{device} KV buffers of the SWA cache"))
    absent: list[str] = []
    if not kv and load is not None and load.kv_bytes is not None:
        rows.append(
            LedgerRow("kv", UNKNOWN_DEVICE, load.kv_bytes, "allocated", "the KV cache's size line (no buffer lines)")
        )
    recurrent = mem.get("recurrent", {})
    for device, nbytes in recurrent.items():
        rows.append(LedgerRow("recurrent", device, nbytes, "allocated", f"{device} RS buffers"))
    if not recurrent and load is not None and load.recurrent_size_bytes is not None:
        rows.append(
            LedgerRow(
                "recurrent",
                UNKNOWN_DEVICE,
                load.recurrent_size_bytes,
                "allocated",
                "llama_memory_recurrent's size line (no RS buffer lines)",
            )
        )
    for component in ("compute", "output"):
        for device, nbytes in mem.get(component, {}).items():
            rows.append(LedgerRow(component, device, nbytes, "allocated", f"{device} {component} buffers"))
    if load is None:
        return rows, absent
    est = load.estimate
    if load.projector_bytes is not None:
        rows.append(
            LedgerRow(
                "projector",
                UNKNOWN_DEVICE,
                load.projector_bytes,
                "estimated",
                "llama-server's worst-case estimate of the mmproj ([mtmd] line)",
            )
        )
    elif est is not None and (est.projector_weights_bytes or est.projector_graph_bytes):
        total = (est.projector_weights_bytes or 0) + (est.projector_graph_bytes or 0)
        rows.append(
            LedgerRow(
                "projector",
                UNKNOWN_DEVICE,
                total,
                "estimated",
                "Ollama's scheduler estimate: projector.weights + projector.graph",
            )
        )
    elif load.mmproj_blob is not None:
        absent.append("projector")
    draft: dict[str, dict[str, int]] = {}
    for component, per in load.draft.items():
        for device, nbytes in per.items():
            draft.setdefault(device, {})[component] = draft.get(device, {}).get(component, 0) + nbytes
    for device, parts in draft.items():
        what = ", ".join(f"{c} {n:,} B" for c, n in parts.items() if n)
        blob = f" {load.draft_blob[:19]}…" if load.draft_blob else ""
        rows.append(LedgerRow("draft", device, sum(parts.values()), "allocated", f"draft model{blob}: {what}"))
    if load.prompt_cache is not None:
        pc = load.prompt_cache
        limit = f", limit {pc.limit_bytes:,} B" if pc.limit_bytes is not None else ""
        rows.append(
            LedgerRow(
                "prompt_cache",
                HOST,
                pc.size_bytes,
                "allocated",
                f"llama-server's cache state: {pc.prompts} prompt(s) with their checkpoints{limit}",
            )
        )
    if load.checkpoint_bytes is not None:
        rows.append(
            LedgerRow(
                "checkpoints",
                HOST,
                load.checkpoint_bytes,
                "allocated",
                f"{load.checkpoint_count} live context checkpoint(s) of the slots' current tasks",
            )
        )
    return rows, absent


def _api_rows(view: ModelView) -> list[LedgerRow]:
    rows: list[LedgerRow] = []
    m = view.memory
    for component, k in (("weights", m.weights), ("kv", m.kv), ("compute", m.compute)):
        if k.value is not None and k.source is not None:
            rows.append(LedgerRow(component, UNKNOWN_DEVICE, k.value, k.source, k.note))
    return rows


def _ordered(rows: list[LedgerRow]) -> tuple[LedgerRow, ...]:
    """In :data:`COMPONENTS` order; a buffer of 0 bytes (``CPU output buffer size = 0.00 MiB``) left out."""
    kept = [r for r in rows if r.bytes or r.component in ("prompt_cache", "checkpoints")]
    return tuple(sorted(kept, key=lambda r: (COMPONENTS.index(r.component), _device_order(r.device))))


def model_ledger(view: ModelView, usage: ModelGpu | None) -> Ledger:
    """The ledger of one model row and its measured GPU use (``model.gpu.model_gpu_usage``'s entry, None when no
    process sample was taken)."""
    from_log = (view.load is not None or bool(view.devices)) and not view.cloud
    if from_log:
        rows, absent = _log_rows(view)
    else:
        rows, absent = _api_rows(view), []
    ordered = _ordered(rows)
    gpu_rows = [r for r in ordered if is_gpu_device(r.device)]
    measures: list[Measure] = []
    pairing: dict[int, str] | None = None
    if usage is not None and usage.by_gpu and from_log:
        pairing = pair_devices(view.devices, usage.by_gpu, _BUFFER_PARTS)
    if pairing is not None and usage is not None:
        by_index = dict(usage.by_gpu)
        for index, device in sorted(pairing.items()):
            listed = sum(r.bytes for r in gpu_rows if r.device == device)
            got = by_index.get(index)
            measured: Known[int] = Known(got, "reported", f"NVML: the runner's memory on GPU {index}")
            measures.append(Measure(device, listed, measured, None if got is None else got - listed))
    listed_gpu = sum(r.bytes for r in gpu_rows)
    if usage is not None and usage.measured_bytes is not None:
        if from_log or usage.measured_bytes == 0:
            gpus: Known[int] = Known(usage.measured_bytes, "reported", "NVML: the runner's memory on every GPU")
            measures.append(Measure("GPUs", listed_gpu, gpus, usage.measured_bytes - listed_gpu))
        else:
            note = "NVML: the runner's memory on every GPU; no runner log load to compare with"
            measures.append(Measure("GPUs", 0, Known(usage.measured_bytes, "reported", note), None))
    else:
        why = usage.note if usage is not None and usage.note else "no per-process GPU memory (NVML) for this runner"
        measures.append(Measure("GPUs", listed_gpu, Known(None, None, why), None))
    listed_host = sum(r.bytes for r in ordered if not is_gpu_device(r.device) and r.device != UNKNOWN_DEVICE)
    if from_log:
        host_note = "host RAM is not measured per process (NVML is GPU only)"
        measures.append(Measure(HOST, listed_host, Known(None, None, host_note), None))
    return Ledger(
        name=view.name,
        digest=view.digest,
        rows=ordered,
        measures=tuple(measures),
        pairing=pairing,
        from_log=from_log,
        absent=tuple(absent),
    )


def state_ledger(state: AppState, view: ModelView) -> Ledger:
    """One model's ledger in ``state`` (its runner's NVML use when a process sample was taken)."""
    from kvtop.model.gpu import model_gpu_usage

    usage = model_gpu_usage(state.gpu, state.procs, state.models) if state.procs is not None else {}
    return model_ledger(view, usage.get((view.name, view.digest)))


def state_ledgers(state: AppState) -> dict[tuple[str, str], Ledger]:
    """Every loaded model's ledger, keyed by ``(name, digest)``: the one computation every face renders."""
    from kvtop.model.gpu import model_gpu_usage

    usage = model_gpu_usage(state.gpu, state.procs, state.models) if state.procs is not None else {}
    return {(m.name, m.digest): model_ledger(m, usage.get((m.name, m.digest))) for m in state.models}


def ledger_text(ledger: Ledger) -> str:
    """The ledger in one line (``--once``): ``KV CPU 1.1 MiB · KV SWA pool CPU 1.0 MiB · … ; GPUs: measured 5.2 GiB,
    listed 0 B, unexplained ~5.2 GiB`` (sizes through ``model.known.marked``: ``~`` estimated)."""
    from kvtop.model.known import NOT_KNOWN, marked

    def size(k: Known[int]) -> str:
        return marked(k.value, k.source, size=True) if k.value is not None else NOT_KNOWN

    parts = [f"{COMPONENT_WORDS[r.component]} {r.device} {size(Known(r.bytes, r.source))}" for r in ledger.rows]
    text = " · ".join(parts) if parts else "nothing listed"
    gpus = ledger.measure("GPUs")
    if gpus is not None:
        text += (
            f"; GPUs: measured {size(gpus.measured)}, listed {size(Known(gpus.listed_bytes, 'allocated'))},"
            f" unexplained {size(gpus.remainder)}"
        )
    if ledger.absent:
        text += "; not in the log: " + ", ".join(COMPONENT_WORDS[c] for c in ledger.absent)
    return text


def ledger_json(ledger: Ledger) -> dict[str, object]:
    """The ledger as a JSON-ready dict (docs/json.md ``models[].ledger``): sizes in bytes, each with its source."""
    return {
        "rows": [
            {"component": r.component, "device": r.device, "bytes": r.bytes, "source": r.source, "note": r.note}
            for r in ledger.rows
        ],
        "listed_bytes": ledger.listed_bytes,
        "from_log": ledger.from_log,
        "measures": [
            {
                "scope": m.scope,
                "listed_bytes": m.listed_bytes,
                "measured_bytes": m.measured.value,
                "measured_source": m.measured.source,
                "remainder_bytes": m.remainder_bytes,
                "remainder_source": "estimated" if m.remainder_bytes is not None else None,
                "note": m.measured.note,
            }
            for m in ledger.measures
        ],
        "absent": list(ledger.absent),
    }
