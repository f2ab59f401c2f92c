"""One model's row: the ``ModelView`` derived from its ``/api/ps`` entry, its ``/api/show`` and
``/api/tags`` answers, its log load and its runner, every number with its source (``Known``);
and :class:`RowMemo`, which derives a row again only when its inputs changed. Pure: no I/O, no clock.
"""

from __future__ import annotations

import dataclasses
import re
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvtop.model import kv
from kvtop.model.humanize import FOREVER_AFTER_S, go_round, until_text
from kvtop.logparse.load_build import Load
from kvtop.model.gpu_snapshots import ProcSnapshot
from kvtop.model import ladder
from kvtop.model.known import Known
from kvtop.model.ladder import LocalRunner
from kvtop.model.logstate import LogState, Throughput, throughput
from kvtop.model.slot_snapshots import DecodeRate, SlotsSnapshot
from kvtop.model.snapshots import OllamaSnapshot, PsModel, ShowInfo, TagInfo, detail_key, parse_version
from kvtop.model.views import Memory, ModelView


PARALLEL_DEFAULT_SINCE = (0, 10, 0)
"""``OLLAMA_NUM_PARALLEL`` defaults to 1 from v0.10.0 (§3.3, commit 20c3266e9); before it was auto."""

ERA_C_SINCE = (0, 30, 0)
"""v0.30.0 runs llama-server with ``--flash-attn auto`` when ``OLLAMA_FLASH_ATTENTION`` is unset (§3.1)."""


SHOW_PENDING = "waiting for /api/show"
"""``ModelView.kv_unavailable`` of a row whose ``/api/show`` has not been read yet (a model just listed)."""


@dataclass(frozen=True, slots=True)
class RowInputs:
    """What one row (``ModelView``) is derived from, besides the snapshot's time, the log's
    request lines (throughput) and the decode rates: those are read again for every poll
    (``_timed_fields``). Two equal ``RowInputs`` give equal rows at the same time."""

    m: PsModel
    show: ShowInfo | None
    tag: TagInfo | None
    version: str | None
    cloud: bool
    load: Load | None
    load_note: str
    local: LocalRunner


def row_inputs(
    m: PsModel,
    snap: OllamaSnapshot,
    log: LogState,
    runners: ladder.RunnerIndex | None = None,
    *,
    procs: ProcSnapshot | None = None,
    slots: SlotsSnapshot | None = None,
) -> RowInputs:
    """The inputs of ``m``'s row: its ``/api/show`` and ``/api/tags`` answers, the server version,
    its log load (``_matching_load``) and its runner (``runners``, else ``procs`` and ``slots``
    indexed for this row)."""
    show = snap.shows.get(detail_key(m))
    cloud = _is_cloud(m, show)
    load, load_note = (None, "cloud model") if cloud else _matching_load(m, show, log)
    local = (
        LocalRunner(note="cloud model")
        if cloud
        else (runners or ladder.RunnerIndex(procs, slots, snap.host_url)).find(
            show.model_blob if show is not None else None, m.name, m.context_length
        )
    )
    return RowInputs(
        m=m,
        show=show,
        tag=snap.tags.get(m.digest),
        version=snap.version,
        cloud=cloud,
        load=load,
        load_note=load_note,
        local=local,
    )


ROWS_KEPT = 4096
"""Rows ``RowMemo`` keeps (the least recently derived go first): every row of several servers
of 1,000 models each."""


