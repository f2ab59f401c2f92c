"""What a process's command line says about Ollama: ``classify_cmdline`` recognises the server, a
runner of every era (with the weights blob from ``--model`` and its memory flags) or a GPU-discovery
runner (docs/ollama-internals.md §7); ``blob_of`` reads a weights blob's name from a path.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from kvtop.logparse.cmdline import parse_cmd
from kvtop.model.gpu_snapshots import RunnerKind, RunnerProcess

_BLOB = re.compile(r"sha256[-:]([0-9a-f]{64})")
"""A weights blob file name: ``sha256-<hex>`` (``sha256:<hex>`` in very old stores)."""

ERA = {
    "ollama_llama_server": "v0.1.32–v0.5.1",
    "runner_ctx": "v0.5.2–v0.11.4",
    "runner": "v0.11.5–v0.24",
    "llama-server": "v0.30+",
    "mlx runner": "v0.16+ (MLX)",
}

CmdKind = Literal["server", "runner", "discovery"]


@dataclass(frozen=True, slots=True)
class Cmdline:
    """What a command line says about an Ollama process (``classify_cmdline``)."""

    kind: CmdKind
    runner_kind: RunnerKind | None = None
    era: str = ""
    model_arg: str | None = None
    blob: str | None = None
    model_name: str | None = None
    port: int | None = None
    ctx_size: int | None = None
    parallel: int | None = None
    engine: str | None = None
    ollama_path: bool = False
    """The executable or the model path says Ollama (needed to claim a bare ``llama-server``)."""
    cache_type_k: str | None = None
    cache_type_v: str | None = None
    flash_attn: str | None = None
    n_gpu_layers: int | None = None
    tensor_split: str | None = None


def _with_requests(c: Cmdline, argv: Sequence[str]) -> Cmdline:
    """``c`` with what the runner's flags request for memory (every era's spelling, through the
    log parser's ``logparse.cmdline.parse_cmd``, so a log's spawn line and a live process read alike)."""
    a = parse_cmd(" ".join(argv))
    k = (a.cache_type_k or a.kv_cache_type or "").lower() or None
    v = (a.cache_type_v or "").lower() or None
    return dataclasses.replace(
        c,
        cache_type_k=k,
        cache_type_v=v,
        flash_attn=a.flash_attn.lower() if a.flash_attn is not None else None,
        n_gpu_layers=a.n_gpu_layers,
        tensor_split=a.tensor_split,
        ctx_size=c.ctx_size if c.ctx_size is not None else a.ctx_size,
        parallel=c.parallel if c.parallel is not None else a.parallel,
    )


def _basename(path: str) -> str:
    name = re.split(r"[\\/]", path)[-1].lower()
    return name[:-4] if name.endswith(".exe") else name


def _opt(argv: Sequence[str], *names: str) -> str | None:
    """The value of the first of ``names`` (``--x v`` or ``--x=v``), None when absent."""
    for i, arg in enumerate(argv):
        for name in names:
            if arg == name and i + 1 < len(argv):
                return argv[i + 1]
            if arg.startswith(name + "="):
                return arg[len(name) + 1 :]
    return None


def _has(argv: Sequence[str], *names: str) -> bool:
    return any(a == n or a.startswith(n + "=") for a in argv for n in names)


def _int_opt(argv: Sequence[str], *names: str) -> int | None:
    value = _opt(argv, *names)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def blob_of(model_path: str | None) -> str | None:
    """``sha256-<hex>`` when ``model_path``'s file name is a weights blob, else None."""
    if not model_path:
        return None
    m = _BLOB.fullmatch(re.split(r"[\\/]", model_path)[-1])
    return f"sha256-{m.group(1)}" if m else None


def classify_cmdline(argv: Sequence[str]) -> Cmdline | None:
    """Recognise an Ollama server, runner or GPU-discovery runner from its argv (``_classify``),
    with a runner's memory-relevant flags read (cache types, flash attention, GPU layers)."""
    argv = list(argv)
    if len(argv) == 1 and " " in argv[0] and ("--model" in argv[0] or argv[0].split()[1:2] in (["serve"], ["runner"])):
        argv = argv[0].split()  # a process that rewrote its title into one string
    c = _classify(argv)
    if c is None or c.kind != "runner":
        return c
    return _with_requests(c, argv)


