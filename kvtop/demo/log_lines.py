"""The lines of the stand-in's server log, as an Ollama v0.30+ server (llama-server runners) prints
them: the placeholder stamps and :func:`restamp`, gin's access line (§4.9, :func:`gin_line`, corpus
053's shape), a runner's command line (§4.4), one model load (:func:`load_lines`: ``starting
llama-server`` from corpus/logs/062, llama-server's buffers, context and slots as
``tests/fixtures/llama_server`` recorded them, flash attention resolved off when spilled, §4.6; the
KV type warning of §3.2), the eviction sequence of corpus/logs/050 (§4.8) and the lines of a step's
transition (:func:`transition_lines`). Each is a template whose numbers are the scenario's
(docs/ollama-internals.md §4.4–§4.10); :mod:`kvtop.demo.logwriter` schedules and writes them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from kvtop.demo.scenario import LoadedModel, Scenario, model_blob

__all__ = [
    "CLIENTS",
    "GIN_STAMP",
    "KEEP",
    "LLAMA_SERVER",
    "STAMP",
    "State",
    "eviction_lines",
    "gin_line",
    "go_duration",
    "load_lines",
    "restamp",
    "runner_argv",
    "runner_figures",
    "runner_pid",
    "transition_lines",
]

LLAMA_SERVER = "/usr/local/lib/ollama/llama-server"
BLOBS = "/usr/share/ollama/.ollama/models/blobs"
DEVICE = "CUDA0"
MIB = 1024 * 1024
KEEP = 4
"""Tokens kept at the start of a truncated prompt (corpus 014/017 keep 4–5)."""

_DEFAULTS = {
    "prefill_tps": 2800.0,
    "decode_tps": 90.0,
    "spilled_prefill_tps": 310.0,
    "spilled_decode_tps": 9.5,
    "prompt_tokens": 1804,
    "eval_tokens": 240,
    "request_every_s": 6.0,
}

CLIENTS = (("192.0.2.24", "/api/chat"), ("192.0.2.24", "/api/chat"), ("127.0.0.1", "/api/generate"))
"""Who sends the scenario's requests, in turn (task number modulo 3): a chat front-end on another
host of the LAN (a documentation address, as the corpus's are) and a script on the server itself."""

GIN_STAMP = "[GIN] 2026/01/01 - 00:00:00"
"""The placeholder time of the script's access lines, replaced when written (:func:`restamp`)."""

_ISO = re.compile(r"time=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z")
_GIN = re.compile(r"\[GIN\] \d{4}/\d\d/\d\d - \d\d:\d\d:\d\d")
_UNIX = re.compile(r"timestamp=\d+")
STAMP = "time=2026-01-01T00:00:00.000Z"
"""The placeholder time of the script's Ollama lines, replaced when written."""


def restamp(line: str, now: float) -> str:
    """``line`` with its timestamps set to ``now`` (Unix seconds): ``time=…Z`` (UTC, milliseconds),
    the GIN stamp (local time, as Ollama prints it) and the C++ runner's ``timestamp=`` (Unix seconds)."""
    utc = datetime.fromtimestamp(now, timezone.utc)
    iso = utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"
    local = datetime.fromtimestamp(now).astimezone()
    line = _ISO.sub(f"time={iso}", line)
    line = _GIN.sub(local.strftime("[GIN] %Y/%m/%d - %H:%M:%S"), line)
    return _UNIX.sub(f"timestamp={int(now)}", line)


def go_duration(seconds: float) -> str:
    """``seconds`` as gin prints a latency: Go's ``time.Duration.String`` (``850ns``, ``31.775µs``,
    ``1.865926ms``, ``47.147693541s``, ``2m39s``), truncated to whole seconds above one minute as gin's
    logger does (docs/ollama-internals.md §4.9). Negative values count as zero."""
    ns = max(0, round(seconds * 1e9))
    if ns > 60 * 10**9:
        ns -= ns % 10**9
    if ns == 0:
        return "0s"
    if ns < 10**3:
        return f"{ns}ns"

    def fixed(value: int, digits: int) -> str:
        whole, frac = divmod(value, 10**digits)
        text = f"{frac:0{digits}d}".rstrip("0")
        return f"{whole}.{text}" if text else str(whole)

    if ns < 10**6:
        return fixed(ns, 3) + "µs"
    if ns < 10**9:
        return fixed(ns, 6) + "ms"
    hours, rest = divmod(ns, 3600 * 10**9)
    minutes, rest = divmod(rest, 60 * 10**9)
    out = f"{hours}h" if hours else ""
    if hours or minutes:
        out += f"{minutes}m"
    return out + fixed(rest, 9) + "s"


_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def _go_quote(text: str) -> str:
    """``%#v`` of a Go string: double-quoted with backslash escapes (``strconv.Quote``)."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif ch.isprintable() and ch.isascii():
            out.append(ch)
        elif ord(ch) < 0x80:
            out.append(f"\\x{ord(ch):02x}")
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}")
    return '"' + "".join(out) + '"'


def gin_line(status: int, latency_s: float, client: str, method: str, path: str) -> str:
    """Gin's access line (``defaultLogFormatter``, docs/ollama-internals.md §4.9) with :data:`GIN_STAMP`:
    ``[GIN] 2026/01/01 - 00:00:00 | 200 |    1.865926ms |       127.0.0.1 | GET      "/api/ps"``.

    Args:
        status: The HTTP status answered.
        latency_s: Seconds from the request to the end of its response (:func:`go_duration`).
        client: The client's address.
        method: The HTTP method (padded to 7 as gin's ``%-7s``).
        path: The path with its ``?query``, Go-quoted (``%#v``).
    """
    return (
        f"{GIN_STAMP} | {status:3d} | {go_duration(latency_s):>13} | {client:>15} | "
        f"{method:<7}  {_go_quote(path)}"
    )  # "|%s %-7s %s %#v": the reset colour's empty %s between two spaces


def runner_figures(scenario: Scenario, model: str) -> dict[str, Any]:
    """``model``'s runner figures (token speeds, request sizes and pace): the scenario's over the defaults."""
    figures = dict(_DEFAULTS)
    figures.update(dict(scenario.models[model].runner or {}))
    return figures


def runner_pid(scenario: Scenario, model: str) -> int:
    """The simulated PID of ``model``'s llama-server runner (stable: one per catalog model)."""
    return 4100 + 16 * list(scenario.models).index(model)


def _port(scenario: Scenario, model: str) -> int:
    return 39151 + 1000 * list(scenario.models).index(model)


def _blob_path(scenario: Scenario, model: str) -> str:
    return f"{BLOBS}/{model_blob(scenario.models[model])}"


def runner_argv(scenario: Scenario, model: str, num_ctx: int, cache_type: str | None = None) -> list[str]:
    """The command line Ollama v0.30+ starts llama-server with for ``model`` (§4.4's order, one slot)."""
    argv = [
        LLAMA_SERVER,
        "--model",
        _blob_path(scenario, model),
        "--port",
        str(_port(scenario, model)),
        "--host",
        "127.0.0.1",
        "--no-webui",
        "--offline",
        "-c",
        str(num_ctx),
        "-np",
        "1",
        "--log-verbosity",
        "4",
        "--no-log-prefix",
        "--no-log-timestamps",
    ]
    if cache_type:
        argv += ["--cache-type-k", cache_type, "--cache-type-v", cache_type]
    return argv + ["--flash-attn", "auto", "-b", "512", "-ub", "512"]


def _human(n: int) -> str:
    """Ollama's ``format.HumanBytes2`` (``641.8 MiB``, ``6.1 GiB``)."""
    if n >= 1024**3:
        return f"{n / 1024**3:.1f} GiB"
    return f"{n / MIB:.1f} MiB"


def _kv_size_line(prefix: str, nbytes: int, cells: int, layers: int, k_type: str) -> str:
    half = nbytes / 2 / MIB
    return (
        f"{prefix}: size = {nbytes / MIB:7.2f} MiB ({cells:6d} cells, {layers:3d} layers,  1/1 seqs), "
        f"K ({k_type}): {half:7.2f} MiB, V ({k_type}): {half:7.2f} MiB"
    )


def load_lines(scenario: Scenario, row: LoadedModel, fallback: str | None = None) -> list[str]:
    """The lines of one model load: Ollama's spawn, llama-server's buffers, context and slots.

    Args:
        scenario: The scenario (catalog, runner figures).
        row: The ``/api/ps`` row being loaded (``context_length``, ``size``, ``size_vram`` bytes).
        fallback: A KV cache type Ollama warns it cannot use for this load (then f16 is allocated).

    Returns:
        The lines, Ollama's stamped with :data:`STAMP`.

    Raises:
        ValueError: The model has no ``runner`` figures or no KV layout, or its ``size`` is smaller than
            its weights and KV cache.
    """
    from kvtop.model import kv

    model = scenario.models[row.model]
    if model.runner is None or row.context_length is None:
        raise ValueError(f"{row.model}: the demo log needs its runner figures and a context_length")
    fig = runner_figures(scenario, row.model)
    layout = kv.layout_from_model_info(dict(model.model_info))
    if isinstance(layout, kv.KVUnavailable):
        raise ValueError(f"{row.model}: {layout.reason}")
    ctx = row.context_length
    est = kv.kv_allocation(layout, ctx, 1, "f16", "f16", flash_attention=True)
    weights = int(fig["weights_bytes"])
    on_cpu = max(0, row.size - row.size_vram)
    compute = row.size - weights - est.total_bytes
    if compute < 0 or on_cpu > weights:
        raise ValueError(f"{row.model}: size {row.size:,} B is below weights + KV ({weights + est.total_bytes:,} B)")
    layers = int(fig["layers"])
    offloaded = layers - round(layers * on_cpu / weights) if on_cpu else layers
    path = _blob_path(scenario, row.model)
    out: list[str] = []
    if fallback:
        out.append(
            f'{STAMP} level=WARN source=server.go:226 msg="kv cache type not supported by model" type={fallback}'
        )
    cmd = " ".join(runner_argv(scenario, row.model, ctx))
    out += [
        f'{STAMP} level=INFO source=llama_server.go:431 msg="starting llama-server" cmd="{cmd}"',
        f'{STAMP} level=INFO source=llama_server.go:1046 msg="loading model via llama-server" model={path}',
        "load_tensors: loading model tensors, this can take a while... (mmap = true, direct_io = false)",
    ]
    if offloaded == layers:
        out.append("load_tensors: offloading output layer to GPU")
    out += [
        f"load_tensors: offloading {offloaded - 1 if offloaded == layers else offloaded} repeating layers to GPU",
        f"load_tensors: offloaded {offloaded}/{layers} layers to GPU",
        f"load_tensors: {DEVICE:>12} model buffer size = {(weights - on_cpu) / MIB:8.2f} MiB",
    ]
    if on_cpu:
        out.append(f"load_tensors: {'CPU_Mapped':>12} model buffer size = {on_cpu / MIB:8.2f} MiB")
    train = layout.context_length_train
    out += [
        "llama_context: constructing llama_context",
        "llama_context: n_seq_max             = 1",
        f"llama_context: n_ctx                 = {ctx}",
        f"llama_context: n_ctx_seq             = {ctx}",
        "llama_context: n_batch               = 512",
        "llama_context: n_ubatch              = 512",
        "llama_context: causal_attn           = 1",
        "llama_context: flash_attn            = auto",
        "llama_context: kv_unified            = false",
    ]
    if train and ctx < train:
        out.append(
            f"llama_context: n_ctx_seq ({ctx}) < n_ctx_train ({train}) -- the full capacity of the model"
            " will not be utilized"
        )
    if est.swa_cells is not None:
        full = est.total_bytes - est.swa_bytes
        out += [
            f"llama_kv_cache_iswa: creating non-SWA KV cache, size = {est.cells_per_seq} cells",
            f"llama_kv_cache: {DEVICE:>10} KV buffer size = {full / MIB:8.2f} MiB",
            _kv_size_line("llama_kv_cache", full, est.cells_per_seq, est.full_layers, "f16"),
            f"llama_kv_cache_iswa: creating     SWA KV cache, size = {est.swa_cells} cells",
            f"llama_kv_cache: {DEVICE:>10} KV buffer size = {est.swa_bytes / MIB:8.2f} MiB",
            _kv_size_line("llama_kv_cache", est.swa_bytes, est.swa_cells, est.swa_layers, "f16"),
        ]
    else:
        out += [
            f"llama_kv_cache: {DEVICE:>10} KV buffer size = {est.total_bytes / MIB:8.2f} MiB",
            _kv_size_line("llama_kv_cache", est.total_bytes, est.cells_per_seq, est.full_layers, "f16"),
        ]
    out.append("sched_reserve: reserving ...")
    out.append(
        "sched_reserve: Flash Attention was auto, set to disabled"
        if on_cpu
        else "resolve_fused_ops: Flash Attention enabled"
    )
    out += [
        f"sched_reserve: {DEVICE:>10} compute buffer size = {compute / MIB:8.2f} MiB",
        f"srv    load_model: initializing, n_slots = 1, n_ctx_slot = {ctx}, kv_unified = 'false'",
        f"slot   load_model: id  0 | task -1 | new slot, n_ctx = {ctx}",
        "srv  llama_server: model loaded",
        f"srv  llama_server: listening on http://127.0.0.1:{_port(scenario, row.model)}",
        "srv  update_slots: all slots are idle",
        f'{STAMP} level=INFO source=llama_server.go:1227 msg="llama-server started in {2.0 + weights / 4e9:.2f} seconds"',
    ]
    return out


def eviction_lines(scenario: Scenario, row: LoadedModel) -> list[str]:
    """The scheduler's eviction of ``row``'s idle runner (the DEBUG sequence of corpus/logs/050)."""
    runner = (
        f'runner.name=registry.ollama.ai/library/{row.model} runner.inference="[{{ID:0 Library:CUDA}}]" '
        f'runner.size="{_human(row.size)}" runner.vram="{_human(row.size_vram)}" runner.parallel=1 '
        f"runner.pid={runner_pid(scenario, row.model)} runner.model={_blob_path(scenario, row.model)} "
        f"runner.num_ctx={row.context_length}"
    )
    return [
        f'{STAMP} level=DEBUG source=sched.go:1686 msg="found an idle runner to unload" {runner}',
        f'{STAMP} level=DEBUG source=sched.go:339 msg="resetting model to expire immediately to make room" '
        f"{runner} refCount=0",
        f'{STAMP} level=DEBUG source=sched.go:350 msg="waiting for pending requests to complete and unload '
        f'to occur" {runner}',
    ]


State = Mapping[str, tuple[int | None, int, int]]
"""What the log has loaded so far: model -> (context_length, size, size_vram)."""


def transition_lines(
    scenario: Scenario, index: int, state: State
) -> tuple[list[str], dict[str, tuple[int | None, int, int]]]:
    """The lines written when step ``index`` becomes current after ``state``, and the new state.

    Models the step evicts (``log.evict``) get the eviction sequence; every row whose context, size
    or VRAM differs from ``state`` is loaded again (:func:`load_lines`), in the step's row order.
    """
    step = scenario.steps[index]
    lines: list[str] = []
    for name in step.log.get("evict", ()):
        old = state.get(name)
        if old is not None:
            ctx, size, vram = old
            lines += eviction_lines(scenario, LoadedModel(name, ctx, size, vram, None))
    fallbacks = dict(step.log.get("kv_fallback", {}))
    new: dict[str, tuple[int | None, int, int]] = {}
    for row in step.loaded:
        key = (row.context_length, row.size, row.size_vram)
        if state.get(row.model) != key and scenario.models[row.model].runner is not None:
            lines += load_lines(scenario, row, fallbacks.get(row.model))
        new[row.model] = key
    return lines, new
