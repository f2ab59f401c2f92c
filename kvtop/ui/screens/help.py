"""Help: keys, column meanings and source marks."""

from __future__ import annotations

from rich.cells import cell_len
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from kvtop.core.glyphs import to_ascii
from kvtop.ui.widgets.hanging import Hanging
from kvtop.ui.widgets.memory_map import GLYPHS as MAP_GLYPHS
from kvtop.ui.widgets.panels import CURSOR_GLYPH

HELP = """\
kvtop — top for an Ollama server's memory

Keys (and htop's F1 help, F4 filter, F6 sort, F9 signal, F10 quit)
  q / F10    quit                      ? / F1     this help
  p          pause / resume polling    + / -      slower / faster refresh
  s / F6     cycle sort order          / / F4     filter (Esc clears it)
  Enter      details of the model      Esc        back / close
  w          what-if planner           l / r      events pane / raw lines
  g          GPU panel                 Ctrl+C     quit from anywhere
  S          reverse the sort          t          next theme
  ↑ ↓ / j    move the selection (j is down; k is signal, as in top and htop)
  1–9 ] [    server N / next / previous (with two servers or more)
  h          history plots (z or ← → window, Esc back)
  m / f / v  memory map / alerts with fixes / history panels (from 120×36
             they show by themselves, the events pane in rows left free;
             a key's choice is saved; click a model's bar in the map to
             select it)
  i          server view: traffic, health, pre-flight of pulled models
  c          what changed: restarts, upgrades, settings (kvtop changes)

What-if planner (w on a model)
  ← →        num_ctx along a ladder    ↑ ↓        pick a field
  0–9 Enter  type num_ctx or slots (letters wait; Esc cancels the typing)
  k / f      KV cache type / flash attention (server-wide settings)

Replay (kvtop --replay FILE|demo|incident)
  space / p  pause / resume            .          one record (pauses)
  > / <      speed ×2 / ÷2 (¼×–16×)    J / K      jump 1 min ahead / back
  B          back to the start         (also Ctrl+→ / Ctrl+←)

Columns
  NAME       model name (red: spilled to system RAM)
  ID         first 12 characters of the manifest digest
  SIZE       /api/ps size: weights + KV cache + compute, binary units;
             while a model is spilled the header reads VRAM+RAM and the
             cell is VRAM first, then RAM (5.0G+1.2G: allocated from the
             log, else reported)
  MEMORY     bar of weights █ | KV cache ▓ | compute ▒ (· not known)
  VRAM 1m    size_vram over the last minute (▁…█: 0 to its peak)
  CONTEXT    num_ctx per slot × slots (KV cells = both multiplied)
  PROCESSOR  CPU/GPU split exactly as `ollama ps` prints it (CPU first)
  FLASH ATTN / KV TYPE  what the runner resolved (log), else its command line
  TOK/S      decode tokens/s of the newest request (log or /slots, v0.30+)
  UNTIL      keep-alive left (42s in its last minute; "unloading…" after u);
             "Stopping..." = busy past keep_alive or unloading

{glyphs}
Sources, best first (the detail view names each one)
  plain      allocated (runner log), runner (its /props, /slots)
             or reported (the API)
  ^          requested: the runner's command line or the Modelfile
  =          service: the ollama serve environment (OLLAMA_*)
  ~          estimated (KV math; compute = size − weights − KV)
  *          Ollama's default: nothing readable says otherwise
  ?          not known
  sizes      binary (GiB = 2^30 B): ~3.5 GiB; ~3.5G in the table;
             exact bytes in the detail view
  ASCII      in the header: --ascii, or no UTF-8 locale; every glyph in
             this help is drawn as its ASCII stand-in, the marks unchanged

Width      ID, byte figures, FLASH ATTN, KV TYPE, TOK/S from 160 columns;
           UNTIL from 100; VRAM 1m from 120.
Ctrl+P opens the command palette: every action above with its key (type a
few letters: unl finds Unload), and Textual's theme picker. A key that does
nothing here says why at the bottom right.

Esc, ? or F1 closes this help; ↓ / j and PgDn scroll it.
"""


GLYPHS_HEAD = "Glyphs on screen (each with its ASCII mode stand-in; ~ * ? stay marks)"

