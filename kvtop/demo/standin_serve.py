"""Requests with a prompt on the stand-in: served in the loaded model's slots, as a runner serves them.

``POST /api/generate`` with a non-empty ``prompt`` (or ``POST /api/chat`` with ``messages``) for a
model of the current step takes one of the model's slots (``--parallel`` of its runner: one, as
the stand-in's runners are started, docs/ollama-internals.md §4.4), holds it for as long as the
model's token speeds make the request last (``prompt_tokens / prefill_tps + num_predict /
decode_tps``, the scenario's ``models.<m>.runner`` figures, ``kvtop.demo.log_lines.runner_figures``)
and answers once it is done. A request that finds every slot busy waits for one, its connection open,
as Ollama's scheduler keeps a request pending until the runner has a free slot (§3.5); so concurrent
slow requests make a real queue that kvtop sees on the API port (``kvtop.sources.connections``).

With ``--log-file`` the runner's slot lines are written as llama-server prints them (the formats of
``kvtop.demo.logwriter``'s scripted requests, from ``tests/fixtures/llama_server``): ``launch_slot_``
and ``new prompt`` when the slot is taken, ``init sampler`` once the prompt is in, ``print_timing``
and ``release`` when it is freed; gin's access line follows from the handler as for every request.

The prompt's length in tokens is estimated as one token per 4 bytes of UTF-8 text (at least 1), the
usual rule of thumb for English text; ``options.num_predict`` (default 16) is the tokens generated.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["Served", "SlotPool", "Slots", "answer_body", "prompt_tokens"]

DEFAULT_NUM_PREDICT = 16
"""Tokens generated when the request sets no ``options.num_predict``."""

MAX_HOLD_S = 600.0
"""No request holds a slot longer than this (a test that forgot to stop its clients ends anyway)."""


def prompt_tokens(body: dict[str, Any]) -> int:
    """The request's prompt in tokens (one per 4 UTF-8 bytes, at least 1): ``prompt`` for a generate,
    the messages' ``content`` for a chat. 0 when there is no prompt (a load or keep-alive request)."""
    text = body.get("prompt")
    if not isinstance(text, str):
        messages = body.get("messages")
        if not isinstance(messages, list):
            return 0
        text = "".join(str(m.get("content") or "") for m in messages if isinstance(m, dict))
    size = len(text.encode("utf-8"))
    return max(1, size // 4) if size else 0


def num_predict(body: dict[str, Any]) -> int:
    """``options.num_predict`` when a positive integer, else :data:`DEFAULT_NUM_PREDICT`."""
    options = body.get("options")
    value = options.get("num_predict") if isinstance(options, dict) else None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return DEFAULT_NUM_PREDICT


class SlotPool:
    """The slots of one runner: ``acquire`` blocks until one is free (lowest id first)."""

    def __init__(self, slots: int) -> None:
        self._free = list(range(max(1, slots)))
        self._cond = threading.Condition()
        self.waiting = 0
        """Requests blocked in :meth:`acquire` now."""

    def acquire(self) -> int:
        with self._cond:
            self.waiting += 1
            try:
                while not self._free:
                    self._cond.wait()
                return self._free.pop(0)
            finally:
                self.waiting -= 1

    def release(self, slot: int) -> None:
        with self._cond:
            self._free.append(slot)
            self._free.sort()
            self._cond.notify()


@dataclass(frozen=True)
class Served:
    """What one request did: its slot, task id, tokens and seconds of prefill and decode."""

    slot: int
    task: int
    prompt_tokens: int
    eval_tokens: int
    prefill_s: float
    decode_s: float


class Slots:
    """Every runner's :class:`SlotPool`, keyed by (step index, model), and the task counter."""

    def __init__(self) -> None:
        self._pools: dict[tuple[int, str], SlotPool] = {}
        self._lock = threading.Lock()
        self._tasks = itertools.count(10_000)  # apart from the scripted requests' task ids

    def pool(self, index: int, model: str, slots: int = 1) -> SlotPool:
        with self._lock:
            pool = self._pools.get((index, model))
            if pool is None:
                pool = self._pools[(index, model)] = SlotPool(slots)
            return pool

    def serve(
        self,
        index: int,
        model: str,
        body: dict[str, Any],
        figures: dict[str, Any],
        ctx: int,
        write: Any = None,
        sleep: Any = time.sleep,
    ) -> Served:
        """Serve one request in a slot of ``model``'s runner (blocking while it waits and while it runs).

        Args:
            index: The scenario step (a new step has new runners).
            model: The model's catalog name.
            body: The request's JSON body (its prompt and ``options.num_predict``).
            figures: The model's runner figures (``prefill_tps``, ``decode_tps``).
            ctx: The slot's context (``n_ctx_slot``): the prompt is cut to fit it, as the runner does.
            write: ``write(lines)`` appends log lines (``LogWriter.write_lines``), or None for no log.
            sleep: Waits the request's seconds (injectable).
        """
        pool = self.pool(index, model)
        n_eval = num_predict(body)
        prompt = min(prompt_tokens(body), max(1, ctx - n_eval - 1))
        prefill_tps = float(figures.get("prefill_tps") or 1000.0)
        decode_tps = float(figures.get("decode_tps") or 50.0)
        prefill_s, decode_s = prompt / prefill_tps, n_eval / decode_tps
        slot = pool.acquire()
        task = next(self._tasks)
        head = f"id  {slot} | task {task} |"
        try:
            if write is not None:
                write(
                    [
                        f"slot launch_slot_: {head} processing task, is_child = 0",
                        f"slot   operator(): {head} new prompt, n_ctx_slot = {ctx}, n_keep = 0, task.n_tokens = {prompt}",
                    ]
                )
            sleep(min(MAX_HOLD_S, prefill_s))
            if write is not None:  # the prompt is in: generation starts (llama-server's init_sampler line)
                write(
                    [f"slot init_sampler: {head} init sampler, took 0.34 ms, tokens: text = {prompt}, total = {prompt}"]
                )
            sleep(min(MAX_HOLD_S, decode_s))
            if write is not None:
                p_ms, e_ms = prefill_s * 1000, decode_s * 1000
                write(
                    [
                        f"slot print_timing: {head} prompt eval time = {p_ms:10.2f} ms / {prompt:5d} tokens "
                        f"({p_ms / prompt:8.2f} ms per token, {prefill_tps:8.2f} tokens per second)",
                        f"slot print_timing: {head}        eval time = {e_ms:10.2f} ms / {n_eval:5d} tokens "
                        f"({e_ms / n_eval:8.2f} ms per token, {decode_tps:8.2f} tokens per second)",
                        f"slot print_timing: {head}       total time = {p_ms + e_ms:10.2f} ms / {prompt + n_eval:5d} tokens",
                        f"slot      release: {head} stop processing: n_tokens = {prompt + n_eval - 1}, truncated = 0",
                    ]
                )
        finally:
            pool.release(slot)
        return Served(slot, task, prompt, n_eval, prefill_s, decode_s)


def answer_body(model: str, served: Served, chat: bool, created_at: str, total_ns: int) -> dict[str, Any]:
    """Ollama's non-streamed answer to a served request (``api.GenerateResponse``/``ChatResponse``):
    the text (one ``x`` per generated token), ``done_reason: "length"`` and the counts and durations
    (ns) of the prompt (``prompt_eval_*``) and the generation (``eval_*``)."""
    text = "x" * served.eval_tokens
    answer: dict[str, Any] = {"model": model, "created_at": created_at}
    if chat:
        answer["message"] = {"role": "assistant", "content": text}
    else:
        answer["response"] = text
    answer.update(
        done=True,
        done_reason="length",
        total_duration=total_ns,
        load_duration=0,
        prompt_eval_count=served.prompt_tokens,
        prompt_eval_duration=int(served.prefill_s * 1e9),
        eval_count=served.eval_tokens,
        eval_duration=int(served.decode_s * 1e9),
    )
    return answer
