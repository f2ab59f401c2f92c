"""The engine's change timeline: each apply step compares a server's facts (``model.change_facts``)
with its fingerprint so far (``model.changes.observe``); what changed goes into the state
(``AppState.changes``: every face renders it) and, only then, into the server's timeline file
(``sources.timeline_store``), which the next kvtop run starts from. One fingerprint per interval
and server; the file is written only on a change. No Textual, no Rich.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

from kvtop.logparse.events import LogEvent
from kvtop.model.change_facts import observations
from kvtop.model.changes import Change, Fact, observe
from kvtop.model.views import AppState
from kvtop.sources.timeline_store import MAX_CHANGES, TimelineStore, timeline_folder

__all__ = ["RECENT_CHANGES", "ChangeKeeper"]

RECENT_CHANGES = 50
"""Changes a state carries (the newest; the timeline file keeps more: ``kvtop changes``)."""


class ChangeKeeper:
    """Each server's fingerprint and changes, read from and written to the state folder.

    Args:
        state_folder: kvtop's state folder (``config.files.state_dir``); None keeps the timeline
            in memory only (the demo, a replay, tests that ask for it).
        warn: Called once with each sentence about the timeline file (unreadable, not writable).
    """

    def __init__(self, state_folder: Path | None, warn: Callable[[str, str], None] | None = None) -> None:
        self.folder = timeline_folder(state_folder) if state_folder is not None else None
        self.warn = warn
        self.facts: dict[str, dict[str, Fact]] = {}
        self.changes: dict[str, tuple[Change, ...]] = {}
        self._stores: dict[str, TimelineStore] = {}
        self._said: set[str] = set()
        self._saved: dict[str, set[str]] = {}
        """The fingerprint keys the file holds, by host."""

    def _say(self, host: str, text: str) -> None:
        if text not in self._said and self.warn is not None:
            self._said.add(text)
            self.warn(host, text)

    def _load(self, host: str) -> None:
        if host in self.facts:
            return
        self.facts[host], self.changes[host] = {}, ()
        if self.folder is None:
            return
        store = self._stores[host] = TimelineStore(self.folder, host)
        found = store.read()
        if found.warning:
            self._say(host, found.warning)
        self.facts[host], self.changes[host] = dict(found.facts), found.changes
        self._saved[host] = set(found.facts)

    def timeline(self, host: str) -> tuple[Change, ...]:
        """Every change kept for ``host`` (this run's and the file's), oldest first."""
        self._load(host)
        return self.changes[host]

    def observe(self, host: str, state: AppState, events: Sequence[LogEvent] = ()) -> AppState:
        """``state`` with its recent changes after comparing what it (and the step's log
        ``events``) says with ``host``'s fingerprint; the timeline file rewritten when something
        changed. Never raises: a bug here is said once (``warn``) and the state goes on unchanged."""
        try:
            return self._observe(host, state, events)
        except Exception as exc:  # noqa: BLE001 - the timeline must never stop the apply step
            self._say(host, f"change timeline: internal error: {type(exc).__name__}: {exc}")
            return state

    def _observe(self, host: str, state: AppState, events: Sequence[LogEvent]) -> AppState:
        self._load(host)
        facts = self.facts[host]
        found: list[Change] = []
        for obs in observations(state, events):
            facts, changed = observe(facts, obs)
            found.extend(changed)
        self.facts[host] = facts
        new_keys = facts.keys() - self._saved.get(host, set())
        if found or new_keys:  # a key seen for the first time is written too: the next run compares with it
            self.changes[host] = (*self.changes[host], *sorted(found, key=lambda c: c.at))[-MAX_CHANGES:]
            store = self._stores.get(host)
            if store is not None:
                error = store.write(self.changes[host], facts)
                if error is not None:
                    self._say(host, error)
            self._saved[host] = set(facts)
        recent = self.changes[host][-RECENT_CHANGES:]
        return state if state.changes == recent else dataclasses.replace(state, changes=recent)
