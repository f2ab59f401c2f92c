"""``kvtop plan MODEL``: memory of a model at other num_ctx / KV cache types / slots, before loading it.

Usage::

    kvtop plan MODEL [--ctx N ...] [--kv f16|q8_0|q4_0 ...] [--parallel P] [--flash-attention on|off]
                     [--gpu-free BYTES|auto] [--reserve BYTES] [--json]
                     [--host URL] [--log FILE] [--model-info FILE [--weights BYTES] [--server-version V]]
    kvtop plan --all [--gpu-free BYTES|auto] [--ctx N] [--kv TYPE] [--parallel P] [--json] [--host URL]
    kvtop plan --gguf PATH [the options of MODEL]
    forecast: [--env OLLAMA_NAME=VALUE ...] [--gpus N] [--gpu-total BYTES] [--in-use MODEL ...]

Every plan (MODEL, ``--gguf``, each ``--all`` row) forecasts what a request that loads the model now
does (``kvtop.model.next_load``, docs/ollama-scheduler.md): the num_ctx × slots, KV type and flash
attention Ollama resolves, which loaded models its scheduler unloads and why, and the fit.

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
anchors the compute estimate to the real figure; and, from the requests of this model it logs,
what num_ctx the traffic needs (``kvtop.model.ctx_advice``: the sizes' p50/p95/p99/max, the prompts
cut, the smallest num_ctx × KV type × slots that holds the p99 request and fits, and the
``PARAMETER num_ctx`` / ``OLLAMA_CONTEXT_LENGTH`` lines to copy; nothing is applied).

``--all`` reads ``/api/show`` through a rolling pool: six in flight, the next one starting as soon
as one answers, each under ``--timeout``, all of them within ``all_budget_s`` (60 s, or 3 ×
``--timeout`` when that is longer). A model whose ``/api/show`` was not read (its deadline, an
error, or the budget ran out before it was asked) is listed as unread with the reason.

Exit status: 0; 1 when there is nothing to plan (a cloud model); 2 for bad arguments, an
unreachable server, an unknown model, an unreadable file, or ``--gpu-free auto`` without NVML;
3 (``--all``) when the answer is incomplete: some model's ``/api/show`` was not read (the rows
and the list of unread models are printed all the same).

This module is the arguments, the server's access options and the entry points; what a plan works
from is ``plan_cli.inputs``, the plan and its output ``plan_cli.result``, ``--all``
``plan_cli.all_models``.
"""

from __future__ import annotations

import argparse
import os
import sys

import httpx

from kvtop.core.glyphs import output_wants_ascii, to_ascii
from kvtop.model.known import use_si_units
from kvtop.core.units import parse_bytes
from kvtop.model import kv
from kvtop.model import plan
from kvtop.sources.auth import ServerAccess
from kvtop.plan_cli.all_models import all_json, all_text, fetch_all, make_all, nvml_total_bytes
from kvtop.plan_cli.inputs import (
    ALL_BUDGET_MIN_S,
    EXIT_ERROR,
    EXIT_INCOMPLETE,
    EXIT_NOTHING,
    EXIT_OK,
    PlanError,
    PlanInput,
    calibration_from_log,
    fetch_input,
    nvml_free_bytes,
    read_model_info_file,
    served_from_log,
)
from kvtop.plan_cli.result import PlanResult, _print, make_plan, render_text, result_json
from kvtop.textsafe import emit, safe_block, safe_json

# --------------------------------------------------------------------------------------------
# Arguments


