"""The detail view's "Placement" section: where the model's load landed and why (``model.placement_reason``),
as the rows ``model.placement_text`` gives every face. Text from the log is sanitized here."""

from __future__ import annotations

from rich.text import Text

from kvtop.model.placement_reason import placement_for
from kvtop.model.placement_text import placement_rows
from kvtop.model.views import AppState, ModelView
from kvtop.ui.format import safe

__all__ = ["append_placement"]


def append_placement(out: Text, v: ModelView, state: AppState) -> None:
    """Append the section to ``out``; nothing for a cloud model or one whose load the log does not show."""
    report = placement_for(state, v)
    if report is None:
        return
    out.append("\nPlacement (why it landed there)\n", style="bold underline")
    for label, text in placement_rows(report.to_json()):
        out.append(f"  {safe(label, 20):<20}", style="bold")
        out.append(safe(text, 600) + "\n", style="dim" if label == "settings" else "")