class RowMemo:
    """The last derivation of each row, by server, name and digest (at most ``ROWS_KEPT``).

    Attributes:
        derived: Rows derived through the ladder (``_view_from``) so far.
        reused: Rows given again because their ``RowInputs`` were unchanged.
    """

    def __init__(self, kept: int = ROWS_KEPT) -> None:
        self.kept = kept
        self.derived = 0
        self.reused = 0
        self._rows: OrderedDict[tuple[str, str, str, str], tuple[RowInputs, ModelView]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._rows)

    def clear(self) -> None:
        """Forget every row (the counters stay)."""
        self._rows.clear()

    def dressed(self, host_url: str, m: PsModel, view: ModelView, row: ModelView) -> None:
        """Keep ``row`` (``view`` through ``with_slot_use``: its ``slots`` and runner answer) in
        ``view``'s place, so that the next poll's ``with_slot_use`` finds them as they are and
        makes no new row. Every row given by ``view`` goes through ``with_slot_use`` again, which
        sets both anew: what is kept is only a likely answer."""
        key = (host_url, m.name, m.model, m.digest)
        held = self._rows.get(key)
        if held is not None and held[1] is view:
            self._rows[key] = (held[0], row)

    def view(
        self,
        m: PsModel,
        snap: OllamaSnapshot,
        log: LogState,
        runners: ladder.RunnerIndex,
        rates: Mapping[int, DecodeRate] | None,
    ) -> ModelView:
        """``m``'s row as ``model_view`` derives it, from the memo when its inputs did not change
        (then its ``slots`` and its runner's ``/slots`` answer may be a previous round's, as
        ``dressed`` kept them: ``with_slot_use`` sets them, as it does on a derived row)."""
        inputs = row_inputs(m, snap, log, runners)
        key = (snap.host_url, m.name, m.model, m.digest)
        held = self._rows.get(key)
        if held is not None and held[0] == inputs:
            self.reused += 1
            self._rows.move_to_end(key)
            view = held[1]
            timed = _timed_fields(inputs, snap.taken_at, log, rates)
            if timed != (view.until, view.expired, view.forever, view.throughput, view.decode_tps):
                until, expired, forever, throughput_, decode_tps = timed
                view = dataclasses.replace(
                    view, until=until, expired=expired, forever=forever, throughput=throughput_, decode_tps=decode_tps
                )
                self._rows[key] = (inputs, view)
            return view
        self.derived += 1
        view = _view_from(inputs, snap.taken_at, log, rates)
        self._rows[key] = (inputs, view)
        self._rows.move_to_end(key)
        while len(self._rows) > self.kept:
            self._rows.popitem(last=False)
        return view


def _parameter_num_ctx(parameters: str) -> int | None:
    """``num_ctx`` from the Modelfile ``parameters`` text of ``/api/show`` (``num_ctx 16384``)."""
    m = re.search(r"(?m)^\s*num_ctx\s+(\d+)\s*$", parameters)
    return int(m.group(1)) if m else None


def _arch_int(info: Mapping[str, Any], key: str) -> int | None:
    arch = info.get("general.architecture")
    value = info.get(f"{arch}.{key}") if isinstance(arch, str) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _is_cloud(m: PsModel, show: ShowInfo | None) -> bool:
    if show is not None and show.remote:
        return True
    return m.name.endswith("-cloud") or m.name.endswith(":cloud")


