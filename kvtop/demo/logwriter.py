"""The stand-in's server log: what an Ollama v0.30+ server (llama-server runners) would print
while it plays the scenario, written to a file that ``kvtop --demo`` follows (``--log file:PATH``).

Every line has the shape of a real line (docs/ollama-internals.md §4.4–§4.10): Ollama's own lines as
the corpus shows them (``starting llama-server`` from corpus/logs/062, the eviction sequence from
050, ``loading model via llama-server`` / ``llama-server started in`` from §4.4, the truncation
warning of §4.7 with v0.30's ``llama_server.go`` source and ``limit`` rule, the KV type warning of
§3.2), and llama-server's raw stderr as ``tests/fixtures/llama_server`` recorded it from a real
run (``load_tensors``, ``llama_context``, ``llama_kv_cache`` and its iSWA variant from corpus/042,
``resolve_fused_ops``/``sched_reserve``, the slot lines, ``cached n_tokens`` prefill batches,
``print_timing``). Only the numbers are the scenario's:

- per load, the weights (scenario ``models.<m>.runner.weights_bytes``), the KV cache
  (``kvtop.model.kv.kv_allocation`` at the row's ``context_length``, f16) and the compute buffers
  (what is left of ``/api/ps`` ``size``) add up to the row's ``size``; what is not in VRAM
  (``size - size_vram``) is weights in ``CPU_Mapped`` buffers with fewer layers offloaded, and
  flash attention resolves off there (§4.6: ``Flash Attention was auto, set to disabled``);
- requests go to the newest load of the step (the runner log's lines name no model, §4.10) at the
  model's token speeds (``prefill_tps``/``decode_tps``, ``spilled_*`` when it spilled; staged);
- a step's ``log`` adds ``evict`` (the 050 sequence for those models), ``truncate`` (the step's
  first request is truncated) and ``kv_fallback`` (``{model: "q8_0"}``: Ollama's warning before
  that load, which then runs with llama-server's default f16 cache);
- every request ends with gin's access line (§4.9, :func:`gin_line`, corpus 053's shape): the
  scenario's client requests as ``POST "/api/chat"`` / ``POST "/api/generate"`` from
  :data:`CLIENTS` with their scripted duration, and every Ollama API request the stand-in really
  serves (kvtop's own ``GET "/api/ps"``, ``POST "/api/show"`` …) with its status, measured latency
  and client address (:meth:`LogWriter.access`), as a real server logs its pollers too.

Putting the warning of §3.2 (Ollama v0.13.4–v0.24 validated the type; v0.30+ passes it verbatim)
in front of a llama-server load is staged, like everything being on one server at once.

The lines themselves (Ollama's, llama-server's, gin's) are the templates of
:mod:`kvtop.demo.log_lines`; this module holds the script of a pass's requests and the writer.
Timestamps are written when a line is written (``log_lines.restamp``). The script is pure
(:func:`build_script`, ``log_lines.transition_lines``); :class:`LogWriter` is the thread that writes it
as the stand-in's clock moves, looping with the scenario.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kvtop.demo.log_lines import CLIENTS, KEEP, STAMP, gin_line, restamp, runner_figures, transition_lines
from kvtop.demo.scenario import LoadedModel, Scenario

if TYPE_CHECKING:
    from kvtop.demo.player import ScenarioPlayer

__all__ = ["LogWriter", "Request", "Script", "build_script", "script_lines"]


@dataclass(frozen=True)
class Request:
    """One request of the script: its lines at scenario times (seconds from the pass's start)."""

    start_s: float
    end_s: float
    step: int
    model: str
    lines: tuple[tuple[float, str], ...]


@dataclass(frozen=True)
class Script:
    """A pass's requests, by step (:func:`build_script`)."""

    requests: tuple[Request, ...]

    def lines_between(self, step: int, start_s: float, end_s: float) -> list[str]:
        """Step ``step``'s request lines with a time in ``[start_s, end_s)``, in order."""
        out: list[tuple[float, int, str]] = []
        for r in self.requests:
            if r.step == step and r.start_s < end_s and r.end_s >= start_s:
                out += [(t, i, line) for i, (t, line) in enumerate(r.lines) if start_s <= t < end_s]
        return [line for _, _, line in sorted(out, key=lambda item: (item[0], item[1]))]

    def busy(self, step: int, at_s: float) -> bool:
        """Whether a request of step ``step`` is being served at scenario time ``at_s``."""
        return any(r.step == step and r.start_s <= at_s < r.end_s for r in self.requests)


def _active_models(scenario: Scenario) -> list[str | None]:
    """Per step, the model its requests go to: the newest load (a row that changed), else the previous one."""
    active: list[str | None] = []
    previous: dict[str, tuple[int | None, int, int]] = {}
    current: str | None = None
    for step in scenario.steps:
        rows = {
            r.model: (r.context_length, r.size, r.size_vram)
            for r in step.loaded
            if scenario.models[r.model].runner is not None
        }
        changed = [m for m, key in rows.items() if previous.get(m) != key]
        if changed:
            current = changed[-1]
        elif current not in rows:
            current = next(reversed(rows), None) if rows else None
        active.append(current if rows else None)
        previous = rows
    return active


def _request(
    scenario: Scenario, step: int, model: str, row: LoadedModel, start: float, task: int, truncated: bool
) -> Request:
    fig = runner_figures(scenario, model)
    spilled = row.size_vram < row.size
    wobble = 1.0 + 0.04 * math.sin(task * 1.7)  # requests differ a little, so TOK/S moves
    prefill = round(float(fig["spilled_prefill_tps"] if spilled else fig["prefill_tps"]) * wobble, 2)
    decode = round(float(fig["spilled_decode_tps"] if spilled else fig["decode_tps"]) * wobble, 2)
    ctx = row.context_length or 2048
    prompt, n_eval = int(fig["prompt_tokens"]), int(fig["eval_tokens"])
    lines: list[tuple[float, str]] = []
    head = f"id  0 | task {task} |"
    client, endpoint = CLIENTS[task % len(CLIENTS)]
    if truncated:
        # v0.30+ (§4.7): limit = numCtx - max((numCtx - numKeep) / 2, 1); the 5065-token prompt of corpus 014
        limit = ctx - max((ctx - KEEP) // 2, 1)
        lines.append(
            (
                start,
                f'{STAMP} level=WARN source=llama_server.go:317 msg="truncating input prompt" '
                f"limit={limit} prompt=5065 keep={KEEP} new={limit}",
            )
        )
        prompt = limit
    prompt = min(prompt, ctx - n_eval - 1) if ctx > n_eval + 1 else prompt
    lines += [
        (start, f"slot launch_slot_: {head} processing task, is_child = 0"),
        (start, f"slot   operator(): {head} new prompt, n_ctx_slot = {ctx}, n_keep = 0, task.n_tokens = {prompt}"),
    ]
    prefill_s = prompt / prefill
    for done in range(0, prompt, 512):
        lines.append(
            (start + done / prefill, f"slot   operator(): {head} cached n_tokens = {done}, memory_seq_rm [{done}, end)")
        )
    t = start + prefill_s
    lines.append(
        (t, f"slot init_sampler: {head} init sampler, took 0.34 ms, tokens: text = {prompt}, total = {prompt}")
    )
    eval_s = n_eval / decode
    end = t + eval_s
    p_ms, e_ms = prefill_s * 1000, eval_s * 1000
    lines += [
        (
            end,
            f"slot print_timing: {head} prompt eval time = {p_ms:10.2f} ms / {prompt:5d} tokens "
            f"({p_ms / prompt:8.2f} ms per token, {prefill:8.2f} tokens per second)",
        ),
        (
            end,
            f"slot print_timing: {head}        eval time = {e_ms:10.2f} ms / {n_eval:5d} tokens "
            f"({e_ms / n_eval:8.2f} ms per token, {decode:8.2f} tokens per second)",
        ),
        (end, f"slot print_timing: {head}       total time = {p_ms + e_ms:10.2f} ms / {prompt + n_eval:5d} tokens"),
        (end, f"slot print_timing: {head}    graphs reused = {n_eval - 8:10d}"),
        (end, f"slot      release: {head} stop processing: n_tokens = {prompt + n_eval - 1}, truncated = 0"),
        (end, "srv  update_slots: all slots are idle"),
        (end, gin_line(200, end - start, client, "POST", endpoint)),  # printed when the response is done
    ]
    return Request(start, end, step, model, tuple(lines))


def build_script(scenario: Scenario) -> Script:
    """One pass's requests: from 2 s after a step starts, one every ``request_every_s`` on the step's
    newest load (or 1 s after the previous one ends, when it took longer: the runner has one slot, so
    requests never overlap), each over before the step ends; none in a step with ``log.requests`` false."""
    requests: list[Request] = []
    task = 0
    period = scenario.period_s
    for i, (step, model) in enumerate(zip(scenario.steps, _active_models(scenario))):
        if model is None or step.log.get("requests", True) is False:
            continue
        row = next(r for r in step.loaded if r.model == model)
        end = scenario.steps[i + 1].at_s if i + 1 < len(scenario.steps) else period
        every = float(runner_figures(scenario, model)["request_every_s"])
        t = step.at_s + 2.0
        first = True
        while True:
            r = _request(scenario, i, model, row, t, task, truncated=first and bool(step.log.get("truncate")))
            if r.end_s > end - 0.5:
                break
            requests.append(r)
            task += 1
            first = False
            t = max(t + every, r.end_s + 1.0)  # one slot (-np 1): the next request once this one is answered
    return Script(tuple(requests))


class LogWriter:
    """Writes the scenario's log to ``path`` as the player's clock moves (a daemon thread).

    Each poll (``poll_s``) finds the current step and the scenario time in it (the player's speed;
    in manual mode time runs on inside the step until the next step's start). A new step writes
    its transition lines (:func:`transition_lines`) against what was written so far; then every
    request line up to the scenario time. A wrap to the start (``--loop``) starts a new pass, so the
    log keeps moving for as long as the stand-in runs.
    """

    def __init__(
        self, path: Path, player: ScenarioPlayer, *, poll_s: float = 0.05, wall_ns: Callable[[], int] = time.time_ns
    ) -> None:
        """Args: ``path``, the log file; ``player``, the stand-in's clock; ``poll_s``, seconds between
        writes; ``wall_ns``, the wall clock (Unix ns) the player uses (injectable for tests).

        Raises:
            ValueError: A model of the scenario cannot be written (no runner figures, sizes below
                weights + KV): found before anything is written.
        """
        self.path = path
        self.player = player
        self.script = build_script(player.scenario)
        script_lines(player.scenario)  # every load's figures are checked now, not when its step comes
        self._poll_s = poll_s
        self._wall_ns = wall_ns
        self._state: dict[str, tuple[int | None, int, int]] = {}
        self._index: int | None = None
        self._pos = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._served: list[str] = []
        self.lines_written = 0

    def position(self) -> tuple[int, float]:
        """The current step and the scenario time (seconds from the pass's start) in it."""
        index, since_ns = self.player.current()
        steps = self.player.scenario.steps
        step = steps[index]
        end = steps[index + 1].at_s if index + 1 < len(steps) else self.player.scenario.period_s
        elapsed = max(0.0, (self._wall_ns() - since_ns) / 1e9 * self.player.speed)
        return index, min(step.at_s + elapsed, end)

    def busy(self) -> bool:
        """Whether a request is being served now."""
        index, at_s = self.position()
        return self.script.busy(index, at_s)

    def access(self, status: int, latency_s: float, client: str, method: str, path: str) -> None:
        """Log one request the stand-in served (gin's line, :func:`gin_line`); written at the next tick.
        Thread-safe: the server's handler threads call it once their response is sent."""
        line = gin_line(status, latency_s, client, method, path)
        with self._lock:
            self._served.append(line)

    def write_lines(self, lines: list[str]) -> None:
        """Log lines of a request the stand-in serves (``kvtop.demo.standin_serve``); written at the
        next tick, stamped then. Thread-safe, as :meth:`access`."""
        with self._lock:
            self._served.extend(lines)

    def tick(self) -> int:
        """Write what is due now; returns the lines written."""
        with self._lock:
            index, at_s = self.position()
            lines: list[str] = []
            new_pass = self._index is not None and (
                index < self._index or (index == self._index and at_s < self._pos - 0.5)
            )
            if index != self._index or new_pass:
                if self._index is not None and not new_pass and index == self._index + 1:
                    lines += self.script.lines_between(self._index, self._pos, self.player.scenario.steps[index].at_s)
                step_lines, self._state = transition_lines(self.player.scenario, index, self._state)
                lines += step_lines
                self._index, self._pos = index, self.player.scenario.steps[index].at_s
            lines += self.script.lines_between(index, self._pos, at_s)
            self._pos = max(self._pos, at_s)
            lines += self._served
            self._served = []
            if lines:
                now = self._wall_ns() / 1e9
                with self.path.open("a", encoding="utf-8") as f:
                    f.write("".join(restamp(line, now) + "\n" for line in lines))
                self.lines_written += len(lines)
            return len(lines)

    def start(self) -> None:
        """Create the file (empty) and start writing in a daemon thread."""
        self.path.touch()
        self._thread = threading.Thread(target=self._run, name="kvtop-demo-log", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._poll_s):
            try:
                self.tick()
            except OSError:
                return  # the file's folder is gone (kvtop exited): nothing left to write for

    def stop(self) -> None:
        """Stop the thread (the last due lines are written)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        try:
            self.tick()
        except OSError:
            pass


def script_lines(scenario: Scenario) -> list[str]:
    """A whole pass's lines in order, as :class:`LogWriter` writes them (for ``inspect-log`` and tests)."""
    script = build_script(scenario)
    state: dict[str, tuple[int | None, int, int]] = {}
    out: list[str] = []
    for i, step in enumerate(scenario.steps):
        lines, state = transition_lines(scenario, i, state)
        out += lines
        end = scenario.steps[i + 1].at_s if i + 1 < len(scenario.steps) else scenario.period_s
        out += script.lines_between(i, step.at_s, end)
    return out
