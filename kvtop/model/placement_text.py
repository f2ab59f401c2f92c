"""A placement report (``model.placement_reason``) as labelled rows of plain text, the same on every face (the
detail view, ``kvtop inspect-log``): each size with its source mark (``model.known``), the reason, the settings
read and the fixes. It reads the report's JSON form (``PlacementReport.to_json``), which is what ``inspect-log``
keeps of a load. Pure; the faces sanitize the text (device names come from the log).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvtop.model.known import Known, setting_text, size_text

__all__ = ["REASON_WORDS", "placement_rows"]

REASON_WORDS = {
    "fits": "fits on the GPU",
    "requested": "num_gpu asked for it",
    "hidden": "GPUs hidden from Ollama",
    "single_gpu": "one GPU chosen (OLLAMA_SCHED_SPREAD off)",
    "gpu_skipped": "a GPU was left out",
    "gpu_overhead": "OLLAMA_GPU_OVERHEAD reserve",
    "fit_margin": "llama-server's fit margin",
    "not_enough": "not enough free GPU memory",
    "unknown": "not known",
}
"""Each reason code in a few words (the row's head; the sentence follows)."""


def _size(value: Any, source: Any) -> str:
    if not isinstance(value, int):
        return "?"
    return size_text(Known(value, source if isinstance(source, str) else None))  # type: ignore[arg-type]


def placement_rows(report: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(label, text)`` rows of a report's JSON form: the reason, one row per GPU and one for the CPU, the
    settings, then each fix."""
    reason = str(report.get("reason") or "unknown")
    rows: list[tuple[str, str]] = [("why", f"{REASON_WORDS.get(reason, reason)}: {report.get('reason_text') or ''}")]
    for d in report.get("devices") or []:
        parts = []
        if d.get("layers") is not None:
            over = d.get("overflowing")
            parts.append(f"{d['layers']} layers" + (f" ({over} overflowing)" if over else ""))
        if d.get("used") or d.get("placed_bytes") is not None:
            parts.append(f"placed {_size(d.get('placed_bytes'), d.get('placed_source'))}")
        parts.append(
            f"free {_size(d.get('free_bytes'), d.get('free_source'))}" + (" at load" if d.get("used") else " now")
        )
        if not d.get("used"):
            parts.append("not used")
        if d.get("note"):
            parts.append(str(d["note"]))
        rows.append((str(d.get("name") or "?"), ", ".join(parts)))
    cpu_layers, cpu_bytes = report.get("cpu_layers"), report.get("cpu_bytes")
    if cpu_layers or cpu_bytes:
        cpu = []
        if cpu_layers is not None:
            cpu.append(f"{cpu_layers} layer{'' if cpu_layers == 1 else 's'}")
        if cpu_bytes is not None:
            note = report.get("cpu_bytes_note")
            cpu.append(
                f"{_size(cpu_bytes, report.get('cpu_bytes_source'))} overflowed" + (f" ({note})" if note else "")
            )
        rows.append(("CPU", ", ".join(cpu)))
    read = []
    for name, k in (report.get("settings") or {}).items():
        value, source = k.get("value"), k.get("source")
        if value is None or (not value and source == "default"):
            continue
        read.append(f"{name} {setting_text(Known(value, source)) if value else '(empty)'}")
    if read:
        rows.append(("settings", " ".join(read)))
    for f in report.get("fixes") or []:
        verdict = {True: " (enough)", False: " (not enough)"}.get(f.get("enough"), "")
        rows.append(("fix", f"{f.get('action')}{verdict}: {f.get('detail')}"))
    return rows
