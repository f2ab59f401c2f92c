"""``kvtop plan MODEL``: memory of a model at other num_ctx / KV cache types / slots, before loading it.

Usage::

    kvtop plan MODEL [--ctx N ...] [--kv f16|q8_0|q4_0 ...] [--parallel P] [--flash-attention on|off]
                     [--gpu-free BYTES|auto] [--reserve BYTES] [--json]
                     [--host URL] [--log FILE] [--model-info FILE [--weights BYTES] [--server-version V]]
    kvtop plan --all [--gpu-free BYTES|auto] [--ctx N] [--kv TYPE] [--parallel P] [--json] [--host URL]

``--all``: the pre-flight of every pulled model (``kvtop.model.preflight``), one row each: the
num_ctx it would get (``--ctx``, else its Modelfile's, else Ollama's default: 4096, or from v0.15.5
the VRAM tier, read with ``--gpu-free auto``), its KV cache and total, whether it fits in the free
GPU memory beside what is loaded, and the largest num_ctx that stays 100% on the GPU.

One row per ``--ctx`` x ``--kv`` combination, with weights, KV cache (kvtop's arithmetic), compute
buffers (with the stated error), total, GPU need, the fit verdict with the layers that would
spill, and the largest num_ctx and slot count that stay 100% on the GPU (``kvtop.model.plan``).
Sizes are written in the units and marks of every screen (``kvtop.model.known``): ``~`` estimated,
``↓`` a num_ctx lowered to the training context; ``--json`` has the exact bytes.

Inputs, online (the default): ``GET /api/version``, ``GET /api/tags`` (file size), ``POST
/api/show`` with ``verbose`` (``model_info`` with per-layer arrays, the tensor list, the weights
blob) and ``GET /api/ps`` (whether the model is loaded: its ``size_vram`` counts as available to
it, and its ``size`` calibrates the compute estimate). Read-only: nothing that changes the server
is sent. Offline: ``--model-info FILE`` reads a saved ``/api/show`` answer (or a bare
``model_info`` map) instead, for models that are not on the server at hand.

``--log FILE`` reads an Ollama server log (or llama-server stderr) and, when it has a load of
this model with allocations, prints the prediction next to the allocation and the error, and
anchors the compute estimate to the real figure.

``--all`` reads ``/api/show`` through a rolling pool: six in flight, the next one starting as soon
as one answers, each under ``--timeout``, all of them within ``all_budget_s`` (60 s, or 3 ×
``--timeout`` when that is longer). A model whose ``/api/show`` was not read (its deadline, an
error, or the budget ran out before it was asked) is listed as unread with the reason.

Exit status: 0; 1 when there is nothing to plan (a cloud model); 2 for bad arguments, an
unreachable server, an unknown model, an unreadable file, or ``--gpu-free auto`` without NVML;
3 (``--all``) when the answer is incomplete: some model's ``/api/show`` was not read (the rows
and the list of unread models are printed all the same).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import io
import json
import os
import sys
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from kvtop.sources.auth import ServerAccess

from kvtop.model import kv
from kvtop.model import plan
from kvtop.model.known import CLAMPED_MARK, NOT_KNOWN, exact_bytes, ibytes
from kvtop.textsafe import emit, safe_block, safe_json

EXIT_OK = 0
EXIT_NOTHING = 1
EXIT_ERROR = 2
EXIT_INCOMPLETE = 3
"""``plan --all``: printed, but some model's ``/api/show`` was not read (listed as unread)."""

ALL_BUDGET_MIN_S = 60.0
"""``plan --all`` reads every ``/api/show`` within ``max(ALL_BUDGET_MIN_S, 3 × --timeout)``."""


def all_budget_s(timeout_s: float) -> float:
    """Seconds ``plan --all`` gives its ``/api/show`` requests in all (``--timeout`` bounds each)."""
    return max(ALL_BUDGET_MIN_S, 3.0 * timeout_s)



class PlanError(Exception):
    """A one-line reason to stop (printed as ``kvtop plan: <reason>``, exit 2)."""


# --------------------------------------------------------------------------------------------
# Arguments


