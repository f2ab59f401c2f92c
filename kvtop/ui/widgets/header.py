"""The header: server, version, reachability, latency, interval, paused, DEMO or REPLAY."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from kvtop.config import display_host
from kvtop.model.state import AppState
from kvtop.ui.format import ibytes, safe


class ServerHeader(Static):
    """Two lines: where and how kvtop is polling; what the server holds (or why it can't tell)."""

    DEFAULT_CSS = """
    ServerHeader { height: 2; padding: 0 1; background: $panel; }
    """

    # repaint=False: every poll sets ``state``, but the header is repainted only when its text
    # changes (``_changed``); a repaint per poll was a large part of kvtop's idle CPU
    state: reactive[AppState | None] = reactive(None, always_update=True, repaint=False)
    interval_s: reactive[float] = reactive(1.0, repaint=False)
    paused: reactive[bool] = reactive(False, repaint=False)
    demo: reactive[bool] = reactive(False, repaint=False)
    recording: reactive[bool] = reactive(False, repaint=False)
    """``kvtop --record``: every sample is being written to a file (REC in the header)."""
    replay: reactive[str | None] = reactive(None, repaint=False)
    """``kvtop --replay``: the recorded time and speed (``2026-11-29 17:02:13 ×4``), None when live."""

    _shown: Text | None = None

    def _changed(self) -> None:
        if not self.is_mounted:
            return
        text = self._build()
        if text != self._shown:
            self._shown = text
            self.refresh()

    def watch_state(self) -> None:
        self._changed()

    def watch_interval_s(self) -> None:
        self._changed()

    def watch_paused(self) -> None:
        self._changed()

    def watch_demo(self) -> None:
        self._changed()

    def watch_replay(self) -> None:
        self._changed()

    def watch_recording(self) -> None:
        self._changed()

    def render(self) -> Text:
        """Both lines, as last built (``_build``)."""
        if self._shown is None:
            self._shown = self._build()
        return self._shown

    def _build(self) -> Text:
        """Build both lines from the current state."""
        v = self.app.theme_variables
        st = self.state
        line1 = Text()
        line1.append("kvtop", style="bold")
        if self.demo:
            line1.append("  DEMO", style=f"bold {v.get('kv-demo', '')}")
        if self.recording:
            line1.append("  ● REC", style=f"bold {v.get('kv-crit', '')}")
        if self.replay is not None:
            line1.append(f"  REPLAY {self.replay}", style=f"bold {v.get('kv-demo', '')}")
            if self.paused:
                line1.append("  PAUSED", style=f"bold reverse {v.get('kv-warn', '')}")
        if st is None:
            return line1
        line1.append(f"  {safe(display_host(st.host_url), 60)}")
        snap = st.ollama
        version = (snap.version if snap and snap.version else None) or (st.last_ok.version if st.last_ok else None)
        line1.append(f"  Ollama {safe(version, 24)}" if version else "  Ollama ?")
        if snap is None:
            line1.append("  connecting…", style=v.get("kv-muted", ""))
        elif snap.reachable:
            line1.append("  ● up", style=v.get("kv-ok", ""))
            if snap.latency_s is not None:
                line1.append(f"  latency {snap.latency_s * 1000:.0f} ms")
        elif snap.error_kind in ("http", "invalid_json", "invalid_shape", "other"):
            line1.append("  ✖ error", style=f"bold {v.get('kv-crit', '')}")  # it answers, but not with data
        else:
            line1.append("  ✖ down", style=f"bold {v.get('kv-crit', '')}")
        if self.replay is None:  # a replay polls nothing; its pace is the speed shown after REPLAY
            line1.append(f"  every {self.interval_s:g} s")
        if self.paused and self.replay is None:
            line1.append("  PAUSED", style=f"bold reverse {v.get('kv-warn', '')}")

        line2 = Text()
        if snap is None:
            line2.append("waiting for the first answer from the server…", style=v.get("kv-muted", ""))
        elif not snap.reachable:
            # the age of what is on screen first: a long error message must not push it away
            if st.stale_s is not None:
                line2.append(f"data from {st.stale_s:.0f} s ago", style=v.get("kv-warn", ""))
            else:
                line2.append("no data yet", style=v.get("kv-muted", ""))
            line2.append(f" · {st.failures} failed poll{'s' if st.failures != 1 else ''} · ", style=v.get("kv-muted", ""))
            line2.append(safe(snap.error or "unreachable", 160), style=v.get("kv-crit", ""))
        else:
            n = len(st.models)
            total = sum(m.size_bytes or 0 for m in st.models)
            vram = sum(m.size_vram_bytes or 0 for m in st.models)
            spilled = sum(1 for m in st.models if m.spilled)
            line2.append(f"{n} model{'s' if n != 1 else ''} loaded")
            if n:
                line2.append(f" · {ibytes(total)} total · {ibytes(vram)} in VRAM")
                if spilled:
                    line2.append(f" · {spilled} spilled to CPU", style=f"bold {v.get('kv-crit', '')}")
        width = self.content_size.width
        if width > 0:  # Static wraps a joined Text despite no_wrap: cut each line to the width
            for line in (line1, line2):
                line.truncate(width, overflow="ellipsis")
        out = Text("\n").join([line1, line2])
        out.no_wrap = True  # a narrow terminal cuts the lines; it never pushes line 2 away
        out.overflow = "ellipsis"
        return out
