"""The alert engine's data types: what an alert is (:class:`Alert`, :class:`Fix`, :data:`KINDS`,
:data:`Severity`) and the thresholds that raise one (:class:`Thresholds`).

This module imports nothing of :mod:`kvtop.model.state`: the state holds alerts and thresholds as
data, and the rules (the rest of this package) read the state.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Final, Literal

from kvtop.core.units import parse_bytes
from kvtop.model.alerts.text import ib

Severity = Literal["info", "warning", "critical"]
"""How bad an alert is: ``critical`` (requests are slow or failing now), ``warning`` (something
is off or about to be), ``info`` (worth knowing, nothing to do)."""

KINDS: Final[Mapping[str, tuple[Severity, str]]] = {
    "server_unreachable": ("critical", "the latest /api/ps poll failed"),
    "spill": ("critical", "part of a model is in system RAM (size_vram < size, layers or buffers on the CPU)"),
    "quantized_v_refused": (
        "critical",
        "llama.cpp refused a quantized V cache without flash attention: the load failed",
    ),
    "oom": ("critical", "out of memory at load or run time"),
    "load_failed": ("critical", "a model load failed"),
    "runner_crash": ("critical", "a runner aborted (GGML_ASSERT, panic, segfault)"),
    "log_source_lost": ("warning", "the server log that was being read cannot be read any more"),
    "kv_type_not_applied": ("warning", "the KV cache type requested is not the one allocated"),
    "flash_attention_off": ("warning", "flash attention is off although requested or needed by a quantized cache"),
    "prompt_truncated": ("warning", "prompts longer than the context were cut"),
    "prompt_rejected": ("warning", "llama-server refused prompts longer than the context (HTTP 400)"),
    "reload_churn": ("warning", "the same weights were loaded again and again"),
    "eviction": ("warning", "the scheduler unloaded a model to make room"),
    "queue_wait": ("warning", "requests wait for a slot longer than the threshold while every slot is busy"),
    "context_over_training": ("warning", "num_ctx is above the model's training context"),
    "foreign_vram": ("warning", "processes outside Ollama hold memory on a GPU Ollama uses"),
    "gpu_nearly_full": ("warning", "a GPU Ollama uses has less free memory than the headroom"),
    "swap_in_use": ("warning", "swap is in use while a model is partly in system RAM"),
    "context_clamped": ("info", "Ollama clamped a requested num_ctx to the training context"),
}
"""Every alert kind: its severity and what it means. The order is the display order within one
severity."""

SEVERITY_RANK: Final[Mapping[str, int]] = {"critical": 0, "warning": 1, "info": 2}
KIND_RANK: Final[Mapping[str, int]] = {k: i for i, k in enumerate(KINDS)}
"""Display rank of a severity (most severe first) and of a kind within one severity."""

MIB: Final = 1024 * 1024
GIB: Final = 1024 * MIB


@dataclass(frozen=True, slots=True)
class Fix:
    """One way out of an alert, with its numbers.

    Attributes:
        action: What to change, as the user would type it: ``num_ctx 16384``,
            ``OLLAMA_KV_CACHE_TYPE=q8_0``, ``OLLAMA_NUM_PARALLEL=1``, ``unload qwen3:8b``.
        detail: The arithmetic behind it: ``KV 2.0 GiB (−2.0 GiB)``.
        fits: True when the model would then be 100% on the GPU (or, for a larger context, still
            fit); False when even this is not enough; None when it cannot be computed.
        cost: What it takes away: truncated prompts, cache quality, concurrency, a restart.
    """

    action: str
    detail: str
    fits: bool | None
    cost: str


@dataclass(frozen=True, slots=True)
class Alert:
    """One problem, as the alert bar, the detail view, ``--once --json`` and ``--check`` show it.

    Attributes:
        kind: A key of :data:`KINDS`.
        severity: ``critical``, ``warning`` or ``info``.
        model: The model it is about (an ``/api/ps`` name), None for server- or GPU-wide alerts
            and for log events the log does not tie to a loaded model.
        since: Unix seconds: when the condition was first seen (carried over by ``key``).
        message: The cause in one line, with its numbers.
        fixes: Computed fixes, the ones that fit first.
        key: Stable identity (kind and model or device) for de-duplication and ``since``.
    """

    kind: str
    severity: Severity
    model: str | None
    since: float | None
    message: str
    fixes: tuple[Fix, ...] = ()
    key: str = ""


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Alert thresholds, from ``config.toml``'s ``[alerts]`` table (:meth:`from_mapping`).

    Attributes:
        gpu_headroom_bytes: ``gpu_nearly_full`` fires when a GPU Ollama uses has less free
            memory than this. 512 MiB: about one compute buffer; less and the next load or a
            longer context spills.
        foreign_vram_bytes: ``foreign_vram`` fires when processes outside Ollama hold more than
            this on a GPU Ollama uses. 1 GiB: more than a CUDA context (~300-500 MiB), so a
            desktop session or a stray notebook kernel shows, a compositor does not.
        churn_reloads: ``reload_churn`` fires when one weights blob was loaded at least this
            many times within ``churn_window_s``. 3: one reload is a changed setting, three
            are clients fighting over num_ctx (or a keep_alive too short).
        churn_window_s: See ``churn_reloads``. 600 s.
        event_window_s: A log event (truncation, OOM, failed load, eviction, clamp, crash)
            raises an alert while it is at most this old relative to the latest snapshot. 900 s
            (15 min): long enough to be seen on a dashboard refreshed every second, short
            enough that ``--check`` in a cron job does not report yesterday.
        swap_used_bytes: ``swap_in_use`` fires when more swap than this is used while a model is
            spilled. 256 MiB: a long-running Linux box keeps some pages in swap anyway.
        queue_wait_s: ``queue_wait`` fires when the oldest request waiting for a slot has waited
            longer than this (``model.queue``, estimated from the connections to the API port).
            10 s: longer than the prefill of a long prompt, so a burst that drains at once does
            not fire.
        fix_reserve_bytes: GPU memory a spill fix leaves free on top of what it needs. 0: the
            budget is what Ollama itself gave the model (``size_vram``) or the free memory
            NVML reports, which is net of the driver's reserve already.
    """

    gpu_headroom_bytes: int = 512 * MIB
    foreign_vram_bytes: int = 1 * GIB
    churn_reloads: int = 3
    churn_window_s: float = 600.0
    event_window_s: float = 900.0
    swap_used_bytes: int = 256 * MIB
    queue_wait_s: float = 10.0
    fix_reserve_bytes: int = 0

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any] | None) -> tuple[Thresholds, list[str]]:
        """Read thresholds from ``config.toml``'s ``[alerts]`` table; never raises.

        Keys are the attribute names (``gpu_headroom_bytes``), or the same without their unit
        suffix (``gpu_headroom``, ``churn_window``). Byte values are integers or strings with a
        unit (``"512MiB"``, ``"24GiB"``, ``"1GB"``; ``kvtop.core.units.parse_bytes``); seconds
        are numbers or strings with ``s``, ``m`` or ``h`` (``"10m"``); ``churn_reloads`` is an
        integer of at least 2.

        Args:
            m: The ``[alerts]`` table (``Settings.alerts``), None or empty for the defaults.

        Returns:
            The thresholds and one warning per unknown key or unusable value (that value keeps
            its default).
        """
        defaults = cls()
        values: dict[str, Any] = {}
        warnings: list[str] = []
        names = {f.name for f in fields(cls)}
        aliases = {n.removesuffix("_bytes").removesuffix("_s"): n for n in names}
        for raw_key, value in (m or {}).items():
            key = str(raw_key).strip().lower().replace("-", "_")
            name = key if key in names else aliases.get(key)
            if name is None:
                warnings.append(f"[alerts] unknown key {raw_key!r} ignored (known: {', '.join(sorted(names))})")
                continue
            default = getattr(defaults, name)
            try:
                if name.endswith("_bytes"):
                    parsed: Any = _config_bytes(value)
                elif name.endswith("_s"):
                    parsed = _config_seconds(value)
                else:
                    parsed = _config_count(value)
            except (TypeError, ValueError) as exc:
                shown = ib(default) if name.endswith("_bytes") else f"{default:g}"
                warnings.append(f"[alerts] {name} = {value!r}: {exc} — the default {shown} is used")
                continue
            values[name] = parsed
        return replace(defaults, **values), warnings


