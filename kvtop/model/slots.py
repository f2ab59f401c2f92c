"""Context slots in use: what each runner's ``/slots`` answered, and what the runner log says.

Pure: no I/O, no clock. ``sources.slots.SlotsSource`` fills a :class:`SlotsSnapshot` by asking
each local llama-server runner (its ``--port`` on 127.0.0.1) for ``GET /slots``; the functions
here join that with the loaded models and, where no runner answered, estimate the busy slots and
the prompt being processed from the runner's log lines (docs/ollama-internals.md §4.10, §5):

* ``slot launch_slot_: id 1 | task 1 | processing task`` — the slot starts a request;
* ``slot operator(): id 1 | task 1 | new prompt, n_ctx_slot = 4096, …, task.n_tokens = 1804`` —
  the prompt's length;
* ``… | cached n_tokens = 512, memory_seq_rm [512, end)`` (one per batch) or, in older builds,
  ``… | prompt processing progress, n_past = …, n_tokens = …, progress = 0.25`` — prefill so far;
* ``… | init sampler …`` / ``prompt done`` — the prompt is in, generation starts;
* ``slot release: id 1 | task 1 | stop processing: n_tokens = …`` — the slot is free again.

The log's lines name no model (only a slot id): they are attributed to the newest load that began
before them, which is wrong when several runners serve requests at once. ``/slots`` is asked per
runner port, so its busy flags belong to the right model; the view's note says which applies.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvtop.logparse.events import LogEvent, PrefillProgress, RequestTiming, SlotActivity
from kvtop.model.slot_snapshots import DecodeRate, Prefill, RunnerSlots, SlotUse, SlotsSnapshot
from kvtop.model.views import ModelView

if TYPE_CHECKING:
    from kvtop.logparse.load_build import Load


# --------------------------------------------------------------------------------------------
# From the log


@dataclass(slots=True)
class LogSlot:
    """One slot as replayed from the log (mutable while replaying; see :func:`log_slots`)."""

    busy: bool = False
    task: int | None = None
    prompt_tokens: int | None = None
    done_tokens: int | None = None
    fraction: float | None = None
    prefilling: bool = False
    line_no: int = 0


def log_slots(events: Sequence[LogEvent], loads: Sequence[Load], load: Load) -> dict[int | None, LogSlot]:
    """Replay the slot lines of ``events`` that belong to ``load`` (the newest load begun before
    each line); returns each slot's last known state by slot id."""
    starts = [ld.first_line for ld in loads]
    slots: dict[int | None, LogSlot] = {}
    for e in events:
        if not isinstance(e, (SlotActivity, PrefillProgress, RequestTiming)):
            continue
        i = bisect.bisect_right(starts, e.line_no) - 1
        if i < 0 or loads[i].index != load.index:
            continue
        s = slots.setdefault(e.slot, LogSlot())
        if isinstance(e, SlotActivity):
            if e.action == "start":
                slots[e.slot] = LogSlot(busy=True, task=e.task, line_no=e.line_no)
            elif e.action == "prompt":
                s.busy, s.task, s.prompt_tokens, s.line_no = True, e.task, e.n_prompt_tokens, e.line_no
                s.prefilling, s.done_tokens, s.fraction = True, 0, 0.0 if e.n_prompt_tokens else None
            elif e.action == "prompt_done":
                s.busy, s.prefilling, s.line_no = True, False, e.line_no
            elif e.action == "release":
                slots[e.slot] = LogSlot(busy=False, task=e.task, line_no=e.line_no)
        elif isinstance(e, PrefillProgress):
            s.busy, s.prefilling, s.line_no = True, True, e.line_no
            s.done_tokens = e.n_past
            if e.progress is not None:
                s.fraction = e.progress
            elif e.n_past is not None and s.prompt_tokens:
                s.fraction = e.n_past / s.prompt_tokens
            if s.fraction is not None and s.fraction >= 1.0:
                s.prefilling = False
        else:  # a timing report ends the request (some builds print no release line)
            slots[e.slot] = LogSlot(busy=False, task=e.task, line_no=e.line_no)
    return slots


def _prefill(slots: Mapping[int | None, LogSlot]) -> Prefill | None:
    """The most recently updated slot that is processing a prompt."""
    live = [(sid, s) for sid, s in slots.items() if s.busy and s.prefilling]
    if not live:
        return None
    sid, s = max(live, key=lambda item: item[1].line_no)
    return Prefill(sid, s.done_tokens, s.prompt_tokens, s.fraction, s.line_no)


# --------------------------------------------------------------------------------------------
# The join


def runner_for(view: ModelView, snap: SlotsSnapshot | None) -> RunnerSlots | None:
    """The ``/slots`` answer of the runner serving ``view``: same weights blob, and when two
    runners share it, the one whose ``--ctx-size`` (or slot ``n_ctx``) matches the view's context."""
    if snap is None or view.model_blob is None:
        return None
    found = [r for r in snap.runners if r.blob == view.model_blob]
    if len(found) > 1:
        cells = view.total_ctx_cells
        by_ctx = [
            r
            for r in found
            if (cells is not None and r.ctx_size == cells) or (r.slots and r.slots[0].n_ctx == view.context.value)
        ]
        found = by_ctx if len(by_ctx) == 1 else []
    return found[0] if len(found) == 1 else None


def runners_by_pid(snap: SlotsSnapshot | None) -> dict[int, RunnerSlots]:
    """The runners of a ``/slots`` round by PID (the first of a PID listed twice), for ``slot_use``."""
    out: dict[int, RunnerSlots] = {}
    for r in snap.runners if snap is not None else ():
        out.setdefault(r.pid, r)
    return out


