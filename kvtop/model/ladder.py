"""The source ladder: every figure from the best source this machine can read.

Pure. For one loaded model, the rungs are, best first (docs/reference.md, "Where each figure comes from"):

1. **allocated** — the runner's log (``logparse.loads.Load``);
2. **runner** — the runner's own HTTP endpoints: llama-server's ``/props`` and ``/slots``
   (``model.slots.RunnerSlots``; Era C, and Era A's ``/slots``);
3. **reported** — ``/api/ps`` (``context_length``, Ollama ≥ 0.10);
4. **requested** — the runner's command line (``model.gpu.RunnerProcess``: ``-c``/``-np``,
   ``--cache-type-k/-v``, ``--kv-cache-type``, ``--flash-attn``; Eras A, B1 and C. B2 runners
   carry only ``--model`` and ``--port``), or the Modelfile's ``num_ctx``;
5. **service** — the ``ollama serve`` environment (``model.gpu.ServiceEnv``), as Ollama itself
   reads it (``envconfig``, docs/ollama-internals.md §3);
6. **default** — Ollama's default for the server's version.

``choose`` takes the first rung that has a value; the rungs below it that say something else are
kept as ``Figure.others`` so the detail view can show the difference (requested q8_0 but
allocated f16; ``OLLAMA_NUM_PARALLEL=2`` but the runner has 1 slot).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from kvtop.model.gpu_snapshots import ProcSnapshot, RunnerProcess, ServerProcess, ServiceEnv
from kvtop.model.known import Known
from kvtop.model.slot_snapshots import RunnerSlots, SlotsSnapshot

T = TypeVar("T")

PARALLEL_FORCED_ONE = frozenset(
    {
        "mllama",
        "qwen3vl",
        "qwen3vlmoe",
        "qwen35",
        "qwen35moe",
        "qwen3next",
        "lfm2",
        "lfm2moe",
        "nemotron_h",
        "nemotron_h_moe",
        "nemotron_h_omni",
    }
)
"""Architectures Ollama loads with one slot whatever ``OLLAMA_NUM_PARALLEL`` says
(``server/sched.go:load`` @HEAD, docs/ollama-internals.md §3.3); embedding models too."""

_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


@dataclass(frozen=True, slots=True)
class Figure(Generic[T]):
    """One figure's chosen value and the lower rungs that disagree with it.

    Attributes:
        chosen: The value of the best rung that has one (``Known(None)`` when none has).
        others: Lower rungs (not Ollama's default) whose value differs from ``chosen``'s, best first.
    """

    chosen: Known[T]
    others: tuple[Known[T], ...] = ()


def choose(
    rungs: Sequence[Known[T]], unknown_note: str = "", agrees: Callable[[T, T], bool] | None = None
) -> Figure[T]:
    """The first rung with a value, and the later ones that say otherwise; ``agrees(chosen, lower)``
    true keeps a lower rung out of ``others`` (flash attention's requested ``auto`` agrees with the
    value the runner resolved)."""
    have = [r for r in rungs if r.value is not None]
    if not have:
        notes = [r.note for r in rungs if r.note]
        return Figure(Known(None, None, unknown_note or (notes[0] if notes else "")))
    best = have[0]
    # a default that a readable rung overrides is not a disagreement: it is why the ladder exists
    return Figure(
        best,
        tuple(
            r
            for r in have[1:]
            if r.value != best.value
            and r.source != "default"
            and not (
                agrees is not None and best.value is not None and r.value is not None and agrees(best.value, r.value)
            )
        ),
    )


def go_bool(text: str | None) -> bool | None:
    """Ollama's ``envconfig.Bool``: unset/empty -> None; ``strconv.ParseBool``'s words; **any other
    non-empty value is true** (so ``OLLAMA_FLASH_ATTENTION=auto`` forces flash attention on, §3)."""
    if text is None or text == "":
        return None
    if text in _GO_FALSE:
        return False
    return True  # 1 t T TRUE true True, and any other word


def go_uint(text: str | None) -> int | None:
    """Ollama's ``envconfig.Uint``: a base-10 unsigned integer, None when unset or invalid (then
    Ollama logs "invalid environment variable, using default")."""
    if text is None or not text.isdigit():
        return None
    return int(text)


# --------------------------------------------------------------------------------------------
# This machine's view of one model's runner


@dataclass(frozen=True, slots=True)
class LocalRunner:
    """What this machine can read about the runner serving one model.

    Attributes:
        process: The runner process (its command line: the requested rung), None when not found.
        endpoints: Its ``/props`` + ``/slots`` answer (the runner rung), None when not asked.
        env: The environment of the ``ollama serve`` that started it, or of the server that serves
            this host (found by its listen port): the service rung; None when neither is known.
        note: How the runner was matched, or why none was.
    """

    process: RunnerProcess | None = None
    endpoints: RunnerSlots | None = None
    env: ServiceEnv | None = None
    note: str = ""


def listen_port(env: ServiceEnv) -> int | None:
    """The port an ``ollama serve`` listens on, from its ``OLLAMA_HOST`` as Ollama reads it
    (``envconfig.Host``: scheme optional, default port 11434; §3); None when it cannot tell."""
    text = env.get("OLLAMA_HOST")
    if text is None:
        return DEFAULT_PORT
    rest = text.split("://", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1]
    host, sep, port = rest.rpartition(":")
    if not sep or "]" in port:
        return DEFAULT_PORT
    return int(port) if port.isdigit() and 0 < int(port) < 65536 else DEFAULT_PORT


DEFAULT_PORT = 11434


def url_port(url: str | None) -> int | None:
    """The port of a base URL (``http://127.0.0.1:11434`` -> 11434; scheme defaults 80/443)."""
    if not url:
        return None
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        return parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None


class RunnerIndex:
    """The local runners and their ``/slots`` answers by weights blob, model name and PID, built
    once per derivation so that finding every model's runner costs O(models + runners).

    With ``host_url``, the ``ollama serve`` that serves it is found by its listen port (its
    readable ``OLLAMA_HOST``, default 11434): then only that server's runners are this host's,
    and its environment is the service rung for every model, runner found or not.
    """

    __slots__ = ("procs", "slots", "server", "_by_blob", "_by_name", "_ep_by_pid", "_ep_by_blob", "_servers")

    def __init__(self, procs: ProcSnapshot | None, slots: SlotsSnapshot | None, host_url: str | None = None) -> None:
        self.procs = procs if procs is not None and procs.ok else None
        self.slots = slots
        self._servers = {s.pid: s for s in self.procs.servers} if self.procs is not None else {}
        self.server = self._server_for(url_port(host_url)) if host_url else None
        self._by_blob: dict[str, list[RunnerProcess]] = {}
        self._by_name: dict[str, list[RunnerProcess]] = {}
        for r in self.procs.runners if self.procs is not None else ():
            if self.server is not None and r.ppid is not None and r.server_pid != self.server.pid:
                continue  # another server's runner (or someone's own llama-server)
            if r.blob is not None:
                self._by_blob.setdefault(r.blob, []).append(r)
            elif r.model_name is not None:
                self._by_name.setdefault(r.model_name, []).append(r)
        self._ep_by_pid = {e.pid: e for e in slots.runners} if slots is not None else {}
        self._ep_by_blob: dict[str, list[RunnerSlots]] = {}
        for e in slots.runners if slots is not None else ():
            if e.blob is not None:
                self._ep_by_blob.setdefault(e.blob, []).append(e)

    def _server_for(self, port: int | None) -> ServerProcess | None:
        """The one server whose readable environment says it listens on ``port``."""
        if port is None:
            return None
        found = [
            s for s in self._servers.values() if s.env is not None and s.env.readable and listen_port(s.env) == port
        ]
        return found[0] if len(found) == 1 else None

    @property
    def host_env(self) -> ServiceEnv | None:
        """The environment of the server that serves this host, when it was identified."""
        return self.server.env if self.server is not None else None

    def find(self, blob: str | None, name: str, cells: int | None) -> LocalRunner:
        """The runner of a model by its weights blob (an MLX runner by its model name).

        Args:
            blob: ``sha256-<hex>`` of the model's weights (``/api/show`` Modelfile ``FROM``).
            name: The model name (``/api/ps``), for MLX runners.
            cells: The per-slot context ``/api/ps`` reports, to tell apart two runners of the same
                weights (their ``-c`` ÷ ``-np``, both padded to 256 as llama.cpp does); None when not known.
        """
        if self.procs is None:
            return LocalRunner(
                endpoints=self._endpoints_by_blob(blob),
                note="no process sample for this server (not on this machine, or not read yet)",
            )
        found = list(self._by_blob.get(blob, ()) if blob is not None else ()) + list(self._by_name.get(name, ()))
        if len(found) > 1:  # Ollama's own runners first (a parent that is ollama serve)
            ours = [r for r in found if r.server_pid is not None]
            found = ours or found
        if len(found) > 1 and cells is not None:  # two runners of the same weights: the one at this context
            same = [
                r
                for r in found
                if r.ctx_size is not None
                and -(-(r.ctx_size // (r.parallel or 1)) // 256) * 256 == -(-cells // 256) * 256
            ]
            found = same if len(same) == 1 else found
        runner = found[0] if len(found) == 1 else None
        if runner is None:
            note = (
                "the model's weights blob is not known yet (/api/show)"
                if blob is None and not found
                else f"{len(found)} runners of these weights: cannot tell which is this one"
                if found
                else "no runner process of these weights on this machine"
            )
            endpoints = None if found else self._endpoints_by_blob(blob)
            return LocalRunner(None, endpoints, self.host_env, note)
        return LocalRunner(
            runner,
            self._ep_by_pid.get(runner.pid),
            self._server_env(runner),
            f"runner PID {runner.pid} ({runner.kind}, Ollama {runner.era})",
        )

    def _endpoints_by_blob(self, blob: str | None) -> RunnerSlots | None:
        """The one runner of the round whose weights blob is ``blob`` (the round names each runner's blob)."""
        found = self._ep_by_blob.get(blob, ()) if blob is not None else ()
        return found[0] if len(found) == 1 else None

    def _server_env(self, runner: RunnerProcess) -> ServiceEnv | None:
        """The environment of the runner's ``ollama serve`` parent; when its parent cannot be
        read, of this host's server, else of the one server running. A runner whose parent is
        known and is no ``ollama serve`` (someone else's llama-server on an Ollama blob) gets none."""
        if runner.server_pid is not None and runner.server_pid in self._servers:
            return self._servers[runner.server_pid].env
        if runner.ppid is not None:
            return None
        if self.server is not None:
            return self.server.env
        return next(iter(self._servers.values())).env if len(self._servers) == 1 else None


# --------------------------------------------------------------------------------------------
# Rungs per figure


def runner_context(ep: RunnerSlots | None) -> Known[int]:
    """Per-slot context from the runner's ``/props`` (``default_generation_settings.n_ctx``) or
    its ``/slots`` (``n_ctx`` of slot 0)."""
    if ep is None:
        return Known()
    if ep.props is not None and ep.props.n_ctx_per_slot:
        return Known(ep.props.n_ctx_per_slot, "runner", f"GET http://127.0.0.1:{ep.port}/props n_ctx (per slot)")
    if ep.slots and ep.slots[0].n_ctx:
        return Known(ep.slots[0].n_ctx, "runner", f"GET http://127.0.0.1:{ep.port}/slots n_ctx (per slot)")
    return Known()


def runner_parallel(ep: RunnerSlots | None) -> Known[int]:
    """Slots from the runner's ``/props`` ``total_slots``, else the number ``/slots`` lists."""
    if ep is None:
        return Known()
    if ep.props is not None and ep.props.total_slots:
        return Known(ep.props.total_slots, "runner", f"GET http://127.0.0.1:{ep.port}/props total_slots")
    if ep.error is None and ep.slots:
        return Known(len(ep.slots), "runner", f"{len(ep.slots)} slots listed by GET http://127.0.0.1:{ep.port}/slots")
    return Known()


def requested_context(r: RunnerProcess | None) -> Known[int]:
    """Per-slot context from the command line: ``-c``/``--ctx-size`` is num_ctx × slots (§3.3)."""
    if r is None or r.ctx_size is None:
        return Known()
    slots = r.parallel or 1
    flag = "-c" if r.kind == "llama-server" else "--ctx-size"
    if r.ctx_size % slots:
        return Known()
    how = f"{flag} {r.ctx_size}" + (f" / -np {slots}" if r.parallel else "")
    return Known(r.ctx_size // slots, "requested", f"runner PID {r.pid} command line: {how}")


def requested_parallel(r: RunnerProcess | None) -> Known[int]:
    """Slots from ``-np``/``--parallel`` on the command line."""
    if r is None or r.parallel is None or r.parallel < 1:
        return Known()
    flag = "-np" if r.kind == "llama-server" else "--parallel"
    return Known(r.parallel, "requested", f"runner PID {r.pid} command line: {flag} {r.parallel}")


def flash_agrees(chosen: str, lower: str) -> bool:
    """A lower rung's ``auto`` (``--flash-attn auto``, the log's ``flash_attn = auto``) asks the
    runner to decide, so it agrees with whatever the runner resolved (docs/ollama-internals.md §3.1)."""
    return lower == "auto" and chosen in ("enabled", "disabled")


def requested_kv_type(r: RunnerProcess | None) -> Known[str]:
    """Cache types from ``--cache-type-k/-v`` (C) or ``--kv-cache-type`` (B1); a runner whose
    command line carries its settings but no type runs f16 (§3.2)."""
    if r is None:
        return Known()
    if r.cache_type_k is not None:
        k, v = r.cache_type_k, r.cache_type_v or r.cache_type_k
        return Known(k if k == v else f"{k}/{v}", "requested", f"runner PID {r.pid} command line: {r.flags}")
    if r.ctx_size is not None and r.engine != "mlx":  # A, B1, C: the settings are on the command line
        return Known("f16", "requested", f"runner PID {r.pid} command line has no cache type: f16")
    return Known()


def requested_flash(r: RunnerProcess | None) -> Known[str]:
    """Flash attention from ``--flash-attn on|off|auto`` (C) or the bare ``--flash-attn`` (A/B1,
    absent = off). ``auto`` is what was asked; llama.cpp resolves it at load (§3.1, §4.6)."""
    if r is None:
        return Known()
    fa = r.flash_attn
    where = f"runner PID {r.pid} command line"
    if fa is None:
        if r.ctx_size is not None and r.kind != "llama-server" and r.engine != "mlx":
            return Known("disabled", "requested", f"{where} has no --flash-attn")
        return Known()
    value = {
        "on": "enabled",
        "true": "enabled",
        "1": "enabled",
        "enabled": "enabled",
        "off": "disabled",
        "false": "disabled",
        "0": "disabled",
        "disabled": "disabled",
    }.get(fa, "auto")
    return Known(value, "requested", f"{where}: --flash-attn{'' if fa == 'true' else ' ' + fa}")


def service_parallel(env: ServiceEnv | None, architecture: str | None, embedding: bool) -> Known[int]:
    """``OLLAMA_NUM_PARALLEL`` as Ollama applies it (§3.3): 0 means auto before v0.10; some
    architectures and embedding models always get 1."""
    if env is None or not env.readable:
        return Known()
    text = env.get("OLLAMA_NUM_PARALLEL")
    if text is None:
        return Known()
    n = go_uint(text)
    where = f"OLLAMA_NUM_PARALLEL={text} ({env.source})"
    if n is None:
        return Known(None, None, f"{where} is not a number: Ollama uses its default")
    if n == 0:
        return Known(None, None, f"{where}: auto (4, 2 or 1 by the free memory, before v0.10.0)")
    if n > 1 and (embedding or (architecture or "") in PARALLEL_FORCED_ONE):
        why = "embedding models" if embedding else f"the {architecture} architecture"
        return Known(1, "service", f"{where}, but Ollama gives {why} one slot")
    return Known(n, "service", where)


def service_kv_type(env: ServiceEnv | None) -> Known[str]:
    """``OLLAMA_KV_CACHE_TYPE`` (lower-cased as Ollama does; §3.2). Before v0.30 Ollama drops a
    quantized type when flash attention is off, so this is what was asked, not what ran."""
    if env is None or not env.readable:
        return Known()
    text = env.get("OLLAMA_KV_CACHE_TYPE")
    if text is None:
        return Known()
    return Known(text.lower(), "service", f"OLLAMA_KV_CACHE_TYPE={text} ({env.source})")


def service_flash(env: ServiceEnv | None) -> Known[str]:
    """``OLLAMA_FLASH_ATTENTION`` read as Ollama's ``envconfig.Bool`` (any other word is true)."""
    if env is None or not env.readable:
        return Known()
    text = env.get("OLLAMA_FLASH_ATTENTION")
    b = go_bool(text)
    if b is None:
        return Known()
    return Known("enabled" if b else "disabled", "service", f"OLLAMA_FLASH_ATTENTION={text} ({env.source})")


def service_context(env: ServiceEnv | None) -> Known[int]:
    """``OLLAMA_CONTEXT_LENGTH`` (v0.5.13+): the per-slot default when neither a request nor the
    Modelfile sets ``num_ctx``; 0 means the VRAM tier (v0.15.5+, §3.4)."""
    if env is None or not env.readable:
        return Known()
    text = env.get("OLLAMA_CONTEXT_LENGTH")
    n = go_uint(text)
    if not n:
        return Known()
    return Known(
        n, "service", f"OLLAMA_CONTEXT_LENGTH={text} ({env.source}); a request or the Modelfile may override it"
    )


def setting_in_force(env: ServiceEnv | None, key: str, value: str) -> bool:
    """True when the server's environment already sets ``key`` to ``value`` (as Ollama reads it):
    a fix must not ask for it again."""
    if env is None or not env.readable:
        return False
    have = env.get(key)
    if have is None:
        return False
    if key == "OLLAMA_FLASH_ATTENTION":
        return go_bool(have) == go_bool(value)
    if key == "OLLAMA_KV_CACHE_TYPE":
        return have.lower() == value.lower()
    return have == value


def difference_lines(label: str, fig: Figure[Any], fmt: str = "{}") -> list[str]:
    """``KV type q8_0 [requested], but f16 [allocated]``-style lines for the detail view."""
    best = fig.chosen
    return [
        f"{label}: {fmt.format(best.value)} [{best.source}], but {fmt.format(o.value)} [{o.source}]: {o.note}"
        for o in fig.others
    ]
