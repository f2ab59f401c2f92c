"""The facts ``model.changes`` compares, read out of one server's state and the log events of
one apply step: the server's version, process and service environment (``AppState.procs``), the
log's ``server config`` and ``Listening on`` lines, and each loaded model's flash attention, KV
cache type, placement and runner argv (``ModelView``). Pure: times come from the samples and lines.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, tzinfo

from kvtop.logparse.events import LogEvent, ServerConfig, ServerListening
from kvtop.model.changes import Change, Fact, Observation, observe
from kvtop.model.ladder import RunnerIndex
from kvtop.model.views import AppState, ModelView
from kvtop.redact import scrub_text

__all__ = ["LogChangeScan", "log_observations", "observations", "state_observations"]

_FA = {"enabled": "on", "disabled": "off"}
_UNSETTLED = ("default", "estimated")
"""Sources of a figure not read from the load itself: a model's flash attention or KV type is
compared only once a rung that saw the load says it (else the first polls would 'change' it)."""


def _unix(when: datetime | None, tz: tzinfo, fallback: float) -> float:
    if when is None:
        return fallback
    if when.tzinfo is None:
        when = when.replace(tzinfo=tz)
    return when.timestamp()


def log_observations(events: Iterable[LogEvent], tz: tzinfo, now: float) -> list[Observation]:
    """One observation per ``server config`` line (its map, complete or not, and a ``start`` fact:
    the line's time, a restart) and per ``Listening on … (version X)`` line, in log order. A line
    without a time counts at ``now``. Values pass through ``redact.scrub_text`` (a proxy URL's
    userinfo)."""
    out: list[Observation] = []
    for e in events:
        if isinstance(e, ServerConfig):
            at = _unix(e.time, tz, now)
            facts = {f"config:{k}": Fact(scrub_text(v) or None, at, "reported") for k, v in e.env.items()}
            facts["start"] = Fact(datetime.fromtimestamp(at, tz).isoformat(timespec="seconds"), at, "reported")
            out.append(Observation(facts, frozenset({"config:"}) if e.complete else frozenset(), at))
        elif isinstance(e, ServerListening) and e.version:
            at = _unix(e.time, tz, now)
            out.append(Observation({"version": Fact(e.version, at, "reported")}, at=at))
    return out


def _placement(m: ModelView) -> str | None:
    size, vram = m.size_bytes, m.size_vram_bytes
    if not size or vram is None:
        return None
    return "gpu" if vram >= size else "cpu" if vram == 0 else "spill"


def _model_facts(m: ModelView, at: float) -> dict[str, Fact]:
    facts: dict[str, Fact] = {}
    name = m.name
    fa = m.flash_attention
    if fa.value is not None and fa.source not in _UNSETTLED and fa.value != "auto":  # auto: not resolved yet
        facts[f"fa:{name}"] = Fact(_FA.get(fa.value, fa.value), at, fa.source or "reported")
    kv = m.kv_type
    if kv.value is not None and kv.source not in _UNSETTLED:
        facts[f"kv:{name}"] = Fact(kv.value, at, kv.source or "reported")
    placement = _placement(m)
    if placement is not None:
        facts[f"placement:{name}"] = Fact(placement, at, "reported")
    proc = m.local.process
    if proc is not None and proc.flags:
        facts[f"runner:{name}"] = Fact(proc.flags, at, "requested")
    return facts


def state_observations(state: AppState) -> list[Observation]:
    """What the state says now: the version (``/api/version``, while reachable), each loaded
    model's load facts (``/api/ps`` time), the server process and its environment (the process
    sample's time; the environment as a complete read when it was readable)."""
    out: list[Observation] = []
    snap = state.ollama
    if snap is not None and snap.reachable:
        at = snap.taken_at
        facts: dict[str, Fact] = {}
        if snap.version:
            facts["version"] = Fact(snap.version, at, "reported")
        for m in state.models:
            facts.update(_model_facts(m, at))
        if facts:
            out.append(Observation(facts, at=at))
    procs = state.procs
    if procs is not None and procs.ok and procs.servers:
        server = RunnerIndex(procs, None, state.host_url).server
        if server is None and len(procs.servers) == 1:
            server = procs.servers[0]
        if server is not None:
            at = procs.taken_at
            facts = {"pid": Fact(str(server.pid), at, "service")}
            whole: frozenset[str] = frozenset()
            env = server.env
            if env is not None and env.readable:
                whole = frozenset({"env:"})
                facts.update({f"env:{k}": Fact(v or None, at, "service") for k, v in env.values.items()})
            out.append(Observation(facts, whole, at))
    return out


def observations(state: AppState, events: Sequence[LogEvent]) -> list[Observation]:
    """The log's observations (in log order), then the state's (:func:`state_observations`)."""
    now = max((t.taken_at for t in (state.ollama, state.procs) if t is not None), default=0.0)
    return [*log_observations(events, state.naive_tz, now), *state_observations(state)]


class LogChangeScan:
    """The restarts, upgrades and ``server config`` changes of a log read from its start
    (``kvtop inspect-log``): :meth:`feed` each event in log order, then read :attr:`changes`.
    Each ``server config`` line after the first is a restart; a variable Ollama prints empty
    counts as unset, as Ollama reads it (docs/ollama-internals.md §3.6).

    Args:
        tz: The zone of log stamps without one.
    """

    def __init__(self, tz: tzinfo) -> None:
        self.tz = tz
        self.facts: dict[str, Fact] = {}
        self.changes: list[Change] = []
        self.starts = 0
        """``server config`` lines seen."""

    def feed(self, event: LogEvent) -> None:
        """Take one event (only ``ServerConfig`` and ``ServerListening`` matter)."""
        if not isinstance(event, (ServerConfig, ServerListening)):
            return
        if isinstance(event, ServerConfig):
            self.starts += 1
        last = max((f.at for f in self.facts.values()), default=0.0)  # a line without a stamp: as the one before
        for obs in log_observations((event,), self.tz, last):
            self.facts, found = observe(self.facts, obs)
            self.changes.extend(found)
