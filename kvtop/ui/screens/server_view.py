"""The server view (``i``): traffic from the access log, the queue (requests in flight and waiting
for a slot, ``model.queue``), health of ``ollama serve`` and its runners, its settings (secrets
masked), and the pre-flight of every pulled model.

Renders the state only (``model.traffic``, ``model.server_view``, ``model.preflight``); the app's
``ServerView`` worker reads health and the pulled models while this screen is open. Text from the
server or the log (paths, client addresses, model names, settings) goes through ``safe``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from kvtop.core.bounds import GO_DURATION_MAX_S
from kvtop.model.known import NOT_KNOWN, source_mark
from kvtop.model.preflight import PreflightRow, ServerDefaults, marked
from kvtop.model.next_load import NextLoad
from kvtop.model.next_load_view import next_load_cell
from kvtop.model.server_view import state_next_loads, state_preflight
from kvtop.model.server_health import ServerInfo
from kvtop.model.views import AppState
from kvtop.redact import scrub_text
from kvtop.model.traffic import Traffic
from kvtop.ui.format import ibytes, safe

ENDPOINTS_SHOWN = 8
CLIENTS_SHOWN = 5
SETTINGS_SHOWN = 24


def _seconds(s: float | None) -> str:
    """A latency: ``85 ms``, ``5.81 s``, ``2m39s``, ``3h05m``, ``4d07h``, ``365d`` (at most ``106751d``);
    ``?`` when not known or longer than a Go duration."""
    if s is None or not 0.0 <= s <= GO_DURATION_MAX_S:  # NaN fails the comparison too
        return NOT_KNOWN
    if s < 1:
        return f"{s * 1000:.0f} ms" if s >= 0.001 else f"{s * 1e6:.0f} µs"
    if s < 60:
        return f"{s:.2f} s"
    m, sec = divmod(int(round(s)), 60)
    if m < 60:
        return f"{m}m{sec:02d}s"
    if m < 48 * 60:
        return f"{m // 60}h{m % 60:02d}m"
    return f"{m // 1440}d{m // 60 % 24:02d}h" if m < 100 * 1440 else f"{m // 1440}d"


def _duration(s: float | None) -> str:
    if s is None:
        return NOT_KNOWN
    s = int(max(0, s))
    d, rest = divmod(s, 86400)
    h, rest = divmod(rest, 3600)
    m = rest // 60
    return f"{d}d {h}h" if d else f"{h}h {m:02d}m" if h else f"{m}m {s % 60:02d}s"


def traffic_lines(t: Traffic, log_source: str | None, now: datetime | None, width: int = 120) -> list[Text]:
    """The traffic section."""
    out = [Text("Traffic", style="bold")]
    if log_source is None:
        out.append(Text("  no server log (--log): the access lines are where traffic comes from"))
        return out
    if t.requests == 0:
        out.append(
            Text(
                "  no access lines yet: kvtop is still looking for the server log (--log names it)"
                if log_source == "auto"
                else f"  no access lines yet in {safe(log_source, 60)}"
            )
        )
        return out
    rpm, polls = t.requests_per_min(now), t.polls_per_min(now)
    work = None if rpm is None else rpm - (polls or 0)
    out.append(
        Text(
            f"  {work if work is not None else NOT_KNOWN} req/min"
            f" (+ {polls if polls is not None else NOT_KNOWN} status polls/min: /api/ps, /api/version,"
            f" /api/tags, /api/show — monitors, kvtop's own among them)"
        )
    )
    out.append(Text(f"  {t.requests:,} requests read · 4xx {t.client_errors:,} · 5xx {t.server_errors:,}"))
    queue = f"  queue: {t.busy:,} answered 503 (server busy)"
    if t.last_busy is not None:
        queue += f", last {t.last_busy:%Y-%m-%d %H:%M:%S}"
    out.append(Text(queue))
    out.append(
        Text(
            f"  OLLAMA_MAX_QUEUE {t.max_queue}"
            if t.max_queue is not None
            else "  OLLAMA_MAX_QUEUE ? (no server config line in the log)"
        )
    )
    w = 28 if width >= 100 else 22
    out.append(Text(f"  {'ENDPOINT':<{w}} {'REQS':>7} {'4xx':>5} {'5xx':>5} {'p50':>9} {'p95':>9}", style="bold"))
    for e in sorted(t.endpoints, key=lambda e: -e.requests)[:ENDPOINTS_SHOWN]:
        out.append(
            Text(
                f"  {safe(e.path, w):<{w}} {e.requests:>7,} {e.client_errors:>5,} {e.server_errors:>5,} "
                f"{_seconds(e.p50_s):>9} {_seconds(e.p95_s):>9}",
                no_wrap=True,
                overflow="ellipsis",
            )
        )
    polled = dict(t.client_polls)
    busiest = ", ".join(
        f"{safe(a, 40)} {n - polled.get(a, 0):,}" + (f" (+{polled[a]:,} polls)" if polled.get(a) else "")
        for a, n in t.busiest_clients(CLIENTS_SHOWN)
    )
    if t.other_clients:
        busiest += f", others {t.other_clients:,}"
    out.append(Text(f"  clients: {busiest}"))
    return out


def queue_lines(state: AppState) -> list[Text]:
    """The queue section of ``state.queue``: :func:`~kvtop.model.queue.queue_summary` (the line
    every face prints), then every client with its connections, kvtop's own left out; or why there
    is no figure (not read: a remote server, or before the first read; the reason when it could not
    be read)."""
    from kvtop.model.queue import queue_summary

    queue = state.queue
    out = [Text("Queue", style="bold")]
    summary = queue_summary(queue)
    if queue is None or summary is None:
        out.append(
            Text("  not read: kvtop counts the connections to a server on this machine (not in the demo or a replay)")
        )
        return out
    if queue.error is not None:
        out.append(Text(f"  {safe(summary, 200)}"))
        return out
    out.append(Text(f"  {safe(summary, 400)}"))
    if queue.waiting is None:
        out.append(Text("  waiting not known: no loaded model's slots are known (its runner's /slots, or the log)"))
    own = f"; kvtop's own {queue.own} left out" if queue.own else ""
    if queue.clients:
        shown = ", ".join(f"{safe(addr, 48)} ×{n}" for addr, n in queue.clients[:CLIENTS_SHOWN])
        more = len(queue.clients) - CLIENTS_SHOWN
        out.append(
            Text(f"  clients (connections to port {queue.port}{own}): {shown}" + (f", {more} more" if more > 0 else ""))
        )
    else:
        out.append(Text(f"  no client connected to port {queue.port}{own}"))
    out.append(
        Text(f"  {source_mark(queue.source)} estimated: an idle keep-alive connection counts as in flight", style="dim")
    )
    return out


def health_lines(info: ServerInfo, now_s: float) -> list[Text]:
    """The health and settings sections."""
    out = [Text("Health", style="bold")]
    h = info.health
    if h is None:
        out.append(Text("  reading… (the server's process is read on this machine only)"))
        return out
    t = h.tree
    if t is None:
        out.append(Text(f"  {safe(h.error or 'no process', 160)}"))
    else:
        cpu = NOT_KNOWN if t.cpu_percent is None else f"{t.cpu_percent:.0f}%"
        out.append(
            Text(
                f"  ollama serve pid {t.pid} · up {_duration(now_s - t.started_at if t.started_at else None)}"
                f" · {t.processes} process{'es' if t.processes != 1 else ''} · CPU {cpu} · RSS "
                f"{ibytes(t.rss_bytes)}"
            )
        )
        for pid, rss, cpu_r in t.runners[:6]:
            out.append(
                Text(f"    runner pid {pid}: RSS {ibytes(rss)}, CPU {NOT_KNOWN if cpu_r is None else f'{cpu_r:.0f}%'}")
            )
    r = h.restarts
    if r.count is not None:
        restarts = f"{r.count} ({safe(r.source or '', 60)})"
    else:
        restarts = f"? ({safe(r.error or 'not read', 100)})"
    out.append(Text(f"  restarts: {restarts} · PID changes seen by kvtop: {info.pid_changes}"))
    c = h.cgroup
    if c is None:
        out.append(Text("  cgroup: not readable"))
    else:
        mem = "no limit" if c.memory_max_bytes is None else ibytes(c.memory_max_bytes)
        cur = "" if c.memory_current_bytes is None else f" (using {ibytes(c.memory_current_bytes)})"
        cpu_l = "no limit" if c.cpu_max_cores is None else f"{c.cpu_max_cores:g} cores"
        out.append(Text(f"  cgroup v{c.version}: memory {mem}{cur} · CPU {cpu_l}"))
    out.append(
        Text("Settings" + (f" (= {safe(h.env_source, 60)}; secrets masked)" if h.env_source else ""), style="bold")
    )
    if not h.env:
        out.append(Text("  not readable (the service rung: /proc environ, systemctl, docker inspect)"))
    for name, value in list(h.env.items())[:SETTINGS_SHOWN]:
        out.append(Text(f"  {safe(name, 40)}={safe(value, 100)}"))
    return out


def _sized(n: int | None, source: str) -> str:
    """``~1.2G`` estimated; no mark when allocated (runner log) or reported (``/api/ps``)."""
    return NOT_KNOWN if n is None else source_mark(source) + ibytes(n, short=True)


def preflight_lines(
    defaults: ServerDefaults,
    rows: tuple[PreflightRow, ...],
    info: ServerInfo,
    width: int = 120,
    nexts: Sequence[NextLoad | None] = (),
) -> list[Text]:
    """The pre-flight section: one row per pulled model; ``nexts`` (per row, ``state_next_loads``):
    what loading it now would unload, said after the row."""
    out = [Text("Pre-flight: will it fit if loaded now?", style="bold")]
    out.append(
        Text(
            f"  at num_ctx {marked(defaults.num_ctx)} × {marked(defaults.parallel)} slot(s), KV "
            f"{marked(defaults.cache_type)}, flash attention {marked(defaults.flash_attention)}"
        )
    )
    if defaults.num_ctx.source == "estimated":  # v0.15.5+ without the GPUs' total: say what was assumed
        out.append(
            Text(
                f"  num_ctx {marked(defaults.num_ctx)} assumed: Ollama v0.15.5+ sizes its default by the "
                "GPUs' total memory (4096 / 32768 from 23 GiB / 262144 from 47 GiB), not known here"
                if width >= 124
                else f"  {marked(defaults.num_ctx)} assumed: the default follows the total VRAM (not known)",
                style="yellow",
            )
        )
    out.append(Text("  fit: against the free VRAM now, plus what the model itself holds when loaded"))
    pulled = info.pulled
    if pulled is None:
        out.append(Text("  reading /api/tags…"))
        return out
    if pulled.error:
        out.append(Text(f"  /api/tags: {safe(pulled.error, 160)}"))
    w = 28 if width >= 100 else 18
    out.append(
        Text(
            f"  {'NAME':<{w}} {'SIZE':>6} {'NUM_CTX':>8} {'KV':>7} {'TOTAL':>7} {'FIT':<8} {'MAX CTX':>7}", style="bold"
        )
    )
    styles = {"fits": "green", "marginal": "yellow", "spills": "red"}
    for i, r in enumerate(rows):
        line = Text(
            f"  {safe(r.name, w):<{w}} {ibytes(r.size_bytes, short=True):>6} {marked(r.num_ctx):>8} "
            f"{_sized(r.kv_bytes, r.kv_source):>7} {_sized(r.total_bytes, r.total_source):>7} ",
            no_wrap=True,
            overflow="ellipsis",
        )
        line.append(f"{r.verdict:<8}", style=styles.get(r.verdict, ""))
        line.append(f" {NOT_KNOWN if r.max_num_ctx is None else r.max_num_ctx:>7}")
        said = [r.note] if r.note and r.verdict != "fits" else []
        cell = next_load_cell(nexts[i]) if i < len(nexts) else NOT_KNOWN
        if cell not in ("loaded", NOT_KNOWN):  # Ollama's scheduler: what the load would unload first
            said.insert(0, f"next load: {cell}")
        if r.calibration:  # loaded now: its real figures anchor (or are) the row's
            said.append(f"loaded, {r.calibration}")
        room = width - 4 - len(line.plain)  # padding and scrollbar: a note must not wrap under the columns
        if said and room >= 24:
            line.append(f"  {safe('; '.join(said), room - 2)}", style="dim")
        out.append(line)
        if said and room < 24:  # narrow: the note on a line of its own, under its row
            out.append(Text(f"    {safe('; '.join(said), max(12, width - 8))}", style="dim"))
    if not rows and pulled.tags is not None:
        out.append(Text("  no pulled models"))
    wide = width >= 100
    out.append(
        Text(
            f"  {source_mark('estimated')} estimated  {source_mark('default')} "
            f"{'Ollama default' if wide else 'default'}  {source_mark('service')} server env  "
            f"{source_mark('requested')} Modelfile  "
            + ("unmarked: a loaded model's own (log, /api/ps)" if wide else "no mark: a loaded model's"),
            style="dim",
        )
    )
    return out


def server_text(state: AppState, *, now_s: float, log_now: datetime | None, width: int = 120) -> Text:
    """The whole view as one text (pure: the Pilot and snapshot tests render it)."""
    defaults, rows = state_preflight(state)
    nexts = state_next_loads(state, rows)
    snap = state.last_ok
    title = Text(f"Server {safe(state.host_url, 60)}", style="bold")
    if snap is not None and snap.version:
        title.append(f" · Ollama {safe(scrub_text(snap.version), 20)}")  # a proxy may echo a secret in it
    parts = [title, Text("")]
    parts += traffic_lines(state.log.traffic, state.log.source, log_now, width) + [Text("")]
    parts += queue_lines(state) + [Text("")]
    parts += health_lines(state.server, now_s) + [Text("")]
    parts += preflight_lines(defaults, rows, state.server, width, nexts)
    return Text("\n").join(parts)


class ServerScreen(Screen[None]):
    """The server view; Escape (or ``i``) goes back."""

    BINDINGS = [Binding("escape,i", "app.pop_screen", "Back"), Binding("q", "app.quit", "Quit")]

    DEFAULT_CSS = """
    ServerScreen #server-body { padding: 0 1; }
    """

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:  # tests fix the clock
        super().__init__()
        self._clock = clock

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(id="server-body")
        yield Footer()

    def on_mount(self) -> None:
        self.watch(self.app, "state", self._on_state, init=True)

    def _on_state(self, state: AppState | None) -> None:
        if state is None:
            return
        now_s = self._clock()
        log_now = datetime.fromtimestamp(now_s, tz=state.naive_tz).replace(tzinfo=None)
        body = server_text(state, now_s=now_s, log_now=log_now, width=self.size.width)
        self.query_one("#server-body", Static).update(body)

    def on_resize(self) -> None:
        self._on_state(getattr(self.app, "state", None))
