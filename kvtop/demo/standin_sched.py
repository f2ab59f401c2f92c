"""The stand-in's scheduler: a ``POST /api/generate`` for a model that is not loaded loads it the way
Ollama's scheduler does (docs/ollama-scheduler.md, ``server/sched.go`` v0.33.0-rc2), so that a test
can check kvtop's forecast (``kvtop.model.next_load``) against what ``/api/ps`` then shows.

Written as Ollama's loop is (``processPending``), not through kvtop's forecast: per load, repeat —
at ``OLLAMA_MAX_LOADED_MODELS`` (0: 3 per GPU; the stand-in has one GPU) unload one model; with
nothing loaded, load (what does not fit the GPU goes to system RAM); beside others, load when the
size is at most 80% of the free GPU memory, else unload one model. The model unloaded
(``findRunnerToUnload``): sorted by keep-alive duration (forever last), then weights blob; the first
idle one, else the first, after its requests finish (the load waits: ``POST /_standin/busy``).

The new model's size is the stand-in's own: the file size, its KV cache at num_ctx × slots
(``kv.bytes_per_token``) and :data:`COMPUTE_BYTES`. num_ctx: the request's, the Modelfile's, then
``OLLAMA_CONTEXT_LENGTH``, then the VRAM tier of ``--vram-bytes`` (v0.15.5+).

Standard library and ``kvtop.model.kv`` only. All state is guarded by the server's ``reloads_lock``
(this module's condition wraps it).
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from kvtop.demo.api_bodies import MAX_DURATION_NS, _normalise_name, _thaw, format_go_time
from kvtop.demo.scenario import CatalogModel, Scenario, Step, model_blob

COMPUTE_BYTES = 256 * 1024 * 1024
"""The compute buffers the stand-in gives every model it loads."""

GiB = 1024**3
MODELS_PER_GPU = 3
FIT_PERCENT = 80
WAIT_S = 60.0
"""How long a load waits for a busy model's requests before it gives up (HTTP 503)."""

SCHED_ENV = ("OLLAMA_CONTEXT_LENGTH", "OLLAMA_NUM_PARALLEL", "OLLAMA_MAX_LOADED_MODELS", "OLLAMA_KEEP_ALIVE")
"""The variables ``POST /_standin/env`` sets for the scheduler."""


@dataclass
class Extra:
    """A model the scheduler loaded (not one of the step's own rows)."""

    context_length: int
    size: int
    size_vram: int
    expires_ns: int
    keep_s: float


@dataclass
class Sched:
    """The scheduler's state (guarded by ``cond``, which wraps the server's ``reloads_lock``)."""

    cond: threading.Condition
    enabled: bool = False
    """``POST /_standin/sched {"enabled": true}``: a generate for a model not loaded loads it (else 404, as before)."""
    env: dict[str, str] = field(default_factory=dict)
    extras: dict[tuple[int, str], Extra] = field(default_factory=dict)
    busy: dict[str, int] = field(default_factory=dict)
    keep: dict[tuple[int, str], float] = field(default_factory=dict)
    """Keep-alive durations a request set for a step's own rows (seconds, ``inf`` forever)."""
    waiting: list[str] = field(default_factory=list)
    """The busy models a load waits for now (``GET /_standin/sched``)."""
    events: list[dict[str, Any]] = field(default_factory=list)
    """What each load did (``GET /_standin/sched``): model, unloaded in order, num_ctx, size, size_vram."""


def _int_env(env: dict[str, str], key: str) -> int:
    text = env.get(key, "").strip()
    return int(text) if text.isdigit() else 0


def _keep_s(env: dict[str, str]) -> float:
    text = env.get("OLLAMA_KEEP_ALIVE", "").strip()
    if text.lstrip("-").isdigit():
        n = int(text)
        return math.inf if n < 0 else float(n)
    if text.endswith("m") and text[:-1].lstrip("-").isdigit():
        n = int(text[:-1])
        return math.inf if n < 0 else n * 60.0
    return 300.0


def _version_at_least(version: str, want: tuple[int, int, int]) -> bool:
    parts = [int(p) for p in version.split("-")[0].split(".")[:3] if p.isdigit()]
    return tuple(parts + [0] * (3 - len(parts))) >= want


