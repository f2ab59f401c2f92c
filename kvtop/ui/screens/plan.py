"""What-if screen (``w`` on a model): memory at another num_ctx, KV cache type, slot count or flash attention.

The numbers come from :mod:`kvtop.model.plan`; this screen only keeps the configuration being
edited and renders. It follows the app's state like the detail view (``self.watch(self.app,
"state", ...)``), so the "now" side (what the model holds, its calibration) stays current.

Keys: ``↑``/``↓`` pick a field, ``←``/``→`` change it (num_ctx moves along a ladder of common
sizes), digits then Enter type num_ctx or slots, ``k`` cycles the cache type, ``f`` toggles flash
attention, ``a`` loads the model with the shown num_ctx after a confirmation, Esc goes back.

GPU free memory is given by the app (``gpu_free_bytes``, None until GPU telemetry exists); what
the model already holds in VRAM (``/api/ps`` ``size_vram``) counts as available to it.

The one request that changes the server is explicit and confirmed: ``POST /api/generate`` with
an empty prompt and ``options.num_ctx`` loads the model with that context (an empty prompt only
loads, Ollama API docs "Load a model"); it is disabled with ``--readonly``. Cache type, slots and
flash attention are server-wide (docs/ollama-internals.md §3.1-§3.3): the screen shows the lines that set them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.events import Key, Resize
from textual.reactive import var
from textual.screen import Screen
from textual.widgets import Footer, Static

from kvtop.model import kv, plan
from kvtop.model.ctx_advice import CtxAdvice, advice_for
from kvtop.model.known import Known
from kvtop.model.next_load import NextLoad
from kvtop.model.server_view import state_next_load
from kvtop.model.views import AppState, ModelView
from kvtop.sources.auth import ServerAccess
from kvtop.sources.ollama_writes import fetch_tensors, send_load_request
from kvtop.model.known import context_pair, setting_text
from kvtop.ui.format import ibytes, safe
from kvtop.ui.screens.confirm import ConfirmWrite
from kvtop.ui.screens.plan_text import (
    render_apply,
    render_bar,
    render_calibration,
    render_ctx_advice,
    render_figures,
    render_limits,
    render_next_load,
)
from kvtop.ui.widgets.hanging import Hanging

if TYPE_CHECKING:
    import httpx

__all__ = ["ConfirmLoad", "PlanScreen", "next_num_ctx", "plan_screen_for"]

NUM_CTX_LADDER: tuple[int, ...] = (
    256,
    512,
    1024,
    2048,
    3072,
    4096,
    6144,
    8192,
    12288,
    16384,
    24576,
    32768,
    49152,
    65536,
    98304,
    131072,
    196608,
    262144,
    393216,
    524288,
    786432,
    1048576,
)
"""num_ctx values ``←``/``→`` step through (powers of two and the 1.5× between them)."""

FIELDS: tuple[str, ...] = ("num_ctx", "KV cache type", "slots", "flash attention")

BAR_WIDTH = 60


def next_num_ctx(current: int, direction: int, cap: int | None) -> int:
    """The next ladder value above (``direction > 0``) or below ``current``, within ``[256, cap]``.

    The cap (the model's training context) is itself a stop, so the maximum is reachable.
    """
    ladder = sorted(set(NUM_CTX_LADDER) | ({cap} if cap else set()))
    if cap:
        ladder = [v for v in ladder if v <= cap]
    if direction > 0:
        return next((v for v in ladder if v > current), ladder[-1])
    return next((v for v in reversed(ladder) if v < current), ladder[0])


class ConfirmLoad(ConfirmWrite):
    """Asks before the what-if's load, the one request of this screen that changes the server
    (``ConfirmWrite``: Cancel focused; ``y`` or a click on Load, only once the dialog is armed)."""


class PlanScreen(Screen[None]):
    """The what-if planner for one model (by name and digest); follows the app's state.

    Args:
        name: Model name.
        digest: Manifest digest (``/api/ps``), to find the row again.
        gpu_free_bytes: Free GPU memory now, None when not known (no telemetry).
        readonly: ``--readonly``: the load action is disabled, and says why.
        host_url: Server URL for the load action; defaults to the state's ``host_url``.
        transport: An ``httpx`` transport for tests.
        fetch_tensors: Read the ``/api/show`` tensor list once, for per-layer weights (the
            state's ``/api/show`` cache drops it). Off by default: it is a request of its own.
        writer: The app's polling client of this server (``OllamaClient``): the load goes
            through its ``generate`` (so its headers and TLS settings apply); without one a
            client of its own is made for ``host_url``.
        access: Credentials, headers and TLS trust for ``host_url`` (``config.server_accesses``),
            for the tensor list and a load without ``writer``.
    """

    DEFAULT_CSS = """
    PlanScreen #plan-body { padding: 0 1; }
    """
    BINDINGS = [
        Binding("escape", "back", "Back"),
        Binding("up", "field(-1)", "Field ↑", show=False, priority=True),  # not the scroll's: ↑/↓ pick a field
        Binding("down", "field(1)", "Field ↓", show=False, priority=True),
        Binding("left", "change(-1)", "Less", key_display="←"),
        Binding("right", "change(1)", "More", key_display="→"),
        Binding("enter", "apply_typed", "Apply typed", show=False),
        Binding("backspace", "erase", "Erase", show=False),
        Binding("k", "cycle_kv", "KV type"),
        Binding("f", "toggle_fa", "Flash attn"),
        Binding("a", "load", "Load with this num_ctx"),
        Binding("q", "app.quit", "Quit"),
    ]

    gpu_free_bytes: var[int | None] = var(None)
    """Free GPU memory (bytes), set by the app as telemetry arrives; None when not known."""

    def __init__(
        self,
        name: str,
        digest: str,
        *,
        gpu_free_bytes: int | None = None,
        readonly: bool = False,
        host_url: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        fetch_tensors: bool = False,
        writer: object | None = None,
        access: ServerAccess | None = None,
    ) -> None:
        super().__init__()
        self.access = access
        self.writer = writer
        self.model_name = name
        self.model_digest = digest
        self.readonly = readonly
        self.host_url = host_url
        self.transport = transport
        self.fetch_tensors_enabled = fetch_tensors
        self.set_reactive(PlanScreen.gpu_free_bytes, gpu_free_bytes)
        self.view: ModelView | None = None
        self.spec: plan.ModelSpec | None = None
        self.config: plan.PlanConfig | None = None
        self.calibration: plan.Calibration | None = None
        self.engine: plan.Engine = "llama-server"
        self.field = 0
        self.typed = ""
        self.status = ""
        self.loading = False
        self._show_key: tuple[Any, ...] | None = None
        self._tensors: list[Any] | None = None
        self._limits_cache: dict[tuple[Any, ...], dict[str, int | None]] = {}
        self.advice: CtxAdvice | None = None
        self._advice_of: tuple[Any, ...] = ()
        self._next_load: NextLoad | None = None
        self._next_load_of: tuple[Any, ...] = ()

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(id="plan-body")
        yield Footer()

    def on_mount(self) -> None:
        self.watch(self.app, "state", self._on_state, init=True)
        self.call_after_refresh(self._refresh)  # the init call above ran before the screen counted as mounted
        if self.fetch_tensors_enabled:
            self._read_tensors()

    # -- state ------------------------------------------------------------------------------

    def _on_state(self, state: AppState | None) -> None:
        if state is None:
            return
        if self.host_url is None:
            self.host_url = state.host_url
        snap = state.last_ok
        if snap is not None and snap.version:
            self.engine = plan.engine_for_version(snap.version)
        view = next((v for v in state.models if v.name == self.model_name and v.digest == self.model_digest), None)
        self.view = view
        if view is not None and snap is not None:
            show = snap.shows.get(view.digest) or snap.shows.get(f"name:{view.name}")
            tag = snap.tags.get(view.digest)
            info: Mapping[str, Any] = show.model_info if show is not None and not show.error else {}
            key = (id(info), tag.size_bytes if tag else None, id(self._tensors), view.size_bytes, plan.kv_now(view))
            if key != self._show_key and info:
                self._show_key = key
                self.spec = plan.derive_weights(  # no weights figure: the spill alert's derivation
                    plan.model_spec(view.name, info, tensors=self._tensors, file_size=tag.size_bytes if tag else None),
                    view,
                    engine=self.engine,
                )
            self.calibration = plan.calibration_from_view(view)
            inputs = (state.log, view, state.gpu, snap)  # what the advice reads: recomputed when one changes
            if len(inputs) != len(self._advice_of) or any(a is not b for a, b in zip(inputs, self._advice_of)):
                self._advice_of = inputs
                self.advice = advice_for(state, view)  # model.ctx_advice: the figure every face shows
            if self.config is None:
                self.config = self._initial_config(view)
        self._refresh()

    def _initial_config(self, view: ModelView) -> plan.PlanConfig:
        kv_type = kv.normalize_cache_type((view.kv_type.value or "f16").split("/")[0]) or "f16"
        return plan.PlanConfig(
            num_ctx=view.context.value or plan.DEFAULT_NUM_CTX,
            cache_type=kv_type if kv_type in plan.PLAN_CACHE_TYPES else "f16",
            parallel=max(1, min(plan.MAX_SLOTS, view.parallel.value or 1)),
            flash_attention=view.flash_attention.value != "disabled",
        )

    def watch_gpu_free_bytes(self) -> None:
        self._refresh()

    def on_resize(self, event: Resize) -> None:
        self._refresh()  # the bar's width follows the terminal's

    @work(group="plan-tensors", exclusive=True, exit_on_error=False)
    async def _read_tensors(self) -> None:
        if not self.host_url:
            state = getattr(self.app, "state", None)
            self.host_url = state.host_url if isinstance(state, AppState) else None
        if not self.host_url:
            return
        tensors = await fetch_tensors(self.host_url, self.model_name, transport=self.transport, access=self.access)
        if tensors is not None:
            self._tensors = tensors
            self._show_key = None
            self._on_state(getattr(self.app, "state", None))

    # -- derived numbers --------------------------------------------------------------------

    def budget(self) -> int | None:
        """GPU memory available to this model: free + what it holds now (``size_vram``)."""
        held = self.view.size_vram_bytes if self.view is not None else None
        return plan.gpu_budget(self.gpu_free_bytes, held)

    def prediction(self) -> plan.Prediction | None:
        """The prediction for the configuration on screen, None before the model is known."""
        if self.spec is None or self.config is None:
            return None
        try:
            return plan.predict(
                self.spec, self.config, budget_bytes=self.budget(), calibration=self.calibration, engine=self.engine
            )
        except ValueError:
            return None

    def limits(self) -> dict[str, int | None]:
        """Largest num_ctx per cache type at these slots, and largest slot count at this num_ctx."""
        if self.spec is None or self.config is None:
            return {}
        budget = self.budget()
        key = (id(self.spec), self.config, budget, self.calibration, self.engine)
        cached = self._limits_cache.get(key)
        if cached is not None:
            return cached
        out: dict[str, int | None] = {}
        for ct in plan.PLAN_CACHE_TYPES:
            cfg = dataclasses.replace(self.config, cache_type=ct)
            try:
                out[ct] = plan.max_num_ctx_on_gpu(
                    self.spec, cfg, budget, calibration=self.calibration, engine=self.engine
                )
            except ValueError:
                out[ct] = None
        try:
            out["slots"] = plan.max_parallel_on_gpu(
                self.spec, self.config, budget, calibration=self.calibration, engine=self.engine
            )
        except ValueError:
            out["slots"] = None
        self._limits_cache = {key: out}
        return out

    def next_load(self) -> NextLoad | None:
        """What ``a`` would do (``model.server_view.state_next_load``: a load at this num_ctx)."""
        state = getattr(self.app, "state", None)
        if not isinstance(state, AppState) or self.config is None:
            return None
        key = (id(state), self.config.num_ctx, id(self.spec), self.gpu_free_bytes)
        if key != self._next_load_of:
            self._next_load_of = key
            ctx = Known(self.config.num_ctx, "requested", "the what-if's num_ctx")
            self._next_load = state_next_load(state, self.model_name, self.spec, ctx, self.gpu_free_bytes)
        return self._next_load

    # -- rendering --------------------------------------------------------------------------

    def _colors(self) -> Mapping[str, str]:
        try:
            return self.app.theme_variables
        except Exception:  # noqa: BLE001 - before the app has a theme
            return {}

    def _refresh(self) -> None:
        if not self.is_mounted:
            return
        self.query_one("#plan-body", Static).update(Hanging(self.body_text()))

    def body_text(self) -> Text:
        """Everything on the screen as text (also used by tests)."""
        colors = self._colors()
        out = Text()
        v, spec, cfg = self.view, self.spec, self.config
        out.append("What if: ", style="bold")
        out.append(safe(self.model_name, 80), style="bold")
        if spec is not None:
            out.append(
                f"   {safe(spec.architecture, 30)}, {spec.block_count} layers"
                + (f", trained {spec.context_train:,} tokens" if spec.context_train else "")
            )
        out.append("\n")
        if v is not None:
            now = (
                f"loaded now: {context_pair(v.context, v.parallel, sep=' × ')} slot(s), "
                f"{setting_text(v.kv_type)}, flash attention {setting_text(v.flash_attention)}; "
                f"size {ibytes(v.size_bytes)}, {v.processor}"
            )
            out.append(safe(now, 200) + "\n", style="dim")
        else:
            out.append("not loaded now (the plan still holds; nothing is held in VRAM)\n", style="dim")
        if spec is None or cfg is None:
            out.append("\nWaiting for /api/show of this model…\n")
            return out
        out.append("\n")
        values = [f"{cfg.num_ctx:,}", cfg.cache_type, str(cfg.parallel), "on" if cfg.flash_attention else "off"]
        hints = [
            "←/→ ladder, or type digits + Enter",
            "←/→ or k: f16 · q8_0 · q4_0",
            "←/→, or type + Enter",
            "←/→ or f (the runner's resolution)",
        ]
        for i, (label, value, hint) in enumerate(zip(FIELDS, values, hints)):
            selected = i == self.field
            out.append("▸ " if selected else "  ", style="bold")
            out.append(f"{label:<17}", style="bold" if selected else "")
            out.append(f"{value:<10}", style="reverse" if selected else "bold")
            if selected and self.typed:
                out.append(f" typing {self.typed}_ (Enter applies, Esc cancels)", style=colors.get("kv-warn", ""))
            else:
                out.append(f" {hint}", style="dim")
            out.append("\n")
        p = self.prediction()
        if p is None:
            out.append("\nThis configuration cannot be planned.\n")
            return out
        out.append("\n")
        held = self.view.size_vram_bytes if self.view is not None else None
        render_bar(out, p, colors, held_bytes=held, gpu_free_bytes=self.gpu_free_bytes, width=self.bar_width())
        render_figures(out, p, colors, spec)
        render_calibration(out, spec, self.calibration, self.engine)
        render_limits(out, p, self.limits(), spec)
        render_ctx_advice(out, self.advice if self.view is not None else None)
        render_next_load(out, self.next_load(), colors)
        server = self._initial_config(self.view) if self.view is not None else None
        render_apply(out, p, colors, readonly=self.readonly, typed=self.typed, status=self.status, server=server)
        return out

    def bar_width(self) -> int:
        """Cells of the memory bar: ``BAR_WIDTH``, less on a narrow terminal so the bar and its
        legend stay on one line (the legend, padding and scrollbar take 38 cells)."""
        try:
            columns = self.app.size.width
        except Exception:  # noqa: BLE001 - no app yet (body_text called directly)
            return BAR_WIDTH
        return max(20, min(BAR_WIDTH, columns - 38))

    # -- keys -------------------------------------------------------------------------------

    def _set(self, **changes: Any) -> None:
        if self.config is None:
            return
        self.config = dataclasses.replace(self.config, **changes)
        self._refresh()

    def action_back(self) -> None:
        if self.typed:
            self._set_typed("")
            self._refresh()
            return
        self.dismiss(None)

    def action_field(self, step: int) -> None:
        if self.typed:  # digits typed and not yet applied are applied, never dropped silently
            self.action_apply_typed()
        self.field = (self.field + step) % len(FIELDS)
        self._refresh()

    def action_change(self, direction: int) -> None:
        cfg = self.config
        if cfg is None:
            return
        if self.typed:  # digits typed and not yet applied are applied first, then stepped from
            self.action_apply_typed()
            cfg = self.config
            if cfg is None:
                return
        name = FIELDS[self.field]
        if name == "num_ctx":
            cap = self.spec.context_train if self.spec is not None else None
            self._set(num_ctx=next_num_ctx(cfg.num_ctx, direction, cap))
        elif name == "KV cache type":
            types = plan.PLAN_CACHE_TYPES
            i = types.index(cfg.cache_type) if cfg.cache_type in types else 0
            self._set(cache_type=types[(i + direction) % len(types)])
        elif name == "slots":
            self._set(parallel=max(1, min(plan.MAX_SLOTS, cfg.parallel + direction)))
        else:
            self._set(flash_attention=not cfg.flash_attention)

    def action_cycle_kv(self) -> None:
        self.field = FIELDS.index("KV cache type")
        self.action_change(1)

    def action_toggle_fa(self) -> None:
        self.field = FIELDS.index("flash attention")
        self.action_change(1)

    def on_key(self, event: Key) -> None:
        """Digits type a value into the selected numeric field (num_ctx or slots). While digits
        are being typed, other characters do nothing (``5a`` never loads, ``12ab⏎`` applies 12):
        only Enter, ↑/↓ (apply), Esc (cancel) and Backspace act on the entry."""
        if event.character is not None and event.character.isdigit() and FIELDS[self.field] in ("num_ctx", "slots"):
            if len(self.typed) < 10:
                self._set_typed(self.typed + event.character)
            event.stop()
            event.prevent_default()
            self._refresh()
        elif event.key == "enter" and self.typed:
            # handled here, in key order, so "8192⏎↓↓4⏎" typed in one burst applies both values
            event.stop()
            event.prevent_default()
            self.action_apply_typed()
        elif self.typed and event.is_printable:
            event.stop()  # a letter in the middle of a number: no action, the entry waits
            event.prevent_default()
            self.status = f"typing {self.typed}: Enter applies it, Esc cancels (other keys do nothing meanwhile)"
            self._refresh()

    def _set_typed(self, typed: str) -> None:
        """Start, extend or end the typed entry; the footer hides the letter keys while it lasts."""
        was = bool(self.typed)
        self.typed = typed
        if not typed and self.status.startswith("typing "):
            self.status = ""
        if was != bool(typed):
            self.refresh_bindings()

    def action_erase(self) -> None:
        self._set_typed(self.typed[:-1])
        self._refresh()

    def action_apply_typed(self) -> None:
        if not self.typed or self.config is None:
            return
        value = int(self.typed)
        self._set_typed("")
        if FIELDS[self.field] == "num_ctx":
            if value < 1:
                self.status = "num_ctx must be at least 1"
            else:
                self.status = ""
                self._set(num_ctx=value)
                return
        else:
            if not 1 <= value <= plan.MAX_SLOTS:
                self.status = f"slots must be 1–{plan.MAX_SLOTS} (llama.cpp LLAMA_MAX_SEQ)"
            else:
                self.status = ""
                self._set(parallel=value)
                return
        self._refresh()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """With ``--readonly`` the load action is not offered at all; while a load runs it is
        shown disabled; while digits are being typed the letter keys are hidden (they wait)."""
        if action == "load" and self.readonly:
            return False
        if action in ("load", "cycle_kv", "toggle_fa") and self.typed:
            return False
        if action == "load" and self.loading:
            return None
        return True

    def action_load(self) -> None:
        """Ask to load the model with the num_ctx on screen (never while digits are being typed:
        the dialog names exactly the value the screen shows)."""
        if self.readonly or self.config is None or self.loading or self.typed:
            return
        num_ctx = self.config.num_ctx
        keep: int | None = -1 if self.view is not None and self.view.forever else None
        lines = [
            f"Load {self.model_name} with num_ctx {num_ctx:,} now?",
            "",
            f"kvtop sends POST {self.host_url or '?'}/api/generate with an empty prompt and "
            f"options.num_ctx {num_ctx}"
            + (", keep_alive -1 (it is kept forever now)" if keep == -1 else " (keep_alive: the server's default)")
            + ".",
            "If the model is loaded with another num_ctx, Ollama reloads it: requests wait meanwhile.",
        ]
        if self.view is not None:
            server = self._initial_config(self.view)
            cfg = self.config
            if (cfg.cache_type, cfg.parallel, cfg.flash_attention) != (
                server.cache_type,
                server.parallel,
                server.flash_attention,
            ):
                lines.append(
                    f"Only num_ctx changes: the server keeps its own KV type ({server.cache_type}), "
                    f"slots ({server.parallel}) and flash attention."
                )
        self.app.push_screen(ConfirmLoad("\n".join(lines)), lambda yes: self._confirmed(bool(yes), num_ctx, keep))

    def _confirmed(self, yes: bool, num_ctx: int, keep: int | None) -> None:
        if not yes:
            log = getattr(getattr(self.app, "operator", None), "log_action", None)  # the app's write log
            if log is not None:
                log(f"load {self.model_name} with num_ctx {num_ctx:,}", None, cancelled=True)
            self.status = "load cancelled: nothing was sent"
            self._refresh()
            return
        self._send(num_ctx, keep)

    @work(group="plan-load", exclusive=True, exit_on_error=False)
    async def _send(self, num_ctx: int, keep: int | None) -> None:
        if not self.host_url:
            self.status = "load failed: the server URL is not known"
            self._refresh()
            return
        self.loading = True
        self.status = f"sending POST /api/generate (num_ctx {num_ctx:,})… the model loads"
        self.refresh_bindings()
        self._refresh()
        generate = getattr(self.writer, "generate", None)
        try:
            if generate is not None:
                error = await generate(self.model_name, keep_alive=keep, num_ctx=num_ctx)
            else:
                error = await send_load_request(
                    self.host_url, self.model_name, num_ctx, keep, transport=self.transport, access=self.access
                )
        finally:
            self.loading = False
            self.refresh_bindings()
        log = getattr(getattr(self.app, "operator", None), "log_action", None)  # the app's write log
        if log is not None:
            log(f"load {self.model_name} with num_ctx {num_ctx:,}", error)
        if error is None:
            self.status = f"loaded with num_ctx {num_ctx:,}: /api/ps shows it on the next poll"
            self.notify(f"{self.model_name}: loaded with num_ctx {num_ctx:,}", timeout=4, markup=False)
        else:
            self.status = f"load failed: {error}"
            self.notify(safe(self.status, 200), severity="error", timeout=8, markup=False)
        self._refresh()


def plan_screen_for(
    view: ModelView, *, gpu_free_bytes: int | None, readonly: bool, host_url: str | None = None
) -> PlanScreen:
    """The screen for a dashboard row (what ``w`` pushes)."""
    return PlanScreen(view.name, view.digest, gpu_free_bytes=gpu_free_bytes, readonly=readonly, host_url=host_url)