GLYPH_ROWS: tuple[tuple[str, tuple[tuple[str, str, str | None], ...]], ...] = (
    (
        "The table",
        (
            ("▶1", "CONTEXT: requests being answered now, in 1 slot (the runner's /slots)", None),
            ("~▶1", "the same, estimated from the log (no /slots to read)", None),
            ("pf 43%", "CONTEXT: a prompt being read (prefill, runner log), 43% done; pf 0%: under 1% yet", None),
            ("4096×2", "CONTEXT: num_ctx per slot × slots (4096×1*: both Ollama's defaults)", None),
            ("5.0G+1.2G", "SIZE of a spilled model: VRAM + system RAM (header VRAM+RAM)", None),
            ("▁▂▃▄▅▆▇█", "VRAM 1m: size_vram over the last minute, 0 to its peak", None),
            ("…", "VRAM 1m not sampled yet; in a name: cut to fit", None),
            ("–", "TOK/S: kvtop measures the next request that ends (none yet)", None),
            ("?", "not known: nothing kvtop can read says it (no log, no /slots)", None),
            ("▼", "the sorted column, largest first (S reverses)", None),
            ("▲", "the sorted column, A to Z (ASCII mode writes A there: its ! is a warning)", "A"),
        ),
    ),
    ("Memory map (m) and GPU strip (g): one cell per share of the device", ()),
    (
        "Header, switcher, alerts, log line",
        (
            ("● up", "the server answers (… connecting, ✖ down); ● REC: --record writes", None),
            ("⇣2", "server switcher: 2 models spilled to system RAM", None),
            ("✖ ▲ ℹ", "alerts: critical / warning / info", None),
            (CURSOR_GLYPH, "alerts panel (Tab): the fix Enter acts on (↑ ↓ move)", None),
            ("N dropped", "log line: lines not read (the history before kvtop started, noise shed under load)", None),
            ("−", "a real minus: measured below what is listed", None),
        ),
    ),
    (
        "History plots (h)",
        (
            ("━ •", "a series (its legend names each one)", None),
            ("× ◆ ◇ □ ■ ○", "without colours (NO_COLOR, mono): each series its own marker", None),
            ("│ ┆ ║", "a model loaded / unloaded / reloaded (the legend names each)", None),
            ("┄", "a limit (the device's total)", None),
        ),
    ),
)
"""The glyph sections of the help: (title, rows of (glyph as drawn, meaning, ASCII stand-in when
kvtop writes its own rather than :func:`kvtop.core.glyphs.to_ascii`'s)). The map's rows come from
:func:`map_rows` (the widget's own table)."""


def map_rows() -> tuple[tuple[str, str, str | None], ...]:
    """The memory map's and the GPU strip's glyphs, from their widgets' tables, with their meaning."""
    g = MAP_GLYPHS
    return (
        (
            f"{g['weights']} {g['kv']} {g['compute']}",
            "a model's weights / KV cache / compute (the strip: █ a runner)",
            None,
        ),
        (g["kv_swa"], "a model's KV SWA pool (sliding-window layers; beside its full KV cache)", None),
        (g["model"], "a model, not broken down", None),
        (g["overhead"], "runner overhead: NVML's measure − the parts listed (CUDA context, buffers)", None),
        (g["ollama"], "other Ollama processes (a runner not paired yet: loading <model>)", None),
        (g["other"], "a process outside Ollama (its user and program in the legend)", None),
        (g["unattributed"], "unattributed (driver, OS)", None),
        (g["free"], "free", None),
        ("+~242M", "legend: the runner overhead, estimated (after W, KV, C)", None),
        ("?°C", "GPU temperature not known", None),
    )


def glyph_text() -> str:
    """The help's glyph sections as text: ``  glyph  ascii  meaning`` in three columns."""
    lines = [GLYPHS_HEAD]
    for title, rows in GLYPH_ROWS:
        lines.append(title)
        for glyph, meaning, stand_in in rows or map_rows():
            ascii_form = stand_in if stand_in is not None else to_ascii(glyph)
            shown = "same" if ascii_form == glyph else ascii_form
            lines.append(
                f"  {glyph}{' ' * max(2, 11 - cell_len(glyph))}{shown}{' ' * max(2, 10 - len(shown))}{meaning}"
            )
    return "\n".join(lines) + "\n\n"


LOAD_HELP = "  a          load with the num_ctx on screen (asks first; y confirms)\n"
"""The what-if planner's one write, in the help only when kvtop may write (not ``--readonly``)."""

