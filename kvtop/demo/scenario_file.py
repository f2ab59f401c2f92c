"""Scenario files for the stand-in Ollama server: the JSON format and its reader.

A scenario is a JSON document that describes a catalog of models (what ``/api/tags`` and
``/api/show`` answer) and a timeline of steps (what ``/api/ps`` answers while each step is
current). The stand-in server (:mod:`kvtop.demo.server`) plays it back; the parsed form is
:mod:`kvtop.demo.scenario`'s types.

Format (``"format": 1``)::

    {
      "format": 1,
      "version": "0.22.1",                      # what /api/version answers
      "description": "...",
      "sources": ["..."],                       # where the numbers come from
      "log_version"?: "0.33.1",                 # what /api/version answers while the stand-in
                                                # writes its runner log (--log-file): that log is
                                                # llama-server era (v0.30+, kvtop.demo.logwriter)
      "machine"?: {"ram_total": 34359738368,     # the demo machine's RAM (GET /_standin/machine):
                   "ram_used": 4294967296,       # in use with no model; spilled bytes add to it
                   "gpu"?: {...}},               # its simulated GPU (kvtop.demo.gpusim.GPU_KEYS)
      "models": {
        "qwen3:1.7b-q8_0": {
          "digest": "<64 lowercase hex>",        # manifest digest, no "sha256:" prefix
          "details": {"format", "family", "families", "parameter_size",
                      "quantization_level", "parent_model"?},
          "file_size": 2200000000,               # bytes on disk (/api/tags "size")
          "model_info": {...},                   # GGUF keys as /api/show verbose returns them
          "capabilities": ["completion", ...],
          "parameters"?: {"temperature": 0.6, "stop": ["<|im_start|>"]} | "raw text",
          "template"?, "system"?, "license"?, "modelfile"?, "modified_at"?, "tensors"?,
          "runner"?: {...}                       # its demo runner log figures
                                                 # (RUNNER_KEYS)
        }
      },
      "steps": [
        {"at_s": 0, "hold_s"?: 5, "label": "...", "status"?: 503, "error"?: "...",
         "garbage"?: false, "log"?: {...},      # runner log incidents (STEP_LOG_KEYS)
         "loaded": [{"model": "qwen3:1.7b-q8_0", "context_length": 4096 | null,
                     "size": 2754892672, "size_vram": 2754892672,
                     "expires_in_s": 300 | -5 | "forever"}]}
      ]
    }

``note``, ``notes``, ``source`` and ``sources`` keys are accepted (and ignored) on the top
level, on models, on steps and on loaded entries so that every number can cite its origin.
Any other unknown key is an error, so that a typo does not silently change the demo.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from kvtop.demo.scenario import (
    FORMAT_VERSION,
    RUNNER_KEYS,
    STEP_LOG_KEYS,
    CatalogModel,
    LoadedModel,
    Machine,
    ModelDetails,
    Scenario,
    Step,
)

__all__ = ["load_scenario", "parse_scenario", "render_parameters"]

_NOTE_KEYS = frozenset({"note", "notes", "source", "sources"})
_HEX64 = re.compile(r"[0-9a-f]{64}")
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})")


# --------------------------------------------------------------------------------------------
# Parsing helpers. Each one names the JSON path of the value it rejects.


def _fail(path: str, message: str) -> ValueError:
    return ValueError(f"scenario {path}: {message}")


def _describe(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _object(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(path, f"expected an object, got {_describe(value)}")
    return value


def _check_keys(obj: dict[str, Any], path: str, required: set[str], optional: set[str]) -> None:
    for key in sorted(required):
        if key not in obj:
            raise _fail(f"{path}.{key}", "missing required key")
    allowed = required | optional | _NOTE_KEYS
    for key in obj:
        if key not in allowed:
            raise _fail(f"{path}.{key}", f"unknown key (allowed: {', '.join(sorted(allowed))})")


def _str(value: Any, path: str, *, nonempty: bool = False) -> str:
    if not isinstance(value, str):
        raise _fail(path, f"expected a string, got {_describe(value)}")
    if nonempty and not value.strip():
        raise _fail(path, "must not be empty")
    return value


def _int(value: Any, path: str, *, minimum: int | None = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(path, f"expected an integer, got {_describe(value)}")
    if minimum is not None and value < minimum:
        raise _fail(path, f"must be >= {minimum}, got {value}")
    return value


def _number(value: Any, path: str, *, minimum: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(path, f"expected a number, got {_describe(value)}")
    if not math.isfinite(value):
        raise _fail(path, f"must be finite, got {value}")
    if minimum is not None and value < minimum:
        raise _fail(path, f"must be >= {minimum:g}, got {value:g}")
    return float(value)


def _str_list(value: Any, path: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise _fail(path, f"expected a list of strings, got {_describe(value)}")
    return tuple(_str(item, f"{path}[{i}]") for i, item in enumerate(value))


def _freeze(value: Any) -> Any:
    """Deep-copy JSON data, turning objects into read-only mappings (lists stay lists)."""
    if isinstance(value, dict):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_freeze(v) for v in value]
    return value


def _go_value(value: Any) -> str:
    """Format a parameter value like Go's ``%#v`` does for Modelfile options."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def render_parameters(params: Mapping[str, Any]) -> str:
    """Render Modelfile parameters the way ``/api/show`` does (``%-30s %#v`` per value).

    Args:
        params: Option name to value; a list value yields one line per element (``stop``).

    Returns:
        The newline-joined text.
    """
    lines: list[str] = []
    for key, value in params.items():
        values = value if isinstance(value, list) else [value]
        lines.extend(f"{key:<30} {_go_value(v)}" for v in values)
    return "\n".join(lines)


