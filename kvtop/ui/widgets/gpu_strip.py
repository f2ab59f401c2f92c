"""GPU strip: a single line until the GPU source exists."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

GPU_UNAVAILABLE_REASON = "no GPU source in this kvtop version yet"


class GpuStrip(Static):
    """Says plainly that GPU telemetry is not available, and why."""

    DEFAULT_CSS = """
    GpuStrip { height: 1; padding: 0 1; color: $text-muted; }
    """

    def render(self) -> Text:
        """One line."""
        return Text(f"GPU telemetry: not available ({GPU_UNAVAILABLE_REASON})", no_wrap=True, overflow="ellipsis")
