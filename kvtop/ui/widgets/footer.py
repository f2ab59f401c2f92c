"""The dashboard's footer: Textual's ``Footer`` that leaves out its least important keys when the
terminal is too narrow for all of them, instead of cutting the row off mid-word.

Every key left out still works and is listed in the help (``?``) and the command palette; ``q`` and
``?`` are never left out.
"""

from __future__ import annotations

from collections.abc import Iterable

from textual import events
from textual.app import ComposeResult
from textual.widget import Widget
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

from kvtop.ui.textual_fixes import prune_closed_watchers

__all__ = ["FOOTER_DROP_ORDER", "KvFooter", "fit_keys"]

FOOTER_DROP_ORDER: tuple[str, ...] = (
    "toggle_gpu",
    "server_view",
    "toggle_map",
    "keep_alive",
    "cycle_sort",
    "toggle_pause",
    "toggle_events",
    "unload",
    "what_if",
    "filter",
)
"""Actions whose footer keys go first when the row is too narrow, first to go first. Keys of other
actions (replay, server switch, a focused panel's) go after these; ``quit`` and ``help`` never."""

_NEVER_DROPPED = frozenset({"quit", "help"})


def key_width(key_display: str, description: str) -> int:
    """Columns a footer key takes (Textual's non-compact style: `` k Description ``)."""
    return len(key_display) + 2 + (len(description) + 1 if description else 0)


def fit_keys(keys: list[tuple[str, int]], width: int) -> set[int]:
    """Indexes of ``keys`` (``(action, columns)`` in footer order) to leave out so the rest fit in
    ``width`` columns: actions of :data:`FOOTER_DROP_ORDER` in that order, then other actions from
    the right; never ``quit``/``help``."""
    total = sum(w for _, w in keys)
    order = {a: i for i, a in enumerate(FOOTER_DROP_ORDER)}
    candidates = sorted(
        (i for i, (a, _) in enumerate(keys) if a not in _NEVER_DROPPED),
        key=lambda i: (order.get(keys[i][0], len(order)), -i),
    )
    dropped: set[int] = set()
    for i in candidates:
        if total <= width:
            break
        dropped.add(i)
        total -= keys[i][1]
    return dropped


class KvFooter(Footer):
    """``Footer`` that fits its keys to its width (:func:`fit_keys`); recomposed on resize."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._composed_width = 0

    def compose(self) -> ComposeResult:
        prune_closed_watchers(self)  # the keys of the last composition were removed: let them go (textual_fixes)
        widgets: Iterable[Widget] = list(super().compose())
        width = self.size.width or self.app.size.width
        self._composed_width = width
        keys = [w for w in widgets if isinstance(w, FooterKey) and not w.has_class("-command-palette")]
        palette = [w for w in widgets if isinstance(w, FooterKey) and w.has_class("-command-palette")]
        if len(keys) != len([w for w in widgets if not w.has_class("-command-palette")]):
            yield from widgets  # binding groups (none on the dashboard): left as Textual lays them out
            return
        # the palette key (its label, a border cell on its left, a padding cell on its right) may
        # cover the last key's trailing blank
        room = width - sum(key_width(p.key_display, p.description) for p in palette) + (1 if palette else 0)
        dropped = fit_keys([(k.action, key_width(k.key_display, k.description)) for k in keys], room)
        yield from (k for i, k in enumerate(keys) if i not in dropped)
        yield from palette

    def on_resize(self, event: events.Resize) -> None:
        if event.size.width != self._composed_width and self._bindings_ready:
            self.call_after_refresh(self.recompose)