DEFAULT_THRESHOLDS: Final = Thresholds()
"""The thresholds used when ``config.toml`` has no ``[alerts]`` table."""


_BYTES_HINT: Final = "not a byte count (e.g. 512MiB or 536870912)"
_SECONDS_HINT: Final = 'not a duration (e.g. 600 or "10m")'


def _config_bytes(value: Any) -> int:
    """A byte threshold: a non-negative integer, or a string with a unit. Raises TypeError/ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(_BYTES_HINT)
    if isinstance(value, str):
        return parse_bytes(value.strip())
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise ValueError(_BYTES_HINT)
    if value < 0:
        raise ValueError("must not be negative")
    return int(value)


def _config_seconds(value: Any) -> float:
    """A duration threshold: seconds, or a string with ``s``, ``m`` or ``h``. Raises TypeError/ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(_SECONDS_HINT)
    if isinstance(value, str):
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h)?\s*", value.lower())
        if m is None:
            raise ValueError(_SECONDS_HINT)
        seconds = float(m.group(1)) * {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}.get(m.group(2) or "s", 1)
    else:
        seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError("must be a positive number of seconds")
    return seconds


def _config_count(value: Any) -> int:
    """A count threshold (``churn_reloads``): an integer of at least 2. Raises TypeError/ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError("not a whole number")
    try:
        count = int(value)
    except ValueError:
        raise ValueError("not a whole number") from None
    if count < 2:
        raise ValueError("must be at least 2")
    return count
