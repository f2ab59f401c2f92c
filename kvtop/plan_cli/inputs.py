"""What ``kvtop plan`` works from: the model's ``/api/show`` answer (from the server, read-only, or a
saved file), whether it is loaded, the free GPU memory (NVML), a calibration from a server log; the
exit codes and :class:`PlanError`, the one-line reason to stop.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from kvtop.sources.auth import ServerAccess

from kvtop.model import kv, plan
from kvtop.model.ctx_served import ServedRequests


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
    ps_rows: tuple[Any, ...] = ()
    """Every ``/api/ps`` row (``PsModel``): what is loaded now, for the next-load forecast."""
    loaded_blobs: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Loaded model name → its weights blob (``/api/show`` Modelfile ``FROM``): the unload order's tiebreak."""
    show: Any = None
    """The model's ``/api/show`` as a ``ShowInfo`` (Modelfile ``num_ctx``, capabilities), None offline."""


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


def _client(
    base_url: str, timeout: float, transport: httpx.BaseTransport | None, access: ServerAccess | None = None
) -> httpx.Client:
    """A client of ``base_url`` with its credentials, headers and TLS trust (``sources.auth``)."""
    access = access if access is not None else ServerAccess(base_url)
    return httpx.Client(**access.client_options(base_url=base_url, timeout=httpx.Timeout(timeout), transport=transport))


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


def fetch_input(
    base_url: str,
    name: str,
    *,
    timeout: float = 10.0,
    transport: httpx.BaseTransport | None = None,
    access: ServerAccess | None = None,
) -> PlanInput:
    """Read what the planner needs from an Ollama server (read-only requests only).

    Raises:
        PlanError: Unreachable server, unknown model, or an answer of the wrong shape.
    """
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
        from kvtop.sources.ollama_decode import parse_show

        show_info = parse_show(show, digest=digest or "", name=name)
        loaded: Loaded | None = None
        rows, blobs = loaded_models(client, notes)
        for row in rows:
            if _same_model(row.name, name) or (digest is not None and row.digest == digest):
                loaded = Loaded(row.size_bytes, row.size_vram_bytes, row.context_length)
                break
    if file_size is None and not remote:
        notes.append("/api/tags does not list this model: its file size is not known")
    spec = plan.model_spec(name, info, tensors=tensors, file_size=file_size)
    return PlanInput(spec, base_url, version, blob, loaded, remote, tuple(notes), rows, blobs, show_info)


def loaded_models(client: httpx.Client, notes: list[str]) -> tuple[tuple[Any, ...], dict[str, str]]:
    """``/api/ps`` rows and each loaded model's weights blob (``/api/show`` without ``verbose``: the
    Modelfile's ``FROM``), read-only; what cannot be read is left out with a note in ``notes``."""
    from kvtop.sources.ollama_decode import ShapeError, parse_ps, parse_show

    try:
        rows = parse_ps(_get(client, "GET", "/api/ps"))
    except (_HttpError, ShapeError):
        notes.append("/api/ps could not be read: treated as not loaded")
        return (), {}
    blobs: dict[str, str] = {}
    for row in rows:
        try:
            body = _get(client, "POST", "/api/show", {"model": row.name})
            found = parse_show(body, digest=row.digest, name=row.name).model_blob
        except (PlanError, ShapeError):
            found = None
        if found:
            blobs[row.name] = found
    return rows, blobs


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
        raise PlanError(
            "--gpu-free auto needs NVML (the pynvml package); pass the free memory, e.g. --gpu-free 24GiB"
        ) from None
    try:
        nvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, …
        raise PlanError(
            f"--gpu-free auto: NVML is not available ({exc}); pass the free memory, e.g. --gpu-free 24GiB"
        ) from None
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
            why = (
                ""
                if blob is not None and load.model_blob == blob
                else (
                    " (the model's blob is not known: the log's newest load with allocations)"
                    if blob is None
                    else " (the load names no blob)"
                )
            )
            return cal, f"{path}: load #{load.index + 1}{why}"
    return None, f"{path}: no load{' of ' + blob[:19] + '…' if blob else ''} with compute allocations"


def served_from_log(path: str, blob: str | None) -> tuple[ServedRequests, plan.PlanConfig | None]:
    """The requests the model of weights ``blob`` served, as the server log at ``path`` tells them
    (``model.ctx_served``: every load of that blob; with ``blob`` None, the lines of loads that name none),
    and the configuration of the log's newest load of it (per-slot num_ctx, KV type, slots, flash attention as
    the runner resolved it; None without a load that gives its context).

    Raises:
        PlanError: The file cannot be read.
    """
    from kvtop.logparse.load_grouping import group_loads
    from kvtop.logparse.parser import iter_events
    from kvtop.model.ctx_served import served_requests

    try:
        with open(path, "rb") as fh:
            lines = [raw.decode("utf-8", "replace") for raw in fh]
    except OSError as exc:
        raise PlanError(f"cannot read {path}: {exc.strerror or exc}") from None
    events = list(iter_events(lines))
    loads = group_loads(events)
    config: plan.PlanConfig | None = None
    for load in reversed(loads):
        if (blob is None or load.model_blob == blob) and load.num_ctx_per_seq:
            kv_type = kv.normalize_cache_type(load.kv_type_k or "f16") or "f16"
            config = plan.PlanConfig(
                load.num_ctx_per_seq,
                kv_type if kv_type in plan.PLAN_CACHE_TYPES else "f16",
                max(1, min(plan.MAX_SLOTS, load.parallel or 1)),
                load.flash_attention != "disabled",
            )
            break
    return served_requests(events, loads, model_blob=blob, only_model=blob is None), config