def _parse_details(value: Any, path: str) -> ModelDetails:
    obj = _object(value, path)
    _check_keys(obj, path, {"format", "family", "families", "parameter_size", "quantization_level"}, {"parent_model"})
    families_raw = obj["families"]
    families = None if families_raw is None else _str_list(families_raw, f"{path}.families")
    return ModelDetails(
        format=_str(obj["format"], f"{path}.format"),
        family=_str(obj["family"], f"{path}.family"),
        families=families,
        parameter_size=_str(obj["parameter_size"], f"{path}.parameter_size"),
        quantization_level=_str(obj["quantization_level"], f"{path}.quantization_level"),
        parent_model=_str(obj.get("parent_model", ""), f"{path}.parent_model"),
    )


def _parse_model(name: str, value: Any, path: str) -> CatalogModel:
    if ":" not in name or name.startswith(":") or name.endswith(":"):
        raise _fail(path, "model names must be 'name:tag' as /api/ps shows them")
    obj = _object(value, path)
    _check_keys(
        obj,
        path,
        {"digest", "details", "file_size", "model_info", "capabilities"},
        {"parameters", "template", "system", "license", "modelfile", "modified_at", "tensors", "runner"},
    )
    digest = _str(obj["digest"], f"{path}.digest")
    if not _HEX64.fullmatch(digest):
        raise _fail(f"{path}.digest", "expected 64 lowercase hex characters without 'sha256:'")
    model_info = _object(obj["model_info"], f"{path}.model_info")
    for key in model_info:
        if key.startswith("tokenizer.ggml.") and isinstance(model_info[key], list):
            raise _fail(f"{path}.model_info.{key}", "tokenizer arrays do not belong in a scenario")
    params_raw = obj.get("parameters", "")
    if isinstance(params_raw, dict):
        parameters = render_parameters(params_raw)
    else:
        parameters = _str(params_raw, f"{path}.parameters")
    modified_at = _str(obj.get("modified_at", CatalogModel.modified_at), f"{path}.modified_at")
    if not _RFC3339.fullmatch(modified_at):
        raise _fail(f"{path}.modified_at", f"expected an RFC 3339 time, got {modified_at!r}")
    tensors: tuple[Mapping[str, Any], ...] | None = None
    if "tensors" in obj:
        raw = obj["tensors"]
        if not isinstance(raw, list):
            raise _fail(f"{path}.tensors", f"expected a list, got {_describe(raw)}")
        items = []
        for i, tensor in enumerate(raw):
            tpath = f"{path}.tensors[{i}]"
            tobj = _object(tensor, tpath)
            _check_keys(tobj, tpath, {"name", "type", "shape"}, set())
            _str(tobj["name"], f"{tpath}.name")
            _str(tobj["type"], f"{tpath}.type")
            if not isinstance(tobj["shape"], list):
                raise _fail(f"{tpath}.shape", "expected a list of integers")
            for j, dim in enumerate(tobj["shape"]):
                _int(dim, f"{tpath}.shape[{j}]")
            items.append(_freeze(tobj))
        tensors = tuple(items)
    return CatalogModel(
        name=name,
        digest=digest,
        details=_parse_details(obj["details"], f"{path}.details"),
        file_size=None if obj["file_size"] is None else _int(obj["file_size"], f"{path}.file_size"),
        model_info=_freeze(model_info),
        capabilities=_str_list(obj["capabilities"], f"{path}.capabilities"),
        parameters=parameters,
        template=_str(obj.get("template", ""), f"{path}.template"),
        system=_str(obj.get("system", ""), f"{path}.system"),
        license=_str(obj.get("license", ""), f"{path}.license"),
        modelfile=_str(obj.get("modelfile", ""), f"{path}.modelfile"),
        modified_at=modified_at,
        tensors=tensors,
        runner=_parse_runner(obj["runner"], f"{path}.runner") if "runner" in obj else None,
    )


