"""The order and the filter of the models table: the sort keys ``s`` cycles through, and the
filter ``/`` types. Pure.
"""

from __future__ import annotations

from collections.abc import Callable

from kvtop.model.views import ModelView


SORT_KEYS: tuple[str, ...] = ("server", "size", "name", "cpu", "context", "kv")
"""Sort orders cycled by ``s``: the server's own order (longest keep-alive first), then by size,
name, CPU share (spilled first), per-slot context and KV bytes."""


def sort_views(views: tuple[ModelView, ...], key: str) -> tuple[ModelView, ...]:
    """Order rows for display; unknown values sort last. Raises ValueError for an unknown key."""
    if key == "server":
        return views
    if key == "name":
        return tuple(sorted(views, key=lambda v: v.name.lower()))
    getters: dict[str, Callable[[ModelView], int | None]] = {
        "size": lambda v: v.size_bytes,
        "cpu": lambda v: v.cpu_percent,
        "context": lambda v: v.context.value,
        "kv": lambda v: v.memory.kv.value,
    }
    if key not in getters:
        raise ValueError(f"unknown sort key {key!r}; expected one of {', '.join(SORT_KEYS)}")
    get = getters[key]
    known = sorted((v for v in views if get(v) is not None), key=lambda v: (-(get(v) or 0), v.name))
    return tuple(known) + tuple(v for v in views if get(v) is None)


def filter_views(views: tuple[ModelView, ...], text: str) -> tuple[ModelView, ...]:
    """Keep rows whose name, ID, family or processor contain ``text`` (case-insensitive)."""
    needle = text.strip().lower()
    if not needle:
        return views
    return tuple(
        v
        for v in views
        if needle in v.name.lower()
        or v.short_id.startswith(needle)
        or needle in (v.architecture or "").lower()
        or needle in v.processor.lower()
    )
