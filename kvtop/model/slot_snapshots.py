"""``/slots`` rounds and what a model's slots are doing: the data ``sources.slots`` fills and the
model rows carry (``ModelView.slots``, ``AppState.slot_rates``).

Frozen data only, below the model's views (``model.views``): the joins with the loaded models
and the runner log, and the decode-rate measurement, are in ``model.slots``.
Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

SlotSource = Literal["runner", "estimated"]


@dataclass(frozen=True, slots=True)
class SlotState:
    """One slot as ``GET /slots`` lists it.

    Attributes:
        id: The slot id (0-based; the log's ``id N``).
        n_ctx: Context cells of this slot (the per-slot num_ctx), None when not given.
        is_processing: True while the slot serves a request (llama-server's ``is_processing``;
            Era A's ext server: ``state`` ≠ 0).
        id_task: The task it serves or served last (``id_task``), None when it has served none.
        n_tokens: Tokens in the slot's cache (``n_prompt_tokens``: the prompt, cached part and
            what was generated so far), None when not listed.
        n_decoded: Tokens generated for the current (or last) task (``next_token[0].n_decoded``).
    """

    id: int
    n_ctx: int | None
    is_processing: bool
    id_task: int | None = None
    n_tokens: int | None = None
    n_decoded: int | None = None

    @property
    def fill(self) -> float | None:
        """Tokens in the slot's cache over its context (0–1), None when either is not known."""
        if self.n_tokens is None or not self.n_ctx:
            return None
        return min(1.0, max(0.0, self.n_tokens / self.n_ctx))


@dataclass(frozen=True, slots=True)
class RunnerProps:
    """A llama-server runner's ``GET /props`` (upstream ``server-context.cpp:get_res_props``).

    Attributes:
        n_ctx_per_slot: ``default_generation_settings.n_ctx``: the context cells of each slot.
        total_slots: ``total_slots`` (its ``-np``, after llama-server resolved it).
        model_path: ``model_path`` (the weights blob it loaded).
        build_info: ``build_info`` (llama.cpp build, ``b10488-…``).
        metrics_endpoint: ``endpoint_metrics``: whether ``/metrics`` answers (needs ``--metrics``,
            which Ollama does not pass; docs/ollama-internals.md §5).
    """

    n_ctx_per_slot: int | None = None
    total_slots: int | None = None
    model_path: str | None = None
    build_info: str | None = None
    metrics_endpoint: bool | None = None


@dataclass(frozen=True, slots=True)
class RunnerSlots:
    """One runner's ``/slots`` answer, or why there is none.

    Attributes:
        pid: The runner process (``ProcSnapshot.runners``).
        port: Its ``--port`` on 127.0.0.1.
        blob: ``sha256-<hex>`` of its ``--model`` weights, None when not a blob path.
        ctx_size: Its ``--ctx-size``/``-c`` (total cells), None when not on the command line.
        slots: The slots, in id order; empty when the request failed.
        props: Its ``/props`` (asked once per runner, llama-server only), None when not answered.
        props_error: Why ``/props`` did not answer, None when it did or was not asked.
        error: Why there is no answer, in plain words (``connection refused``, ``timed out after
            0.5 s``, ``HTTP 501: …``, ``not JSON``); None on success.
        latency_s: Seconds the request took (also for failures).
    """

    pid: int
    port: int
    blob: str | None = None
    ctx_size: int | None = None
    slots: tuple[SlotState, ...] = ()
    error: str | None = None
    latency_s: float | None = None
    props: RunnerProps | None = None
    props_error: str | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)
    """``llamacpp:*`` values of ``/metrics`` when the runner serves it (``props.metrics_endpoint``)."""

    @property
    def busy(self) -> int:
        """Slots processing a request now."""
        return sum(1 for s in self.slots if s.is_processing)


@dataclass(frozen=True, slots=True)
class SlotsSnapshot:
    """One ``/slots`` round over every local runner with a port. ``taken_at``: Unix seconds."""

    taken_at: float
    runners: tuple[RunnerSlots, ...] = ()


@dataclass(frozen=True, slots=True)
class Prefill:
    """The prompt a slot is processing now, from the runner log (estimated).

    Attributes:
        slot: The slot id the log names.
        done_tokens: Prompt tokens processed so far (``cached n_tokens`` / ``n_past``).
        total_tokens: The prompt's length (``task.n_tokens`` / ``n_prompt_tokens``), None when
            the line giving it was not read.
        fraction: ``done / total`` in 0–1 (or the line's own ``progress``), None when unknown.
        line_no: The log line this comes from.
    """

    slot: int | None
    done_tokens: int | None
    total_tokens: int | None
    fraction: float | None
    line_no: int
    source: SlotSource = "estimated"
    """``estimated`` (the runner log's lines) or ``runner`` (``/slots``: a busy slot that has decoded
    nothing yet, with the tokens in its cache so far; the prompt's length is not listed there)."""

    @property
    def percent(self) -> int | None:
        """The fraction as a whole percentage (rounded down: 100 only when done)."""
        return None if self.fraction is None else max(0, min(100, int(self.fraction * 100)))


@dataclass(frozen=True, slots=True)
class SlotUse:
    """A model's slots: how many, how many busy, and the prompt being processed.

    Attributes:
        total: Slots (``/slots`` count when reported, else the load's ``-np`` / n_seq_max).
        busy: Slots serving a request; None when unknown.
        source: ``runner`` (``GET /slots`` on the runner's port) or ``estimated`` (runner log
            lines); None when neither says anything.
        n_ctx_per_slot: Context cells per slot (``/slots`` ``n_ctx``), None when not reported.
        prefill: The prompt in progress (log), None when no prompt is being processed.
        note: Where the numbers come from, or why they are missing, in one line.
        log_runners: llama-server runners loaded (log era C). Above one, the log's slot and
            timing lines (which name no model) may belong to another model than the one they
            are given to (the newest load begun before each line).
    """

    total: int | None
    busy: int | None
    source: SlotSource | None
    n_ctx_per_slot: int | None = None
    prefill: Prefill | None = None
    note: str = ""
    log_runners: int = 0

    @property
    def log_ambiguous(self) -> bool:
        """True when the log's per-request lines cannot be told apart between models."""
        return self.log_runners > 1


@dataclass(frozen=True, slots=True)
class DecodeRate:
    """Tokens a runner generates per second, measured from its ``/slots`` rounds.

    Attributes:
        tokens_per_s: Σ over its decoding slots of (``n_decoded`` now − at the first round that
            saw the task decoding) / (the time between those rounds): each request's average
            decode speed so far, as its own timings would report it.
        at: Unix time of the round it was measured in.
        slots: How many slots were decoding.
        anchors: Per decoding slot ``(slot id, task id, n_decoded, taken_at)`` of the first round
            that saw the task decoding (what the next round measures from).
    """

    tokens_per_s: float | None
    at: float
    slots: int
    anchors: tuple[tuple[int, int | None, int, float], ...] = ()
