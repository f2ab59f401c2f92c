"""Fake sources for UI tests: snapshots built from the bundled scenario through the real parsers."""

from __future__ import annotations

import asyncio
from datetime import timezone
from types import MappingProxyType

from kvtop.demo.scenario import Scenario
from kvtop.demo.scenario_file import load_scenario
from kvtop.demo.api_bodies import ps_body, show_body, tags_body
from kvtop.model.snapshots import OllamaSnapshot
from kvtop.sources.ollama_decode import parse_ps, parse_show, parse_tags
from tests.standin import BUNDLED

TAKEN_AT = 1_795_000_000.0
"""A fixed poll time (2026-11-18T...Z) so UNTIL texts and snapshots are stable."""

HOST = "http://127.0.0.1:11434"


def scenario() -> Scenario:
    """The bundled demo scenario."""
    return load_scenario(BUNDLED)


def step_index(label_part: str) -> int:
    """Index of the first step whose label contains ``label_part``."""
    for i, step in enumerate(scenario().steps):
        if label_part in step.label:
            return i
    raise KeyError(label_part)


def snapshot_at(step: int, *, taken_at: float = TAKEN_AT, latency_s: float = 0.004) -> OllamaSnapshot:
    """What OllamaClient would produce at scenario ``step`` (the step began at ``taken_at``)."""
    sc = scenario()
    body = ps_body(sc, sc.steps[step], int(taken_at * 1e9), tz=timezone.utc)
    models = parse_ps(body)
    shows = {}
    for m in models:
        cat = sc.models[m.name] if m.name in sc.models else next(c for c in sc.models.values() if c.digest == m.digest)
        shows[m.digest] = parse_show(show_body(cat, True), digest=m.digest, name=m.name)
    tags = {d: t for d, t in parse_tags(tags_body(sc)).items() if d in shows}
    return OllamaSnapshot(
        host_url=HOST,
        taken_at=taken_at,
        reachable=True,
        version=sc.version,
        latency_s=latency_s,
        models=models,
        shows=MappingProxyType(shows),
        tags=MappingProxyType(tags),
    )


def down_snapshot(taken_at: float, error: str = "connection refused (http://127.0.0.1:11434)") -> OllamaSnapshot:
    """A failed poll."""
    return OllamaSnapshot(host_url=HOST, taken_at=taken_at, reachable=False, error=error, error_kind="refused")


class FakeSource:
    """Returns queued snapshots in order, then repeats the last one (or, with ``hold=True``,
    never answers again, so a screen settles with a known number of polls)."""

    def __init__(self, *snapshots: OllamaSnapshot, hold: bool = False) -> None:
        self.snapshots = list(snapshots)
        self.calls = 0
        self.hold = hold
        self._last_given = False

    async def sample(self) -> OllamaSnapshot:
        self.calls += 1
        if len(self.snapshots) > 1:
            return self.snapshots.pop(0)
        if self.hold and self._last_given:
            await asyncio.Event().wait()
        self._last_given = True
        return self.snapshots[0]

    async def aclose(self) -> None:
        return None