def _parse_runner(value: Any, path: str) -> Mapping[str, Any]:
    obj = _object(value, path)
    _check_keys(obj, path, {"weights_bytes", "layers"}, set(RUNNER_KEYS) - {"weights_bytes", "layers"})
    for key, item in obj.items():
        if key not in _NOTE_KEYS:
            _number(item, f"{path}.{key}", minimum=0)
    return _freeze(obj)


def _parse_step_log(value: Any, path: str, models: Mapping[str, CatalogModel]) -> Mapping[str, Any]:
    obj = _object(value, path)
    _check_keys(obj, path, set(), set(STEP_LOG_KEYS))
    for key in ("evict",):
        for i, name in enumerate(_str_list(obj.get(key, []), f"{path}.{key}")):
            if name not in models:
                raise _fail(f"{path}.{key}[{i}]", f"{name!r} is not in $.models")
    for name, cache_type in _object(obj.get("kv_fallback", {}), f"{path}.kv_fallback").items():
        if name not in models:
            raise _fail(f"{path}.kv_fallback", f"{name!r} is not in $.models")
        _str(cache_type, f"{path}.kv_fallback[{json.dumps(name)}]", nonempty=True)
    for key in ("truncate", "requests"):
        if key in obj and not isinstance(obj[key], bool):
            raise _fail(f"{path}.{key}", f"expected true or false, got {_describe(obj[key])}")
    return _freeze(obj)


def _parse_loaded(value: Any, path: str, models: Mapping[str, CatalogModel]) -> LoadedModel:
    obj = _object(value, path)
    _check_keys(obj, path, {"model", "context_length", "size", "size_vram", "expires_in_s"}, set())
    name = _str(obj["model"], f"{path}.model")
    if name not in models:
        known = ", ".join(sorted(models)) or "none"
        raise _fail(f"{path}.model", f"{name!r} is not in $.models (known: {known})")
    ctx_raw = obj["context_length"]
    context_length = None if ctx_raw is None else _int(ctx_raw, f"{path}.context_length")
    expires_raw = obj["expires_in_s"]
    if expires_raw == "forever":
        expires: float | None = None
    elif isinstance(expires_raw, str):
        raise _fail(f"{path}.expires_in_s", f'expected a number or "forever", got {expires_raw!r}')
    else:
        expires = _number(expires_raw, f"{path}.expires_in_s")
    return LoadedModel(
        model=name,
        context_length=context_length,
        size=_int(obj["size"], f"{path}.size"),
        size_vram=_int(obj["size_vram"], f"{path}.size_vram"),
        expires_in_s=expires,
    )