def _num_ctx(text: str) -> int:
    try:
        return plan.parse_num_ctx(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _bytes(text: str) -> int:
    try:
        return parse_bytes(text)
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
            f"unknown KV cache type {text!r}; Ollama documents {', '.join(plan.PLAN_CACHE_TYPES)}"
        )
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
    p.add_argument(
        "--all",
        action="store_true",
        help="every pulled model, one row each: will it fit if loaded now (the pre-flight)",
    )
    p.add_argument(
        "--ctx",
        type=_num_ctx,
        action="append",
        metavar="N",
        help="num_ctx per slot, e.g. 32768 or 32k (repeatable; default: the loaded "
        f"context, else {plan.DEFAULT_NUM_CTX}; with --all: one, default the server's: "
        "OLLAMA_CONTEXT_LENGTH, else Ollama's VRAM-tiered default)",
    )
    p.add_argument(
        "--kv",
        type=_cache_type,
        action="append",
        metavar="TYPE",
        help="KV cache type f16, q8_0 or q4_0 (repeatable; default f16)",
    )
    p.add_argument("--parallel", type=_slots, default=None, metavar="P", help="slots (OLLAMA_NUM_PARALLEL), default 1")
    p.add_argument(
        "--flash-attention",
        choices=("on", "off"),
        default=None,
        help="flash attention as the runner resolves it (default on)",
    )
    p.add_argument(
        "--gpu-free",
        type=_gpu_free,
        default=None,
        metavar="BYTES|auto",
        help="free GPU memory: 24GiB, 24GB, 25769803776, or auto (NVML, the GPU with the most free)",
    )
    p.add_argument(
        "--reserve", type=_gpu_bytes, default=0, metavar="BYTES", help="memory to leave free on the GPU (default 0)"
    )
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument(
        "--si", action="store_true", help="write sizes in decimal units, as ollama ps (6.1 GB; default binary: 5.7 GiB)"
    )
    p.add_argument(
        "--ascii",
        action="store_true",
        help="ASCII only (x for the times sign, v for the lowered mark, +/- for plus-minus); on by itself when the "
        "locale is not UTF-8 (LC_ALL/LC_CTYPE/LANG)",
    )
    p.add_argument(
        "--host", metavar="URL", default=None, help="Ollama server (default: $OLLAMA_HOST, else http://127.0.0.1:11434)"
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="bound on each request (default 10); --all: on each model's /api/show too",
    )
    from kvtop.cli.access import add_access_arguments

    add_access_arguments(p)  # --header, --password-file, --netrc, --cacert, --insecure: as the dashboard's
    p.add_argument(
        "--log",
        metavar="FILE",
        default=None,
        help="server log (or llama-server stderr) with a load of this model: compare and calibrate",
    )
    p.add_argument(
        "--model-info",
        metavar="FILE",
        default=None,
        help="offline: a saved /api/show answer (or bare model_info) instead of asking a server",
    )
    p.add_argument(
        "--weights",
        type=_bytes,
        default=None,
        metavar="BYTES",
        help="offline: weights file size, when the file has no tensor list",
    )
    p.add_argument(
        "--server-version",
        metavar="V",
        default=None,
        help="Ollama version the plan is for (default: /api/version, offline 0.30+: llama-server)",
    )
    from kvtop.plan_cli.next_load_cli import add_arguments

    add_arguments(p, _gpu_bytes)  # --gguf, --env, --gpus, --gpu-total, --in-use: the next-load forecast
    return p


def server_access(raw: str | None, *, strict: bool, args: argparse.Namespace) -> tuple[str, ServerAccess]:
    """The server ``kvtop plan`` reads (``--host``, else ``OLLAMA_HOST``) and how to reach it: its
    URL's credentials, ``--header``/``--cacert``/``--insecure``, ``OLLAMA_API_KEY`` and the config
    file's ``[servers."URL"]`` table (``config.server_accesses``).

    Raises:
        PlanError: The address, a ``--header`` or the ``--cacert`` file cannot be used.
    """
    from kvtop.config import resolve_config
    from kvtop.config.files import ConfigError
    from kvtop.config.host import HostError
    from kvtop.config.server_access import parse_host_access, server_accesses

    try:
        host, user, password = parse_host_access(raw, strict=strict)
        file_origin = "the config file"
        try:
            resolved = resolve_config({})
            servers, file_origin = resolved.values.get("servers"), str(resolved.path)
        except ConfigError:
            servers = None  # a bad setting elsewhere in the environment: plan reads no other
        from kvtop.cli.access import access_options

        access, warnings = server_accesses(
            [(host, user, password)],
            **access_options(args),
            servers=servers,
            file_origin=file_origin,
            host_origin="flag" if getattr(args, "host", None) else None,
        )
    except (HostError, ConfigError) as exc:
        raise PlanError(str(exc)) from None
    for warning in warnings:
        emit(f"kvtop plan: {warning}")
    if access[host].tls_note:
        emit(f"kvtop plan: {host}: {access[host].tls_note}")
    return host, access[host]


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
    use_si_units(args.si)
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="replace")
    given = [k for k in ("ctx", "kv", "parallel", "flash_attention") if getattr(args, k) is not None]
    if args.all:
        if args.gguf:
            emit("kvtop plan: --all plans the pulled models; --gguf plans one file")
            return EXIT_ERROR
        if args.model is not None or args.log or args.model_info or args.weights is not None or args.reserve:
            emit(
                "kvtop plan: --all plans every pulled model of a server; leave out MODEL, --log, --model-info, "
                "--weights and --reserve"
            )
            return EXIT_ERROR
        if len(args.ctx or ()) > 1 or len(args.kv or ()) > 1:
            emit("kvtop plan: --all takes one --ctx and one --kv")
            return EXIT_ERROR
        return _main_all(args)
    if args.model is None and not args.gguf:
        emit("kvtop plan: name a MODEL, or --gguf PATH for a local file, or --all for every pulled model")
        return EXIT_ERROR
    env = dict(args.env or ())  # --env: the server's settings are the table's defaults too
    if args.parallel is None:
        par = env.get("OLLAMA_NUM_PARALLEL", "").strip()
        args.parallel = int(par) if par.isdigit() and 1 <= int(par) <= plan.MAX_SLOTS else 1
    if args.kv is None and kv.normalize_cache_type(env.get("OLLAMA_KV_CACHE_TYPE") or None):
        args.kv = [kv.normalize_cache_type(env["OLLAMA_KV_CACHE_TYPE"])]
    if args.flash_attention is None:
        fa = env.get("OLLAMA_FLASH_ATTENTION", "").strip().lower()
        args.flash_attention = "off" if fa in ("0", "false", "f", "no", "off") else "on"
    try:
        result = _plan(args, transport, given)
    except PlanError as exc:
        emit(f"kvtop plan: {exc}")
        return EXIT_ERROR
    if result is None:
        return EXIT_NOTHING
    text = safe_json(result_json(result)) + "\n" if args.json else _ascii(safe_block(render_text(result)), args)
    return _print(text)


