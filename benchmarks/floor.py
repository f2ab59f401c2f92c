"""The floor: a minimal Textual app that polls ``GET /api/ps`` and shows a DataTable.

Every CPU, startup and RSS figure the benchmarks print for kvtop is printed beside this app's,
measured in the same run on the same stand-in server: it is what watching an Ollama
server with Textual and httpx costs at the least, so a ratio to it says what kvtop's own work
costs, whatever the machine.

What it does, and nothing more:

- one ``httpx.AsyncClient`` (library defaults but the base URL and a timeout);
- one worker: ``GET /api/ps``, update the table, ``asyncio.sleep(interval)`` (polls never overlap);
- one ``DataTable`` with ``ollama ps``'s columns (NAME, ID, SIZE, PROCESSOR, CONTEXT, UNTIL),
  rows keyed by name and digest. When the rows are the same models as before, only the cells
  whose text changed are updated (``update_cell``); otherwise the table is cleared and refilled;
- ``s`` sorts the table by NAME, reversing the order at each press (``key_latency.py`` times it);
- ``q`` quits.

Run it as a script (``python benchmarks/floor.py --host URL [--interval 1] [--timeout 3]``) or
import it: :func:`floor_command` is the argv the benchmarks launch in a pty, :data:`NEEDLE_COLUMN`
the column whose text shows that data arrived.

Standard library + textual + httpx (the project's own dependencies).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

FLOOR_PATH = Path(__file__).resolve()

NEEDLE_COLUMN = "NAME"
"""The column a model's name is shown in (what a benchmark waits for on screen)."""


def floor_command(url: str, interval_s: float = 1.0, *, python: str | None = None) -> list[str]:
    """The argv that runs the floor app against ``url`` polling every ``interval_s`` seconds."""
    return [python or sys.executable, str(FLOOR_PATH), "--host", url, "--interval", f"{interval_s:g}"]


def _size(n: Any) -> str:
    if not isinstance(n, int) or n < 0:
        return ""
    value = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return ""


def _processor(size: Any, vram: Any) -> str:
    if not isinstance(size, int) or not isinstance(vram, int) or size <= 0:
        return ""
    if vram >= size:
        return "100% GPU"
    if vram <= 0:
        return "100% CPU"
    cpu = round(100 * (size - vram) / size)
    return f"{cpu}%/{100 - cpu}% CPU/GPU"


_FRACTION = re.compile(r"(\.\d{6})\d+")


def _until(text: Any, now: datetime) -> str:
    if not isinstance(text, str):
        return ""
    try:
        when = datetime.fromisoformat(_FRACTION.sub(r"\1", text.replace("Z", "+00:00")))
    except ValueError:
        return ""
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    seconds = (when - now).total_seconds()
    if seconds > 10 * 365 * 86400:
        return "Forever"
    if seconds < 0:
        return "Stopping..."
    minutes = int(seconds // 60)
    return f"{minutes} minutes from now" if minutes >= 1 else "Less than a minute from now"


def row_cells(entry: dict[str, Any], now: datetime) -> tuple[str, ...]:
    """One ``/api/ps`` entry as the table's cells (``ollama ps``'s columns)."""
    return (
        str(entry.get("name") or entry.get("model") or ""),
        str(entry.get("digest") or "")[:12],
        _size(entry.get("size")),
        _processor(entry.get("size"), entry.get("size_vram")),
        str(entry.get("context_length") or ""),
        _until(entry.get("expires_at"), now),
    )


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments and run the app; returns the exit code."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default=os.environ.get("OLLAMA_HOST") or "http://127.0.0.1:11434")
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--timeout", type=float, default=3.0)
    args = ap.parse_args(argv)

    import httpx
    from textual import work
    from textual.app import App, ComposeResult
    from textual.widgets import DataTable

    columns = ("NAME", "ID", "SIZE", "PROCESSOR", "CONTEXT", "UNTIL")

    class FloorApp(App[int]):
        BINDINGS = [("q", "quit", "Quit"), ("s", "sort", "Sort")]

        def __init__(self) -> None:
            super().__init__()
            self.keys: list[str] = []
            self.shown: dict[str, tuple[str, ...]] = {}
            self.column_keys: list[Any] = []
            self.reverse = False

        def compose(self) -> ComposeResult:
            yield DataTable(cursor_type="row")

        def on_mount(self) -> None:
            self.column_keys = self.query_one(DataTable).add_columns(*columns)
            self.poll()

        def action_sort(self) -> None:
            self.reverse = not self.reverse
            self.query_one(DataTable).sort(self.column_keys[0], reverse=self.reverse)

        @work(exclusive=True)
        async def poll(self) -> None:
            async with httpx.AsyncClient(base_url=args.host, timeout=args.timeout) as client:
                while True:
                    try:
                        response = await client.get("/api/ps")
                        models = response.json().get("models") or []
                    except (httpx.HTTPError, ValueError, AttributeError):
                        models = None
                    if models is not None:
                        self.show(models)
                    await asyncio.sleep(args.interval)

        def show(self, models: list[dict[str, Any]]) -> None:
            now = datetime.now(timezone.utc)
            rows = {f"{m.get('name')}@{m.get('digest')}": row_cells(m, now) for m in models if isinstance(m, dict)}
            table = self.query_one(DataTable)
            if list(rows) == self.keys:
                for key, cells in rows.items():
                    for column, (a, b) in enumerate(zip(self.shown[key], cells)):
                        if a != b:
                            table.update_cell(key, self.column_keys[column], b)
            else:
                table.clear()
                for key, cells in rows.items():
                    table.add_row(*cells, key=key)
                self.keys = list(rows)
            self.shown = rows

    FloorApp().run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