READONLY_HELP = "  (--readonly: kvtop sends nothing that changes the server)\n"

ACTIONS_HELP = """\
Actions (each asks first, Cancel focused; y confirms once its button is
ready: keys typed ahead are ignored; all logged)
  u          unload the selected model (keep_alive 0, as `ollama stop`)
  a          keep-alive of the selected model: 5 m, 1 h, forever, 0 (now)
  k          signal a GPU process outside Ollama that you own
             (Enter SIGTERM, 9 SIGKILL; as root, another user's asks twice)
  Enter      on a fix in the events pane or the alerts panel (Tab, ↑ ↓):
             offers it (unload, stop PID), or shows a setting as text to
             copy (c copies it; kvtop never applies settings)

"""
"""The dashboard's writes, in the help only when kvtop may write (not ``--readonly``)."""

READONLY_ACTIONS_HELP = """\
Read-only (--readonly, KVTOP_READONLY=1 or readonly = true): no unload,
keep-alive, load or signal; Enter on a fix (events pane, alerts panel)
shows it as text to copy (c).

"""


SIGNAL_HELP = """\
  k          signal a GPU process outside Ollama that you own
             (Enter SIGTERM, 9 SIGKILL; as root, another user's asks twice)
"""
"""The ``k`` lines of :data:`ACTIONS_HELP`: left out where kvtop reads no process table of this
machine (``--demo``: its processes are simulated; a replay)."""


REPLAY_HELP = "  (a replay: kvtop sends nothing to any server)\n"

REPLAY_ACTIONS_HELP = """\
Replay: no unload, keep-alive, load or signal (nothing is live); Enter on a
fix (events pane, alerts panel) shows it as text to copy (c).

"""
"""What a replay says instead of the ``--readonly`` notes (a replay is read-only without the flag)."""


def help_text(readonly: bool = False, *, signals: bool = True, replay: bool = False) -> str:
    """The help, with the planner's load key and the actions (``u``, ``a``, ``k``), or with the
    ``--readonly`` notes instead (``replay``: the replay's own); ``signals=False`` leaves ``k`` out."""
    anchor = "  k / f      KV cache type / flash attention"
    head, sep, tail = HELP.partition(anchor)
    if not sep:
        return HELP.replace("{glyphs}\n", glyph_text())
    line_end = tail.index("\n") + 1
    planner = REPLAY_HELP if replay else READONLY_HELP if readonly else LOAD_HELP
    text = (head + sep + tail[:line_end] + planner + tail[line_end:]).replace("{glyphs}\n", glyph_text())
    actions = (
        REPLAY_ACTIONS_HELP
        if replay
        else READONLY_ACTIONS_HELP
        if readonly
        else ACTIONS_HELP
        if signals
        else ACTIONS_HELP.replace(SIGNAL_HELP, "")
    )
    return text.replace("What-if planner (w on a model)\n", actions + "What-if planner (w on a model)\n", 1)


class HelpScreen(ModalScreen[None]):
    """A modal with the keys and the legend (long lines wrap under their own column)."""

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 82; max-width: 100%; height: auto; max-height: 100%;
        border: round $primary; background: $surface; padding: 0 0 0 1; }
    HelpScreen Static { padding-right: 1; }
    """
    BINDINGS = [Binding("escape,question_mark,f1", "dismiss", "Close"), Binding("j", "scroll_down", "Down", show=False)]

    def __init__(self, readonly: bool | None = None) -> None:
        """``readonly``: leave the write keys out; None: ask the app (``settings.readonly``)."""
        super().__init__()
        self.readonly = readonly

    def compose(self) -> ComposeResult:
        settings = getattr(self.app, "settings", None)
        if self.readonly is None:
            self.readonly = bool(getattr(settings, "readonly", False))
        # `k` exists only where kvtop reads this machine's processes (not the demo's simulated ones)
        replay = getattr(self.app, "replay", None) is not None
        signals = not getattr(settings, "demo", False) and not replay
        with VerticalScroll():
            yield Static(Hanging(Text(help_text(self.readonly, signals=signals, replay=replay))), id="help-body")

    def action_scroll_down(self) -> None:
        """``j`` (as ``↓``): the help one line down."""
        self.query_one(VerticalScroll).scroll_down()
