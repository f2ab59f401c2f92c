"""Log-event rules: what the server log says went wrong recently.

* ``prompt_truncated`` / ``prompt_rejected``: prompts longer than the context were cut, or
  refused by llama-server; the fix is the num_ctx that holds the longest, sized by the KV math.
* ``context_clamped``: Ollama clamped a requested num_ctx to the training context.
* Incidents: ``oom``, ``load_failed``, ``quantized_v_refused``, ``runner_crash``, ``eviction``
  (lines of one kind less than a minute apart are one incident).
* ``reload_churn``: the same weights loaded again and again (``Thresholds.churn_reloads`` within
  ``churn_window_s``).

An event counts only while it is recent: its time is within ``Thresholds.event_window_s``
before now. A line with no timestamped line before it has no time and never counts, except the
incidents of a loaded model's current load. An event of a load that a newer load of the same
weights has replaced does not count either.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from kvtop.logparse.events import (
    ContextClamped,
    ContextOverflow,
    Eviction,
    LoadFailed,
    LogEvent,
    Oom,
    PromptRejected,
    Truncation,
    UnknownWarning,
)
from kvtop.logparse.load_build import Load
from kvtop.model.alerts.context import Ctx
from kvtop.model.alerts.log_scan import Timed
from kvtop.model.alerts.fa import fa_forced
from kvtop.model.alerts.spill import context_fix
from kvtop.model.alerts.text import minutes, plural, short_blob, span_text
from kvtop.model.alerts.types import KINDS, Alert, Fix

if TYPE_CHECKING:  # annotations only: the rules read the state, the state never imports the rules
    from kvtop.model.views import ModelView

__all__ = ["churn_alerts", "clamp_alerts", "incident_alerts", "rejection_alerts", "truncation_alerts"]

_INCIDENT_GAP_S: Final = 60.0
"""Lines of one kind less than this apart (and of one load) are one incident (as ``logparse.loads``)."""

_QUANTIZED_V_RE: Final = re.compile(
    r"V cache quantization requires flash_attn|quantized V cache (?:was requested|requires)", re.IGNORECASE
)
_CRASH_RE: Final = re.compile(
    r"GGML_ASSERT|SIGSEGV|SIGABRT|segmentation fault|core dumped|panic:|runner process has terminated"
    r"|exception in thread|std::bad_alloc",
    re.IGNORECASE,
)


# --------------------------------------------------------------------------------------------
# Prompts cut or refused, contexts clamped


def _next_power_of_two(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _single_model(ctx: Ctx) -> ModelView | None:
    return ctx.views[0] if len(ctx.views) == 1 else None


_OVERFLOW_FORMS: Final = {
    "truncation": "truncation line",
    "messages": "chat history cut (DEBUG)",
    "http_400": "HTTP 400 refusal",
}
"""How the alert names each form of context overflow it saw (``Truncation``, ``ContextOverflow.form``)."""


def _form(e: LogEvent) -> str:
    return e.form if isinstance(e, ContextOverflow) else "truncation"


def _forms_seen(items: list[Timed]) -> str:
    """``truncation line ×2, HTTP 400 refusal on /api/chat ×1``: each form the items show, in the order first seen."""
    counts: dict[str, int] = {}
    for t in items:
        e = t.event
        label = _OVERFLOW_FORMS[_form(e)]
        if isinstance(e, ContextOverflow) and e.path:
            label += f" on {e.path}"
        counts[label] = counts.get(label, 0) + 1
    return ", ".join(f"{label} ×{n}" for label, n in counts.items())


def truncation_alerts(ctx: Ctx) -> list[Alert]:
    """``prompt_truncated`` from every form of a prompt over the context, per model: Ollama's and the
    runners' truncation lines, the DEBUG chat-history cut and the HTTP 400 refusals on the prompt routes
    (``ContextOverflow``, docs/ollama-internals.md §4.7); the model is the only loaded model when the line's
    load is its own, the model of the line's load when that model is no longer loaded, else none. The text says which forms were seen; the fix holds the longest prompt,
    else twice the limit or the model's context."""
    window = ctx.th.event_window_s
    groups: dict[str | None, list[Timed]] = {}
    for t in ctx.recent:
        e = t.event
        if not isinstance(e, (Truncation, ContextOverflow)):
            continue
        owner = ctx.owner(e.line_no)
        current = owner is not None and ctx.live and ctx.view_for_load(owner) is not None
        if not (ctx.recent_enough(t.ts, window) or (t.ts is None and current)) or ctx.superseded(owner):
            continue
        single = _single_model(ctx)
        model = None
        if single is not None and (owner is None or owner.model_blob in (None, single.model_blob)):
            if not isinstance(e, Truncation):
                model = single.name  # the lines name no model and no context: the only model served them
            elif e.prompt is not None and single.context.value is not None and single.context.value >= e.prompt:
                continue  # the running context holds that prompt now: from an earlier, smaller load
            elif (
                owner is None
                and e.limit is not None
                and single.context.value is not None
                and e.limit not in (single.context.value, single.total_ctx_cells)
            ):
                model = None  # a line that names no model, with another context: not this runner's
            else:
                model = single.name
        elif (
            owner is not None
            and owner.model_blob is not None
            and not current
            and ctx.view_for_blob(owner.model_blob) is None
        ):
            # the load that printed it is of a model no longer loaded: name it (a past alert,
            # model.alerts.current), not none, so it leaves the banner with its model
            model = ctx.name_for_blob(owner.model_blob)
        groups.setdefault(model, []).append(t)
    out: list[Alert] = []
    for model, items in groups.items():
        cuts = [i.event for i in items if isinstance(i.event, Truncation)]
        refused = sum(1 for i in items if _form(i.event) == "http_400")
        last = cuts[-1] if cuts else None
        latest = ""
        if last is not None:
            cut = f"a {last.prompt}-token prompt cut to {last.new}, " if last.prompt is not None else ""
            latest = f"latest: {cut}limit {last.limit}, keep {last.keep}; "
        if len(cuts) == len(items) and last is not None:  # only truncation lines: as the line reads
            cut = f"a {last.prompt}-token prompt cut to {last.new}, " if last.prompt is not None else ""
            text = (
                f"{plural(len(items), 'prompt')} truncated in the last {minutes(window)} (latest: {cut}limit"
                f" {last.limit}, keep {last.keep}): the replies ignored the start of the prompt"
            )
        elif refused == len(items):
            text = (
                f"{plural(len(items), 'request')} refused with HTTP 400 in the last {minutes(window)}"
                f" ({_forms_seen(items)}): Ollama's answer to a prompt over the context (the log does not print"
                f" the reason)"
            )
        else:
            text = (
                f"{plural(len(items), 'prompt')} over the context in the last {minutes(window)} ({latest}seen:"
                f" {_forms_seen(items)}): the replies ignored the start of the prompt or were refused"
            )
        fixes: tuple[Fix, ...] = ()
        view = ctx.view_named(model)
        longest = max(
            (i.event.prompt for i in items if isinstance(i.event, Truncation) and i.event.prompt), default=None
        )
        if longest is not None:
            target = _next_power_of_two(longest)
            cap = view.context_train if view is not None else None
            if cap:
                target = min(target, cap)
            cost = "more KV cache memory" + (f"; capped at the training context {cap}" if cap and target == cap else "")
            if view is not None:
                fixes = (context_fix(ctx, view, target, cost),)
            else:
                fixes = (Fix(f"num_ctx {target}", f"holds the longest prompt seen ({longest} tokens)", None, cost),)
        elif last is not None and last.limit:
            fixes = (
                Fix(
                    f"num_ctx {2 * last.limit}",
                    "the log does not print the prompt length: twice the limit",
                    None,
                    "more KV cache memory",
                ),
            )
        elif view is not None and view.context.value:
            target = 2 * view.context.value
            cap = view.context_train
            if cap:
                target = min(target, cap)
            if target > view.context.value:
                fixes = (
                    context_fix(
                        ctx,
                        view,
                        target,
                        "more KV cache memory; the log does not print the prompt length: twice the context",
                    ),
                )
        since = next((i.ts for i in items if i.ts is not None), None)
        out.append(Alert("prompt_truncated", "warning", model, since, text, fixes, f"prompt_truncated:{model or '-'}"))
    return out