def launch(
    sched: Sched, scenario: Scenario, model: CatalogModel, options: dict[str, Any], vram: int | None, cache: str
) -> tuple[int, int, int]:
    """``(num_ctx per slot, slots, size)`` of a load of ``model`` with the request's ``options``."""
    from kvtop.model import kv

    layout = kv.layout_from_model_info(_thaw(model.model_info))
    ctx = options.get("num_ctx") if isinstance(options.get("num_ctx"), int) else None
    if ctx is None:
        for line in model.parameters.splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0] == "num_ctx" and parts[1].isdigit():
                ctx = int(parts[1])
    if ctx is None:
        ctx = _int_env(sched.env, "OLLAMA_CONTEXT_LENGTH") or None
    if ctx is None:
        if not _version_at_least(scenario.version, (0, 15, 5)):
            ctx = 4096
        else:
            total = vram or 0
            ctx = 262_144 if total >= 47 * GiB else 32_768 if total >= 23 * GiB else 4096
    train = layout.context_length_train if isinstance(layout, kv.KVLayout) else None
    ctx = min(ctx, train) if train else ctx
    slots = max(1, _int_env(sched.env, "OLLAMA_NUM_PARALLEL") or 1)
    if "completion" not in model.capabilities:
        slots = 1
    per_token = kv.bytes_per_token(layout, cache, cache) if isinstance(layout, kv.KVLayout) else 0
    return ctx, slots, (model.file_size or 0) + per_token * ctx * slots + COMPUTE_BYTES


def _loaded(server: Any, index: int, step: Step) -> list[tuple[str, int, float, str]]:
    """``(name, size_vram, keep-alive s, blob)`` of every model loaded in step ``index`` now."""
    sched: Sched = server.sched
    scenario = server.player.scenario
    keep_default = _keep_s(sched.env)
    out: list[tuple[str, int, float, str]] = []
    for row in step.loaded:
        if server.expiry.get((index, row.model), 0) is None:
            continue  # unloaded
        _, _, vram = server.reloads.get((index, row.model), (row.context_length, row.size, row.size_vram))
        keep = sched.keep.get((index, row.model))
        if keep is None:
            keep = math.inf if row.expires_in_s is None else max(keep_default, row.expires_in_s)
        out.append((row.model, vram, keep, model_blob(scenario.models[row.model])))
    for (i, name), extra in sched.extras.items():
        if i == index:
            out.append((name, extra.size_vram, extra.keep_s, model_blob(scenario.models[name])))
    return out


def _victim(server: Any, loaded: list[tuple[str, int, float, str]]) -> tuple[str, int, float, str]:
    ordered = sorted(loaded, key=lambda r: (r[2], r[3]))  # ByDurationAndName
    return next((r for r in ordered if server.sched.busy.get(r[0], 0) <= 0), ordered[0])


def _unload(server: Any, index: int, name: str) -> None:
    if server.sched.extras.pop((index, name), None) is None:
        server.expiry[(index, name)] = None


def load(server: Any, index: int, step: Step, name: str, options: dict[str, Any], keep_ns: int | None) -> str | None:
    """Load ``name`` in step ``index`` by the scheduler's rules; None when loaded, else why not."""
    sched: Sched = server.sched
    scenario = server.player.scenario
    model = scenario.models[name]
    vram_total = server.vram_bytes
    with sched.cond:
        ctx, slots, size = launch(sched, scenario, model, options, vram_total, server.kv_cache_type)
        keep_s = _keep_s(sched.env) if keep_ns is None else (math.inf if keep_ns < 0 else keep_ns / 1e9)
        max_loaded = _int_env(sched.env, "OLLAMA_MAX_LOADED_MODELS") or MODELS_PER_GPU
        unloaded: list[str] = []
        deadline = time.monotonic() + WAIT_S
        while True:
            loaded = _loaded(server, index, step)
            used = sum(r[1] for r in loaded)
            if len(loaded) >= max_loaded:
                victim = _victim(server, loaded)
            elif not loaded:
                vram = size if vram_total is None else min(size, vram_total)
                break
            elif vram_total is None or size <= (vram_total - used) * FIT_PERCENT // 100:
                vram = size
                break
            else:
                victim = _victim(server, loaded)
            sched.waiting.append(victim[0])
            idle = sched.cond.wait_for(lambda v=victim[0]: sched.busy.get(v, 0) <= 0, deadline - time.monotonic())
            sched.waiting.remove(victim[0])
            if not idle:
                return f"timed out waiting for {victim[0]}'s requests to finish"
            _unload(server, index, victim[0])
            unloaded.append(victim[0])
        now = time.time_ns()
        expires = now + MAX_DURATION_NS if keep_s == math.inf else now + int(keep_s * 1e9)
        sched.extras[(index, name)] = Extra(ctx, size, vram, expires, keep_s)
        sched.events.append(
            {"model": name, "unloaded": unloaded, "num_ctx": ctx, "parallel": slots, "size": size, "size_vram": vram}
        )
    return None


