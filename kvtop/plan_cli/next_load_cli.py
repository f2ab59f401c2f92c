"""``kvtop plan``'s next-load forecast (``model.next_load``, docs/ollama-scheduler.md): its inputs
from the command line (``--env``, ``--gpus``, ``--gpu-total``, ``--in-use``), a local GGUF file
(``--gguf PATH``, read with ``sources.gguf_file``), and what the server has loaded.
"""

from __future__ import annotations

import dataclasses

import argparse
import os
from collections.abc import Sequence
from typing import Any

import httpx

from kvtop.model import plan
from kvtop.model.known import Known
from kvtop.model.next_load import NextLoad
from kvtop.model.next_load_view import forecast_model
from kvtop.model.preflight import ServerDefaults, server_defaults
from kvtop.plan_cli.inputs import PlanError, PlanInput, _client, _get, loaded_models
from kvtop.sources.auth import ServerAccess

__all__ = ["add_arguments", "forecast_for", "parse_env", "read_gguf_input", "server_loaded"]

SCHEDULER_ENV = (
    "OLLAMA_CONTEXT_LENGTH",
    "OLLAMA_NUM_PARALLEL",
    "OLLAMA_MAX_LOADED_MODELS",
    "OLLAMA_KEEP_ALIVE",
    "OLLAMA_KV_CACHE_TYPE",
    "OLLAMA_FLASH_ATTENTION",
    "OLLAMA_GPU_OVERHEAD",
)
"""The variables the forecast reads (docs/ollama-scheduler.md §1, §2)."""


