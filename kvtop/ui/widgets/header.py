"""The header: server, version, reachability, latency, interval, paused, DEMO or REPLAY; what the
server holds, and the requests waiting for a slot while some wait (``model.queue.queue_short``)."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from kvtop.config.host import display_host
from kvtop.model.queue import queue_short
from kvtop.model.views import AppState
from kvtop.redact import scrub_text
from kvtop.ui.ascii_mode import ascii_on
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
    tls: reactive[str | None] = reactive(None, repaint=False)
    """How this server's TLS certificate is checked when not as by default (``--insecure``:
    ``TLS UNVERIFIED``; ``--cacert``: ``CA <file>``; ``ServerAccess.tls_flag``), None otherwise."""

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

    def watch_tls(self) -> None:
        self._changed()

    def render(self) -> Text:
        """Both lines, as last built (``_build``)."""
        if self._shown is None:
            self._shown = self._build()
        return self._shown

    def _build(self) -> Text:
        """Build both lines from the current state.

        Line 1 starts with the state flags (DEMO, REPLAY and its clock, REC, PAUSED, END, up /
        down / error / auth / TLS, ASCII when the glyphs are ASCII's, and how TLS is checked when not by default), which are never cut; the details after them (host, version, latency,
        interval) are dropped whole, least needed first, when the width runs out.
        """
        v = self.app.theme_variables
        st = self.state
        width = self.content_size.width
        replay = self.replay
        ended = replay is not None and replay.endswith(" END")
        clock = replay.removesuffix(" END") if replay is not None else None
        flags: list[Text] = [Text("kvtop", style="bold")]
        if self.demo:
            flags.append(Text("DEMO", style=f"bold {v.get('kv-demo', '')}"))
        replay_at = len(flags)
        if clock is not None:
            shown = clock if not clock.startswith("--") else f"start {clock.removeprefix('--').strip()}".strip()
            flags.append(Text(f"REPLAY {shown}", style=f"bold {v.get('kv-demo', '')}"))
        if self.recording:
            flags.append(Text("● REC", style=f"bold {v.get('kv-crit', '')}"))
        if self.paused:
            flags.append(Text("PAUSED", style=f"bold reverse {v.get('kv-warn', '')}"))
        if ended:
            flags.append(Text("END", style=f"bold reverse {v.get('kv-demo', '')}"))
        snap = st.ollama if st is not None else None
        if st is not None:
            if snap is None:
                flags.append(
                    Text("no sample yet" if replay is not None else "connecting…", style=v.get("kv-muted", ""))
                )
            elif snap.reachable:
                flags.append(Text("● up", style=v.get("kv-ok", "")))
            elif snap.error_kind == "auth":
                flags.append(Text("✖ auth", style=f"bold {v.get('kv-crit', '')}"))  # 401/403: credentials
            elif snap.error_kind == "tls":
                flags.append(Text("✖ TLS", style=f"bold {v.get('kv-crit', '')}"))  # certificate not verified
            elif snap.error_kind in ("http", "invalid_json", "invalid_shape", "other"):
                flags.append(Text("✖ error", style=f"bold {v.get('kv-crit', '')}"))  # it answers, but not with data
            else:
                flags.append(Text("✖ down", style=f"bold {v.get('kv-crit', '')}"))
        if ascii_on(getattr(self.app, "settings", None)):  # said once, so '#' and '.' in the bars are not a fault
            flags.append(Text("ASCII", style=v.get("kv-muted", "")))
        if self.tls is not None:
            insecure = self.tls.startswith("TLS")
            flags.append(
                Text(
                    safe(self.tls, 30),
                    style=f"bold reverse {v.get('kv-warn', '')}" if insecure else v.get("kv-muted", ""),
                )
            )
        details: list[tuple[int, Text]] = []  # (priority: lower is kept longer, text)
        if st is not None:
            details.append((0, Text(safe(display_host(st.host_url), 60))))
            version = (snap.version if snap and snap.version else None) or (st.last_ok.version if st.last_ok else None)
            if version or snap is not None:
                details.append((3, Text(f"Ollama {safe(scrub_text(version), 24)}" if version else "Ollama ?")))
            if snap is not None and snap.reachable and st.latency_s is not None:  # the median of the last polls
                details.append((1, Text(f"latency {st.latency_s * 1000:.0f} ms")))
        if replay is None:  # a replay polls nothing; its pace is the speed shown after REPLAY
            details.append((2, Text(f"every {self.interval_s:g} s")))
        line1 = _fit_line(flags, details, width)
        dated = clock is not None and len(clock.split(" ")) >= 3  # "2026-11-29 17:02:13 ×4"
        if dated and width > 0 and _dropped(flags, details, width, most=1):
            # the date gives way before the host and the latency: REPLAY 17:02:13 ×4
            flags[replay_at] = Text(f"REPLAY {clock.split(' ', 1)[1]}", style=flags[replay_at].style)
            line1 = _fit_line(flags, details, width)
        if st is None:
            return line1

        line2 = Text()
        if snap is None and replay is not None:
            at_start = clock is not None and clock.startswith("--")
            line2.append(
                "start of the recording: no server sample played yet"
                if at_start
                else "no server sample recorded before this point",
                style=v.get("kv-muted", ""),
            )
        elif snap is None:
            line2.append("waiting for the first answer from the server…", style=v.get("kv-muted", ""))
        elif not snap.reachable:
            # the age of what is on screen first: a long error message must not push it away
            if st.stale_s is not None:
                line2.append(f"data from {st.stale_s:.0f} s ago", style=v.get("kv-warn", ""))
            else:
                line2.append("no data yet", style=v.get("kv-muted", ""))
            line2.append(
                f" · {st.failures} failed poll{'s' if st.failures != 1 else ''} · ", style=v.get("kv-muted", "")
            )
            line2.append(safe(snap.error or "unreachable", 160), style=v.get("kv-crit", ""))
        else:
            n = len(st.models)
            total = sum(m.size_bytes or 0 for m in st.models)
            vram = sum(m.size_vram_bytes or 0 for m in st.models)
            spilled = sum(1 for m in st.models if m.spilled)
            line2.append(f"{n} model{'s' if n != 1 else ''} loaded")
            waiting = queue_short(st.queue)  # the local server's only: another server's state has none
            if waiting is not None:  # the news: before the sizes, so a narrow terminal keeps it
                line2.append(" · ")
                line2.append(waiting, style=f"bold {v.get('kv-warn', '')}")
            if n:
                line2.append(f" · {ibytes(total)} total · {ibytes(vram)} in VRAM")
                if spilled:
                    line2.append(f" · {spilled} spilled to CPU", style=f"bold {v.get('kv-crit', '')}")
        if width > 0:  # Static wraps a joined Text despite no_wrap: cut each line to the width
            line2.truncate(width, overflow="ellipsis")
        out = Text("\n").join([line1, line2])
        out.no_wrap = True  # a narrow terminal cuts the lines; it never pushes line 2 away
        out.overflow = "ellipsis"
        return out


def _dropped(flags: list[Text], details: list[tuple[int, Text]], width: int, most: int) -> bool:
    """Whether fitting the line in ``width`` drops a detail of priority ``most`` or lower."""
    length = Text("  ").join(flags).cell_len + sum(2 + d.cell_len for p, d in details if p <= most)
    return length > width


def _fit_line(flags: list[Text], details: list[tuple[int, Text]], width: int) -> Text:
    """``flags`` then ``details``, two spaces apart, in ``width`` cells (0: no limit). The flags
    are never cut; details are dropped whole, highest priority number first, until the line fits
    (a lone detail still too long is cut with an ellipsis)."""
    sep = "  "
    head = Text(sep).join(flags)
    kept = list(details)

    def length() -> int:
        return head.cell_len + sum(len(sep) + d.cell_len for _, d in kept)

    while width > 0 and kept and length() > width:
        kept.remove(max(kept, key=lambda item: item[0]))
    line = head.copy()
    for _, detail in kept:
        line.append(sep)
        line.append_text(detail)
    if width > 0 and line.cell_len > width:
        if head.cell_len + len(sep) < width and kept:
            line.truncate(width, overflow="ellipsis")
        elif head.cell_len <= width:
            line = head
    return line
