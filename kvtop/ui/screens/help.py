"""Help: keys, column meanings and source marks."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from kvtop.ui.widgets.hanging import Hanging

HELP = """\
kvtop — top for an Ollama server's memory

Keys
  q          quit                      ?          this help
  p          pause / resume polling    + / -      slower / faster refresh
  s          cycle sort order          /          filter (Esc clears it)
  Enter      details of the model      Esc        back / close
  w          what-if planner           l / r      events pane / raw lines
  g          GPU panel                 Ctrl+C     quit from anywhere
  S          reverse the sort          t          next theme
  Up Down    move the selection        1–9 ] [    server N / next / previous
  h          history plots (z or ← → window, Esc back)
  m / f / v  memory map / alerts with fixes / history panels (from 120×36
             they show by themselves; a key's choice is saved; click a
             model's bar in the map to select it)
  i          server view: traffic, health, pre-flight of pulled models

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

GPU panel (one line per GPU under 100 columns; the map's glyphs, colours)
  █          a loaded model's runner (NVML per-process memory), in the
             weights colour, every other model dim, its name over its part
  ▚          other Ollama processes    ▄          other processes
  ·          driver, reserved, unlisted ░          free

Memory map (m; one bar per GPU and RAM, a model's name over its part)
  █ ▓ ▒      a model's weights / KV cache / compute
  ▇          a model, not broken down  ▚          other Ollama processes
  ▞          runner overhead (measured − listed)
  ▄          a process outside Ollama (its user and program in the legend)
  ·          unattributed (driver, OS) ░          free

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
  ▼ / ▲      the sorted column (largest first / A to Z; ASCII: v / A)
  ✖ ▲ ℹ      alerts: critical / warning / info
  ASCII      in the header: --ascii, or no UTF-8 locale; every glyph in
             this help is drawn as its ASCII stand-in, the marks unchanged

Width      ID, byte figures, FLASH ATTN, KV TYPE, TOK/S from 160 columns;
           UNTIL from 100; VRAM 1m from 120.
Ctrl+P opens the command palette (themes, keys).

Esc or ? closes this help.
"""


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
        return HELP
    line_end = tail.index("\n") + 1
    planner = REPLAY_HELP if replay else READONLY_HELP if readonly else LOAD_HELP
    text = head + sep + tail[:line_end] + planner + tail[line_end:]
    actions = (REPLAY_ACTIONS_HELP if replay else READONLY_ACTIONS_HELP if readonly else ACTIONS_HELP if signals
               else ACTIONS_HELP.replace(SIGNAL_HELP, ""))
    return text.replace("What-if planner (w on a model)\n", actions + "What-if planner (w on a model)\n", 1)


class HelpScreen(ModalScreen[None]):
    """A modal with the keys and the legend (long lines wrap under their own column)."""

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 82; max-width: 100%; height: auto; max-height: 100%;
        border: round $primary; background: $surface; padding: 0 0 0 1; }
    HelpScreen Static { padding-right: 1; }
    """
    BINDINGS = [Binding("escape,question_mark", "dismiss", "Close")]

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
