"""The server settings a placement report reads (``model.placement_reason``), each with its source: the
service environment, else the log's ``server config`` line, else Ollama's default (docs/placement.md §5). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping

from kvtop.model.gpu_snapshots import ServiceEnv
from kvtop.model.known import Known

__all__ = ["SETTING_NAMES", "VISIBILITY_VARS", "int_setting", "placement_settings", "spread_setting"]

VISIBILITY_VARS = (
    "CUDA_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "GPU_DEVICE_ORDINAL",
    "GGML_VK_VISIBLE_DEVICES",
)
"""Variables that hide GPUs from Ollama and its runners (docs/placement.md §5)."""

SETTING_NAMES = ("OLLAMA_SCHED_SPREAD", "OLLAMA_GPU_OVERHEAD", "LLAMA_ARG_FIT_TARGET", "OLLAMA_KV_CACHE_TYPE")
"""The settings the reasons read, besides :data:`VISIBILITY_VARS`."""

_TRUE = {"1", "true", "t", "yes", "y", "on"}


def placement_settings(env: ServiceEnv | None = None, config: Mapping[str, str] | None = None) -> dict[str, Known[str]]:
    """The settings the reasons read, each with its source: the service environment (``service``), else the
    log's ``server config`` line (``service``, noted), else Ollama's default (``default``) or unknown.

    ``config`` is the ``server config`` map as the log printed it (``OLLAMA_SCHED_SPREAD:false``); a variable
    the server's version does not print there stays unknown rather than defaulted.
    """
    out: dict[str, Known[str]] = {}
    readable = env is not None and env.readable
    for name in SETTING_NAMES + VISIBILITY_VARS:
        value = env.get(name) if env is not None else None
        if value is not None:
            out[name] = Known(value, "service", f"the server's environment ({env.source if env else '?'})")
            continue
        if config is not None and name in config:
            text = config[name].strip().strip("\"'")
            out[name] = Known(text, "service", "the log's server config line") if text else _default(name)
            continue
        if readable:
            out[name] = _default(name)
    return out


def _default(name: str) -> Known[str]:
    if name == "OLLAMA_SCHED_SPREAD":
        return Known("false", "default", "unset: Ollama packs a model onto as few GPUs as fit it")
    if name == "OLLAMA_GPU_OVERHEAD":
        return Known("0", "default", "unset: nothing reserved per GPU")
    if name == "LLAMA_ARG_FIT_TARGET":
        return Known("1024", "default", "unset: llama-server keeps 1024 MiB free per device")
    return Known("", "default", "unset")


def spread_setting(settings: Mapping[str, Known[str]]) -> bool | None:
    k = settings.get("OLLAMA_SCHED_SPREAD")
    if k is None or k.value is None:
        return None
    return k.value.strip().lower() in _TRUE


def int_setting(settings: Mapping[str, Known[str]], name: str) -> int | None:
    k = settings.get(name)
    if k is None or k.value is None:
        return None
    try:
        return int(k.value.strip() or "0")
    except ValueError:
        return None
