"""The requests a model served, from the runner log: each one's size in tokens, and the prompts cut or refused.

Pure: no I/O, no clock. The input is the log's parsed events (``LogState.load_events``) and the loads
they form; the output (:class:`ServedRequests`) feeds :mod:`kvtop.model.ctx_advice`.

Where a request's size comes from (docs/ollama-internals.md §4.7, §4.10):

* **Timed requests.** The runner's timing lines (``RequestTiming``: Era A ``print_timings``, Era C
  llama-server ``slot print_timing``) give the tokens generated (``eval … / N tokens``) and the prompt
  tokens *evaluated*, without those reused from the slot's cache. The whole prompt is llama-server's
  ``new prompt, …, task.n_tokens = P`` line of the same slot and task (``SlotActivity``, Era C), else the
  evaluated tokens plus the reused prefix (``prompt_cached_tokens``) when the log gives it, else the
  evaluated tokens alone: then the size is a lower bound (the reused prefix is not known).
* **Cut prompts.** A ``truncating input prompt … prompt=P`` line (``Truncation``) precedes the request it
  cut; the request's timing line then shows the cut prompt. Within one load the cuts are paired in order
  with the timed requests that follow them, and such a request counts at its uncut size. A cut with no
  timed request after it (Era B logs no timing lines) counts as a request of its prompt alone (a lower
  bound: what it generated is not printed).
* **Refused prompts.** llama-server's ``request (N tokens) exceeds the available context size``
  (``PromptRejected``) is a request of N prompt tokens that generated nothing.
* **Unsized overflows.** Era A's ``input truncated`` (no prompt count), the DEBUG chat-history cut and the
  HTTP 400 refusals (``ContextOverflow``) say a prompt did not fit, not how long it was: counted, not sized.

Attribution: the log's request lines name no model; each belongs to the newest load begun before it
(as ``model.logstate.throughput`` and ``model.slots`` attribute them), and a model's requests are those of
every load of its weights blob. With several models serving at once that is wrong for some lines: the
result says so (``ServedRequests.notes``).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from kvtop.logparse.events import ContextOverflow, LogEvent, PromptRejected, RequestTiming, SlotActivity, Truncation
from kvtop.logparse.load_build import Load

__all__ = ["CutForm", "Cut", "RequestSize", "ServedRequests", "served_requests"]

CutForm = Literal["truncated", "rejected", "input_truncated", "history_cut", "http_400"]
"""How a prompt over the context showed: a truncation line with the prompt's length (``truncated``), a
llama-server refusal (``rejected``), Era A's ``input truncated`` without it (``input_truncated``), the
DEBUG chat-history cut (``history_cut``) or an HTTP 400 on a prompt route (``http_400``)."""


@dataclass(frozen=True, slots=True)
class RequestSize:
    """One request's size in the context.

    Attributes:
        tokens: Prompt plus generated tokens: the context cells the request needed.
        prompt_tokens: The whole prompt (uncut, cached part included when known), tokens.
        generated_tokens: Tokens generated, None when not known (a cut or refused prompt without a timing line).
        line_no: The log line that closed it (the timing line, the cut or the refusal).
        cut: True when the prompt was cut or refused for want of context.
        lower_bound: True when ``tokens`` may be short of the real size (the generated tokens or the reused
            prompt prefix are not known).
    """

    tokens: int
    prompt_tokens: int
    generated_tokens: int | None
    line_no: int
    cut: bool = False
    lower_bound: bool = False


@dataclass(frozen=True, slots=True)
class Cut:
    """A prompt cut or refused for want of context.

    Attributes:
        form: :data:`CutForm`.
        prompt_tokens: The prompt's length in tokens, None when the line does not print it.
        limit: The context it was cut to or refused by (``limit=`` / ``n_ctx``), tokens; None when not printed.
        line_no: Its log line.
    """

    form: CutForm
    prompt_tokens: int | None
    limit: int | None
    line_no: int


@dataclass(frozen=True, slots=True)
class ServedRequests:
    """What the log says one model served.

    Attributes:
        requests: Every request whose size is known, in log order.
        cuts: Every prompt cut or refused (sized or not), in log order.
        unsized: Timed requests whose prompt length the log does not give (left out of ``requests``).
        notes: What the figures rest on, in words.
    """

    requests: tuple[RequestSize, ...] = ()
    cuts: tuple[Cut, ...] = ()
    unsized: int = 0
    notes: tuple[str, ...] = ()


def _cut_of(e: LogEvent) -> Cut | None:
    if isinstance(e, Truncation):
        return Cut("truncated" if e.prompt is not None else "input_truncated", e.prompt, e.limit, e.line_no)
    if isinstance(e, PromptRejected):
        return Cut("rejected", e.n_prompt_tokens, e.n_ctx, e.line_no)
    if isinstance(e, ContextOverflow):
        return Cut("history_cut" if e.form == "messages" else "http_400", None, None, e.line_no)
    return None


def served_requests(
    events: Iterable[LogEvent],
    loads: Sequence[Load],
    *,
    model_blob: str | None,
    load: Load | None = None,
    only_model: bool = False,
    models_serving: int = 1,
) -> ServedRequests:
    """The requests of one model in ``events`` (oldest first), and its cut or refused prompts.

    Args:
        events: Parsed log events in line order (``LogState.load_events``).
        loads: The loads they form (``LogState.loads``), in log order.
        model_blob: The model's weights blob ``sha256-<hex>``: every load of it is the model's. None when not known.
        load: The model's current load, when matched (also the model's when its blob is not known).
        only_model: True when the model is the only local model loaded: lines before any load, or of a load
            that names no blob, are then taken as its own.
        models_serving: Local models loaded now; above 1 the attribution is said to be approximate.

    Returns:
        The requests and cuts (module docstring). Sizes in tokens.
    """
    starts = [ld.first_line for ld in loads]

    def mine(owner: Load | None) -> bool:
        if owner is None:
            return only_model
        if load is not None and owner.index == load.index:
            return True
        if model_blob is not None and owner.model_blob == model_blob:
            return True
        return only_model and owner.model_blob is None

    requests: list[RequestSize] = []
    cuts: list[Cut] = []
    pending: dict[int, list[Cut]] = {}  # owner index -> cuts not yet paired with a timed request
    prompts: dict[tuple[int, int | None, int | None], int] = {}  # (owner, slot, task) -> task.n_tokens
    unsized = 0
    owners: dict[int, Load | None] = {}
    for e in events:
        if not isinstance(e, (RequestTiming, SlotActivity, Truncation, PromptRejected, ContextOverflow)):
            continue
        i = bisect.bisect_right(starts, e.line_no) - 1
        owner = loads[i] if i >= 0 else None
        if not mine(owner):
            continue
        key = owner.index if owner is not None else -1
        owners[key] = owner
        if isinstance(e, SlotActivity):
            if e.action == "prompt" and e.n_prompt_tokens is not None:
                prompts[(key, e.slot, e.task)] = e.n_prompt_tokens
            continue
        cut = _cut_of(e)
        if cut is not None:
            cuts.append(cut)
            if cut.form == "rejected" and cut.prompt_tokens is not None:
                requests.append(RequestSize(cut.prompt_tokens, cut.prompt_tokens, 0, e.line_no, cut=True))
            elif cut.form == "truncated":
                pending.setdefault(key, []).append(cut)
            continue
        assert isinstance(e, RequestTiming)
        whole = prompts.pop((key, e.slot, e.task), None) if e.slot is not None or e.task is not None else None
        lower = False
        if whole is None and e.prompt_tokens is not None:
            whole = e.prompt_tokens + (e.prompt_cached_tokens or 0)
            lower = e.prompt_cached_tokens is None
        queue = pending.get(key)
        was_cut = bool(queue)
        if queue:
            prior = queue.pop(0)
            whole = max(whole or 0, prior.prompt_tokens or 0)
        if whole is None:
            unsized += 1
            continue
        generated = e.eval_tokens
        requests.append(
            RequestSize(
                whole + (generated or 0),
                whole,
                generated,
                e.line_no,
                cut=was_cut,
                lower_bound=lower or generated is None,
            )
        )
    for queue in pending.values():  # cuts no timed request followed: the prompt alone
        for c in queue:
            assert c.prompt_tokens is not None
            requests.append(RequestSize(c.prompt_tokens, c.prompt_tokens, None, c.line_no, cut=True, lower_bound=True))
    requests.sort(key=lambda r: r.line_no)
    notes: list[str] = []
    if models_serving > 1 and (requests or cuts):
        notes.append(
            f"{models_serving} models are loaded and the log's request lines name none: each line is taken "
            "as the newest load's begun before it, so some may be another model's"
        )
    if not any(r.generated_tokens for r in requests) and any(c.form == "truncated" for c in cuts):
        notes.append("no timing lines (Ollama v0.4–v0.24 logs none): only the cut prompts are sized")
    if any(r.lower_bound for r in requests):
        notes.append(
            "some sizes are lower bounds: the log does not give their generated tokens or the prompt "
            "prefix reused from the cache"
        )
    return ServedRequests(tuple(requests), tuple(cuts), unsized, tuple(notes))