def rejection_alerts(ctx: Ctx) -> list[Alert]:
    """``prompt_rejected`` from llama-server's ``request (N tokens) exceeds the available context size
    (M tokens)``: the model is the load the line belongs to (the newest begun before it), else the
    only loaded model; the fix is the num_ctx that holds the longest prompt, sized by the KV math."""
    window = ctx.th.event_window_s
    groups: dict[str | None, list[tuple[Timed, PromptRejected]]] = {}
    for t in ctx.recent:
        e = t.event
        if not isinstance(e, PromptRejected):
            continue
        owner = ctx.owner(e.line_no)
        view = ctx.view_for_load(owner) if ctx.live else None
        if view is None and owner is not None and owner.model_blob is not None:
            view = ctx.view_for_blob(owner.model_blob) if ctx.live else None
        if view is None and (owner is None or owner.model_blob is None) and ctx.live:
            view = _single_model(ctx)
        current = view is not None and owner is not None and view.load is owner
        if not (ctx.recent_enough(t.ts, window) or (t.ts is None and current)) or ctx.superseded(owner):
            continue
        if view is not None and view.context.value is not None and view.context.value >= e.n_prompt_tokens:
            continue  # the running context holds that prompt now: from an earlier, smaller load
        model = view.name if view is not None else ctx.name_for_blob(owner.model_blob if owner is not None else None)
        groups.setdefault(model, []).append((t, e))
    out: list[Alert] = []
    for model, items in groups.items():
        last = items[-1][1]
        longest = max(e.n_prompt_tokens for _, e in items)
        view = ctx.view_named(model)
        target = _next_power_of_two(longest)
        cap = view.context_train if view is not None else None
        if cap and target > cap:
            target = cap
        holds = target >= longest
        head = (
            f"prompt rejected: {last.n_prompt_tokens} tokens > num_ctx {last.n_ctx}"
            if len(items) == 1
            else f"{len(items)} prompts rejected in the last {minutes(window)} (latest: {last.n_prompt_tokens} tokens"
            f" > num_ctx {last.n_ctx})"
        )
        if holds:
            tail = f"; num_ctx {target} would hold {'it' if len(items) == 1 else f'the longest ({longest} tokens)'}"
        else:
            tail = f"; even the training context {cap} is shorter than {longest} tokens: the client must send less"
        text = head + tail + " (llama-server answered HTTP 400, nothing was generated)"
        cost = "more KV cache memory" + (f"; capped at the training context {cap}" if cap and target == cap else "")
        fix: Fix | None = None
        if holds and view is not None:
            fix = context_fix(ctx, view, target, cost)
        elif holds:
            fix = Fix(f"num_ctx {target}", f"holds the longest prompt seen ({longest} tokens)", None, cost)
        since = next((t.ts for t, _ in items if t.ts is not None), ctx.now)
        out.append(
            Alert(
                "prompt_rejected",
                "warning",
                model,
                since,
                text,
                (fix,) if fix is not None else (),
                f"prompt_rejected:{model or '-'}",
            )
        )
    return out