def _ascii(text: str, args: argparse.Namespace) -> str:
    """``text`` as printed: in ASCII (``kvtop.core.glyphs``, as ``kvtop --once``) with ``--ascii`` or
    without a UTF-8 locale (``output_wants_ascii``), else unchanged."""
    if args.ascii or output_wants_ascii(
        os.environ, getattr(sys.stdout, "encoding", None), sys.flags.utf8_mode, sys._xoptions
    ):
        return to_ascii(text, keep_cells=False)
    return text


def _plan(args: argparse.Namespace, transport: httpx.BaseTransport | None, given: list[str]) -> PlanResult | None:
    import dataclasses
    import time

    from kvtop.plan_cli.next_load_cli import forecast_for, read_gguf_input, server_loaded

    if args.gguf:
        if args.model_info or args.weights is not None:
            raise PlanError("--gguf reads the file itself; leave out --model-info and --weights")
        inp = read_gguf_input(args.gguf, args.model, args.server_version)
        raw = args.host if args.host is not None else os.environ.get("OLLAMA_HOST")
        host, access = server_access(raw, strict=args.host is not None, args=args)
        version, rows, blobs, more = server_loaded(host, access, args.timeout, transport)
        inp = dataclasses.replace(
            inp,
            version=args.server_version or version,
            ps_rows=rows,
            loaded_blobs=blobs,
            notes=inp.notes + tuple(more),
            source=f"{inp.source}; loaded models: {host}",
        )
    elif args.model_info:
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
        emit(f"kvtop plan: {args.model} is a cloud model: it runs on the remote service, no local memory to plan")
        return None
    free: int | None = None
    free_source = ""
    total: int | None = args.gpu_total
    if args.gpu_free == "auto":
        free, free_source = nvml_free_bytes()
        free_source = f"NVML, {free_source}"
        total = total if total is not None else nvml_total_bytes()
    elif isinstance(args.gpu_free, int):
        free, free_source = args.gpu_free, "--gpu-free"
    next_load, _ = forecast_for(inp, args, free_bytes=free, total_bytes=total, now_s=time.time(), given=given)
    calibration: plan.Calibration | None = None
    calibration_note = ""
    served, log_config = None, None
    if args.log:
        calibration, calibration_note = calibration_from_log(args.log, inp.blob)
        served, log_config = served_from_log(args.log, inp.blob)
    return make_plan(
        inp,
        args.ctx,
        args.kv,
        args.parallel,
        args.flash_attention == "on",
        free_bytes=free,
        free_source=free_source,
        reserve_bytes=args.reserve,
        calibration=calibration,
        calibration_note=calibration_note,
        served=served,
        log_config=log_config,
        next_load=next_load,
    )


def _main_all(args: argparse.Namespace) -> int:
    import asyncio

    try:
        raw = args.host if args.host is not None else os.environ.get("OLLAMA_HOST")
        host, access = server_access(raw, strict=args.host is not None, args=args)
        free: int | None = None
        free_source = ""
        total: int | None = args.gpu_total
        from kvtop.sources.hosts import host_is_this_machine

        if args.gpu_free == "auto":
            free, label = nvml_free_bytes()
            free_source, total = f"NVML, {label}", total if total is not None else nvml_total_bytes()
        elif isinstance(args.gpu_free, int):
            free, free_source = args.gpu_free, "--gpu-free"
        version, pulled, loaded, notes = asyncio.run(fetch_all(host, args.timeout, access))
        if args.gpu_free == "auto" and not host_is_this_machine(host):
            notes.append(
                f"--gpu-free auto read this machine's GPUs, but {host} is not on this machine: "
                "the fit verdicts and the num_ctx tier may be another machine's; pass --gpu-free BYTES"
            )
        if args.server_version:
            version = args.server_version
        result = make_all(
            args,
            host,
            version,
            pulled,
            loaded,
            free_bytes=free,
            free_source=free_source,
            total_bytes=total,
            notes=notes,
        )
    except PlanError as exc:
        emit(f"kvtop plan: {exc}")
        return EXIT_ERROR
    text = safe_json(all_json(result)) + "\n" if args.json else _ascii(safe_block(all_text(result)), args)
    done = _print(text)
    if result.unread and done == EXIT_OK:
        emit(
            f"kvtop plan: incomplete: /api/show of {len(result.unread)} of {len(result.rows)} model(s) not read "
            "(listed as unread, with the reason)"
        )
        return EXIT_INCOMPLETE
    return done