def _parse_step(value: Any, path: str, models: Mapping[str, CatalogModel], previous_at: float) -> Step:
    obj = _object(value, path)
    _check_keys(obj, path, {"at_s", "label"}, {"hold_s", "status", "error", "garbage", "loaded", "log"})
    at_s = _number(obj["at_s"], f"{path}.at_s", minimum=0)
    if at_s < previous_at:
        raise _fail(f"{path}.at_s", f"steps must be in time order ({at_s:g} < previous {previous_at:g})")
    status: int | None = None
    if obj.get("status") is not None:
        status = _int(obj["status"], f"{path}.status", minimum=100)
        if status > 599:
            raise _fail(f"{path}.status", f"not an HTTP status: {status}")
    garbage = obj.get("garbage", False)
    if not isinstance(garbage, bool):
        raise _fail(f"{path}.garbage", f"expected true or false, got {_describe(garbage)}")
    loaded_raw = obj.get("loaded", [])
    if not isinstance(loaded_raw, list):
        raise _fail(f"{path}.loaded", f"expected a list, got {_describe(loaded_raw)}")
    loaded = tuple(_parse_loaded(item, f"{path}.loaded[{i}]", models) for i, item in enumerate(loaded_raw))
    seen: set[str] = set()
    for i, row in enumerate(loaded):
        if row.model in seen:
            raise _fail(f"{path}.loaded[{i}].model", f"{row.model!r} is listed twice in one step")
        seen.add(row.model)
    return Step(
        at_s=at_s,
        hold_s=_number(obj.get("hold_s", 0), f"{path}.hold_s", minimum=0),
        label=_str(obj["label"], f"{path}.label", nonempty=True),
        loaded=loaded,
        status=status,
        error=_str(obj.get("error", ""), f"{path}.error"),
        garbage=garbage,
        log=_parse_step_log(obj["log"], f"{path}.log", models) if "log" in obj else MappingProxyType({}),
    )


def parse_scenario(data: Any) -> Scenario:
    """Validate decoded JSON and build a :class:`Scenario`.

    Args:
        data: The decoded JSON document.

    Returns:
        The scenario.

    Raises:
        ValueError: When the document is not a valid scenario; the message names the JSON
            path of the offending value, e.g. ``scenario $.steps[2].loaded[0].size: ...``.
    """
    root = _object(data, "$")
    _check_keys(root, "$", {"format", "version", "models", "steps"}, {"description", "machine", "log_version"})
    fmt = root["format"]
    if fmt != FORMAT_VERSION or isinstance(fmt, bool):
        raise _fail("$.format", f"unsupported format {_describe(fmt)} (expected {FORMAT_VERSION})")
    version = _str(root["version"], "$.version", nonempty=True)
    description = _str(root.get("description", ""), "$.description")
    sources_raw = root.get("sources", [])
    sources = (sources_raw,) if isinstance(sources_raw, str) else _str_list(sources_raw, "$.sources")
    models_obj = _object(root["models"], "$.models")
    models = {name: _parse_model(name, value, f"$.models[{json.dumps(name)}]") for name, value in models_obj.items()}
    steps_raw = root["steps"]
    if not isinstance(steps_raw, list) or not steps_raw:
        raise _fail("$.steps", "expected a non-empty list of steps")
    steps: list[Step] = []
    previous = 0.0
    for i, raw in enumerate(steps_raw):
        step = _parse_step(raw, f"$.steps[{i}]", models, previous)
        steps.append(step)
        previous = step.at_s
    machine: Machine | None = None
    if "machine" in root:
        obj = _object(root["machine"], "$.machine")
        _check_keys(obj, "$.machine", {"ram_total", "ram_used"}, {"gpu"})
        gpu = None
        if "gpu" in obj:
            from kvtop.demo.gpusim import parse_gpu

            gpu = parse_gpu(_object(obj["gpu"], "$.machine.gpu"), "$.machine.gpu")
        machine = Machine(
            _int(obj["ram_total"], "$.machine.ram_total", minimum=1), _int(obj["ram_used"], "$.machine.ram_used"), gpu
        )
        if machine.ram_used > machine.ram_total:
            raise _fail("$.machine.ram_used", "more than ram_total")
    return Scenario(
        format=FORMAT_VERSION,
        version=version,
        description=description,
        sources=sources,
        models=MappingProxyType(models),
        steps=tuple(steps),
        machine=machine,
        log_version=_str(root["log_version"], "$.log_version", nonempty=True) if "log_version" in root else None,
    )


def load_scenario(path_or_text: str | Path) -> Scenario:
    """Load a scenario from a file path or from JSON text.

    Args:
        path_or_text: A :class:`~pathlib.Path`, a path string, or the JSON text itself (a
            string whose first non-blank character is ``{``).

    Returns:
        The scenario.

    Raises:
        ValueError: When the file cannot be read, is not JSON, or is not a valid scenario.
            The message names the file and the JSON path of the problem.
    """
    origin = "<text>"
    if isinstance(path_or_text, str) and path_or_text.lstrip().startswith("{"):
        text = path_or_text
    else:
        path = Path(path_or_text)
        origin = str(path)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"cannot read scenario file {origin}: {exc}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{origin}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from exc
    try:
        return parse_scenario(data)
    except ValueError as exc:
        raise ValueError(f"{origin}: {exc}") from exc