def clamp_alerts(ctx: Ctx) -> list[Alert]:
    """``context_clamped`` from Ollama's clamp warning (before the spawn: the next load is the model)."""
    found: dict[str | None, tuple[Timed, int | None, int | None]] = {}
    first: dict[str | None, float | None] = {}
    for t in ctx.recent:
        e = t.event
        if not isinstance(e, ContextClamped):
            continue
        if not ctx.recent_enough(t.ts, ctx.th.event_window_s):
            continue
        load = ctx.next_load(e.line_no)
        model = ctx.name_for_blob(load.model_blob) if load is not None else None
        found[model] = (t, e.requested, e.n_ctx_train)
        first.setdefault(model, t.ts)
    out: list[Alert] = []
    for model, (_t, asked, train) in found.items():
        text = (
            f"num_ctx {asked if asked is not None else '?'} was requested; Ollama clamped it to the training context"
            f" {train if train is not None else '?'}: longer prompts are truncated"
        )
        out.append(
            Alert("context_clamped", "info", model, first.get(model), text, (), f"context_clamped:{model or '-'}")
        )
    return out


# --------------------------------------------------------------------------------------------
# Incidents: OOM, failed loads, refused quantized V caches, crashes, evictions


@dataclass(slots=True)
class _Incidents:
    kind: str
    model: str | None
    blob: str | None = None
    load: Load | None = None
    items: list[Timed] = field(default_factory=list)

    def count(self) -> int:
        """Incidents: lines of one kind within ``_INCIDENT_GAP_S`` of each other are one."""
        n = 0
        last: float | None = None
        for t in self.items:
            if last is None or t.ts is None or t.ts - last > _INCIDENT_GAP_S or _starts_incident(t.event):
                n += 1
            last = t.ts if t.ts is not None else last
        return max(1, n)

    def latest_first(self) -> Timed:
        """The first line of the latest incident (its most specific reason)."""
        first = self.items[-1]
        for t in reversed(self.items[:-1]):
            if _starts_incident(first.event):
                break
            nxt = first.ts
            if t.ts is not None and nxt is not None and nxt - t.ts > _INCIDENT_GAP_S:
                break
            first = t
        return first