def _num_ctx(text: str) -> int:
    try:
        return plan.parse_num_ctx(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _bytes(text: str) -> int:
    try:
        return plan.parse_bytes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


MAX_GPU_BYTES = 2**50
"""1 PiB: more free GPU memory than that is a typo, not a machine (``--gpu-free``, ``--reserve``)."""


def _gpu_bytes(text: str) -> int:
    value = _bytes(text)
    if value > MAX_GPU_BYTES:
        raise argparse.ArgumentTypeError(f"{text.strip()!r} is more than 1 PiB of GPU memory: a typo?")
    return value


def _gpu_free(text: str) -> int | str:
    return "auto" if text.strip().lower() == "auto" else _gpu_bytes(text)


def _cache_type(text: str) -> str:
    value = kv.normalize_cache_type(text)
    if value is None or text.strip() == "":
        raise argparse.ArgumentTypeError(
            f"unknown KV cache type {text!r}; Ollama documents {', '.join(plan.PLAN_CACHE_TYPES)}")
    return value


def _slots(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a slot count: {text!r}") from None
    if not 1 <= value <= plan.MAX_SLOTS:
        raise argparse.ArgumentTypeError(f"slots must be 1–{plan.MAX_SLOTS} (llama.cpp LLAMA_MAX_SEQ)")
    return value


def build_parser() -> argparse.ArgumentParser:
    """Arguments of ``kvtop plan``."""
    p = argparse.ArgumentParser(
        prog="kvtop plan",
        description="Predict a model's memory (weights, KV cache, compute) at other num_ctx, KV cache "
                    "types and slot counts, and whether it stays 100% on the GPU.",
        epilog=f"exit status: 0 done; 1 nothing to plan (a cloud model); 2 bad arguments, server or file not "
               f"readable; {EXIT_INCOMPLETE} (--all) incomplete: some model's /api/show was not read within "
               f"--timeout (or the {ALL_BUDGET_MIN_S:g} s, or 3 x --timeout, for all of them): those models are "
               "listed as unread, with the reason",
    )
    p.add_argument("model", metavar="MODEL", nargs="?", help="model name as Ollama lists it (llama3.1:8b)")
    p.add_argument("--all", action="store_true",
                   help="every pulled model, one row each: will it fit if loaded now (the pre-flight)")
    p.add_argument("--ctx", type=_num_ctx, action="append", metavar="N",
                   help="num_ctx per slot, e.g. 32768 or 32k (repeatable; default: the loaded "
                        f"context, else {plan.DEFAULT_NUM_CTX}; with --all: one, default the server's: "
                        "OLLAMA_CONTEXT_LENGTH, else Ollama's VRAM-tiered default)")
    p.add_argument("--kv", type=_cache_type, action="append", metavar="TYPE",
                   help="KV cache type f16, q8_0 or q4_0 (repeatable; default f16)")
    p.add_argument("--parallel", type=_slots, default=None, metavar="P", help="slots (OLLAMA_NUM_PARALLEL), default 1")
    p.add_argument("--flash-attention", choices=("on", "off"), default=None,
                   help="flash attention as the runner resolves it (default on)")
    p.add_argument("--gpu-free", type=_gpu_free, default=None, metavar="BYTES|auto",
                   help="free GPU memory: 24GiB, 24GB, 25769803776, or auto (NVML, the GPU with the most free)")
    p.add_argument("--reserve", type=_gpu_bytes, default=0, metavar="BYTES",
                   help="memory to leave free on the GPU (default 0)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--host", metavar="URL", default=None,
                   help="Ollama server (default: $OLLAMA_HOST, else http://127.0.0.1:11434)")
    p.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                   help="bound on each request (default 10); --all: on each model's /api/show too")
    from kvtop.cli import add_access_arguments

    add_access_arguments(p)  # --header, --password-file, --netrc, --cacert, --insecure: as the dashboard's
    p.add_argument("--log", metavar="FILE", default=None,
                   help="server log (or llama-server stderr) with a load of this model: compare and calibrate")
    p.add_argument("--model-info", metavar="FILE", default=None,
                   help="offline: a saved /api/show answer (or bare model_info) instead of asking a server")
    p.add_argument("--weights", type=_bytes, default=None, metavar="BYTES",
                   help="offline: weights file size, when the file has no tensor list")
    p.add_argument("--server-version", metavar="V", default=None,
                   help="Ollama version the plan is for (default: /api/version, offline 0.30+: llama-server)")
    return p


# --------------------------------------------------------------------------------------------
# Inputs


@dataclass(frozen=True, slots=True)
class Loaded:
    """The model's ``/api/ps`` row when it is loaded."""

    size_bytes: int | None
    size_vram_bytes: int | None
    context_length: int | None


@dataclass(frozen=True, slots=True)
class PlanInput:
    """Everything ``kvtop plan`` read about the model.

    Attributes:
        spec: The model for the planner.
        source: Where it came from (``http://…`` or ``--model-info FILE``).
        version: ``/api/version`` (or ``--server-version``), None when unknown.
        blob: ``sha256-<hex>`` of the weights blob (Modelfile ``FROM``), for log matching.
        loaded: The ``/api/ps`` row, None when the model is not loaded.
        remote: True for a cloud model.
        notes: Facts found on the way.
    """

    spec: plan.ModelSpec
    source: str
    version: str | None
    blob: str | None
    loaded: Loaded | None
    remote: bool
    notes: tuple[str, ...] = ()


def _full_name(name: str) -> str:
    name = name.strip()
    return name if ":" in name.rsplit("/", 1)[-1] else name + ":latest"


def _same_model(a: str, b: str) -> bool:
    return _full_name(a).lower() == _full_name(b).lower()


def _show_parts(body: Mapping[str, Any]) -> tuple[Mapping[str, Any], list[Any] | None, str | None, bool]:
    """``model_info``, ``tensors``, weights blob and remote flag of an ``/api/show`` answer."""
    from kvtop.sources.ollama_decode import parse_show

    show = parse_show(body, digest="", name="")
    tensors = body.get("tensors")
    return show.model_info, tensors if isinstance(tensors, list) else None, show.model_blob, show.remote


def read_model_info_file(path: str, name: str, weights: int | None, version: str | None) -> PlanInput:
    """``--model-info FILE``: a saved ``/api/show`` answer, or a bare ``model_info`` map.

    Raises:
        PlanError: The file cannot be read or is not such a JSON object.
    """
    try:
        with open(path, "rb") as fh:
            doc = json.loads(fh.read())
    except OSError as exc:
        raise PlanError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise PlanError(f"{path} is not JSON: {exc}") from None
    if not isinstance(doc, Mapping):
        raise PlanError(f"{path}: expected a JSON object (an /api/show answer or a model_info map)")
    if isinstance(doc.get("model_info"), Mapping):
        info, tensors, blob, remote = _show_parts(doc)
    else:
        info = {k: v for k, v in doc.items() if isinstance(k, str) and not k.startswith("tokenizer.")}
        tensors, blob, remote = None, None, False
    spec = plan.model_spec(name, info, tensors=tensors, file_size=weights, file_size_note="--weights")
    return PlanInput(spec, f"--model-info {path}", version, blob, None, remote)


def _client(base_url: str, timeout: float, transport: httpx.BaseTransport | None,
            access: ServerAccess | None = None) -> httpx.Client:
    """A client of ``base_url`` with its credentials, headers and TLS trust (``sources.auth``)."""
    access = access if access is not None else ServerAccess(base_url)
    return httpx.Client(**access.client_options(base_url=base_url, timeout=httpx.Timeout(timeout),
                                                transport=transport))


def server_access(raw: str | None, *, strict: bool, args: argparse.Namespace) -> tuple[str, ServerAccess]:
    """The server ``kvtop plan`` reads (``--host``, else ``OLLAMA_HOST``) and how to reach it: its
    URL's credentials, ``--header``/``--cacert``/``--insecure``, ``OLLAMA_API_KEY`` and the config
    file's ``[servers."URL"]`` table (``config.server_accesses``).

    Raises:
        PlanError: The address, a ``--header`` or the ``--cacert`` file cannot be used.
    """
    from kvtop.config import ConfigError, HostError, parse_host_access, resolve_config, server_accesses

    try:
        host, user, password = parse_host_access(raw, strict=strict)
        file_origin = "the config file"
        try:
            resolved = resolve_config({})
            servers, file_origin = resolved.values.get("servers"), str(resolved.path)
        except ConfigError:
            servers = None  # a bad setting elsewhere in the environment: plan reads no other
        from kvtop.cli import access_options

        access, warnings = server_accesses([(host, user, password)], **access_options(args), servers=servers,
                                           file_origin=file_origin, host_origin="flag" if getattr(args, "host", None) else None)
    except (HostError, ConfigError) as exc:
        raise PlanError(str(exc)) from None
    for warning in warnings:
        emit(f"kvtop plan: {warning}")
    if access[host].tls_note:
        emit(f"kvtop plan: {host}: {access[host].tls_note}")
    return host, access[host]


def _get(client: httpx.Client, method: str, path: str, body: Any = None) -> Any:
    try:
        resp = client.request(method, path, json=body)
    except httpx.ConnectError as exc:
        if "CERTIFICATE_VERIFY_FAILED" in str(exc):
            from kvtop.sources.ollama_errors import tls_message

            raise PlanError(tls_message(str(client.base_url).rstrip("/"), exc)) from None
        raise PlanError(f"cannot connect to {client.base_url} (is Ollama running? --host, OLLAMA_HOST)") from None
    except httpx.TimeoutException:
        raise PlanError(f"{path}: no answer from {client.base_url} in time (--timeout)") from None
    except httpx.HTTPError as exc:
        raise PlanError(f"{path}: {type(exc).__name__}: {exc}") from None
    if resp.status_code in (401, 403):
        from kvtop.sources.ollama_errors import auth_message

        access = getattr(client, "kvtop_access", None) or ServerAccess(str(client.base_url))
        raise PlanError(f"{path}: {auth_message(resp.status_code, access)}")
    if resp.status_code >= 400:
        detail = ""
        try:
            err = resp.json()
            if isinstance(err, Mapping) and isinstance(err.get("error"), str):
                detail = ": " + err["error"][:160]
        except ValueError:
            pass
        raise _HttpError(resp.status_code, f"{path}: HTTP {resp.status_code}{detail}")
    try:
        return resp.json()
    except ValueError:
        raise PlanError(f"{path}: the answer is not JSON") from None


class _HttpError(PlanError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def fetch_input(base_url: str, name: str, *, timeout: float = 10.0,
                transport: httpx.BaseTransport | None = None, access: ServerAccess | None = None) -> PlanInput:
    """Read what the planner needs from an Ollama server (read-only requests only).

    Raises:
        PlanError: Unreachable server, unknown model, or an answer of the wrong shape.
    """
    from kvtop.sources.ollama_decode import ShapeError, parse_ps

    notes: list[str] = []
    with _client(base_url, timeout, transport, access) as client:
        client.kvtop_access = access  # type: ignore[attr-defined]  # for the 401/403 message
        version: str | None = None
        try:
            v = _get(client, "GET", "/api/version")
            version = v.get("version") if isinstance(v, Mapping) and isinstance(v.get("version"), str) else None
        except _HttpError:
            pass
        file_size: int | None = None
        digest: str | None = None
        tags = _get(client, "GET", "/api/tags")
        for entry in (tags.get("models") or []) if isinstance(tags, Mapping) else []:
            if isinstance(entry, Mapping) and _same_model(str(entry.get("name") or entry.get("model") or ""), name):
                size = entry.get("size")
                file_size = size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else None
                digest = str(entry.get("digest") or "").removeprefix("sha256:") or None
                break
        try:
            show = _get(client, "POST", "/api/show", {"model": name, "verbose": True})
        except _HttpError as exc:
            if exc.status == 404:
                raise PlanError(f"model {name!r} not found on {base_url} (ollama pull {name})") from None
            raise
        if not isinstance(show, Mapping):
            raise PlanError("/api/show: unexpected answer")
        info, tensors, blob, remote = _show_parts(show)
        loaded: Loaded | None = None
        try:
            rows = parse_ps(_get(client, "GET", "/api/ps"))
        except (_HttpError, ShapeError):
            rows = ()
            notes.append("/api/ps could not be read: treated as not loaded")
        for row in rows:
            if _same_model(row.name, name) or (digest is not None and row.digest == digest):
                loaded = Loaded(row.size_bytes, row.size_vram_bytes, row.context_length)
                break
    if file_size is None and not remote:
        notes.append("/api/tags does not list this model: its file size is not known")
    spec = plan.model_spec(name, info, tensors=tensors, file_size=file_size)
    return PlanInput(spec, base_url, version, blob, loaded, remote, tuple(notes))


def nvml_free_bytes() -> tuple[int, str]:
    """Free memory of the GPU with the most free memory, through NVML.

    Returns:
        ``(bytes, "GPU i (name)")``.

    Raises:
        PlanError: NVML (the ``pynvml`` package or the driver library) is not available.
    """
    try:
        with warnings.catch_warnings():  # the pynvml shim warns that it is deprecated
            warnings.simplefilter("ignore")
            nvml: Any = importlib.import_module("pynvml")
    except ImportError:
        raise PlanError("--gpu-free auto needs NVML (the pynvml package); pass the free memory, "
                        "e.g. --gpu-free 24GiB") from None
    try:
        nvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, …
        raise PlanError(f"--gpu-free auto: NVML is not available ({exc}); pass the free memory, "
                        "e.g. --gpu-free 24GiB") from None
    try:
        best: tuple[int, str] | None = None
        for i in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            free = int(nvml.nvmlDeviceGetMemoryInfo(handle).free)
            name = nvml.nvmlDeviceGetName(handle)
            label = f"GPU {i} ({name.decode() if isinstance(name, bytes) else name})"
            if best is None or free > best[0]:
                best = (free, label)
    except Exception as exc:  # noqa: BLE001
        raise PlanError(f"--gpu-free auto: NVML query failed ({exc})") from None
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001, S110 - shutting NVML down must not hide the answer
            pass
    if best is None:
        raise PlanError("--gpu-free auto: NVML reports no GPU; pass the free memory, e.g. --gpu-free 24GiB")
    return best


def calibration_from_log(path: str, blob: str | None) -> tuple[plan.Calibration | None, str]:
    """The newest load of ``blob`` with allocations in a server log (any load when ``blob`` is None).

    Raises:
        PlanError: The file cannot be read.
    """
    from kvtop.logparse.load_grouping import group_loads
    from kvtop.logparse.parser import iter_events

    try:
        with open(path, "rb") as fh:
            lines = [raw.decode("utf-8", "replace") for raw in fh]
    except OSError as exc:
        raise PlanError(f"cannot read {path}: {exc.strerror or exc}") from None
    loads = group_loads(iter_events(lines))
    candidates = [ld for ld in loads if blob is None or ld.model_blob is None or ld.model_blob == blob]
    for load in reversed(candidates):
        cal = plan.calibration_from_load(load, note=f"{path}: load #{load.index + 1} (line {load.first_line})")
        if cal is not None:
            why = "" if blob is not None and load.model_blob == blob else (
                " (the model's blob is not known: the log's newest load with allocations)" if blob is None
                else " (the load names no blob)")
            return cal, f"{path}: load #{load.index + 1}{why}"
    return None, f"{path}: no load{' of ' + blob[:19] + '…' if blob else ''} with compute allocations"


# --------------------------------------------------------------------------------------------
# The plan


@dataclass(frozen=True, slots=True)
class Row:
    """One table row: a prediction and its limits."""

    prediction: plan.Prediction
    max_num_ctx: int | None
    max_parallel: int | None


@dataclass(frozen=True, slots=True)
class PlanResult:
    """Everything ``kvtop plan`` prints."""

    inp: PlanInput
    engine: plan.Engine
    free_bytes: int | None
    free_source: str
    budget_bytes: int | None
    reserve_bytes: int
    rows: tuple[Row, ...]
    calibration: plan.Calibration | None
    calibration_note: str
    comparison: plan.Comparison | None
    settings: tuple[plan.ServerSettings, ...]
    notes: tuple[str, ...]


def make_plan(inp: PlanInput, ctxs: Sequence[int] | None, kv_types: Sequence[str] | None, parallel: int,
              flash_attention: bool, *, free_bytes: int | None, free_source: str, reserve_bytes: int = 0,
              calibration: plan.Calibration | None = None, calibration_note: str = "") -> PlanResult:
    """Predict every ``ctx`` x ``kv`` configuration (pure given its inputs)."""
    notes = list(inp.notes) + list(inp.spec.notes)
    engine = plan.engine_for_version(inp.version)
    loaded = inp.loaded
    if not ctxs:
        if loaded is not None and loaded.context_length:
            ctxs = [loaded.context_length]
        else:
            ctxs = [plan.DEFAULT_NUM_CTX]
            notes.append(f"num_ctx {plan.DEFAULT_NUM_CTX}: Ollama's default below 23 GiB of VRAM "
                         "(v0.15.5+ raises it with more VRAM); pass --ctx")
    kv_types = list(kv_types or ["f16"])
    held = loaded.size_vram_bytes if loaded is not None else None
    budget = plan.gpu_budget(free_bytes, held, reserve_bytes)
    if calibration is None and loaded is not None and loaded.size_bytes and loaded.context_length \
            and inp.spec.weights_bytes is not None:
        base = plan.predict(inp.spec, plan.PlanConfig(loaded.context_length), engine=engine)
        if base.kv_bytes is not None:
            derived = loaded.size_bytes - inp.spec.weights_bytes - base.kv_bytes - (base.recurrent_bytes or 0)
            if derived >= 0:
                calibration = plan.Calibration(
                    base.config, derived, "derived",
                    "/api/ps size − weights − KV, assuming Ollama's defaults (f16, 1 slot, flash attention on); "
                    "--log gives the runner's real settings",
                    weights_bytes=inp.spec.weights_bytes, kv_bytes=base.kv_bytes, total_bytes=loaded.size_bytes)
                calibration_note = f"loaded at num_ctx {loaded.context_length} (/api/ps)"
            else:
                notes.append("/api/ps size is below weights + KV at Ollama's defaults: the server runs another "
                             "KV type or slot count; --log gives the real figures")
    rows: list[Row] = []
    seen: list[tuple[str, int, bool]] = []
    for ctx in ctxs:
        for kv_type in kv_types:
            config = plan.PlanConfig(ctx, kv_type, parallel, flash_attention)
            p = plan.predict(inp.spec, config, budget_bytes=budget, calibration=calibration, engine=engine)
            rows.append(Row(
                p,
                plan.max_num_ctx_on_gpu(inp.spec, config, budget, calibration=calibration, engine=engine),
                plan.max_parallel_on_gpu(inp.spec, p.config, budget, calibration=calibration, engine=engine),
            ))
            key = (kv_type, parallel, flash_attention)
            if key not in seen:
                seen.append(key)
    comparison = plan.compare(inp.spec, calibration, engine=engine) if calibration is not None else None
    settings = tuple(plan.server_settings(*key) for key in seen)
    return PlanResult(inp, engine, free_bytes, free_source, budget, reserve_bytes, tuple(rows), calibration,
                      calibration_note, comparison, settings, tuple(dict.fromkeys(notes)))


# --------------------------------------------------------------------------------------------
# Output


def _est(n: int | None) -> str:
    """An estimated size: ``~5.7 GiB`` (the marks and units of every screen, ``model.known``)."""
    return NOT_KNOWN if n is None else "~" + ibytes(n)


def _signed(n: int) -> str:
    return ("+" if n >= 0 else "−") + f"{abs(n):,}"


def _layout_text(spec: plan.ModelSpec) -> str:
    layout = spec.layout
    parts = [spec.architecture]
    if isinstance(layout, kv.KVLayout):
        parts.append(f"{layout.block_count} layers")
        if layout.layers:
            first = layout.layers[0]
            parts.append(f"{first.n_head_kv} KV heads × {first.key_length}")
        parts.extend(layout.notes)
    if spec.context_train:
        parts.append(f"trained {spec.context_train:,} tokens")
    return ", ".join(parts)


def render_text(r: PlanResult) -> str:
    """The human report: header, the table, the comparison, notes, how to apply."""
    out = io.StringIO()
    w = out.write
    spec = r.inp.spec
    w(f"kvtop plan {spec.name} — {_layout_text(spec)}\n")
    w(f"  source    {r.inp.source}" + (f" (Ollama {r.inp.version})" if r.inp.version else "") + "\n")
    if spec.weights_bytes is not None:
        w(f"  weights   {exact_bytes(spec.weights_bytes)}: {spec.weights_note}\n")
    else:
        w(f"  weights   not known: {spec.weights_note}\n")
    if r.budget_bytes is None:
        w("  GPU       free memory not given: no fit verdict (--gpu-free BYTES|auto)\n")
    else:
        held = r.inp.loaded.size_vram_bytes if r.inp.loaded is not None else None
        text = f"{ibytes(r.budget_bytes)} available = {ibytes(r.free_bytes)} free ({r.free_source})"
        if held:
            text += f" + {ibytes(held)} this model holds now"
        if r.reserve_bytes:
            text += f" − {ibytes(r.reserve_bytes)} reserve"
        w(f"  GPU       {text}\n")
    w(f"  runner    {r.engine}" + (" (Ollama v0.30+)" if r.engine == "llama-server" else " (Ollama before v0.30)")
      + "; sizes in binary units (1 GiB = 1024 MiB; exact bytes with --json); ~ estimated\n")
    if r.inp.loaded is not None:
        lo = r.inp.loaded
        w(f"  loaded    num_ctx {lo.context_length or '?'}, size {ibytes(lo.size_bytes)}, "
          f"in VRAM {ibytes(lo.size_vram_bytes)} (/api/ps)\n")
    reason = spec.kv_reason
    if reason:
        w(f"\n  KV cache: {reason}\n  kvtop cannot predict this model's KV cache or total.\n")
    header = ["num_ctx", "slots", "KV", "FA", "weights", "KV cache", "compute", "total", "100% GPU needs", "fit",
              "max num_ctx", "max slots"]
    table: list[list[str]] = [header]
    for row in r.rows:
        p = row.prediction
        fit = p.fit.text() if p.fit is not None else ("?" if p.total_bytes is not None else "")
        ctx = f"{p.config.num_ctx}" + (CLAMPED_MARK if p.config.num_ctx != p.requested_num_ctx else "")
        table.append([
            ctx, str(p.config.parallel), p.config.cache_type, "on" if p.config.flash_attention else "off",
            (_est if p.weights_estimated else ibytes)(p.weights_bytes), _est(p.kv_bytes) if p.kv is not None else "n/a",
            f"{_est(p.compute_bytes)} ±{ibytes(p.compute_error_bytes)}",
            _est(p.total_bytes), _est(p.gpu_bytes), fit,
            "?" if row.max_num_ctx is None else str(row.max_num_ctx),
            "?" if row.max_parallel is None else str(row.max_parallel),
        ])
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    left = {2, 3, 9}
    w("\n")
    for line in table:
        cells = [c.ljust(widths[i]) if i in left else c.rjust(widths[i]) for i, c in enumerate(line)]
        w("  " + "  ".join(cells).rstrip() + "\n")
    w("\n")
    problems = {p.kv_problem for p in (row.prediction for row in r.rows) if p.kv_problem and p.kv_problem != reason}
    for problem in sorted(problems):
        w(f"  ! {problem}\n")
    first = r.rows[0].prediction if r.rows else None
    if first is not None:
        w(f"  compute   {first.compute_note}\n")
        if first.kv is not None:
            w(f"  KV        {first.kv.formula}\n")
        for note in first.notes:
            w(f"  note      {note}\n")
    if any(row.prediction.config.num_ctx != row.prediction.requested_num_ctx for row in r.rows):
        w(f"  {CLAMPED_MARK}         num_ctx lowered to the training context, as Ollama does\n")
    for note in r.notes:
        w(f"  note      {note}\n")
    if r.comparison is not None:
        c = r.comparison
        what = "allocated by the runner" if c.calibration.source == "allocated" else "derived from /api/ps"
        w(f"\nPrediction vs the loaded model ({r.calibration_note}; {c.calibration.config.label()}; {what}):\n")
        w(f"  {'':<10} {'predicted B':>16} {'actual B':>16} {'error B':>14} {'error':>8}  stated error\n")
        for cr in c.rows:
            pred = "?" if cr.predicted is None else f"{cr.predicted:,}"
            act = "?" if cr.actual is None else f"{cr.actual:,}"
            err = "" if cr.error_bytes is None else _signed(cr.error_bytes)
            pct = "" if cr.error_percent is None else f"{cr.error_percent:+.2f}%"
            verdict = "" if cr.within is None else ("within" if cr.within else "OUTSIDE")
            w(f"  {cr.component:<10} {pred:>16} {act:>16} {err:>14} {pct:>8}  ±{cr.stated_error_bytes:,} {verdict}\n")
        w("  Later rows anchor the compute estimate to the real figure (calibrated).\n")
    elif r.calibration_note:
        w(f"\n  log       {r.calibration_note}\n")
    w("\nApply: num_ctx is per request (options.num_ctx; OLLAMA_CONTEXT_LENGTH sets the server's default).\n")
    if r.settings:
        example = next((x for x in r.settings if dict(x.env)["OLLAMA_KV_CACHE_TYPE"] != "f16"), r.settings[0])
        env = dict(example.env)
        w("KV cache type, slots and flash attention are server-wide (a restart unloads every model); "
          f"for {env['OLLAMA_KV_CACHE_TYPE']}, {env['OLLAMA_NUM_PARALLEL']} slot(s):\n")
        w(f"  systemd   {example.systemd[0]}, add:\n")
        for entry in example.systemd[1:-1]:
            w(f"              {entry}\n")
        w(f"            then: {example.systemd[-1]}\n")
        w("  macOS     " + "; ".join(example.launchctl[:-1]) + "; then quit and reopen Ollama\n")
        w(f"  docker    {example.docker}\n")
        others = [dict(x.env)["OLLAMA_KV_CACHE_TYPE"] for x in r.settings if x is not example]
        if others:
            w(f"  (for {', '.join(others)}: the same with that OLLAMA_KV_CACHE_TYPE)\n")
        for note in example.notes[2:]:
            w(f"  ! {note}\n")
    return out.getvalue()


def result_json(r: PlanResult) -> dict[str, Any]:
    """The ``--json`` document (exact bytes; every compute figure flagged as estimated)."""
    spec = r.inp.spec
    loaded = r.inp.loaded
    return {
        "model": spec.name,
        "source": r.inp.source,
        "version": r.inp.version,
        "engine": r.engine,
        "architecture": spec.architecture,
        "block_count": spec.block_count,
        "context_train": spec.context_train,
        "kv_unavailable": spec.kv_reason,
        "layout_notes": list(spec.layout.notes) if isinstance(spec.layout, kv.KVLayout) else [],
        "weights_bytes": spec.weights_bytes,
        "weights_source": spec.weights_note,
        "layers_exact": spec.layers.exact if spec.layers is not None else None,
        "loaded": None if loaded is None else {
            "size_bytes": loaded.size_bytes, "size_vram_bytes": loaded.size_vram_bytes,
            "context_length": loaded.context_length,
        },
        "gpu": {
            "free_bytes": r.free_bytes, "free_source": r.free_source or None,
            "held_bytes": loaded.size_vram_bytes if loaded is not None else None,
            "reserve_bytes": r.reserve_bytes, "budget_bytes": r.budget_bytes,
        },
        "rows": [plan.prediction_json(row.prediction, max_num_ctx=row.max_num_ctx, max_parallel=row.max_parallel)
                 for row in r.rows],
        "comparison": plan.comparison_json(r.comparison) if r.comparison is not None else None,
        "calibration_note": r.calibration_note or None,
        "server_settings": [
            {"env": dict(s.env), "systemd": list(s.systemd), "launchctl": list(s.launchctl), "docker": s.docker,
             "notes": list(s.notes)}
            for s in r.settings
        ],
        "notes": list(r.notes),
    }


# --------------------------------------------------------------------------------------------
# Entry point


def main_plan(argv: list[str], *, transport: httpx.BaseTransport | None = None) -> int:
    """Run ``kvtop plan`` with ``argv`` (the arguments after ``plan``); returns the exit status.

    Args:
        argv: Command-line arguments.
        transport: An ``httpx`` transport for tests.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse printed its message
        return EXIT_OK if exc.code == 0 else EXIT_ERROR
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="replace")
    if args.all:
        if args.model is not None or args.log or args.model_info or args.weights is not None or args.reserve:
            emit("kvtop plan: --all plans every pulled model of a server; leave out MODEL, --log, --model-info, "
                 "--weights and --reserve")
            return EXIT_ERROR
        if len(args.ctx or ()) > 1 or len(args.kv or ()) > 1:
            emit("kvtop plan: --all takes one --ctx and one --kv")
            return EXIT_ERROR
        return _main_all(args)
    if args.model is None:
        emit("kvtop plan: name a MODEL, or --all for every pulled model")
        return EXIT_ERROR
    if args.parallel is None:
        args.parallel = 1
    if args.flash_attention is None:
        args.flash_attention = "on"
    try:
        result = _plan(args, transport)
    except PlanError as exc:
        emit(f"kvtop plan: {exc}")
        return EXIT_ERROR
    if result is None:
        return EXIT_NOTHING
    text = safe_json(result_json(result)) + "\n" if args.json else safe_block(render_text(result))
    return _print(text)


def _plan(args: argparse.Namespace, transport: httpx.BaseTransport | None) -> PlanResult | None:
    if args.model_info:
        if args.host:
            raise PlanError("--model-info plans offline; leave out --host")
        inp = read_model_info_file(args.model_info, args.model, args.weights, args.server_version)
    else:
        raw = args.host if args.host is not None else os.environ.get("OLLAMA_HOST")
        host, access = server_access(raw, strict=args.host is not None, args=args)
        inp = fetch_input(host, args.model, timeout=args.timeout, transport=transport, access=access)
        if args.server_version:
            inp = PlanInput(inp.spec, inp.source, args.server_version, inp.blob, inp.loaded, inp.remote, inp.notes)
        if args.weights is not None:
            raise PlanError("--weights is for --model-info (the server's /api/tags gives the file size)")
    if inp.remote:
        emit(f"kvtop plan: {args.model} is a cloud model: it runs on the remote service, "
             "no local memory to plan")
        return None
    free: int | None = None
    free_source = ""
    if args.gpu_free == "auto":
        free, free_source = nvml_free_bytes()
        free_source = f"NVML, {free_source}"
    elif isinstance(args.gpu_free, int):
        free, free_source = args.gpu_free, "--gpu-free"
    calibration: plan.Calibration | None = None
    calibration_note = ""
    if args.log:
        calibration, calibration_note = calibration_from_log(args.log, inp.blob)
    return make_plan(inp, args.ctx, args.kv, args.parallel, args.flash_attention == "on",
                     free_bytes=free, free_source=free_source, reserve_bytes=args.reserve,
                     calibration=calibration, calibration_note=calibration_note)


# --------------------------------------------------------------------------------------------
# --all: the pre-flight of every pulled model


@dataclass(frozen=True, slots=True)
class AllResult:
    """What ``kvtop plan --all`` prints."""

    host: str
    version: str | None
    defaults: Any
    free_bytes: int | None
    free_source: str
    total_bytes: int | None
    rows: tuple[Any, ...]
    notes: tuple[str, ...]
    unread: tuple[tuple[str, str], ...] = ()
    """``(name, reason)`` of each model whose ``/api/show`` was not read: the answer is incomplete."""


def nvml_total_bytes() -> int | None:
    """Total memory of every GPU NVML lists (the VRAM tier's input), None when NVML cannot say."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            nvml: Any = importlib.import_module("pynvml")
        nvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no NVML: the tier stays unknown, and says so
        return None
    try:
        return sum(int(nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(i)).total)
                   for i in range(int(nvml.nvmlDeviceGetCount())))
    except Exception:  # noqa: BLE001
        return None
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001, S110 - shutting NVML down must not hide the answer
            pass


async def fetch_all(host: str, timeout: float,
                    access: ServerAccess | None = None) -> tuple[str | None, Any, tuple[Any, ...], list[str]]:
    """``(version, PulledSnapshot, /api/ps rows, notes)`` of ``host`` (read-only requests).

    Raises:
        PlanError: ``/api/tags`` cannot be read.
    """
    from kvtop.sources.pulled import PulledSource

    source = PulledSource(host, timeout_s=timeout, show_timeout_s=timeout, access=access)
    try:
        pulled = await source.sample_all(all_budget_s(timeout))
        version, rows, error = await source.version_and_ps()
    finally:
        await source.aclose()
    if pulled.tags is None:
        raise PlanError(pulled.error or "/api/tags could not be read")
    notes = [] if error is None else [f"{error}: treated as nothing loaded"]
    return version, pulled, rows, notes


def make_all(args: argparse.Namespace, host: str, version: str | None, pulled: Any, loaded: Sequence[Any],
             *, free_bytes: int | None, free_source: str, total_bytes: int | None, notes: Sequence[str] = ()) -> AllResult:
    """The pre-flight rows for ``kvtop plan --all`` (pure given its inputs)."""
    from kvtop.model import preflight
    from kvtop.model.known import Known

    d = running = preflight.server_defaults(version, None, total_bytes)
    if args.ctx:
        d = dataclasses.replace(d, num_ctx=Known(args.ctx[0], "requested", "--ctx"))
    if args.kv:
        d = dataclasses.replace(d, cache_type=Known(args.kv[0], "requested", "--kv"))
    if args.parallel is not None:
        d = dataclasses.replace(d, parallel=Known(args.parallel, "requested", "--parallel"))
    if args.flash_attention is not None:
        d = dataclasses.replace(d, flash_attention=Known(args.flash_attention == "on", "requested", "--flash-attention"))
    more = list(notes)
    if d.num_ctx.source == "estimated":
        more.append(f"num_ctx ~{d.num_ctx.value} is assumed: Ollama v0.15.5+ picks its default from the GPUs' "
                    "total memory (4096 under 23 GiB, 32768 from 23 GiB, 262144 from 47 GiB), which is not known "
                    "here, so the smallest is assumed; --gpu-free auto reads it (NVML, on the server's machine), "
                    "or pass --ctx")
    assumed = [what for what, given in (("OLLAMA_CONTEXT_LENGTH as unset (--ctx)", args.ctx),
                                        ("the KV type f16 (--kv)", args.kv),
                                        ("1 slot (--parallel)", args.parallel is not None),
                                        ("flash attention on (--flash-attention)", args.flash_attention is not None))
               if not given]
    if assumed:
        more.append(f"assumed Ollama's defaults: {', '.join(assumed)}: the server's own settings are not "
                    "readable over the API")
    rows = preflight.preflight(pulled, d, free_bytes=free_bytes, loaded=loaded, engine=plan.engine_for_version(version),
                               running=running)
    not_asked = f"not asked: the {all_budget_s(args.timeout):g} s for all of them ran out first"
    return AllResult(host, version, d, free_bytes, free_source, total_bytes, rows, tuple(more),
                     preflight.unread(rows, not_asked))


def all_json(r: AllResult) -> dict[str, Any]:
    """The ``kvtop plan --all --json`` document (bytes exact; ``verdict`` per model)."""
    from kvtop.model.preflight import defaults_json, preflight_json

    return {"host": r.host, "version": r.version, "defaults": defaults_json(r.defaults),
            "gpu": {"free_bytes": r.free_bytes, "free_source": r.free_source or None, "total_bytes": r.total_bytes},
            "models": [preflight_json(row) for row in r.rows], "notes": list(r.notes),
            "complete": not r.unread, "unread": [{"name": name, "reason": why} for name, why in r.unread]}


def all_text(r: AllResult) -> str:
    """The ``kvtop plan --all`` table."""
    from kvtop.model.preflight import marked as mark

    d = r.defaults
    out = [f"kvtop plan --all — {r.host}" + (f" (Ollama {r.version})" if r.version else ""),
           f"  each at num_ctx {mark(d.num_ctx)} × {mark(d.parallel)} slot(s), KV {mark(d.cache_type)}, "
           f"flash attention {mark(d.flash_attention)}; ~ estimated, * Ollama default, ^ requested, = server env",
           "  GPU free: " + (f"{ibytes(r.free_bytes)} ({r.free_source})" if r.free_bytes is not None
                             else "not given: no fit verdict (--gpu-free BYTES|auto)"), ""]
    table = [["NAME", "SIZE", "NUM_CTX", "KV", "TOTAL", "GPU NEED", "FIT", "MAX NUM_CTX"]]
    calibrated: list[str] = []
    for row in r.rows:
        fit = row.verdict + (f" ({row.note})" if row.note and row.verdict not in ("fits",) else "")
        table.append([row.name, ibytes(row.size_bytes), mark(row.num_ctx), _sized(row.kv_bytes, row.kv_source),
                      _sized(row.total_bytes, row.total_source), _est(row.gpu_bytes), fit,
                      NOT_KNOWN if row.max_num_ctx is None else str(row.max_num_ctx)])
        if row.calibration:
            calibrated.append(f"{row.name}: {row.calibration}")
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    for line in table:
        out.append("  " + "  ".join(c.ljust(widths[i]) if i in (0, 6) else c.rjust(widths[i])
                                    for i, c in enumerate(line)).rstrip())
    if not r.rows:
        out.append("  (no pulled models)")
    out.append("")
    out.extend(f"  loaded  {c}; its unmarked figures are its own" for c in calibrated)
    out.extend(f"  note  {n}" for n in r.notes)
    if r.unread:
        out.append(f"  incomplete: /api/show of {len(r.unread)} of {len(r.rows)} model(s) not read "
                   f"(exit {EXIT_INCOMPLETE}):")
        out.extend(f"  unread  {name}: {why}" for name, why in r.unread)
    return "\n".join(out) + "\n"


def _sized(n: int | None, source: str) -> str:
    """A size with its source's mark: ``~5.7 GiB`` estimated, ``5.9 GiB`` allocated or reported."""
    from kvtop.model.known import source_mark

    return NOT_KNOWN if n is None else source_mark(source) + ibytes(n)


def _main_all(args: argparse.Namespace) -> int:
    import asyncio

    try:
        raw = args.host if args.host is not None else os.environ.get("OLLAMA_HOST")
        host, access = server_access(raw, strict=args.host is not None, args=args)
        free: int | None = None
        free_source = ""
        total: int | None = None
        from kvtop.sources.hosts import host_is_this_machine

        if args.gpu_free == "auto":
            free, label = nvml_free_bytes()
            free_source, total = f"NVML, {label}", nvml_total_bytes()
        elif isinstance(args.gpu_free, int):
            free, free_source = args.gpu_free, "--gpu-free"
        version, pulled, loaded, notes = asyncio.run(fetch_all(host, args.timeout, access))
        if args.gpu_free == "auto" and not host_is_this_machine(host):
            notes.append(f"--gpu-free auto read this machine's GPUs, but {host} is not on this machine: "
                         "the fit verdicts and the num_ctx tier may be another machine's; pass --gpu-free BYTES")
        if args.server_version:
            version = args.server_version
        result = make_all(args, host, version, pulled, loaded, free_bytes=free, free_source=free_source,
                          total_bytes=total, notes=notes)
    except PlanError as exc:
        emit(f"kvtop plan: {exc}")
        return EXIT_ERROR
    text = safe_json(all_json(result)) + "\n" if args.json else safe_block(all_text(result))
    done = _print(text)
    if result.unread and done == EXIT_OK:
        emit(f"kvtop plan: incomplete: /api/show of {len(result.unread)} of {len(result.rows)} model(s) not read "
             "(listed as unread, with the reason)")
        return EXIT_INCOMPLETE
    return done


def _print(text: str) -> int:
    """Write ``text`` to stdout; a reader that went away (``| head``) is not an error. EXIT_OK."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main_plan(sys.argv[1:]))