def _env_item(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip().startswith("OLLAMA_"):
        raise argparse.ArgumentTypeError(f"expected OLLAMA_NAME=VALUE, got {text!r}")
    return key.strip(), value.strip()


def _count(text: str) -> int:
    if not text.isdigit() or int(text) > 64:
        raise argparse.ArgumentTypeError(f"a GPU count 0–64, got {text!r}")
    return int(text)


def add_arguments(p: argparse.ArgumentParser, gpu_bytes: Any) -> None:
    """The forecast's arguments of ``kvtop plan`` (``gpu_bytes``: the size parser of ``--gpu-free``)."""
    p.add_argument(
        "--gguf",
        metavar="PATH",
        default=None,
        help="plan a local GGUF file (its header: architecture, layers, tensors) instead of a pulled model",
    )
    p.add_argument(
        "--env",
        type=_env_item,
        action="append",
        metavar="OLLAMA_NAME=VALUE",
        help="the server's environment, for the next-load forecast (repeatable; e.g. OLLAMA_MAX_LOADED_MODELS=2; "
        "not readable over the API: Ollama's defaults otherwise)",
    )
    p.add_argument(
        "--gpus",
        type=_count,
        default=None,
        metavar="N",
        help="GPUs the server sees (the default OLLAMA_MAX_LOADED_MODELS is 3 per GPU; without it 1 is assumed, marked ~)",
    )
    p.add_argument(
        "--gpu-total",
        type=gpu_bytes,
        default=None,
        metavar="BYTES",
        help="total GPU memory of the server (its default num_ctx tier; default: NVML with --gpu-free auto)",
    )
    p.add_argument(
        "--in-use",
        action="append",
        metavar="MODEL",
        default=None,
        help="a loaded model serving requests now (repeatable): the scheduler does not unload it while another "
        "is idle (the API does not say)",
    )


def parse_env(items: Sequence[tuple[str, str]] | None) -> dict[str, str] | None:
    """``--env`` pairs as a map; None when none was given (the server's environment is then not known)."""
    return dict(items) if items else None


def read_gguf_input(path: str, name: str | None, version: str | None) -> PlanInput:
    """``--gguf PATH``: the planner's model from a GGUF header (metadata, tensor list, file size).

    Raises:
        PlanError: The file cannot be read or is not GGUF.
    """
    from kvtop.sources.gguf_file import GgufError, read_gguf_header

    try:
        header = read_gguf_header(path)
    except OSError as exc:
        raise PlanError(f"cannot read {path}: {exc.strerror or exc}") from None
    except GgufError as exc:
        raise PlanError(f"{path}: {exc}") from None
    label = name or os.path.basename(path)
    spec = plan.model_spec(
        label,
        header.model_info,
        tensors=header.tensors or None,
        file_size=header.file_size_bytes,
        file_size_note="the GGUF file's size",
    )
    return PlanInput(spec, f"--gguf {path} (GGUF v{header.version})", version, None, None, False)


def server_loaded(
    host: str, access: ServerAccess, timeout: float, transport: httpx.BaseTransport | None
) -> tuple[str | None, tuple[Any, ...], dict[str, str], list[str]]:
    """``(version, /api/ps rows, loaded name → blob, notes)`` of ``host`` for a ``--gguf`` plan; a server
    that cannot be read gives nothing loaded and a note, not an error."""
    notes: list[str] = []
    try:
        with _client(host, timeout, transport, access) as client:
            v = _get(client, "GET", "/api/version")
            version = v.get("version") if isinstance(v, dict) and isinstance(v.get("version"), str) else None
            rows, blobs = loaded_models(client, notes)
    except PlanError as exc:
        return None, (), {}, [f"{exc}: the forecast assumes nothing is loaded"]
    return version, rows, blobs, notes


def forecast_for(
    inp: PlanInput,
    args: argparse.Namespace,
    *,
    free_bytes: int | None,
    total_bytes: int | None,
    now_s: float,
    given: Sequence[str] = (),
) -> tuple[NextLoad, ServerDefaults]:
    """The forecast of loading ``inp``'s model now. The server's settings come from ``--env``, except
    the ones the command line gave explicitly (``given``: ``kv``, ``parallel``, ``flash_attention``,
    ``ctx``, whose first value is then the request's num_ctx)."""
    env = parse_env(getattr(args, "env", None))
    d = server_defaults(inp.version, env, total_bytes)
    server = d
    if "kv" in given and args.kv:
        d = _replace(d, cache_type=Known(args.kv[0], "requested", "--kv"))
    if "parallel" in given:
        d = _replace(d, parallel=Known(args.parallel, "requested", "--parallel"))
    if "flash_attention" in given:
        d = _replace(d, flash_attention=Known(args.flash_attention == "on", "requested", "--flash-attention"))
    busy = {name: Known(True, "requested", "--in-use") for name in (getattr(args, "in_use", None) or ())}
    for row in inp.ps_rows:
        if any(_same(row.name, b) for b in busy):
            busy[row.name] = Known(True, "requested", "--in-use")
    # KV type, slots and flash attention are the server's settings: another value than the server's means
    # a restart of ollama serve with it, which unloads every model first (docs/ollama-scheduler.md)
    changed = [
        f"{flag} {new.value}"
        for flag, new, old in (
            ("--kv", d.cache_type, server.cache_type),
            ("--parallel", d.parallel, server.parallel),
            ("--flash-attention", d.flash_attention, server.flash_attention),
        )
        if new.value != old.value
    ]
    loaded = inp.ps_rows
    if changed and loaded:
        held = sum(r.size_vram_bytes or 0 for r in loaded)
        free_bytes = None if free_bytes is None else free_bytes + held
        loaded = ()
    n = forecast_model(
        inp.spec.name,
        inp.spec,
        d,
        version=inp.version,
        env=env,
        loaded=loaded,
        free_bytes=free_bytes,
        gpu_count=getattr(args, "gpus", None),
        now_s=now_s,
        show=inp.show,
        blobs=inp.loaded_blobs,
        busy=busy,
        num_ctx=Known(args.ctx[0], "requested", "--ctx") if "ctx" in given and args.ctx else None,
        engine=plan.engine_for_version(inp.version),
    )
    if changed and inp.ps_rows:
        note = (
            f"{', '.join(changed)}: server settings, not the server's now; setting them restarts ollama serve, "
            f"which unloads every model ({', '.join(r.name for r in inp.ps_rows)}): the load starts on an empty server"
        )
        n = dataclasses.replace(n, notes=(note, *n.notes))
    return n, d


def _replace(d: ServerDefaults, **changes: Any) -> ServerDefaults:
    import dataclasses

    return dataclasses.replace(d, **changes)


def _same(a: str, b: str) -> bool:
    def full(name: str) -> str:
        name = name.strip().lower()
        return name if ":" in name.rsplit("/", 1)[-1] else name + ":latest"

    return full(a) == full(b)
