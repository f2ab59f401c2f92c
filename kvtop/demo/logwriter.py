"""The stand-in's server log: what an Ollama v0.30+ server (llama-server runners) would print
while it plays the scenario, written to a file that ``kvtop --demo`` follows (``--log file:PATH``).

Every line has the shape of a real line (docs/ollama-internals.md §4.4–§4.10): Ollama's own lines as
the corpus shows them (``starting llama-server`` from corpus/logs/062, the eviction sequence from
050, ``loading model via llama-server`` / ``llama-server started in`` from §4.4, the truncation
warning of §4.7 with v0.30's ``llama_server.go`` source and ``limit`` rule, the KV type warning of
§3.2), and llama-server's raw stderr as ``tests/fixtures/llama_server`` recorded it from a real
run (``load_tensors``, ``llama_context``, ``llama_kv_cache`` and its iSWA variant from corpus/042,
``resolve_fused_ops``/``sched_reserve``, the slot lines, ``cached n_tokens`` prefill batches,
``print_timing``). Only the numbers are the scenario's:

- per load, the weights (scenario ``models.<m>.runner.weights_bytes``), the KV cache
  (``kvtop.model.kv.kv_allocation`` at the row's ``context_length``, f16) and the compute buffers
  (what is left of ``/api/ps`` ``size``) add up to the row's ``size``; what is not in VRAM
  (``size - size_vram``) is weights in ``CPU_Mapped`` buffers with fewer layers offloaded, and
  flash attention resolves off there (§4.6: ``Flash Attention was auto, set to disabled``);
- requests go to the newest load of the step (the runner log's lines name no model, §4.10) at the
  model's token speeds (``prefill_tps``/``decode_tps``, ``spilled_*`` when it spilled; staged);
- a step's ``log`` adds ``evict`` (the 050 sequence for those models), ``truncate`` (the step's
  first request is truncated) and ``kv_fallback`` (``{model: "q8_0"}``: Ollama's warning before
  that load, which then runs with llama-server's default f16 cache);
- every request ends with gin's access line (§4.9, :func:`gin_line`, corpus 053's shape): the
  scenario's client requests as ``POST "/api/chat"`` / ``POST "/api/generate"`` from
  :data:`CLIENTS` with their scripted duration, and every Ollama API request the stand-in really
  serves (kvtop's own ``GET "/api/ps"``, ``POST "/api/show"`` …) with its status, measured latency
  and client address (:meth:`LogWriter.access`), as a real server logs its pollers too.

Putting the warning of §3.2 (Ollama v0.13.4–v0.24 validated the type; v0.30+ passes it verbatim)
in front of a llama-server load is staged, like everything being on one server at once.

Timestamps are written when a line is written (:func:`restamp`). The script is pure
(:func:`build_script`, :func:`transition_lines`); :class:`LogWriter` is the thread that writes it
as the stand-in's clock moves, looping with the scenario.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvtop.demo.scenario import LoadedModel, Scenario, model_blob

if TYPE_CHECKING:
    from kvtop.demo.player import ScenarioPlayer

__all__ = [
    "CLIENTS",
    "LogWriter",
    "Request",
    "Script",
    "build_script",
    "eviction_lines",
    "gin_line",
    "go_duration",
    "load_lines",
    "restamp",
    "runner_argv",
    "runner_pid",
    "script_lines",
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


def _runner(scenario: Scenario, model: str) -> dict[str, Any]:
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
    fig = _runner(scenario, row.model)
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


@dataclass(frozen=True)
class Request:
    """One request of the script: its lines at scenario times (seconds from the pass's start)."""

    start_s: float
    end_s: float
    step: int
    model: str
    lines: tuple[tuple[float, str], ...]


@dataclass(frozen=True)
class Script:
    """A pass's requests, by step (:func:`build_script`)."""

    requests: tuple[Request, ...]

    def lines_between(self, step: int, start_s: float, end_s: float) -> list[str]:
        """Step ``step``'s request lines with a time in ``[start_s, end_s)``, in order."""
        out: list[tuple[float, int, str]] = []
        for r in self.requests:
            if r.step == step and r.start_s < end_s and r.end_s >= start_s:
                out += [(t, i, line) for i, (t, line) in enumerate(r.lines) if start_s <= t < end_s]
        return [line for _, _, line in sorted(out, key=lambda item: (item[0], item[1]))]

    def busy(self, step: int, at_s: float) -> bool:
        """Whether a request of step ``step`` is being served at scenario time ``at_s``."""
        return any(r.step == step and r.start_s <= at_s < r.end_s for r in self.requests)


def _active_models(scenario: Scenario) -> list[str | None]:
    """Per step, the model its requests go to: the newest load (a row that changed), else the previous one."""
    active: list[str | None] = []
    previous: dict[str, tuple[int | None, int, int]] = {}
    current: str | None = None
    for step in scenario.steps:
        rows = {
            r.model: (r.context_length, r.size, r.size_vram)
            for r in step.loaded
            if scenario.models[r.model].runner is not None
        }
        changed = [m for m, key in rows.items() if previous.get(m) != key]
        if changed:
            current = changed[-1]
        elif current not in rows:
            current = next(reversed(rows), None) if rows else None
        active.append(current if rows else None)
        previous = rows
    return active


def _request(
    scenario: Scenario, step: int, model: str, row: LoadedModel, start: float, task: int, truncated: bool
) -> Request:
    fig = _runner(scenario, model)
    spilled = row.size_vram < row.size
    wobble = 1.0 + 0.04 * math.sin(task * 1.7)  # requests differ a little, so TOK/S moves
    prefill = round(float(fig["spilled_prefill_tps"] if spilled else fig["prefill_tps"]) * wobble, 2)
    decode = round(float(fig["spilled_decode_tps"] if spilled else fig["decode_tps"]) * wobble, 2)
    ctx = row.context_length or 2048
    prompt, n_eval = int(fig["prompt_tokens"]), int(fig["eval_tokens"])
    lines: list[tuple[float, str]] = []
    head = f"id  0 | task {task} |"
    client, endpoint = CLIENTS[task % len(CLIENTS)]
    if truncated:
        # v0.30+ (§4.7): limit = numCtx - max((numCtx - numKeep) / 2, 1); the 5065-token prompt of corpus 014
        limit = ctx - max((ctx - KEEP) // 2, 1)
        lines.append(
            (
                start,
                f'{STAMP} level=WARN source=llama_server.go:317 msg="truncating input prompt" '
                f"limit={limit} prompt=5065 keep={KEEP} new={limit}",
            )
        )
        prompt = limit
    prompt = min(prompt, ctx - n_eval - 1) if ctx > n_eval + 1 else prompt
    lines += [
        (start, f"slot launch_slot_: {head} processing task, is_child = 0"),
        (start, f"slot   operator(): {head} new prompt, n_ctx_slot = {ctx}, n_keep = 0, task.n_tokens = {prompt}"),
    ]
    prefill_s = prompt / prefill
    for done in range(0, prompt, 512):
        lines.append(
            (start + done / prefill, f"slot   operator(): {head} cached n_tokens = {done}, memory_seq_rm [{done}, end)")
        )
    t = start + prefill_s
    lines.append(
        (t, f"slot init_sampler: {head} init sampler, took 0.34 ms, tokens: text = {prompt}, total = {prompt}")
    )
    eval_s = n_eval / decode
    end = t + eval_s
    p_ms, e_ms = prefill_s * 1000, eval_s * 1000
    lines += [
        (
            end,
            f"slot print_timing: {head} prompt eval time = {p_ms:10.2f} ms / {prompt:5d} tokens "
            f"({p_ms / prompt:8.2f} ms per token, {prefill:8.2f} tokens per second)",
        ),
        (
            end,
            f"slot print_timing: {head}        eval time = {e_ms:10.2f} ms / {n_eval:5d} tokens "
            f"({e_ms / n_eval:8.2f} ms per token, {decode:8.2f} tokens per second)",
        ),
        (end, f"slot print_timing: {head}       total time = {p_ms + e_ms:10.2f} ms / {prompt + n_eval:5d} tokens"),
        (end, f"slot print_timing: {head}    graphs reused = {n_eval - 8:10d}"),
        (end, f"slot      release: {head} stop processing: n_tokens = {prompt + n_eval - 1}, truncated = 0"),
        (end, "srv  update_slots: all slots are idle"),
        (end, gin_line(200, end - start, client, "POST", endpoint)),  # printed when the response is done
    ]
    return Request(start, end, step, model, tuple(lines))


def build_script(scenario: Scenario) -> Script:
    """One pass's requests: from 2 s after a step starts, one every ``request_every_s`` on the step's
    newest load (or 1 s after the previous one ends, when it took longer: the runner has one slot, so
    requests never overlap), each over before the step ends; none in a step with ``log.requests`` false."""
    requests: list[Request] = []
    task = 0
    period = scenario.period_s
    for i, (step, model) in enumerate(zip(scenario.steps, _active_models(scenario))):
        if model is None or step.log.get("requests", True) is False:
            continue
        row = next(r for r in step.loaded if r.model == model)
        end = scenario.steps[i + 1].at_s if i + 1 < len(scenario.steps) else period
        every = float(_runner(scenario, model)["request_every_s"])
        t = step.at_s + 2.0
        first = True
        while True:
            r = _request(scenario, i, model, row, t, task, truncated=first and bool(step.log.get("truncate")))
            if r.end_s > end - 0.5:
                break
            requests.append(r)
            task += 1
            first = False
            t = max(t + every, r.end_s + 1.0)  # one slot (-np 1): the next request once this one is answered
    return Script(tuple(requests))


class LogWriter:
    """Writes the scenario's log to ``path`` as the player's clock moves (a daemon thread).

    Each poll (``poll_s``) finds the current step and the scenario time in it (the player's speed;
    in manual mode time runs on inside the step until the next step's start). A new step writes
    its transition lines (:func:`transition_lines`) against what was written so far; then every
    request line up to the scenario time. A wrap to the start (``--loop``) starts a new pass, so the
    log keeps moving for as long as the stand-in runs.
    """

    def __init__(
        self, path: Path, player: ScenarioPlayer, *, poll_s: float = 0.05, wall_ns: Callable[[], int] = time.time_ns
    ) -> None:
        """Args: ``path``, the log file; ``player``, the stand-in's clock; ``poll_s``, seconds between
        writes; ``wall_ns``, the wall clock (Unix ns) the player uses (injectable for tests).

        Raises:
            ValueError: A model of the scenario cannot be written (no runner figures, sizes below
                weights + KV): found before anything is written.
        """
        self.path = path
        self.player = player
        self.script = build_script(player.scenario)
        script_lines(player.scenario)  # every load's figures are checked now, not when its step comes
        self._poll_s = poll_s
        self._wall_ns = wall_ns
        self._state: dict[str, tuple[int | None, int, int]] = {}
        self._index: int | None = None
        self._pos = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._served: list[str] = []
        self.lines_written = 0

    def position(self) -> tuple[int, float]:
        """The current step and the scenario time (seconds from the pass's start) in it."""
        index, since_ns = self.player.current()
        steps = self.player.scenario.steps
        step = steps[index]
        end = steps[index + 1].at_s if index + 1 < len(steps) else self.player.scenario.period_s
        elapsed = max(0.0, (self._wall_ns() - since_ns) / 1e9 * self.player.speed)
        return index, min(step.at_s + elapsed, end)

    def busy(self) -> bool:
        """Whether a request is being served now."""
        index, at_s = self.position()
        return self.script.busy(index, at_s)

    def access(self, status: int, latency_s: float, client: str, method: str, path: str) -> None:
        """Log one request the stand-in served (gin's line, :func:`gin_line`); written at the next tick.
        Thread-safe: the server's handler threads call it once their response is sent."""
        line = gin_line(status, latency_s, client, method, path)
        with self._lock:
            self._served.append(line)

    def tick(self) -> int:
        """Write what is due now; returns the lines written."""
        with self._lock:
            index, at_s = self.position()
            lines: list[str] = []
            new_pass = self._index is not None and (
                index < self._index or (index == self._index and at_s < self._pos - 0.5)
            )
            if index != self._index or new_pass:
                if self._index is not None and not new_pass and index == self._index + 1:
                    lines += self.script.lines_between(self._index, self._pos, self.player.scenario.steps[index].at_s)
                step_lines, self._state = transition_lines(self.player.scenario, index, self._state)
                lines += step_lines
                self._index, self._pos = index, self.player.scenario.steps[index].at_s
            lines += self.script.lines_between(index, self._pos, at_s)
            self._pos = max(self._pos, at_s)
            lines += self._served
            self._served = []
            if lines:
                now = self._wall_ns() / 1e9
                with self.path.open("a", encoding="utf-8") as f:
                    f.write("".join(restamp(line, now) + "\n" for line in lines))
                self.lines_written += len(lines)
            return len(lines)

    def start(self) -> None:
        """Create the file (empty) and start writing in a daemon thread."""
        self.path.touch()
        self._thread = threading.Thread(target=self._run, name="kvtop-demo-log", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._poll_s):
            try:
                self.tick()
            except OSError:
                return  # the file's folder is gone (kvtop exited): nothing left to write for

    def stop(self) -> None:
        """Stop the thread (the last due lines are written)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        try:
            self.tick()
        except OSError:
            pass


def script_lines(scenario: Scenario) -> list[str]:
    """A whole pass's lines in order, as :class:`LogWriter` writes them (for ``inspect-log`` and tests)."""
    script = build_script(scenario)
    state: dict[str, tuple[int | None, int, int]] = {}
    out: list[str] = []
    for i, step in enumerate(scenario.steps):
        lines, state = transition_lines(scenario, i, state)
        out += lines
        end = scenario.steps[i + 1].at_s if i + 1 < len(scenario.steps) else scenario.period_s
        out += script.lines_between(i, step.at_s, end)
    return out