def _starts_incident(e: LogEvent) -> bool:
    """An allocator's own failure line (``Oom.allocation``) is one try of a fit/alloc loop: an incident of its own
    (as ``logparse.loads`` counts them)."""
    return type(e) is Oom and e.allocation


def _reason(e: LogEvent) -> str:
    if isinstance(e, UnknownWarning):
        return e.message
    reason = getattr(e, "reason", "")
    return reason if isinstance(reason, str) else ""


def incident_alerts(ctx: Ctx, current: Mapping[int, ModelView]) -> list[Alert]:
    """OOMs, failed loads, refused quantized V caches, runner crashes and evictions, one alert per
    kind and model, counted in incidents; ``current`` maps ``id(load)`` of the rows' loads."""
    window = ctx.th.event_window_s
    groups: dict[tuple[str, str | None], _Incidents] = {}
    refused_loads: set[int] = set()
    failed: list[tuple[Timed, Load | None]] = []

    def add(kind: str, t: Timed, blob: str | None, owner: Load | None) -> None:
        model = ctx.name_for_blob(blob)
        group = groups.setdefault((kind, model or blob), _Incidents(kind, model, blob))
        group.load = owner or group.load
        group.items.append(t)

    for t in ctx.recent:
        e = t.event
        owner = ctx.strict_owner(e.line_no)
        counts = ctx.recent_enough(t.ts, window) or (t.ts is None and owner is not None and id(owner) in current)
        if not counts or ctx.superseded(owner):
            continue
        # the model: the one the line names, else the load being started when it was printed
        blob = getattr(e, "model_blob", None) or (owner.model_blob if owner is not None else None)
        if isinstance(e, Oom):
            add("oom", t, blob, owner)
        elif isinstance(e, LoadFailed):
            if _QUANTIZED_V_RE.search(e.reason):
                refused_loads.add(owner.index if owner is not None else -e.line_no)
                add("quantized_v_refused", t, blob, owner)
            else:
                failed.append((t, owner))
        elif isinstance(e, Eviction):
            add("eviction", t, e.model_blob, None)  # about the model evicted, not the one loading
        elif (
            isinstance(e, UnknownWarning)
            and e.level.upper() in ("ERROR", "FATAL", "PANIC", "ERR")
            and _CRASH_RE.search(e.message)
        ):
            add("runner_crash", t, blob, owner)
    for t, owner in failed:  # failures of a load whose quantized V was refused are that incident
        if owner is not None and owner.index in refused_loads:
            continue
        blob = getattr(t.event, "model_blob", None) or (owner.model_blob if owner is not None else None)
        add("load_failed", t, blob, owner)
    out: list[Alert] = []
    for (kind, ident), inc in groups.items():
        model = inc.model
        inc.items.sort(key=lambda t: (t.ts is None, t.ts or 0.0, t.event.line_no))
        last = inc.latest_first().event
        n = inc.count()
        severity, _ = KINDS[kind]
        reason = _reason(last)
        when = f"in the last {minutes(window)}"
        name = model or (short_blob(inc.blob) if inc.blob else None)
        who = f"{name}: " if name else ""
        fixes: tuple[Fix, ...] = ()
        if kind == "oom":
            text = f"{who}{plural(n, 'out-of-memory incident')} {when}: {reason}"
        elif kind == "load_failed":
            text = f"{who}{plural(n, 'failed load')} {when}: {reason}"
        elif kind == "quantized_v_refused":
            text = f"{who}the load failed: a quantized V cache needs flash attention, which is off ({reason})"
            forced = inc.load is not None and fa_forced(inc.load)
            fixes = (
                Fix(
                    "OLLAMA_KV_CACHE_TYPE=f16",
                    "the load then succeeds without flash attention",
                    None,
                    "f16 cache: about twice the KV memory of q8_0; server-wide, restart Ollama",
                ),
            )
            if not forced:  # never offered where the model or GPU cannot use flash attention
                fixes += (
                    Fix(
                        "OLLAMA_FLASH_ATTENTION=1",
                        "lets llama.cpp use the quantized V cache",
                        None,
                        "server-wide, restart Ollama",
                    ),
                )
        elif kind == "runner_crash":
            text = f"{who}a runner aborted {when}: {reason}"
        else:
            text = (
                f"{plural(n, 'eviction')} {when}" + (f": {name} unloaded to make room" if name else "") + f" ({reason})"
            )
        since = next((i.ts for i in inc.items if i.ts is not None), ctx.now)
        out.append(Alert(kind, severity, model, since, text, fixes, f"{kind}:{ident or '-'}"))
    return out