def _classify(argv: Sequence[str]) -> Cmdline | None:
    """Recognise an Ollama server, runner or GPU-discovery runner from its argv (§7); else None.

    * ``ollama serve``.
    * v0.1.32–v0.5.1: ``…/runners/<variant>/ollama_llama_server --model <blob> … --port N``.
    * v0.5.2–v0.24: ``<ollama or runner binary> runner [--ollama-engine] --model <blob> … --port N``
      (``--mlx-engine``: ``--model`` is a model name).
    * v0.30+: ``…/lib/ollama/llama-server --model <blob> --port N … -c <cells> -np <slots>``.

    A runner-shaped command line without ``--model`` is a GPU-discovery runner. A
    ``llama-server`` only counts when its path or its ``--model`` blob says Ollama
    (``Cmdline.ollama_path``); the caller also accepts one whose parent is ``ollama serve``.
    """
    argv = list(argv)
    if len(argv) == 1 and " " in argv[0] and ("--model" in argv[0] or argv[0].split()[1:2] in (["serve"], ["runner"])):
        argv = argv[0].split()  # a process that rewrote its title into one string
    if not argv:
        return None
    exe = _basename(argv[0])
    rest = argv[1:]
    ollama_in_path = "ollama" in argv[0].lower()
    if exe.startswith("ollama") and not exe.startswith("ollama_llama_server") and rest[:1] == ["serve"]:
        return Cmdline(kind="server", ollama_path=True)
    if rest[:1] == ["runner"] and ("ollama" in exe or "llama" in exe):
        model = _opt(rest, "--model")
        port = _int_opt(rest, "--port")
        if "--mlx-engine" in rest:
            if model is None:
                return Cmdline(kind="discovery", runner_kind="mlx runner", era=ERA["mlx runner"], port=port)
            return Cmdline(
                kind="runner",
                runner_kind="mlx runner",
                era=ERA["mlx runner"],
                model_arg=model,
                blob=blob_of(model),
                model_name=None if blob_of(model) else model,
                port=port,
                engine="mlx",
                ollama_path=True,
            )
        ctx = _int_opt(rest, "--ctx-size")
        era = ERA["runner_ctx"] if ctx is not None else ERA["runner"]
        if model is None:
            return Cmdline(kind="discovery", runner_kind="ollama runner", era=era, port=port, ollama_path=True)
        return Cmdline(
            kind="runner",
            runner_kind="ollama runner",
            era=era,
            model_arg=model,
            blob=blob_of(model),
            port=port,
            ctx_size=ctx,
            parallel=_int_opt(rest, "--parallel"),
            engine="ollama" if "--ollama-engine" in rest else "llama.cpp",
            ollama_path=True,
        )
    if exe.startswith("ollama_llama_server"):
        model = _opt(rest, "--model")
        port = _int_opt(rest, "--port")
        era = ERA["ollama_llama_server"]
        if model is None:
            return Cmdline(kind="discovery", runner_kind="ollama_llama_server", era=era, port=port, ollama_path=True)
        return Cmdline(
            kind="runner",
            runner_kind="ollama_llama_server",
            era=era,
            model_arg=model,
            blob=blob_of(model),
            port=port,
            ctx_size=_int_opt(rest, "--ctx-size"),
            parallel=_int_opt(rest, "--parallel"),
            engine="llama.cpp",
            ollama_path=True,
        )
    if exe == "llama-server":
        model = _opt(rest, "--model", "-m")
        blob = blob_of(model)
        ollama = ollama_in_path or blob is not None
        era = ERA["llama-server"]
        if model is None or _has(rest, "--list-devices"):
            return Cmdline(
                kind="discovery",
                runner_kind="llama-server",
                era=era,
                port=_int_opt(rest, "--port"),
                ollama_path=ollama_in_path,
            )
        return Cmdline(
            kind="runner",
            runner_kind="llama-server",
            era=era,
            model_arg=model,
            blob=blob,
            port=_int_opt(rest, "--port"),
            ctx_size=_int_opt(rest, "-c", "--ctx-size"),
            parallel=_int_opt(rest, "-np", "--parallel"),
            engine="llama.cpp",
            ollama_path=ollama,
        )
    return None


def runner_process(
    pid: int,
    c: Cmdline,
    *,
    ppid: int | None,
    server_pid: int | None,
    user: str | None,
    rss_bytes: int | None,
    cmdline: tuple[str, ...],
) -> RunnerProcess:
    """The runner a classified command line describes (``c.kind == "runner"``), with what the
    process table adds: its parent, the server it belongs to, owner, RSS and the (masked) argv.

    Raises:
        ValueError: ``c`` is not a runner's command line.
    """
    if c.runner_kind is None:
        raise ValueError("not a runner's command line")
    return RunnerProcess(
        pid=pid,
        kind=c.runner_kind,
        era=c.era,
        model_arg=c.model_arg,
        blob=c.blob,
        model_name=c.model_name,
        port=c.port,
        ctx_size=c.ctx_size,
        parallel=c.parallel,
        engine=c.engine,
        cache_type_k=c.cache_type_k,
        cache_type_v=c.cache_type_v,
        flash_attn=c.flash_attn,
        n_gpu_layers=c.n_gpu_layers,
        tensor_split=c.tensor_split,
        ppid=ppid,
        server_pid=server_pid,
        user=user,
        rss_bytes=rss_bytes,
        cmdline=cmdline,
    )
