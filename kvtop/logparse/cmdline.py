"""Runner command lines, as Ollama logs them in its spawn lines (docs/ollama-internals.md §4.2–§4.4, §7).

=====  ============================================================================================
Era    argv shape (``cmd=`` of the spawn line)
=====  ============================================================================================
A      ``…/runners/<variant>/ollama_llama_server --model <blob> --ctx-size N … --parallel N --port N``
B1     ``ollama runner [--ollama-engine] --model <blob> --ctx-size N … --parallel N --port N``
B2     ``ollama runner [--ollama-engine] --model <blob> --port N`` (the rest is in ``load request``)
C      ``…/llama-server --model <blob> --port N … -c <ctx×np> -np N … --flash-attn on|off|auto``
=====  ============================================================================================

v0.4.0–v0.5.1 (B1) still ran ``…/runners/<variant>/ollama_llama_server``; without a server
version such a line is taken as Era A. A spawn without ``--model`` is a GPU-discovery runner.
"""

from __future__ import annotations

import re
from string import ascii_letters as _ASCII_LETTERS  # noqa: N812 - a module constant
from typing import NamedTuple

from kvtop.logparse.values import blob_of, to_count, to_int

_FLAG_RE = re.compile(r" (--?[A-Za-z][\w-]*)(?:(?:=| +(?=[^-\s]|-\d))(\S*))?")
"""`` --flag``, ``=value`` or `` value`` (a value does not start with ``-`` unless a number follows it)."""
_RUNNER_RE = re.compile(r"(?:^|\s)runner(?:\s|$)")
_FA_VALUES = frozenset({"on", "off", "auto", "true", "false", "1", "0", "enabled", "disabled"})


class RunnerArgs(NamedTuple):
    """The parts of a runner argv that matter for memory (None: flag absent)."""

    era: str | None
    engine: str | None
    model_blob: str | None
    model_path: str | None
    mmproj_blob: str | None
    port: int | None
    ctx_size: int | None
    parallel: int | None
    batch_size: int | None
    ubatch_size: int | None
    n_gpu_layers: int | None
    tensor_split: str | None
    main_gpu: int | None
    threads: int | None
    flash_attn: str | None
    kv_cache_type: str | None
    cache_type_k: str | None
    cache_type_v: str | None
    no_mmap: bool


def _model_path(cmd: str) -> str | None:
    """The ``--model`` value, which may contain spaces (``C:\\Users\\John Doe\\…``): it runs to the next flag."""
    i = cmd.find(" --model ")
    if i < 0:
        i = cmd.find(" -m ")
        if i < 0:
            return None
        j = i + 4
    else:
        j = i + 9
    # the value ends where whitespace and then a flag (``-x``, ``--x``) follow
    d = cmd.find("-", j + 1)
    while d > 0:
        if cmd[d - 1].isspace():
            c = cmd[d + 1 : d + 2]
            if c == "-":
                c = cmd[d + 2 : d + 3]
            if c and c in _ASCII_LETTERS:
                return cmd[j:d].strip() or None
        d = cmd.find("-", d + 1)
    return cmd[j:].strip() or None


def parse_cmd(cmd: str) -> RunnerArgs:
    """Read a runner command line (a path with spaces before the flags is tolerated)."""
    flags = dict(_FLAG_RE.findall(cmd))
    g = flags.get
    flash_attn: str | None = None
    fa = g("--flash-attn", g("-fa"))
    if fa is not None:
        flash_attn = fa if fa.lower() in _FA_VALUES else "true"
    model_path = _model_path(cmd)
    exe = cmd.split(" -", 1)[0].replace("\\", "/").lower()
    era: str | None
    engine: str | None
    if "llama-server" in exe:
        era, engine = "C", "llama"
    elif _RUNNER_RE.search(exe):
        if "--mlx-engine" in flags:
            era, engine = None, "mlx"
        else:
            engine = "ollama" if "--ollama-engine" in flags else "llama"
            era = "B1" if ("--ctx-size" in flags or "--parallel" in flags) else "B2"
    elif "ollama_llama_server" in exe:
        era, engine = "A", "llama"
    else:
        era, engine = None, "ollama" if "--ollama-engine" in flags else None
    return RunnerArgs(
        era,
        engine,
        blob_of(model_path),
        model_path,
        blob_of(g("--mmproj")),
        to_count(g("--port") or None),
        to_count(g("--ctx-size") or g("-c") or None),
        to_count(g("--parallel") or g("-np") or None),
        to_count(g("--batch-size") or g("-b") or None),
        to_count(g("--ubatch-size") or g("-ub") or None),
        to_int(g("--n-gpu-layers") or g("-ngl") or g("--gpu-layers") or None),
        g("--tensor-split") or g("-ts") or None,
        to_int(g("--main-gpu") or g("-mg") or None),
        to_int(g("--threads") or g("-t") or None),
        flash_attn,
        g("--kv-cache-type") or None,
        g("--cache-type-k") or g("-ctk") or None,
        g("--cache-type-v") or g("-ctv") or None,
        "--no-mmap" in flags,
    )


def era_of_version(version: str | None) -> str | None:
    """The runner era of an Ollama release (§0): ``0.3.14`` -> A, ``0.5.7`` -> B1, ``0.12.3`` -> B2, ``0.30.1`` -> C."""
    if not version:
        return None
    m = re.match(r"v?(\d+)\.(\d+)\.(\d+)", version.strip())
    if m is None:
        return None
    v = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
    if v < (0, 1, 32):
        return "pre-A"
    if v < (0, 4, 0):
        return "A"
    if v < (0, 11, 5):
        return "B1"
    if v < (0, 30, 0):
        return "B2"
    return "C"