# --------------------------------------------------------------------------------------------
# Reload churn


CHAIN_SHOWN = 6
"""A reload churn's changed setting shows at most this many of its values (the first two and the
last four, the skipped ones counted): a demo or a busy server left running for the whole window
would otherwise list dozens."""


def value_chain(values: list[object], shown: int = CHAIN_SHOWN) -> str:
    """``a → b → c``, with the middle cut to ``… (N more) …`` past ``shown`` values (None: ``?``)."""
    text = ["?" if v is None else str(v) for v in values]
    if len(text) > shown:
        head, tail = text[:2], text[-(shown - 2) :]
        text = [*head, f"… ({len(values) - shown} more)", *tail]
    return " → ".join(text)


def churn_alerts(ctx: Ctx) -> list[Alert]:
    """``reload_churn``: one weights blob loaded ``churn_reloads`` times within ``churn_window_s``,
    with what changed between the loads."""
    by_blob: dict[str, list[tuple[float, Load]]] = {}
    for load in ctx.loads:
        if load.model_blob is None:
            continue
        t = ctx.load_time(load)
        if ctx.recent_enough(t, ctx.th.churn_window_s) and t is not None:
            by_blob.setdefault(load.model_blob, []).append((t, load))
    out: list[Alert] = []
    for blob, items in by_blob.items():
        if len(items) < ctx.th.churn_reloads:
            continue
        items.sort(key=lambda x: x[0])
        loads = [load for _, load in items]
        model = ctx.name_for_blob(blob)
        changes: list[str] = []
        fixes: list[Fix] = []
        for label, attr in (
            ("num_ctx", "num_ctx_per_seq"),
            ("parallel", "parallel"),
            ("KV type", "kv_type_k"),
            ("flash attention", "flash_attention"),
        ):
            values: list[object] = [getattr(x, attr) for x in loads]
            if len({v for v in values if v is not None}) > 1:
                changes.append(f"{label} " + value_chain(values))
        span = items[-1][0] - items[0][0]
        text = f"{model or short_blob(blob)} loaded {len(items)} times in {span_text(span)}" + (
            f": {'; '.join(changes)}" if changes else ": the same settings each time (keep_alive or eviction)"
        )
        if any(c.startswith("num_ctx") for c in changes):
            fixes.append(
                Fix(
                    "one num_ctx for every client",
                    "PARAMETER num_ctx in a Modelfile, or OLLAMA_CONTEXT_LENGTH and no options.num_ctx in requests",
                    None,
                    "clients that asked for more are truncated",
                )
            )
        elif not changes:
            fixes.append(
                Fix(
                    "keep_alive -1 (or OLLAMA_KEEP_ALIVE)",
                    "keeps the model loaded between requests",
                    None,
                    "holds its memory while idle",
                )
            )
        out.append(
            Alert("reload_churn", "warning", model, items[0][0], text, tuple(fixes), f"reload_churn:{model or blob}")
        )
    return out
