"""``kvtop plan --all``: the pre-flight of every pulled model (``kvtop.model.preflight``), one row
each, read through a ``PulledSource``, and its table and ``--json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


from kvtop.sources.auth import ServerAccess

from kvtop.model import plan
from kvtop.model.known import NOT_KNOWN, ibytes
from kvtop.model.next_load_view import next_load_cell
from kvtop.plan_cli.inputs import EXIT_INCOMPLETE, PlanError, all_budget_s
from kvtop.plan_cli.result import _est


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
    next_loads: tuple[Any, ...] = ()
    """Per row, what loading it now would do (``model.next_load.NextLoad``), None where unread."""


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
        return sum(
            int(nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(i)).total)
            for i in range(int(nvml.nvmlDeviceGetCount()))
        )
    except Exception:  # noqa: BLE001
        return None
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001, S110 - shutting NVML down must not hide the answer
            pass


async def fetch_all(
    host: str, timeout: float, access: ServerAccess | None = None
) -> tuple[str | None, Any, tuple[Any, ...], list[str]]:
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


def make_all(
    args: argparse.Namespace,
    host: str,
    version: str | None,
    pulled: Any,
    loaded: Sequence[Any],
    *,
    free_bytes: int | None,
    free_source: str,
    total_bytes: int | None,
    notes: Sequence[str] = (),
) -> AllResult:
    """The pre-flight rows for ``kvtop plan --all`` (pure given its inputs)."""
    from kvtop.model import preflight
    from kvtop.model.known import Known

    from kvtop.plan_cli.next_load_cli import parse_env

    env = parse_env(getattr(args, "env", None))
    d = running = preflight.server_defaults(version, env, total_bytes)
    if args.ctx:
        d = dataclasses.replace(d, num_ctx=Known(args.ctx[0], "requested", "--ctx"))
    if args.kv:
        d = dataclasses.replace(d, cache_type=Known(args.kv[0], "requested", "--kv"))
    if args.parallel is not None:
        d = dataclasses.replace(d, parallel=Known(args.parallel, "requested", "--parallel"))
    if args.flash_attention is not None:
        d = dataclasses.replace(
            d, flash_attention=Known(args.flash_attention == "on", "requested", "--flash-attention")
        )
    more = list(notes)
    if d.num_ctx.source == "estimated":
        more.append(
            f"num_ctx ~{d.num_ctx.value} is assumed: Ollama v0.15.5+ picks its default from the GPUs' "
            "total memory (4096 under 23 GiB, 32768 from 23 GiB, 262144 from 47 GiB), which is not known "
            "here, so the smallest is assumed; --gpu-free auto reads it (NVML, on the server's machine), "
            "or pass --gpu-total or --ctx"
        )
    assumed = [
        what
        for what, given in (
            ("OLLAMA_CONTEXT_LENGTH as unset (--ctx)", args.ctx or env),
            ("the KV type f16 (--kv)", args.kv),
            ("1 slot (--parallel)", args.parallel is not None),
            ("flash attention on (--flash-attention)", args.flash_attention is not None),
        )
        if not given
    ]
    if assumed:
        more.append(
            f"assumed Ollama's defaults: {', '.join(assumed)}: the server's own settings are not readable over the API"
        )
    rows = preflight.preflight(
        pulled, d, free_bytes=free_bytes, loaded=loaded, engine=plan.engine_for_version(version), running=running
    )
    not_asked = f"not asked: the {all_budget_s(args.timeout):g} s for all of them ran out first"
    loads = _next_loads(args, version, env, d, pulled, loaded, free_bytes)
    return AllResult(
        host,
        version,
        d,
        free_bytes,
        free_source,
        total_bytes,
        rows,
        tuple(more),
        preflight.unread(rows, not_asked),
        loads,
    )


def _next_loads(
    args: argparse.Namespace,
    version: str | None,
    env: Any,
    d: Any,
    pulled: Any,
    loaded: Sequence[Any],
    free: int | None,
) -> tuple[Any, ...]:
    """The next-load forecast of every pulled model (``model.next_load``), None for one not read."""
    import time

    from kvtop.model.known import Known
    from kvtop.model.next_load_view import forecast_model

    shows = pulled.shows if pulled is not None else {}
    blobs = {
        row.name: shows[row.digest].model_blob for row in loaded if row.digest in shows and shows[row.digest].model_blob
    }
    busy = {
        row.name: Known(True, "requested", "--in-use")
        for row in loaded
        for b in (args.in_use or ())
        if _same(row.name, b)
    }
    out: list[Any] = []
    for digest, tag in (pulled.tags or {}).items():
        show = shows.get(digest)
        if show is None or show.error or show.remote:
            out.append(None)
            continue
        spec = plan.model_spec(tag.name, show.model_info, file_size=tag.size_bytes)
        out.append(
            forecast_model(
                tag.name, spec, d, version=version, env=env, loaded=loaded, free_bytes=free, gpu_count=args.gpus,
                now_s=time.time(), show=show, blobs=blobs, busy=busy, engine=plan.engine_for_version(version),
                num_ctx=d.num_ctx if args.ctx else None,
            )
        )  # fmt: skip
    return tuple(out)


def _same(a: str, b: str) -> bool:
    def full(name: str) -> str:
        name = name.strip().lower()
        return name if ":" in name.rsplit("/", 1)[-1] else name + ":latest"

    return full(a) == full(b)


def all_json(r: AllResult) -> dict[str, Any]:
    """The ``kvtop plan --all --json`` document (bytes exact; ``verdict`` per model)."""
    from kvtop.model.next_load_view import next_load_json
    from kvtop.model.preflight import defaults_json, preflight_json

    return {
        "host": r.host,
        "version": r.version,
        "defaults": defaults_json(r.defaults),
        "gpu": {"free_bytes": r.free_bytes, "free_source": r.free_source or None, "total_bytes": r.total_bytes},
        "models": [
            preflight_json(row) | {"next_load": next_load_json(n) if n is not None else None}
            for row, n in zip(r.rows, r.next_loads or (None,) * len(r.rows))
        ],
        "notes": list(r.notes),
        "complete": not r.unread,
        "unread": [{"name": name, "reason": why} for name, why in r.unread],
    }


def all_text(r: AllResult) -> str:
    """The ``kvtop plan --all`` table."""
    from kvtop.model.known import SOURCE_LEGEND, context_pair, setting_text

    d = r.defaults
    out = [
        f"kvtop plan --all — {r.host}" + (f" (Ollama {r.version})" if r.version else ""),
        f"  each at num_ctx {context_pair(d.num_ctx, d.parallel, sep=' × ')} slot(s), KV {setting_text(d.cache_type)}, "
        f"flash attention {setting_text(d.flash_attention)}",
        f"  {SOURCE_LEGEND}",
        "  GPU free: "
        + (
            f"{ibytes(r.free_bytes)} ({r.free_source})"
            if r.free_bytes is not None
            else "not given: no fit verdict (--gpu-free BYTES|auto)"
        ),
        "",
    ]
    table = [["NAME", "SIZE", "NUM_CTX", "KV", "TOTAL", "GPU NEED", "FIT NOW", "MAX NUM_CTX", "NEXT LOAD"]]
    calibrated: list[str] = []
    for row, n in zip(r.rows, r.next_loads or (None,) * len(r.rows)):
        fit = row.verdict + (f" ({row.note})" if row.note and row.verdict not in ("fits",) else "")
        table.append(
            [
                row.name,
                ibytes(row.size_bytes),
                setting_text(row.num_ctx),
                _sized(row.kv_bytes, row.kv_source),
                _sized(row.total_bytes, row.total_source),
                _est(row.gpu_bytes),
                fit,
                NOT_KNOWN if row.max_num_ctx is None else row.max_num_ctx_text,
                next_load_cell(n),
            ]
        )
        if row.calibration:
            calibrated.append(f"{row.name}: {row.calibration}")
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    for line in table:
        out.append(
            "  "
            + "  ".join(
                c.ljust(widths[i]) if i in (0, 6, 8) else c.rjust(widths[i]) for i, c in enumerate(line)
            ).rstrip()
        )
    if not r.rows:
        out.append("  (no pulled models)")
    out.append("")
    out.extend(f"  loaded  {c}; its unmarked figures are its own" for c in calibrated)
    out.extend(f"  note  {n}" for n in r.notes)
    if any(n is not None for n in r.next_loads):
        first = next(n for n in r.next_loads if n is not None)
        out.append(
            f"  next load: what loading it now does (Ollama's scheduler, docs/ollama-scheduler.md): at most "
            f"{setting_text(first.rules.max_loaded)} models loaded; beside others a model takes at most "
            f"{round(first.rules.fit_fraction * 100)}% of the free GPU memory, else the shortest keep-alive goes first; "
            "kvtop plan MODEL says more"
        )
    if r.unread:
        out.append(
            f"  incomplete: /api/show of {len(r.unread)} of {len(r.rows)} model(s) not read (exit {EXIT_INCOMPLETE}):"
        )
        out.extend(f"  unread  {name}: {why}" for name, why in r.unread)
    return "\n".join(out) + "\n"


def _sized(n: int | None, source: str) -> str:
    """A size with its source's mark: ``~5.7 GiB`` estimated, ``5.9 GiB`` allocated or reported."""
    from kvtop.model.known import marked

    return marked(n, source or None, size=True)
