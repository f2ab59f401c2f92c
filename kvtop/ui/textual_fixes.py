"""Two memory leaks of Textual 8 that kvtop works around (a dashboard left open for weeks must keep a flat memory).

Both keep removed widgets, and everything they rendered, in memory: opening and closing the
history screen (``h``, Esc) grew RSS by ~1.4 MB each time, the server view (``i``) by ~0.25 MB.

1. ``StylesCache.get_inner_outer`` is an instance method under ``functools.lru_cache(1024)``: the
   cache's keys hold the last 1,024 ``StylesCache`` objects, each with its widget's rendered lines
   (``Strip`` objects), long after the widget is gone (Textual issue #6665). The answer depends
   only on the two colours, so :func:`install_textual_fixes` keys the cache on them alone.
2. ``data_bind`` watchers: Textual's ``Footer`` binds each key it composes to its ``compact``
   reactive, and a watcher is dropped only when that value changes, which it never does, so each
   recompose (each return to a screen, each resize) kept the removed keys alive
   (:func:`prune_closed_watchers`, called by ``KvFooter`` before it composes).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

_INSTALLED = False


def install_textual_fixes() -> bool:
    """Replace ``StylesCache.get_inner_outer`` by the same function cached on its two colours only.
    Idempotent; returns False (and changes nothing) when Textual's code is not the one expected."""
    global _INSTALLED
    if _INSTALLED:
        return True
    try:
        from textual._styles_cache import StylesCache
    except ImportError:
        return False
    current: Any = StylesCache.__dict__.get("get_inner_outer")
    original: Callable[..., Any] | None = getattr(current, "__wrapped__", None)
    if original is None or not hasattr(current, "cache_clear"):  # not the lru_cache'd method: leave it
        return False

    @functools.lru_cache(maxsize=1024)
    def _by_colors(base_background: Any, background: Any) -> Any:
        return original(None, base_background, background)  # the method does not read its first argument

    def get_inner_outer(self: object, base_background: Any, background: Any) -> Any:
        """Inner and outer background styles, cached on the colours (not on ``self``)."""
        return _by_colors(base_background, background)

    get_inner_outer.cache_clear = _by_colors.cache_clear  # type: ignore[attr-defined]
    current.cache_clear()  # let go of the StylesCache objects it holds
    setattr(StylesCache, "get_inner_outer", get_inner_outer)  # noqa: B010 - a method of Textual's, replaced
    _INSTALLED = True
    return True


def prune_closed_watchers(node: object) -> int:
    """Drop the watchers of ``node``'s reactives whose watching widget was removed (Textual keeps
    them until the watched value changes); returns how many were dropped."""
    watchers = getattr(node, "__watchers", None)  # Textual's per-object watcher lists (reactive._watch)
    if not isinstance(watchers, dict):
        return 0
    dropped = 0
    for entries in watchers.values():
        if not isinstance(entries, list):
            continue
        kept = [e for e in entries if not (isinstance(e, tuple) and getattr(e[0], "_closing", False))]
        dropped += len(entries) - len(kept)
        entries[:] = kept
    return dropped