def slot_use(
    view: ModelView,
    snap: SlotsSnapshot | None,
    events: Sequence[LogEvent],
    loads: Sequence[Load],
    era_c_loaded: int,
    *,
    runners_by_pid: Mapping[int, RunnerSlots] | None = None,
) -> SlotUse | None:
    """``view``'s slots: reported by its runner's ``/slots`` when it answered, else estimated from
    the log's slot lines of its load; None for a model with neither (cloud, pre-v0.30 runner with
    no ``/slots`` and no log).

    Args:
        view: The model row (its ``load`` is the matching log load, if any).
        snap: The latest ``/slots`` round, None before the first one.
        events: The log events kept (``LogState.recent``).
        loads: The log's loads (``LogState.loads``).
        era_c_loaded: How many loaded models run on llama-server runners (log era C): above one,
            the log's slot lines may belong to another model, and the note says so.
        runners_by_pid: ``snap``'s runners by PID, the first of each PID (``runners_by_pid``),
            when the caller looks up many rows in one round; found in ``snap`` when None.
    """
    if view.cloud:
        return None
    # the runner the ladder matched by its PID (the process table), else the one of this blob
    pid = view.local.process.pid if view.local.process is not None else None
    if snap is None or pid is None:
        runner = None
    elif runners_by_pid is not None:
        runner = runners_by_pid.get(pid)
    else:
        runner = next((r for r in snap.runners if r.pid == pid), None)
    if runner is None and pid is None:
        runner = runner_for(view, snap)
    load = view.load
    log_state = log_slots(events, loads, load) if load is not None else {}
    prefill = _prefill(log_state)
    shared = ""
    if era_c_loaded > 1:
        shared = (
            f"; the log's slot lines name no model: with {era_c_loaded} llama-server runners loaded they are"
            " given to the newest load begun before them, which may be another model's"
        )
    if runner is not None and runner.error is None and runner.slots:
        busy = runner.busy
        n_ctx = runner.slots[0].n_ctx
        note = f"GET http://127.0.0.1:{runner.port}/slots (runner PID {runner.pid})"
        if busy == 0:
            prefill = None  # the runner is idle: a prefill in the log is over (or another model's)
        elif prefill is not None:
            note += "; prefill progress from the runner log" + shared
        else:
            prefilling = [
                sl for sl in runner.slots if sl.is_processing and sl.n_decoded == 0 and sl.id_task is not None
            ]
            if prefilling:
                sl = prefilling[0]
                prefill = Prefill(sl.id, sl.n_tokens, None, None, 0, "runner")
        return SlotUse(len(runner.slots), busy, "runner", n_ctx, prefill, note, era_c_loaded)
    why = ""
    if runner is not None:
        why = f"/slots on port {runner.port}: {runner.error or 'no slots listed'}; "
    total = view.parallel.value
    if load is not None and load.era == "C":
        busy = sum(1 for s in log_state.values() if s.busy)
        if total is not None:
            busy = min(busy, total)
        return SlotUse(
            total,
            busy,
            "estimated",
            None,
            prefill,
            f"{why}runner log slot lines of load #{load.index + 1}{shared}",
            era_c_loaded,
        )
    if runner is not None:
        return SlotUse(total, None, None, None, None, why.rstrip("; "))
    if load is None:
        return SlotUse(
            total, None, None, None, None, "no /slots answer from a local runner, and no runner load in the log"
        )
    return SlotUse(
        total,
        None,
        None,
        None,
        None,
        "this runner has no /slots endpoint and logs no slot activity (Ollama before v0.30)",
    )


# --------------------------------------------------------------------------------------------
# Decode speed from /slots (the runner rung of tok/s)


def decode_rates(
    prev: SlotsSnapshot | None, new: SlotsSnapshot, last: Mapping[int, DecodeRate]
) -> Mapping[int, DecodeRate]:
    """Each runner's (by PID) decode speed from its ``/slots`` rounds.

    A slot counts from the first round that saw its task decoding (``is_processing``,
    ``n_decoded`` ≥ 1: the prompt is in), so prefill time never dilutes the speed; the rate is
    the tokens decoded since then over the time since then. A runner with no decoding slot keeps
    its last rate (the newest request's speed, as the log's timings do); a runner that is gone
    loses it. Pure: times are the rounds' own ``taken_at`` (``prev`` is unused beyond that).
    """
    del prev  # the anchors in ``last`` carry everything needed
    out: dict[int, DecodeRate] = {}
    for r in new.runners:
        before = last.get(r.pid)
        anchors = {a[0]: a for a in before.anchors} if before is not None else {}
        kept: list[tuple[int, int | None, int, float]] = []
        total, n = 0.0, 0
        for s in r.slots:
            if not s.is_processing or s.n_decoded is None or s.n_decoded < 1:
                continue
            a = anchors.get(s.id)
            if a is None or a[1] != s.id_task or s.n_decoded < a[2]:
                kept.append((s.id, s.id_task, s.n_decoded, new.taken_at))  # first sight of this decode
                continue
            kept.append(a)
            dt = new.taken_at - a[3]
            if dt > 0 and s.n_decoded > a[2]:
                total += (s.n_decoded - a[2]) / dt
                n += 1
        if n:
            out[r.pid] = DecodeRate(total, new.taken_at, n, tuple(kept))
        elif kept or before is not None:
            rate = before.tokens_per_s if before is not None else None
            if rate is not None or kept:
                out[r.pid] = DecodeRate(
                    rate,
                    before.at if before is not None else new.taken_at,
                    before.slots if before is not None else 0,
                    tuple(kept),
                )
    return out