def _matching_load(m: PsModel, show: ShowInfo | None, log: LogState) -> tuple[Load | None, str]:
    """The log's newest load of this row's weights blob, if it describes this row's runner.

    The blob comes from ``/api/show``'s Modelfile ``FROM`` line and the runner's ``--model``
    (docs/ollama-internals.md §1.6, §7). A load whose per-slot context differs from ``/api/ps``'s is
    an older runner of the same weights (the log started after the reload, or it was missed).
    """
    if not log.loads:
        return None, "no model load in the log read so far" if log.source else "no server log (--log)"
    blob = show.model_blob if show is not None else None
    if blob is None:
        return None, "the model's weights blob is not known (/api/show Modelfile has no FROM …/blobs/…)"
    load = log.latest_load(blob)
    if load is None:
        return None, f"the log read so far has no load of {blob[:19]}…"
    padded = None if m.context_length is None else -(-m.context_length // 256) * 256
    if (
        m.context_length is not None
        and load.num_ctx_per_seq is not None
        and load.num_ctx_per_seq not in (m.context_length, padded)
    ):  # llama.cpp pads n_ctx to 256 (§1.3)
        return None, (
            f"the log's latest load of this model has num_ctx {load.num_ctx_per_seq}, /api/ps says"
            f" {m.context_length}: that load is older than the running one"
        )
    return load, f"runner log load #{load.index + 1} (line {load.first_line})"


def _sum(devices: Mapping[str, int] | None) -> int | None:
    return sum(devices.values()) if devices else None


def model_view(
    m: PsModel,
    snap: OllamaSnapshot,
    log: LogState | None = None,
    *,
    procs: ProcSnapshot | None = None,
    slots: SlotsSnapshot | None = None,
    rates: Mapping[int, DecodeRate] | None = None,
    runners: ladder.RunnerIndex | None = None,
) -> ModelView:
    """Derive a ``ModelView`` from one ``/api/ps`` row through the source ladder (``model.ladder``).

    Args:
        m: The ``/api/ps`` row.
        snap: Its snapshot, with the cached ``/api/show`` / ``/api/tags``.
        log: The server log's state: a load of this model's weights gives the **allocated** rung.
        procs: This machine's process sample (the local server only): the runner's command line
            (**requested**) and the ``ollama serve`` environment (**service**).
        slots: The latest ``/props`` + ``/slots`` round of the local runners (**runner**).
        rates: Decode speed per runner PID (``model.slots.decode_rates``).
        runners: ``procs`` and ``slots`` indexed once for every row (``derive_models``); built
            from them when None.

    Every figure takes the best rung that has a value; a lower rung that says otherwise is kept
    in ``differences``.
    """
    log = log if log is not None else LogState()
    return _view_from(row_inputs(m, snap, log, runners, procs=procs, slots=slots), snap.taken_at, log, rates)


def _timed_fields(
    inputs: RowInputs, now_s: float, log: LogState, rates: Mapping[int, DecodeRate] | None
) -> tuple[str, bool, bool, Throughput | None, Known[float]]:
    """The row's fields that move with time, the log's request lines and the decode rates:
    ``until``, ``expired``, ``forever``, ``throughput`` and ``decode_tps`` at ``now_s``."""
    load = inputs.load
    throughput_ = throughput(log, load, now_s) if load is not None else None
    expires = inputs.m.expires_at
    delta = None if expires is None else expires.timestamp() - now_s
    return (
        until_text(expires, now_s),
        delta is not None and delta < 0,
        delta is not None and delta > FOREVER_AFTER_S,
        throughput_,
        _decode_tps(load, throughput_, inputs.local, rates),
    )


def _view_from(inputs: RowInputs, now_s: float, log: LogState, rates: Mapping[int, DecodeRate] | None) -> ModelView:
    """The row of ``inputs`` through the source ladder at ``now_s`` (``model_view``)."""
    m, show, tag, cloud = inputs.m, inputs.show, inputs.tag, inputs.cloud
    info: Mapping[str, Any] = show.model_info if show is not None else {}
    version = parse_version(inputs.version)
    architecture = (
        info.get("general.architecture") if isinstance(info.get("general.architecture"), str) else m.details.family
    )

    load, load_note, local = inputs.load, inputs.load_note, inputs.local
    proc, ep, env = local.process, local.endpoints, local.env
    where = load_note

    # per-slot context: allocated > runner > reported > requested > service
    ctx_rungs: list[Known[int]] = []
    if load is not None and load.num_ctx_per_seq is not None:
        ctx_rungs.append(Known(load.num_ctx_per_seq, "allocated", f"{where}: n_ctx per sequence"))
    ctx_rungs.append(ladder.runner_context(ep))
    if m.context_length is not None:
        ctx_rungs.append(Known(m.context_length, "reported", "/api/ps context_length (per slot)"))
    ctx_rungs.append(ladder.requested_context(proc))
    requested = _parameter_num_ctx(show.parameters) if show else None
    if requested is not None and m.context_length is None:
        ctx_rungs.append(
            Known(requested, "requested", "Modelfile PARAMETER num_ctx (/api/ps has no context_length before v0.10.0)")
        )
    ctx_rungs.append(ladder.service_context(env))
    if cloud:
        ctx_fig: ladder.Figure[int] = ladder.Figure(Known(None, None, "cloud model: /api/ps gives no context for it"))
    else:
        ctx_fig = ladder.choose(
            ctx_rungs, "/api/ps has no context_length before v0.10.0; the runner or the server log gives n_ctx"
        )

    # slots: allocated > runner > requested > service > default
    # /api/ps has context_length since v0.10.0, the release that made 1 slot the default (§1.3, §3.3)
    modern = (version is not None and version >= PARALLEL_DEFAULT_SINCE) or (
        version is None and m.context_length is not None
    )
    if modern:
        par_default: Known[int] = Known(
            1, "default", "OLLAMA_NUM_PARALLEL default 1 (v0.10.0+); nothing readable says otherwise"
        )
    elif version is None:
        par_default = Known(None, None, "server version not known yet (/api/version)")
    else:
        par_default = Known(
            None,
            None,
            "OLLAMA_NUM_PARALLEL was auto (4 or 1) before v0.10.0; the runner or the server log gives the real value",
        )
    embedding = show is not None and "embedding" in show.capabilities and "completion" not in show.capabilities
    par_rungs: list[Known[int]] = []
    if load is not None and load.parallel is not None:
        par_rungs.append(Known(load.parallel, "allocated", f"{where}: slots (-np / n_seq_max / Parallel)"))
    par_rungs += [
        ladder.runner_parallel(ep),
        ladder.requested_parallel(proc),
        ladder.service_parallel(env, architecture, embedding),
        par_default,
    ]
    par_fig: ladder.Figure[int] = (
        ladder.Figure(Known(None, None, "cloud model: slots are the remote service's"))
        if cloud
        else ladder.choose(par_rungs)
    )

    # cache types: allocated > requested > service > default
    kv_rungs: list[Known[str]] = []
    if load is not None and load.kv_type_k is not None:
        kt, vt = load.kv_type_k, load.kv_type_v or load.kv_type_k
        kv_rungs.append(Known(kt if kt == vt else f"{kt}/{vt}", "allocated", f"{where}: K ({kt}), V ({vt})"))
    kv_rungs += [
        ladder.requested_kv_type(proc),
        ladder.service_kv_type(env),
        Known("f16", "default", "OLLAMA_KV_CACHE_TYPE unset means f16; nothing readable says otherwise"),
    ]
    kv_fig: ladder.Figure[str] = (
        ladder.Figure(Known(None, None, "cloud model: the KV cache is the remote service's"))
        if cloud
        else ladder.choose(kv_rungs)
    )

    # flash attention: allocated > requested (command line, then the log's spawn line) > service > default
    fa_rungs: list[Known[str]] = []
    if load is not None and load.flash_attention is not None:
        fa_rungs.append(
            Known(
                load.flash_attention, "allocated", f"{where}: {load.flash_attention_reason or 'resolved by the runner'}"
            )
        )
    fa_rungs.append(ladder.requested_flash(proc))
    if load is not None and load.flash_attention_requested is not None:
        fa_rungs.append(
            Known(
                load.flash_attention_requested,
                "requested",
                f"{where}: requested"
                + ("" if load.flash_attention is not None else ", the log does not say what the runner resolved"),
            )
        )
    fa_rungs.append(ladder.service_flash(env))
    if version is not None and version >= ERA_C_SINCE:
        fa_rungs.append(
            Known(
                "auto",
                "default",
                "OLLAMA_FLASH_ATTENTION unset: v0.30+ passes --flash-attn auto"
                " (off where the GPU cannot), and llama.cpp decides at load",
            )
        )
    fa_fig: ladder.Figure[str] = ladder.choose(
        fa_rungs,
        "not readable here: the runner's command line or the server log tells it"
        " (OLLAMA_FLASH_ATTENTION is misreported when unset)",
        agrees=ladder.flash_agrees,
    )
    if cloud:
        fa_fig = ladder.Figure(Known(None, None, "cloud model"))

    context, parallel, kv_type, flash = ctx_fig.chosen, par_fig.chosen, kv_fig.chosen, fa_fig.chosen
    differences = tuple(
        ladder.difference_lines("context per slot", ctx_fig)
        + ladder.difference_lines("slots", par_fig)
        + ladder.difference_lines("KV cache type", kv_fig)
        + ladder.difference_lines("flash attention", fa_fig)
    )

    kv_estimate: kv.KVEstimate | None = None
    kv_unavailable: str | None = None
    per_token: int | None = None
    if cloud:
        kv_unavailable = "cloud model: runs remotely, no local memory"
    elif show is None:
        kv_unavailable = SHOW_PENDING
    elif show.error:
        kv_unavailable = f"/api/show failed: {show.error}"
    else:
        layout = kv.layout_from_model_info(info)
        if isinstance(layout, kv.KVUnavailable):
            kv_unavailable = layout.reason
        else:
            try:
                type_k, _, type_v = (kv_type.value or "f16").partition("/")
                type_v = type_v or type_k
                fa = flash.value != "disabled"
                per_token = kv.bytes_per_token(layout, type_k, type_v)
                if context.value is not None and parallel.value is not None:
                    kv_estimate = kv.kv_allocation(
                        layout, context.value, parallel.value, type_k, type_v, flash_attention=fa
                    )
                else:
                    kv_unavailable = "num_ctx or slot count unknown"
            except ValueError as exc:
                kv_unavailable = str(exc)

    devices: Mapping[str, Mapping[str, int]] = load.memory if load is not None else {}
    if load is not None and load.kv_bytes is not None:
        note = f"{load_note}: allocated"
        if kv_estimate is not None:
            diff = load.kv_bytes - kv_estimate.total_bytes
            note += f"; kvtop's formula gives {kv_estimate.total_bytes:,} B ({'+' if diff >= 0 else ''}{diff:,} B)"
        kv_mem: Known[int] = Known(load.kv_bytes, "allocated", note)
    elif kv_estimate is not None:
        kv_mem = Known(kv_estimate.total_bytes, "estimated", kv_estimate.formula)
    else:
        kv_mem = Known(None, None, kv_unavailable or "")
    log_weights = _sum(devices.get("weights"))
    log_compute = _sum(devices.get("compute"))
    if log_weights is not None:
        weights: Known[int] = Known(log_weights, "allocated", f"{load_note}: model buffers on every device")
    elif tag is not None and tag.size_bytes is not None and not cloud:
        weights = Known(tag.size_bytes, "reported", "model file size from /api/tags")
    elif cloud:
        weights = Known(None, None, "cloud model: the weights are on the remote service")
    else:
        weights = Known(None, None, "model file size not known yet (/api/tags)")
    compute: Known[int] = Known(None, None, "needs weights and KV")
    if log_compute is not None:
        compute = Known(log_compute, "allocated", f"{load_note}: compute buffers on every device")
    elif m.size_bytes is not None and weights.value is not None and kv_mem.value is not None:
        rest = m.size_bytes - weights.value - kv_mem.value
        if rest >= 0:
            compute = Known(rest, "estimated", "size − weights − KV (compute buffers and overhead)")
        else:
            compute = Known(
                None,
                None,
                f"size is {-rest:,} B below weights + KV estimate: KV type or slots differ from the assumption",
            )

    until, expired, forever, throughput_, decode_tps = _timed_fields(inputs, now_s, log, rates)
    cpu_percent: int | None = None
    if m.size_bytes and m.size_vram_bytes is not None and 0 <= m.size_vram_bytes <= m.size_bytes:
        cpu_percent = int(go_round((m.size_bytes - m.size_vram_bytes) / m.size_bytes * 100))

    return ModelView(
        name=m.name,
        digest=m.digest,
        short_id=m.digest[:12],
        size_bytes=m.size_bytes,
        size_vram_bytes=m.size_vram_bytes,
        processor=kv.processor_string(m.size_bytes, m.size_vram_bytes),
        cpu_percent=cpu_percent,
        context=context,
        parallel=parallel,
        kv_type=kv_type,
        flash_attention=flash,
        memory=Memory(weights=weights, kv=kv_mem, compute=compute),
        kv_bytes_per_token=per_token,
        kv_estimate=kv_estimate,
        kv_unavailable=kv_unavailable,
        context_train=_arch_int(info, "context_length"),
        architecture=architecture,
        parameter_size=m.details.parameter_size,
        quantization_level=m.details.quantization_level,
        expires_at=m.expires_at,
        until=until,
        expired=expired,
        forever=forever,
        cloud=cloud,
        show_error=show.error if show else None,
        model_blob=show.model_blob if show else None,
        load=load,
        load_note=load_note,
        devices=devices,
        findings=tuple(load.findings()) if load is not None else (),
        throughput=throughput_,
        timings_note=(
            ""
            if load is None or load.era == "C"
            else "no timings in this Ollama version's log (llama-server runners, v0.30+, print them)"
        ),
        decode_tps=decode_tps,
        local=local,
        differences=differences,
        engine=_engine(m, local),
    )


def _engine(m: PsModel, local: LocalRunner) -> Known[str]:
    """Which runner serves ``m``: ``/api/ps``'s ``runner`` (reported), else the runner process's
    command line (runner rung), else unknown with the reason (docs/ollama-internals.md §7.2)."""
    if m.runner:
        return Known(m.runner, "reported", "/api/ps runner field (Ollama 0.40+)")
    proc = local.process
    if proc is not None and proc.engine:
        return Known(proc.engine, "runner", "the runner's command line")
    return Known(None, None, "/api/ps names no runner before Ollama 0.40, and no runner process is readable here")


def _decode_tps(
    load: Load | None, t: Throughput | None, local: LocalRunner, rates: Mapping[int, DecodeRate] | None
) -> Known[float]:
    """Generation speed: the log's newest timing line (allocated), else ``/slots`` deltas (runner)."""
    if t is not None and t.last_decode_tps is not None:
        return Known(t.last_decode_tps, "allocated", "the runner log's newest timing line (eval time)")
    pid = (
        local.process.pid if local.process is not None else local.endpoints.pid if local.endpoints is not None else None
    )
    rate = rates.get(pid) if rates and pid is not None else None
    if rate is not None and rate.tokens_per_s is not None:
        ep = local.endpoints
        port = f" on port {ep.port}" if ep is not None else ""
        return Known(
            rate.tokens_per_s,
            "runner",
            f"/slots n_decoded growth{port} across {rate.slots} decoding slot{'s' if rate.slots != 1 else ''}",
        )
    return Known()