def ps_rows(server: Any, index: int) -> list[tuple[int, dict[str, Any]]]:
    """``(expires_at s, /api/ps entry)`` of the models the scheduler loaded in step ``index``."""
    scenario = server.player.scenario
    out: list[tuple[int, dict[str, Any]]] = []
    for (i, name), extra in list(server.sched.extras.items()):
        if i != index:
            continue
        model = scenario.models[name]
        entry = {
            "name": model.name,
            "model": model.name,
            "size": extra.size,
            "digest": model.digest,
            "details": model.details.to_json() | {"parent_model": ""},
            "expires_at": format_go_time(extra.expires_ns),
            "size_vram": extra.size_vram,
            "context_length": extra.context_length,
        }
        out.append((extra.expires_ns // 1_000_000_000, entry))
    return out


def merge_ps(body: dict[str, Any], extra: list[tuple[int, dict[str, Any]]]) -> dict[str, Any]:
    """``body`` (``ps_body``) with the scheduler's rows, longest remaining ``expires_at`` first."""
    if not extra:
        return body
    import re
    from datetime import datetime

    def secs(entry: dict[str, Any]) -> int:
        m = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.\d+)?(Z|[+-]\d\d:\d\d)$", str(entry.get("expires_at")))
        if m is None:
            return 0
        return int(datetime.fromisoformat(m.group(1) + ("+00:00" if m.group(2) == "Z" else m.group(2))).timestamp())

    rows = [(secs(e), e) for e in body["models"]] + extra
    rows.sort(key=lambda item: -item[0])
    return {"models": [e for _, e in rows]}


# HTTP routes (the handler's ``_json``/``_error``)


def sched_route(handler: Any, method: str, path: str) -> None:
    """``POST /_standin/busy``; ``POST /_standin/sched`` ``{"enabled": true}`` (generates load by the rules);
    ``GET /_standin/sched`` (the loads made, the environment, the models a load waits for)."""
    sched: Sched = handler.server.sched
    if path == "/_standin/busy" and method == "POST":
        busy_route(handler, handler._json_body(required=True))
    elif method == "POST":
        sched.enabled = bool(handler._json_body(required=True).get("enabled"))
        handler._json(200, {"enabled": sched.enabled})
    elif method == "GET":
        with sched.cond:
            handler._json(200, {"loads": list(sched.events), "env": dict(sched.env), "waiting": list(sched.waiting)})
    else:
        handler._drain()
        handler._error(404, "not found")


def busy_route(handler: Any, body: dict[str, Any]) -> None:
    """``POST /_standin/busy`` ``{"model": NAME, "requests": N}``: N requests in flight on a loaded
    model (the scheduler does not unload it while another is idle, and waits for it otherwise)."""
    name, n = body.get("model"), body.get("requests")
    if not isinstance(name, str) or not isinstance(n, int) or isinstance(n, bool) or n < 0:
        handler._error(400, "expected {'model': NAME, 'requests': N >= 0}")
        return
    sched = handler.server.sched
    with sched.cond:
        sched.busy[_normalise_name(name)] = n
        sched.cond.notify_all()
    handler._json(200, {"model": _normalise_name(name), "requests": n})


def load_route(handler: Any, index: int, step: Step, name: str, options: dict[str, Any], keep_ns: int | None) -> None:
    """A generate for a model not loaded: ``kvtop.demo.standin_sched.load`` (Ollama's scheduler rules)."""
    models = handler.server.player.scenario.models
    known = next((n for n in models if n.lower() == name), None)
    if known is None:
        handler._error(404, f"model '{name}' not found")
        return
    if (index, known) in handler.server.sched.extras and options.get("num_ctx") in (
        None,
        handler.server.sched.extras[(index, known)].context_length,
    ):
        handler._json(200, {"model": known, "created_at": format_go_time(time.time_ns()), "response": "", "done": True})
        return  # loaded by the scheduler already: served by it
    why = load(handler.server, index, step, known, options, keep_ns)
    if why is not None:
        handler._error(503, why)
        return
    handler._json(
        200,
        {
            "model": known,
            "created_at": format_go_time(time.time_ns()),
            "response": "",
            "done": True,
            "done_reason": "load",
        },
    )
